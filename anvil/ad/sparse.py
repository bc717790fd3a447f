"""Sparse derivatives: structural pattern, colouring, one batched compressed pass, a gather into CSC values."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.ad.coloring import color_columns, seed_matrix, star_color, star_recovery
from anvil.ad.sparsity import hessian_sparsity, jacobian_sparsity
from anvil.ad.transforms import (
  Fn,
  batched_graph,
  check_wrt,
  hvp_graph,
  jvp_graph,
  placeholders,
  single_output,
  vjp_graph,
)
from anvil.codegen import Arg, SparseNumericalFunction
from anvil.codegen.build import stage
from anvil.codegen.renderer import UNROLL_LANES


def _colours_inner(size: int) -> bool:
  """Layout of the compressed result. tinygrad fuses it into one kernel that recomputes the primal per loop iteration;
  the unrolled (innermost, at most UNROLL_LANES) axis shares it. Entries innermost when a seed's result fits the
  unroll (then the compiler hoists the primal out of the colour loop), colours innermost otherwise."""
  return size > UNROLL_LANES


def _compressed(
  fn: Fn, xs: tuple[Tensor, ...], wrt: int, seeds: NDArray[np.float64], seed_arg: Arg, graph: Any, what: str
) -> Tensor:
  """`graph` (a JVP, VJP or HVP) batched over the rows of `seeds`, flattened to one vector (see `_colours_inner`)."""
  count = seeds.shape[0]
  if count == 0:
    return Tensor.zeros(1, dtype=seed_arg.dtype).contiguous()
  # NOTE: an identity seed is built from tinygrad's eye, whose zeros fold away at compile time; a general colouring's
  # seeds are data.
  identity = count == seeds.shape[1] and np.array_equal(seeds, np.eye(count))
  seed_values = Tensor.eye(count, dtype=seed_arg.dtype) if identity else Tensor(seeds.astype(np.float64))
  result = batched_graph(fn, xs, wrt, seed_arg, seed_values.reshape(count, *seed_arg.shape), count, graph, what)
  result = result.reshape(count, -1)
  return (result.transpose(0, 1) if _colours_inner(int(result.shape[1])) else result).flatten()


def _gather(entries: NDArray[np.int64], colors: NDArray[np.int64], count: int, size: int) -> NDArray[np.int64]:
  """Index of each nonzero in the flattened compressed result, given its position and colour (layout as in
  `_compressed`)."""
  return entries * count + colors if _colours_inner(size) else colors * size + entries


def _probe_output(fn: Fn, what: str) -> tuple[list[Tensor], Tensor]:
  probe = placeholders(fn.inputs)
  return probe, single_output(fn, fn.fn(*probe), what)


def spjacobian(fn: Fn, wrt: int = 0, *, name: str | None = None) -> SparseNumericalFunction:
  """The Jacobian with respect to input `wrt` as a sparse function returning a `scipy.sparse.csc_array`.

  The pattern is structural (from the graph, not from numerical zeros). Columns (or rows, whichever needs fewer
  colours) sharing no row (column) are coloured together; one batched JVP (VJP) over the colour seeds evaluates the
  compressed Jacobian and a generated gather scatters it into the CSC values.

  Example:
    >>> dg = spjacobian(g)              # dg(w, p) -> csc_array of shape (g size, w size)
  """
  arg = check_wrt(fn, wrt, "spjacobian")
  new_name = name if name is not None else f"{fn.name}_spjac"
  with stage(new_name, "derive"):
    probe, out = _probe_output(fn, "spjacobian")
    pattern = jacobian_sparsity([out.uop], [p.uop for p in probe], wrt)
  m, n = pattern.shape
  rows, cols = _csc_coordinates(pattern)
  col_colors = _or_identity(color_columns(pattern))
  row_colors = _or_identity(color_columns(sp.csc_array(pattern.T)))
  out_arg = Arg(tuple(int(d) for d in out.shape), out.dtype)
  # NOTE: fewer colours means fewer passes; on a tie, reverse mode (one VJP) is cheaper than the double-VJP JVP.
  if col_colors.size == 0 or (row_colors.size and row_colors.max() <= col_colors.max()):
    seeds = seed_matrix(row_colors, m)
    gather = _gather(cols, row_colors[rows], seeds.shape[0], n)
    seed_arg, graph = out_arg, vjp_graph
  else:
    seeds = seed_matrix(col_colors, n)
    gather = _gather(rows, col_colors[cols], seeds.shape[0], m)
    seed_arg, graph = Arg(arg.shape, arg.dtype), jvp_graph

  def compressed(*xs: Tensor) -> Tensor:
    with stage(new_name, "derive"):
      return _compressed(fn, xs, wrt, seeds, seed_arg, graph, "spjacobian")

  return SparseNumericalFunction(new_name, compressed, fn.inputs, pattern, device=fn.device, gather=gather)


def sphessian(fn: Fn, wrt: int = 0, *, name: str | None = None) -> SparseNumericalFunction:
  """The upper triangle of the Hessian of a scalar-valued function, as a sparse function returning a CSC array.

  The pattern is structural; a star colouring of the symmetric pattern lets every entry be recovered directly from one
  batched Hessian-vector product over the colour seeds.
  """
  arg = check_wrt(fn, wrt, "sphessian")
  new_name = name if name is not None else f"{fn.name}_sphess"
  with stage(new_name, "derive"):
    probe, out = _probe_output(fn, "sphessian")
    if out.shape != ():
      raise ValueError(f"sphessian({fn.name}): the output has shape {out.shape}; a Hessian needs a scalar output")
    upper = hessian_sparsity(out.uop, [p.uop for p in probe], wrt)
  n = upper.shape[0]
  colors = _or_identity(star_color(sp.csc_array(upper + upper.T)))
  seeds = seed_matrix(colors, n)
  at_row, at_color = star_recovery(upper, colors)
  gather = _gather(at_row, at_color, seeds.shape[0], n)

  def compressed(*xs: Tensor) -> Tensor:
    with stage(new_name, "derive"):
      return _compressed(fn, xs, wrt, seeds, Arg(arg.shape, arg.dtype), hvp_graph, "sphessian")

  return SparseNumericalFunction(new_name, compressed, fn.inputs, upper, device=fn.device, gather=gather)


def _or_identity(colors: NDArray[np.int64]) -> NDArray[np.int64]:
  """The colouring, or one colour per column when compression saves no pass (identity seeds fold to constants)."""
  return np.arange(colors.size) if colors.size and colors.max() + 1 >= colors.size else colors


def _csc_coordinates(pattern: sp.csc_array) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
  """Row and column of every stored entry, in CSC order."""
  cols = np.repeat(np.arange(pattern.shape[1]), np.diff(pattern.indptr))
  return pattern.indices.astype(np.int64), cols
