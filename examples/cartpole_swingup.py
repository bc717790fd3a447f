"""P2 cart-pole swing-up in closed loop: an MPC with horizon N = 50 and the terminal constraint x_N = 0.

Run: `python examples/cartpole_swingup.py [--out DIR] [--steps K]`. Prints the closed-loop metrics and whether the
pendulum reached upright and stayed there (|theta| < 0.05 rad over the last second), and plots the run.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from anvil.mpc import plot_closed_loop, simulate
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm

from cli import example_arguments

ROOT = Path(__file__).resolve().parent.parent

NAMES = cm.STATE_NAMES


def main() -> None:
  """Swing the pendulum up from hanging (theta = pi) for `--steps` steps of 0.05 s, report and plot."""
  args = example_arguments(__doc__, 100)

  mpc = cm.swing_up("cartpole_swing_up")
  # A cold start (every state = x0) does not converge: start the first solve from a ramp to upright.
  guess = cm.swing_up_guess(cm.X0_SWING_UP)
  start = time.perf_counter()
  mpc.reset()  # the first use builds the controller (trace, generate, compile) or loads it from the cache
  print(f"build: {time.perf_counter() - start:.1f} s")
  cl = simulate(mpc, cartpole.step_numpy, cm.X0_SWING_UP, args.steps, guess=guess)
  print(cl.summary())
  print(f"path bounds: max |xc| {np.abs(cl.x[:, 0]).max():.3f} m (<= 2), max |u| {np.abs(cl.u).max():.3f} N (<= 20)")

  last_second = round(1.0 / cartpole.H)
  theta = np.angle(np.exp(1j * cl.x[-last_second:, 1]))  # wrapped to (-pi, pi]
  upright = bool(np.all(np.abs(theta) < 0.05))
  print(f"upright over the last second: {upright} (max |theta| {np.abs(theta).max():.4f} rad)")
  print(f"plot: {plot_closed_loop(cl, args.out / 'cartpole_swingup.png', cartpole.H, NAMES)}")


if __name__ == "__main__":
  main()
