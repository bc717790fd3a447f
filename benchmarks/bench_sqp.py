"""SQP benchmark: anvil's SQPFunction on the P2 cart-pole swing-up NLP vs CasADi's IPOPT and sqpmethod, in one run.

Run from the repository root (well under a minute with a warm anvil cache; a cold build adds the C++ compile):

  .venv/bin/python -m benchmarks.bench_sqp              # anvil build on a fresh, empty cache (cold)
  .venv/bin/python -m benchmarks.bench_sqp --warm       # anvil build on the user's cache (warm if built before)
  .venv/bin/python -m benchmarks.bench_sqp --solves 5   # median of 5 solves instead of 3

The NLP (anvil.problems.shooting): N = 50 stages of one RK4 step (h = 0.05 s) of the cart-pole,
w = [x0, u0, x1, u1, ..., x_N], x_init = [0, pi, 0, 0], defects g(w) = 0 (x0 = x_init, x_{k+1} = F(x_k, u_k)),
|u| <= 20, |xc| <= 2, x_N = 0, stage cost x'Qx + R u^2 (Q = diag(1, 1, 0.1, 0.1), R = 0.01), no terminal cost.
Initial guess: states interpolated linearly from x_init to 0, inputs 0.

anvil: exactly tests/integration/test_sqp.py::test_p2_cartpole_swing_up, with each of its QP solvers: OSQP, the
sparse interior point (the default; general sparse QPs: no stage structure used) and the Riccati interior point
(the NLP's multiple-shooting stage layout). Build time = construction of the
SQPFunction plus its first call (trace, derive, render, compile, load, solve), in process. CasADi: the same NLP
unrolled over the stages with SX (the same model code through a CasADi backend), solved with `nlpsol('ipopt')`
(exact Hessian) and `nlpsol('sqpmethod')` with qpsol 'qrqp'. Solve times are wall clock from Python, median of
`--solves` calls after the first. Targets are printed with PASS/MISS; they are informational and the script exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil.problems import shooting
from anvil.problems.backend import casadi_backend
from benchmarks.common import casadi_solver, load_casadi, verdict

ROOT = Path(__file__).resolve().parent.parent

N = 50
X_INIT = np.array([0.0, np.pi, 0.0, 0.0])
TARGET_ITERATIONS = 40
TARGET_RATIO = 0.5  # anvil solve time / IPOPT solve time
SQPMETHOD_OPTIONS: dict[str, Any] = {
  "qpsol": "qrqp",
  "qpsol_options": {"print_iter": False, "print_header": False, "error_on_fail": False},
  "print_time": False,
  "print_header": False,
  "print_iteration": False,
  "max_iter": 500,
  "convexify_strategy": "eigen-clip",
}


@dataclass
class Result:
  """One solver's line of the table."""

  solver: str
  status: str
  iterations: int
  objective: float
  solve_ms: float


@dataclass
class Problem:
  """Bounds and initial guess of the swing-up NLP."""

  size: int
  lbx: np.ndarray
  ubx: np.ndarray
  lbg: np.ndarray
  ubg: np.ndarray
  w0: np.ndarray


def problem(n: int = N) -> Problem:
  x_init, lbx, ubx, w0 = shooting.swing_up(n)
  assert np.array_equal(x_init, X_INIT)
  return Problem(shooting.size(n), lbx, ubx, np.zeros(4 * n + 4), np.zeros(4 * n + 4), w0)


def median_ms(fn: Callable[[], object], solves: int) -> float:
  """Median wall-clock time of `solves` calls, in ms."""
  times = []
  for _ in range(solves):
    t0 = time.perf_counter()
    fn()
    times.append((time.perf_counter() - t0) * 1e3)
  return statistics.median(times)


# *** anvil ***


#: The QP solvers of anvil's rows.
QP_SOLVERS = ("osqp", "sparse_ipm", "riccati")


def run_anvil(prob: Problem, solves: int, qp: str = "osqp") -> tuple[Result, float, str]:
  """anvil's SQPFunction with its QPs by `qp` (QP_SOLVERS): the result line, the build time (construction + first
  call) in s and a QP summary."""
  import anvil as av
  from anvil import Arg
  from anvil.mpc import shooting_layout
  from anvil.qp import OSQPOptions, RiccatiOptions, SparseIPMOptions
  from anvil.sqp import SQPFunction, SQPOptions

  assert shooting.size(N) == prob.size
  t0 = time.perf_counter()
  name = "swing_up" if qp == "osqp" else f"swing_up_{qp}"
  f = av.NumericalFunction(f"{name}_cost", lambda w, x0: shooting.stage_cost(w, N), (Arg(prob.size), Arg(4)))
  g = av.NumericalFunction(f"{name}_defects", lambda w, x0: shooting.defects(w, x0, N), (Arg(prob.size), Arg(4)))
  qp_options = {"osqp": OSQPOptions(), "sparse_ipm": SparseIPMOptions(), "riccati": RiccatiOptions()}[qp]
  solver = SQPFunction(name, f, g, SQPOptions(qp=qp_options), stages=shooting_layout(N, 4, 1))
  solve = lambda: solver(prob.w0, X_INIT, prob.lbx, prob.ubx, prob.lbg, prob.ubg)
  res = solve()
  build_s = time.perf_counter() - t0
  ms = median_ms(solve, solves)
  qp_its = res.stats["qp_iterations"]
  times = {k: res.stats[f"time_{k}"] * 1e3 for k in ("evaluation", "qp_update", "qp_solve", "line_search")}
  qp_note = (f"{int(qp_its.sum())} QP iterations in all, at most {int(qp_its.max())} in one SQP iteration\n"
             f"  anvil time inside the generated C++ (its own timers): {sum(times.values()):.2f} ms = "
             + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))  # fmt: skip
  label = {"osqp": "OSQP", "sparse_ipm": "sparse IPM", "riccati": "Riccati QP"}[qp]
  return Result(f"anvil SQPFunction, {label}", res.status, res.iterations, float(res.f), ms), build_s, qp_note


