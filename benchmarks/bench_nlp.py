"""NLP benchmark: SQPFunction on NLPs written the natural way (a Python loop over stages) and batched, and on
non-OCP sparse NLPs, with no stage layout given: the default QP routing ("auto": the Riccati interior point where the
stage structure is detected, else the sparse interior point) and each general QP solver forced (no structure used),
against CasADi's IPOPT on the same NLPs.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_nlp                      # swing-up N = 50 (five forms), Bratu, chain, COPS
  .venv/bin/python -m benchmarks.bench_nlp --forms batched      # the batched swing-up only
  .venv/bin/python -m benchmarks.bench_nlp --qp auto            # the default routing only

The swing-up needs N >= 50 (h = 0.05 s): with a shorter horizon x_N = 0 cannot be reached within |u| <= 20 and the
NLP is infeasible (IPOPT: Infeasible_Problem_Detected at N = 20).

NLPs:
- swing-up, loop: the P2 cart-pole swing-up of anvil.problems.shooting built as a CasADi user writes it,
  `for k in range(N)`: one cart-pole step per stage, concatenated, and the cost summed stage by stage (a graph unrolled
  over the stages, which anvil builds as straight-line code, its derivatives derived on scalar expressions);
- swing-up, batched: the same NLP with the stages batched (anvil.problems.shooting.defects);
- swing-up, terminal: the loop with x_N = 0 written as constraint rows after the defects (as a user appends the
  terminal condition) instead of bounds on x_N; bounds: that with x_0 fixed by its bounds (lbw = ubw = x0, no rows);
  opti: as Opti writes it (w = [X; U], defects F(x_k, u_k) - x_{k+1}, x_N = 0 rows, then x_0 - x_init);
- hanging chain (COPS): n links of fixed length between fixed ends at least potential energy; nonconvex equality
  constraints, banded Jacobian, no stage structure;
- elastic-plastic torsion (COPS): a convex QP with bounds alone on an n x n grid (n^2 variables);
- minimal surface with an obstacle (COPS): convex, nonlinear, bounds alone on an n x n grid;
- Bratu: min sum (u_i - 1)^2 / n s.t. u_{i-1} - 2 u_i + u_{i+1} + h^2 lam exp(u_i) = 0 (lam = 1, u_0 = u_{n+1} = 0) and
  0 <= u_i <= 0.5: a discretized boundary-value problem (tridiagonal Jacobian, diagonal Hessian) with active bounds.

anvil: cold build (construction + first call on an empty cache: trace, derive, schedule, render, compile), warm build
(the same again by new objects on that cache: trace and derive, the library found) and the median solve time of
`--solves` calls, with no stage layout given ("auto: riccati" where the routing found one; sparse_ipm and osqp solve
general sparse QPs). CasADi: the nlpsol construction (its derivatives), gcc -O3 on the C code it generates for the
NLP's functions (what compiling them costs a user), and IPOPT on the same NLP in SX (exact Hessian), median solve
time. Informational; exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil.problems import cartpole, shooting
from anvil.problems.backend import casadi_backend
from benchmarks.bench_sqp import median_ms
from benchmarks.common import anvil_cache, casadi_solver, load_casadi

QP_SOLVERS = ("auto", "sparse_ipm", "osqp")
FORMS = ("loop", "batched", "terminal", "bounds", "opti")


@dataclass
class NLP:
  """One NLP: its size, its functions for anvil (Tensor code) and CasADi (SX), its bounds and starting point."""

  name: str
  n: int
  m: int
  cost: Callable[[Any, Any], Any]
  constraints: Callable[[Any, Any], Any] | None
  casadi: Callable[[Any], dict[str, Any]]
  p: np.ndarray
  lbx: np.ndarray
  ubx: np.ndarray
  lbg: np.ndarray
  ubg: np.ndarray
  x0: np.ndarray


def swing_up(horizon: int, form: str) -> NLP:
  """The swing-up in one of the FORMS: its defects written as a loop over the stages ("loop", w = [x_0, u_0, x_1,
  ...], x_0 - x_init the first rows, x_N = 0 as bounds), batched ("batched"), the loop with x_N = 0 as constraint rows
  after the defects ("terminal"), that with x_0 fixed by its bounds instead of rows ("bounds"), or as Opti writes it
  ("opti": w = [X; U], defects F - x_{k+1}, x_N = 0 as rows, x_0 - x_init the last rows)."""
  from tinygrad import Tensor

  nx, st, opti = shooting.NX, shooting.STAGE, form == "opti"
  rows_x0, rows_xN = form != "bounds", form in ("terminal", "bounds", "opti")
  # w's entries in the loop's (interleaved) order: Opti's [X; U] takes the states, then the inputs
  states, inputs = np.add.outer(st * np.arange(horizon + 1), np.arange(nx)).ravel(), st * np.arange(horizon) + nx
  order = np.r_[states, inputs] if opti else np.arange(shooting.size(horizon))

  def state(w: Any, k: int) -> Any:
    return w[nx * k : nx * (k + 1)] if opti else w[st * k : st * k + nx]

  def stage(w: Any, k: int) -> tuple[Any, Any]:
    u = w[nx * (horizon + 1) + k : nx * (horizon + 1) + k + 1] if opti else w[st * k + nx : st * (k + 1)]
    return state(w, k), u

  def cost_of(w: Any, square_sum: Callable[[Any, Any], Any]) -> Any:
    total = 0.0
    for k in range(horizon):
      x, u = stage(w, k)
      total = total + square_sum(x, shooting.Q_DIAG) + cartpole.R * square_sum(u, np.ones(1))
    return total

  def rows_of(w: Any, x_init: Any, step: Callable[[Any, Any], Any]) -> list[Any]:
    defects = [(-1 if opti else 1) * (state(w, k + 1) - step(*stage(w, k))) for k in range(horizon)]
    initial = [state(w, 0) - x_init] if rows_x0 else []
    terminal = [state(w, horizon)] if rows_xN else []
    return defects + terminal + initial if opti else initial + defects + terminal

  def casadi_nlp(ca: Any) -> dict[str, Any]:
    b = casadi_backend(ca)
    w, p = ca.SX.sym("w", shooting.size(horizon)), ca.SX.sym("p", nx)
    cost = cost_of(w, lambda v, weights: ca.dot(v * v, ca.DM(weights)))
    return {"x": w, "p": p, "f": cost, "g": ca.vertcat(*rows_of(w, p, lambda x, u: cartpole.step(x, u, b)))}

  def cost_loop(w: Tensor, x_init: Tensor) -> Tensor:
    return cost_of(w, lambda v, weights: (v * v * Tensor(weights)).sum())

  def defects_loop(w: Tensor, x_init: Tensor) -> Tensor:
    return Tensor.cat(*rows_of(w, x_init, cartpole.step))

  x_init, lbx, ubx, w0 = shooting.swing_up(horizon)
  if rows_xN:
    lbx[st * horizon :], ubx[st * horizon :] = -np.inf, np.inf
  if not rows_x0:
    lbx[:nx] = ubx[:nx] = x_init
  m = nx * (horizon + rows_x0 + rows_xN)
  batched = form == "batched"
  defects = (lambda w, x0: shooting.defects(w, x0, horizon)) if batched else defects_loop
  cost = (lambda w, x0: shooting.stage_cost(w, horizon)) if batched else cost_loop
  return NLP(f"swing_up_{form}_{horizon}", shooting.size(horizon), m, cost, defects, casadi_nlp, x_init, lbx[order],
             ubx[order], np.zeros(m), np.zeros(m), w0[order])  # fmt: skip


def bratu(n: int) -> NLP:
  """The discretized Bratu boundary-value problem as an NLP (module docstring)."""
  h2 = 1.0 / (n + 1) ** 2

  def residual(u: Any, exp: Callable[[Any], Any], pad: Callable[[Any], Any]) -> Any:
    padded = pad(u)
    return padded[:-2] - 2 * u + padded[2:] + h2 * exp(u)

  def constraints(u: Any, p: Any) -> Any:
    return residual(u, lambda v: v.exp(), lambda v: v.pad((1, 1)))

  def casadi_nlp(ca: Any) -> dict[str, Any]:
    u, p = ca.SX.sym("u", n), ca.SX.sym("p", 0)
    g = residual(u, ca.exp, lambda v: ca.vertcat(0, v, 0))
    return {"x": u, "p": p, "f": ca.sumsqr(u - 1) / n, "g": g}

  return NLP(f"bratu_{n}", n, n, lambda u, p: ((u - 1) * (u - 1)).sum() / n, constraints, casadi_nlp, np.zeros(0),
             np.zeros(n), np.full(n, 0.5), np.zeros(n), np.zeros(n), np.zeros(n))  # fmt: skip


def hanging_chain(n: int) -> NLP:
  """The hanging chain (COPS): n links of length 1.5 / n between (0, 0) and (1, 0) (the ends fixed by bounds) at least
  potential energy, min sum y_i s.t. (x_{i+1} - x_i)^2 + (y_{i+1} - y_i)^2 = L^2: nonconvex, no stage structure."""
  length = 1.5 / n

  def links(w: Any) -> Any:
    x, y = w[: n + 1], w[n + 1 :]
    dx, dy = x[1:] - x[:-1], y[1:] - y[:-1]
    return dx * dx + dy * dy

  def casadi_nlp(ca: Any) -> dict[str, Any]:
    w, p = ca.SX.sym("w", 2 * (n + 1)), ca.SX.sym("p", 0)
    return {"x": w, "p": p, "f": ca.sum1(w[n + 1 :]) / n, "g": links(w)}

  lbx, ubx = np.full(2 * (n + 1), -np.inf), np.full(2 * (n + 1), np.inf)
  lbx[[0, n, n + 1, 2 * n + 1]] = ubx[[0, n, n + 1, 2 * n + 1]] = [0.0, 1.0, 0.0, 0.0]
  t = np.linspace(0.0, 1.0, n + 1)
  w0 = np.concatenate([t, -0.6 * np.sin(np.pi * t)])  # a sagging guess of about the chain's length
  g = np.full(n, length**2)
  return NLP(f"hanging_chain_{n}", 2 * (n + 1), n, lambda w, p: w[n + 1 :].sum() / n, lambda w, p: links(w),
             casadi_nlp, np.zeros(0), lbx, ubx, g, g, w0)  # fmt: skip


def _grid(n: int) -> tuple[float, np.ndarray]:
  """(h, X): the mesh width of n x n interior points on the unit square and the x coordinate of the (n + 2) x (n + 2)
  grid with its boundary (row i at y = i h, column j at x = j h)."""
  h = 1.0 / (n + 1)
  return h, np.tile(np.arange(n + 2) * h, (n + 2, 1))


def torsion(n: int, c: float = 5.0) -> NLP:
  """Elastic-plastic torsion (COPS): min 1/2 |grad v|^2 - c v over the unit square on an n x n grid (5-point finite
  differences, v = 0 on the boundary) subject to |v| <= dist(x, boundary): a convex QP with bounds alone."""
  h, _ = _grid(n)
  index = np.arange(n)
  distance = np.minimum.outer(np.minimum(index + 1, n - index), np.minimum(index + 1, n - index)).ravel() * h

  def energy(grid: Any, square_sum: Callable[[Any], Any], total: Any) -> Any:
    dx, dy = grid[:, 1:] - grid[:, :-1], grid[1:, :] - grid[:-1, :]
    return 0.5 * (square_sum(dx) + square_sum(dy)) - c * h * h * total

  def cost(w: Any, p: Any) -> Any:
    return energy(w.reshape(n, n).pad(((1, 1), (1, 1))), lambda d: (d * d).sum(), w.sum())

  def casadi_nlp(ca: Any) -> dict[str, Any]:
    w, p = ca.SX.sym("w", n * n), ca.SX.sym("p", 0)
    grid = ca.SX.zeros(n + 2, n + 2)
    grid[1 : n + 1, 1 : n + 1] = ca.reshape(w, n, n).T
    return {"x": w, "p": p, "f": energy(grid, ca.sumsqr, ca.sum1(w))}

  return NLP(f"torsion_{n * n}", n * n, 0, cost, None, casadi_nlp, np.zeros(0), -distance, distance, np.zeros(0),
             np.zeros(0), np.zeros(n * n))  # fmt: skip


def minimal_surface(n: int) -> NLP:
  """Minimal surface with an obstacle (COPS): min the area of v over the unit square on an n x n grid (its two
  triangles per cell), v = 1 - (2x - 1)^2 on the edges y = 0 and y = 1 and 0 on x = 0 and x = 1, v >= 1 over
  [1/4, 3/4]^2: convex, nonlinear, bounds alone."""
  h, x = _grid(n)
  boundary = np.zeros((n + 2, n + 2))
  boundary[[0, -1], :] = 1.0 - (2.0 * x[0] - 1.0) ** 2
  inner = x[1:-1, 1:-1]
  obstacle = (np.abs(inner - 0.5) <= 0.25) & (np.abs(inner.T - 0.5) <= 0.25)
  lower = np.where(obstacle, 1.0, -np.inf).ravel()

  def area(grid: Any, sqrt: Callable[[Any], Any], total: Callable[[Any], Any]) -> Any:
    low = sqrt(1 + ((grid[:-1, 1:] - grid[:-1, :-1]) ** 2 + (grid[1:, :-1] - grid[:-1, :-1]) ** 2) / h**2)
    high = sqrt(1 + ((grid[1:, 1:] - grid[1:, :-1]) ** 2 + (grid[1:, 1:] - grid[:-1, 1:]) ** 2) / h**2)
    return 0.5 * h * h * (total(low) + total(high))

  def cost(w: Any, p: Any) -> Any:
    from tinygrad import Tensor

    grid = w.reshape(n, n).pad(((1, 1), (1, 1))) + Tensor(boundary)
    return area(grid, lambda v: v.sqrt(), lambda v: v.sum())

  def casadi_nlp(ca: Any) -> dict[str, Any]:
    w, p = ca.SX.sym("w", n * n), ca.SX.sym("p", 0)
    grid = ca.SX(ca.DM(boundary))
    grid[1 : n + 1, 1 : n + 1] = ca.reshape(w, n, n).T
    return {"x": w, "p": p, "f": area(grid, ca.sqrt, lambda v: ca.sum1(ca.sum2(v)))}

  start = np.maximum(np.tile(1.0 - (2.0 * x[0, 1:-1] - 1.0) ** 2, n), np.where(obstacle.ravel(), 1.0, -np.inf))
  return NLP(f"minimal_surface_{n * n}", n * n, 0, cost, None, casadi_nlp, np.zeros(0), lower, np.full(n * n, np.inf),
             np.zeros(0), np.zeros(0), start)  # fmt: skip


@dataclass
class Result:
  """One solver's line of the table (anvil: cold and warm build; CasADi: derive and gcc times)."""

  nlp: str
  solver: str
  status: str
  iterations: int
  objective: float
  solve_ms: float
  build_s: float | None = None
  warm_s: float | None = None
  derive_s: float | None = None
  gcc_s: float | None = None


