"""MPC benchmark: the P2 stabilizing cart-pole MPC in closed loop, anvil (C++ harness and Python) vs CasADi, one run.

Run from the repository root (under a minute; `--quick`: 50 steps and no setup-time subprocesses):

  .venv/bin/python -m benchmarks.bench_mpc            # 200 steps from X0_STABILIZE (cartpole_mpc)
  .venv/bin/python -m benchmarks.bench_mpc --steps 100
  .venv/bin/python -m benchmarks.bench_mpc --quick

The MPC (anvil/problems/cartpole_mpc.py: stabilizing): N = 30 RK4 steps of 0.05 s, stage cost x'Qx + R u²,
terminal cost 10 x'Qx, |u| <= 20, |xc| <= 2, multiple shooting, warm start from the previous solution shifted by
one stage. Every controller runs the same closed loop: u_t = u_0 of the solution from x_t, x_{t+1} = F(x_t, u_t).

  anvil C++:    examples/cpp/closed_loop (the generated module, -O3), wall clock around call() (steady_clock); once
                with each QP solver: "riccati" (the default, the generated interior point) and "osqp", and the
                float32 controller (MPCOptions(scalar="float32"), Riccati).
  anvil Python: mpc(x) from Python, wall clock (time.perf_counter); Python overhead = wall - the C++ solve_time.
  CasADi:       the same NLP in SX unrolled over the stages, nlpsol('ipopt') (exact Hessian) and nlpsol('sqpmethod')
                with qpsol 'qrqp' (exact Hessian, eigen-clip convexification); primal (IPOPT) and primal-dual
                (sqpmethod) warm start from the shifted previous solution; time = the solver's t_wall_total.
  setup:        a subprocess with a fresh ANVIL_CACHE_DIR: imports + MPC construction + first call (cold: trace,
                derive, generate, compile), then a second subprocess on that cache (warm).

Targets are printed with PASS/MISS; they are informational and the script exits 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anvil.mpc import MPCOptions
from anvil.mpc.harness import build_harness, run_harness
from anvil.problems import cartpole, cartpole_mpc
from anvil.problems.backend import casadi_backend
from anvil.qp import OSQPOptions
from benchmarks.common import casadi_solver, load_casadi, shift, verdict

ROOT = Path(__file__).resolve().parent.parent

NX, NU, N = cartpole_mpc.NX, cartpole_mpc.NU, 30
TARGET_STEP_MS = 0.5  # median per-step solve time in the C++ harness
TARGET_OVERHEAD_US = 20.0  # median Python overhead per call
TARGET_COLD_S, TARGET_WARM_S = 10.0, 1.0
TARGET_RICCATI_MS = 0.1  # issue 7: median per-step solve time with the Riccati QP solver in the C++ harness
COST_TOL = 1e-5  # relative, against COST_STABILIZE
SETUP = """import time
t0 = time.perf_counter()
import sys
from anvil.problems import cartpole_mpc as cm
t1 = time.perf_counter()
sol = cm.stabilizing("cartpole_mpc")(cm.X0_STABILIZE)
print(time.perf_counter() - t0, t1 - t0, sol.status)
"""


@dataclass
class Loop:
  """One controller's closed loop: per-step solve times (s), SQP iterations, statuses and the closed-loop cost."""

  label: str
  times: np.ndarray
  iterations: np.ndarray
  failures: int
  cost: float
  extra: dict[str, Any] = field(default_factory=dict)


def stage_cost(x: np.ndarray, u: np.ndarray) -> float:
  """l(x, u) = x'Qx + R u², in numpy (independent of the generated code)."""
  return float(x @ cartpole.Q @ x + cartpole.R * u @ u)


# *** anvil ***


def run_cpp(mpc: Any, steps: int, folder: Path) -> Loop:
  """The C++ harness (examples/cpp/closed_loop.cpp) built with -O3; the row is labelled with the QP solver."""
  exe = build_harness(mpc, folder, x0=cartpole_mpc.X0_STABILIZE)
  run = run_harness(exe, cartpole_mpc.X0_STABILIZE, steps)
  cost = sum(stage_cost(x, u) for x, u in zip(run.x[:-1], run.u, strict=True))
  fails = sum(s != "converged" for s in run.statuses)
  scalar = "" if mpc.options.scalar == "float64" else f", {mpc.options.scalar}"
  label = f"anvil C++ harness ({mpc.options.qp.solver}{scalar})"
  return Loop(label, run.solve_times, run.iterations, fails, cost, {"harness_cost": run.cost})


