"""do-mpc's batch bioreactor example: a fed-batch fermenter (biomass, substrate, product, volume) whose feed an MPC
sets to make the most product, closed on scipy's Radau plant for 150 samples of 1 h, as do-mpc's main.py runs it.

Run: `python examples/batch_bioreactor.py [--out DIR] [--steps K]`. Prints the product at the end, the worst
violation of the biomass and product limits and the per-sample solve times, and plots the run.

The model and the OCP are in anvil/problems/batch_bioreactor.py (do-mpc's template_model.py and template_mpc.py: the
stage and terminal cost -P_s, the input-rate penalty, the bounds; its nominal MPC, n_robust = 0);
`python -m benchmarks.bench_dompc --problem batch_bioreactor` runs do-mpc itself beside it.
"""

from __future__ import annotations

import time

import numpy as np

from anvil.mpc import plot_closed_loop, simulate
from anvil.problems import batch_bioreactor as bb

from cli import example_arguments


def main() -> None:
  """Run the MPC over the batch, report and plot."""
  args = example_arguments(__doc__, bb.STEPS)
  mpc = bb.nominal_mpc("batch_bioreactor_example")
  start = time.perf_counter()
  mpc(bb.X0, p=bb.P_TRUE)  # the first call builds the controller (trace, generate, compile) or loads it
  print(f"build (or load from the cache) and first solve: {time.perf_counter() - start:.1f} s")
  mpc.reset()
  cl = simulate(mpc, bb.plant_step, bb.X0, args.steps, p=bb.P_TRUE)
  print(cl.summary())
  (_, x_hi), _ = bb.bounds()
  print(f"product at the end {cl.x[-1, 2]:.4f} mol/l, worst excess over the X_s and P_s limits "
        f"{max(float(np.max(cl.x[:, [0, 2]] - x_hi[[0, 2]])), 0.0):.2e}")  # fmt: skip
  print(f"plot: {plot_closed_loop(cl, args.out / 'batch_bioreactor.png', bb.DT, bb.STATE_NAMES)}")


if __name__ == "__main__":
  main()
