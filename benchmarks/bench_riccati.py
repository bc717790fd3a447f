"""Riccati interior point per stage: the flops one iteration does against the time it takes, at robot sizes.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_riccati                 # the chain's stage sizes, n_mass 3 4 5 6 8
  .venv/bin/python -m benchmarks.bench_riccati --sizes 5 --reps 50

Instances: for each chain size (anvil.problems.chain: nx = 3 (2M + 1) states, 3 inputs, M + 1 wall slacks, which
the MPC makes inputs of their stage that enter no dynamics), a random OCP QP of N = 40 stages with those sizes
(`random_qp`: random dynamics, PD costs, bounds on the inputs; a slack s >= 0 per wall row, which softens a bound on
a state in two general rows, x + s >= lo and x - s <= hi, as the MPC's; the other state rows without bounds), the
slack columns of B zero (nud = 3), solved cold to 1e-8. Time: the generated C++'s own solve time over its
iterations, median over the instances; per stage: divided by N. Flops per stage and iteration: the products of the
factorization ([A B]'P[A B] on the nx + nud columns that see the dynamics, the input elimination) and of the three
vector passes (residuals, predictor, corrector), 2 flops per multiply-add, as `iteration_flops` counts them; the
row updates, O(rows), are left out. GFlop/s = their ratio: how close the recursion runs to the machine.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from anvil.problems import chain
from anvil.problems.ocp_qp import random_qp
from anvil.qp import RiccatiQP

N = 40


def stage_sizes(n_mass: int) -> tuple[int, int, int]:
  """(nx, nu, nud) of the chain MPC's stage QP: the wall slacks are inputs of their stage outside the dynamics."""
  nx = chain.state_size(n_mass)
  slacks = len(chain.wall_indices(n_mass))
  return nx, chain.NU + slacks, chain.NU


def iteration_flops(nx: int, nu: int, nud: int) -> int:
  """Flops per stage of one interior-point iteration's dense products (module docstring)."""
  nd, nz = nx + nud, nx + nu
  blocks = lambda n: sum(min(4 * (i // 4) + 4, n) for i in range(n))  # entries the lower-triangle blocks compute
  factor = nx * nx * nd + nx * blocks(nd) + nu**3 // 6 + nu * nu * nx + nu * blocks(nx)
  vector_pass = 2 * nx * nx + 2 * nx * nd + 2 * nu * nx + nu * nu
  residuals = nz * nz + 2 * nx * nd
  return 2 * (factor + 2 * vector_pass + residuals)


def instance(rng: np.random.Generator, nx: int, nu: int, nud: int) -> dict[str, np.ndarray]:
  """A random OCP QP of the chain's stage sizes with its soft wall rows (module docstring)."""
  nz = nx + nu
  d = random_qp(rng, nx, nu, N, nz, 1, 1.0)
  d["B"][:, :, nud:] = 0.0
  d["lo"][:, :nx], d["hi"][:, :nx] = -np.inf, np.inf  # the states are bounded only through the soft rows
  d["lo"][:, nx + nud :], d["hi"][:, nx + nud :] = 0.0, np.inf  # s >= 0
  rows = []
  for e in range(nu - nud):  # x_j + s_e >= -0.5 and x_j - s_e <= 0.5
    for sign in (1.0, -1.0):
      row = np.zeros(nz)
      row[min(3 * e + 1, nx - 1)], row[nx + nud + e] = 1.0, sign
      rows.append(row)
  general = np.array(rows).reshape(-1, nz)
  d["G"] = np.concatenate([d["G"], np.broadcast_to(general, (N, *general.shape))], axis=1)
  d["lo"] = np.concatenate([d["lo"], np.tile([-0.5, -np.inf], (N, nu - nud))], axis=1)
  d["hi"] = np.concatenate([d["hi"], np.tile([np.inf, 0.5], (N, nu - nud))], axis=1)
  return d


def run(n_mass: int, reps: int) -> dict[str, float]:
  """Per-stage time and flops of one iteration at the chain size `n_mass`."""
  nx, nu, nud = stage_sizes(n_mass)
  nz = nx + nu
  qp = RiccatiQP(f"bench_riccati_{n_mass}", nx, nu, N, ng=nz + 2 * (nu - nud), ngN=1, nud=nud)
  rng = np.random.default_rng(n_mass)
  per_iteration, iterations = [], []
  for _ in range(reps):
    sol = qp(1e-8, **instance(rng, nx, nu, nud))
    if sol.status != "solved":
      raise RuntimeError(f"bench_riccati: n_mass {n_mass}: the QP ended {sol.status}")
    per_iteration.append(sol.solve_time / sol.iterations)
    iterations.append(sol.iterations)
  seconds = statistics.median(per_iteration) / N
  flops = iteration_flops(nx, nu, nud)
  return {"nx": nx, "nu": nu, "nud": nud, "its": statistics.mean(iterations), "us": seconds * 1e6,
          "flops": flops, "gflops": flops / seconds * 1e-9}  # fmt: skip


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", type=int, nargs="+", default=list(chain.SIZES), help="chain n_mass values")
  parser.add_argument("--reps", type=int, default=20, help="instances per size")
  args = parser.parse_args()
  print(f"Riccati interior point, N = {N}: per stage and iteration (median over {args.reps} instances)")
  print(f"  {'n_mass':>6} {'nx':>4} {'nu':>4} {'nud':>4} {'its':>5} {'kflop':>8} {'us':>8} {'GFlop/s':>8}")
  for n_mass in args.sizes:
    r = run(n_mass, args.reps)
    print(f"  {n_mass:>6} {r['nx']:>4} {r['nu']:>4} {r['nud']:>4} {r['its']:>5.1f} {r['flops'] / 1e3:>8.1f} "
          f"{r['us']:>8.2f} {r['gflops']:>8.2f}")  # fmt: skip


if __name__ == "__main__":
  main()
