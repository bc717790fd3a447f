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


def close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-10) -> None:
  """actual == expected to `rtol` relative to the expected values' largest magnitude (at least 1)."""
  expected = np.asarray(expected)
  scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
  np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)
