"""Chain-of-masses benchmark (P4, anvil.problems.chain): anvil's MPC controllers per closed-loop step and per build,
against CasADi's sqpmethod and IPOPT on the same NLP, in one run.

Run from the repository root (an anvil controller's cold build takes 5-10 s at nx = 9 ... 21):

  .venv/bin/python -m benchmarks.bench_chain                                 # n_mass 3, every controller
  .venv/bin/python -m benchmarks.bench_chain --sizes 3 5 --controllers sqp gn rti
  .venv/bin/python -m benchmarks.bench_chain --sizes 5 --tol 1e-6                 # acados's default tolerance
  .venv/bin/python -m benchmarks.bench_chain --sizes 5 --controllers rti rti_unrolled  # stage-wise vs unrolled
  .venv/bin/python -m benchmarks.bench_chain --sizes 5 8 --condensing 1 3 6      # the stage QPs partially condensed
  .venv/bin/python -m benchmarks.bench_chain --sizes 5 8 --fma                       # and built with ANVIL_FMA=1
  .venv/bin/python -m benchmarks.bench_chain --sqpmethod-qp qpoases --sqpmethod-primal-start  # sqpmethod as configured
  .venv/bin/python -m benchmarks.bench_chain --sizes 3 5 --acados /path/to/acados/install  # acados in the same run
  .venv/bin/python -m benchmarks.bench_chain --sizes 3 7 --tol 1e-6 --acados avx=/opt/acados-avx generic=/opt/acados-g
  .venv/bin/python -m benchmarks.bench_chain --sizes 5 --N 20 --Ts 0.4               # another horizon

Controllers: sqp (full SQP, exact Hessian), gn (full SQP, Gauss-Newton), rti (real-time iteration, Gauss-Newton;
rti_qp: the same with its QP solved at every step, as acados's RTI);
each also as <name>_unrolled, whose derivatives differentiate the NLP as one graph instead of stage by stage from the
ODE (MPCOptions(integrator_derivatives=False)), for a same-run comparison.
Build: construction and first call on an empty cache (cold), then both again in the same process (warm); the cold
build's seconds per stage (trace+derive, schedule, render, compile, summed over the controller's functions, from the
`anvil` log; "rest": what the log does not count, mostly schedule and render in forked workers). Per step: the C++
solve time of the closed-loop calls (median, p95; the evaluation and QP shares from the SQP's own timers), the mean
SQP iterations and the mean interior-point iterations per step (all its QPs). Closed-loop cost: the sum of the stage
costs; the full-SQP controllers' against IPOPT's closed loop on the same NLP (relative difference; target 1e-6).
CasADi: nlpsol ipopt and sqpmethod (qrqp, or --sqpmethod-qp; exact Hessian), each warm-started from its previous
solution shifted by one stage (sqpmethod: primal and dual, or primal only with --sqpmethod-primal-start); time = the
solver's t_wall_total. --tol sets the SQP tolerance of anvil's controllers (a call-time
argument) and sqpmethod's tol_pr and tol_du alike (default anvil's 1e-8; acados's defaults are 1e-6); IPOPT keeps
its settings (the reference).

acados (--acados, installed acados builds, each LABEL=PREFIX, and casadi; benchmarks.acados_chain): the same OCP in
the same run, each controller at its fastest configuration (HPIPM SPEED, warm-started and shifted primal and dual,
a full SQP's first QP from the NLP's multipliers; the partial condensing and an exact Hessian's regularization
swept), at the same tolerance --tol, and each anvil controller's median against its acados counterparts'. Timing is
the same on both sides: --repeats closed loops (default 5), each step's least time over them, then the median over
the steps. anvil's RTI skips its QP where the shifted guess already meets the tolerance; acados's always solves one.

Targets (issue 14): at nx = 9 and 21, per step at or below acados's best configuration measured in issue 14,
expressed against sqpmethod in the same run (0.093 / 0.045 / 0.041 x sqpmethod for sqp / gn / rti at nx = 9, 0.071 /
0.029 / 0.014 x at nx = 21), and also against IPOPT in the same run (acados's time x IPOPT here / IPOPT there); each
yardstick's drift (its time here over the issue's) is printed beside them. IPOPT's iterations do not depend on the
warm start's multipliers, sqpmethod's do: its steps converge in 0.2 iterations at nx = 9 here, and its times here are
a twelfth to a fifth of the issue's at nx = 9 and two fifths at nx = 21 while IPOPT's are 0.6-1.2x; started from the
primal solution alone it takes 1.1 iterations a step at nx = 9 and 40x (qrqp) to 150x (qpoases) the time, so its
time per step depends on a configuration the issue does not give. Targets are printed with
PASS/MISS; they are informational and the script exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anvil.codegen.module import toposort
from anvil.mpc import MPCFunction, MPCOptions
from anvil.mpc.ode import OdeContext, OdeDerivatives
from anvil.problems import chain
from anvil.qp import RiccatiOptions
from anvil.qp.riccati import RiccatiQP
from anvil.sqp import SQPOptions
from benchmarks import acados_chain
from benchmarks.bench_riccati import iteration_flops
from benchmarks.common import (
  STAGES,
  StageRecorder,
  casadi_solver,
  environment,
  load_casadi,
  shift,
  stage_seconds,
  verdict,
)

CONTROLLERS = {
  "sqp": MPCOptions(),
  "gn": MPCOptions(hessian="gauss_newton"),
  "rti": MPCOptions(hessian="gauss_newton", mode="rti"),
}
#: The same controllers with the NLP differentiated as one graph (the integrator's steps unrolled in the derivatives'
#: code), for a same-run comparison with the stage-wise derivatives (MPCOptions.integrator_derivatives).
CONTROLLERS |= {f"{k}_unrolled": dataclasses.replace(v, integrator_derivatives=False) for k, v in CONTROLLERS.items()}
#: The real-time iteration with its QP solved at every step, as acados's always is (called with a tolerance no shifted
#: guess meets: the plain rti skips the QP where the guess already meets the SQP tolerance).
CONTROLLERS["rti_qp"] = CONTROLLERS["rti"]
ALWAYS_SOLVE_TOL = 1e-300
DEFAULT_CONTROLLERS = ("sqp", "gn", "rti", "rti_qp")
#: Issue 14's measurement, by nx: acados's best per-step median per controller, and CasADi's sqpmethod and IPOPT per
#: step in the same run (ms). The targets scale acados's times by a CasADi solver's time in this run against that one.
ISSUE_MS = {
  9: {"sqp": 1.27, "gn": 0.61, "rti": 0.56, "CasADi sqpmethod": 13.6, "CasADi IPOPT": 93.0},
  21: {"sqp": 7.3, "gn": 3.0, "rti": 1.45, "CasADi sqpmethod": 103.0, "CasADi IPOPT": 518.0},
}
YARDSTICKS = ("CasADi sqpmethod", "CasADi IPOPT")
#: The horizon and sampling time of issue 14's measurement (its targets hold for that OCP only).
ISSUE_OCP = (chain.HORIZON, chain.TS)


def acados_loops(prefix: Path, label: str, n_mass: int, kinds: list[str], steps: int, tol: float,
                 repeats: int) -> list[Loop]:  # fmt: skip
  """acados's closed loops on the same OCP (benchmarks.acados_chain) with the build at `prefix`: each controller's
  fastest configuration, at the SQP tolerance `tol`, each step's least time over `repeats` closed loops."""
  kinds = [k for k in kinds if k in acados_chain.CONTROLLERS]
  best = acados_chain.best_loops(prefix, n_mass, kinds, steps, repeats, tol)
  loops = []
  for kind, lp in best.items():
    if lp is None:
      continue
    statuses = {"status 0": steps - lp.failures} | ({"failed": lp.failures} if lp.failures else {})
    loops.append(Loop(f"acados{label} {kind}", chain.state_size(n_mass), lp.seconds, lp.sqp_iterations, lp.cost,
                      qp=lp.qp_seconds, statuses=statuses, qp_iterations=lp.qp_iterations,
                      note=lp.configuration))  # fmt: skip
  return loops


