"""Riccati interior point per stage: the flops one iteration does against the time it takes, at robot sizes.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_riccati                 # the chain's stage sizes, n_mass 3 4 5 6 8
  .venv/bin/python -m benchmarks.bench_riccati --sizes 5 --reps 50
  .venv/bin/python -m benchmarks.bench_riccati --condensing                    # partial condensing: block sizes
  .venv/bin/python -m benchmarks.bench_riccati --hpipm /path/to/acados/install  # against HPIPM, same condensing
  .venv/bin/python -m benchmarks.bench_riccati --hpipm /path/to/acados/install --fma  # and anvil with ANVIL_FMA=1

Instances: for each chain size (anvil.problems.chain: nx = 3 (2M + 1) states, 3 inputs, M + 1 wall slacks, which
the MPC makes inputs of their stage that enter no dynamics), a random OCP QP of N = 40 stages with those sizes
(`random_qp`: random dynamics, PD costs, bounds on the inputs; a slack s >= 0 per wall row, which softens a bound on
a state in two general rows, x + s >= lo and x - s <= hi, as the MPC's; the other state rows without bounds), the
slack columns of B zero (nud = 3), solved cold to 1e-8. Time: the generated C++'s own solve time over its
iterations, median over the instances; per stage: divided by N. Flops per stage and iteration: the products of the
factorization ([A B]'P[A B] on the nx + nud columns that see the dynamics, the input elimination) and of the three
vector passes (residuals, predictor, corrector), 2 flops per multiply-add, as `iteration_flops` counts them; the
row updates, O(rows), are left out. GFlop/s = their ratio: how close the recursion runs to the machine.

--condensing: RiccatiQP's partial condensing in blocks of M stages against none, on random OCP QPs (input boxes, a
soft row on the states per stage: elastic, priced L1 + L2) of sizes (nx, nu, N) from 4 to 39 states: per solve, cold
and warm started (the data nudged by 1-2%), medians over the instances and rounds (all block sizes of one size in
the same round, round robin); * marks RiccatiQP's condensing="auto" choice (anvil.qp.cost_model's, for cold
solves). Under each size, the cost model's times for the same sizes, rows and mean iterations (ratio to none), and
each choice's "regret": the measured time of the block size it chose over the least measured (cold, warm).

--hpipm PREFIX: the same soft QPs (chain sizes nx 9 ... 45, 3 inputs, N = 40) solved by anvil's RiccatiQP and by
HPIPM (benchmarks.hpipm_qp: acados's install prefix, SPEED mode) at the same partial condensing (anvil's blocks of M
stages, HPIPM's cond_N = N / M stages), both cold, to the same tolerance 1e-8, each instance's least time over
--reps repeats, then the median over the instances; per interior-point iteration: the solve's time (condensing and
expansion included; HPIPM's interior point alone beside it) over its iterations; and an iteration alone, the same
on both sides: each QP also solved with an iteration limit of 1 (anvil's a build with max_iter=1, HPIPM's iter_max),
the difference over the iterations past the first (`marginal`: what a solve does once, the condensing, the start,
the expansion, the last residuals, cancels; HPIPM's from its interior point's own timer, its condensing and expansion
outside it either way). Both sides' u_0 must agree to 1e-4
(HPIPM at its iteration limit, 100, is marked, not dropped: its iterations are still iterations). With --fma, anvil's
QPs are also built with fused multiply-adds (ANVIL_FMA=1; BLASFEO's Haswell and Skylake-X kernels fuse them too), a
row of their own ("M FMA"), timed in the same loop as the others and against the same HPIPM solves.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from anvil.problems import chain
from anvil.problems.ocp_qp import random_qp
from anvil.qp import RiccatiQP
from anvil.qp.cost_model import RiccatiCostModel
from benchmarks import hpipm_qp
from benchmarks.common import environment, print_markdown

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


#: (nx, nu, N) of the condensing table: the chain's stage sizes (n_mass 3, 4, 5, 6, 8, 9), a quadrotor's, a cart-pole's,
#: and others of 2 to 6 inputs (the first five sizes fitted the cost model's prices, the others check them).
CONDENSING_SIZES = ((4, 1, 100), (9, 3, 40), (12, 4, 40), (21, 3, 40), (39, 3, 40), (15, 3, 40), (27, 3, 40),
                    (45, 3, 40), (8, 2, 60), (30, 6, 30), (16, 2, 50))  # fmt: skip


def soft_instance(rng: np.random.Generator, nx: int, nu: int, n: int) -> dict[str, np.ndarray]:
  """A random OCP QP of n stages for RiccatiQP(boxes=True, quadratic_prices=True): bounds on the inputs, one soft
  row on the states per stage (elastic: L1 price 10, L2 price 100)."""
  nz = nx + nu
  d = random_qp(rng, nx, nu, n, nz + 1, 1, 1.0)
  d["G"] = d["G"][:, nz:]
  d["lo"][:, :nx], d["hi"][:, :nx] = -np.inf, np.inf
  d["lo"][:, nz:], d["hi"][:, nz:] = -0.3, np.inf
  d["z"], d["w"] = np.zeros((n, nz + 1)), np.zeros((n, nz + 1))
  d["z"][:, nz:], d["w"][:, nz:] = 10.0, 100.0
  d["loN"], d["hiN"] = np.append(np.full(nx, -np.inf), d["loN"]), np.append(np.full(nx, np.inf), d["hiN"])
  return d


#: Per block size, each solve's (seconds, iterations).
Solves = dict[int, list[tuple[float, int]]]


def condensing_row(nx: int, nu: int, n: int, blocks: list[int], reps: int) -> str:
  """One size's cold and warm solve times (ms) and iterations per block size, and their ratio to none."""
  blocks = sorted({1, *(b for b in blocks if b <= n)})
  kw: dict[str, Any] = dict(ng=nx + nu + 1, ngN=nx + 1, boxes=True, quadratic_prices=True)
  qps = {b: RiccatiQP(f"bench_condensing_{nx}_{nu}_{n}_{b}", nx, nu, n, condensing=b, **kw) for b in blocks}
  rng = np.random.default_rng(nx * 1000 + n)
  instances = [soft_instance(rng, nx, nu, n) for _ in range(6)]
  cold: Solves = {b: [] for b in blocks}
  warm: Solves = {b: [] for b in blocks}
  for _, d, b in itertools.product(range(reps), instances, blocks):
    first = qps[b](1e-8, **d)
    second = qps[b](1e-8, warm_start=True, **{**d, "x0": 1.02 * d["x0"], "g": 1.01 * d["g"]})
    if first.status != "solved" or second.status != "solved":
      raise RuntimeError(f"bench_riccati: ({nx}, {nu}, {n}) blocks {b}: {first.status}, {second.status}")
    cold[b].append((first.solve_time, first.iterations))
    warm[b].append((second.solve_time, second.iterations))
  ms = lambda runs: statistics.median(t for t, _ in runs) * 1e3
  cell = lambda runs, none: f"{ms(runs):7.3f} ({ms(runs) / ms(none):4.2f}x, {statistics.mean(i for _, i in runs):4.1f})"
  auto = RiccatiQP(f"bench_condensing_{nx}_{nu}_{n}_auto", nx, nu, n, **kw).condensing
  cells = [f"M {b}{'*' if b == auto else ' '} {cell(cold[b], cold[1])} {cell(warm[b], warm[1])}" for b in blocks]
  return f"  {nx:>3} {nu:>3} {n:>4} | " + " | ".join(cells) + "\n" + model_row(nx, nu, n, blocks, cold, warm, auto)


