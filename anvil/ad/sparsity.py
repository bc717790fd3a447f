"""Structural Jacobian and Hessian sparsity patterns, read off a traced tinygrad graph without running it.

The analysis walks the tensor-level graph (the UOps of the Tensors a function returned, before scheduling) along value
edges only; shape arguments such as RESHAPE's `STACK` of sizes are never visited. Every node gets three arrays shaped
like the node:

* `deps`: for each element, a Python int used as a bitset of the elements of the differentiated input it may depend on;
* `val`, `known`: the element's value where it is a trace-time constant (constant folding of `CONST`s, `arange`/`eye`
  masks, captured numpy constants, zeros introduced by `PAD`, products with a known zero, branches a known mask picks).
  A known element depends on nothing, which is what makes `eye(n) * A`, `triu` and `where(mask, ...)` exact.

Jacobian rows are the `deps` of the outputs. For the Hessian, a reverse pass marks the elements whose adjoint can be
nonzero, and every curved operation reached that way adds its second-order couplings ("nonlinear interactions"): a
product `a*b` couples deps(a) with deps(b), a unary curved op (`sin`, `exp2`, `sqrt`, ...) couples deps(a) with itself.
This is the structural form of edge pushing and is exact up to numerical cancellation (`x*y - y*x`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse
from numpy.typing import NDArray
from tinygrad.uop.ops import GroupOp, Ops, UOp

from anvil.codegen.elements import (
  EVAL,
  REDUCE_EVAL,
  arange_values,
  embed,
  move,
  np_dtype,
  region,
  stored_value,
  toposort,
)
from anvil.codegen.trace import HOST_DEVICES, constant_bytes

Array = NDArray[Any]


class SparsityError(ValueError):
  """The traced graph contains an op the sparsity analysis has no rule for; the message names the op."""


@dataclass(frozen=True)
class _Node:
  """What the forward pass knows about one UOp, element by element (every array is shaped like the UOp)."""

  deps: Array  # object array of int bitsets over the elements of the differentiated input
  val: Array  # the value where `known`, meaningless elsewhere
  known: Array  # bool: the element is a trace-time constant, so its deps are empty
  nz: Array  # bool: deps != 0


@dataclass
class _Couplings:
  """Second-order couplings found by the reverse pass, deduplicated before they are expanded into rows."""

  cliques: set[int] = field(default_factory=set)  # d couples with d
  crosses: set[tuple[int, int]] = field(default_factory=set)  # a couples with b (and b with a)

  def rows(self, n: int) -> list[int]:
    """Row i of the symmetric Hessian pattern as a bitset, for i in range(n)."""
    rows = [0] * n
    for d in self.cliques:
      for i in set_bits(d):
        rows[i] |= d
    for a, b in self.crosses:
      if a and b:
        for i in set_bits(a):
          rows[i] |= b
        for j in set_bits(b):
          rows[j] |= a
    return rows


# NOTE: the patterns must contain every entry tinygrad's reverse mode (which anvil's derivatives are built from) can
# make nonzero. It gives comparisons and TRUNC a zero derivative and stops at DETACH (softmax's max shift is the typical
# use), so those cut dependencies; it passes gradients straight through casts, even to ints, so casts keep them.
# CDIV and FLOORDIV have no gradient rule; they are step functions.
_CUT = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.TRUNC, Ops.DETACH, Ops.CDIV, Ops.FLOORDIV}
_CURVED_UNARY = {Ops.SIN, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RECIPROCAL}
_CURVED = _CURVED_UNARY | {Ops.MUL, Ops.MULACC, Ops.FDIV, Ops.POW}
_PASS = {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.COPY, Ops.CAST, Ops.DETACH, Ops.AFTER}
_ELEMENTWISE = GroupOp.ALU | _PASS
_SUPPORTED = GroupOp.Movement | _ELEMENTWISE | {Ops.CONST, Ops.BUFFER, Ops.REDUCE, Ops.STACK}


def jacobian_sparsity(outputs: Sequence[UOp], inputs: Sequence[UOp], wrt: int) -> scipy.sparse.csc_array:
  """Structural sparsity pattern of the Jacobian of the outputs with respect to one input.

  Args:
    outputs: tensor-level UOps (`t.uop`) of the Tensors a function returned.
    inputs: the `t.uop` of the function's input Tensors; they are leaves of the analysis, matched by identity.
    wrt: index into `inputs` of the input to differentiate with respect to. The other inputs are unknown values that
      contribute no variables.

  Returns:
    A boolean CSC array of shape (sum of the output sizes, size of `inputs[wrt]`) with sorted indices: row r is element
    r of the concatenated row-major flattened outputs, column j element j of the flattened input.

  Raises:
    SparsityError: the graph contains an unsupported op (named in the message).
    ValueError: `wrt` is not an index into `inputs`.

  Example:
    >>> x = Tensor.empty(4, dtype=dtypes.float64)
    >>> jacobian_sparsity([(x * x.flip(0)).uop], [x.uop], 0).nnz
    8
  """
  n = _input_size(inputs, wrt)
  nodes = _forward(outputs, inputs, wrt)
  rows = [set_bits(d) for out in outputs for d in nodes[out].deps.reshape(-1).tolist()]
  # NOTE: the rows of J are the columns of its transpose; scipy's transpose of CSC is CSR, so convert back
  return _csc(rows, (n, len(rows))).T.tocsc()


def hessian_sparsity(output: UOp, inputs: Sequence[UOp], wrt: int) -> scipy.sparse.csc_array:
  """Upper triangle (with the diagonal) of the structural Hessian pattern of a scalar output with respect to one input.

  Args:
    output: tensor-level UOp (`t.uop`) of a scalar output. For a non-scalar output the pattern is the union of the
      Hessians of its elements.
    inputs: the `t.uop` of the function's input Tensors; they are leaves of the analysis, matched by identity.
    wrt: index into `inputs` of the input to differentiate with respect to. The other inputs (such as multipliers) are
      unknown values that contribute no variables.

  Returns:
    A boolean CSC array of shape (n, n), n the size of `inputs[wrt]`, holding rows i <= j of each column j, sorted.

  Raises:
    SparsityError: the graph contains an unsupported op (named in the message).
    ValueError: `wrt` is not an index into `inputs`.

  Example:
    >>> x = Tensor.empty(4, dtype=dtypes.float64)
    >>> hessian_sparsity((x * x.flip(0)).sum().uop, [x.uop], 0).nnz
    2
  """
  n = _input_size(inputs, wrt)
  nodes = _forward([output], inputs, wrt)
  rows = _reverse(output, nodes, set(inputs)).rows(n)
  return _csc([set_bits(rows[j] & ((2 << j) - 1)) for j in range(n)], (n, n))


def _input_size(inputs: Sequence[UOp], wrt: int) -> int:
  if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(inputs):
    raise ValueError(f"wrt={wrt!r} is not an index into the {len(inputs)} inputs")
  return _size(inputs[wrt])


def _csc(columns: list[list[int]], shape: tuple[int, int]) -> scipy.sparse.csc_array:
  """A boolean CSC array from the sorted row indices of each column."""
  indptr = np.cumsum([0] + [len(c) for c in columns])
  indices = np.fromiter(itertools.chain.from_iterable(columns), np.int64, count=indptr[-1])
  return scipy.sparse.csc_array((np.ones(indptr[-1], bool), indices, indptr), shape=shape)


def set_bits(d: int) -> list[int]:
  """The positions of the set bits of d, ascending."""
  if d.bit_count() > 64:  # NOTE: numpy's overhead only pays off for dense bitsets
    raw = np.frombuffer(d.to_bytes((d.bit_length() + 7) // 8, "little"), np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()
  out = []
  while d:
    low = d & -d
    out.append(low.bit_length() - 1)
    d ^= low
  return out


def _shape(u: UOp) -> tuple[int, ...]:
  if not all(isinstance(d, int) for d in u.shape):
    raise SparsityError(f"symbolic shape {u.shape} of {u.op.name} is not supported")
  return tuple(int(d) for d in u.shape)


def _size(u: UOp) -> int:
  return int(np.prod(_shape(u), dtype=np.int64))


def _objects(shape: tuple[int, ...]) -> Array:
  return np.zeros(shape, dtype=object)


# ---- forward pass: dependency bitsets and constant folding ----


def _forward(roots: Sequence[UOp], inputs: Sequence[UOp], wrt: int) -> dict[UOp, _Node]:
  """Every node reachable from `roots` along value edges, in topological order (dicts keep insertion order)."""
  nodes = _leaves(inputs, wrt)
  # NOTE: folding evaluates every node, also where inputs make it meaningless (1/0, casts of nan): ignore those.
  with np.errstate(all="ignore"):
    for u in toposort(roots, _operands, nodes):
      if u not in nodes:
        nodes[u] = _evaluate(u, [nodes[s] for s in _operands(u)])
  return nodes


def _leaves(inputs: Sequence[UOp], wrt: int) -> dict[UOp, _Node]:
  leaves: dict[UOp, _Node] = {}
  for i, u in enumerate(inputs):
    size = _size(u)
    deps = np.array([1 << k for k in range(size)] if i == wrt else [0] * size, dtype=object)
    for v in _input_views(u):
      leaves.setdefault(v, _make(v, deps.reshape(_shape(v)), np.zeros(()), np.zeros((), bool)))
  return leaves


def _input_views(u: UOp) -> list[UOp]:
  """The UOps an input is seen as: an N-d input is RESHAPE(BUFFER), and the graph may reach the buffer (flat order)
  directly."""
  return [u, u.src[0]] if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER else [u]


def _operands(u: UOp) -> tuple[UOp, ...]:
  """The value sources of u (shape arguments and store targets are not values; an arange is a leaf)."""
  if arange_values(u) is not None:
    return ()
  if u.op not in _SUPPORTED:
    raise SparsityError(f"sparsity: unsupported op {u.op.name}")
  if u.op in GroupOp.Movement:
    return (u.src[0],)
  if u.op is Ops.AFTER:
    return (_stored_value(u),)
  if u.op in (Ops.CONST, Ops.BUFFER):
    return ()
  return u.src


def _stored_value(u: UOp) -> UOp:
  """The value an AFTER(buffer, STORE(buffer, value)) node holds (`Tensor.ones`, `full`, `assign` produce these)."""
  if (value := stored_value(u)) is None:
    raise SparsityError("sparsity: unsupported op AFTER (only a store of a whole buffer is supported)")
  return value


def _make(u: UOp, deps: Array, val: Array, known: Array | bool) -> _Node:
  """A node's arrays, broadcast to its shape; known elements depend on nothing."""
  shape = _shape(u)
  known = np.broadcast_to(np.asarray(known, bool), shape)
  if known.any():
    deps = np.where(known, 0, deps)
  deps = np.broadcast_to(np.asarray(deps, dtype=object), shape)
  val = np.broadcast_to(np.asarray(val).astype(np_dtype(u.dtype), copy=False), shape)
  return _Node(deps, val, known, np.asarray(deps != 0, bool))