def acados_lines(loops: list[Loop]) -> list[str]:
  """Each anvil controller's median against each acados build's same controller in the same run (the issue's target,
  on this machine)."""
  here = {lp.name: float(np.median(lp.times)) * 1e3 for lp in loops}
  lines = []
  for lp in loops:
    if not lp.name.startswith("anvil "):
      continue
    kind = lp.name.split()[1]  # the controller, whatever its variant (M=..., FMA)
    for theirs_name, theirs in here.items():
      if theirs_name.startswith("acados") and theirs_name.endswith(f" {kind.removesuffix('_qp')}"):
        ms, qp = here[lp.name], per_iteration(lp, loops, theirs_name)
        lines.append(f"  nx {lp.nx} {lp.name} {ms:.3f} <= {theirs_name} {theirs:.3f} ms (same run, "
                     f"{ms / theirs:.2f}x): {verdict(ms, theirs)}; {qp}")  # fmt: skip
  return lines


def per_iteration(mine: Loop, loops: list[Loop], theirs_name: str) -> str:
  """Each side's time per interior-point iteration (its QPs' time over the run, condensing included, over their
  iterations): anvil's Riccati interior point against HPIPM at acados's fastest condensing."""
  theirs = next(lp for lp in loops if lp.name == theirs_name)
  us = [1e6 * lp.qp.sum() / lp.qp_iterations.sum() if lp.qp_iterations.sum() else np.nan for lp in (mine, theirs)]
  return f"per QP iteration {us[0]:.1f} vs {us[1]:.1f} us ({us[0] / us[1]:.2f}x)"


