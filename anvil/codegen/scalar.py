"""Scalar lowering: every element of a traced graph as one hash-consed scalar expression (as CasADi's SX holds it).

A graph of many small tensors (a trajectory written as a Python loop over stages, and its derivatives) is thousands of
tiny tensor ops, on which tinygrad's scheduler and kernel lowering spend minutes. Here each tensor op is applied
element by element to arrays of expression ids instead: movement ops only move ids, ALU ops make one expression per
element, equal expressions are one node, and constants fold as they are built (`x*0`, `x+0`, a branch a constant
condition picks, derivative seeds). `anvil.codegen.straight_line` emits the result as straight-line C++.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import dtypes
from tinygrad.dtype import DType
from tinygrad.uop.ops import GroupOp, Ops, UOp

from anvil.codegen.arg import CPP_TYPES
from anvil.codegen.elements import EVAL, Array, arange_values, move, np_dtype, stored_value, toposort
from anvil.codegen.renderer import COS_MARK
from anvil.codegen.trace import HOST_DEVICES, STOP_GRADIENT, TracedGraph, constant_bytes

#: Ops whose operands may be swapped: their nodes keep operands sorted, so `a*b` and `b*a` are one node.
COMMUTATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
#: Ops that pass their operand's value through.
PASS_THROUGH = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.COPY})
#: The node of `x - detach(x)`: value zero, derivative that of x (a custom derivative's carrier: `y.detach() + J @ (x
#: - x.detach())` has y's value and the derivative J dx). Graphs with such nodes (or DETACH ones) are emitted through
#: `ScalarGraph.substituted`, where they become 0 (and x) and fold away.
TANGENT = Ops.CUSTOM
#: The ALU ops the straight-line C++ renders (THREEFRY and the floor ops are left to tinygrad's path).
SCALAR_OPS = frozenset(GroupOp.ALU - {Ops.THREEFRY, Ops.FLOORDIV, Ops.FLOORMOD})


class Unsupported(Exception):
  """The graph holds something the scalar lowering does not handle (an op, a dtype, a symbolic shape); the function is
  then built through tinygrad's scheduler."""


@dataclass(frozen=True)
class Load:
  """Element `element` of input `index`."""

  index: int
  element: int