def run_python(mpc: Any, steps: int) -> Loop:
  """mpc(x) from Python; the plant is the generated dynamics function."""
  plant = mpc.ocp.dynamics
  mpc.reset()
  x = cartpole_mpc.X0_STABILIZE.copy()
  walls, inner, its, fails, cost = [], [], [], 0, 0.0
  parts: dict[str, list[float]] = {k: [] for k in ("evaluation", "qp_update", "qp_solve", "line_search")}
  qp_limit = 0
  for _ in range(steps):
    t0 = time.perf_counter()
    sol = mpc(x)
    walls.append(time.perf_counter() - t0)
    inner.append(sol.solve_time)
    its.append(sol.iterations)
    fails += sol.status != "converged"
    for k, v in parts.items():
      v.append(sol.stats[f"time_{k}"])
    qp_limit += int((sol.stats["qp_iterations"] >= mpc.options.qp.max_iter).any())
    cost += stage_cost(x, sol.u0)
    x = np.asarray(plant(x, sol.u0), dtype=np.float64)
  extra = {"inner": np.array(inner), "parts": {k: np.array(v) for k, v in parts.items()}, "qp_limit": qp_limit}
  return Loop(f"anvil from Python ({mpc.options.qp.solver})", np.array(walls), np.array(its), fails, cost, extra)


def setup_times() -> list[tuple[float, float, str]]:
  """(seconds of imports + construction + first call, seconds of the imports, status of the first call) of a fresh
  subprocess on a new, empty cache (cold), then of a second one on that cache (warm)."""
  out = []
  with tempfile.TemporaryDirectory(prefix="bench_mpc_cache_") as cache:
    env = {**os.environ, "ANVIL_CACHE_DIR": cache}
    for _ in range(2):
      proc = subprocess.run([sys.executable, "-c", SETUP], capture_output=True, text=True,
                            env=env, cwd=ROOT, check=True)  # fmt: skip
      total, imports, status = proc.stdout.split()
      out.append((float(total), float(imports), status))
  return out


# *** CasADi ***


def casadi_nlp(ca: Any) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
  """The MPC's multiple-shooting NLP in SX (parameter: the measured state) and the bounds on w."""
  b = casadi_backend(ca)
  nz = NX + NU
  w, p = ca.SX.sym("w", N * nz + NX), ca.SX.sym("p", NX)
  q = ca.DM(cartpole_mpc.Q_DIAG)
  cost, defects = 0, [w[0:NX] - p]
  for k in range(N):
    x, u = w[k * nz : k * nz + NX], w[k * nz + NX : (k + 1) * nz]
    cost += ca.dot(x * x, q) + cartpole.R * u * u
    defects.append(w[(k + 1) * nz : (k + 1) * nz + NX] - cartpole.step(x, u, b))
  x_n = w[N * nz :]
  cost += 10.0 * ca.dot(x_n * x_n, q)
  lbw, ubw = np.full(N * nz + NX, -np.inf), np.full(N * nz + NX, np.inf)
  for k in range(1, N + 1):
    lbw[k * nz], ubw[k * nz] = -cartpole_mpc.XC_MAX, cartpole_mpc.XC_MAX
  for k in range(N):
    lbw[k * nz + NX], ubw[k * nz + NX] = -cartpole_mpc.U_MAX, cartpole_mpc.U_MAX
  return {"x": w, "p": p, "f": cost, "g": ca.vertcat(*defects)}, lbw, ubw