def target_lines(loops: list[Loop]) -> list[str]:
  """Each anvil controller's median against acados's time in issue 14 scaled by each yardstick's time here over
  there (sqpmethod's is the issue's stated ratio; IPOPT's iterations do not depend on a warm start's duals, which
  sqpmethod's do), and each yardstick's drift (here / there: a machine's speed moves both alike)."""
  issue = ISSUE_MS.get(loops[0].nx)
  if issue is None or (chain.HORIZON, chain.TS) != ISSUE_OCP:
    return []
  here = {lp.name: float(np.median(lp.times)) * 1e3 for lp in loops}
  drift = ", ".join(f"{y} {here[y]:.1f} / {issue[y]:.1f} ms ({here[y] / issue[y]:.2f}x)" for y in YARDSTICKS)
  lines = [f"  nx {loops[0].nx} yardsticks here / in issue 14: {drift}"]
  for lp in loops:
    kind = lp.name.removeprefix("anvil ")
    if kind == lp.name or kind not in issue:
      continue
    verdicts, ms = [], here[lp.name]
    for y in YARDSTICKS:
      limit = issue[kind] * here[y] / issue[y]
      verdicts.append(f"by {y.removeprefix('CasADi ')} {ms:.3f} <= {limit:.3f} ms: {verdict(ms, limit)}")
    lines.append(f"  nx {lp.nx} {lp.name} (acados {issue[kind]} ms in issue 14): " + "; ".join(verdicts))
  return lines


@dataclass
class Loop:
  """One controller's closed loop."""

  name: str
  nx: int
  times: np.ndarray
  iterations: np.ndarray
  cost: float
  evaluation: np.ndarray = field(default_factory=lambda: np.zeros(0))
  qp: np.ndarray = field(default_factory=lambda: np.zeros(0))
  statuses: dict[str, int] = field(default_factory=dict)
  qp_iterations: np.ndarray = field(default_factory=lambda: np.zeros(0))
  build: dict[str, float] = field(default_factory=dict)
  note: str = ""


