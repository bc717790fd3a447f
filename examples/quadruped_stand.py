"""Solo12, a 12-joint quadruped from its URDF, standing in MuJoCo: shifting its base over its feet and taking a push.

The controller's model is the whole robot (anvil.robots: a free-flyer base and 12 joints, nx = 37) with the contact
forces at its four feet as inputs beside the torques (nu = 24), as OCS2's legged-robot MPC takes them (there on
centroidal dynamics, here on the full rigid-body dynamics, ABA with the forces as external wrenches), stepped by
crocoddyl's semi-implicit Euler (v += dt a, then q moves on its manifold at the new v: `configuration_rate`). The feet
stay where they stand: their positions at every stage equal the measured ones (path constraints, softened by an exact
L1 penalty so that a push that slides a foot leaves the QP feasible), the forces lie in friction pyramids (mu = 0.7)
with nonnegative normal components, the torques within the URDF's limits. The cost tracks a base position (shifted
3 cm forward and 2 cm sideways for a while), an upright base, the standing posture, and regularizes velocities,
torques and the forces around a quarter of the weight each (Gauss-Newton Hessian: every residual is affine).

The plant is MuJoCo's model of the same URDF with a sphere on each foot and a ground plane (`MuJoCoPlant`), which the
controller's model does not have: MuJoCo makes its own contact forces from the torques, and its soft contacts let the
feet sink and creep. The run stands, shifts its base, comes back and is pushed sideways (20 N on the base for 0.1 s).

Run: `python examples/quadruped_stand.py [--steps K] [--out DIR] [--sqp]`: real-time iterations (one QP per sample),
or with --sqp full SQP to convergence; prints how the base moved and the per-step time against the sample time.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from example_robot_data.robots_loader import getModelPath
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, MuJoCoPlant, Soft, euler, plot_closed_loop, simulate
from anvil.robots import Robot

from cli import example_arguments

N, DT = 10, 0.02  # horizon: 0.2 s
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
RADIUS, MU = 0.016, 0.7  # the foot spheres (m), the controller's friction coefficient (MuJoCo's: 1)
#: The standing posture of each leg (hip abduction, hip flexion, knee), front then hind legs.
STANDING = np.r_[[0.0, 0.8, -1.6] * 2, [0.0, -0.8, 1.6] * 2]
SHIFT, SHIFT_STEPS = np.array([0.03, 0.02, 0.0]), (50, 120)  # the base's shift and when it is asked for
PUSH, PUSH_STEPS, PUSHED_BODY = np.array([0.0, 20.0, 0.0, 0.0, 0.0, 0.0]), (150, 155), "base_link"  # push, when
#: Weights: base position, base orientation (the quaternion's vector part), posture, velocities, torques, forces.
W_BASE, W_UPRIGHT, W_POSTURE, W_VELOCITY, W_TORQUE, W_FORCE = 1e3, 1e3, 1.0, 1.0, 1e-2, 1e-1


def urdf() -> str:
  """example-robot-data's solo12 URDF."""
  subpath = "solo_description/robots/solo12.urdf"
  return f"{getModelPath(subpath)}/{subpath}"


def standing(robot: Robot) -> np.ndarray:
  """The standing configuration: the posture, the base upright at the height that puts the foot spheres on z = 0."""
  q = robot.neutral()
  q[7:] = STANDING
  q[2] = RADIUS - robot.frame_placement(q, FEET[0])[1][2]
  return q


