"""Sparse derivatives of scalar expression graphs (`anvil.codegen.scalar`), as CasADi's SX derives them.

A function written as a loop over stages is lowered to one scalar expression per element; its sparse Jacobian and
Hessian are then derived on those expressions directly, instead of tracing tinygrad's reverse mode over a batch of
colour seeds (which repeats the whole unrolled graph per colour and takes minutes to build on such graphs):

* forward mode with sparse tangents: each node carries {column: expression} for the input elements it depends on,
  so an entry of the Jacobian is the expression its output element collects;
* the Hessian is forward over reverse: the reverse pass writes the gradient as expressions (adjoints), and forward
  mode over those gives its Jacobian.

Every entry is one expression of the graph, folded and shared like the rest (constant entries become literals).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import dtypes
from tinygrad.uop.ops import Ops

from anvil.ad.vector_mode import WIDE, Tangent, VectorJacobian, accumulate, vector_jacobian
from anvil.codegen.cache import cache_dir, read_artifact, write_atomic
from anvil.codegen.function import DerivedCode, NumericalFunction
from anvil.codegen.jit import sources_fingerprint
from anvil.codegen.program import Program
from anvil.codegen.renderer import COS_MARK
from anvil.codegen.scalar import TANGENT, ScalarGraph, Unsupported, lower
from anvil.codegen.straight_line import emit_program, suits_straight_line
from anvil.codegen.trace import OutputSpec

#: Ops whose derivative is zero where it exists (comparisons, integer and bit ops, rounding).
_FLAT = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.TRUNC, Ops.CDIV, Ops.CMOD, Ops.AND, Ops.OR, Ops.XOR,
                   Ops.SHL, Ops.SHR, Ops.CONST, Ops.LOAD, Ops.DETACH})  # fmt: skip
#: This package's sources: part of the keys of what is derived here.
_FINGERPRINT = sources_fingerprint(Path(__file__).parent)


def scalar_route(fn: NumericalFunction[..., Any]) -> bool:
  """Whether derivatives of `fn` are derived on its scalar expressions: a CPU function of many small tensors."""
  return fn.device == "CPU" and suits_straight_line(fn.traced)


def scalar_gradient(fn: NumericalFunction[..., Any], wrt: int) -> DerivedCode:
  """The code of the gradient of `fn`'s scalar output in input `wrt`, derived on its scalar expressions (reverse
  mode); its build falls back (None) where the scalar lowering does not apply."""

  def build() -> Program | None:
    traced = fn.traced
    try:
      lowered = lower(traced)
      slot = traced.output_slots[0]
      entries = gradient(lowered.graph, int(lowered.values[slot][0]), wrt, fn.inputs[wrt].size, final=True)
    except Unsupported:
      return None
    return emit_program(lowered.graph, [(0, k, e) for k, e in enumerate(entries)], [u.dtype for u in traced.inputs],
                        [traced.stores[slot].dtype])  # fmt: skip

  return _derived_code(fn, f"gradient in input {wrt}", fn.inputs[wrt].shape, build)


def scalar_dense(fn: NumericalFunction[..., Any], kind: str, wrt: int) -> DerivedCode:
  """The code of the dense Jacobian (output size, input size) or, for `kind` "hessian", the dense Hessian of `fn`'s
  single output in input `wrt`, derived on its scalar expressions as the sparse ones are (every entry the pattern
  lacks a zero); its build falls back (None) where the scalar lowering does not apply."""
  n = fn.inputs[wrt].size
  m = n if kind == "hessian" else fn.outputs[0].size

  def build() -> Program | None:
    traced = fn.traced
    try:
      lowered = lower(traced)
      g, slot = lowered.graph, traced.output_slots[0]
      outputs = lowered.values[slot].tolist()
      if kind == "hessian":
        columns = _hessian_columns(g, outputs[0], wrt, n)
        columns = [
          {**c, **{i: columns[i][j] for i in range(j + 1, n) if j in columns[i]}} for j, c in enumerate(columns)
        ]
      elif (vector := _vector_jacobian(g, outputs, wrt, n)) is not None:
        return _dense_vector_program(vector, m, n, [u.dtype for u in traced.inputs], traced.stores[slot].dtype)
      else:
        columns = _jacobian_columns(g, outputs, wrt, n)
    except Unsupported:
      return None
    zero = g.const(0.0, traced.stores[slot].dtype)
    writes = [(0, r * n + c, columns[c].get(r, zero)) for r in range(m) for c in range(n)]
    return emit_program(g, writes, [u.dtype for u in traced.inputs], [traced.stores[slot].dtype])

  return _derived_code(fn, f"dense {kind} in input {wrt}", (m, n), build)


def scalar_gauss_newton(fn: NumericalFunction[..., Any], wrt: int, weight_pattern: NDArray[np.bool_]) -> DerivedCode:
  """The code of Jᵀ (W + Wᵀ) J (dense, n x n), J = ∂fn/∂x_wrt (m x n), W a further last input (m x m) read on
  `weight_pattern` alone: the Gauss-Newton Hessian of fn(x)ᵀ W fn(x), derived on `fn`'s scalar expressions (forward
  mode) so that only the products of entries of J and W that are not structurally zero are emitted; its build falls
  back (None) where the scalar lowering does not apply."""
  n, m = fn.inputs[wrt].size, fn.outputs[0].size
  rows, cols = np.nonzero(weight_pattern | weight_pattern.T)

  def build() -> Program | None:
    traced = fn.traced
    try:
      lowered = lower(traced)
      slot = traced.output_slots[0]
      columns = _jacobian_columns(lowered.graph, lowered.values[slot].tolist(), wrt, n)
    except Unsupported:
      return None
    g, dt = lowered.graph, traced.stores[slot].dtype
    weight = lambda a, b: g.load(len(traced.inputs), a * m + b, dt) if weight_pattern[a, b] else None
    by_row: dict[int, Tangent] = {}  # the rows {b: S_ab} of S = W + Wᵀ on the pattern
    for a, b in zip(rows.tolist(), cols.tolist(), strict=True):
      terms = [t for t in (weight(a, b), weight(b, a)) if t is not None]
      by_row.setdefault(a, {})[b] = terms[0] if len(terms) == 1 else g.alu(Ops.ADD, dt, *terms)
    weighted: list[Tangent] = []  # (W + Wᵀ) J, column by column
    for column in columns:
      weighted.append({a: d for a, row in by_row.items() if (d := _dot(g, dt, row, column)) is not None})
    zero = g.const(0.0, dt)
    writes = []
    for i, j in ((a, b) for a in range(n) for b in range(a, n)):  # NOTE: symmetric: each pair once, written twice
      entry = _dot(g, dt, columns[i], weighted[j])
      entry = zero if entry is None else entry
      writes += [(0, i * n + j, entry)] + ([(0, j * n + i, entry)] if i != j else [])
    return emit_program(g, writes, [*(u.dtype for u in traced.inputs), dt], [dt])

  what = f"gauss-newton hessian in input {wrt} weighted on {np.packbits(weight_pattern).tobytes().hex()}"
  return _derived_code(fn, what, (n, n), build)


def _dot(g: ScalarGraph, dt: Any, a: Tangent, b: Tangent) -> int | None:
  """Σ_k a_k b_k over the keys both sparse vectors hold, in a's order; None where they share none."""
  terms = [g.alu(Ops.MUL, dt, v, b[k]) for k, v in a.items() if k in b]
  return functools.reduce(lambda x, y: g.alu(Ops.ADD, dt, x, y), terms) if terms else None


