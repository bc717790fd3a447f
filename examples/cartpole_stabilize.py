"""The P2 stabilizing benchmark (anvil.problems.cartpole_mpc): N = 30, terminal cost 10 Q, 200 closed-loop steps
from [0.5, 0.3, 0, 0].

Run: `python examples/cartpole_stabilize.py [--out DIR] [--steps K]`. Prints the closed-loop metrics and compares the
closed-loop cost with the reference (CasADi IPOPT and sqpmethod agree on it), and plots the run.
"""

from __future__ import annotations

import time
from pathlib import Path

from anvil.mpc import plot_closed_loop, simulate
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm

from cli import example_arguments

ROOT = Path(__file__).resolve().parent.parent

NAMES = cm.STATE_NAMES


def main() -> None:
  """Run the benchmark's closed loop for `--steps` steps of 0.05 s (the reference cost is for 200), report and plot."""
  args = example_arguments(__doc__, cm.STEPS_STABILIZE)

  mpc = cm.stabilizing("cartpole_stabilize")
  start = time.perf_counter()
  mpc(cm.X0_STABILIZE)  # the first call builds the controller (trace, generate, compile) or loads it from the cache
  print(f"build and first solve: {time.perf_counter() - start:.1f} s")

  cl = simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, args.steps)
  print(cl.summary())
  error = cl.cost - cm.COST_STABILIZE
  print(f"closed-loop cost {cl.cost:.6f}, reference {cm.COST_STABILIZE:.6f} ({cm.STEPS_STABILIZE} steps): "
        f"difference {error:.2e}, relative {error / cm.COST_STABILIZE:.2e}")  # fmt: skip
  print(f"plot: {plot_closed_loop(cl, args.out / 'cartpole_stabilize.png', cartpole.H, NAMES)}")


if __name__ == "__main__":
  main()
