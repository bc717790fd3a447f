"""Moving-horizon estimation benchmark (issue 20): MHEFunction's per-step solve time against CasADi IPOPT on the same
NLP, in one run.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_mhe                  # windows of M = 20 and 50
  .venv/bin/python -m benchmarks.bench_mhe --windows 10 20 50 --steps 100

Problem: the P2 cart-pole (one RK4 step of 0.05 s) driven by u_t = 2 sin(0.4 t), process noise of 0.002 and
measurement noise of 0.02 (seeded) on xc and theta only; weights the inverse covariances, arrival weight
diag(100, 100, 10, 10). anvil: one MHEFunction per window length (exact Hessian, Riccati QP), its windows growing to
M then sliding; the time is the generated C++ call's (`MHEEstimate.solve_time`), over the sliding windows. IPOPT: the
same NLP (the arrival cost of each step read from anvil's estimator, `mhe.arrival`), built once as a parametric NLP
and warm-started from its previous solution shifted by one time; time = its t_wall_total. Both solve to 1e-8; the
table also gives the largest difference of the estimates (x_hat). Target (issue 20): anvil <= 0.1x IPOPT.

Sensitivities: on the P2 stabilizing MPC (N = 30, exact Hessian), the time of `sol.du0_dx0()` (the generated C++
SensitivityFunction: the derivatives at the solution and the KKT system factored by QDLDL; after the first use, which
builds it)
against the call that solved (its C++ solve time, and its wall time from Python).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from anvil import Arg, NumericalFunction
from anvil.mpc import MHEFunction
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from anvil.problems.backend import casadi_backend
from benchmarks.common import casadi_solver, load_casadi, verdict

NX, NU, NY = cartpole.NX, cartpole.NU, 2
SIGMA_Y, SIGMA_W = 0.02, 0.002
Q, R = np.full(NX, SIGMA_W**-2), np.full(NY, SIGMA_Y**-2)
P0, X_PRIOR = np.diag([100.0, 100.0, 10.0, 10.0]), np.array([0.1, 0.1, 0.0, 0.0])


def noisy_run(steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """States, applied inputs and measurements of the driven cart-pole."""
  rng = np.random.default_rng(seed)
  xs, us = [np.array([0.15, 0.05, 0.0, 0.0])], []
  for t in range(steps - 1):
    us.append(np.array([2.0 * np.sin(0.4 * t)]))
    xs.append(cartpole.step_numpy(xs[-1], us[-1]) + rng.normal(0.0, SIGMA_W, NX))
  return np.array(xs), np.array(us).reshape(-1, NU), np.array([x[:NY] + rng.normal(0.0, SIGMA_Y, NY) for x in xs])


def ipopt_window(ca: Any, M: int, notes: list[str]) -> Any:
  """The full-window MHE NLP as an IPOPT solver; parameter [y (M ny), u ((M - 1) nu), center (nx), P (nx nx)]."""
  b = casadi_backend(ca)
  X, W = ca.SX.sym("X", NX, M), ca.SX.sym("W", NX, M - 1)
  par = ca.SX.sym("par", M * NY + (M - 1) * NU + NX + NX * NX)
  y, u = ca.reshape(par[: M * NY], NY, M), ca.reshape(par[M * NY : M * NY + (M - 1) * NU], NU, M - 1)
  center = par[M * NY + (M - 1) * NU : M * NY + (M - 1) * NU + NX]
  P = ca.reshape(par[M * NY + (M - 1) * NU + NX :], NX, NX)
  J = ca.mtimes([(X[:, 0] - center).T, P, X[:, 0] - center])
  g = []
  for j in range(M):
    e = y[:, j] - X[:NY, j]
    J += ca.mtimes([e.T, np.diag(R), e])
  for j in range(M - 1):
    J += ca.mtimes([W[:, j].T, np.diag(Q), W[:, j]])
    g.append(X[:, j + 1] - cartpole.step(X[:, j], u[:, j], b) - W[:, j])
  nlp = {"x": ca.veccat(X, W), "f": J, "g": ca.vertcat(*g), "p": par}
  opts = {
    "ipopt.print_level": 0,
    "print_time": 0,
    "ipopt.tol": 1e-8,
    "ipopt.warm_start_init_point": "yes",
    "record_time": True,
  }
  return casadi_solver(ca, f"mhe{M}", "ipopt", nlp, opts, notes)


def bench(M: int, steps: int, ca: Any, notes: list[str]) -> dict[str, Any]:
  """Per-step times of anvil's estimator and IPOPT over one run's sliding windows."""
  h = NumericalFunction(f"bench_mhe{M}_h", lambda x: x[0:2], (Arg(NX),))
  start = time.perf_counter()
  mhe = MHEFunction(f"bench_mhe{M}", cm.dynamics(f"bench_mhe{M}_F"), h, M, process_noise_weight=Q,
                    measurement_weight=R, arrival_weight=P0, x_prior=X_PRIOR)  # fmt: skip
  mhe.reset()
  build = time.perf_counter() - start
  _, us, ys = noisy_run(M + steps)
  solver = None if ca is None else ipopt_window(ca, M, notes)
  times, its, ipopt_times, diffs, guess = [], [], [], [], None
  for t in range(M + steps):
    k = min(t + 1, M)
    center, P = mhe.arrival
    est = mhe(ys[t + 1 - k : t + 1], us[t + 1 - k : t], tol=1e-8)
    if k < M:
      # IPOPT's first window starts where anvil's does: the last growing window's solution, its last state repeated
      if k == M - 1:
        guess = np.concatenate([np.vstack([est.x, est.x[-1:]]).ravel(), np.vstack([est.w, np.zeros((1, NX))]).ravel()])
      continue
    times.append(est.solve_time)
    its.append(est.iterations)
    if solver is None:
      continue
    par = np.concatenate([ys[t + 1 - M : t + 1].ravel(), us[t + 1 - M : t].ravel(), center, P.T.ravel()])
    sol = solver(x0=guess, p=par, lbg=0, ubg=0)
    ipopt_times.append(solver.stats()["t_wall_total"])
    if not solver.stats()["success"]:
      notes.append(f"M = {M}, step {t}: IPOPT ended {solver.stats()['return_status']}")
    z = np.array(sol["x"]).ravel()
    X, Wn = z[: NX * M].reshape(M, NX), z[NX * M :].reshape(M - 1, NX)
    diffs.append(float(np.abs(X[-1] - est.x_hat).max()))
    guess = np.concatenate([np.vstack([X[1:], X[-1:]]).ravel(), np.vstack([Wn[1:], np.zeros((1, NX))]).ravel()])
  return {"M": M, "build": build, "times": np.array(times), "its": np.array(its), "ipopt": np.array(ipopt_times),
          "diff": max(diffs, default=float("nan"))}  # fmt: skip


def bench_sensitivity(reps: int = 20) -> dict[str, float]:
  """Median seconds of du0_dx0() against the solve's C++ time and its Python wall time (P2 stabilizing MPC)."""
  mpc = cm.stabilizing("bench_sens_p2")
  sol = mpc(cm.X0_STABILIZE)
  sol.du0_dx0()  # builds the derivatives
  solves, walls, sens = [], [], []
  for _ in range(reps):
    mpc.reset()
    start = time.perf_counter()
    sol = mpc(cm.X0_STABILIZE)
    walls.append(time.perf_counter() - start)
    solves.append(sol.solve_time)
    start = time.perf_counter()
    sol.du0_dx0()
    sens.append(time.perf_counter() - start)
  return {"solve": float(np.median(solves)), "wall": float(np.median(walls)), "sensitivity": float(np.median(sens))}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--windows", type=int, nargs="+", default=[20, 50], help="window lengths M")
  parser.add_argument("--steps", type=int, default=60, help="sliding-window steps timed per M")
  args = parser.parse_args()
  ca, notes = load_casadi(), []
  if ca is None:
    notes.append("CasADi is not installed: no IPOPT column")
  print(
    "| M | anvil median / p95 ms | SQP its | build s | IPOPT median ms | anvil / IPOPT | target 0.1x | max x_hat diff |"
  )
  print("|---|---|---|---|---|---|---|---|")
  for M in args.windows:
    r = bench(M, args.steps, ca, notes)
    ms = r["times"] * 1e3
    ipopt = float(np.median(r["ipopt"]) * 1e3) if r["ipopt"].size else float("nan")
    ratio = float(np.median(ms)) / ipopt
    print(f"| {M} | {np.median(ms):.3f} / {np.percentile(ms, 95):.3f} | {r['its'].mean():.2f} | {r['build']:.1f} | "
          f"{ipopt:.2f} | {ratio:.3f} | {verdict(ratio, 0.1)} | {r['diff']:.1e} |")  # fmt: skip
  r = bench_sensitivity()
  print(f"\nP2 MPC (N = 30): du0_dx0() {r['sensitivity'] * 1e3:.3f} ms; the cold solve {r['solve'] * 1e3:.3f} ms in "
        f"C++ ({r['wall'] * 1e3:.3f} ms from Python): {r['sensitivity'] / r['solve']:.1f}x the solve")  # fmt: skip
  for note in notes:
    print(f"note: {note}")


if __name__ == "__main__":
  main()