def scalar_sparse(
  fn: NumericalFunction[..., Any], kind: str, wrt: int
) -> tuple[sp.csc_array, DerivedCode, NDArray[np.float64]] | None:
  """The structural pattern, the code and the constant entries (each entry's value where its expression is a
  constant, else NaN) of a sparse derivative of `fn`'s single output in input `wrt`, derived on its scalar
  expressions: `kind` "jacobian" (forward mode) or "hessian" (forward over reverse, the upper triangle). The pattern
  holds the entries whose expression is not a constant zero. None where the scalar lowering does not apply.

  The pattern and constants are cached (`derived/<key>.json`, keyed on `fn`'s key and what is derived): a later
  build of the same function takes them from there and derives again only if its code is not cached either."""
  what = f"{kind} in input {wrt}"
  record = f"derived/{hashlib.sha256(f'{fn.key}|{what}|{_FINGERPRINT}'.encode()).hexdigest()}.json"
  shape = (fn.inputs[wrt].size if kind == "hessian" else fn.outputs[0].size, fn.inputs[wrt].size)
  derivation = functools.cache(lambda: _derive(fn, kind, wrt))
  if (cached := _cached_pattern(record, shape)) is not None:
    pattern, constants = cached
  else:
    if (found := derivation()) is None:
      return None
    pattern, constants = found.pattern, found.constants
    body = {"indices": pattern.indices.tolist(), "indptr": pattern.indptr.tolist(),
            "constants": [None if np.isnan(c) else float(c) for c in constants]}  # fmt: skip
    write_atomic(cache_dir() / record, json.dumps(body))

  def build() -> Program | None:
    found = derivation()
    if found is None or not _same_pattern(found.pattern, pattern):
      return None  # NOTE: the cached pattern no longer fits (a stale entry): built from tinygrad's graph instead
    return found.program()

  return pattern, _derived_code(fn, what, (pattern.nnz,), build), constants


