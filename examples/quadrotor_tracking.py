"""P1 quadrotor tracking a horizontal circle: the reference rides in a per-stage parameter p of shape (N + 1, 6).

Run: `python examples/quadrotor_tracking.py [--out DIR] [--steps K]`. Prints the closed-loop metrics, the build time
and the RMS position error, and plots the run.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import MPCFunction, plot_closed_loop, rk4, simulate
from anvil.problems import quadrotor
from anvil.problems.backend import TINYGRAD

from cli import example_arguments

ROOT = Path(__file__).resolve().parent.parent

N = 20  # horizon: 0.4 s
RADIUS, ALTITUDE, PERIOD = 1.0, 1.0, 4.0  # the circle: 1 m radius at 1 m altitude, one lap in 4 s (200 steps)
F_MAX = 2.5  # rotor thrust bounds: 0 <= f_i <= 2.5 N
#: Weights of the state error: position, Euler angles, velocity, body rates; and of the thrusts' deviation from hover.
Q = np.array([100.0] * 3 + [1.0] * 3 + [1.0] * 3 + [0.1] * 3)
R = 1.0
#: The reference state from p = [position, velocity]: zero angles and rates.
SELECT = np.zeros((12, 6))
SELECT[0:3, 0:3] = SELECT[6:9, 3:6] = np.eye(3)
NAMES = ("px", "py", "pz", "phi", "theta", "psi", "vx", "vy", "vz", "p", "q", "r")


def reference(t: np.ndarray) -> np.ndarray:
  """Position and velocity on the circle at the times t (s): (len(t), 6)."""
  w = 2 * np.pi / PERIOD
  c, s = np.cos(w * t), np.sin(w * t)
  return np.stack([RADIUS * c, RADIUS * s, np.full_like(t, ALTITUDE), -RADIUS * w * s, RADIUS * w * c, 0 * t], 1)


def stage_cost(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
  """Weighted error to the reference state, plus the thrusts' deviation from hover."""
  e, du = x - Tensor(SELECT) @ p, u - Tensor(quadrotor.HOVER)
  return (Tensor(Q) * e * e).sum() + R * (du * du).sum()


def terminal_cost(x: Tensor, p: Tensor) -> Tensor:
  """Ten times the stage's state error."""
  e = x - Tensor(SELECT) @ p
  return 10 * (Tensor(Q) * e * e).sum()


def main() -> None:
  """Build the tracking MPC, fly `--steps` steps of 0.02 s around the circle, report and plot."""
  args = example_arguments(__doc__, 200)

  nx, nu, dt = quadrotor.NX, quadrotor.NU, quadrotor.H
  # every function takes the same parameter p; the model ignores it
  dynamics = rk4("quad_track_F", lambda x, u, p: quadrotor.ode(x, u, TINYGRAD), dt, nx=nx, nu=nu, np=6)
  mpc = MPCFunction(
    "quad_track",
    dynamics=dynamics,
    stage_cost=NumericalFunction("quad_track_l", stage_cost, (Arg(nx), Arg(nu), Arg(6))),
    terminal_cost=NumericalFunction("quad_track_lN", terminal_cost, (Arg(nx), Arg(6))),
    horizon=N,
    u_bounds=(np.zeros(nu), np.full(nu, F_MAX)),
  )

  x0 = SELECT @ reference(np.zeros(1))[0]  # on the circle's start, at its speed, level
  p = lambda t: reference((t + np.arange(N + 1)) * dt)  # the reference over the horizon, from step t on
  start = time.perf_counter()
  mpc(x0, p(0))
  print(f"build (trace, generate, compile or load from cache) and first solve: {time.perf_counter() - start:.1f} s")

  cl = simulate(mpc, quadrotor.step_numpy, x0, args.steps, p=p)
  print(cl.summary())
  error = np.linalg.norm(cl.x[:, 0:3] - reference(np.arange(args.steps + 1) * dt)[:, 0:3], axis=1)
  print(f"RMS position error: {np.sqrt(np.mean(error**2)):.4f} m (max {error.max():.4f} m)")
  print(f"plot: {plot_closed_loop(cl, args.out / 'quadrotor_tracking.png', dt, NAMES)}")


if __name__ == "__main__":
  main()