def model_row(nx: int, nu: int, n: int, blocks: list[int], cold: Solves, warm: Solves, auto: int) -> str:
  """The cost model's times for condensing_row's QPs (ratio to none) at their mean iterations, cold and warm, and the
  regret of a choice, its measured time over the least measured: RiccatiQP's "auto" for the cold solves, the model's
  at the warm solves' iterations for the warm ones."""
  parts = []
  for label, runs, choice in (("cold", cold, auto), ("warm", warm, None)):
    its = statistics.mean(i for b in blocks for _, i in runs[b])
    model = RiccatiCostModel(nx=nx, nu=nu, N=n, nud=nu, state_rows=1, iterations=its)
    chosen = model.best() if choice is None else choice
    median = {b: statistics.median(t for t, _ in runs[b]) for b in blocks}
    ratios = " ".join(f"{model.seconds(b) / model.seconds(1):4.2f}x" for b in blocks)
    regret = f"{median[chosen] / min(median.values()):.2f}" if chosen in median else "-"
    parts.append(f"{label} {ratios}, regret {regret} (M {chosen})")
  return "      model: " + "; ".join(parts)


#: (nx, nu) of the --hpipm table: the chain's states at n_mass 3, 5, 6, 9 with its 3 inputs (the wall's slacks are
#: HPIPM's soft-row slacks and anvil's elastic rows), and the partial condensings compared (blocks of M stages).
HPIPM_SIZES = ((9, 3), (21, 3), (27, 3), (45, 3))
HPIPM_BLOCKS = (1, 2, 5, 8)


