"""Building in parallel: the uncached functions of a module are scheduled and rendered in forked worker processes,
which leave their code in the on-disk cache where the parent then reads it, and the kernels of one large function are
rendered by forked processes too (tinygrad's rewrites are pure Python, so threads would not run them side by side)."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from tinygrad.uop.ops import UOp

from anvil.codegen.base import FunctionBase
from anvil.codegen.build import OUTPUT_LOCK, Progress
from anvil.codegen.renderer import RenderedKernel

#: Kernels a render worker must have to be worth forking (forking a large Python process takes tens of milliseconds,
#: rendering one kernel about a tenth of a second).
KERNELS_PER_RENDER_WORKER = 8
#: Seconds a build waits for a render worker before it kills it and renders that worker's kernels itself.
RENDER_WORKER_TIMEOUT_S = 600.0

_pending: list[FunctionBase] = []  # what the forked workers build, by index (they inherit it)


def build_jobs() -> int:
  """Worker processes for a build: $ANVIL_BUILD_JOBS, else the cores this process may run on."""
  if value := os.environ.get("ANVIL_BUILD_JOBS"):
    if not value.isdigit() or int(value) < 1:
      raise ValueError(f"ANVIL_BUILD_JOBS must be a positive integer, got {value!r}")
    return int(value)
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: prctl(2) option: the signal this process gets when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


def _exit_with_parent(parent: int) -> None:
  """In a worker: be killed when the parent process dies (killed mid-build), instead of building on as an orphan."""
  libc = ctypes.CDLL(None, use_errno=True)
  libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  if os.getppid() != parent:  # NOTE: the parent died before prctl took effect
    os._exit(1)


def _build(index: int) -> None:
  """In a worker: render one function, whose code lands in the cache. A failure is left to the parent, which builds
  that function again when it reads its code and raises the error itself."""
  with contextlib.suppress(Exception):
    _ = _pending[index].header_code


def build_in_parallel(fns: Sequence[FunctionBase]) -> None:
  """Build the functions among `fns` whose code still needs scheduling and rendering in forked workers (largest
  first), when there are at least two of them and two workers, on Linux, in a process running one thread (forking a
  multi-threaded process can deadlock the child); otherwise nothing happens here and they are built one after the
  other when their code is read. A worker is killed when this process dies."""
  global _pending
  sizes = {f: f.build_size for f in fns}
  pending = sorted((f for f in fns if sizes[f] > 0), key=lambda f: -sizes[f])
  jobs = min(len(pending), build_jobs())
  if jobs < 2 or sys.platform != "linux" or threading.active_count() > 1:
    return
  _pending = pending
  try:
    with multiprocessing.get_context("fork").Pool(jobs, _exit_with_parent, (os.getpid(),)) as pool:
      pool.map(_build, range(len(_pending)), chunksize=1)
  finally:
    _pending = []


def render_in_parallel(
  jobs: Sequence[tuple[UOp, str]], render: Callable[[UOp, str], RenderedKernel], progress: Progress | None = None
) -> list[RenderedKernel]:
  """`render(ast, name)` for every job, in order. With enough kernels (KERNELS_PER_RENDER_WORKER per worker, at most
  build_jobs() workers) on Linux, forked processes render every n-th kernel each while this one renders its own
  share; a worker that fails, or hangs past RENDER_WORKER_TIMEOUT_S, has its share rendered here instead."""
  workers = min(build_jobs(), len(jobs) // KERNELS_PER_RENDER_WORKER)
  if workers < 2 or not _can_fork():
    return [_render(render, job, progress, f"{i + 1} of {len(jobs)}") for i, job in enumerate(jobs)]
  shares = [range(w, len(jobs), workers) for w in range(workers)]
  children = [_fork_renderer([jobs[i] for i in share], render) for share in shares[1:]]
  try:
    rendered = {i: _render(render, jobs[i], progress, f"in {workers} processes") for i in shares[0]}
  except BaseException:
    for child in children:
      if child is not None:
        os.kill(child[0], signal.SIGKILL)
        _collect(*child)
    raise
  for child, share in zip(children, shares[1:], strict=True):
    kernels = None if child is None else _collect(*child)
    if kernels is None or len(kernels) != len(share):
      kernels = [render(*jobs[i]) for i in share]
    rendered.update(zip(share, kernels, strict=True))
  return [rendered[i] for i in range(len(jobs))]


def _render(
  render: Callable[[UOp, str], RenderedKernel], job: tuple[UOp, str], progress: Progress | None, what: str
) -> RenderedKernel:
  kernel = render(*job)
  if progress is not None:
    progress.update(f"rendered kernel {kernel.name} ({what})")
  return kernel


def _can_fork() -> bool:
  """Linux, and no thread besides this one but anvil's progress printers (whose writes OUTPUT_LOCK fences): a fork
  copies only the calling thread, so a lock another thread held would stay held in the child forever."""
  others = [t for t in threading.enumerate() if t is not threading.current_thread()]
  return sys.platform == "linux" and all(t.name.startswith("anvil-progress-") for t in others)


def _fork_renderer(jobs: list[tuple[UOp, str]], render: Callable[[UOp, str], RenderedKernel]) -> tuple[int, int] | None:
  """A child process rendering `jobs` and writing the pickled kernels into a pipe: (its pid, the pipe's read end);
  None when the system refuses another process (its jobs are then rendered here)."""
  parent = os.getpid()
  read, write = os.pipe()
  try:
    with OUTPUT_LOCK:
      pid = os.fork()
  except OSError:
    os.close(read)
    os.close(write)
    return None
  if pid == 0:  # NOTE: the child leaves through os._exit, never returning into the build
    status = 1
    try:
      os.close(read)
      _exit_with_parent(parent)
      data = pickle.dumps([render(*job) for job in jobs])
      with os.fdopen(write, "wb") as pipe:
        pipe.write(data)
      status = 0
    finally:
      os._exit(status)
  os.close(write)
  return pid, read


def _collect(pid: int, fd: int) -> list[RenderedKernel] | None:
  """The kernels a render worker sent, or None if it failed or hung (then it is killed)."""
  chunks: list[bytes] = []
  deadline = time.monotonic() + RENDER_WORKER_TIMEOUT_S
  try:
    while True:
      ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
      if not ready:
        os.kill(pid, signal.SIGKILL)
        chunks = []
        break
      if not (chunk := os.read(fd, 1 << 20)):
        break
      chunks.append(chunk)
  finally:
    os.close(fd)
    _, status = os.waitpid(pid, 0)
  if status != 0 or not chunks:
    return None
  try:
    kernels = pickle.loads(b"".join(chunks))
  except Exception:  # NOTE: a damaged pipe: the share is rendered here
    return None
  return kernels if all(isinstance(k, RenderedKernel) for k in kernels) else None