class ScalarGraph:
  """Hash-consed scalar expressions, in creation order (every node's operands come before it).

  Node i is `ops[i]` (an ALU op, CAST, CONST, or LOAD for an input element) of dtype `dtypes[i]` over the nodes
  `srcs[i]`; `args[i]` holds a CONST's value, a LOAD's `Load`, COS_MARK for a SIN that is the cosine of its operand.
  """

  def __init__(self) -> None:
    self.ops: list[Ops] = []
    self.dtypes: list[DType] = []
    self.srcs: list[tuple[int, ...]] = []
    self.args: list[Any] = []
    self._ids: dict[tuple[Any, ...], int] = {}

  def __len__(self) -> int:
    return len(self.ops)

  def _node(self, op: Ops, dtype: DType, src: tuple[int, ...], arg: Any = None, key: Any = None) -> int:
    k = (op, dtype, src, arg if key is None else key)
    if (i := self._ids.get(k)) is None:
      i = self._ids[k] = len(self.ops)
      self.ops.append(op)
      self.dtypes.append(dtype)
      self.srcs.append(src)
      self.args.append(arg)
    return i

  def is_const(self, i: int) -> bool:
    """Whether node i is a constant."""
    return self.ops[i] is Ops.CONST

  def const(self, value: Any, dtype: DType) -> int:
    """The constant `value` as `dtype`."""
    v = np.asarray(value).astype(np_dtype(dtype)).item() if dtype not in dtypes.weaks else np.asarray(value).item()
    return self._node(Ops.CONST, dtype, (), v, repr(v))

  def load(self, index: int, element: int, dtype: DType) -> int:
    """Element `element` of input `index`."""
    return self._node(Ops.LOAD, dtype, (), Load(index, element))

  def cast(self, i: int, dtype: DType) -> int:
    """Node i as `dtype`."""
    if self.dtypes[i] == dtype:
      return i
    if self.is_const(i):
      return self.const(self.args[i], dtype)
    return self._node(Ops.CAST, dtype, (i,))

  def alu(self, op: Ops, dtype: DType, *src: int) -> int:
    """`op` over the nodes `src`, with result dtype `dtype`: folded when every operand is a constant, simplified
    where an operand decides the result."""
    src = self._typed(op, dtype, src)
    if all(self.is_const(s) for s in src) and op in EVAL:
      with np.errstate(all="ignore"):
        value = EVAL[op](*(np.asarray(self.args[s], np_dtype(self.dtypes[s])) for s in src))
      return self.const(value, dtype)
    if (simple := self._simplified(op, dtype, src)) is not None or (simple := self._cosine(op, dtype, src)) is not None:
      return simple
    if (tangent := self._tangent(op, dtype, src)) is not None:
      return tangent
    if op is Ops.POW and self.is_const(src[1]):
      return self._power(dtype, src[0], self.args[src[1]])
    if dtype in dtypes.weaks:
      raise Unsupported(f"{op.name} of weakly typed values")
    return self._node(op, dtype, tuple(sorted(src)) if op in COMMUTATIVE else src)

  def _typed(self, op: Ops, dtype: DType, src: tuple[int, ...]) -> tuple[int, ...]:
    """Weakly typed constants (Python numbers in tensor math) take the dtype of the values they meet."""
    if not any(self.dtypes[s] in dtypes.weaks for s in src):
      return src
    strong = [self.dtypes[s] for s in src[op is Ops.WHERE :] if self.dtypes[s] not in dtypes.weaks]
    operand = strong[0] if strong else dtype if dtype != dtypes.bool else dtypes.float64
    typed = tuple(self.cast(s, operand) if self.dtypes[s] in dtypes.weaks else s for s in src[op is Ops.WHERE :])
    return (src[0], *typed) if op is Ops.WHERE else typed

  def _simplified(self, op: Ops, dtype: DType, src: tuple[int, ...]) -> int | None:
    """The node an operand's value decides (x+0, x*1, x*0, where with a constant condition, ...), else None."""
    consts = [self.args[s] if self.is_const(s) else None for s in src]
    if op in (Ops.ADD, Ops.SUB, Ops.OR, Ops.XOR) and consts[-1] == 0 and not _negative_zero(consts[-1]):
      return src[0]
    if op in (Ops.ADD, Ops.OR, Ops.XOR) and consts[0] == 0 and not _negative_zero(consts[0]):
      return src[1]
    if op is Ops.MUL and 0 in consts:
      return self.const(0, dtype)
    if op in (Ops.MUL, Ops.FDIV) and consts[-1] == 1:
      return src[0]
    if op is Ops.MUL and consts[0] == 1:
      return src[1]
    if op is Ops.WHERE:
      return src[1] if src[1] == src[2] else None if consts[0] is None else src[1] if consts[0] else src[2]
    if op is Ops.MAX and src[0] == src[1]:
      return src[0]
    if op is Ops.NEG and self.ops[src[0]] is Ops.NEG:
      return self.srcs[src[0]][0]
    return None

  def _power(self, dtype: DType, base: int, exponent: float) -> int:
    """base ** exponent for a constant exponent, as tinygrad simplifies it: products for integers, a square root for
    halves, a reciprocal for negatives; other exponents stay a POW (rendered as std::pow)."""
    if not math.isfinite(exponent):
      return self._node(Ops.POW, dtype, (base, self.const(exponent, dtype)))
    if exponent < 0:
      return self._power(dtype, self.alu(Ops.RECIPROCAL, dtype, base), -exponent)
    if exponent == 0:
      return self.const(1, dtype)
    if int(exponent - 0.5) + 0.5 == exponent:
      return self.alu(Ops.MUL, dtype, self._power(dtype, base, exponent - 0.5), self.alu(Ops.SQRT, dtype, base))
    if int(exponent) == exponent:
      half = self._power(dtype, base, exponent // 2) if exponent >= 2 else self.const(1, dtype)
      square = self.alu(Ops.MUL, dtype, half, half)
      return self.alu(Ops.MUL, dtype, square, base) if exponent % 2 == 1 else square
    return self._node(Ops.POW, dtype, (base, self.const(exponent, dtype)))

  def cos(self, x: int) -> int:
    """cos(x): a SIN over x marked COS_MARK."""
    return self._node(Ops.SIN, self.dtypes[x], (x,), COS_MARK)

  def detach(self, x: int) -> int:
    """x with no derivative (tinygrad's detach: a stop-gradient)."""
    return x if self.is_const(x) or self.ops[x] is Ops.DETACH else self._node(Ops.DETACH, self.dtypes[x], (x,))

  def _tangent(self, op: Ops, dtype: DType, src: tuple[int, ...]) -> int | None:
    """The TANGENT node of x for x + (-1 * detach(x)) (how tinygrad writes x - x.detach()), else None."""
    if op is not Ops.ADD:
      return None
    for x, m in (src, src[::-1]):
      if self.ops[m] is Ops.MUL:
        a, b = self.srcs[m]
        d = b if self.is_const(a) and self.args[a] == -1 else a if self.is_const(b) and self.args[b] == -1 else None
        if d is not None and self.ops[d] is Ops.DETACH and self.srcs[d][0] == x:
          return self._node(TANGENT, dtype, (x,))
    return None

  def zero_valued(self, roots: Sequence[int]) -> bytearray:
    """Which nodes `substituted` makes zero: TANGENT nodes and what they multiply, divide or alone make up. A
    derivative's term with such a factor vanishes in the emitted code: the last derivative pass drops it."""
    zero = bytearray(len(self.ops))
    for i in self.live(roots):
      op, src = self.ops[i], self.srcs[i]
      if op is TANGENT:
        zero[i] = 1
      elif op is Ops.MUL:
        zero[i] = zero[src[0]] or zero[src[1]]
      elif op is Ops.MULACC:  # a * b + c
        zero[i] = (zero[src[0]] or zero[src[1]]) and zero[src[2]]
      elif op is Ops.FDIV:
        zero[i] = zero[src[0]]
      elif op is Ops.WHERE:
        zero[i] = zero[src[1]] and zero[src[2]]
      elif op in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.CAST, Ops.DETACH):
        zero[i] = all(zero[s] for s in src)
    return zero

  def substituted(self, roots: Sequence[int]) -> list[int]:
    """The roots with DETACH nodes replaced by their operand and TANGENT nodes by 0, what depends on them rebuilt and
    refolded in this graph (appended; the rest is shared): what is emitted."""
    live = self.live(roots)
    if not any(self.ops[i] is Ops.DETACH or self.ops[i] is TANGENT for i in live):
      return list(roots)
    new: dict[int, int] = {}
    for i in live:
      op, dt, src = self.ops[i], self.dtypes[i], self.srcs[i]
      if op is Ops.DETACH:
        new[i] = new.get(src[0], src[0])
      elif op is TANGENT:
        new[i] = self.const(0, dt)
      elif any(s in new for s in src):
        mapped = [new.get(s, s) for s in src]
        if op is Ops.CAST:
          new[i] = self.cast(mapped[0], dt)
        elif op is Ops.SIN and self.args[i] == COS_MARK:
          new[i] = self.cos(mapped[0])
        else:
          new[i] = self.alu(op, dt, *mapped)
    return [new.get(r, r) for r in roots]

  def live(self, roots: Sequence[int]) -> list[int]:
    """The nodes the roots depend on, in creation (topological) order."""
    marked = bytearray(len(self.ops))
    for r in roots:
      marked[r] = 1
    for i in range(len(self.ops) - 1, -1, -1):
      if marked[i]:
        for s in self.srcs[i]:
          marked[s] = 1
    return [i for i in range(len(self.ops)) if marked[i]]

  def postorder(self, roots: Sequence[int]) -> list[int]:
    """The nodes the roots depend on, each after its operands, depth first from the roots in turn: what one root
    needs is computed together, right before it (the order of emitted code: values live briefly)."""
    done = bytearray(len(self.ops))
    order: list[int] = []
    for root in roots:
      stack = [(root, False)]
      while stack:
        i, expanded = stack.pop()
        if done[i]:
          continue
        if expanded:
          done[i] = 1
          order.append(i)
          continue
        stack.append((i, True))
        stack.extend((s, False) for s in reversed(self.srcs[i]) if not done[s])
    return order

  def _cosine(self, op: Ops, dtype: DType, src: tuple[int, ...]) -> int | None:
    """cos(x) for a SIN of pi/2 - x (how tinygrad writes cos x): a SIN node over x marked COS_MARK, rendered as
    std::cos(x) so that the compiler can pair it with sin(x); else None."""
    if op is not Ops.SIN or self.ops[src[0]] is not Ops.ADD:
      return None
    a, b = self.srcs[src[0]]
    c, m = (a, b) if self.is_const(a) else (b, a)
    if not self.is_const(c) or self.ops[m] is not Ops.MUL or not _is_half_pi(self.args[c]):
      return None
    x, y = self.srcs[m]
    if self.is_const(x) and self.args[x] == -1:
      return self.cos(y)
    return self.cos(x) if self.is_const(y) and self.args[y] == -1 else None


