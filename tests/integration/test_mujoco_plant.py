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
  ball = (
    '<mujoco><worldbody><body name="b"><joint type="ball" name="root"/><geom size="0.1"/></body></worldbody></mujoco>'
  )
  with pytest.raises(ValueError, match="'root' is a ball joint"):
    MuJoCoPlant(ball, ["root"], 0.002)


FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


def test_a_floating_base_is_mujocos_free_joint() -> None:
  """solo12 with a free joint at its root (floating_base): in the air, MuJoCo's accelerations equal anvil's forward
  dynamics (the base's linear velocity and acceleration converted between the world's and the base's axes), and a
  state (quaternion x, y, z, w) goes into MuJoCo's data (w, x, y, z) and comes back unchanged."""
  robot = anvil_robot("solo12")
  plant = MuJoCoPlant(urdf_path("solo12"), robot.joint_names, 0.01, floating_base=True)
  assert plant.free and plant.nq == robot.nq and plant.nx == robot.nx and plant.nu == robot.nu
  rng = np.random.default_rng(6)
  for _ in range(5):
    x = np.concatenate([robot.random_configuration(rng), rng.standard_normal(robot.nv)])
    tau = rng.standard_normal(robot.nu)
    close(plant.acceleration(x, tau), robot.forward_dynamics(x, tau), rtol=1e-11)
    close(plant.state(), x, rtol=1e-15)


def test_contact_spheres_hold_a_robot_on_the_ground_and_a_push_moves_it() -> None:
  """solo12 on its four foot spheres, its joints held by PD torques, settles and stays upright; a lateral push of its
  base (`apply`, held for 0.1 s) moves it sideways; extra entries of u (contact forces a controller plans) are not
  applied."""
  robot, radius = anvil_robot("solo12"), 0.016
  plant = MuJoCoPlant(urdf_path("solo12"), robot.joint_names, 0.01, floating_base=True,
                      contact_spheres=dict.fromkeys(FEET, radius), nu=robot.nu + 12)  # fmt: skip
  q = robot.neutral()
  q[7:] = np.tile([0.0, 0.8, -1.6], 4) * np.repeat([1.0, 1.0, -1.0, -1.0], 3)
  q[2] = radius - robot.frame_placement(q, FEET[0])[1][2] + 0.005  # 5 mm above the ground
  x, hold = np.concatenate([q, np.zeros(robot.nv)]), q[7:].copy()
  control = lambda x: np.concatenate([8.0 * (hold - x[7:19]) - 0.2 * x[25:], np.full(12, 1e3)])
  for _ in range(100):
    x = plant(x, control(x))
  assert 0.15 < x[2] < q[2] and np.abs(x[3:6]).max() < 1e-3 and np.abs(x[19:25]).max() < 1e-2  # settled, upright
  rest = x.copy()
  plant.apply("base_link", [0.0, 20.0, 0.0, 0.0, 0.0, 0.0])
  for _ in range(10):
    x = plant(x, control(x))
  plant.apply("base_link", None)
  assert x[1] - rest[1] > 1e-3 and not plant.wrenches


def test_bad_free_joints_and_wrenches_say_what_is_wrong() -> None:
  robot = anvil_robot("solo12")
  floating = MuJoCoPlant(urdf_path("solo12"), robot.joint_names, 0.01, floating_base=True).model
  with pytest.raises(ValueError, match="a free joint must come first"):
    MuJoCoPlant(floating, [*robot.joint_names[1:], "root_joint"], 0.01)
  with pytest.raises(ValueError, match="names 'foot', which is no body"):
    MuJoCoPlant(urdf_path("solo12"), robot.joint_names, 0.01, floating_base=True, contact_spheres={"foot": 0.01})
  plant = MuJoCoPlant(floating, robot.joint_names, 0.01)
  with pytest.raises(ValueError, match="6 finite numbers"):
    plant.apply("base_link", [1.0, 2.0])
  with pytest.raises(ValueError, match="no body 'torso'"):
    plant.apply("torso", np.zeros(6))
  x = np.concatenate([robot.neutral(), np.zeros(robot.nv)])
  x[3:7] = [0.0, 0.0, 0.0, 2.0]
  with pytest.raises(ValueError, match="unit quaternion"):
    plant(x, np.zeros(robot.nu))
