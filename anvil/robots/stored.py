"""Robot algorithms' traced graphs kept in anvil's cache: a warm build replays them without running their Python.

A robot algorithm's graph depends only on the robot's data (joints, frames, gravity, friction smoothing), on what is
computed (the algorithm, its frames, its wrenches' frames and reference) and on anvil.robots' own code, so it may be
stored under a key of those: unlike a user's function, whose closure no key can describe, nothing else can change it.
Tracing panda's ABA (with the RNEA and CRBA of its analytical derivatives) runs ~8000 tinygrad operations in 1 s; the
stored graph loads in 0.04 s, so a warm controller build is no longer mostly that trace.

The graph is tinygrad's UOps, pickled; the unpickler builds tinygrad objects only (no other class can be named in the
stream), and an entry that does not load is traced again and overwritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinygrad.helpers import DEV
from tinygrad.uop.ops import Ops, UOp

from anvil.codegen import NumericalFunction
from anvil.codegen.cache import cache_dir, read_artifact, write_atomic
from anvil.codegen.function import TINYGRAD_VERSION
from anvil.codegen.jit import sources_fingerprint
from anvil.codegen.trace import default_float

#: anvil.robots' own code (and anvil's version): a change to any algorithm makes every stored graph stale.
_FINGERPRINT = sources_fingerprint(Path(__file__).parent)


@dataclass(frozen=True)
class StoredGraph:
  """A robot algorithm's graph as `anvil.codegen.trace.replay` takes it: its inputs' UOps as the algorithm saw them,
  its outputs' UOps, and whether it returned a tuple."""

  arguments: tuple[UOp, ...]
  values: tuple[UOp, ...]
  returned_tuple: bool


def robot_fingerprint(robot: Any) -> str:
  """A hash of everything of `robot` its algorithms read: its joints, frames, gravity and friction smoothing (its
  name, which only names functions, and what it has built are left out)."""
  data = tuple(dataclasses.astuple(x) for x in (*robot.joints, *robot.frames))
  payload = pickle.dumps((data, robot.gravity.tolist(), float(robot.friction_velocity)), protocol=4)
  return hashlib.sha256(payload).hexdigest()


def stored_graph(function: NumericalFunction[..., Any], robot_key: str, what: str) -> StoredGraph:
  """`function`'s graph (a robot algorithm: `what` names it, its frames and reference, among the robot's functions)
  from the cache, or traced now and stored there."""
  key = f"{robot_key}|{what}|{[a.shape for a in function.inputs]}|{default_float(function.inputs)}|{DEV.device}"
  record = f"robots/{hashlib.sha256(f'{key}|{_FINGERPRINT}|{TINYGRAD_VERSION}'.encode()).hexdigest()}.pkl"
  if (data := read_artifact(record)) is not None and (loaded := _loaded(data)) is not None:
    return loaded
  traced = function.traced
  graph = StoredGraph(traced.arguments, traced.values, traced.returned_tuple)
  if _storable(graph):
    write_atomic(cache_dir() / record, pickle.dumps((graph.arguments, graph.values, graph.returned_tuple), protocol=5))
  return graph


def _storable(graph: StoredGraph) -> bool:
  """Whether the graph holds no buffer but its inputs (a captured constant's data lives outside the UOps)."""
  inputs = set(graph.arguments)
  return all(u.op is not Ops.BUFFER or u in inputs for u in UOp.sink(*graph.values).toposort())


class _TinygradUnpickler(pickle.Unpickler):
  """An unpickler that builds tinygrad's objects and nothing else."""

  def find_class(self, module: str, name: str) -> Any:
    if module == "tinygrad" or module.startswith("tinygrad."):
      return super().find_class(module, name)
    raise pickle.UnpicklingError(f"a stored robot graph names {module}.{name}")


def _loaded(data: bytes) -> StoredGraph | None:
  """The stored graph, or None where the entry does not load as one (written by another tinygrad, or damaged)."""
  try:
    arguments, values, returned_tuple = _TinygradUnpickler(io.BytesIO(data)).load()
  except Exception:  # NOTE: whatever a foreign or damaged stream raises, the graph is traced again
    return None
  if not all(isinstance(u, UOp) for u in (*arguments, *values)) or not isinstance(returned_tuple, bool):
    return None
  return StoredGraph(tuple(arguments), tuple(values), returned_tuple)
