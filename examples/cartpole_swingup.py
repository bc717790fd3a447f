"""P2 cart-pole swing-up in closed loop: an MPC with horizon N = 50 and the terminal constraint x_N = 0, on the model
of cartpole_stabilize.py (its ODE, RK4 step, stage cost and bounds).

Run: `python examples/cartpole_swingup.py [--out DIR] [--steps K]`. Prints the closed-loop metrics and whether the
pendulum reached upright and stayed there (|theta| < 0.05 rad over the last second), and plots the run.
"""

from __future__ import annotations

import time

import numpy as np

from anvil.mpc import MPCFunction, plot_closed_loop, simulate
from anvil.problems import cartpole

from cartpole_stabilize import NAMES, NU, NX, H, bounds, dynamics, stage_cost
from cli import example_arguments

N = 50  # the horizon: 2.5 s
X0 = np.array([0.0, np.pi, 0.0, 0.0])  # hanging down


def controller(name: str) -> MPCFunction:
  """The swing-up MPC: N = 50, the terminal constraint x_N = 0 (no terminal cost), the stabilizing MPC's bounds."""
  x_bounds, u_bounds = bounds()
  return MPCFunction(name, dynamics(f"{name}_F"), stage_cost(f"{name}_l"), None, horizon=N, x_bounds=x_bounds,
                     u_bounds=u_bounds, x_terminal_bounds=(np.zeros(NX), np.zeros(NX)))  # fmt: skip


def main() -> None:
  """Swing the pendulum up from hanging (theta = pi) for `--steps` steps of 0.05 s, report and plot."""
  args = example_arguments(__doc__, 100)

  mpc = controller("cartpole_swing_up")
  # A cold start (every state = x0) does not converge: start the first solve from a ramp to upright, zero force.
  guess = (1.0 - np.arange(N + 1)[:, None] / N) * X0, np.zeros((N, NU))
  start = time.perf_counter()
  mpc.reset()  # the first use builds the controller (trace, generate, compile) or loads it from the cache
  print(f"build: {time.perf_counter() - start:.1f} s")
  cl = simulate(mpc, cartpole.step_numpy, X0, args.steps, guess=guess)
  print(cl.summary())
  print(f"path bounds: max |xc| {np.abs(cl.x[:, 0]).max():.3f} m (<= 2), max |u| {np.abs(cl.u).max():.3f} N (<= 20)")

  last_second = round(1.0 / H)
  theta = np.angle(np.exp(1j * cl.x[-last_second:, 1]))  # wrapped to (-pi, pi]
  upright = bool(np.all(np.abs(theta) < 0.05))
  print(f"upright over the last second: {upright} (max |theta| {np.abs(theta).max():.4f} rad)")
  print(f"plot: {plot_closed_loop(cl, args.out / 'cartpole_swingup.png', H, NAMES)}")


if __name__ == "__main__":
  main()