def _negative_zero(value: Any) -> bool:
  """-0.0, which x + (-0.0) keeps (x + 0.0 does not, for x = -0.0: tinygrad folds both)."""
  return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


def _is_half_pi(value: Any) -> bool:
  return isinstance(value, float) and value in (math.pi / 2, float(np.float32(math.pi / 2)))


@dataclass
class LoweredGraph:
  """A traced graph lowered to scalars: `values[j]` holds the node id of every element of store j (flat)."""

  graph: ScalarGraph
  values: list[Array]


def lower(traced: TracedGraph) -> LoweredGraph:
  """Every element of every stored output of `traced` as a node of one scalar graph.

  Raises:
    Unsupported: an op, dtype or shape the scalar lowering does not handle, or a gather (`lookups`).
  """
  if has_lookup(traced):
    raise Unsupported(
      "a lookup at a computed index (a table: tinygrad's kernels read the one element the index "
      "selects, where scalar code would sum the whole table)"
    )
  return _Lowering(traced).run()


def has_lookup(traced: TracedGraph) -> bool:
  """Whether the graph reads a table at a computed index (tinygrad's gather: `table[i]` for an integer Tensor i is
  the sum of `where(i == arange(n), table, 0)`)."""
  computed: dict[UOp, bool] = {}  # NOTE: whether a node depends on an input (an index computed from one)
  inputs = set(traced.call.src[1:]) - {b for b in traced.call.src[1:] if b.device in HOST_DEVICES}
  for u in traced.call.src[0].toposort():
    bound = u.op is Ops.PARAM and u.arg.slot < len(traced.call.src) - 1 and traced.call.src[1 + u.arg.slot] in inputs
    computed[u] = bound or any(computed[s] for s in u.src)
    if u.op is Ops.WHERE and u.src[2].op is Ops.CONST and (equal := _equality(u.src[0])) is not None:
      a, b = equal
      if dtypes.is_int(a.dtype) and computed[a] != computed[b]:
        return True
  return False