def run_anvil(nlp: NLP, qp: str, solves: int) -> Result:
  """anvil's SQPFunction on `nlp` with QP solver `qp`: built on an empty cache (cold), then built again by new objects
  of the same names on that cache (warm: tracing and deriving again, the compiled library found)."""
  from anvil.qp import OSQPOptions, SparseIPMOptions
  from anvil.sqp import SQPOptions

  options = SQPOptions(qp={"auto": None, "sparse_ipm": SparseIPMOptions(), "osqp": OSQPOptions()}[qp])
  with tempfile.TemporaryDirectory(prefix="bench_nlp_cache_") as cache, anvil_cache(Path(cache)):
    solve, res, build_s = _build_and_solve(nlp, f"{nlp.name}_{qp}", options)
    _, _, warm_s = _build_and_solve(nlp, f"{nlp.name}_{qp}", options)
    ms = median_ms(solve, solves)
  solver_name = f"auto: {res.stats['qp_solver']}" if qp == "auto" else qp
  return Result(nlp.name, f"anvil, {solver_name}", str(res.status), res.iterations, float(res.f), ms, build_s, warm_s)


def _build_and_solve(nlp: NLP, name: str, options: Any) -> tuple[Callable[[], Any], Any, float]:
  """(a solve, its first result, seconds from construction to the end of the first solve)."""
  import anvil as av
  from anvil.sqp import SQPFunction

  t0 = time.perf_counter()
  args = (av.Arg(nlp.n), av.Arg(nlp.p.size))
  f = av.NumericalFunction(f"{name}_f", nlp.cost, args)
  g = None if nlp.constraints is None else av.NumericalFunction(f"{name}_g", nlp.constraints, args)
  solver = SQPFunction(name, f, g, options)
  solve = lambda: solver(nlp.x0, nlp.p, nlp.lbx, nlp.ubx, nlp.lbg, nlp.ubg)
  res = solve()
  return solve, res, time.perf_counter() - t0


