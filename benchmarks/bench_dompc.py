"""do-mpc's examples against anvil's, closed loop, in one run: the robust industrial polymerization and the batch
bioreactor.

Run from the repository root (do-mpc is a benchmark-only dependency: `pip install do-mpc==5.1.2`):

  .venv/bin/python -m benchmarks.bench_dompc                               # both problems, as do-mpc's main.py runs
  .venv/bin/python -m benchmarks.bench_dompc --problem industrial_poly --steps 20
  .venv/bin/python -m benchmarks.bench_dompc --anvil-only                  # without do-mpc

The OCPs are do-mpc 5.1's examples as shipped (anvil.problems.industrial_poly: 10 states, 3 inputs, N = 20 samples of
50 s, maximize the product, input-rate penalty on the scaled inputs, hard temperature bounds, robust over the 9
combinations of delH_R and k_0, robust horizon 1, 100 samples; anvil.problems.batch_bioreactor: 4 states, 1 input,
N = 20 samples of 1 h, nominal, 150 samples). Both tools discretize each sample by Radau collocation of the same
degree (do-mpc: orthogonal collocation on 2 points in 1 element, or 2 for the bioreactor; anvil: `irk` Radau IIA of 2
stages in as many steps: the same equations), start from the same state with u_prev = 0, solve to 1e-8 (IPOPT's tol;
anvil's SQP tol) and close the loop on the same plant, scipy's Radau (rtol 1e-10) at the true parameters. One
difference stays: do-mpc bounds the states at its collocation points too, anvil at the samples. do-mpc is set up
with its API here, with its example's settings (collocation, scaling, bounds, rterm, uncertainty); its step time is
the wall clock of `make_step` (IPOPT with MUMPS, warm-started from the previous solution as do-mpc does); anvil's is the
wall clock of the call from Python, and the C++ solve time. Both include what each does per sample besides solving.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anvil.mpc import AutoScaling, MPCFunction, MPCOptions
from anvil.problems import batch_bioreactor as bb
from anvil.problems import industrial_poly as ip
from anvil.problems.backend import casadi_backend
from anvil.sqp import SQPOptions

TOL = 1e-8


@dataclass(frozen=True)
class Case:
  """One of do-mpc's examples: its model (the problem module), anvil's controller, do-mpc's settings and the report."""

  title: str
  module: Any
  steps: int
  controller: Callable[[MPCOptions], MPCFunction]
  p: np.ndarray | None  # anvil's call parameter (None: the scenarios give it)
  x0: np.ndarray
  elements: int  # do-mpc's collocation_ni
  scaling: dict[tuple[str, str], float]
  uncertainty: (
    dict[str, np.ndarray] | None
  )  # do-mpc's set_uncertainty_values, n_robust 1 (None: the plant's, n_robust 0)
  product: int  # the state the batch maximizes
  unit: str
  auto_scaled: Callable[[MPCOptions], MPCFunction] | None = None  # anvil's controller scaled by AutoScaling


CASES = {
  "industrial_poly": Case(
    "robust industrial polymerization, 9 scenarios, robust horizon 1", ip, 100,
    lambda options: ip.robust_mpc("bench_industrial_poly", options=options), None, ip.initial_state(), 1,
    {**{("_x", n): f for n, f in zip(ip.STATE_NAMES, ip.X_SCALE, strict=True) if f != 1.0}, ("_u", "m_dot_f"): 100.0},
    {"delH_R": ip.DELH_R_VALUES, "k_0": ip.K_0_VALUES}, 2, "kg",
    lambda options: ip.robust_mpc("bench_industrial_poly_auto", options=options,
                                  scaling=AutoScaling(x=ip.initial_state())),
  ),
  "batch_bioreactor": Case(
    "batch bioreactor, nominal", bb, bb.STEPS, lambda options: bb.nominal_mpc("bench_batch_bioreactor", options),
    bb.P_TRUE, bb.X0, 2, {}, None, 2, "mol/l",
  ),
}  # fmt: skip


def anvil_loop(case: Case, steps: int, controller: Callable[[MPCOptions], MPCFunction]) -> dict[str, Any]:
  """anvil's MPC (made by `controller`) in closed loop on the plant."""
  begin = time.perf_counter()
  mpc = controller(MPCOptions(sqp=SQPOptions(max_iter=100, tol=TOL)))
  x = case.x0
  mpc(x, p=case.p)
  setup = time.perf_counter() - begin
  mpc.reset()
  xs, us, walls, solves, statuses = [x], [], [], [], []
  for _ in range(steps):
    start = time.perf_counter()
    sol = mpc(x, p=case.p)
    walls.append(time.perf_counter() - start)
    solves.append(sol.solve_time)
    statuses.append(str(sol.status))
    us.append(sol.u0)
    x = case.module.plant_step(x, sol.u0)
    xs.append(x)
  return {"x": np.array(xs), "u": np.array(us), "wall": np.array(walls), "solve": np.array(solves),
          "statuses": statuses, "setup": setup}  # fmt: skip