def _evaluate(u: UOp, xs: list[_Node]) -> _Node:
  if (arange := arange_values(u)) is not None:
    return _make(u, _objects(()), arange, True)
  if u.op in GroupOp.Movement:
    x = xs[0]
    shape = _shape(u)
    return _make(u, move(u, x.deps, shape, 0), move(u, x.val, shape, 0), move(u, x.known, shape, True))
  if u.op in _ELEMENTWISE:
    return _elementwise(u, xs)
  return _RULES[u.op](u, xs)


def _unmove(u: UOp, live: Array, src: tuple[int, ...]) -> Array:
  """Pull a boolean array shaped like the movement op u back to its source's shape."""
  match u.op:
    case Ops.RESHAPE:
      return live.reshape(src)
    case Ops.EXPAND:
      return _unbroadcast(live, src)
    case Ops.PERMUTE:
      return live.transpose(np.argsort(u.marg))
    case Ops.FLIP:
      return np.flip(live, tuple(i for i, f in enumerate(u.marg) if f))
    case Ops.SHRINK:
      return embed(live, src, tuple(slice(o, o + s) for o, s in u.marg), False)
    case _:  # PAD
      return live[region(u.marg, src)]


def _unbroadcast(a: Array, shape: tuple[int, ...]) -> Array:
  """Any-reduce a boolean array over the axes numpy broadcasting added to reach it from `shape`."""
  lead = a.ndim - len(shape)
  stretched = tuple(lead + i for i, d in enumerate(shape) if d == 1 and a.shape[lead + i] != 1)
  return a.any(axis=tuple(range(lead)) + stretched).reshape(shape)