@dataclass(frozen=True)
class _Derivation:
  """A sparse derivative derived on scalar expressions: its pattern, constant entries, and how to emit its code."""

  pattern: sp.csc_array
  constants: NDArray[np.float64]
  program: Callable[[], Program]


def _derive(fn: NumericalFunction[..., Any], kind: str, wrt: int) -> _Derivation | None:
  traced = fn.traced
  size = fn.inputs[wrt].size
  try:
    lowered = lower(traced)
    g, slot = lowered.graph, traced.output_slots[0]
    outputs = lowered.values[slot].tolist()
    dtypes_in, dtype_out = [u.dtype for u in traced.inputs], [traced.stores[slot].dtype]
    if kind == "hessian":
      columns, rows = _hessian_columns(g, outputs[0], wrt, size), size
    elif (vector := _vector_jacobian(g, outputs, wrt, size)) is not None:
      return _sparse_vector_derivation(vector, len(outputs), size, dtypes_in, dtype_out[0])
    else:
      columns, rows = _jacobian_columns(g, outputs, wrt, size), len(outputs)
  except Unsupported:
    return None
  # NOTE: emitted expressions first (DETACH and TANGENT nodes substituted), so the pattern holds no entry they zero
  entries = [(c, r, d) for c, column in enumerate(columns) for r, d in column.items()]
  emitted = g.substituted([d for _, _, d in entries])
  columns = [{} for _ in columns]
  for (c, r, _), d in zip(entries, emitted, strict=True):
    columns[c][r] = d
  indices = [sorted(r for r, d in column.items() if not _is_zero(g, d)) for column in columns]
  indptr = np.cumsum([0] + [len(i) for i in indices])
  flat = [r for i in indices for r in i]
  pattern = sp.csc_array((np.ones(len(flat)), np.array(flat, dtype=np.int64), indptr), shape=(rows, size))
  writes = [(0, k, columns[c][r]) for k, (c, r) in enumerate((c, r) for c, i in enumerate(indices) for r in i)]
  constants = np.array([float(g.args[e]) if g.is_const(e) else np.nan for _, _, e in writes], dtype=np.float64)
  return _Derivation(pattern, constants, lambda: emit_program(g, writes, dtypes_in, dtype_out))