def dompc_controller(case: Case) -> Any:
  """do-mpc's MPC of the case, set up with its API (its example's settings)."""
  import casadi as ca
  import do_mpc

  m = case.module
  model = do_mpc.model.Model("continuous", "SX")
  x = ca.vertcat(*(model.set_variable("_x", name) for name in m.STATE_NAMES))
  u = ca.vertcat(*(model.set_variable("_u", name) for name in m.INPUT_NAMES))
  names = ("delH_R", "k_0") if m is ip else ("Y_x", "S_in")
  p = ca.vertcat(*(model.set_variable("_p", name) for name in names))
  rates = m.ode(x, u, p, casadi_backend(ca))
  for i, name in enumerate(m.STATE_NAMES):
    model.set_rhs(name, rates[i])
  model.setup()
  mpc = do_mpc.controller.MPC(model)
  mpc.settings.n_horizon, mpc.settings.n_robust, mpc.settings.open_loop = m.HORIZON, int(bool(case.uncertainty)), 0
  mpc.settings.t_step, mpc.settings.state_discretization = m.DT, "collocation"
  mpc.settings.collocation_type, mpc.settings.collocation_deg = "radau", 2
  mpc.settings.collocation_ni = case.elements
  mpc.settings.store_full_solution = False
  mpc.settings.nlpsol_opts = {"ipopt.tol": TOL}
  mpc.settings.supress_ipopt_output()
  product = model.x[m.STATE_NAMES[case.product]]
  mpc.set_objective(mterm=-product, lterm=-product)
  rterm = ip.R_TERM if m is ip else np.array([bb.R_TERM])
  mpc.set_rterm(**dict(zip(m.INPUT_NAMES, rterm.tolist(), strict=True)))
  (x_lo, x_hi), (u_lo, u_hi) = m.bounds()
  sides = (("lower", x_lo, "_x", m.STATE_NAMES), ("upper", x_hi, "_x", m.STATE_NAMES),
           ("lower", u_lo, "_u", m.INPUT_NAMES), ("upper", u_hi, "_u", m.INPUT_NAMES))  # fmt: skip
  for bound, values, kind, labels in sides:
    for name, value in zip(labels, values, strict=True):
      if np.isfinite(value):
        mpc.bounds[bound, kind, name] = value
  for (kind, name), factor in case.scaling.items():
    mpc.scaling[kind, name] = factor
  values = case.uncertainty or dict(zip(names, ([v] for v in m.P_TRUE), strict=True))
  mpc.set_uncertainty_values(**values)
  mpc.setup()
  mpc.x0 = case.x0
  mpc.set_initial_guess()
  return mpc


def dompc_loop(case: Case, steps: int) -> dict[str, Any]:
  """do-mpc's MPC in closed loop on the same plant."""
  begin = time.perf_counter()
  mpc = dompc_controller(case)
  setup = time.perf_counter() - begin
  state, xs, us, walls, statuses = case.x0, [case.x0], [], [], []
  for _ in range(steps):
    start = time.perf_counter()
    u0 = np.asarray(mpc.make_step(state)).ravel()
    walls.append(time.perf_counter() - start)
    statuses.append(str(mpc.solver_stats["return_status"]))
    us.append(u0)
    state = case.module.plant_step(state, u0)
    xs.append(state)
  return {"x": np.array(xs), "u": np.array(us), "wall": np.array(walls), "solve": np.array(walls),
          "statuses": statuses, "setup": setup}  # fmt: skip


def row(case: Case, name: str, run: dict[str, Any], reference: dict[str, Any] | None) -> str:
  """One table row: the product at the batch's end, the worst state-bound violation over the run, the statuses, the
  per-step times (median / p95, ms) and their ratio to the reference's, the solve time, and the set-up time."""
  x = run["x"]
  (x_lo, x_hi), _ = case.module.bounds()
  violation = max(float(np.max(x - x_hi)), float(np.max(x_lo - x)), 0.0)
  counts = {s: run["statuses"].count(s) for s in sorted(set(run["statuses"]))}
  ms = 1e3 * run["wall"]
  ratio = "" if reference is None else f"{np.median(run['wall']) / np.median(reference['wall']):.3f}x"
  return (
    f"| {name} | {x[-1, case.product]:.4g} {case.unit} | {violation:.2e} | {counts} | {np.median(ms):.2f} / "
    f"{np.percentile(ms, 95):.2f} ms | {ratio} | {1e3 * np.median(run['solve']):.2f} ms | {run['setup']:.1f} s |"
  )


def main() -> None:
  """Run the closed loops and print a table per problem."""
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--problem", choices=[*CASES, "all"], default="all")
  parser.add_argument("--steps", type=int, default=None, help="closed-loop samples (default: do-mpc's main.py's)")
  parser.add_argument("--anvil-only", action="store_true", help="leave do-mpc out")
  args = parser.parse_args()
  for key in CASES if args.problem == "all" else (args.problem,):
    case = CASES[key]
    steps = args.steps or case.steps
    dompc = None if args.anvil_only else dompc_loop(case, steps)
    ours = anvil_loop(case, steps, case.controller)
    auto = None if case.auto_scaled is None else anvil_loop(case, steps, case.auto_scaled)
    print(f"\n{case.title}, {steps} samples, tol {TOL:g}")
    print(
      "| | product at the end | worst state-bound violation | statuses | per step (median / p95) | ratio to "
      "do-mpc | solve (median) | set-up |"
    )
    print("|---|--:|--:|---|--:|--:|--:|--:|")
    if dompc is not None:
      print(row(case, "do-mpc 5.1.2 (IPOPT, MUMPS)", dompc, None))
    print(row(case, "anvil (SQP, Riccati)", ours, dompc))
    if auto is not None:
      print(row(case, "anvil, AutoScaling at x0", auto, dompc))
    if dompc is not None:
      print(f"max |u_anvil - u_do-mpc| over the run, per input: {np.abs(ours['u'] - dompc['u']).max(axis=0)}")


if __name__ == "__main__":
  main()
