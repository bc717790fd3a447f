"""do-mpc's industrial polymerization example, robust as do-mpc ships it: a 10-state semi-batch reactor, its
reaction's enthalpy and rate uncertain, controlled by a multi-stage MPC over the 9 combinations of their values
(`MPCFunction(..., scenarios=Scenarios.grid(...))`, the OCP over the scenario tree, its QPs solved by the Riccati
recursion over the tree), closed on scipy's Radau plant at the true values for a batch of 100 samples of 50 s.

Run: `python examples/industrial_poly.py [--out DIR] [--steps K] [--perturbed]`. Prints the product at the batch's end,
the reactor temperature's worst excursion out of 363.15 ± 2 K and the per-sample solve times, and plots the run. With
`--perturbed` the plant runs at delH_R and k_0 30% above their nominal values (one of the scenarios), and the nominal
MPC (do-mpc's n_robust = 0: the nominal values alone) runs on it beside the robust one.

The model and the OCP are in anvil/problems/industrial_poly.py (the model's equations, the bounds, the scaled input-rate
penalty and the uncertainty as do-mpc's template_model.py and template_mpc.py write them);
`python -m benchmarks.bench_dompc` runs do-mpc itself beside it.
"""

from __future__ import annotations

import time

import numpy as np

from anvil.mpc import plot_closed_loop, simulate
from anvil.problems import industrial_poly as ip

from cli import example_arguments


def excursion(x: np.ndarray) -> float:
  """The reactor temperature's worst excursion out of its band (K; 0 within it)."""
  above, below = x[:, 3] - (ip.T_SET + ip.TEMP_RANGE), (ip.T_SET - ip.TEMP_RANGE) - x[:, 3]
  return max(float(np.max(above)), float(np.max(below)), 0.0)


def main() -> None:
  """Run the robust MPC (and with --perturbed the nominal one) over the batch, report and plot."""
  args = example_arguments(__doc__, 100, {"perturbed": "the plant 30% off the nominal values, the nominal MPC too"})
  p_plant = ip.P_TRUE * (1.3 if args.perturbed else 1.0)
  controllers = {"robust (9 scenarios)": ip.robust_mpc("industrial_poly_robust")}
  if args.perturbed:
    controllers["nominal"] = ip.robust_mpc("industrial_poly_nominal", robust_horizon=0)
  for label, mpc in controllers.items():
    start = time.perf_counter()
    mpc(ip.initial_state())  # the first call builds the controller (trace, generate, compile) or loads it
    print(f"{label}: build (or load from the cache) and first solve: {time.perf_counter() - start:.1f} s")
    mpc.reset()
    cl = simulate(mpc, lambda x, u: ip.plant_step(x, u, p_plant), ip.initial_state(), args.steps)
    print(cl.summary())
    print(f"{label}: product at the end {cl.x[-1, 2]:.1f} kg, worst temperature excursion {excursion(cl.x):.4f} K")
    name = "industrial_poly" + ("_nominal" if label == "nominal" else "")
    print(f"plot: {plot_closed_loop(cl, args.out / f'{name}.png', ip.DT * 3600, ip.STATE_NAMES)}")


if __name__ == "__main__":
  main()