def _vector_jacobian(g: ScalarGraph, outputs: Sequence[int], wrt: int, size: int) -> VectorJacobian | None:
  """The Jacobian of `outputs` in input `wrt` (`size` elements) in vector mode where its wide tangents pay for it,
  else None."""
  if size < WIDE:  # NOTE: the gate's first condition, before the passes it needs
    return None
  zero = g.zero_valued(outputs)
  return vector_jacobian(g, outputs, wrt, size, _partials, _needed(g, outputs, zero), zero)


def _dense_vector_program(vector: VectorJacobian, m: int, n: int, inputs: Sequence[Any], output: Any) -> Program:
  """The program of a dense Jacobian (m x n, row-major) in vector mode."""
  g = vector.graph
  zero = g.const(0.0, output)
  writes, positions = [], {}
  for r in range(m):
    if (wide := vector.wide.get(r)) is not None:
      positions.update({(r, c): r * n + c for c in wide})
      writes += [(0, r * n + c, zero) for c in sorted(set(range(n)) - set(wide))]
    else:
      writes += [(0, r * n + c, vector.narrow[r].get(c, zero)) for c in range(n)]
  return vector.program(writes, positions, inputs, output)


def _sparse_vector_derivation(vector: VectorJacobian, m: int, n: int, inputs: Sequence[Any], output: Any
                              ) -> _Derivation:  # fmt: skip
  """A sparse Jacobian (m x n) in vector mode: every column of a wide row's support is in its pattern; a narrow
  row's entries are, where their emitted expression is not zero."""
  g = vector.graph
  entries = [(c, r, d) for r, row in vector.narrow.items() for c, d in row.items()]
  emitted = g.substituted([d for _, _, d in entries])
  cells: dict[tuple[int, int], int | None] = {
    (c, r): d for (c, r, _), d in zip(entries, emitted, strict=True) if not _is_zero(g, d)
  }
  cells.update({(c, r): None for r, wide in vector.wide.items() for c in wide})
  keys = sorted(cells)  # NOTE: column-major, as the CSC pattern stores its entries
  rows = np.array([r for _, r in keys], dtype=np.int64)
  indptr = np.searchsorted(np.array([c for c, _ in keys], dtype=np.int64), np.arange(n + 1))
  pattern = sp.csc_array((np.ones(len(keys)), rows, indptr), shape=(m, n))
  writes = [(0, k, d) for k, key in enumerate(keys) if (d := cells[key]) is not None]
  positions = {(r, c): k for k, (c, r) in enumerate(keys) if cells[c, r] is None}
  values = [cells[key] for key in keys]
  constants = np.array([float(g.args[d]) if d is not None and g.is_const(d) else np.nan for d in values])
  return _Derivation(pattern, constants, lambda: vector.program(writes, positions, inputs, output))


def _cached_pattern(record: str, shape: tuple[int, int]) -> tuple[sp.csc_array, NDArray[np.float64]] | None:
  """The pattern and constants in the cache's `record` when it verifies and fits `shape`, else None."""
  if (data := read_artifact(record)) is None:
    return None
  try:
    body = json.loads(data)
    indices, indptr = np.asarray(body["indices"], dtype=np.int64), np.asarray(body["indptr"], dtype=np.int64)
    constants = np.array([np.nan if c is None else c for c in body["constants"]], dtype=np.float64)
    pattern = sp.csc_array((np.ones(indices.size), indices, indptr), shape=shape)
    pattern.check_format(full_check=True)
  except (ValueError, KeyError, TypeError, IndexError):
    return None
  return (pattern, constants) if constants.shape == (pattern.nnz,) else None


def _same_pattern(a: sp.csc_array, b: sp.csc_array) -> bool:
  return a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)


def _derived_code(fn: NumericalFunction[..., Any], what: str, shape: tuple[int, ...], build: Any) -> DerivedCode:
  return DerivedCode(lambda: fn.traced, f"scalar {what}|{_FINGERPRINT}",
                     (OutputSpec(shape, fn.outputs[0].dtype),), build)  # fmt: skip


