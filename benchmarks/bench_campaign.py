"""Closed-loop campaign benchmark (issue 21): the same campaign on each executor, wall time and per-run overhead.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_campaign                       # 1000 runs of 200 steps
  .venv/bin/python -m benchmarks.bench_campaign --runs 200 --steps 100 --executors serial process

Campaign: the P2 stabilizing cart-pole MPC (N = 30, exact Hessian) on `--runs` initial states (a Latin hypercube of
xc in [-1, 1], theta in [-0.4, 0.4]) with a seeded process disturbance of 0.002, `--steps` steps each. Executors:
serial, the local process pool (one worker per core), a local Ray cluster (`ray.init(num_cpus=cores)`) and a Dask
LocalCluster (one single-threaded worker per core); cluster start-up is timed apart. Each frame is checked equal to
the serial one (solve and wall times excepted).

Per-run overhead: what an executor adds to a run's own compute (its wall time in the worker, `wall_s`), from the
campaign's wall time on `cores` workers: (wall x cores - sum of run walls) / runs, against the mean run wall.
Targets (issue 21): speed-up over serial >= 1.8x on 2 cores for the pool and Ray; overhead <= 5% of a run's compute.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import pandas as pd

from anvil.mpc import campaign, scenario_lhs
from anvil.problems import cartpole_mpc as cm
from benchmarks.common import verdict

TIMES = ["solve_ms_median", "solve_ms_p95", "solve_ms_max", "wall_s"]


def timed(executor: Any, controllers: dict[str, Any], plant: Any, scenarios: list[dict[str, Any]],
          steps: int) -> tuple[float, pd.DataFrame]:  # fmt: skip
  start = time.perf_counter()
  df = campaign(controllers, plant, scenarios, steps, executor=executor, progress=False)
  return time.perf_counter() - start, df


def with_cluster(name: str, cores: int, run: Any) -> tuple[float, float, pd.DataFrame]:
  """(start-up seconds, campaign seconds, frame) of `run(executor)` on a local cluster of `name`."""
  start = time.perf_counter()
  if name == "ray":
    import ray

    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
      up = time.perf_counter() - start
      return (up, *run(ray))
    finally:
      ray.shutdown()
  from distributed import Client, LocalCluster

  cluster = LocalCluster(n_workers=cores, threads_per_worker=1, dashboard_address=None)
  with cluster, Client(cluster) as client:
    up = time.perf_counter() - start
    return (up, *run(client))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--runs", type=int, default=1000, help="closed loops (scenarios)")
  parser.add_argument("--steps", type=int, default=200, help="steps per closed loop")
  parser.add_argument("--executors", nargs="+", default=["serial", "process", "ray", "dask"])
  args = parser.parse_args()
  cores = os.cpu_count() or 1
  controllers = {"p2": cm.stabilizing("bench_campaign_p2")}
  plant = cm.dynamics("bench_campaign_plant")
  scenarios = scenario_lhs([-1, -0.4, 0, 0], [1, 0.4, 0, 0], args.runs, seed=0, disturbance=0.002)
  campaign(controllers, plant, scenarios[:2], 5, executor="serial", progress=False)  # builds (or loads) once
  print(f"campaign: {args.runs} cart-pole closed loops of {args.steps} steps, {cores} cores")
  results: dict[str, tuple[float, float, pd.DataFrame]] = {}
  for name in args.executors:
    run = lambda executor: timed(executor, controllers, plant, scenarios, args.steps)
    results[name] = with_cluster(name, cores, run) if name in ("ray", "dask") else (0.0, *run(name))
  serial = results.get("serial")
  print("\n| executor | start-up s | wall s | speed-up | run compute ms | overhead per run ms | overhead | "
        "same frame |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
  for name, (up, wall, df) in results.items():
    compute = float(df["wall_s"].sum())
    workers = 1 if name == "serial" else cores
    overhead = max(wall * workers - compute, 0.0) / len(df)
    speedup = serial[1] / wall if serial else float("nan")
    same = serial is None or df.drop(columns=TIMES).equals(serial[2].drop(columns=TIMES))
    target = "" if name in ("serial", "dask") else f" {verdict(-speedup, -1.8)}"
    per_run = compute / len(df)
    print(f"| {name} | {up:.1f} | {wall:.2f} | {speedup:.2f}x{target} | {per_run * 1e3:.2f} | {overhead * 1e3:.2f} | "
          f"{overhead / per_run:.1%} {verdict(overhead, 0.05 * per_run)} | {same} |")  # fmt: skip


if __name__ == "__main__":
  main()