def build(
  n_mass: int, kind: str, cache: Path, recorder: StageRecorder, blocks: int = 1, fma: bool = False
) -> tuple[MPCFunction, dict[str, float]]:
  """The controller built and called once on `cache` (empty: cold), then again (warm): its build seconds, the cold
  build's per stage (what the log does not count is "rest": schedule and render in forked workers). `blocks`: its
  stage QPs' partial condensing (RiccatiOptions.condensing); `fma`: built with fused multiply-adds (ANVIL_FMA=1)."""
  x0 = chain.initial_state(n_mass)
  options = dataclasses.replace(CONTROLLERS[kind], qp=RiccatiOptions(condensing=blocks))
  name = f"bench_chain{n_mass}_{kind}" + (f"_blocks{blocks}" if blocks > 1 else "") + ("_fma" if fma else "")
  recorder.take()
  with environment(ANVIL_CACHE_DIR=str(cache), ANVIL_FMA="1" if fma else "0"):
    start = time.perf_counter()
    mpc = chain.chain_mpc(name, n_mass, options)
    mpc(x0)
    cold = time.perf_counter() - start
    logged = stage_seconds(recorder.take())
    start = time.perf_counter()
    chain.chain_mpc(name, n_mass, options)(x0)
    warm = time.perf_counter() - start
  return mpc, {"cold": cold, "warm": warm, **logged, "rest": cold - sum(logged.values())}


def anvil_loop(mpc: MPCFunction, n_mass: int, kind: str, steps: int, tol: float, repeats: int = 1) -> Loop:
  """The closed loop of `steps` calls from chain.initial_state on the model itself, each solved to `tol`, run
  `repeats` times: each step's least time over the runs (as benchmarks.acados_chain times acados), the rest from the
  first run (the runs are the same loop)."""
  runs = [_anvil_run(mpc, n_mass, kind, steps, tol) for _ in range(repeats)]
  runs[0].times = np.min([run.times for run in runs], axis=0)
  return runs[0]


def _anvil_run(mpc: MPCFunction, n_mass: int, kind: str, steps: int, tol: float) -> Loop:
  plant, x = chain.step_numpy(n_mass), chain.initial_state(n_mass)
  mpc.reset()
  times, its, qp_its, evaluation, qp, cost, statuses = [], [], [], [], [], 0.0, defaultdict(int)
  for _ in range(steps):
    sol = mpc(x, tol=tol)
    times.append(sol.solve_time)
    its.append(sol.iterations)
    qp_its.append(int(np.sum(sol.stats["qp_iterations"])))
    evaluation.append(sol.stats["time_evaluation"])
    qp.append(sol.stats["time_qp_update"] + sol.stats["time_qp_solve"])
    statuses[str(sol.status)] += 1
    cost += chain.stage_cost(n_mass, x, sol.u0)
    x = plant(x, sol.u0)
  return Loop(f"anvil {kind}", mpc.nx, np.array(times), np.array(its), cost, np.array(evaluation), np.array(qp),
              dict(statuses), np.array(qp_its))  # fmt: skip


@dataclass(frozen=True)
class FlopModel:
  """Floating-point operations (a multiply-add counts 2) of the kernels a step runs, per OCP stage, from the sizes
  of the generated code: the Riccati QP's per interior-point iteration (`bench_riccati.iteration_flops`), and the
  integrator's derivatives per evaluation (ExplicitRK: the forward sensitivities; the exact Hessian's adjoint and
  second-order terms, after its own forward pass). Bounds' and rows' scalar work is left out: the dense algebra."""

  riccati: float
  jacobian: float
  hessian: float

  @staticmethod
  def of(mpc: MPCFunction) -> FlopModel:
    """The counts of `mpc`'s generated code (its Riccati QP, its ODE's derivatives)."""
    qp = next(f for f in toposort([mpc]) if isinstance(f, RiccatiQP))
    F = mpc.ocp.dynamics
    ode = OdeContext.of(OdeDerivatives.of(F, hessian=True), jacobian=True, hessian=True, scalar="float64")
    tables, a_terms = dict(ode.tables), sum(1 for row in F.a for v in row if v)
    s, nz = len(F.b), ode.nx + ode.nu
    jac_x = int(np.subtract(tables["jac_row_u"], tables["jac_row_p"][:-1]).sum())  # state entries: combine DX's rows
    forward = F.steps * (a_terms * ode.nx * nz + s * jac_x * nz + s * ode.nx * nz)
    backward = F.steps * s * (jac_x + 2 * ode.hess_nnz * nz + ode.n_hess_rows * nz * (nz + 1) / 2)
    return FlopModel(iteration_flops(qp.nx, qp.nu, qp.nud), 2 * forward, 2 * (forward + backward))


