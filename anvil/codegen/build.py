"""Build feedback: every stage of a build is timed and logged through the `anvil` logger; long builds show progress."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from anvil.codegen.forksafe import owned_lock

logger = logging.getLogger("anvil")

#: How many times each build stage actually ran in this process (a warm cache skips `schedule`, `render`, `compile`).
STAGE_COUNTS: Counter[str] = Counter()
#: Seconds before a running build starts printing progress to stderr.
PROGRESS_AFTER_S = 2.0
#: Held while a progress line is written; a build forks its render workers under it, so no worker starts with the
#: stream's lock held by a thread it does not have.
OUTPUT_LOCK = owned_lock(sys.modules[__name__], "OUTPUT_LOCK")


class Progress:
  """Prints `anvil: building <name>: <stage> … <elapsed>` to stderr once a build runs longer than PROGRESS_AFTER_S."""

  def __init__(self, name: str):
    self.name, self.stage, self.detail = name, "", ""
    self._start = time.perf_counter()
    self._stop = threading.Event()
    self._printed = False
    self._thread = threading.Thread(target=self._run, name=f"anvil-progress-{name}", daemon=True)
    self._thread.start()

  def update(self, detail: str) -> None:
    """Record what the current stage is doing (shown on the next progress line)."""
    self.detail = detail

  def _run(self) -> None:
    if self._stop.wait(PROGRESS_AFTER_S):
      return
    while True:
      self._print(final=False)
      if self._stop.wait(1.0 if sys.stderr.isatty() else 5.0):
        return

  def _print(self, final: bool) -> None:
    elapsed = time.perf_counter() - self._start
    what = f"{self.stage} {self.detail}".strip() if not final else f"{self.stage} done"
    end = "\n" if final or not sys.stderr.isatty() else ""
    with OUTPUT_LOCK:
      sys.stderr.write(
        f"\ranvil: building {self.name}: {what} ({elapsed:.1f} s)\x1b[K{end}"
        if sys.stderr.isatty()
        else f"anvil: building {self.name}: {what} ({elapsed:.1f} s){end}"
      )
      sys.stderr.flush()
    self._printed = True

  def close(self) -> None:
    """Stop the progress thread; finish the progress line if one was printed."""
    self._stop.set()
    self._thread.join()
    if self._printed:
      self._print(final=True)


_active: dict[str, Progress] = {}
# NOTE: tinygrad keeps global state (hash-consing caches, Context variables) and is not thread-safe, so build stages
# of all functions run one at a time; calling compiled functions needs no lock.
_BUILD_LOCK = owned_lock(sys.modules[__name__], "_BUILD_LOCK", threading.RLock)


@contextmanager
def stage(name: str, what: str) -> Iterator[Progress]:
  """Time and log one build stage (`trace`, `derive`, `schedule`, `render`, `compile`) of function `name`.

  Nested stages of the same function share one progress indicator.
  """
  with _BUILD_LOCK, _timed_stage(name, what) as progress:
    yield progress


@contextmanager
def _timed_stage(name: str, what: str) -> Iterator[Progress]:
  outer = name not in _active
  progress = _active.setdefault(name, Progress(name)) if outer else _active[name]
  previous, progress.stage, progress.detail = progress.stage, what, ""
  start = time.perf_counter()
  try:
    yield progress
  finally:
    STAGE_COUNTS[what] += 1
    logger.info("%s: %s %.3f s", name, what, time.perf_counter() - start)
    if outer:
      _active.pop(name).close()
    progress.stage = previous
