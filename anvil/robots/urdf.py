"""A URDF as a kinematic tree (anvil.robots.model): parsed by yourdfpy, meshes never loaded.

The tree is walked from the root link depth first, each link's child joints in the order of their names (as Pinocchio's
parser, through urdfdom, does: q and v are ordered alike). A fixed joint, or a locked one, welds its child link to the
body above it: the child's inertia joins that body's and its frames hang from the same joint. The root link is welded
to the world unless a free flyer is asked for.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from anvil.robots.model import Frame, FrameType, Inertia, Joint, JointType, Placement, Vec

#: URDF joint types and what they become; "floating" and "planar" are refused (ask for `floating_base=True`).
_TYPES = {"revolute": JointType.REVOLUTE, "continuous": JointType.CONTINUOUS, "prismatic": JointType.PRISMATIC}
#: The free flyer's name, as Pinocchio names it.
ROOT_JOINT = "root_joint"

UrdfSource = str | Path
LockedJoints = Sequence[str] | Mapping[str, float]


class URDFError(ValueError):
  """A URDF anvil cannot turn into a rigid-body model: the message names the element and what to do."""


@dataclass(frozen=True)
class Tree:
  """A parsed robot: its name, joints in topological order, and frames."""

  name: str
  joints: tuple[Joint, ...]
  frames: tuple[Frame, ...]


def load_urdf(
  source: UrdfSource, *, floating_base: bool = False, package_dirs: Sequence[str | Path] | None = None,
  locked_joints: LockedJoints | None = None,
) -> Tree:  # fmt: skip
  """The kinematic tree of the URDF at a path or in an XML string (see `Robot.from_urdf`)."""
  for d in package_dirs or ():
    if not Path(d).is_dir():
      raise URDFError(f"package_dirs: {str(d)!r} is not a directory")
  urdf = _parse(source)
  locked = _locked(locked_joints, {j.name: j for j in urdf.joints})
  return _Builder(urdf, locked).build(floating_base)


def _parse(source: UrdfSource) -> Any:
  import yourdfpy  # NOTE: imported here: parsing is the only use, and it brings lxml and trimesh

  text = str(source)
  if isinstance(source, str) and text.lstrip().startswith("<"):
    handle: Any = io.StringIO(text)
  else:
    path = Path(source)
    if not path.is_file():
      raise URDFError(f"path_or_xml: {text!r} is neither a URDF file nor URDF XML text")
    handle = str(path)
  options = dict(build_scene_graph=False, load_meshes=False, build_collision_scene_graph=False,
                 load_collision_meshes=False)  # fmt: skip
  try:
    return yourdfpy.URDF.load(handle, **options).robot
  except Exception as e:  # yourdfpy raises lxml's and its own errors
    raise URDFError(f"path_or_xml: not a valid URDF ({type(e).__name__}: {e})") from e


def _locked(locked: LockedJoints | None, joints: Mapping[str, Any]) -> dict[str, float]:
  values = dict(locked) if isinstance(locked, Mapping) else dict.fromkeys(locked or (), 0.0)
  for name, value in values.items():
    if name not in joints:
      raise URDFError(f"locked_joints: no joint named {name!r} (joints: {sorted(joints)})")
    if joints[name].type not in _TYPES:
      raise URDFError(f"locked_joints: joint {name!r} is {joints[name].type}; only movable joints can be locked")
    if not math.isfinite(float(value)):
      raise URDFError(f"locked_joints: joint {name!r} locked at {value}; expected a finite value")
  return {k: float(v) for k, v in values.items()}


@dataclass
class _Builder:
  urdf: Any
  locked: dict[str, float]
  joints: list[Joint] = field(default_factory=list)
  frames: list[Frame] = field(default_factory=list)
  inertias: dict[int, Inertia] = field(default_factory=dict)
  nq: int = 0
  nv: int = 0

  def build(self, floating_base: bool) -> Tree:
    links = {link.name: link for link in self.urdf.links}
    children: dict[str, list[Any]] = {name: [] for name in links}
    for j in self.urdf.joints:
      for end in (j.parent, j.child):
        if end not in links:
          raise URDFError(f"joint {j.name!r}: link {end!r} is not defined")
      children[j.parent].append(j)
    for siblings in children.values():
      siblings.sort(key=lambda j: j.name)  # NOTE: urdfdom (Pinocchio's parser) keeps joints in a map by name
    roots = sorted(set(links) - {j.child for j in self.urdf.joints})
    if len(roots) != 1:
      raise URDFError(f"the URDF must have exactly one root link (a link that is no joint's child), found {roots}")
    self.links, self.children = links, children
    self.frames.append(Frame("universe", FrameType.FIXED_JOINT, -1, Placement()))
    root = roots[0]
    if floating_base:
      bounds = np.concatenate([np.full(3, -np.inf), -np.ones(4)]), np.concatenate([np.full(3, np.inf), np.ones(4)])
      unlimited = np.full(6, np.inf)
      self._add_joint(ROOT_JOINT, JointType.FREE_FLYER, -1, Placement(), np.zeros(3), root, bounds,
                      (unlimited, unlimited), (np.zeros(6), np.zeros(6)))  # fmt: skip
      self.frames.append(Frame(ROOT_JOINT, FrameType.JOINT, 0, Placement()))
      self._attach(root, 0, Placement())
    else:
      self._attach(root, -1, Placement())
    joints = tuple(replace(j, inertia=self.inertias.get(i, Inertia())) for i, j in enumerate(self.joints))
    return Tree(self.urdf.name, joints, tuple(self.frames))

  def _attach(self, link_name: str, joint: int, placement: Placement) -> None:
    """Weld `link_name` to `joint` at `placement`, then follow its child joints."""
    link = self.links[link_name]
    self.frames.append(Frame(link_name, FrameType.BODY, joint, placement))
    if joint >= 0:
      self.inertias[joint] = self.inertias.get(joint, Inertia()) + _inertia(link).placed(placement)
    for j in self.children[link_name]:
      origin = placement * Placement.from_matrix(j.origin if j.origin is not None else np.eye(4))
      if j.type == "fixed" or j.name in self.locked:
        fixed = origin * _locked_motion(j, self.locked[j.name]) if j.name in self.locked else origin
        self.frames.append(Frame(j.name, FrameType.FIXED_JOINT, joint, fixed))
        self._attach(j.child, joint, fixed)
        continue
      kind = self._movable_type(j)
      axis = _axis(j)
      lower, upper, velocity, effort = _limits(j, kind)
      damping, friction = _dynamics(j)
      index = self._add_joint(j.name, kind, joint, origin, axis, j.child, (lower, upper), (velocity, effort),
                              (damping, friction))  # fmt: skip
      self.frames.append(Frame(j.name, FrameType.JOINT, index, Placement()))
      self._attach(j.child, index, Placement())

  def _movable_type(self, j: Any) -> JointType:
    if j.type not in _TYPES:
      what = "ask for a free-flyer root with floating_base=True" if j.type == "floating" else "lock it or remove it"
      raise URDFError(f"joint {j.name!r}: type {j.type!r} is not supported ({what})")
    if j.mimic is not None:
      raise URDFError(f"joint {j.name!r} mimics {j.mimic.joint!r}: mimic joints are not supported; lock it (and the "
                      "joint it mimics, if that one moves) with locked_joints=")  # fmt: skip
    return _TYPES[j.type]

  def _add_joint(
    self, name: str, kind: JointType, parent: int, placement: Placement, axis: Vec, link: str,
    position: tuple[Vec, Vec], rates: tuple[Vec, Vec], dynamics: tuple[Vec, Vec],
  ) -> int:  # fmt: skip
    self.joints.append(Joint(name, kind, parent, placement, axis, Inertia(), self.nq, self.nv, *position, *rates,
                             *dynamics, link))  # fmt: skip
    self.nq, self.nv = self.nq + kind.nq, self.nv + kind.nv
    return len(self.joints) - 1


def _inertia(link: Any) -> Inertia:
  """A link's inertia in its own frame, checked."""
  inertial = link.inertial
  if inertial is None:
    return Inertia()
  mass = float(inertial.mass if inertial.mass is not None else 0.0)
  rotational = np.array(inertial.inertia if inertial.inertia is not None else np.zeros((3, 3)), dtype=np.float64)
  origin = Placement.from_matrix(inertial.origin if inertial.origin is not None else np.eye(4))
  if not (math.isfinite(mass) and mass >= 0):
    raise URDFError(f"link {link.name!r}: mass {mass} must be finite and non-negative")
  scale = max(float(np.abs(rotational).max()), 1e-300)
  if not np.isfinite(rotational).all() or np.linalg.eigvalsh(rotational).min() < -1e-10 * scale:
    raise URDFError(f"link {link.name!r}: its inertia matrix {rotational.tolist()} is not positive semi-definite; fix "
                    "ixx..izz in its <inertial>")  # fmt: skip
  return Inertia(mass, origin.translation, origin.rotation @ rotational @ origin.rotation.T)


