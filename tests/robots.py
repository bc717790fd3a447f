"""Real robots for the tests: example-robot-data's URDFs, loaded by anvil and by Pinocchio (the reference) alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
  """A robot of example-robot-data: its URDF under the package's model folder, a free flyer or not, locked joints."""

  subpath: str
  floating_base: bool = False
  locked: tuple[str, ...] = ()


CASES = {
  "panda": Case("panda_description/urdf/panda.urdf", locked=("panda_finger_joint1", "panda_finger_joint2")),
  "ur5": Case("ur_description/urdf/ur5_robot.urdf"),
  "talos_arm": Case("talos_data/robots/talos_left_arm.urdf"),
  "solo12": Case("solo_description/robots/solo12.urdf", floating_base=True),
  "talos": Case("talos_data/robots/talos_reduced.urdf", floating_base=True),
  # continuous joints (nq 2, nv 1 each)
  "double_pendulum": Case("double_pendulum_description/urdf/double_pendulum_continuous.urdf"),
  # a 7-dof arm with a gripper of prismatic fingers (the one more robot, not named in the issue)
  "z1": Case("z1_description/urdf/z1.urdf"),
}


def urdf_path(name: str) -> Path:
  """The URDF file of a robot of CASES."""
  from example_robot_data.robots_loader import getModelPath

  subpath = CASES[name].subpath
  return Path(getModelPath(subpath)) / subpath


def pinocchio_model(name: str) -> Any:
  """Pinocchio's model of a robot of CASES (its locked joints removed at the neutral configuration)."""
  import pinocchio as pin

  case, path = CASES[name], str(urdf_path(name))
  model = (
    pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer()) if case.floating_base else pin.buildModelFromUrdf(path)
  )
  if case.locked:
    ids = [model.getJointId(n) for n in case.locked]
    model = pin.buildReducedModel(model, ids, pin.neutral(model))
  return model


def anvil_robot(name: str) -> Any:
  """anvil's Robot of a robot of CASES."""
  from anvil.robots import Robot

  case = CASES[name]
  return Robot.from_urdf(urdf_path(name), floating_base=case.floating_base, locked_joints=list(case.locked))


def posture_mpc(robot: Any, prefix: str, dt: float) -> tuple[Any, np.ndarray]:
  """An exact-Hessian MPC driving `robot` from rest at its neutral posture to 0.3 rad from it (robot.ode through rk4,
  robot.bounds()), and that target posture."""
  from tinygrad import Tensor

  import anvil as av
  from anvil.mpc import MPCFunction, rk4

  nq, nx, nu = robot.nq, robot.nx, robot.nu
  target = robot.neutral() + 0.3
  aim = lambda q: ((q - Tensor(target)) ** 2).sum()
  running = lambda x, u: aim(x[:nq]) + 1e-2 * (x[nq:] ** 2).sum() + 1e-6 * (u * u).sum()
  stage = av.NumericalFunction(f"{prefix}_l", running, (av.Arg(nx), av.Arg(nu)))
  final = av.NumericalFunction(f"{prefix}_lN", lambda x: 10 * aim(x[:nq]) + (x[nq:] ** 2).sum(), (av.Arg(nx),))
  mpc = MPCFunction(f"{prefix}_reach", rk4(f"{prefix}_F", robot.ode, dt, nx=nx, nu=nu), stage, final, horizon=20,
                    **robot.bounds())  # fmt: skip
  return mpc, target


def check_reached_posture(robot: Any, loop: Any, target: np.ndarray) -> None:
  """Every solve of the closed loop converged, it ends within 0.01 of the target posture, its torques in bounds."""
  assert loop.failure is None and {str(s) for s in loop.statuses} == {"converged"}
  assert np.abs(loop.x[-1, : robot.nq] - target).max() < 0.01  # from 0.3
  lbu, ubu = robot.bounds()["u_bounds"]
  assert np.all(loop.u >= lbu - 1e-9) and np.all(loop.u <= ubu + 1e-9)


def close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-10) -> None:
  """actual == expected to `rtol` relative to the expected values' largest magnitude (at least 1)."""
  expected = np.asarray(expected)
  scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
  np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)


def _link(name: str, mass: float) -> str:
  inertia = '<inertia ixx="0.02" ixy="0.001" ixz="0" iyy="0.03" iyz="0" izz="0.01"/>'
  return f'<link name="{name}"><inertial><origin xyz="0.1 0 0.05"/><mass value="{mass}"/>{inertia}</inertial></link>'


def _joint(name: str, kind: str, parent: str, child: str, axis: str) -> str:
  return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
          f'<origin xyz="0 0.1 0.3" rpy="0.2 0 0.1"/><axis xyz="{axis}"/>'
          '<limit lower="-1" upper="1" effort="10" velocity="3"/></joint>')  # fmt: skip


#: A free-flying body carrying a revolute, a continuous and a prismatic joint.
SMALL_URDF = (f'<robot name="small">{_link("base", 3)}{_link("a", 1)}{_link("b", 0.5)}{_link("c", 0.2)}'
              f'{_joint("ja", "revolute", "base", "a", "0 0 1")}{_joint("jb", "continuous", "a", "b", "0.6 0.8 0")}'
              f'{_joint("jc", "prismatic", "b", "c", "1 0 0")}</robot>')  # fmt: skip


def _mixed_joint(k: int, kind: str, rpy: str, axis: str) -> str:
  return (f'<joint name="j{k}" type="{kind}"><parent link="l{k}"/><child link="l{k + 1}"/>'
          f'<origin xyz="0.05 -0.1 0.2" rpy="{rpy}"/><axis xyz="{axis}"/>'
          '<limit lower="-2" upper="2" effort="10" velocity="3"/></joint>')  # fmt: skip


#: A chain of every joint axis (along ±e_k, skew) under every kind of placement (none, quarter turns written to 8 or
#: 12 digits as URDFs write them, a general rotation): its local transforms cross whole and factored.
MIXED_JOINTS = (("revolute", "0 0 0", "0 0 1"), ("revolute", "-1.57079632679 0 0", "0 0 1"),
                ("revolute", "0 1.5707963 0", "0 -1 0"), ("continuous", "1.57079632679 0 1.57079632679", "1 0 0"),
                ("revolute", "0.2 0 0.1", "0.6 0.8 0"), ("revolute", "1.5707963 0 0", "0 0.6 0.8"),
                ("prismatic", "0 0 1.5707963", "0 0 1"), ("revolute", "3.14159265359 0 0", "0 1 0"))  # fmt: skip
MIXED_URDF = (f'<robot name="mixed">{"".join(_link(f"l{k}", 1 + k % 3) for k in range(len(MIXED_JOINTS) + 1))}'
              f'{"".join(_mixed_joint(k, *joint) for k, joint in enumerate(MIXED_JOINTS))}</robot>')  # fmt: skip
