"""Where a campaign's runs execute: serially, on a local process pool, on a `concurrent.futures.Executor`, on a Ray
cluster or on a Dask cluster. One interface, `execute(tasks, run, registry, executor, failed)`: every task runs as
`run(registry, task)` in some worker and its result comes back; a task whose worker dies gets `failed(task, why)`.

The registry is what a worker needs besides the task: the controllers (MPCFunction objects or factories of them), the
plant, and the compiled libraries the parent built (`ShippedLibrary`). Workers the parent forks inherit it; others
get it pickled once per worker (FunctionBase objects pickle as their constructor call: a worker traces them again
and, its cache holding the shipped libraries, compiles nothing where its platform matches the parent's).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import cached_property
from typing import Any, TypeVar

from anvil.codegen.base import FunctionBase
from anvil.codegen.jit import ShippedLibrary
from anvil.mpc.controller import MPCFunction
from anvil.mpc.costs import LeastSquares

T = TypeVar("T")
R = TypeVar("R")
#: A controller, or a zero-argument factory building it (workers call it; the disk cache spares the compile).
Controller = MPCFunction | Callable[[], MPCFunction]


class Registry:
  """The controllers and the plant a worker runs, and the libraries they were built into (installed into a worker's
  cache when it unpickles the registry). Controllers are built on first use in each process."""

  def __init__(self, controllers: Mapping[str, Controller], plant: Callable[..., Any]) -> None:
    self.controllers, self.plant = dict(controllers), plant
    self.built: dict[str, MPCFunction] = {}
    self.token = os.urandom(8).hex()  # which campaign: a worker keeps one registry per campaign

  def controller(self, name: str) -> MPCFunction:
    """The controller `name`, built (or loaded from the cache) on first use in this process."""
    if name not in self.built:
      made = self.controllers[name]
      mpc = made if isinstance(made, MPCFunction) else made()
      if not isinstance(mpc, MPCFunction):
        raise TypeError(f"campaign: the factory of controller {name!r} returned {type(mpc).__name__}, not an "
                        "MPCFunction")  # fmt: skip
      self.built[name] = mpc
    return self.built[name]

  def warm(self) -> list[Any]:
    """Build every controller in this process and load the libraries a run calls (the controller's, its stage
    cost's, a generated plant's), so no run pays for it; returns those functions."""
    functions: list[Any] = []
    for name in self.controllers:
      mpc = self.controller(name)
      cost = mpc.stage_cost
      functions += [mpc, cost.residual if isinstance(cost, LeastSquares) else cost]
    if isinstance(self.plant, FunctionBase):
      functions.append(self.plant)
    for f in functions:
      _ = f.handle
    return functions

  @cached_property
  def libraries(self) -> tuple[ShippedLibrary, ...]:
    """The libraries a run loads here (after `warm`), for workers elsewhere: read when the registry is first pickled
    (a serial or forked campaign never reads them)."""
    paths = dict.fromkeys(str(p) for f in self.warm() for p in getattr(f, "library_paths", (f.library,)))
    return tuple(ShippedLibrary.of(p) for p in paths)

  def __getstate__(self) -> dict[str, Any]:
    """What ships to another process: the libraries, not what this one built (a worker builds its own, finding the
    libraries in its cache)."""
    return {**self.__dict__, "built": {}, "libraries": self.libraries}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.__dict__.update(state)
    for library in self.libraries:
      library.install()


_REGISTRY: Registry | None = None


def _installed(registry: Registry) -> Registry:
  """This worker's registry for the campaign of `registry` (the first one it received)."""
  global _REGISTRY
  if _REGISTRY is None or _REGISTRY.token != registry.token:
    _REGISTRY = registry
    if not registry.built:  # NOTE: unpickled here: build before the first run (forked workers inherit the parent's)
      registry.warm()
  return _REGISTRY


