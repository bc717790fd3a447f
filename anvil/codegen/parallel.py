"""Building several functions at once: the uncached functions of a module are scheduled and rendered in forked worker
processes, which leave their code in the on-disk cache where the parent then reads it (tinygrad's rewrites are pure
Python, so threads would not run them side by side)."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Sequence

from anvil.codegen.base import FunctionBase

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
