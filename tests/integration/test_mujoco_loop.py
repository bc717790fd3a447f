"""The exported robot controller closing the loop on MuJoCo in plain C++ (anvil.mpc.mujoco_loop): built with the CMake
files anvil emits and MuJoCo's C library, it runs the closed loop `simulate` runs with a `MuJoCoPlant`."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from anvil.mpc import MuJoCoPlant, mujoco_loop, simulate
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
  module = mujoco_loop.write(mpc, plant, x0, steps, tmp_path)
  assert (tmp_path / f"{module}.cmake").exists()  # built through the module's own CMake file
  cpp = mujoco_loop.run(mujoco_loop.build(tmp_path, module), tmp_path)
  assert np.all(cpp.statuses == 0) and np.all(cpp.iterations >= 1)
  np.testing.assert_array_equal(cpp.iterations, python.iterations)
  # the same controller code and the same MuJoCo, compiled with other flags (CMake's Release, not the JIT's): the
  # loops agree to the solver's tolerance, not to the bit
  np.testing.assert_allclose(cpp.u, python.u, atol=1e-6 * np.abs(python.u).max())
  np.testing.assert_allclose(cpp.x, python.x, atol=1e-7)
  assert np.abs(python.x[-1] - python.x[0]).max() > 0.1  # the robot moved


#: A floating base carrying one arm: the base has a foot (a contact sphere) and falls onto the ground.
HOPPER = (
  '<robot name="hopper"><link name="base"><inertial><origin xyz="0 0 0"/><mass value="2"/><inertia ixx="0.02" '
  'ixy="0" ixz="0" iyy="0.03" iyz="0" izz="0.02"/></inertial></link><link name="arm"><inertial><origin '
  'xyz="0.1 0 0"/><mass value="0.5"/><inertia ixx="0.002" ixy="0" ixz="0" iyy="0.003" iyz="0" izz="0.003"/>'
  '</inertial></link><joint name="shoulder" type="revolute"><parent link="base"/><child link="arm"/><origin '
  'xyz="0 0 0.1" rpy="0.1 0 0"/><axis xyz="0 1 0"/><limit lower="-2" upper="2" effort="5" velocity="10"/></joint>'
  "</robot>"
)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_a_floating_base_cpp_loop_equals_simulate(tmp_path: Path) -> None:
  """A free-flying base in contact with the ground, pushed sideways, its controller's parameter a generated function
  of (t, x): the C++ loop maps MuJoCo's free joint (quaternion w first, linear velocity in the world's axes) as
  MuJoCoPlant does, applies the same push at the same samples and computes the same parameter from the measured
  state."""
  import anvil as av
  from anvil.mpc import LeastSquares, MPCFunction, euler
  from anvil.robots import Robot

  urdf = tmp_path / "hopper.urdf"
  urdf.write_text(HOPPER)
  robot, dt, steps = Robot.from_urdf(str(urdf), floating_base=True), 0.02, 14
  nq, nx = robot.nq, robot.nx
  residual = lambda x, u, p: (x[nq - 1 : nq] - p[:1] - 0.1 * p[1:]).cat(0.1 * x[nx - 1 :], 0.1 * u)
  mpc = MPCFunction(
    "hopper_mpc", euler("hopper_F", robot.ode, dt, nx=nx, nu=robot.nu),
    LeastSquares(av.NumericalFunction("hopper_r", residual, (av.Arg(nx), av.Arg(1), av.Arg(2))), np.ones(3)),
    horizon=8, **robot.bounds(),
  )  # fmt: skip
  # the arm's target steps up at t = 5, and follows the base's height
  law = lambda t, x: (0.5 * (t >= 5).where(1.0, 0.0)).cat(x[2:3])
  parameter = av.NumericalFunction("hopper_p", law, (av.Arg(1), av.Arg(nx)))
  plant = MuJoCoPlant(str(urdf), robot.joint_names, dt, floating_base=True, contact_spheres={"base": 0.05})
  push = mujoco_loop.Push("base", (0.0, 8.0, 0.0, 0.0, 0.0, 0.2), 4, 7)
  q0 = robot.neutral()
  q0[2] = 0.1  # the base's foot 5 cm above the ground, tilted
  q0[3:7] = np.array([0.1, 0.0, 0.0, 1.0]) / np.hypot(0.1, 1.0)
  x0 = np.r_[q0, np.zeros(robot.nv)]
  python = simulate(mpc, push.plant(plant), x0, steps, p=lambda t, x: parameter(np.array([float(t)]), x))
  module = mujoco_loop.write(mpc, plant, x0, steps, tmp_path, parameter, pushes=[push])
  cpp = mujoco_loop.run(mujoco_loop.build(tmp_path, module), tmp_path)
  assert python.failure is None and np.all(cpp.statuses == 0)
  np.testing.assert_array_equal(cpp.iterations, python.iterations)
  np.testing.assert_allclose(cpp.u, python.u, atol=1e-6 * np.abs(python.u).max())
  np.testing.assert_allclose(cpp.x, python.x, atol=1e-7)
  assert np.abs(python.x[-1, :2] - x0[:2]).max() > 1e-3  # pushed sideways
  assert np.abs(python.x[:, nq - 1]).max() > 0.1  # the arm followed its target