def controller(robot: Robot, q_stand: np.ndarray, mode: str) -> MPCFunction:
  """The standing MPC; its parameter p = (the feet's positions (12), the base's target position (3))."""
  nq, nx, nt = robot.nq, robot.nx, robot.nu
  nu = nt + 3 * len(FEET)

  def rate(x: Tensor, u: Tensor) -> Tensor:  # NOTE: explicit Euler on (v + dt a, a) is crocoddyl's Euler step
    forces = {foot: u[nt + 3 * k : nt + 3 * k + 3].cat(u[:3] * 0) for k, foot in enumerate(FEET)}
    a = robot.forward_dynamics(x, u[:nt], forces, reference="local_world_aligned")
    return robot.configuration_rate(x[:nq], x[nq:] + DT * a).cat(a)

  def contacts(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
    feet = [robot.frame_placement(x[:nq], foot)[1] - p[3 * k : 3 * k + 3] for k, foot in enumerate(FEET)]
    cones = []
    for k in range(len(FEET)):
      fx, fy, fz = (u[nt + 3 * k + i : nt + 3 * k + i + 1] for i in range(3))
      cones += [fx - MU * fz, -fx - MU * fz, fy - MU * fz, -fy - MU * fz]
    return feet[0].cat(*feet[1:], *cones)

  weight = np.full(3, 9.81 * robot.mass / len(FEET)) * np.array([0.0, 0.0, 1.0])

  def tracking(x: Tensor, p: Tensor) -> Tensor:
    return (x[:3] - p[12:15]).cat(x[3:6], x[7:nq] - Tensor(q_stand[7:]), x[nq:])

  def running(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
    return tracking(x, p).cat(u[:nt], u[nt:] - Tensor(np.tile(weight, len(FEET))))

  state_weights = np.r_[
    np.full(3, W_BASE), np.full(3, W_UPRIGHT), np.full(nt, W_POSTURE), np.full(robot.nv, W_VELOCITY)
  ]
  effort = robot.bounds()["u_bounds"][1]
  stage_weights = np.r_[state_weights, np.full(nt, W_TORQUE), np.full(12, W_FORCE)]
  return MPCFunction(
    f"quadruped_{mode}",
    euler("quadruped_F", rate, DT, nx=nx, nu=nu),
    LeastSquares(NumericalFunction("quadruped_r", running, (Arg(nx), Arg(nu), Arg(15))), stage_weights),
    LeastSquares(NumericalFunction("quadruped_rN", tracking, (Arg(nx), Arg(15))), state_weights),
    horizon=N,
    constraints=NumericalFunction("quadruped_h", contacts, (Arg(nx), Arg(nu), Arg(15))),
    constraint_bounds=(np.r_[np.zeros(12), np.full(16, -np.inf)], np.zeros(28)),
    u_bounds=(np.r_[-effort, np.tile([-100.0, -100.0, 0.0], 4)], np.r_[effort, np.full(12, 100.0)]),
    soft={"constraints": Soft(l1=1e3, l2=1e4, indices=tuple(range(12)))},
    options=MPCOptions(hessian="gauss_newton", mode=mode),
  )


def parameter(robot: Robot, q_stand: np.ndarray) -> NumericalFunction[..., Any]:
  """p of the closed loop's step t (1,) and measured state x: the feet where they stand, the base's target (shifted
  during SHIFT_STEPS). A generated function: the C++ loop (examples/cpp/mujoco/loop.py --quadruped) calls it too."""

  def law(t: Tensor, x: Tensor) -> Tensor:
    shifted = (t >= SHIFT_STEPS[0]).where(1.0, 0.0) * (t < SHIFT_STEPS[1]).where(1.0, 0.0)
    feet = [robot.frame_placement(x[: robot.nq], foot)[1] for foot in FEET]
    return feet[0].cat(*feet[1:], Tensor(q_stand[:3]) + shifted * Tensor(SHIFT))

  return NumericalFunction("quadruped_p", law, (Arg(1), Arg(robot.nx)))


def plant(mpc: MPCFunction, robot: Robot) -> MuJoCoPlant:
  """MuJoCo's solo12 with a sphere on each foot and a ground plane."""
  return MuJoCoPlant(urdf(), robot.joint_names, DT, floating_base=True, contact_spheres=dict.fromkeys(FEET, RADIUS),
                     nu=mpc.nu)  # fmt: skip


def run(steps: int, mode: str) -> tuple[Robot, Any]:
  """Build, run the closed loop in MuJoCo: (the robot, the loop)."""
  robot = Robot.from_urdf(urdf(), floating_base=True)
  q_stand = standing(robot)
  mpc = controller(robot, q_stand, mode)
  target = parameter(robot, q_stand)
  x0 = np.r_[q_stand, np.zeros(robot.nv)]
  begin = time.perf_counter()
  mpc(x0, target([0.0], x0))
  print(f"build (trace, generate, compile or load from cache) and first solve: {time.perf_counter() - begin:.1f} s")
  mujoco, samples = plant(mpc, robot), iter(range(steps))

  def pushed(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    t = next(samples)
    mujoco.apply(PUSHED_BODY, PUSH if PUSH_STEPS[0] <= t < PUSH_STEPS[1] else None)
    return mujoco(x, u)

  return robot, simulate(mpc, pushed, x0, steps, p=lambda t, x: target([float(t)], x))


def main() -> None:
  """Stand, shift, get pushed; report and plot."""
  args = example_arguments(__doc__, 250, flags={"sqp": "full SQP to convergence instead of real-time iterations"})
  robot, loop = run(args.steps, "sqp" if args.sqp else "rti")
  print(loop.summary())
  upright, shifted = np.abs(loop.x[:, 3:6]).max(), np.round(loop.x[min(SHIFT_STEPS[1], args.steps), :3], 4)
  print(f"base height {loop.x[:, 2].min():.4f} to {loop.x[:, 2].max():.4f} m, largest tilt (quaternion vector part) "
        f"{upright:.4f}, base at the end of the shift {shifted} m")  # fmt: skip
  median = np.median(loop.solve_times)
  print(
    f"per-step time in the generated C++: median {1e3 * median:.2f} ms, max {1e3 * loop.solve_times.max():.2f} ms: "
    f"{median / DT:.2f} of the {1e3 * DT:.0f} ms sample"
  )
  names = ("x", "y", "z", "qx", "qy", "qz", "qw", *robot.joint_names[1:])
  groups = [("x", "y"), ("z",), ("qx", "qy", "qz"), robot.joint_names[1:7], robot.joint_names[7:]]
  print(f"plot: {plot_closed_loop(loop, args.out / 'quadruped_stand.png', DT, names, groups=groups)}")


if __name__ == "__main__":
  main()