def print_flops(loops: list[Loop], models: dict[str, FlopModel]) -> None:
  """Model flops per stage against the measured time: the QP per interior-point iteration, the derivatives per step
  (sqp: its + 1 Jacobians and its Hessians, gn: its + 1 Jacobians, rti: one; the evaluation time also holds the cost,
  the constraints, the gradient and the Gauss-Newton blocks, so the rate is a lower bound)."""
  print(f"  {'controller':<18} {'QP kflop/stage/it':>17} {'ns/stage/it':>11} {'GFlop/s':>7}   "
        f"{'eval kflop/stage/step':>21} {'ns/stage/step':>13} {'GFlop/s':>7}")  # fmt: skip
  for lp in loops:
    model = models.get(lp.name)
    if model is None or not lp.qp_iterations.sum():
      continue
    qp_ns = lp.qp.sum() / lp.qp_iterations.sum() / chain.HORIZON * 1e9
    kind, its = lp.name.removeprefix("anvil "), lp.iterations.mean()
    jacobians = 1.0 if kind.startswith("rti") else its + 1  # the real-time iteration prepares at every step
    derivatives = jacobians * model.jacobian + (its * model.hessian if kind == "sqp" else 0.0)
    eval_ns = lp.evaluation.mean() / chain.HORIZON * 1e9
    print(f"  {lp.name:<18} {model.riccati / 1e3:17.1f} {qp_ns:11.0f} {model.riccati / qp_ns:7.1f}   "
          f"{derivatives / 1e3:21.1f} {eval_ns:13.0f} {derivatives / eval_ns:7.1f}")  # fmt: skip


def shifted(nlp: chain.CasadiChain, sol: chain.CasadiSolution) -> dict[str, np.ndarray]:
  """A CasADi solution moved one stage earlier, as anvil's controller shifts its own: w = [stages (nx + nu), x_N,
  wall slacks per stage], g = [x_0 rows and defects (nx per stage), wall rows per stage]."""
  nx, walls = nlp.nx, len(chain.wall_indices(nlp.n_mass))
  slacks = walls * (chain.HORIZON - 1)
  head, rows = sol.w.size - slacks, nx * (chain.HORIZON + 1)
  w = np.concatenate([shift(sol.w[:head], nx + chain.NU, nx), shift(sol.w[head:], walls, walls)])
  lam_x = np.concatenate([shift(sol.lam_x[:head], nx + chain.NU, nx), shift(sol.lam_x[head:], walls, walls)])
  lam_x[:nx] = 0.0
  lam_g = np.concatenate([shift(sol.lam_g[:rows], nx, 0), shift(sol.lam_g[rows:], walls, walls)])
  return {"x0": w, "lam_g0": lam_g, "lam_x0": lam_x}


def casadi_loop(nlp: chain.CasadiChain, solver: Any, name: str, steps: int, duals: bool = True) -> Loop:
  """The same closed loop with a CasADi solver, warm-started from its previous solution shifted by one stage
  (primal and, with `duals`, dual: IPOPT takes only the primal start)."""
  n_mass = nlp.n_mass
  plant, x = chain.step_numpy(n_mass), chain.initial_state(n_mass)
  times, its, cost, statuses, sol = [], [], 0.0, defaultdict(int), None
  for _ in range(steps):
    start = None if sol is None else shifted(nlp, sol)
    if start is not None and not duals:
      start = {"x0": start["x0"]}
    sol = nlp.solve(solver, x, start)
    times.append(sol.seconds)
    its.append(sol.iterations)
    statuses[sol.status] += 1
    cost += chain.stage_cost(n_mass, x, sol.u[0])
    x = plant(x, sol.u[0])
  return Loop(name, nlp.nx, np.array(times), np.array(its), cost, statuses=dict(statuses))


