"""`MuJoCoPlant`: a URDF robot in MuJoCo as the plant of a closed loop, its dynamics equal to anvil's."""

from __future__ import annotations

import numpy as np
import pytest

from anvil.mpc import MuJoCoPlant, simulate
from tests.robots import anvil_robot, check_reached_posture, close, posture_mpc, urdf_path


def test_forward_dynamics_equal_anvils_with_the_urdfs_damping() -> None:
  """MuJoCo's accelerations of the panda URDF (fingers removed, as anvil locks them) equal anvil's forward dynamics,
  URDF damping included, at random states and torques."""
  robot = anvil_robot("panda")
  plant = MuJoCoPlant(urdf_path("panda"), robot.joint_names, 0.01)
  assert plant.model.nq == robot.nq and plant.steps == 5
  rng = np.random.default_rng(4)
  for _ in range(10):
    x = np.concatenate([robot.random_configuration(rng), rng.standard_normal(robot.nv)])
    tau = 5 * rng.standard_normal(robot.nu)
    close(plant.acceleration(x, tau), robot.forward_dynamics(x, tau), rtol=1e-11)


def test_a_sample_is_mujocos_semi_implicit_euler_steps() -> None:
  """One sample of 5 MuJoCo steps equals 5 steps of semi-implicit Euler with implicit damping, (M + h D) a = τ - b -
  D v, v += h a, q += h v, computed from anvil's CRBA and nonlinear effects."""
  robot = anvil_robot("panda")
  plant = MuJoCoPlant(urdf_path("panda"), robot.joint_names, 0.01)
  h, damping = plant.model.opt.timestep, np.diag(plant.model.dof_damping)
  rng = np.random.default_rng(5)
  q, v, tau = robot.random_configuration(rng), rng.standard_normal(robot.nv), rng.standard_normal(robot.nu)
  x = np.concatenate([q, v])
  for _ in range(plant.steps):
    a = np.linalg.solve(robot.crba(q) + h * damping, tau - robot.nonlinear_effects(q, v) - damping @ v)
    v = v + h * a
    q = q + h * v
  close(plant(x, tau), np.concatenate([q, v]), rtol=1e-10)


def test_mpc_reaches_a_posture_in_mujoco() -> None:
  """The UR5's MPC (anvil's model: no damping) drives MuJoCo's UR5 to a target posture within the torque limits."""
  robot, dt = anvil_robot("ur5"), 0.02
  mpc, target = posture_mpc(robot, "ur5_mj", dt)
  plant = MuJoCoPlant(urdf_path("ur5"), robot.joint_names, dt)
  loop = simulate(mpc, plant, np.concatenate([robot.neutral(), np.zeros(robot.nv)]), 40)
  check_reached_posture(robot, loop, target)


def test_bad_plants_say_what_is_wrong() -> None:
  robot = anvil_robot("panda")
  with pytest.raises(ValueError, match="whole number of the model's timestep"):
    MuJoCoPlant(urdf_path("panda"), robot.joint_names, 0.005 + 1e-4)
  with pytest.raises(ValueError, match="no joint 'elbow'"):
    MuJoCoPlant(urdf_path("panda"), [*robot.joint_names[:-1], "elbow"], 0.01)
  plant = MuJoCoPlant(urdf_path("panda"), robot.joint_names, 0.01)
  with pytest.raises(ValueError, match=r"x must have shape \(14,\)"):
    plant(np.zeros(13), np.zeros(7))
  with pytest.raises(ValueError, match="finite"):
    plant(np.full(14, np.nan), np.zeros(7))
  free = '<mujoco><worldbody><body name="b"><freejoint name="root"/><geom size="0.1"/></body></worldbody></mujoco>'
  with pytest.raises(ValueError, match="'root' is a free joint"):
    MuJoCoPlant(free, ["root"], 0.002)
