"""A Panda arm from its URDF reaching a sequence of end-effector targets, with MuJoCo as the plant.

The model is the URDF (example-robot-data's panda, fingers locked) through `anvil.robots`: ABA as the ODE (RK4,
0.02 s), the URDF's effort limits as the torque bounds; the cost is the hand's placement error to the target
(`frame_placement_error`: SE(3)'s logarithm), velocities and the torques beyond gravity compensation; the target (its
rotation and position) is the MPC's parameter, so the next target needs no rebuild. The plant is MuJoCo's model of the
same URDF (`anvil.mpc.MuJoCoPlant`, 0.002 s steps), which adds the URDF's joint damping the controller's model does
not have.

Run: `python examples/arm_reach.py [--steps K] [--out DIR]`: prints how close the hand gets to each target and the
largest torque against its limit, and plots the run.
"""

from __future__ import annotations

import time

import numpy as np
from example_robot_data.robots_loader import getModelPath
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import MPCFunction, MuJoCoPlant, plot_closed_loop, rk4, simulate
from anvil.robots import Robot

from cli import example_arguments

N, DT = 25, 0.02  # horizon: 0.5 s
HAND = "panda_hand_tcp"
#: Weights: the placement error's position and orientation parts, joint velocities, torques beyond gravity
#: compensation; the terminal placement weight.
W_POSITION, W_ROTATION, W_VELOCITY, W_TORQUE, W_END = 1e3, 1e2, 1.0, 1e-3, 1e4
#: Targets: offsets of the hand's start position (m), each held for a third of the run, the hand's start orientation.
OFFSETS = np.array([[0.1, -0.15, -0.1], [-0.05, 0.15, 0.05], [0.12, 0.05, -0.15]])


def urdf() -> str:
  """example-robot-data's panda URDF."""
  subpath = "panda_description/urdf/panda.urdf"
  return f"{getModelPath(subpath)}/{subpath}"


def controller(robot: Robot) -> MPCFunction:
  """The reaching MPC; its parameter p = (the target's rotation, row-major (9), its position (3))."""
  nq, nx, nu = robot.nq, robot.nx, robot.nu
  weights = Tensor(np.r_[np.full(3, W_POSITION), np.full(3, W_ROTATION)])

  def reach(x: Tensor, p: Tensor) -> Tensor:
    error = robot.frame_placement_error(x[:nq], HAND, p[:9].reshape(3, 3), p[9:])
    return (weights * error * error).sum()

  def stage(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
    effort = u - robot.generalized_gravity(x[:nq])
    return reach(x, p) + W_VELOCITY * (x[nq:] ** 2).sum() + W_TORQUE * (effort * effort).sum()

  return MPCFunction(
    "arm_reach",
    rk4("arm_reach_F", lambda x, u, p: robot.ode(x, u), DT, nx=nx, nu=nu, np=12),
    NumericalFunction("arm_reach_l", stage, (Arg(nx), Arg(nu), Arg(12))),
    NumericalFunction(
      "arm_reach_lN", lambda x, p: W_END / W_POSITION * reach(x, p) + (x[nq:] ** 2).sum(), (Arg(nx), Arg(12))
    ),
    horizon=N,
    **robot.bounds(),
  )


def reaching(steps: int) -> tuple[Robot, np.ndarray, list[np.ndarray], int]:
  """The panda (fingers locked), its start posture, the targets (p: rotation row-major, position) and the steps each
  is held for in a run of `steps`."""
  robot = Robot.from_urdf(urdf(), locked_joints=["panda_finger_joint1", "panda_finger_joint2"])
  q0 = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8])
  rotation, start = robot.frame_placement(q0, HAND)
  return robot, q0, [np.r_[rotation.ravel(), start + offset] for offset in OFFSETS], -(-steps // len(OFFSETS))


def main() -> None:
  """Build, reach each target in MuJoCo, report, plot."""
  args = example_arguments(__doc__, 150)
  robot, q0, targets, segment = reaching(args.steps)
  target_at = lambda t: targets[min(t // segment, len(targets) - 1)]

  mpc = controller(robot)
  x0 = np.concatenate([q0, np.zeros(robot.nv)])
  begin = time.perf_counter()
  mpc(x0, target_at(0))
  print(f"build (trace, generate, compile or load from cache) and first solve: {time.perf_counter() - begin:.1f} s")
  plant = MuJoCoPlant(urdf(), robot.joint_names, DT)
  loop = simulate(mpc, plant, x0, args.steps, p=target_at)
  print(loop.summary())
  limit = robot.bounds()["u_bounds"][1]
  print(f"largest torque / its limit: {np.max(np.abs(loop.u) / limit):.6f}")
  for k, target in enumerate(targets):
    t = min((k + 1) * segment, args.steps)  # the state at the end of the target's segment
    error = robot.frame_placement_error(loop.x[t, : robot.nq], HAND, target[:9].reshape(3, 3), target[9:])
    print(f"target {k}: position error {1e3 * np.linalg.norm(error[:3]):.3f} mm, "
          f"orientation error {np.linalg.norm(error[3:]):.2e} rad")  # fmt: skip
  names = robot.joint_names + tuple(f"d{n}" for n in robot.joint_names)
  print(f"plot: {plot_closed_loop(loop, args.out / 'arm_reach.png', DT, names)}")


if __name__ == "__main__":
  main()