def _union(deps: list[Array]) -> Array:
  return functools.reduce(np.bitwise_or, deps) if deps else np.zeros((), dtype=object)


def _elementwise(u: UOp, xs: list[_Node]) -> _Node:
  """ALU ops (numpy broadcasting), casts and value-preserving ops."""
  if u.op is Ops.WHERE:
    return _where(u, *xs)
  if u.op in _PASS:
    val, known = xs[0].val, xs[0].known
  elif u.op in EVAL:
    val = EVAL[u.op](*(x.val for x in xs))
    known = np.logical_and.reduce(np.broadcast_arrays(*(x.known for x in xs)))
  else:  # NOTE: no value rule (THREEFRY): the value is unknown, the dependency rule below still holds
    val, known = np.zeros(()), np.zeros((), bool)
  if (absorbed := _absorbed(u, xs)) is not None:
    mask, value = absorbed
    known, val = known | mask, np.where(mask, value, val)
  return _make(u, _objects(()) if u.op in _CUT else _union([x.deps for x in xs if x.nz.any()]), val, known)


def _absorbed(u: UOp, xs: list[_Node]) -> tuple[Array, int] | None:
  """Elements whose value is fixed by one known operand alone: x*0, x&0 and x**0."""
  if u.op in (Ops.MUL, Ops.AND):
    return np.logical_or.reduce(np.broadcast_arrays(*(x.known & (x.val == 0) for x in xs))), 0
  if u.op is Ops.POW:
    return xs[1].known & (xs[1].val == 0), 1
  return None


