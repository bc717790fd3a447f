"""`campaign`: closed loops of several controllers over many scenarios (initial states, parameters, plant mismatch,
disturbances), each run by `simulate` and scored the same way, collected as one pandas DataFrame (a row per run).

Runs are independent tasks (controller, scenario) executed serially, on a local process pool (the default: one worker
per core, forked after the parent has built every controller once, so workers share its loaded libraries and its disk
cache), on a `concurrent.futures.Executor`, on a Ray cluster or on a Dask cluster (`anvil.mpc.executors`). Each run
draws its random numbers from its own generator, seeded by (seed, scenario index), so a campaign's results do not
depend on where or in which order its runs execute (solve and wall times excepted); every controller sees the same
disturbances in a scenario (common random numbers).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from anvil.mpc.controller import MPCFunction
from anvil.mpc.executors import Controller, Registry, execute
from anvil.mpc.simulation import ClosedLoop, simulate
from anvil.sqp import SQPStatus

F64 = NDArray[np.float64]
#: The keys a scenario may hold (x0 is required).
SCENARIO_KEYS = ("x0", "p", "plant_p", "disturbance", "noise", "seed")


@dataclass(frozen=True)
class _Task:
  """One run: a controller on a scenario."""

  controller: str
  index: int
  scenario: Mapping[str, Any]
  steps: int
  seed: int
  keep_arrays: bool


def campaign(
  controllers: Mapping[str, Controller],
  plant: Callable[..., Any],
  scenarios: Sequence[Mapping[str, Any]],
  steps: int,
  *,
  executor: Any = None,
  seed: int = 0,
  store: str | Path | None = None,
  progress: bool | None = None,
) -> Any:
  """Run every controller on every scenario in closed loop and score each run; returns a pandas DataFrame.

  Args:
    controllers: name -> MPCFunction, or a zero-argument factory returning one.
    plant: (x, u) -> x_next, or (x, u, plant_p) -> x_next for scenarios with a "plant_p" (model mismatch).
    scenarios: dicts with "x0" (required), "p" (the controllers' parameter), "plant_p" (the plant's), "disturbance"
      (the standard deviation of Gaussian noise added to each next state, scalar or per state), "noise" (that of the
      measurement noise on the state the controller sees) and "seed" (the run's random stream; default the
      scenario's index).
    steps: control steps per run.
    executor: None or "process" (a local process pool, one worker per core), "serial", a
      concurrent.futures.Executor, `ray` (the module: its current cluster), "ray" or "ray://<address>" (one Ray
      starts or joins), or a dask.distributed Client (`anvil.mpc.executors`). Workers the parent does not fork get
      the controllers and the plant pickled (with cloudpickle for Ray and Dask: lambdas pickle) and the libraries
      the parent built, so they compile nothing where their platform matches.
    seed: the campaign's seed: a run's random numbers come from numpy's generator seeded with (seed, scenario seed).
    store: an .npz path: the per-step arrays of every run (x, u, solve_times, iterations) are written there, keyed
      "<controller>/<scenario>/<array>".
    progress: a tqdm progress bar over the runs (default: on a terminal).

  The DataFrame has one row per run, in (controller, scenario) order whatever the executor: the controller, the
  scenario's index and fields (vectors as one column per entry: x0_0, x0_1, ...), the closed-loop cost, the largest
  bound violation, the steps completed, the controller calls that did not succeed, a count per SQP status, solve time
  median/p95/max (ms), mean SQP iterations, whether the run failed and why (the plant failed, or the run raised: a
  crash is recorded, the campaign goes on), and its wall time (s).
  """
  import pandas as pd
  from tqdm import tqdm

  tasks = _tasks(controllers, plant, scenarios, steps, seed, store is not None)
  registry = Registry(controllers, plant)
  registry.warm()  # NOTE: each controller built once here: forked workers inherit it, others find its library
  results: list[tuple[dict[str, Any], dict[str, F64]] | None] = [None] * len(tasks)
  show = progress if progress is not None else sys.stderr.isatty()
  with tqdm(total=len(tasks), desc="campaign", unit="run", disable=not show) as bar:
    for i, result in execute(tasks, _run, registry, executor, _failed):
      results[i] = result
      bar.update()
  done = [r for r in results if r is not None]
  if store is not None:
    np.savez_compressed(Path(store), **{k: v for _, arrays in done for k, v in arrays.items()})  # type: ignore[arg-type]
  return pd.DataFrame([row for row, _ in done])


def scenario_grid(
  lower: ArrayLike, upper: ArrayLike, points: int | Sequence[int], **fields: Any
) -> list[dict[str, Any]]:
  """Scenarios whose x0 lie on a regular grid over the box [lower, upper] (`points` per varying entry; entries with
  lower == upper stay fixed), each with the extra `fields` (e.g. disturbance=0.01)."""
  lo, hi = _box(lower, upper)
  varying = np.flatnonzero(hi > lo)
  counts = np.broadcast_to(np.asarray(points), varying.shape)
  axes = [np.linspace(lo[i], hi[i], int(k)) for i, k in zip(varying, counts, strict=True)]
  return [{"x0": _point(lo, varying, values), **fields} for values in product(*axes)]


def scenario_lhs(lower: ArrayLike, upper: ArrayLike, n: int, seed: int = 0, **fields: Any) -> list[dict[str, Any]]:
  """n scenarios whose x0 are a Latin hypercube sample of the box [lower, upper] (scipy.stats.qmc, seeded), each with
  the extra `fields`."""
  from scipy.stats import qmc  # NOTE: here: scipy.stats takes half a second to import (a worker imports anvil.mpc)

  lo, hi = _box(lower, upper)
  varying = np.flatnonzero(hi > lo)
  sample = qmc.LatinHypercube(d=max(varying.size, 1), seed=seed).random(n)[:, : varying.size]
  values = qmc.scale(sample, lo[varying], hi[varying]) if varying.size else sample
  return [{"x0": _point(lo, varying, row), **fields} for row in values]


def _box(lower: ArrayLike, upper: ArrayLike) -> tuple[F64, F64]:
  lo, hi = np.asarray(lower, dtype=np.float64).ravel(), np.asarray(upper, dtype=np.float64).ravel()
  if lo.shape != hi.shape or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or np.any(hi < lo):
    raise ValueError(f"scenarios: lower and upper must be finite vectors of one size with lower <= upper, got {lo} "
                     f"and {hi}")  # fmt: skip
  return lo, hi


def _point(base: F64, varying: NDArray[np.intp], values: Any) -> F64:
  x0 = base.copy()
  x0[varying] = values
  return x0


def _tasks(controllers: Mapping[str, Controller], plant: Callable[..., Any], scenarios: Sequence[Mapping[str, Any]],
           steps: int, seed: int, keep_arrays: bool) -> list[_Task]:  # fmt: skip
  """The runs, checked: every controller on every scenario."""
  if not isinstance(controllers, Mapping) or not controllers:
    raise TypeError("campaign: controllers must be a non-empty dict name -> MPCFunction (or a factory of one)")
  for name, made in controllers.items():
    if not isinstance(name, str) or not (isinstance(made, MPCFunction) or callable(made)):
      raise TypeError(f"campaign: controllers[{name!r}] must be an MPCFunction or a factory of one, got "
                      f"{type(made).__name__}")  # fmt: skip
  if not callable(plant):
    raise TypeError(f"campaign: plant must be callable (x, u[, plant_p]) -> x_next, got {type(plant).__name__}")
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
    raise ValueError(f"campaign: steps must be an int >= 0, got {steps!r}")
  if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
    raise ValueError(f"campaign: seed must be an int >= 0, got {seed!r}")
  for i, s in enumerate(scenarios):
    if not isinstance(s, Mapping) or "x0" not in s:
      raise ValueError(f"campaign: scenarios[{i}] must be a dict with an 'x0', got {s!r}")
    if unknown := sorted(set(s) - set(SCENARIO_KEYS)):
      raise ValueError(f"campaign: scenarios[{i}] has unknown keys {unknown}; expected {', '.join(SCENARIO_KEYS)}")
  return [_Task(name, i, dict(s), steps, seed, keep_arrays) for name in controllers for i, s in enumerate(scenarios)]


def _run(registry: Registry, task: _Task) -> tuple[dict[str, Any], dict[str, F64]]:
  """One closed loop and its row (and arrays); an exception is recorded as a failed run."""
  start = time.perf_counter()
  try:
    run = _simulate(registry.controller(task.controller), registry.plant, task)
  except Exception as e:  # NOTE: a run that raises is a failed run: the campaign goes on
    message = f"{type(e).__name__}: {e} ({traceback.extract_tb(e.__traceback__)[-1].name})"
    return _failed_row(task, message, time.perf_counter() - start), {}
  row = {**_scenario_columns(task), **_metrics(run), "wall_s": time.perf_counter() - start}
  key = f"{task.controller}/{task.index}"
  arrays = {f"{key}/x": run.x, f"{key}/u": run.u, f"{key}/solve_times": run.solve_times,
            f"{key}/iterations": run.iterations.astype(np.float64)} if task.keep_arrays else {}  # fmt: skip
  return row, arrays


def _simulate(mpc: MPCFunction, plant: Callable[..., Any], task: _Task) -> ClosedLoop:
  """The scenario's closed loop: its plant (with its parameter and seeded disturbance) and the controller (seeing
  the state with seeded measurement noise)."""
  s = task.scenario
  rng = np.random.default_rng([task.seed, int(s.get("seed", task.index))])
  x0 = np.asarray(s["x0"], dtype=np.float64)
  sigma = lambda key: np.broadcast_to(np.asarray(s.get(key, 0.0), dtype=np.float64), x0.shape)
  # NOTE: drawn up front, disturbances first: the same for every controller
  noise = rng.standard_normal((task.steps, x0.size)) * sigma("disturbance")
  measurement = rng.standard_normal((task.steps, x0.size)) * sigma("noise")
  plant_p = s.get("plant_p")
  clock = iter(range(task.steps))

  def disturbed(x: F64, u: F64) -> Any:
    x_next = np.asarray(plant(x, u) if plant_p is None else plant(x, u, np.asarray(plant_p)), dtype=np.float64)
    return x_next + noise[next(clock)]

  observe = None if "noise" not in s else lambda t, x: x + measurement[t]
  return simulate(mpc, disturbed, x0, task.steps, s.get("p"), progress=False, observe=observe)


def _scenario_columns(task: _Task) -> dict[str, Any]:
  """The run's identity: controller, scenario index, and the scenario's fields (vectors one column per entry)."""
  columns: dict[str, Any] = {"controller": task.controller, "scenario": task.index}
  for key in SCENARIO_KEYS:
    if key in task.scenario:
      value = np.asarray(task.scenario[key], dtype=np.float64)
      columns.update({key: float(value)} if value.ndim == 0 else {f"{key}_{i}": float(v) for i, v in
                                                                   enumerate(value.ravel())})  # fmt: skip
  return columns


def _metrics(run: ClosedLoop) -> dict[str, Any]:
  """The run's scores."""
  m = run.metrics
  counts = {f"n_{status}": int(run.status_counts.get(str(status), 0)) for status in SQPStatus}
  return {"cost": m["cost"], "max_violation": m["max_violation"], "steps": m["steps"], "failures": run.failures,
          **counts, "solve_ms_median": m["solve_ms_median"], "solve_ms_p95": m["solve_ms_p95"],
          "solve_ms_max": m["solve_ms_max"], "iterations_mean": m["sqp_iterations_mean"],
          "failed": run.failure is not None, "failure": run.failure or "", "failed_step": run.failed_step}  # fmt: skip


def _failed(task: _Task, message: str) -> tuple[dict[str, Any], dict[str, F64]]:
  """The result of a run whose worker died."""
  return _failed_row(task, message, 0.0), {}


def _failed_row(task: _Task, message: str, wall: float) -> dict[str, Any]:
  """The row of a run that raised or whose worker died."""
  nan = float("nan")
  counts = {f"n_{status}": 0 for status in SQPStatus}
  return {**_scenario_columns(task), "cost": nan, "max_violation": nan, "steps": 0, "failures": 0, **counts,
          "solve_ms_median": nan, "solve_ms_p95": nan, "solve_ms_max": nan, "iterations_mean": nan, "failed": True,
          "failure": message, "failed_step": None, "wall_s": wall}  # fmt: skip