def _axis(j: Any) -> Vec:
  axis = np.array(j.axis if j.axis is not None else (1.0, 0.0, 0.0), dtype=np.float64)
  norm = float(np.linalg.norm(axis))
  if not (math.isfinite(norm) and norm > 0):
    raise URDFError(f"joint {j.name!r}: axis {axis.tolist()} is not a non-zero vector")
  return axis / norm


def _limits(j: Any, kind: JointType) -> tuple[Vec, Vec, Vec, Vec]:
  """Position bounds of each coordinate, then velocity and effort limits (inf where the URDF gives none)."""
  limit = j.limit
  value = lambda name, default: float(default if getattr(limit, name, None) is None else getattr(limit, name))
  velocity, effort = np.array([value("velocity", np.inf)]), np.array([value("effort", np.inf)])
  if kind is JointType.CONTINUOUS:
    return -np.ones(2), np.ones(2), velocity, effort
  return np.array([value("lower", -np.inf)]), np.array([value("upper", np.inf)]), velocity, effort


def _dynamics(j: Any) -> tuple[Vec, Vec]:
  d = j.dynamics
  read = lambda v: 0.0 if v is None else float(v)
  return np.array([read(d.damping if d else None)]), np.array([read(d.friction if d else None)])


def _locked_motion(j: Any, value: float) -> Placement:
  """The transform a locked joint makes at `value` (its angle, or its translation)."""
  axis = _axis(j)
  if j.type == "prismatic":
    return Placement(np.eye(3), axis * value)
  k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
  return Placement(np.eye(3) + math.sin(value) * k + (1 - math.cos(value)) * k @ k, np.zeros(3))