def run_ipopt(ca: Any, nlp: NLP, solves: int, notes: list[str], gcc: bool = True) -> Result:
  """CasADi's IPOPT on the NLP in SX: `derive_s` the nlpsol construction (its derivatives), `gcc_s` compiling the C
  code CasADi generates for the NLP's functions and derivatives with gcc -O3 (what a user compiling them waits)."""
  opts = {"ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes"}
  t0 = time.perf_counter()
  solver = casadi_solver(ca, f"bench_nlp_{nlp.name}", "ipopt", nlp.casadi(ca), opts, notes)
  derive_s = time.perf_counter() - t0
  args = dict(x0=nlp.x0, p=nlp.p, lbx=nlp.lbx, ubx=nlp.ubx, lbg=nlp.lbg, ubg=nlp.ubg)
  sol = solver(**args)
  stats = solver.stats()
  ms = median_ms(lambda: solver(**args), solves)
  return Result(nlp.name, "CasADi IPOPT", str(stats["return_status"]), int(stats["iter_count"]), float(sol["f"]), ms,
                derive_s=derive_s, gcc_s=_gcc_seconds(solver, notes) if gcc else None)  # fmt: skip


def _gcc_seconds(solver: Any, notes: list[str]) -> float | None:
  """Seconds gcc -O3 takes on the C code of the solver's NLP functions (None where that fails)."""
  with tempfile.TemporaryDirectory(prefix="bench_nlp_casadi_") as tmp, contextlib.chdir(tmp):
    try:
      solver.generate_dependencies("nlp.c", {"with_header": False})  # NOTE: CasADi writes it in the working folder
      t0 = time.perf_counter()
      subprocess.run(["gcc", "-O3", "-fPIC", "-shared", "nlp.c", "-o", "nlp.so"], check=True, capture_output=True)
      return time.perf_counter() - t0
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
      notes.append(f"CasADi's C code was not compiled: {e}")
      return None


