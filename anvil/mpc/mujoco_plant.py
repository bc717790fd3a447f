"""`MuJoCoPlant`: a MuJoCo model as the plant of `simulate` and `campaign` (pip `mujoco`, an optional extra).

The controller's state x = (q, v) names its joints (a robot's `joint_names`, in the order of its q); the plant maps
them to MuJoCo's qpos and qvel by name, applies the controller's torques u to those joints' degrees of freedom (held
over the sample) and steps MuJoCo at its own timestep until the sample time has passed. MuJoCo brings what the
controller's model may lack (joint damping, armature, limits, friction loss, contacts): the model mismatch a real
robot has. Joints of the MuJoCo model that the state does not name are removed from it (their bodies welded at the
joint's zero), as a robot's `locked_joints` are.

A free joint (a floating base) maps anvil.robots' conventions to MuJoCo's: q's position and quaternion (x, y, z, w) to
qpos's position and quaternion (w, x, y, z), v's linear velocity (in the base's frame) and angular velocity (in the
base's frame) to qvel's linear velocity in the world's frame and angular velocity in the base's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: MuJoCo's joint types a plant maps (hinge and slide: one qpos and qvel each; free: the floating base).
_JOINTS = ("hinge", "slide", "free")


class MuJoCoPlant:
  """x_next = plant(x, u): `dt` seconds of MuJoCo from the state x = (q, v) of the named joints under torques u.

  Args:
    model: a `mujoco.MjModel`, or a URDF or MJCF file (path or text: a URDF's visual and collision geometry is dropped,
      so no mesh is loaded).
    joints: the state's joints, in the order of q: hinge and slide joints, and first a free joint for a floating base.
    dt: the sample time (s): a whole number of the model's timesteps (`model.opt.timestep`, MuJoCo's own step).
    actuated: the joints u drives (default every hinge and slide joint of `joints`), in the order of u.
    floating_base: give a URDF's root body a free joint named joints[0] (as `Robot.from_urdf(floating_base=True)`).
    contact_spheres: {body name: radius}: spheres that touch the ground (a robot's feet), and a ground plane at z = 0
      (a URDF or MJCF model; the spheres take the friction `friction`).
    friction: the spheres' and the ground's sliding friction coefficient.
    nu: u's length when it holds more than the torques (a kinodynamic controller's contact forces after them: MuJoCo
      makes its own); default the number of actuated joints.

  Example:
    >>> plant = MuJoCoPlant("panda.urdf", robot.joint_names, 0.01)
    >>> cl = simulate(mpc, plant, x0, 300)
  """

  def __init__(
    self, model: Any, joints: Sequence[str], dt: float, actuated: Sequence[str] | None = None, *,
    floating_base: bool = False, contact_spheres: Mapping[str, float] | None = None, friction: float = 1.0,
    nu: int | None = None,
  ) -> None:  # fmt: skip
    import mujoco

    self.joints = tuple(joints)
    self.model = _model(model, self.joints, floating_base, dict(contact_spheres or {}), friction)
    self.data = mujoco.MjData(self.model)
    ids = [self._joint(name) for name in self.joints]
    kinds = [self._kind(i) for i in ids]
    if "free" in kinds[1:]:
      raise ValueError(f"MuJoCoPlant: a free joint must come first in joints (the floating base), got {self.joints}")
    self.free = kinds[0] == "free"
    scalar = ids[1:] if self.free else ids
    # NOTE: where the free joint's qpos and qvel start (unused without one)
    self.base = (int(self.model.jnt_qposadr[ids[0]]), int(self.model.jnt_dofadr[ids[0]])) if self.free else (0, 0)
    self.qpos = np.array([self.model.jnt_qposadr[i] for i in scalar], dtype=np.int64)
    self.qvel = np.array([self.model.jnt_dofadr[i] for i in scalar], dtype=np.int64)
    scalar_names = self.joints[1:] if self.free else self.joints
    self.actuated = tuple(scalar_names if actuated is None else actuated)
    if set(self.actuated) - set(scalar_names):
      raise ValueError(f"MuJoCoPlant: actuated joints {sorted(set(self.actuated) - set(scalar_names))} are not hinge "
                       "or slide joints of joints")  # fmt: skip
    self.torque = np.array([self.model.jnt_dofadr[self._joint(name)] for name in self.actuated], dtype=np.int64)
    self.nu = len(self.actuated) if nu is None else int(nu)
    if self.nu < len(self.actuated):
      raise ValueError(f"MuJoCoPlant: nu = {nu} is fewer than the {len(self.actuated)} actuated joints")
    steps = float(dt) / self.model.opt.timestep
    if not math.isfinite(steps) or steps < 1 or abs(steps - round(steps)) > 1e-9 * steps:
      raise ValueError(f"MuJoCoPlant: dt = {dt} must be a whole number of the model's timestep "
                       f"{self.model.opt.timestep} (set model.opt.timestep)")  # fmt: skip
    self.steps = round(steps)
    self.wrenches: dict[int, NDArray[np.float64]] = {}

  def apply(self, body: str, wrench: ArrayLike | None) -> None:
    """Hold a wrench (force, torque (6,), in the world's axes, at the body's centre of mass: MuJoCo's xfrc_applied)
    on `body` in every following sample (a push, a payload), until `apply(body, None)` removes it."""
    import mujoco

    i = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, body)
    if i < 0:
      raise ValueError(f"MuJoCoPlant.apply: the model has no body {body!r}")
    if wrench is None:
      self.wrenches.pop(i, None)
      return
    value = np.asarray(wrench, dtype=np.float64)
    if value.shape != (6,) or not np.isfinite(value).all():
      raise ValueError(f"MuJoCoPlant.apply: the wrench must be 6 finite numbers (force, torque), got {wrench!r}")
    self.wrenches[i] = value

  @property
  def nq(self) -> int:
    """q's size: 7 for a free joint, 1 per hinge or slide joint."""
    return self.qpos.size + (7 if self.free else 0)

  @property
  def nx(self) -> int:
    """The state's size: nq + nv."""
    return 2 * self.qpos.size + (13 if self.free else 0)

  def __call__(self, x: ArrayLike, u: ArrayLike) -> NDArray[np.float64]:
    """The state after dt under the torques u (held)."""
    import mujoco

    d = self._loaded(x, u)
    for _ in range(self.steps):
      mujoco.mj_step(self.model, d)
    return self.state()

  def acceleration(self, x: ArrayLike, u: ArrayLike) -> NDArray[np.float64]:
    """MuJoCo's accelerations at x under u (its forward dynamics, no step taken), in v's coordinates (a free joint's
    as the derivative of v: the base's linear velocity in its own frame)."""
    import mujoco

    d = self._loaded(x, u)
    mujoco.mj_forward(self.model, d)
    joints = d.qacc[self.qvel]
    if not self.free:
      return joints.copy()
    rotation, (_, dof) = self._rotation(), self.base
    omega, linear = d.qvel[dof + 3 : dof + 6], rotation.T @ d.qvel[dof : dof + 3]
    # NOTE: v_lin = Rᵀ ṗ, so its derivative is Rᵀ p̈ - ω cross v_lin (MuJoCo's qacc is p̈ and the body-frame ω̇)
    return np.concatenate([rotation.T @ d.qacc[dof : dof + 3] - np.cross(omega, linear), d.qacc[dof + 3 : dof + 6],
                           joints])  # fmt: skip

  def state(self) -> NDArray[np.float64]:
    """x = (q, v) of MuJoCo's current data, in the controller's conventions."""
    d = self.data
    q, v = d.qpos[self.qpos], d.qvel[self.qvel]
    if not self.free:
      return np.concatenate([q, v])
    (adr, dof), rotation = self.base, self._rotation()
    w, xyz = d.qpos[adr + 3], d.qpos[adr + 4 : adr + 7]
    base_q = np.concatenate([d.qpos[adr : adr + 3], xyz, [w]])
    base_v = np.concatenate([rotation.T @ d.qvel[dof : dof + 3], d.qvel[dof + 3 : dof + 6]])
    return np.concatenate([base_q, q, base_v, v])

  def _rotation(self) -> NDArray[np.float64]:
    """The base's rotation matrix in MuJoCo's data (its unit quaternion's)."""
    import mujoco

    adr, _ = self.base
    quat = self.data.qpos[adr + 3 : adr + 7]
    matrix = np.zeros(9)
    mujoco.mju_quat2Mat(matrix, quat / np.linalg.norm(quat))
    return matrix.reshape(3, 3)

  def _loaded(self, x: ArrayLike, u: ArrayLike) -> Any:
    """MuJoCo's data reset to the state x with the torques u applied (both checked)."""
    import mujoco

    x, u = np.asarray(x, dtype=np.float64), np.asarray(u, dtype=np.float64)
    if x.shape != (self.nx,) or u.shape != (self.nu,):
      raise ValueError(f"MuJoCoPlant: x must have shape ({self.nx},) and u ({self.nu},), got {x.shape}, {u.shape}")
    if not (np.isfinite(x).all() and np.isfinite(u).all()):
      raise ValueError("MuJoCoPlant: x and u must be finite")
    d = self.data
    mujoco.mj_resetData(self.model, d)
    nq, n = self.nq, self.qpos.size
    q, v = x[:nq], x[nq:]
    d.qpos[self.qpos], d.qvel[self.qvel] = q[nq - n :], v[v.size - n :]
    if self.free:
      (adr, dof), quat = self.base, q[3:7]
      if abs(np.linalg.norm(quat) - 1.0) > 1e-6:
        raise ValueError(f"MuJoCoPlant: the base's quaternion q[3:7] must be a unit quaternion, got {quat}")
      d.qpos[adr : adr + 3], d.qpos[adr + 3], d.qpos[adr + 4 : adr + 7] = q[:3], quat[3], quat[:3]
      d.qvel[dof : dof + 3], d.qvel[dof + 3 : dof + 6] = self._rotation() @ v[:3], v[3:6]
    d.qfrc_applied[self.torque] = u[: self.torque.size]
    for body, wrench in self.wrenches.items():
      d.xfrc_applied[body] = wrench
    return d

  def _kind(self, i: int) -> str:
    """Joint i's type, as MuJoCo names it without its prefix ("hinge", "slide", "free", ...)."""
    import mujoco

    return str(mujoco.mjtJoint(self.model.jnt_type[i]).name.removeprefix("mjJNT_").lower())

  def _joint(self, name: str) -> int:
    import mujoco

    i = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if i < 0:
      raise ValueError(f"MuJoCoPlant: the model has no joint {name!r}")
    kind = self._kind(i)
    if kind not in _JOINTS:
      raise ValueError(f"MuJoCoPlant: joint {name!r} is a {kind} joint; a plant maps hinge, slide and free joints")
    return i


def _model(model: Any, joints: tuple[str, ...], floating_base: bool, spheres: dict[str, float], friction: float) -> Any:
  """The MjModel of `model` (an MjModel, or a URDF/MJCF path or text) without the joints `joints` does not name, with
  a free joint joints[0] at a URDF's root (`floating_base`) and the contact spheres and their ground."""
  import mujoco

  if isinstance(model, mujoco.MjModel):
    if floating_base or spheres:
      raise ValueError("MuJoCoPlant: floating_base and contact_spheres edit a URDF or MJCF model, not an MjModel")
    return model
  text = Path(model).read_text() if "<" not in str(model) else str(model)
  urdf = "<robot" in text
  if urdf:  # NOTE: no meshes (MuJoCo would load every visual and collision mesh file)
    text = re.sub(r"<visual\b.*?</visual>|<collision\b.*?</collision>", "", text, flags=re.S)
  elif floating_base:
    raise ValueError("MuJoCoPlant: floating_base adds a free joint to a URDF; an MJCF model declares its own")
  spec = mujoco.MjSpec.from_string(text)
  if floating_base:
    spec.worldbody.first_body().add_freejoint(name=joints[0])
  removed = {j.name for j in spec.joints} - set(joints)
  for equality in [e for e in spec.equalities if {e.name1, e.name2} & removed]:  # NOTE: a URDF mimic joint's
    spec.delete(equality)
  for joint in [j for j in spec.joints if j.name in removed]:
    spec.delete(joint)
  for name, radius in spheres.items():
    body = spec.body(name)
    if body is None:
      raise ValueError(f"MuJoCoPlant: contact_spheres names {name!r}, which is no body of the model")
    body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[radius, 0, 0], friction=[friction, 0.005, 0.0001])
  if spheres:
    spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], friction=[friction, 0.005, 0.0001])
  return spec.compile()