def hpipm_instance(rng: np.random.Generator, nx: int, nu: int) -> dict[str, Any]:
  """soft_instance over N stages with its dynamics' random part scaled by 1 / sqrt(nx): A's spectral radius near
  1.1 at every size, as a discretized mechanical system's (random_qp's grows as 1 + 0.1 sqrt(nx): 1.7 at nx = 45,
  which makes the QP over 40 stages ill-conditioned enough to stall either solver)."""
  d = soft_instance(rng, nx, nu, N)
  d["A"] = np.eye(nx) + (d["A"] - np.eye(nx)) / np.sqrt(nx)
  return d


def fused_twins(name: str, fma: bool, *args: Any, **kw: Any) -> list[tuple[str, RiccatiQP]]:
  """RiccatiQP(name, *args, **kw) built as is and, with `fma`, also with fused multiply-adds (ANVIL_FMA=1), each
  built and loaded under its own flags: (label, QP) pairs, the label "" or " FMA"."""
  twins = []
  for fused in (False, True)[: 1 + fma]:
    with environment(ANVIL_FMA=str(int(fused))):
      qp = RiccatiQP(name + "_fma" * fused, *args, **kw)
      _ = qp.handle  # built and loaded here, under these flags
    twins.append((" FMA" * fused, qp))
  return twins


def marginal(seconds: float, iterations: int, one_iteration_seconds: float) -> float:
  """Seconds per interior-point iteration past the first: a solve's time less a one-iteration solve's of the same QP,
  over the iterations between them (what a solve spends once, the condensing, the start, the expansion, cancels)."""
  return (seconds - one_iteration_seconds) / max(iterations - 1, 1)