def _where(u: UOp, c: _Node, a: _Node, b: _Node) -> _Node:
  """WHERE ignores its condition's dependencies; where the condition is known each element takes only its branch."""
  pick = c.val.astype(bool)
  val = np.where(pick, a.val, b.val)
  known = c.known & np.where(pick, a.known, b.known)
  deps = _union([x.deps for x in (a, b) if x.nz.any()])
  if c.known.any():
    deps = np.where(c.known, np.where(pick, a.deps, b.deps), deps)
  return _make(u, deps, val, known)


def _const(u: UOp, xs: list[_Node]) -> _Node:
  return _make(u, _objects(()), np.asarray(u.arg), True)


def _buffer(u: UOp, xs: list[_Node]) -> _Node:
  """A buffer that is not an input: a captured host constant (known) or some other unknown value."""
  if u.device in HOST_DEVICES and u.is_realized:
    val = np.frombuffer(constant_bytes(u), dtype=np_dtype(u.dtype)).reshape(_shape(u))
    return _make(u, _objects(()), val, True)
  return _make(u, _objects(()), np.zeros(()), False)


def _reduce(u: UOp, xs: list[_Node]) -> _Node:
  """REDUCE combines the leading arg[1] axes with arg[0] (ADD, MUL or MAX)."""
  (x,), (op, n) = xs, u.arg
  axes = tuple(range(n))
  initial = _lowest(x.val.dtype) if op is Ops.MAX else {Ops.ADD: 0, Ops.MUL: 1}[op]
  val = REDUCE_EVAL[op].reduce(x.val, axis=axes, initial=initial)
  known = np.logical_and.reduce(x.known, axis=axes)
  if op is Ops.MUL:
    zero = np.logical_or.reduce(x.known & (x.val == 0), axis=axes)
    known, val = known | zero, np.where(zero, 0, val)
  return _make(u, np.bitwise_or.reduce(x.deps, axis=axes, initial=0), val, known)


def _lowest(dt: np.dtype) -> object:
  return -np.inf if dt.kind == "f" else np.iinfo(dt).min if dt.kind in "iu" else False


def _stack(u: UOp, xs: list[_Node]) -> _Node:
  """A value STACK is `Tensor.stack`: a new leading axis."""
  return _make(u, np.stack([x.deps for x in xs]), np.stack([x.val for x in xs]), np.stack([x.known for x in xs]))


_RULES: dict[Ops, Callable[[UOp, list[_Node]], _Node]] = {
  Ops.CONST: _const, Ops.BUFFER: _buffer, Ops.REDUCE: _reduce, Ops.STACK: _stack,
}  # fmt: skip


