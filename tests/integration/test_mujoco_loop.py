"""The exported robot controller closing the loop on MuJoCo in plain C++ (examples/cpp/mujoco): built with the CMake
files anvil emits and MuJoCo's C library, it runs the closed loop `simulate` runs with a `MuJoCoPlant`."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from anvil.mpc import MuJoCoPlant, simulate
from examples.cpp.mujoco import loop
from tests.robots import anvil_robot, posture_mpc, urdf_path

pytest.importorskip("mujoco")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_the_cpp_loop_on_mujoco_equals_simulate(tmp_path: Path) -> None:
  robot, dt, steps = anvil_robot("ur5"), 0.05, 12
  mpc, _ = posture_mpc(robot, "ur5_mj", dt)  # NOTE: test_mujoco_plant's controller (its build, cached)
  plant = MuJoCoPlant(urdf_path("ur5"), robot.joint_names, dt)
  x0 = np.r_[robot.neutral(), np.zeros(robot.nv)]
  python = simulate(mpc, plant, x0, steps)
  module = loop.write(mpc, plant, x0, steps, tmp_path)
  assert (tmp_path / f"{module}.cmake").exists()  # built through the module's own CMake file
  cpp = loop.run(loop.build(tmp_path, module), tmp_path)
  assert np.all(cpp.statuses == 0) and np.all(cpp.iterations >= 1)
  np.testing.assert_array_equal(cpp.iterations, python.iterations)
  # the same controller code and the same MuJoCo, compiled with other flags (CMake's Release, not the JIT's): the
  # loops agree to the solver's tolerance, not to the bit
  np.testing.assert_allclose(cpp.u, python.u, atol=1e-6 * np.abs(python.u).max())
  np.testing.assert_allclose(cpp.x, python.x, atol=1e-7)
  assert np.abs(python.x[-1] - python.x[0]).max() > 0.1  # the robot moved