def _partials(g: ScalarGraph, i: int) -> list[tuple[int, int]]:
  """(operand, ∂node/∂operand) for each operand node i depends on differentiably.

  Raises:
    Unsupported: an op without a derivative rule here (the derivative is then built from tinygrad's graph).
  """
  op, dt, src = g.ops[i], g.dtypes[i], g.srcs[i]
  if op in _FLAT or not dtypes.is_float(dt):
    return []
  one = g.const(1.0, dt)
  mul = lambda a, b: g.alu(Ops.MUL, dt, a, b)
  match op:
    case Ops.ADD:
      return [(src[0], one), (src[1], one)]
    case _ if op is TANGENT:
      return [(src[0], one)]
    case Ops.SUB:
      return [(src[0], one), (src[1], g.const(-1.0, dt))]
    case Ops.NEG:
      return [(src[0], g.const(-1.0, dt))]
    case Ops.MUL:
      return [(src[0], src[1]), (src[1], src[0])]
    case Ops.MULACC:
      return [(src[0], src[1]), (src[1], src[0]), (src[2], one)]
    case Ops.FDIV:
      inverse = g.alu(Ops.RECIPROCAL, dt, src[1])
      return [(src[0], inverse), (src[1], g.alu(Ops.NEG, dt, mul(i, inverse)))]
    case Ops.RECIPROCAL:
      return [(src[0], g.alu(Ops.NEG, dt, mul(i, i)))]
    case Ops.SQRT:
      return [(src[0], mul(g.const(0.5, dt), g.alu(Ops.RECIPROCAL, dt, i)))]
    case Ops.SIN if g.args[i] == COS_MARK:
      return [(src[0], g.alu(Ops.NEG, dt, g.alu(Ops.SIN, dt, src[0])))]
    case Ops.SIN:
      return [(src[0], g.cos(src[0]))]
    case Ops.EXP2:
      return [(src[0], mul(i, g.const(math.log(2), dt)))]
    case Ops.LOG2:
      return [(src[0], mul(g.alu(Ops.RECIPROCAL, dt, src[0]), g.const(1 / math.log(2), dt)))]
    case Ops.MAX:
      first = g.alu(Ops.CMPLT, dtypes.bool, src[0], src[1])
      zero = g.const(0.0, dt)
      return [(src[0], g.alu(Ops.WHERE, dt, first, zero, one)), (src[1], g.alu(Ops.WHERE, dt, first, one, zero))]
    case Ops.WHERE:
      zero = g.const(0.0, dt)
      return [(src[1], g.alu(Ops.WHERE, dt, src[0], one, zero)), (src[2], g.alu(Ops.WHERE, dt, src[0], zero, one))]
    case Ops.POW:
      b, e = src
      zero = g.const(0.0, dt)
      by_base = g.alu(Ops.MUL, dt, e, g.alu(Ops.POW, dt, b, g.alu(Ops.SUB, dt, e, one)))
      by_exponent = mul(i, mul(g.alu(Ops.LOG2, dt, b), g.const(math.log(2), dt)))
      base_zero, exponent_zero = g.alu(Ops.CMPEQ, dtypes.bool, b, zero), g.alu(Ops.CMPEQ, dtypes.bool, e, zero)
      at_zero = g.alu(Ops.WHERE, dt, g.alu(Ops.CMPLT, dtypes.bool, e, zero), g.const(-math.inf, dt), zero)
      return [(b, g.alu(Ops.WHERE, dt, exponent_zero, zero, by_base)),
              (e, g.alu(Ops.WHERE, dt, base_zero, at_zero, by_exponent))]  # fmt: skip
    case Ops.CAST:
      return [(src[0], one)] if dtypes.is_float(g.dtypes[src[0]]) else []
  raise Unsupported(f"no derivative rule for {op.name}")


