"""`campaign`: closed loops of several controllers over many scenarios (initial states, parameters, plant mismatch,
disturbances), each run by `simulate` and scored the same way, collected as one pandas DataFrame (a row per run).

Runs are independent tasks (controller, scenario) executed serially, on a local process pool (the default: one worker
per core, forked after the parent has built every controller once, so workers share its loaded libraries and its disk
cache), or on any `concurrent.futures.Executor` given. Each run draws its random numbers from its own generator, seeded
by (seed, scenario index), so a campaign's results do not depend on where or in which order its runs execute (solve
and wall times excepted); every controller sees the same disturbances in a scenario (common random numbers).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import qmc

from anvil.mpc.controller import MPCFunction
from anvil.mpc.simulation import ClosedLoop, simulate
from anvil.sqp import SQPStatus

F64 = NDArray[np.float64]
#: A controller, or a zero-argument factory building it (workers call it; the disk cache spares the compile).
Controller = MPCFunction | Callable[[], MPCFunction]
#: The keys a scenario may hold (x0 is required).
SCENARIO_KEYS = ("x0", "p", "plant_p", "disturbance", "seed")


@dataclass(frozen=True)
class _Task:
  """One run: a controller on a scenario."""

  controller: str
  index: int
  scenario: Mapping[str, Any]
  steps: int
  seed: int
  keep_arrays: bool


class _Registry:
  """The controllers and the plant a worker runs (filled before the pool forks; factories called once per process)."""

  def __init__(self, controllers: Mapping[str, Controller], plant: Callable[..., Any]) -> None:
    self.controllers, self.plant = dict(controllers), plant
    self.built: dict[str, MPCFunction] = {}
    self.token = os.urandom(8).hex()  # which campaign: a worker keeps one registry per campaign

  def __getstate__(self) -> dict[str, Any]:
    """What ships to another process: the controllers (factories) and the plant, not what this one built."""
    return {"controllers": self.controllers, "plant": self.plant, "built": {}, "token": self.token}

  def controller(self, name: str) -> MPCFunction:
    """The controller `name`, built on first use in this process."""
    if name not in self.built:
      made = self.controllers[name]
      mpc = made if isinstance(made, MPCFunction) else made()
      if not isinstance(mpc, MPCFunction):
        raise TypeError(f"campaign: the factory of controller {name!r} returned {type(mpc).__name__}, not an "
                        "MPCFunction")  # fmt: skip
      self.built[name] = mpc
    return self.built[name]


_REGISTRY: _Registry | None = None


def _install(registry: _Registry) -> None:
  """The worker's registry (a pool's initializer)."""
  global _REGISTRY
  _REGISTRY = registry


def campaign(
  controllers: Mapping[str, Controller],
  plant: Callable[..., Any],
  scenarios: Sequence[Mapping[str, Any]],
  steps: int,
  *,
  executor: Executor | str | None = None,
  seed: int = 0,
  store: str | Path | None = None,
  progress: bool | None = None,
) -> Any:
  """Run every controller on every scenario in closed loop and score each run; returns a pandas DataFrame.

  Args:
    controllers: name -> MPCFunction, or a zero-argument factory returning one.
    plant: (x, u) -> x_next, or (x, u, plant_p) -> x_next for scenarios with a "plant_p" (model mismatch).
    scenarios: dicts with "x0" (required), "p" (the controllers' parameter), "plant_p" (the plant's), "disturbance"
      (the standard deviation of Gaussian noise added to each next state, scalar or per state) and "seed" (the run's
      random stream; default the scenario's index).
    steps: control steps per run.
    executor: None (a local process pool, one worker per core), "serial", "process", or a
      concurrent.futures.Executor (whose workers must reach the controllers: factories, or a fork-based pool).
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

  tasks = _tasks(controllers, plant, scenarios, steps, seed, store is not None)
  registry = _Registry(controllers, plant)
  for name in controllers:  # NOTE: build (or load) each once here: forked workers inherit it, others hit the cache
    _warm(registry.controller(name))
  rows: dict[tuple[str, int], dict[str, Any]] = {}
  arrays: dict[str, F64] = {}
  show = progress if progress is not None else sys.stderr.isatty()
  for row, run_arrays in _execute(tasks, registry, executor, show):
    rows[(row["controller"], row["scenario"])] = row
    arrays.update(run_arrays)
  if store is not None:
    np.savez_compressed(Path(store), **arrays)  # type: ignore[arg-type]
  return pd.DataFrame([rows[(t.controller, t.index)] for t in tasks])


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


def _warm(mpc: MPCFunction) -> None:
  """Build (or load from the cache) the controller's library."""
  _ = mpc.handle


def _execute(tasks: list[_Task], registry: _Registry, executor: Executor | str | None,
             show: bool) -> Iterator[tuple[dict[str, Any], dict[str, F64]]]:  # fmt: skip
  """The runs' results as they complete."""
  from tqdm import tqdm

  if not (executor is None or executor in ("serial", "process") or isinstance(executor, Executor)):
    raise ValueError(f"campaign: executor must be None, 'serial', 'process' or a concurrent.futures.Executor, got "
                     f"{executor!r}")  # fmt: skip
  bar = tqdm(total=len(tasks), desc="campaign", unit="run", disable=not show)
  try:
    if executor == "serial" or len(tasks) <= 1:
      _install(registry)
      runs: Iterator[tuple[dict[str, Any], dict[str, F64]]] = (_run(t) for t in tasks)
    elif isinstance(executor, Executor):
      futures = [executor.submit(_run_with, registry, t) for t in tasks]
      runs = (_collect(t, f) for t, f in zip(tasks, futures, strict=True))
    else:
      runs = _on_local_pool(tasks, registry)
    for result in runs:
      yield result
      bar.update()
  finally:
    bar.close()


def _on_local_pool(tasks: list[_Task], registry: _Registry) -> Iterator[tuple[dict[str, Any], dict[str, F64]]]:
  """The runs on a local process pool (forked: workers inherit the built controllers). Where a worker dies (the pool
  breaks), each run that was in flight is rerun alone in a pool of its own: the one that kills its worker again is
  recorded as failed, the others complete; the rest go on in a new pool."""
  context = _fork_context()
  started = context.Array("b", len(tasks), lock=False)  # 1 while a run executes in a worker
  pending = list(range(len(tasks)))
  while pending:
    done: set[int] = set()
    for i, result in _pool_runs(context, registry, started, tasks, pending, os.cpu_count() or 1):
      done.add(i)
      yield result
    pending = [i for i in pending if i not in done]
    suspects = [i for i in pending if started[i]]
    if pending and not done and not suspects:  # NOTE: the pool broke before any run began: it cannot run them
      for i in pending:
        yield _failed_row(tasks[i], "the worker pool failed before the run began", 0.0), {}
      return
    for i in suspects:
      started[i] = 0
      alone = list(_pool_runs(context, registry, started, tasks, [i], 1))
      yield alone[0][1] if alone else (_failed_row(tasks[i], "the worker process died running it", 0.0), {})
    pending = [i for i in pending if i not in set(suspects)]


def _pool_runs(context: Any, registry: _Registry, started: Any, tasks: list[_Task], indices: list[int],
               workers: int) -> Iterator[tuple[int, tuple[dict[str, Any], dict[str, F64]]]]:  # fmt: skip
  """(index, result) of the runs `indices` on a new pool, in order, until it breaks (a worker died)."""
  pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_install_local,
                             initargs=(registry, started))  # fmt: skip
  try:
    futures = {i: pool.submit(_run_local, i, tasks[i]) for i in indices}
    for i in indices:
      try:
        result = futures[i].result()
      except BrokenProcessPool:
        return
      yield i, result
  finally:
    pool.shutdown(cancel_futures=True)