# ---- constant derivatives: the entries of the Jacobian that do not depend on the point ----


def constant_derivatives(outputs: Sequence[UOp], inputs: Sequence[UOp], wrt: int, seeds: Array) -> Array:
  """Directional derivatives of the outputs that are the same at every point: ∂out/∂x_wrt · seed for each row of
  `seeds` (shape (count, size of input `wrt`)), or NaN where that value depends on the point (on a curved op, on
  another input, on a value not known at trace time).

  Forward mode over the same graph as `jacobian_sparsity`, with the constants it folds: a sum, a product by a known
  value, a movement, a branch a known mask picks keep the derivative constant; any other op makes it NaN wherever it
  is not zero. With seeds from a column colouring of the pattern, element (r, c) is the entry of row r in the column
  of colour c: constant entries (e.g. the identity blocks of multiple-shooting defects) need no evaluation at run
  time. Returns an array of shape (sum of the output sizes, count).
  """
  nodes = _forward(outputs, inputs, wrt)
  count = seeds.shape[0]
  tangents: dict[UOp, Array] = {}
  for i, u in enumerate(inputs):
    t = seeds.T if i == wrt else np.zeros((_size(u), count))
    for v in _input_views(u):
      tangents.setdefault(v, t.reshape(*_shape(v), count))
  with np.errstate(all="ignore"):
    for u, node in nodes.items():
      if u not in tangents:
        t = _tangent(u, [nodes[s] for s in _operands(u)], [tangents[s] for s in _operands(u)], count)
        tangents[u] = np.where(node.known[..., None], 0.0, t)
  return np.concatenate([tangents[o].reshape(-1, count) for o in outputs])


def _tangent(u: UOp, xs: list[_Node], ts: list[Array], count: int) -> Array:
  """u's tangents (its shape plus a trailing axis of seeds) from its operands'."""
  shape = (*_shape(u), count)
  if not xs:  # NOTE: a leaf (an arange)
    return np.zeros(shape)
  if u.op in GroupOp.Movement:
    return _move_tangent(u, ts[0])
  if u.op in _CUT or u.op in (Ops.CONST, Ops.BUFFER):
    return np.zeros(shape)
  if u.op in _PASS:
    return np.broadcast_to(ts[0], shape)
  if u.op is Ops.STACK:
    return np.stack([np.broadcast_to(t, (*_shape(s), count)) for s, t in zip(u.src, ts, strict=True)])
  if u.op is Ops.REDUCE:
    op, n = u.arg
    return np.sum(ts[0], axis=tuple(range(n))) if op is Ops.ADD else _curved(ts, shape, n)
  if u.op in (Ops.ADD, Ops.SUB):
    return np.broadcast_to(ts[0] + ts[1] if u.op is Ops.ADD else ts[0] - ts[1], shape)
  if u.op is Ops.NEG:
    return np.broadcast_to(-ts[0], shape)
  if u.op is Ops.MUL:
    (a, b), (ta, tb) = xs, ts
    # NOTE: with neither factor known the product's derivative is constant only where neither factor moves
    free = np.where((ta == 0) & (tb == 0), 0.0, np.nan)
    by_a = np.where(a.known[..., None], a.val[..., None] * tb, free)
    return np.broadcast_to(np.where(b.known[..., None], ta * b.val[..., None], by_a), shape)
  if u.op is Ops.WHERE:
    c = xs[0]
    chosen = np.where(c.val.astype(bool)[..., None], ts[1], ts[2])
    return np.broadcast_to(np.where(c.known[..., None], chosen, _curved(ts[1:], shape, 0)), shape)
  return _curved(ts, shape, 0)


def _curved(ts: list[Array], shape: tuple[int, ...], reduced: int) -> Array:
  """NaN wherever an operand's tangent (over the first `reduced` axes, which the op reduces) is not zero: there the
  derivative depends on the point."""
  moving: Array = np.zeros((), bool)
  for t in ts:
    moving = moving | (t != 0)
  if reduced:
    moving = np.asarray(moving.any(axis=tuple(range(reduced))))
  return np.where(np.broadcast_to(moving, shape), np.nan, 0.0)