def run_casadi(ca: Any, label: str, plugin: str, opts: dict[str, Any], steps: int, notes: list[str]) -> Loop:
  """Closed loop with a CasADi nlpsol, warm-started from the shifted previous solution; plant: numpy RK4."""
  nlp, lbw, ubw = casadi_nlp(ca)
  solver = casadi_solver(ca, f"bench_mpc_{plugin}", plugin, nlp, opts, notes)
  nz, ng = NX + NU, NX * (N + 1)
  x = cartpole_mpc.X0_STABILIZE.copy()
  w0 = np.concatenate([np.tile(np.concatenate([x, np.zeros(NU)]), N), x])
  lam_g, lam_x = np.zeros(ng), np.zeros(len(w0))
  times, its, fails, cost = [], [], 0, 0.0
  for t in range(steps):
    w0[:NX] = x
    args = {"x0": w0, "p": x, "lbx": lbw, "ubx": ubw, "lbg": np.zeros(ng), "ubg": np.zeros(ng)}
    if plugin == "sqpmethod":
      args.update(lam_g0=lam_g, lam_x0=lam_x)
    t0 = time.perf_counter()
    sol = solver(**args)
    wall = time.perf_counter() - t0
    stats = solver.stats()
    times.append(float(stats.get("t_wall_total", wall)))
    its.append(int(stats["iter_count"]))
    fails += not bool(stats["success"])
    w = np.array(sol["x"]).reshape(-1)
    u = w[NX:nz].copy()
    cost += stage_cost(x, u)
    x = cartpole.step_numpy(x, u)
    w0 = shift(w, nz, NX)  # x_{N-1} <- x_N, u_{N-1} and x_N repeated: the same shift as anvil's controller
    lam_x = shift(np.array(sol["lam_x"]).reshape(-1), nz, NX)
    lam_x[:NX] = 0.0
    lam_g = shift(np.array(sol["lam_g"]).reshape(-1), NX, 0)
    if t == 0 and "t_wall_total" not in stats:
      notes.append(f"{plugin}: no t_wall_total in stats; timed from Python")
  return Loop(label, np.array(times), np.array(its), fails, cost)


def casadi_loops(ca: Any, steps: int, notes: list[str]) -> list[Loop]:
  quiet = {"print_time": False, "record_time": True}
  ipopt = {**quiet, "ipopt.print_level": 0, "ipopt.sb": "yes"}
  qp = "qrqp" if ca.has_conic("qrqp") else "osqp"
  qp_opts: dict[str, Any] = {"print_iter": False, "print_header": False, "error_on_fail": False} if qp == "qrqp" else {}
  sqp = {**quiet, "qpsol": qp, "qpsol_options": qp_opts, "print_header": False, "print_iteration": False,
         "print_status": False, "max_iter": 100, "convexify_strategy": "eigen-clip"}  # fmt: skip
  return [run_casadi(ca, "CasADi IPOPT", "ipopt", ipopt, steps, notes),
          run_casadi(ca, f"CasADi sqpmethod+{qp}", "sqpmethod", sqp, steps, notes)]  # fmt: skip


# *** report ***


def ms(v: np.ndarray, q: float) -> float:
  return float(np.percentile(v, q)) * 1e3 if v.size else float("nan")