def execute(
  tasks: Sequence[T],
  run: Callable[[Registry, T], R],
  registry: Registry,
  executor: Any,
  failed: Callable[[T, str], R],
) -> Iterator[tuple[int, R]]:
  """(index, result) of every task as it completes, on `executor`: None or "process" (the local pool), "serial",
  a concurrent.futures.Executor, the `ray` module or "ray"/"ray://<address>" (a Ray cluster), or a
  dask.distributed Client."""
  if executor == "serial" or (executor is None and len(tasks) <= 1):
    registry = _installed(registry)
    return ((i, run(registry, t)) for i, t in enumerate(tasks))
  if executor is None or executor == "process":
    return _local_pool(tasks, run, registry, failed)
  if isinstance(executor, Executor):
    futures = [executor.submit(_run_in_worker, run, registry, t) for t in tasks]
    return ((i, _result(f, tasks[i], failed)) for i, f in enumerate(futures))
  if _is_ray(executor):
    return _ray(tasks, run, registry, failed, executor)
  if type(executor).__module__.startswith("distributed") and hasattr(executor, "scatter"):
    return _dask(tasks, run, registry, failed, executor)
  raise ValueError(f"campaign: executor must be None, 'serial', 'process', a concurrent.futures.Executor, ray (or "
                   f"'ray', 'ray://<address>') or a dask.distributed Client, got {executor!r}")  # fmt: skip


def _run_in_worker(run: Callable[[Registry, T], R], registry: Registry, task: T) -> R:
  return run(_installed(registry), task)


def _result(future: Any, task: T, failed: Callable[[T, str], R]) -> R:
  """The future's result, or a failed run where its worker died."""
  try:
    result: R = future.result()
    return result
  except Exception as e:  # NOTE: the worker died (or the executor failed the task): a failed run, not a lost campaign
    return failed(task, f"the worker failed: {type(e).__name__}: {e}")


# *** the local process pool ***


def _local_pool(tasks: Sequence[T], run: Callable[[Registry, T], R], registry: Registry,
                failed: Callable[[T, str], R]) -> Iterator[tuple[int, R]]:  # fmt: skip
  """The tasks on a local process pool (forked where the platform can: workers inherit the built controllers). Where
  a worker dies (the pool breaks), each task that was in flight is rerun alone in a pool of its own: the one that
  kills its worker again is failed, the others complete; the rest go on in a new pool."""
  methods = multiprocessing.get_all_start_methods()
  context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
  started = context.Array("b", len(tasks), lock=False)  # 1 while a task executes in a worker
  pool_of = lambda indices, workers: _pool_runs(context, run, registry, started, tasks, indices, workers)
  pending = list(range(len(tasks)))
  while pending:
    done: set[int] = set()
    for i, result in pool_of(pending, os.cpu_count() or 1):
      done.add(i)
      yield i, result
    pending = [i for i in pending if i not in done]
    suspects = [i for i in pending if started[i]]
    if pending and not done and not suspects:  # NOTE: the pool broke before any task began: it cannot run them
      yield from ((i, failed(tasks[i], "the worker pool failed before the run began")) for i in pending)
      return
    for i in suspects:
      started[i] = 0
      alone = list(pool_of([i], 1))
      yield alone[0] if alone else (i, failed(tasks[i], "the worker process died running it"))
    pending = [i for i in pending if i not in set(suspects)]


def _pool_runs(context: Any, run: Callable[[Registry, T], R], registry: Registry, started: Any, tasks: Sequence[T],
               indices: list[int], workers: int) -> Iterator[tuple[int, R]]:  # fmt: skip
  """(index, result) of the tasks `indices` on a new pool, in order, until it breaks (a worker died)."""
  pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_install_local,
                             initargs=(registry, started))  # fmt: skip
  try:
    futures = {i: pool.submit(_run_local, run, i, tasks[i]) for i in indices}
    for i in indices:
      try:
        result = futures[i].result()
      except BrokenProcessPool:
        return
      yield i, result
  finally:
    pool.shutdown(cancel_futures=True)


_STARTED: Any = None


def _install_local(registry: Registry, started: Any) -> None:
  """A local pool worker's registry and the tasks' started flags."""
  global _STARTED
  _installed(registry)
  _STARTED = started


def _run_local(run: Callable[[Registry, T], R], index: int, task: T) -> R:
  """A task on the local pool, flagged while it executes (a worker that dies leaves its flag set)."""
  assert _REGISTRY is not None
  _STARTED[index] = 1
  result = run(_REGISTRY, task)
  _STARTED[index] = 0
  return result


# *** Ray ***


def _is_ray(executor: Any) -> bool:
  named = isinstance(executor, str) and (executor == "ray" or executor.startswith("ray://"))
  return named or getattr(executor, "__name__", None) == "ray"