def _equality(u: UOp) -> tuple[UOp, UOp] | None:
  """(a, b) of a == b as tinygrad writes it: CMPEQ, or CMPNE(CMPNE(a, b), True)."""
  if u.op is Ops.CMPEQ:
    return u.src[0], u.src[1]
  if u.op is Ops.CMPNE and u.src[1].op is Ops.CONST and u.src[1].arg is True and u.src[0].op is Ops.CMPNE:
    return u.src[0].src[0], u.src[0].src[1]
  return None


class _Lowering:
  """One pass over the traced body: each UOp's value is an int array of node ids shaped like the UOp."""

  def __init__(self, traced: TracedGraph):
    self.traced, self.graph = traced, ScalarGraph()
    self.bound = traced.call.src[1:]
    self.values: dict[UOp, Array] = {}

  def run(self) -> LoweredGraph:
    body = self.traced.call.src[0]
    stored = {self._slot(a.src[0]): a for a in body.src}
    slots = [self.bound.index(s) for s in self.traced.stores]
    roots = [stored[s] for s in slots]
    for u in toposort(roots, _operands):
      self.values[u] = self._lower(u)
    return LoweredGraph(self.graph, [self.values[r].reshape(-1) for r in roots])

  def _slot(self, param: UOp) -> int:
    """The call slot of a parameter (seen through the RESHAPE a multi-dimensional buffer is)."""
    while param.op is Ops.RESHAPE:
      param = param.src[0]
    if param.op is not Ops.PARAM:
      raise Unsupported(f"a store into {param.op.name}")
    return int(param.arg.slot)

  def _lower(self, u: UOp) -> Array:
    shape = _shape(u)
    if (arange := arange_values(u)) is not None:
      return np.array([self.graph.const(int(k), u.dtype) for k in arange], np.int64)
    if u.op in GroupOp.Movement:
      return move(u, self.values[u.src[0]], shape, self.graph.const(0, u.dtype))
    if u.op in PASS_THROUGH:
      return self.values[u.src[0]]
    if u.op is STOP_GRADIENT:
      return _each(self.graph.detach, [self.values[u.src[0]]], shape)
    if u.op is Ops.AFTER:
      return self.values[_stored_value(u)]
    if u.op is Ops.PARAM:
      return self._param(u, shape)
    if u.op is Ops.CONST:
      return np.asarray(self.graph.const(_python_value(u.arg, u.dtype), u.dtype))
    if u.op is Ops.CAST:
      dtype = _dtype(u.dtype)
      return _each(lambda i: self.graph.cast(i, dtype), [self.values[u.src[0]]], shape)
    if u.op is Ops.STACK:
      return np.stack([np.broadcast_to(self.values[s], _shape(s)) for s in u.src])
    if u.op is Ops.REDUCE:
      return self._reduce(u, shape)
    if u.op in SCALAR_OPS:
      dtype = u.dtype if u.dtype in dtypes.weaks else _dtype(u.dtype)
      return _each(lambda *s: self.graph.alu(u.op, dtype, *s), [self.values[s] for s in u.src], shape)
    raise Unsupported(f"op {u.op.name}")

  def _param(self, u: UOp, shape: tuple[int, ...]) -> Array:
    """An input's elements, or a captured constant's values; other buffers hold nothing before a store."""
    buf = self.bound[self._slot(u)]
    dtype = _dtype(u.dtype)
    if buf in self.traced.inputs:
      index = self.traced.inputs.index(buf)
      return np.array([self.graph.load(index, k, dtype) for k in range(math.prod(shape))], np.int64).reshape(shape)
    if buf.device in HOST_DEVICES:
      data = np.frombuffer(constant_bytes(buf), dtype=np_dtype(dtype)) if math.prod(shape) else np.zeros(0)
      return np.array([self.graph.const(v, dtype) for v in data.tolist()], np.int64).reshape(shape)
    raise Unsupported("a buffer read before anything is stored into it")

  def _reduce(self, u: UOp, shape: tuple[int, ...]) -> Array:
    """REDUCE combines the leading arg[1] axes with arg[0], left to right."""
    (op, _), x = u.arg, self.values[u.src[0]]
    if op not in (Ops.ADD, Ops.MUL, Ops.MAX):
      raise Unsupported(f"REDUCE with {op}")
    dtype = _dtype(u.dtype)
    if math.prod(shape) == 0:
      return np.zeros(shape, np.int64)
    rows = np.broadcast_to(x, _shape(u.src[0])).reshape(-1, math.prod(shape))
    if rows.shape[0] == 0:
      identity = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: -math.inf if dtypes.is_float(dtype) else dtype.min}[op]
      return np.full(shape, self.graph.const(identity, dtype), np.int64)
    out = []
    for column in rows.T.tolist():
      acc = column[0]
      for i in column[1:]:
        acc = self.graph.alu(op, dtype, acc, i)
      out.append(acc)
    return np.array(out, np.int64).reshape(shape)