def _move_tangent(u: UOp, t: Array) -> Array:
  """A movement op applied to tangents (their trailing seed axis untouched)."""
  shape, count = _shape(u), t.shape[-1]
  match u.op:
    case Ops.RESHAPE:
      return t.reshape(*shape, count)
    case Ops.EXPAND:
      return np.broadcast_to(t, (*shape, count))
    case Ops.PERMUTE:
      return t.transpose((*u.marg, len(u.marg)))
    case Ops.FLIP:
      return np.flip(t, tuple(i for i, f in enumerate(u.marg) if f))
    case Ops.SHRINK:
      return t[tuple(slice(o, o + s) for o, s in u.marg)]
    case _:  # PAD
      return embed(t, (*shape, count), (*region(u.marg, t.shape[:-1]), slice(None)), 0.0)


# ---- reverse pass: live adjoints and second-order couplings ----


def _reverse(root: UOp, nodes: dict[UOp, _Node], inputs: set[UOp]) -> _Couplings:
  """Propagate "adjoint can be nonzero" from every element of root and collect the couplings of curved ops."""
  couplings = _Couplings()
  live = {root: np.ones(_shape(root), bool)}
  for u in reversed(nodes):
    if (mask := live.pop(u, None)) is None or u in inputs:
      continue
    eff = mask & nodes[u].nz
    if not eff.any():
      continue
    srcs = _operands(u)
    xs = [nodes[s] for s in srcs]
    _couple(u, xs, eff, couplings)
    for s, x, pulled in zip(srcs, xs, _pullback(u, xs, eff), strict=True):
      pulled = pulled & x.nz
      if pulled.any():
        live[s] = live[s] | pulled if s in live else pulled
  return couplings


def _pullback(u: UOp, xs: list[_Node], eff: Array) -> list[Array]:
  """For each operand, the elements whose adjoint can be nonzero given the live elements `eff` of u."""
  if u.op in GroupOp.Movement:
    return [_unmove(u, eff, xs[0].deps.shape)]
  if u.op is Ops.REDUCE:
    return [np.broadcast_to(eff, xs[0].deps.shape)]
  if u.op is Ops.STACK:
    return list(eff)
  if u.op is Ops.WHERE:
    c = xs[0]
    pick = c.val.astype(bool)
    return [np.zeros(c.deps.shape, bool)] + [
      _unbroadcast(eff & ~(c.known & (pick != branch)), x.deps.shape) for branch, x in ((True, xs[1]), (False, xs[2]))
    ]
  return [_unbroadcast(eff, x.deps.shape) for x in xs]


def _couple(u: UOp, xs: list[_Node], eff: Array, out: _Couplings) -> None:
  """Record the second-order couplings of the live elements `eff` of u (linear and piecewise-linear ops have none)."""
  if u.op is Ops.REDUCE and u.arg[0] is Ops.MUL:
    _couple_product(xs[0].deps, eff, out)
  if u.op not in _CURVED:
    return
  at = [np.broadcast_to(x.deps, eff.shape)[eff] for x in xs]
  if u.op in _CURVED_UNARY:
    out.cliques.update(at[0].tolist())
  elif u.op is Ops.POW:  # NOTE: x**0 and x**1 are not curved in x; a known base still leaves e -> b**e curved
    e = xs[1]
    curved = ~np.broadcast_to(e.known & ((e.val == 0) | (e.val == 1)), eff.shape)[eff]
    out.cliques.update((at[0] | at[1])[curved].tolist())
  else:  # MUL, MULACC, FDIV: a*b couples a with b; a/b is also curved in b
    out.crosses.update(zip(at[0].tolist(), at[1].tolist(), strict=True))
    if u.op is Ops.FDIV:
      out.cliques.update(at[1].tolist())


def _couple_product(deps: Array, eff: Array, out: _Couplings) -> None:
  """A product over the leading axes couples each factor with the union of the others (not with itself)."""
  d = deps.reshape(-1, eff.size)[:, eff.reshape(-1)]
  zero = _objects((1, d.shape[1]))
  before = np.concatenate([zero, np.bitwise_or.accumulate(d, axis=0)[:-1]])
  after = np.concatenate([np.bitwise_or.accumulate(d[::-1], axis=0)[::-1][1:], zero])
  out.crosses.update(zip(d.reshape(-1).tolist(), (before | after).reshape(-1).tolist(), strict=True))