def casadi_loops(
  ca: Any, n_mass: int, steps: int, tol: float, notes: list[str], qpsol: str = "qrqp", duals: bool = True
) -> list[Loop]:
  """IPOPT and sqpmethod (solved to `tol`, its QPs by `qpsol`, warm-started with the shifted duals too or not)
  closed loops on the same NLP."""
  nlp = chain.CasadiChain(n_mass)
  qp_options = {"printLevel": "none"} if qpsol == "qpoases" else {"print_iter": False, "print_header": False}
  sqp_options = {"qpsol": qpsol, "hessian_approximation": "exact", "max_iter": 100, "tol_pr": tol, "tol_du": tol,
                 "print_header": False, "print_iteration": False, "print_status": False, "print_time": False,
                 "record_time": True,
                 "qpsol_options": {**qp_options, "error_on_fail": False}}  # fmt: skip
  sqpmethod = casadi_solver(ca, f"bench_chain_sqp{n_mass}", "sqpmethod", nlp.nlp, sqp_options, notes)
  ipopt_options = {**nlp.ipopt_options(), "record_time": True}
  ipopt = casadi_solver(ca, f"bench_chain_ipopt{n_mass}", "ipopt", nlp.nlp, ipopt_options, notes)
  return [casadi_loop(nlp, ipopt, "CasADi IPOPT", steps), casadi_loop(nlp, sqpmethod, "CasADi sqpmethod", steps, duals)]