def tangents(g: ScalarGraph, roots: Sequence[int], wrt: int, final: bool = True) -> dict[int, Tangent]:
  """The sparse tangent {element of input `wrt`: ∂node/∂element} of every node the roots depend on. In the `final`
  derivative pass (its expressions are emitted, not differentiated again), terms whose factor is zero once emitted
  (`ScalarGraph.zero_valued`) are dropped, and the tangents only they would read are not formed."""
  zero = g.zero_valued(roots) if final else bytearray(len(g))
  needed = _needed(g, roots, zero)
  out: dict[int, Tangent] = {}
  for i in g.live(roots):
    if g.ops[i] is Ops.LOAD:
      out[i] = {g.args[i].element: g.const(1.0, g.dtypes[i])} if g.args[i].index == wrt else {}
      continue
    t: Tangent = {}
    if needed[i] and any(out[s] for s in g.srcs[i]):
      for s, partial in _partials(g, i):
        if not _zero_at(zero, partial):
          accumulate(g, t, out[s], partial, g.dtypes[i])
    out[i] = t
  return out


def _zero_at(zero: bytearray, i: int) -> bool:
  return i < len(zero) and bool(zero[i])


def _needed(g: ScalarGraph, roots: Sequence[int], zero: bytearray) -> bytearray:
  """The nodes whose tangent reaches a root through a factor that is not zero once emitted."""
  needed = bytearray(len(g))
  for r in roots:
    needed[r] = 1
  for i in range(len(needed) - 1, -1, -1):
    if not needed[i] or g.ops[i] in _FLAT:
      continue
    src = g.srcs[i]
    if g.ops[i] is Ops.MUL:
      needed[src[0]] |= not zero[src[1]]
      needed[src[1]] |= not zero[src[0]]
    else:
      for s in src:
        needed[s] = 1
  return needed


def gradient(g: ScalarGraph, root: int, wrt: int, size: int, final: bool = False) -> list[int]:
  """The expression of ∂root/∂x_j for each element j of input `wrt` (reverse mode); in the `final` pass, terms whose
  factor is zero once emitted are dropped (as in `tangents`)."""
  dt = g.dtypes[root]
  zero = g.zero_valued([root]) if final else bytearray(len(g))
  adjoint: dict[int, int] = {root: g.const(1.0, dt)}
  grad = [g.const(0.0, dt)] * size
  for i in reversed(g.live([root])):
    if (a := adjoint.get(i)) is None:
      continue
    if g.ops[i] is Ops.LOAD and g.args[i].index == wrt:
      grad[g.args[i].element] = a
    for s, partial in _partials(g, i):
      if _zero_at(zero, partial):
        continue
      term = g.cast(g.alu(Ops.MUL, g.dtypes[i], partial, a), g.dtypes[s])
      adjoint[s] = term if (old := adjoint.get(s)) is None else g.alu(Ops.ADD, g.dtypes[s], old, term)
  return grad


def _jacobian_columns(g: ScalarGraph, outputs: Sequence[int], wrt: int, size: int) -> list[Tangent]:
  """Column c of ∂outputs/∂x_wrt as {row: expression} (forward mode)."""
  found = tangents(g, outputs, wrt)
  columns: list[Tangent] = [{} for _ in range(size)]
  for r, o in enumerate(outputs):
    for c, d in found[o].items():
      columns[c][r] = d
  return columns


def _hessian_columns(g: ScalarGraph, root: int, wrt: int, size: int) -> list[Tangent]:
  """Column j of the upper triangle of the Hessian of `root` in x_wrt as {row i <= j: expression}."""
  grad = gradient(g, root, wrt, size)
  found = tangents(g, grad, wrt, final=True)
  # NOTE: the tangent of ∂root/∂x_j holds column j of the (symmetric) Hessian
  return [{i: d for i, d in found[grad[j]].items() if i <= j} for j in range(size)]


def _is_zero(g: ScalarGraph, i: int) -> bool:
  return g.is_const(i) and g.args[i] == 0
