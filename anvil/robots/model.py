"""The kinematic tree of a robot as plain numbers: joints in topological order, each with its placement in its parent's
frame, its axis, its body's inertia, its limits; and frames attached to joints.

This is what a URDF becomes once fixed joints are merged and locked joints frozen (anvil.robots.urdf), and all the
rigid-body algorithms (anvil.robots.algorithms) read. Conventions are Pinocchio's: a placement (R, p) maps a point of
the child frame into the parent's (x_parent = R x_child + p); spatial motion vectors are (linear, angular) and forces
(force, torque); a free-flyer's configuration is (position, quaternion x y z w) and its velocity (linear, angular) in
its own frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

Vec = NDArray[np.float64]


@dataclass(frozen=True)
class Placement:
  """A rigid transform: `rotation` (3, 3) and `translation` (3,) of a child frame in its parent's."""

  rotation: Vec = field(default_factory=lambda: np.eye(3))
  translation: Vec = field(default_factory=lambda: np.zeros(3))

  @staticmethod
  def from_matrix(m: Vec) -> Placement:
    """The placement of a 4x4 homogeneous matrix."""
    return Placement(np.array(m[:3, :3], dtype=np.float64), np.array(m[:3, 3], dtype=np.float64))

  def __mul__(self, other: Placement) -> Placement:
    """The composition self * other (other's frame expressed in self's parent)."""
    return Placement(self.rotation @ other.rotation, self.rotation @ other.translation + self.translation)

  def inverse(self) -> Placement:
    """The inverse transform."""
    return Placement(self.rotation.T, -self.rotation.T @ self.translation)

  @property
  def is_identity(self) -> bool:
    """Whether this is the identity transform."""
    return bool(np.array_equal(self.rotation, np.eye(3)) and not self.translation.any())


@dataclass(frozen=True)
class Inertia:
  """The inertia of a rigid body: `mass`, centre of mass `com` (3,) and `rotational` (3, 3) inertia about the centre
  of mass, all in the body's frame."""

  mass: float = 0.0
  com: Vec = field(default_factory=lambda: np.zeros(3))
  rotational: Vec = field(default_factory=lambda: np.zeros((3, 3)))

  def placed(self, placement: Placement) -> Inertia:
    """This inertia, given in a child frame, expressed in the frame `placement` maps it to."""
    r = placement.rotation
    return Inertia(self.mass, r @ self.com + placement.translation, r @ self.rotational @ r.T)

  def __add__(self, other: Inertia) -> Inertia:
    """The inertia of two bodies welded together (both in the same frame)."""
    mass = self.mass + other.mass
    if mass == 0:
      return Inertia()
    com = (self.mass * self.com + other.mass * other.com) / mass
    return Inertia(mass, com, self._about(com) + other._about(com))

  def _about(self, point: Vec) -> Vec:
    """The rotational inertia about `point` (parallel axis theorem)."""
    d = self.com - point
    return self.rotational + self.mass * (d @ d * np.eye(3) - np.outer(d, d))

  @property
  def is_zero(self) -> bool:
    """Whether the body has no mass and no rotational inertia."""
    return self.mass == 0 and not self.rotational.any()


class JointType(StrEnum):
  """The joints the rigid-body algorithms handle (URDF's fixed joints are merged away, its floating joints are
  refused: a free flyer is asked for with `floating_base=True`)."""

  REVOLUTE = "revolute"
  #: an unbounded revolute joint, configured by (cos θ, sin θ) as Pinocchio does (nq 2, nv 1)
  CONTINUOUS = "continuous"
  PRISMATIC = "prismatic"
  #: a free 6-dof root: q = (x, y, z, qx, qy, qz, qw), v = (linear, angular) in the joint's frame
  FREE_FLYER = "free_flyer"

  @property
  def nq(self) -> int:
    """The configuration's size."""
    return {JointType.CONTINUOUS: 2, JointType.FREE_FLYER: 7}.get(self, 1)

  @property
  def nv(self) -> int:
    """The velocity's size."""
    return 6 if self is JointType.FREE_FLYER else 1


@dataclass(frozen=True)
class Joint:
  """One joint of the tree and the body it carries.

  Attributes:
    name: the URDF joint's name (the free flyer's is "root_joint").
    type: its JointType.
    parent: the index of the parent joint, -1 for the world.
    placement: the joint's frame in its parent joint's frame at q = 0.
    axis: the unit axis of a revolute, continuous or prismatic joint in its own frame (zeros for a free flyer).
    inertia: the inertia of the body the joint moves (with every body welded to it by fixed joints), in its frame.
    idx_q, idx_v: where its coordinates start in q and v.
    lower, upper: position limits of each coordinate (±inf where none; a continuous joint's cos/sin within [-1, 1]).
    velocity, effort: velocity and effort limits of each velocity coordinate (inf where none).
    damping, friction: URDF `<dynamics>`: viscous damping and Coulomb friction of each velocity coordinate.
    link: the URDF link the joint moves.
  """

  name: str
  type: JointType
  parent: int
  placement: Placement
  axis: Vec
  inertia: Inertia
  idx_q: int
  idx_v: int
  lower: Vec
  upper: Vec
  velocity: Vec
  effort: Vec
  damping: Vec
  friction: Vec
  link: str

  @property
  def nq(self) -> int:
    """The configuration's size."""
    return self.type.nq

  @property
  def nv(self) -> int:
    """The velocity's size."""
    return self.type.nv


class FrameType(StrEnum):
  """What a frame marks: a joint, a fixed (merged) joint, or a body (URDF link)."""

  JOINT = "joint"
  FIXED_JOINT = "fixed_joint"
  BODY = "body"


@dataclass(frozen=True)
class Frame:
  """A named frame rigidly attached to a joint (-1: the world): its `placement` in that joint's frame."""

  name: str
  type: FrameType
  joint: int
  placement: Placement
