"""QP benchmark: anvil's generated Riccati interior point (RiccatiQP) vs OSQP on the same OCP-structured QPs.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_qp            # N in 10, 30, 50, 100
  .venv/bin/python -m benchmarks.bench_qp --reps 50  # more timed solves per instance

Instances: the P2 cart-pole RK4 step linearized by central differences around noisy
near-upright points (A_k, B_k, c_k in absolute variables), H_k = blkdiag(2Q, 2R) plus a small random PSD term,
terminal 20Q, x0 = [1, 0.35, 2, 0] with a linear term pulling the cart to 3 m, |u| <= 20 and |xc| <= 2 (k >= 1) as
inequality rows; 8 perturbed instances (2%) per N. anvil: cold start, tol 1e-8, time measured inside the generated
C++ (steady_clock).
OSQP 1.x (its Python wheel, same C core): set up once per N, then per instance `update(Px, Ax, q, l, u)` + warm
`solve()` at eps 1e-6 (the accuracy an MPC's QPs get in practice), time = its own update_time + solve_time. Accuracy:
the largest |u - u_ref| against OSQP at eps 1e-10 with polishing. Targets: QP <= 60 us at N = 30, time linear in N.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import osqp
import scipy.sparse as sp

from anvil.problems import cartpole
from anvil.problems.ocp_qp import osqp_solution, sparse_form
from anvil.qp import RiccatiQP
from benchmarks.common import verdict

ROOT = Path(__file__).resolve().parent.parent

NX, NU = 4, 1
NZ = NX + NU


def linearized(x: np.ndarray, u: np.ndarray, h: float = 1e-6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """A, B, c with F(x + dx, u + du) ≈ A (x + dx) + B (u + du) + c, by central differences."""
  f = cartpole.step_numpy
  A = np.stack([(f(x + h * e, u) - f(x - h * e, u)) / (2 * h) for e in np.eye(NX)], 1)
  B = np.stack([(f(x, u + h * e) - f(x, u - h * e)) / (2 * h) for e in np.eye(NU)], 1)
  return A, B, f(x, u) - A @ x - B @ u


def instance(rng: np.random.Generator, n: int, scale: float) -> dict[str, Any]:
  """One cart-pole QP of horizon n, perturbed by `scale` (relative)."""
  jitter = lambda a: a * (1 + scale * rng.normal(size=np.shape(a)))
  A, B, c = zip(*(linearized(0.05 * rng.normal(size=NX), 0.1 * rng.normal(size=NU)) for _ in range(n)), strict=True)
  H = np.zeros((n, NZ, NZ))
  H[:] = np.diag([2.0, 2.0, 0.2, 0.2, 0.02])
  M = 0.01 * rng.normal(size=(n, NZ, NZ))
  H += np.einsum("kij,klj->kil", M, M)
  g = np.zeros((n, NZ))
  g[:, 0] = -2.0 * 3.0  # (xc - 3)^2 pulls the cart to 3 m, against |xc| <= 2
  G = np.zeros((n, 2, NZ))
  G[:, 0, 0], G[:, 1, NX] = 1.0, 1.0
  lo, hi = np.tile([-2.0, -20.0], (n, 1)), np.tile([2.0, 20.0], (n, 1))
  lo[0, 0], hi[0, 0] = -np.inf, np.inf
  GN = np.zeros((1, NX))
  GN[0, 0] = 1.0
  H = jitter(H)
  H = 0.5 * (H + H.transpose(0, 2, 1))
  return dict(H=H, g=jitter(g), HN=20 * np.diag(np.diag(cartpole.Q)), gN=np.zeros(NX), A=jitter(np.array(A)),
              B=jitter(np.array(B)), c=jitter(np.array(c)), x0=jitter(np.array([1.0, 0.35, 2.0, 0.0])), G=G, lo=lo,
              hi=hi, GN=GN, loN=np.array([-2.0]), hiN=np.array([2.0]))  # fmt: skip


def run(n: int, reps: int) -> dict[str, float]:
  """Medians over 8 instances x reps solves for horizon n."""
  rng = np.random.default_rng(n)
  qp = RiccatiQP(f"bench_qp_{n}", NX, NU, n, ng=2, ngN=1)
  data = [instance(rng, n, 0.02) for _ in range(8)]
  anvil_times, iterations, errors, osqp_times, osqp_iters, osqp_errors = [], [], [], [], [], []
  base = sparse_form(data[0])
  solver = osqp.OSQP()
  solver.setup(*base, eps_abs=1e-6, eps_rel=1e-6, polishing=False, verbose=False)
  for d in data:
    _, u_ref, _ = osqp_solution(d)
    for _ in range(reps):
      sol = qp(1e-8, **d)
      anvil_times.append(sol.solve_time)
    iterations.append(sol.iterations)
    errors.append(float(np.abs(sol.u - u_ref).max()))
    P, q, A, lo, hi = sparse_form(d)
    for _ in range(reps):
      solver.update(Px=sp.triu(P).tocsc().data, Ax=A.data, q=q, l=lo, u=hi)
      res = solver.solve(raise_error=False)
      osqp_times.append(res.info.update_time + res.info.solve_time)
    osqp_iters.append(res.info.iter)
    osqp_errors.append(float(np.abs(res.x[(n + 1) * NX :] - u_ref.reshape(-1)).max()))
  return {"anvil_us": 1e6 * statistics.median(anvil_times), "anvil_it": statistics.median(iterations),
          "anvil_err": max(errors), "osqp_us": 1e6 * statistics.median(osqp_times),
          "osqp_it": statistics.median(osqp_iters), "osqp_err": max(osqp_errors)}  # fmt: skip


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=20, help="timed solves per instance")
  args = ap.parse_args()
  results = {n: run(n, args.reps) for n in (10, 30, 50, 100)}
  print(f"OCP QPs (cart-pole, nx = {NX}, nu = {NU}), median of 8 instances x {args.reps} solves\n")
  print("| N | anvil Riccati IPM [us] | iterations | max u error | OSQP update + solve [us] | iterations | max u error "
        "| ratio |")  # fmt: skip
  print("|--:|--:|--:|--:|--:|--:|--:|--:|")
  for n, r in results.items():
    print(f"| {n} | {r['anvil_us']:.1f} | {r['anvil_it']:.0f} | {r['anvil_err']:.1e} | {r['osqp_us']:.1f} | "
          f"{r['osqp_it']:.0f} | {r['osqp_err']:.1e} | {r['osqp_us'] / r['anvil_us']:.1f}x |")  # fmt: skip
  per_stage = [results[n]["anvil_us"] / n for n in results]
  print("\ntargets:")
  print(f"  QP at N = 30: {results[30]['anvil_us']:.1f} us <= 60 us: {verdict(results[30]['anvil_us'], 60.0)}")
  print(f"  time per stage, max / min over N: {max(per_stage) / min(per_stage):.2f} (linear in N if ~1)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