def print_table(results: list[Result]) -> None:
  ipopt = {r.nlp: r.solve_ms for r in results if r.solver == "CasADi IPOPT"}
  head = ("NLP", "solver", "status", "iterations", "objective", "solve ms", "x IPOPT", "cold build s", "warm build s",
          "CasADi derive s", "gcc -O3 s")  # fmt: skip
  seconds = lambda v: "-" if v is None else f"{v:.1f}" if v >= 1 else f"{v:.2f}"
  rows = [head] + [
    (r.nlp, r.solver, r.status, str(r.iterations), f"{r.objective:.6f}", f"{r.solve_ms:.2f}",
     f"{r.solve_ms / ipopt[r.nlp]:.3f}" if r.nlp in ipopt else "-", seconds(r.build_s), seconds(r.warm_s),
     seconds(r.derive_s), seconds(r.gcc_s))
    for r in results
  ]  # fmt: skip
  widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
  for i, row in enumerate(rows):
    print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    if i == 0:
      print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", type=int, nargs="*", default=[50], help="swing-up horizons N (none: no swing-up)")
  ap.add_argument("--forms", choices=FORMS, nargs="+", default=list(FORMS), help="swing-ups")
  ap.add_argument("--bratu", type=int, default=200, help="Bratu grid points (0: skip)")
  ap.add_argument("--chain", type=int, default=200, help="hanging chain links (0: skip)")
  ap.add_argument("--cops", type=int, default=50, help="torsion and minimal surface on n x n grids (0: skip)")
  ap.add_argument("--qp", choices=QP_SOLVERS, nargs="+", default=list(QP_SOLVERS), help="anvil's QP solvers")
  ap.add_argument("--solves", type=int, default=5, help="timed solves per solver (median)")
  ap.add_argument("--no-gcc", action="store_true", help="skip compiling CasADi's C code (minutes at N >= 50)")
  args = ap.parse_args()

  nlps = [swing_up(n, form) for n in args.sizes for form in args.forms]
  nlps += [bratu(args.bratu)] if args.bratu else []
  nlps += [hanging_chain(args.chain)] if args.chain else []
  nlps += [torsion(args.cops), minimal_surface(args.cops)] if args.cops else []
  ca, notes, results = load_casadi(), [], []
  for nlp in nlps:
    results += [run_anvil(nlp, qp, args.solves) for qp in args.qp]
    if ca is not None:
      results.append(run_ipopt(ca, nlp, args.solves, notes, gcc=not args.no_gcc))
  print(f"casadi {ca.__version__ if ca else 'missing (no IPOPT rows)'}; solve times: median of {args.solves} calls\n")
  print_table(results)
  for note in notes:
    print(f"note: {note}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
