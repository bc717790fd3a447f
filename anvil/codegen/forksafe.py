"""Locks that a forked child gets back unlocked.

A process forked while another of its threads holds a lock (in the middle of a controller's call, or of a build)
gives the child that lock held by a thread the child does not have: the child's first call would wait forever
(`multiprocessing` with the fork start method). Every lock anvil's callables and its JIT hold is made here, and each is
replaced by a new one in the child (`os.register_at_fork`). What the lock guarded stays consistent: a compiled call
holds the GIL from start to end, so no fork happens inside one, and the buffers a call stages are written again by the
next.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

#: (the owner, weakly; the attribute holding its lock; what makes a new one) of every lock made here.
_LOCKS: list[tuple[weakref.ref[Any], str, Callable[[], Any]]] = []


def owned_lock(owner: Any, attribute: str = "_lock", factory: Callable[[], Any] = threading.Lock) -> Any:
  """A new lock (`factory()`) for `owner.<attribute>`: in a forked child, `owner.<attribute>` is set to a new one."""
  if len(_LOCKS) > 64 and len(_LOCKS) & (len(_LOCKS) - 1) == 0:  # NOTE: at each power of two, forget dead owners
    _LOCKS[:] = [entry for entry in _LOCKS if entry[0]() is not None]
  _LOCKS.append((weakref.ref(owner), attribute, factory))
  return factory()


def _renew_in_child() -> None:
  for ref, attribute, factory in _LOCKS:
    if (owner := ref()) is not None:
      setattr(owner, attribute, factory())


if hasattr(os, "register_at_fork"):  # NOTE: POSIX
  os.register_at_fork(after_in_child=_renew_in_child)
