"""Element by element through tinygrad's tensor-level ops: movement ops applied to numpy arrays shaped like the UOps,
ALU ops evaluated on numpy values. Shared by the sparsity analysis (dependency bitsets, folded constants) and the
scalar lowering (one expression per element)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.uop.ops import Ops, UOp

Array = NDArray[Any]


def _cdiv(a: Array, b: Array) -> Array:
  return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))


#: numpy evaluations of tinygrad's ALU ops (THREEFRY has none).
EVAL: dict[Ops, Callable[..., Any]] = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.NEG: np.negative, Ops.MAX: np.maximum,
  Ops.MULACC: lambda a, b, c: a * b + c, Ops.FDIV: np.divide, Ops.RECIPROCAL: lambda a: np.divide(1.0, a),
  Ops.POW: lambda a, b: np.power(np.asarray(a, np.float64), b),
  Ops.SQRT: np.sqrt, Ops.SIN: np.sin, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.TRUNC: np.trunc,
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
  Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
  Ops.SHL: np.left_shift, Ops.SHR: np.right_shift,
  Ops.CDIV: _cdiv, Ops.CMOD: np.fmod, Ops.FLOORDIV: np.floor_divide, Ops.FLOORMOD: np.mod,
}  # fmt: skip
#: numpy ufuncs of the ops REDUCE combines with.
REDUCE_EVAL = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}


def np_dtype(dt: DType) -> np.dtype:
  """The numpy dtype holding values of `dt`."""
  if dt.fmt is not None:
    return np.dtype(dt.fmt)
  return np.dtype(np.float64 if dtypes.is_float(dt) else np.int64)


def region(marg: Iterable[tuple[int, int]], shape: tuple[int, ...]) -> tuple[slice, ...]:
  """The region (offset, size) per axis; `shape` gives the sizes when marg is PAD's (offset, new size)."""
  return tuple(slice(o, o + s) for (o, _), s in zip(marg, shape, strict=True))


def embed(a: Array, shape: tuple[int, ...], where: tuple[slice, ...], fill: object) -> Array:
  """An array of `shape` filled with `fill`, holding `a` at the region `where`."""
  out = np.full(shape, fill, dtype=a.dtype)
  out[where] = a
  return out


def move(u: UOp, a: Array, shape: tuple[int, ...], fill: object) -> Array:
  """Apply the movement op u (result `shape`) to an array shaped like its source; PAD fills with `fill`."""
  match u.op:
    case Ops.RESHAPE:
      return a.reshape(shape)
    case Ops.EXPAND:
      return np.broadcast_to(a, shape)
    case Ops.PERMUTE:
      return a.transpose(u.marg)
    case Ops.FLIP:
      return np.flip(a, tuple(i for i, f in enumerate(u.marg) if f))
    case Ops.SHRINK:
      return a[tuple(slice(o, o + s) for o, s in u.marg)]
    case _:  # PAD
      return embed(a, shape, region(u.marg, a.shape), fill)


def arange_values(u: UOp) -> Array | None:
  """0 .. n - 1 if u is tinygrad's `Tensor.arange(n)` (as indexing by a Tensor makes, `(i == arange(n)).where(table,
  0).sum()`), else None. Its graph is a cumulative sum over n x 2n elements: element-wise passes take its values from
  here and never walk that graph (a table of 10^4 entries would be 2 * 10^8 elements)."""
  if u.op is not Ops.ADD or not dtypes.is_int(u.dtype) or u._shape is None or len(u.shape) != 1:
    return None
  n = u.shape[0]
  return np.arange(n) if isinstance(n, int) and u is _arange(n, u.dtype) else None


@functools.lru_cache(maxsize=256)
def _arange(n: int, dtype: DType) -> UOp:
  """The UOp of `Tensor.arange(n)` in `dtype` (hash-consed: the same object as any other made alike)."""
  return Tensor.arange(n, dtype=dtype).uop


def toposort(
  roots: Sequence[UOp], operands: Callable[[UOp], tuple[UOp, ...]], leaves: Container[UOp] = ()
) -> list[UOp]:
  """Every node reachable from `roots` through `operands` (value edges), each after its operands; `leaves` are not
  expanded."""
  order: dict[UOp, None] = {}
  stack = [(r, False) for r in reversed(roots)]
  while stack:
    u, expanded = stack.pop()
    if u in order:
      continue
    if expanded or u in leaves:
      order[u] = None
      continue
    stack.append((u, True))
    stack.extend((s, False) for s in reversed(operands(u)) if s not in order)
  return list(order)


def stored_value(u: UOp) -> UOp | None:
  """The value an AFTER(buffer, STORE(buffer, value)) node holds (`Tensor.ones`, `full`, `assign`, a traced function's
  outputs produce these), or None for any other AFTER."""
  store = u.src[1] if len(u.src) == 2 else None
  if store is not None and store.op is Ops.STORE and store.src[0] is u.src[0] and len(store.src) == 2:
    return store.src[1]
  return None