_STARTED: Any = None


def _install_local(registry: _Registry, started: Any) -> None:
  """A local pool worker's registry and the runs' started flags."""
  global _STARTED
  _install(registry)
  _STARTED = started


def _run_local(index: int, task: _Task) -> tuple[dict[str, Any], dict[str, F64]]:
  """A run on the local pool, flagged while it executes (a worker that dies leaves its flag set)."""
  _STARTED[index] = 1
  result = _run(task)
  _STARTED[index] = 0
  return result


def _fork_context() -> Any:
  """fork where the platform has it (workers inherit the built controllers), else spawn."""
  methods = multiprocessing.get_all_start_methods()
  return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _collect(task: _Task, future: Future[Any]) -> tuple[dict[str, Any], dict[str, F64]]:
  """A run's result, or a failed run where its worker died."""
  try:
    result: tuple[dict[str, Any], dict[str, F64]] = future.result()
    return result
  except Exception as e:  # NOTE: the worker process died (or the executor failed it): a failed run, not a lost campaign
    return _failed_row(task, f"the worker failed: {type(e).__name__}: {e}", 0.0), {}


def _run_with(registry: _Registry, task: _Task) -> tuple[dict[str, Any], dict[str, F64]]:
  """A run on a given executor's worker (the registry shipped with it, installed where the worker has none)."""
  if _REGISTRY is None or _REGISTRY.token != registry.token:
    _install(registry)
  return _run(task)


