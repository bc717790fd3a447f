"""Batching of traced tinygrad graphs: the UOp-level rule behind `vmap`.

The batch axis is carried as the *last* axis while rebuilding the graph: in tinygrad 0.14 REDUCE reduces leading axes,
EXPAND prepends axes and a value STACK adds a leading axis, so all three need no change, the other movement ops get one
trailing entry, and elementwise ops only need unbatched operands reshaped to broadcast against the batch axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tinygrad import dtypes
from tinygrad.uop.ops import GroupOp, Ops, UOp

LEAVES = (Ops.CONST, Ops.BUFFER, Ops.PARAM, Ops.COPY)
PASS_THROUGH = (Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD)


class VmapError(ValueError):
  """The function uses a construct `vmap` cannot batch."""


def lift(u: UOp, size: int) -> UOp:
  """An unbatched value broadcast along a new trailing batch axis of length `size`."""
  n = len(u.shape)
  return u._mop(Ops.EXPAND, (size,))._mop(Ops.PERMUTE, (*range(1, n + 1), 0))  # EXPAND prepends axes


def to_batch_last(u: UOp) -> UOp:
  """(B, *s) -> (*s, B)."""
  n = len(u.shape)
  return u._mop(Ops.PERMUTE, (*range(1, n), 0))


def to_batch_first(u: UOp) -> UOp:
  """(*s, B) -> (B, *s)."""
  n = len(u.shape)
  return u._mop(Ops.PERMUTE, (n - 1, *range(n - 1)))


class _Batcher:
  """Rebuilds a graph with some leaves replaced: batched ones (shape (*s, B)) and plain substitutions."""

  def __init__(self, batched: Mapping[UOp, UOp], substituted: Mapping[UOp, UOp], size: int):
    self.size = size
    self.memo: dict[UOp, tuple[UOp, bool]] = {u: (v, True) for u, v in batched.items()}
    self.memo |= {u: (v, False) for u, v in substituted.items()}

  def __call__(self, u: UOp) -> tuple[UOp, bool]:
    # NOTE: iterative post-order walk; graphs of unrolled models are deep enough to overflow Python's recursion.
    stack = [u]
    while stack:
      node = stack[-1]
      if node in self.memo:
        stack.pop()
        continue
      pending = [s for s in self._value_srcs(node) if s not in self.memo]
      if pending:
        stack.extend(pending)
        continue
      self.memo[node] = self._rebuild(node)
      stack.pop()
    return self.memo[u]

  @staticmethod
  def _value_srcs(u: UOp) -> tuple[UOp, ...]:
    if u.op in LEAVES or _is_shape_arg(u):
      return ()
    if u.op in GroupOp.Movement:
      return (u.src[0],)
    return u.src

  def _rebuild(self, u: UOp) -> tuple[UOp, bool]:
    if u.op in LEAVES or _is_shape_arg(u):
      return u, False
    srcs = [self.memo[s] for s in self._value_srcs(u)]
    if not any(b for _, b in srcs):
      new = [s for s, _ in srcs]
      if all(n is o for n, o in zip(new, self._value_srcs(u), strict=True)):
        return u, False
      return (u.replace(src=(*new, *u.src[1:])) if u.op in GroupOp.Movement else u.replace(src=tuple(new))), False
    if u.op in GroupOp.Movement:
      return self._movement(u, srcs[0][0]), True
    if u.op is Ops.REDUCE or u.op in PASS_THROUGH:
      return u.replace(src=(srcs[0][0], *u.src[1:])), True
    if u.op is Ops.STACK:
      return u.replace(src=tuple(s if b else lift(s, self.size) for s, b in srcs)), True
    if u.op in GroupOp.Elementwise:
      return u.replace(
        src=tuple(s if b or s.shape == () else s._mop(Ops.RESHAPE, (*s.shape, 1)) for s, b in srcs)
      ), True
    raise VmapError(f"vmap: cannot batch the tinygrad op {u.op.name} (assignments, .realize() and tinygrad.function "
                    "calls are not supported inside a vmapped function)")  # fmt: skip

  def _movement(self, u: UOp, s: UOp) -> UOp:
    m, b = tuple(u.marg), self.size
    if u.op is Ops.RESHAPE:
      return s._mop(Ops.RESHAPE, (*m, b))
    if u.op is Ops.EXPAND:
      return s._mop(Ops.EXPAND, m)
    if u.op in (Ops.PAD, Ops.SHRINK):
      return s._mop(u.op, (*m, (0, b)))
    if u.op is Ops.PERMUTE:
      return s._mop(Ops.PERMUTE, (*m, len(m)))
    return s._mop(Ops.FLIP, (*m, False))


def _is_shape_arg(u: UOp) -> bool:
  # NOTE: shape arguments of movement ops are STACKs/CONSTs of index dtype living in src; they are never values.
  return u.dtype in (dtypes.void, dtypes.weakint)


def batch_graph(
  roots: Sequence[UOp], batched: Mapping[UOp, UOp], substituted: Mapping[UOp, UOp], size: int
) -> list[UOp]:
  """Rebuild `roots` with `batched` leaves (values of shape (*s, B)) and `substituted` leaves replaced.

  Returns each root batched with the batch axis first, shape (B, *s); roots that do not depend on a batched leaf are
  broadcast along it.
  """
  batcher = _Batcher(batched, substituted, size)
  out = []
  for root in roots:
    new, is_batched = batcher(root)
    out.append(to_batch_first(new if is_batched else lift(new, size)))
  return out