def print_loops(loops: list[Loop], reference: float | None) -> None:
  base = float(np.median(loops[0].times))
  print(
    "| controller | median [ms] | p95 [ms] | max [ms] | median / anvil C++ | mean SQP it. | failed steps "
    "| closed-loop cost | cost check |"
  )
  print("|---|--:|--:|--:|--:|--:|--:|--:|---|")
  for lp in loops:
    check = "n/a" if reference is None else verdict(abs(lp.cost / reference - 1.0), COST_TOL)
    print(f"| {lp.label} | {ms(lp.times, 50):.3f} | {ms(lp.times, 95):.3f} | {ms(lp.times, 100):.3f} | "
          f"{np.median(lp.times) / base:.2f}x | {lp.iterations.mean():.2f} | {lp.failures} | {lp.cost:.6f} | "
          f"{check} |")  # fmt: skip


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=cartpole_mpc.STEPS_STABILIZE, help="closed-loop steps (default 200)")
  ap.add_argument("--quick", action="store_true", help="50 steps, no setup-time subprocesses")
  args = ap.parse_args()
  steps = 50 if args.quick and args.steps == cartpole_mpc.STEPS_STABILIZE else args.steps
  notes: list[str] = []

  setup = None if args.quick else setup_times()
  mpc = cartpole_mpc.stabilizing("cartpole_mpc")  # the default QP solver: the Riccati interior point
  mpc_osqp = cartpole_mpc.stabilizing("cartpole_mpc_osqp", MPCOptions(qp=OSQPOptions()))
  mpc_f32 = cartpole_mpc.stabilizing("cartpole_mpc_f32", MPCOptions(scalar="float32"))
  with tempfile.TemporaryDirectory(prefix="bench_mpc_") as tmp:
    loops = [run_cpp(mpc, steps, Path(tmp) / "riccati"), run_python(mpc, steps)]
    loops += [run_cpp(mpc_osqp, steps, Path(tmp) / "osqp"), run_python(mpc_osqp, steps)]
    loops += [run_cpp(mpc_f32, steps, Path(tmp) / "float32")]
  ca = load_casadi()
  if ca is None:
    notes.append("casadi not installed: CasADi rows skipped")
  else:
    loops += casadi_loops(ca, steps, notes)
  cpp, py = loops[0], loops[1]
  reference = cartpole_mpc.COST_STABILIZE if steps == cartpole_mpc.STEPS_STABILIZE else None
  overhead = py.times - py.extra["inner"]

  print(f"P2 stabilizing cart-pole MPC (N = {N}), {steps} closed-loop steps from x0 = {cartpole_mpc.X0_STABILIZE}")
  print(f"casadi {ca.__version__ if ca else 'missing'}; per-step solve times; closed-loop cost reference "
        f"{reference if reference else 'n/a (not 200 steps)'}\n")  # fmt: skip
  print_loops(loops, reference)
  print(f"\n  anvil from Python: Python overhead (wall - C++ solve_time) median {np.median(overhead) * 1e6:.1f} us, "
        f"p95 {np.percentile(overhead, 95) * 1e6:.1f} us")  # fmt: skip
  print(f"  anvil C++ harness: its own cost sum {cpp.extra['harness_cost']:.9f} (numpy: {cpp.cost:.9f})")
  for loop in (py, loops[3]):
    parts = loop.extra["parts"]
    other = loop.extra["inner"] - sum(parts.values())
    print(f"\n  {loop.label} per-step breakdown (sol.stats, medians over the steps, us):")
    print("  | evaluation | QP update | QP solve | line search | other | total (solve_time) |")
    print("  |--:|--:|--:|--:|--:|--:|")
    cells = [
      *(np.median(v) * 1e6 for v in parts.values()),
      np.median(other) * 1e6,
      np.median(loop.extra["inner"]) * 1e6,
    ]
    print("  | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
  if py.extra["qp_limit"]:
    notes.append(f"OSQP hit its iteration limit ({mpc.options.qp.max_iter}) in {py.extra['qp_limit']} step(s): "
                 "those steps set the max column")  # fmt: skip
  if setup is not None:
    print()
    for what, (total, imports, status) in zip(("cold", "warm"), setup, strict=True):
      print(f"  setup {what}: {total:.2f} s (imports {imports:.2f} s, construction + first call "
            f"{total - imports:.2f} s; first call {status})")  # fmt: skip
  for note in notes:
    print(f"  note: {note}")

  med_cpp, med_over = float(np.median(cpp.times)) * 1e3, float(np.median(overhead)) * 1e6
  print("\ntargets:")
  print(f"  median per-step solve time, C++ harness {med_cpp:.3f} ms <= {TARGET_STEP_MS} ms: "
        f"{verdict(med_cpp, TARGET_STEP_MS)}")  # fmt: skip
  print(f"  median per-step solve time with the Riccati QP, C++ harness {med_cpp:.3f} ms <= {TARGET_RICCATI_MS} ms "
        f"(issue 7; acados: 0.15 ms): {verdict(med_cpp, TARGET_RICCATI_MS)}")  # fmt: skip
  print(f"  Python overhead {med_over:.1f} us <= {TARGET_OVERHEAD_US:.0f} us: {verdict(med_over, TARGET_OVERHEAD_US)}")
  if setup is not None:
    cold, warm = setup[0][0], setup[1][0]
    print(f"  setup cold {cold:.2f} s <= {TARGET_COLD_S:.0f} s: {verdict(cold, TARGET_COLD_S)}")
    print(f"  setup warm {warm:.2f} s <= {TARGET_WARM_S:.0f} s: {verdict(warm, TARGET_WARM_S)}")
  else:
    print("  setup cold/warm: n/a (--quick)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