#: Cluster tasks per CPU: runs go to Ray and Dask in chunks (their scheduling costs about a millisecond per task,
#: which a chunk of runs shares), enough of them to balance the load.
CHUNKS_PER_CPU = 8


def _chunks(count: int, cpus: int) -> list[list[int]]:
  """The task indices in chunks, CHUNKS_PER_CPU per CPU."""
  size = max(1, count // (CHUNKS_PER_CPU * max(1, cpus)))
  return [list(range(k, min(k + size, count))) for k in range(0, count, size)]


def _ray_chunk(run: Callable[[Registry, T], R], token: str, boxed: list[Any], chunk: list[T]) -> list[R]:
  """Tasks in a Ray worker: the registry fetched from the object store once per worker process and campaign."""
  if _REGISTRY is None or _REGISTRY.token != token:
    import ray

    return _run_chunk(run, ray.get(boxed[0]), chunk)
  return _run_chunk(run, _REGISTRY, chunk)


def _ray(tasks: Sequence[T], run: Callable[[Registry, T], R], registry: Registry, failed: Callable[[T, str], R],
         executor: Any) -> Iterator[tuple[int, R]]:  # fmt: skip
  """The tasks in chunks of Ray tasks (one CPU each, on the cluster's long-lived worker processes, which keep the
  registry between them). Where a worker dies, its chunk's tasks are rerun one per Ray task: the one that kills its
  worker again is failed, not retried."""
  import ray

  if isinstance(executor, str) and not ray.is_initialized():
    ray.init(address=None if executor == "ray" else executor)
  remote: Any = ray.remote(num_cpus=1, max_retries=0)(_ray_chunk)
  boxed = [ray.put(registry)]  # NOTE: in a list, so Ray hands the reference over unresolved
  chunks = _chunks(len(tasks), int(ray.cluster_resources().get("CPU", 1)))
  submit = lambda indices: remote.remote(run, registry.token, boxed, [tasks[i] for i in indices])
  refs = [submit(chunk) for chunk in chunks]
  for chunk, ref in zip(chunks, refs, strict=True):  # NOTE: in order: the driver sleeps in ray.get
    try:
      yield from zip(chunk, ray.get(ref), strict=True)
    except ray.exceptions.WorkerCrashedError:
      alone = [submit([i]) for i in chunk]
      for i, single in zip(chunk, alone, strict=True):
        try:
          yield i, ray.get(single)[0]
        except ray.exceptions.WorkerCrashedError as e:
          yield i, failed(tasks[i], f"the worker process died running it ({type(e).__name__})")
    except ray.exceptions.RayError as e:
      yield from ((i, failed(tasks[i], f"the worker failed: {type(e).__name__}: {e}")) for i in chunk)


# *** Dask ***


def _dask(tasks: Sequence[T], run: Callable[[Registry, T], R], registry: Registry, failed: Callable[[T, str], R],
          client: Any) -> Iterator[tuple[int, R]]:  # fmt: skip
  """The tasks in chunks on a Dask cluster, the registry scattered to every worker once. Where a worker dies (Dask
  retries a task on others, then gives up), its chunk's tasks are rerun one per Dask task."""
  shared = client.scatter(registry, broadcast=True)
  submit = lambda indices: client.submit(_run_chunk, run, shared, [tasks[i] for i in indices], pure=False)
  chunks = _chunks(len(tasks), sum(client.nthreads().values()))
  futures = [submit(chunk) for chunk in chunks]
  for chunk, future in zip(chunks, futures, strict=True):
    try:
      yield from zip(chunk, future.result(), strict=True)
    except Exception:  # NOTE: the chunk's worker died (KilledWorker) or Dask failed it: each run on its own
      alone = [client.submit(_run_in_worker, run, shared, tasks[i], pure=False) for i in chunk]
      yield from ((i, _result(f, tasks[i], failed)) for i, f in zip(chunk, alone, strict=True))


def _run_chunk(run: Callable[[Registry, T], R], registry: Registry, chunk: list[T]) -> list[R]:
  """Tasks on a cluster worker (the registry: the worker's copy of the campaign's)."""
  installed = _installed(registry)
  return [run(installed, task) for task in chunk]