def _run(task: _Task) -> tuple[dict[str, Any], dict[str, F64]]:
  """One closed loop and its row (and arrays); an exception is recorded as a failed run."""
  assert _REGISTRY is not None
  start = time.perf_counter()
  try:
    mpc = _REGISTRY.controller(task.controller)
    run = _simulate(mpc, _REGISTRY.plant, task)
  except Exception as e:  # NOTE: a run that raises is a failed run: the campaign goes on
    message = f"{type(e).__name__}: {e} ({traceback.extract_tb(e.__traceback__)[-1].name})"
    return _failed_row(task, message, time.perf_counter() - start), {}
  row = {**_scenario_columns(task), **_metrics(run), "wall_s": time.perf_counter() - start}
  key = f"{task.controller}/{task.index}"
  arrays = {f"{key}/x": run.x, f"{key}/u": run.u, f"{key}/solve_times": run.solve_times,
            f"{key}/iterations": run.iterations.astype(np.float64)} if task.keep_arrays else {}  # fmt: skip
  return row, arrays


def _simulate(mpc: MPCFunction, plant: Callable[..., Any], task: _Task) -> ClosedLoop:
  """The scenario's closed loop: its plant (with its parameter and seeded disturbance) and the controller."""
  s = task.scenario
  rng = np.random.default_rng([task.seed, int(s.get("seed", task.index))])
  x0 = np.asarray(s["x0"], dtype=np.float64)
  sigma = np.broadcast_to(np.asarray(s.get("disturbance", 0.0), dtype=np.float64), x0.shape)
  noise = rng.standard_normal((task.steps, x0.size)) * sigma  # NOTE: drawn up front: the same for every controller
  plant_p = s.get("plant_p")
  clock = iter(range(task.steps))

  def disturbed(x: F64, u: F64) -> Any:
    x_next = np.asarray(plant(x, u) if plant_p is None else plant(x, u, np.asarray(plant_p)), dtype=np.float64)
    return x_next + noise[next(clock)]

  return simulate(mpc, disturbed, x0, task.steps, s.get("p"), progress=False)


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


def _failed_row(task: _Task, message: str, wall: float) -> dict[str, Any]:
  """The row of a run that raised or whose worker died."""
  nan = float("nan")
  counts = {f"n_{status}": 0 for status in SQPStatus}
  return {**_scenario_columns(task), "cost": nan, "max_violation": nan, "steps": 0, "failures": 0, **counts,
          "solve_ms_median": nan, "solve_ms_p95": nan, "solve_ms_max": nan, "iterations_mean": nan, "failed": True,
          "failure": message, "failed_step": None, "wall_s": wall}  # fmt: skip
