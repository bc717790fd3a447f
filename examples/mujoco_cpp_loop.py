"""A generated MPC closing the loop on a MuJoCo model in plain C++ (`anvil.mpc.mujoco_loop`): the controller's module,
the plant's model and the run's config written, built with CMake against pip mujoco's C library, run, and the closed
loop read back.

    .venv/bin/python examples/mujoco_cpp_loop.py [--steps K] [--out DIR]   # examples/arm_reach.py's panda, in C++
    .venv/bin/python examples/mujoco_cpp_loop.py --quadruped   # examples/quadruped_stand.py's solo12, standing, pushed
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anvil.mpc import MuJoCoPlant
from anvil.mpc.mujoco_loop import Push, Run, build, run, write

from cli import example_arguments


def panda(steps: int, out: Path) -> None:
  """examples/arm_reach.py's panda reaching its targets: how close, how fast."""
  from arm_reach import DT, HAND, controller, reaching, urdf

  robot, q0, targets, segment = reaching(steps)
  mpc = controller(robot)
  module = write(mpc, MuJoCoPlant(urdf(), robot.joint_names, DT), np.r_[q0, np.zeros(robot.nv)], steps, out,
                 lambda t: targets[min(t // segment, len(targets) - 1)])  # fmt: skip
  loop = run(build(out, module), out)
  report(loop, DT)
  for k, target in enumerate(targets):
    t = min((k + 1) * segment, steps)
    error = robot.frame_placement_error(loop.x[t, : robot.nq], HAND, target[:9].reshape(3, 3), target[9:])
    print(f"target {k}: position error {1e3 * np.linalg.norm(error[:3]):.3f} mm")


def quadruped(steps: int, out: Path) -> None:
  """examples/quadruped_stand.py's solo12 (real-time iterations): standing, shifting its base, pushed."""
  from anvil.robots import Robot

  from quadruped_stand import DT, PUSH, PUSH_STEPS, PUSHED_BODY, controller, parameter, plant, standing, urdf

  robot = Robot.from_urdf(urdf(), floating_base=True)
  q_stand = standing(robot)
  mpc = controller(robot, q_stand, "rti")
  push = Push(PUSHED_BODY, tuple(PUSH), *PUSH_STEPS)
  x0 = np.r_[q_stand, np.zeros(robot.nv)]
  module = write(mpc, plant(mpc, robot), x0, steps, out, parameter(robot, q_stand), pushes=[push])
  loop = run(build(out, module), out)
  report(loop, DT)
  print(f"base height {loop.x[:, 2].min():.4f} to {loop.x[:, 2].max():.4f} m, largest tilt (quaternion vector part) "
        f"{np.abs(loop.x[:, 3:6]).max():.4f}")  # fmt: skip


def report(loop: Run, dt: float) -> None:
  """The per-step solve times against the sample time, and the statuses."""
  median = np.median(loop.solve_times)
  print(f"{len(loop.u)} steps in C++: per-step solve {1e3 * median:.2f} ms median ({median / dt:.2f} of the "
        f"{1e3 * dt:.0f} ms sample), {1e3 * loop.solve_times.max():.2f} ms max; statuses "
        f"{np.bincount(loop.statuses).tolist()}")  # fmt: skip


def main() -> None:
  """The panda (or with --quadruped solo12) in MuJoCo, the loop in C++."""
  flags = {"quadruped": "examples/quadruped_stand.py's solo12 (standing, shifting, pushed) instead of the panda"}
  args = example_arguments(__doc__, 200, flags)
  (quadruped if args.quadruped else panda)(args.steps, args.out / ("mujoco_loop_quadruped" if args.quadruped
                                                                   else "mujoco_loop"))  # fmt: skip


if __name__ == "__main__":
  main()