def _each(make: Any, operands: Sequence[Array], shape: tuple[int, ...]) -> Array:
  """make(*ids) for every element of the broadcast operands."""
  flat = [np.broadcast_to(a, shape).reshape(-1).tolist() for a in operands]
  return np.array([make(*ids) for ids in zip(*flat, strict=True)], np.int64).reshape(shape)


def _stored_value(u: UOp) -> UOp:
  if (value := stored_value(u)) is None:
    raise Unsupported("AFTER other than a store of a whole buffer")
  return value


def _operands(u: UOp) -> tuple[UOp, ...]:
  """The value sources of u (shape arguments, store targets and parameters are not values; an arange is a leaf)."""
  if arange_values(u) is not None:
    return ()
  if u.op in GroupOp.Movement or u.op in PASS_THROUGH or u.op is STOP_GRADIENT:
    return (u.src[0],)
  if u.op is Ops.AFTER:
    return (_stored_value(u),)
  if u.op in (Ops.CONST, Ops.PARAM):
    return ()
  return u.src


def _shape(u: UOp) -> tuple[int, ...]:
  if not all(isinstance(d, int) for d in u.shape):
    raise Unsupported(f"symbolic shape {u.shape}")
  return tuple(int(d) for d in u.shape)


def _python_value(value: Any, dt: DType) -> Any:
  """A CONST's value as a Python number of its dtype's kind."""
  if not isinstance(value, (int, float, bool)):
    raise Unsupported(f"constant {value!r}")
  return float(value) if dtypes.is_float(dt) else bool(value) if dt == dtypes.bool else int(value)


def _dtype(dt: DType) -> DType:
  if dt not in CPP_TYPES:
    raise Unsupported(f"dtype {dt.name}")
  return dt