# *** CasADi ***


def casadi_nlp(ca: Any, n: int = N) -> dict[str, Any]:
  """The swing-up NLP in SX, unrolled over the stages, with x_init as the parameter."""
  from anvil.problems import cartpole

  b = casadi_backend(ca)
  w = ca.SX.sym("w", 5 * n + 4)
  p = ca.SX.sym("p", 4)
  q = np.diag(cartpole.Q)
  cost = 0
  defects = [w[0:4] - p]
  for k in range(n):
    x, u = w[5 * k : 5 * k + 4], w[5 * k + 4 : 5 * k + 5]
    cost += ca.dot(x * x, ca.DM(q)) + cartpole.R * u * u
    defects.append(w[5 * (k + 1) : 5 * (k + 1) + 4] - cartpole.step(x, u, b))
  return {"x": w, "p": p, "f": cost, "g": ca.vertcat(*defects)}


def run_casadi(ca: Any, prob: Problem, solves: int, notes: list[str]) -> list[Result]:
  nlp = casadi_nlp(ca)
  ipopt_opts = {"ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes"}
  sqp_opts = dict(SQPMETHOD_OPTIONS)
  solvers = [("CasADi IPOPT", "ipopt", ipopt_opts), ("CasADi sqpmethod+qrqp", "sqpmethod", sqp_opts)]
  out = []
  for label, plugin, opts in solvers:
    solver = casadi_solver(ca, f"bench_{plugin}", plugin, nlp, opts, notes)
    args = dict(x0=prob.w0, p=X_INIT, lbx=prob.lbx, ubx=prob.ubx, lbg=prob.lbg, ubg=prob.ubg)
    sol = solver(**args)  # first solve: warm-up, not timed
    stats = solver.stats()
    ms = median_ms(lambda s=solver, a=args: s(**a), solves)
    out.append(Result(label, str(stats["return_status"]), int(stats["iter_count"]), float(sol["f"]), ms))
  return out


# *** main ***


def print_results(results: list[Result], ipopt_ms: float | None) -> None:
  head = ("solver", "status", "iterations", "objective", "solve time [ms]", "ratio to IPOPT")
  rows = [head] + [
    (r.solver, r.status, str(r.iterations), f"{r.objective:.6f}", f"{r.solve_ms:.2f}",
     f"{r.solve_ms / ipopt_ms:.3f}" if ipopt_ms else "-")
    for r in results
  ]  # fmt: skip
  w = [max(len(row[i]) for row in rows) for i in range(len(head))]
  for i, row in enumerate(rows):
    print("  " + " | ".join(c.ljust(w[j]) if j < 2 else c.rjust(w[j]) for j, c in enumerate(row)))
    if i == 0:
      print("  " + "-+-".join("-" * x for x in w))


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--solves", type=int, default=3, help="timed solves per solver (median)")
  ap.add_argument("--warm", action="store_true", help="build anvil on the user's cache instead of an empty one")
  args = ap.parse_args()

  tmp = None
  if not args.warm:
    tmp = tempfile.TemporaryDirectory(prefix="bench_sqp_cache_")
    os.environ["ANVIL_CACHE_DIR"] = tmp.name
  prob = problem()
  notes: list[str] = []

  runs = [run_anvil(prob, args.solves, qp) for qp in QP_SOLVERS]
  anvil_results = [res for res, _, _ in runs]
  results = list(anvil_results)
  ca = load_casadi()
  if ca is None:
    notes.append("casadi not installed: CasADi rows and the IPOPT ratio skipped")
  else:
    results += run_casadi(ca, prob, args.solves, notes)
  ipopt_ms = next((r.solve_ms for r in results if r.solver == "CasADi IPOPT"), None)

  print(f"P2 cart-pole swing-up NLP, N = {N}: {prob.size} variables, {4 * N + 4} equality constraints")
  print(f"casadi {ca.__version__ if ca else 'missing'}; solve times: median of {args.solves} calls from Python\n")
  print_results(results, ipopt_ms)
  cache = "warm" if args.warm else "cold, empty"
  for res, seconds, note in runs:
    print(f"\n  {res.solver}: build (construction + first call, {cache} cache): {seconds:.2f} s")
    print(f"  {res.solver}: QP work: {note}")
  for note in notes:
    print(f"  note: {note}")

  print("\ntargets:")
  for res in anvil_results:
    print(f"  {res.solver}: iterations {res.iterations} <= {TARGET_ITERATIONS}: "
          f"{verdict(res.iterations, TARGET_ITERATIONS)}")  # fmt: skip
    if ipopt_ms:
      ratio = res.solve_ms / ipopt_ms
      print(f"  {res.solver}: solve time {ratio:.3f} x IPOPT <= {TARGET_RATIO}: {verdict(ratio, TARGET_RATIO)}")
    else:
      print(f"  {res.solver}: solve time <= {TARGET_RATIO} x IPOPT: n/a (no casadi)")
  if tmp is not None:
    tmp.cleanup()
  return 0


if __name__ == "__main__":
  sys.exit(main())
