"""`MuJoCoPlant`: a MuJoCo model as the plant of `simulate` and `campaign` (pip `mujoco`, an optional extra).

The controller's state x = (q, v) names its joints (a robot's `joint_names`, in the order of its q); the plant maps
them to MuJoCo's qpos and qvel by name, applies the controller's torques u to those joints' degrees of freedom (held
over the sample) and steps MuJoCo at its own timestep until the sample time has passed. MuJoCo brings what the
controller's model may lack (joint damping, armature, limits, friction loss, contacts): the model mismatch a real
robot has. Joints of the MuJoCo model that the state does not name are removed from it (their bodies welded at the
joint's zero), as a robot's `locked_joints` are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: MuJoCo's joint types whose qpos and qvel are one number each (the only ones a plant maps: hinge and slide).
_SCALAR_JOINTS = ("hinge", "slide")


class MuJoCoPlant:
  """x_next = plant(x, u): `dt` seconds of MuJoCo from the state x = (q, v) of the named joints under torques u.

  Args:
    model: a `mujoco.MjModel`, or a URDF or MJCF file (path or text: a URDF's visual and collision geometry is dropped,
      so no mesh is loaded).
    joints: the state's joints, in the order of q (hinge or slide joints: fixed-base robots).
    dt: the sample time (s): a whole number of the model's timesteps (`model.opt.timestep`, MuJoCo's own step).
    actuated: the joints u drives (default all of `joints`), in the order of u.

  Example:
    >>> plant = MuJoCoPlant("panda.urdf", robot.joint_names, 0.01)
    >>> cl = simulate(mpc, plant, x0, 300)
  """

  def __init__(self, model: Any, joints: Sequence[str], dt: float, actuated: Sequence[str] | None = None) -> None:
    import mujoco

    self.model = _model(model, tuple(joints))
    self.data = mujoco.MjData(self.model)
    self.joints, self.actuated = tuple(joints), tuple(joints if actuated is None else actuated)
    ids = [self._joint(name) for name in self.joints]
    self.qpos = np.array([self.model.jnt_qposadr[i] for i in ids])
    self.qvel = np.array([self.model.jnt_dofadr[i] for i in ids])
    self.torque = np.array([self.model.jnt_dofadr[self._joint(name)] for name in self.actuated])
    steps = float(dt) / self.model.opt.timestep
    if not math.isfinite(steps) or steps < 1 or abs(steps - round(steps)) > 1e-9 * steps:
      raise ValueError(f"MuJoCoPlant: dt = {dt} must be a whole number of the model's timestep "
                       f"{self.model.opt.timestep} (set model.opt.timestep)")  # fmt: skip
    self.steps = round(steps)

  @property
  def nx(self) -> int:
    """The state's size: 2 per joint."""
    return 2 * len(self.joints)

  def __call__(self, x: ArrayLike, u: ArrayLike) -> NDArray[np.float64]:
    """The state after dt under the torques u (held)."""
    import mujoco

    d = self._loaded(x, u)
    for _ in range(self.steps):
      mujoco.mj_step(self.model, d)
    return np.concatenate([d.qpos[self.qpos], d.qvel[self.qvel]])

  def acceleration(self, x: ArrayLike, u: ArrayLike) -> NDArray[np.float64]:
    """MuJoCo's joint accelerations at x under u (its forward dynamics, no step taken)."""
    import mujoco

    d = self._loaded(x, u)
    mujoco.mj_forward(self.model, d)
    return d.qacc[self.qvel].copy()

  def _loaded(self, x: ArrayLike, u: ArrayLike) -> Any:
    """MuJoCo's data reset to the state x with the torques u applied (both checked)."""
    import mujoco

    x, u = np.asarray(x, dtype=np.float64), np.asarray(u, dtype=np.float64)
    n = len(self.joints)
    if x.shape != (2 * n,) or u.shape != (len(self.actuated),):
      raise ValueError(f"MuJoCoPlant: x must have shape ({2 * n},) and u ({len(self.actuated)},), got {x.shape}, "
                       f"{u.shape}")  # fmt: skip
    if not (np.isfinite(x).all() and np.isfinite(u).all()):
      raise ValueError("MuJoCoPlant: x and u must be finite")
    d = self.data
    mujoco.mj_resetData(self.model, d)
    d.qpos[self.qpos], d.qvel[self.qvel] = x[:n], x[n:]
    d.qfrc_applied[self.torque] = u
    return d

  def _joint(self, name: str) -> int:
    import mujoco

    i = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if i < 0:
      raise ValueError(f"MuJoCoPlant: the model has no joint {name!r}")
    kind = mujoco.mjtJoint(self.model.jnt_type[i]).name.removeprefix("mjJNT_").lower()
    if kind not in _SCALAR_JOINTS:
      raise ValueError(f"MuJoCoPlant: joint {name!r} is a {kind} joint; a plant maps hinge and slide joints (a "
                       "fixed-base robot)")  # fmt: skip
    return i


def _model(model: Any, joints: tuple[str, ...]) -> Any:
  """The MjModel of `model` (an MjModel, or a URDF/MJCF path or text) without the joints `joints` does not name."""
  import mujoco

  if isinstance(model, mujoco.MjModel):
    return model
  text = Path(model).read_text() if "<" not in str(model) else str(model)
  if "<robot" in text:  # NOTE: a URDF: no meshes (MuJoCo would load every visual and collision mesh file)
    text = re.sub(r"<visual\b.*?</visual>|<collision\b.*?</collision>", "", text, flags=re.S)
  spec = mujoco.MjSpec.from_string(text)
  removed = {j.name for j in spec.joints} - set(joints)
  for equality in [e for e in spec.equalities if {e.name1, e.name2} & removed]:  # NOTE: a URDF mimic joint's
    spec.delete(equality)
  for joint in [j for j in spec.joints if j.name in removed]:
    spec.delete(joint)
  return spec.compile()