def print_loops(loops: list[Loop], reference: float | None) -> None:
  """The table of one size."""
  head = (f"  {'controller':<18} {'median ms':>10} {'p95 ms':>8} {'eval ms':>8} {'QP ms':>8} {'its':>5} {'QP its':>6}  "
          f"{'cost':>12} {'vs IPOPT':>9}  statuses; build")  # fmt: skip
  print(head + "\n  " + "-" * (len(head) + 30))
  for lp in loops:
    ms = lambda a: f"{np.median(a) * 1e3:8.3f}" if a.size else f"{'-':>8}"
    rel = (
      f"{abs(lp.cost - reference) / abs(reference):9.1e}" if reference and lp.name != "CasADi IPOPT" else f"{'-':>9}"
    )
    build = ""
    if lp.build:
      stages = " / ".join(f"{lp.build[s]:.1f}" for s in (*STAGES, "rest"))
      build = f"; cold {lp.build['cold']:.1f} s ({'/'.join(STAGES)}/rest: {stages}), warm {lp.build['warm']:.1f} s"
    statuses = ", ".join(f"{k} {v}" for k, v in lp.statuses.items()) + (f" ({lp.note})" if lp.note else "")
    qp_its = f"{lp.qp_iterations.mean():6.1f}" if lp.qp_iterations.size else f"{'-':>6}"
    print(
      f"  {lp.name:<18} {np.median(lp.times) * 1e3:10.3f} {np.percentile(lp.times, 95) * 1e3:8.3f} "
      f"{ms(lp.evaluation)} {ms(lp.qp)} {lp.iterations.mean():5.1f} {qp_its}  {lp.cost:12.6f} {rel}  {statuses}{build}"
    )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", type=int, nargs="+", default=[3], help="n_mass values (3 4 5 6 8: nx 9 ... 39)")
  parser.add_argument("--controllers", nargs="+", default=list(DEFAULT_CONTROLLERS), choices=list(CONTROLLERS))
  parser.add_argument("--steps", type=int, default=chain.CLOSED_LOOP_STEPS, help="closed-loop steps")
  parser.add_argument("--sqpmethod-qp", default="qrqp", choices=["qrqp", "qpoases"], help="sqpmethod's QP solver")
  parser.add_argument("--sqpmethod-primal-start", action="store_true",
                      help="start sqpmethod from the shifted primal solution alone (default: and duals)")  # fmt: skip
  parser.add_argument("--condensing", type=int, nargs="+", default=[1],
                      help="stages per block of the stage QPs' partial condensing, each a row (1: none)")  # fmt: skip
  parser.add_argument(
    "--fma",
    action="store_true",
    help="each anvil controller also built with fused multiply-adds (ANVIL_FMA=1), a row of its own",
  )
  parser.add_argument("--acados", nargs="+", default=[], metavar="[LABEL=]PREFIX",
                      help="acados's install prefixes (e.g. avx=/opt/acados-avx generic=/opt/acados-generic): "
                           "its closed loops on the same OCP with each build (needs casadi)")  # fmt: skip
  parser.add_argument("--repeats", type=int, default=5,
                      help="closed loops per controller, anvil's and acados's alike: least time per step")  # fmt: skip
  parser.add_argument(
    "--tol",
    type=float,
    default=SQPOptions().tol,
    help="SQP tolerance of anvil's controllers and of sqpmethod (default anvil's; acados's is 1e-6)",
  )
  parser.add_argument("--N", type=int, default=chain.HORIZON, help=f"the horizon (default {chain.HORIZON})")
  parser.add_argument("--Ts", type=float, default=chain.TS, help=f"the sampling time, s (default {chain.TS})")
  args = parser.parse_args()
  # NOTE: the chain module's horizon and sampling time, read by every side's OCP (anvil's controllers, CasADi's NLP,
  # acados's generated data) and by the plant and the closed-loop cost
  chain.HORIZON, chain.TS = args.N, args.Ts
  ca, notes, targets, same_run, recorder = load_casadi(), [], [], [], StageRecorder()
  for n_mass in args.sizes:
    loops, models = [], {}
    for kind, blocks, fma in itertools.product(args.controllers, args.condensing, (False, True)[: 1 + args.fma]):
      with tempfile.TemporaryDirectory(prefix="bench_chain_") as cache:
        mpc, seconds = build(n_mass, kind, Path(cache), recorder, blocks, fma)
        tol = ALWAYS_SOLVE_TOL if kind == "rti_qp" else args.tol
        loop = anvil_loop(mpc, n_mass, kind, args.steps, tol, args.repeats)
        loop.name += (f" M={blocks}" if blocks > 1 else "") + (" FMA" if fma else "")
        if blocks == 1 and not fma and not kind.endswith("_unrolled"):
          models[loop.name] = FlopModel.of(mpc)
      loop.build = seconds
      loops.append(loop)
    reference = None
    if ca is not None:
      loops += casadi_loops(ca, n_mass, args.steps, args.tol, notes, args.sqpmethod_qp, not args.sqpmethod_primal_start)
      reference = loops[-2].cost
      for given in args.acados:
        label, _, prefix = given.rpartition("=")
        loops += acados_loops(Path(prefix), f"[{label}]" if label else "", n_mass, args.controllers, args.steps,
                              args.tol, args.repeats)  # fmt: skip
      if args.acados:
        same_run += acados_lines(loops)
      targets += target_lines(loops)
    nx = chain.state_size(n_mass)
    print(
      f"\nchain of {n_mass} masses (nx = {nx}, nu = 3, N = {chain.HORIZON}), {args.steps} closed-loop steps, "
      f"SQP tolerance {args.tol:g}"
    )
    print_loops(loops, reference)
    print("\n  where the time goes (FlopModel: the dense algebra per OCP stage, against the measured time)")
    print_flops(loops, models)
  if ca is None:
    print("\ncasadi is not installed: no IPOPT or sqpmethod rows, no targets")
  for note in notes:
    print(f"note: {note}")
  if same_run:
    print("\nagainst acados's fastest configuration in this run:\n" + "\n".join(same_run))
  if targets:
    print("\ntargets (acados's best per step, issue 14):\n" + "\n".join(targets))


if __name__ == "__main__":
  main()