def hpipm_rows(prefix: Path, reps: int, tol: float = 1e-8, fma: bool = False) -> list[list[str]]:
  """The --hpipm table's rows: per size and condensing (and with `fma` anvil's fused build, a row of its own beside
  HPIPM's same numbers), both sides' iterations, solve time, time per iteration, and each side's interior-point
  iteration alone (`marginal`: each QP also solved with an iteration limit of 1) (module docstring)."""
  rows = []
  with tempfile.TemporaryDirectory(prefix="bench_hpipm_") as folder:
    out = Path(folder)
    exe = hpipm_qp.build_driver(prefix, out)
    for nx, nu in HPIPM_SIZES:
      kw: dict[str, Any] = dict(ng=nx + nu + 1, ngN=nx + 1, boxes=True, quadratic_prices=True)
      rng = np.random.default_rng(nx)
      instances = [hpipm_instance(rng, nx, nu) for _ in range(5)]
      for i, d in enumerate(instances):
        hpipm_qp.write_qp(d, out / f"qp{i}.bin")
      for M in HPIPM_BLOCKS:
        twins = fused_twins(f"bench_hpipm_{nx}_{nu}_{M}", fma, nx, nu, N, condensing=M, **kw)
        ones = dict(fused_twins(f"bench_hpipm_{nx}_{nu}_{M}_one", fma, nx, nu, N, condensing=M, max_iter=1, **kw))
        mine: dict[str, list[tuple[float, int, float]]] = {label: [] for label, _ in twins}
        theirs, unsolved = [], 0
        for i, d in enumerate(instances):
          first_inputs = {}
          for label, qp in twins:
            solves = [qp(tol, **d) for _ in range(reps)]
            if any(s.status != "solved" for s in solves):
              raise RuntimeError(f"bench_riccati: RiccatiQP{label} ({nx}, {nu}) M {M}: {solves[0].status}")
            best, its = min(s.solve_time for s in solves), solves[0].iterations
            one = min(ones[label](tol, **d).solve_time for _ in range(reps))
            mine[label].append((best, its, marginal(best, its, one)))
            first_inputs[label] = solves[0].u[0]
          hp = hpipm_qp.solve(exe, out / f"qp{i}.bin", (nx, nu, N), N // M, reps, tol)
          hp_one = hpipm_qp.solve(exe, out / f"qp{i}.bin", (nx, nu, N), N // M, reps, tol, iter_max=1)
          for label, u0 in first_inputs.items():
            if not np.allclose(hp.u0, u0, atol=1e-4):
              raise RuntimeError(f"bench_riccati: HPIPM ({nx}, {nu}) cond_N {N // M}: status {hp.status}, u_0 "
                                 f"{hp.u0} against anvil{label}'s {u0}")  # fmt: skip
          theirs.append((hp.seconds, hp.iterations, hp.ipm_seconds,
                         marginal(hp.ipm_seconds, hp.iterations, hp_one.ipm_seconds)))  # fmt: skip
          unsolved += hp.status != 0
        us = lambda runs, at=0: statistics.median(r[at] for r in runs) * 1e6
        its = lambda runs: statistics.mean(r[1] for r in runs)
        per = lambda runs, at=0: statistics.median(r[at] / r[1] for r in runs) * 1e6
        hpipm_its = f"{its(theirs):.1f}" + "*" * (unsolved > 0)
        for label, runs in mine.items():
          rows.append([str(nx), str(nu), f"{M}{label}", str(N // M), f"{its(runs):.1f}", f"{us(runs):.0f}",
                       f"{per(runs):.1f}", hpipm_its, f"{us(theirs):.0f}", f"{per(theirs):.1f}",
                       f"{per(theirs, 2):.1f}", f"{per(runs) / per(theirs):.2f}x", f"{us(runs, 2):.1f}",
                       f"{us(theirs, 3):.1f}", f"{us(runs, 2) / us(theirs, 3):.2f}x"])  # fmt: skip
  return rows


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", type=int, nargs="+", default=list(chain.SIZES), help="chain n_mass values")
  parser.add_argument("--reps", type=int, default=20, help="instances per size")
  parser.add_argument("--condensing", action="store_true", help="the partial condensing table instead")
  parser.add_argument("--blocks", type=int, nargs="+", default=[1, 2, 3, 4, 6], help="--condensing: block sizes")
  parser.add_argument("--hpipm", type=Path, help="HPIPM's install prefix (acados's): the same-condensing table")
  parser.add_argument("--fma", action="store_true", help="--hpipm: anvil also built with ANVIL_FMA=1, a row of its own")
  args = parser.parse_args()
  if args.hpipm:
    print(f"RiccatiQP against HPIPM (SPEED) on the same soft QPs, N = {N}, cold, tol 1e-8: median over 5 instances of")
    print(f"each one's least time over {args.reps} repeats; us per solve and per interior-point iteration (*: HPIPM")
    print("stopped at its iteration limit, 100, on some instance; its u_0 still within 1e-4 of anvil's); an iteration")
    print("alone: the solve less a one-iteration solve, over the iterations past the first (HPIPM's interior point's)")
    header = ["nx", "nu", "anvil M", "HPIPM cond_N", "anvil its", "anvil us", "anvil us/it", "HPIPM its", "HPIPM us",
              "HPIPM us/it", "HPIPM IPM alone us/it", "per iteration, anvil / HPIPM", "anvil iteration alone us",
              "HPIPM iteration alone us", "iteration alone, anvil / HPIPM"]  # fmt: skip
    print_markdown(header, hpipm_rows(args.hpipm, args.reps, fma=args.fma))
    return
  if args.condensing:
    print("RiccatiQP, partial condensing in blocks of M stages: per solve, cold then warm: ms (ratio to none, mean")
    print("iterations); * = RiccatiQP's condensing=\"auto\" choice; under each size, the cost model's ratios and its")
    print("choices' regret (measured time over the least)")
    for nx, nu, n in CONDENSING_SIZES:
      print(condensing_row(nx, nu, n, args.blocks, max(1, args.reps // 5)))
    return
  print(f"Riccati interior point, N = {N}: per stage and iteration (median over {args.reps} instances)")
  print(f"  {'n_mass':>6} {'nx':>4} {'nu':>4} {'nud':>4} {'its':>5} {'kflop':>8} {'us':>8} {'GFlop/s':>8}")
  for n_mass in args.sizes:
    r = run(n_mass, args.reps)
    print(f"  {n_mass:>6} {r['nx']:>4} {r['nu']:>4} {r['nud']:>4} {r['its']:>5.1f} {r['flops'] / 1e3:>8.1f} "
          f"{r['us']:>8.2f} {r['gflops']:>8.2f}")  # fmt: skip


if __name__ == "__main__":
  main()
