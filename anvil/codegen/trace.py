"""Tracing: run a user function on symbolic tinygrad inputs and capture its graph, without running any kernel."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.device import Buffer
from tinygrad.dtype import DType
from tinygrad.helpers import DEFAULT_FLOAT, DEV, Context
from tinygrad.tensor import transform_to_call
from tinygrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite

from anvil.codegen.arg import Arg, cpp_type

# NOTE: tinygrad picks its default device by opening devices, and opening CPU compiles helpers with clang. Tracing on
# the NULL device never opens a real device, so anvil works on machines with only g++. Constants a user captures
# (`Tensor(np_array)`) then hold their bytes in a host (NPY/PYTHON) buffer under a COPY, which codegen reads.
# float64 is the default float so that `Tensor([1.0, 2.0])` inside user math matches float64 Args (float32 while a
# function of float32 inputs is traced: `default_float`).
if not DEV.device:
  DEV.value = "NULL"
DEFAULT_FLOAT.value = "float64"
HOST_DEVICES = ("NPY", "PYTHON")
#: tinygrad Tensor methods that read values: a traced function's tensors hold none.
VALUE_READS = frozenset({"item", "tolist", "numpy", "data", "_data", "__bool__"})
#: How Python, math, numpy and tinygrad word their refusal of a Tensor where they need a number (float(t), math.sin(t),
#: a numpy ufunc, `if t:`, a numpy array of Tensors).
TENSOR_REFUSALS = ("not 'Tensor'", "not Tensor", "of type Tensor", "on Tensor", "<Tensor")
#: How anvil words an error tinygrad raised while tracing a function.
TRACER_HINT = "tinygrad could not trace it"
VALUE_HINT = (
  "a traced function cannot read tensor values (.item(), .numpy(), .tolist(), float(t), int(t), `if t > 0:`) nor "
  "pass tensors to numpy or math functions (np.sin(t), math.exp(t)): while it is traced its tensors hold no values. "
  "Write the math with Tensor methods (t.sin(), t.exp(), t.sum(), t.maximum(s)) and branches with "
  "Tensor.where(condition, a, b) or (t > 0).where(a, b)"
)


@dataclass(frozen=True)
class OutputSpec:
  """Shape and dtype of one output of a traced function."""

  shape: tuple[int, ...]
  dtype: DType

  @property
  def size(self) -> int:
    """Number of elements."""
    return math.prod(self.shape)


@dataclass(frozen=True)
class TracedGraph:
  """The tinygrad graph of a function, with every output stored into a buffer of its own.

  Attributes:
    inputs: the input BUFFER UOps, in argument order.
    stores: the destination BUFFER UOp of each distinct output value.
    output_slots: for each output, the index into `stores` holding its value (equal outputs share one store).
    outputs: shape and dtype of each output.
    sink: the stores' graph, as traced (`call` is made from it when first asked for).
    arguments: the inputs' UOps as the function saw them; values: its outputs' UOps, before any store (what `replay`
      substitutes into); returned_tuple: whether it returned a tuple or list (else one Tensor).
  """

  inputs: tuple[UOp, ...]
  stores: tuple[UOp, ...]
  output_slots: tuple[int, ...]
  outputs: tuple[OutputSpec, ...]
  sink: UOp
  arguments: tuple[UOp, ...]
  values: tuple[UOp, ...]
  returned_tuple: bool

  @cached_property
  def call(self) -> UOp:
    """tinygrad's CALL UOp over the whole graph (body with normalized params, then the bound buffers): made on first
    use, since a graph only replayed into others (`replay`) never needs it, and it costs a pass over the graph."""
    return transform_to_call(_marked_detaches(self.sink))[0]


def trace(name: str, fn: Callable[..., Any], args: Sequence[Arg]) -> TracedGraph:
  """Run `fn` on empty tinygrad tensors shaped like `args` and capture the graph of its outputs."""
  device = DEV.device
  inputs = [Tensor.empty(*a.shape, dtype=a.dtype, device=device) for a in args]
  with tracing_in(default_float(args)):
    result = _run(name, fn, inputs)
    outs = _as_tensors(name, result)
  stores: list[Tensor] = []
  store_uops: list[UOp] = []
  slots: list[int] = []
  seen: dict[UOp, int] = {}
  for i, out in enumerate(outs):
    if out.dtype in dtypes.weaks:
      raise TypeError(f"{name}: output {i} has the weak dtype {out.dtype.name}; cast it, e.g. .cast(dtypes.float64)")
    cpp_type(out.dtype, f"{name}: output {i}")
    if out.device is not None and out.device != device:
      raise ValueError(
        f"{name}: output {i} lives on device {out.device}, expected {device}; create captured tensors "
        "after `import anvil` so they share anvil's tracing device"
      )
    # NOTE: each distinct output value is stored into a fresh buffer: views of inputs, constants and inputs returned
    # unchanged then all become real kernels writing the output, and equal outputs (hash-consed by tinygrad) share one.
    if (slot := seen.get(out.uop)) is None:
      seen[out.uop] = slot = len(stores)
      dst = Tensor.empty(*out.shape, dtype=out.dtype, device=device)
      stores.append(dst)
      store_uops.append(dst.uop.after(dst.uop.store(out.uop)))
    slots.append(slot)
  return TracedGraph(
    inputs=tuple(t.uop.buf_uop for t in inputs),
    stores=tuple(t.uop.buf_uop for t in stores),
    output_slots=tuple(slots),
    outputs=tuple(OutputSpec(tuple(int(d) for d in o.shape), o.dtype) for o in outs),
    sink=UOp.sink(*store_uops),
    arguments=tuple(t.uop for t in inputs),
    values=tuple(o.uop for o in outs),
    returned_tuple=isinstance(result, (tuple, list)),
  )


class Replayable(Protocol):
  """What `replay` reads of a graph: a TracedGraph, or one kept elsewhere (anvil.robots' stored graphs)."""

  @property
  def arguments(self) -> tuple[UOp, ...]: ...
  @property
  def values(self) -> tuple[UOp, ...]: ...
  @property
  def returned_tuple(self) -> bool: ...


def replay(graph: Replayable, args: Sequence[Tensor], dtype: DType) -> Any:
  """What the traced function returns on `args` (Tensors of its inputs' shapes and dtypes), from its graph: the
  inputs substituted by the arguments' UOps, no Python of the function run again; None where the arguments are not
  like the traced inputs or the default float is not `dtype`, the trace's (the function's own math would differ)."""
  if dtypes.default_float != dtype or len(args) != len(graph.arguments):
    return None
  if any(a.shape != u.shape or a.dtype != u.dtype for a, u in zip(args, graph.arguments, strict=True)):
    return None
  mapping = {u: a.uop for a, u in zip(args, graph.arguments, strict=True)}
  # NOTE: computed once on the graph (a stored one has none): `rebuilt` hands them on; a node's device only where
  # every argument is on its input's device (each node's then is what it was)
  kept = (_SHAPE, _DEVICE) if all(new.device == old.device for old, new in mapping.items()) else (_SHAPE,)
  for v in graph.values:
    _ = v._shape, v.device if _DEVICE in kept else None
  values = [Tensor(v) for v in rebuilt(graph.values, lambda u: mapping.get(u, u), kept)]
  return tuple(values) if graph.returned_tuple else values[0]


#: Where tinygrad caches a UOp's shape and its device (recursive_properties: the first use walks the whole graph).
_SHAPE, _DEVICE = UOp.__dict__["_shape"].nm, UOp.__dict__["device"].nm


def rebuilt(roots: Sequence[UOp], change: Callable[[UOp], UOp], kept: Sequence[str] = (_SHAPE,)) -> list[UOp]:
  """The graphs of `roots` with each node u (its sources already rebuilt) replaced by change(u), which has u's
  shape (a substitution of like for like): one pass in topological order (tinygrad's substitute and graph_rewrite,
  pattern matchers run to a fixed point, took 10x longer on a robot's dynamics). A rebuilt node takes the properties
  `kept` (tinygrad's caches of recursive properties: the shape, and the device where the caller knows it unchanged)
  that u had computed, so that the first asked of the result does not walk the whole new graph again."""
  new: dict[UOp, UOp] = {}
  for u in UOp.sink(*roots).toposort():
    src = tuple(new.get(s, s) for s in u.src)
    if all(a is b for a, b in zip(src, u.src, strict=True)):
      new[u] = change(u)
      continue
    new[u] = w = change(u.replace(src=src))
    for name in kept:
      if name in u.__dict__:
        w.__dict__.setdefault(name, u.__dict__[name])
  return [new[r] for r in roots]


#: What a DETACH (a stop-gradient) becomes in the traced graph: tinygrad's lowering drops DETACH, but derivatives taken
#: on the traced graph (anvil.ad.scalar) must stop there. Scheduling for tinygrad's kernels drops the mark
#: (`unmarked`); the scalar lowering keeps it.
STOP_GRADIENT = Ops.NOOP
_UNMARK = PatternMatcher([(UPat(STOP_GRADIENT, name="x"), lambda x: x.src[0])])


def _marked_detaches(sink: UOp) -> UOp:
  """The sink with its DETACHes marked (itself where it has none: `rebuilt` keeps unchanged nodes)."""
  return rebuilt([sink], lambda u: UOp(STOP_GRADIENT, u.dtype, u.src) if u.op is Ops.DETACH else u)[0]


def unmarked(call: UOp) -> UOp:
  """The traced call without its stop-gradient marks (what tinygrad's scheduler takes)."""
  return graph_rewrite(call, _UNMARK) if any(u.op is STOP_GRADIENT for u in call.toposort()) else call


def default_float(args: Sequence[Arg]) -> DType:
  """The default float while a function of `args` is traced: float32 where every float input is float32 (its math
  stays float32: a float32 solver's functions), else float64."""
  floats = [a.dtype for a in args if dtypes.is_float(a.dtype)]
  return dtypes.float32 if floats and all(d == dtypes.float32 for d in floats) else dtypes.float64


@contextlib.contextmanager
def tracing_in(dtype: DType) -> Iterator[None]:
  """`dtype` is the default float while a function is traced; in float32, the float64 numpy arrays its math captures
  (`Tensor(np_array)`) become float32 too, so the whole graph computes in float32 (tinygrad would turn float32 math
  with a float64 constant into double, or fail on the mix)."""
  with Context(DEFAULT_FLOAT=dtype.name):
    if dtype != dtypes.float32:
      yield
      return
    original = Tensor.__init__

    def init(self: Tensor, data: Any, device: Any = None, dtype: Any = None) -> None:
      if dtype is None and isinstance(data, np.ndarray) and data.dtype == np.float64:
        dtype = dtypes.float32
      original(self, data, device, dtype)

    Tensor.__init__ = init  # type: ignore[method-assign]
    try:
      yield
    finally:
      Tensor.__init__ = original  # type: ignore[method-assign]


def _run(name: str, fn: Callable[..., Any], inputs: list[Tensor]) -> Any:
  """fn(*inputs); an attempt to read a tensor's values is raised as a TypeError saying what to write instead, and
  another error tinygrad raised as the same type of error naming the function and the line of it that failed."""
  try:
    return fn(*inputs)
  except (RuntimeError, TypeError, KeyError, ValueError, AssertionError, IndexError) as e:
    if VALUE_HINT in str(e) or TRACER_HINT in str(e):  # NOTE: a function traced inside another said it already
      raise
    if isinstance(e, (RuntimeError, TypeError, KeyError)) and _reads_values(e):
      first = (str(e).splitlines() or [""])[0]
      raise TypeError(f"{name}: {VALUE_HINT} (it raised {type(e).__name__}: {first})") from e
    if (where := _failed_line(e)) is None:
      raise
    raise _renamed(e, f"{name}: {TRACER_HINT} {where}: {type(e).__name__}: {e}") from e


def _renamed(e: Exception, message: str) -> Exception:
  """An error of `e`'s type with `message` (a RuntimeError where that type takes other arguments)."""
  try:
    return type(e)(message)
  except TypeError:
    return RuntimeError(message)


def _failed_line(e: BaseException) -> str | None:
  """Where in the user's code a tinygrad operation raised `e` ("the line model.py:12 `return x * K`"), or None where
  `e` did not come from tinygrad."""
  frames = traceback.extract_tb(e.__traceback__)
  inside = f"{os.sep}tinygrad{os.sep}"
  if not frames or inside not in frames[-1].filename:
    return None
  here = os.path.dirname(os.path.dirname(__file__))
  user = [f for f in frames if inside not in f.filename and not f.filename.startswith(here)]
  if not user:
    return "at a tensor operation"
  f = user[-1]
  return f"at the line {os.path.basename(f.filename)}:{f.lineno} `{(f.line or '').strip()}`"


def _reads_values(e: Exception) -> bool:
  """Whether `e` comes from reading a traced tensor's values: numpy code or a value-reading Tensor method on the way
  (tinygrad's NULL device has nothing to copy out), a Python or numpy conversion refusing a Tensor, or tinygrad
  refusing a numpy array of Tensors (what np.sin(tensor) returns)."""
  for f in traceback.extract_tb(e.__traceback__):
    if f"{os.sep}numpy{os.sep}" in f.filename or (f.name in VALUE_READS and f"{os.sep}tinygrad{os.sep}" in f.filename):
      return True
  if isinstance(e, KeyError):
    return e.args == ("object",)
  return any(refusal in str(e) for refusal in TENSOR_REFUSALS)


def _as_tensors(name: str, result: Any) -> tuple[Tensor, ...]:
  outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
  if not outs:
    raise TypeError(f"{name}: the function returned no outputs; return a Tensor or a tuple of Tensors")
  for i, o in enumerate(outs):
    if isinstance(o, np.ndarray) and o.dtype == object:
      raise TypeError(f"{name}: output {i} is a numpy array of Tensors (a numpy function applied to a Tensor): "
                      f"{VALUE_HINT}")  # fmt: skip
    if not isinstance(o, Tensor):
      raise TypeError(
        f"{name}: the function must return a Tensor or a tuple of Tensors, output {i} is {type(o).__name__}"
      )
    try:
      _ = o.shape  # NOTE: tinygrad works shapes out lazily: operands that do not broadcast fail only here
    except (ValueError, IndexError, RuntimeError, AssertionError) as e:
      raise _renamed(e, f"{name}: {TRACER_HINT} (output {i}'s shape): {type(e).__name__}: {e}") from e
  return outs


def constant_bytes(buf: UOp) -> bytes:
  """The bytes of a captured constant's host buffer."""
  if buf.max_numel() == 0:  # NOTE: tinygrad's NPY copy-out fails on empty arrays
    return b""
  host = buf.buffer
  assert isinstance(host, Buffer), "captured constants live on one host device"
  return bytes(host.as_memoryview())


def tensor_values(t: Tensor) -> np.ndarray | None:
  """The data of a Tensor made from data (`Tensor([...])`, `Tensor(np.array(...))`), read without running tinygrad;
  None for a Tensor computed by operations."""
  u = t.uop
  while u.op in (Ops.COPY, Ops.RESHAPE, Ops.CONTIGUOUS) and u.src:
    u = u.src[0]
  if u.op is not Ops.BUFFER or u.device not in HOST_DEVICES:
    return None
  return np.frombuffer(constant_bytes(u), dtype=np.dtype(t.dtype.fmt)).reshape(t.shape)


#: The longest chain of dependent operations a function's graph may hold. tinygrad's graph rewrites and the C++
#: compiler both recurse along such chains: measured on x = x * a + b repeated, 50,000 operations deep build in 61 s
#: and 60,000 in 95 s; 80,000 crash g++ (a segfault of cc1plus), 100,000 raise tinygrad's "infinite loop in
#: graph_rewrite" after nearly three minutes.
MAX_DEPTH = 64_000


class GraphTooDeepError(ValueError):
  """A traced function's graph is a chain of dependent operations longer than MAX_DEPTH."""


def graph_key(name: str, traced: TracedGraph, extra: str = "") -> str:
  """A hash of the traced graph, the roles of its buffers and the data of captured constants: one pass over the
  traced stores in topological order, each node hashed by its op, dtype, argument and its sources' positions, a buffer
  by its role (an input, an output, a constant's data) instead of its argument, whose numbering depends on what the
  process traced before (a warm build never makes `call`, tinygrad's whole-graph rewrite that numbers them). The same
  pass measures the graph's depth: a GraphTooDeepError past MAX_DEPTH, before anything spends minutes on it."""
  roles = {u: f"in{i}" for i, u in enumerate(traced.inputs)} | {u: f"out{i}" for i, u in enumerate(traced.stores)}
  h = hashlib.sha256(f"{name}|{extra}|{traced.output_slots}|".encode())
  position: dict[UOp, int] = {}
  depth: list[int] = []
  for u in traced.sink.toposort():
    at = [position[s] for s in u.src]
    depth.append(1 + max([depth[i] for i in at], default=0))
    if depth[-1] > MAX_DEPTH:
      raise _too_deep(name)
    sources = ",".join(map(str, at))
    if u.op is Ops.BUFFER:
      role = roles.get(u)
      if role is None and u.device in HOST_DEVICES:
        role = "const:" + hashlib.sha256(constant_bytes(u)).hexdigest()
      h.update(f"BUFFER|{role}|{u.dtype}|{u.device}|{sources};".encode())
    else:
      h.update(f"{u.op}|{u.dtype}|{u.arg!r}|{sources};".encode())
    position[u] = len(position)
  return h.hexdigest()


def _too_deep(name: str) -> GraphTooDeepError:
  return GraphTooDeepError(
    f"{name}: its graph is a chain of more than {MAX_DEPTH:,} dependent operations (a Python loop of many steps, "
    "each using the last), deeper than tinygrad's rewrites and the C++ compiler take; compute fewer steps per "
    "function and call it repeatedly (a NumericalFunction of one or a few steps, called in a loop from Python or "
    "C++; anvil.mpc's integrators step an ODE that way), or batch independent steps into one tensor op"
  )
