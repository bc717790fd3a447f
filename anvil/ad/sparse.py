"""Sparse derivatives: structural pattern, colouring, one batched compressed pass, a gather into CSC values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import Tensor, dtypes

from anvil.ad.coloring import color_columns, column_period, seed_matrix, star_color, star_recovery
from anvil.ad.scalar import scalar_route, scalar_sparse
from anvil.ad.sparsity import constant_derivatives, hessian_sparsity, jacobian_sparsity
from anvil.ad.transforms import (
  Fn,
  batched_graph,
  check_wrt,
  hessian_graph,
  hvp_graph,
  jacobian_graph,
  jvp_graph,
  placeholders,
  single_output,
  vjp_graph,
)
from anvil.codegen import Arg, SparseNumericalFunction
from anvil.codegen.build import stage
from anvil.codegen.renderer import UNROLL_LANES
from anvil.codegen.sparse import stored_coordinates

SeedGraph = Callable[[Fn, Sequence[Tensor], int, Tensor, str], Tensor]
Index = NDArray[np.int64]
#: What one batched VJP colour costs in JVP colours, measured on generated code. A chain of masses' multiple-shooting
#: constraints (nx = 21, N = 40, norms: one kernel per reduction) take 2.16 ms through 38 VJP colours and 1.01 ms
#: through 42 JVP colours (2.4x per colour; reverse mode also makes 141 kernels against 116); the cart-pole's (one fused
#: kernel) 10.0 us through 7 VJP colours and 11.3 us through 8 JVP colours (1.0x).
REVERSE_PASS_COST = 2


@dataclass(frozen=True)
class Compression:
  """How a sparse derivative is evaluated: `graph` (a JVP, VJP or HVP) batched over the rows of `seeds`, and where
  each nonzero lands in the flattened result.

  Layout: tinygrad fuses the whole evaluation into one kernel, which recomputes the primal in every loop iteration.
  When one seed's result is small (≤ UNROLL_LANES) it is the unrolled inner axis and the compiler hoists the primal
  out of the loop over colours. Otherwise colours are innermost, and a stage-structured result (`period` entries per
  stage) is shaped (stages, period, colours), so the compiler computes each stage's primal once per stage.
  """

  graph: SeedGraph
  seeds: NDArray[np.float64]
  seed_arg: Arg
  size: int
  period: int

  @property
  def count(self) -> int:
    """Number of colours (seeds)."""
    return int(self.seeds.shape[0])

  @property
  def length(self) -> int:
    """Length of the flattened compressed result."""
    if self.count == 0:
      return 1
    return self.count * (self.size + (-self.size % self.period if self.colours_inner else 0))

  @property
  def colours_inner(self) -> bool:
    """Whether colours are the innermost axis of the layout."""
    return self.size > UNROLL_LANES

  def gather(self, entries: NDArray[np.int64], colors: NDArray[np.int64]) -> NDArray[np.int64]:
    """Index in the flattened result of each nonzero, given its position in a seed's result and its colour."""
    return entries * self.count + colors if self.colours_inner else colors * self.size + entries

  def evaluate(self, fn: Fn, xs: Sequence[Tensor], wrt: int, what: str) -> Tensor:
    """The flattened compressed result at the tensors `xs`."""
    if self.count == 0:
      return Tensor.zeros(1, dtype=self.seed_arg.dtype).contiguous()
    # NOTE: an identity seed is tinygrad's eye, whose zeros fold away at compile time; other seeds are data.
    identity = self.count == self.seeds.shape[1] and np.array_equal(self.seeds, np.eye(self.count))
    values = Tensor.eye(self.count, dtype=self.seed_arg.dtype) if identity else Tensor(self.seeds.astype(np.float64))
    seeds = values.reshape(self.count, *self.seed_arg.shape)
    result = batched_graph(fn, xs, wrt, self.seed_arg, seeds, self.count, self.graph, what).reshape(self.count, -1)
    if not self.colours_inner:
      return result.flatten()
    pad = -self.size % self.period
    stages = result.pad(((0, 0), (0, pad))).reshape(self.count, (self.size + pad) // self.period, self.period)
    return stages.permute(1, 2, 0).flatten()


def _compression(
  graph: SeedGraph, colors: NDArray[np.int64], seed_arg: Arg, entries_pattern: sp.csc_array
) -> Compression:
  """A compression with one seed per colour (`colors` colours the seed's entries); `entries_pattern` has one column
  per entry of a seed's result."""
  size = entries_pattern.shape[1]
  return Compression(graph, seed_matrix(colors, colors.size), seed_arg, size, column_period(entries_pattern))


def _probe_output(fn: Fn, what: str) -> tuple[list[Tensor], Tensor]:
  """The placeholders `fn` is traced on and its single output, checked (scalar for a Hessian)."""
  probe = placeholders(fn.inputs)
  out = single_output(fn, fn.fn(*probe), what)
  if what == "sphessian" and out.shape != ():
    raise ValueError(f"sphessian({fn.name}): the output has shape {out.shape}; a Hessian needs a scalar output")
  return probe, out


def _sparse(
  fn: Fn,
  name: str,
  pattern: sp.csc_array,
  plan: Compression,
  gather: NDArray[np.int64],
  wrt: int,
  what: str,
  constants: NDArray[np.float64] | None = None,
  shift: NDArray[np.float64] | None = None,
) -> SparseNumericalFunction:
  """The sparse function evaluating `plan` (followed by the `constants`, which gather indices past it pick; `shift`
  is added to the gathered values)."""

  def compressed(*xs: Tensor) -> Tensor:
    with stage(name, "derive"):
      values = plan.evaluate(fn, xs, wrt, what)
      # NOTE: the evaluation stays a kernel of its own (its stage-structured loops), the constants copied after it
      return values if constants is None else values.contiguous().cat(Tensor(constants, dtype=values.dtype))

  return SparseNumericalFunction(name, compressed, fn.inputs, pattern, device=fn.device, gather=gather,
                                 gather_shift=shift)  # fmt: skip


def _on_scalars(fn: Fn, name: str, wrt: int, what: str, scalar: bool | None) -> SparseNumericalFunction | None:
  """The sparse derivative derived on `fn`'s scalar expressions (`anvil.ad.scalar`: its pattern and its code), for a
  function of many small tensors (or any CPU function with `scalar`); None where that route does not apply (or with
  `scalar` False). Its `fn` (composing, differentiating again) gathers the entries from tinygrad's dense
  derivative."""
  if scalar is False or not (scalar_route(fn) if scalar is None else fn.device == "CPU"):
    return None
  with stage(name, "derive"):
    outs = fn.outputs  # NOTE: checked on the trace made already; traced again only to word an error
    if len(outs) != 1 or not dtypes.is_float(outs[0].dtype) or (what == "sphessian" and outs[0].shape != ()):
      _probe_output(fn, what)
    found = scalar_sparse(fn, "hessian" if what == "sphessian" else "jacobian", wrt)
  if found is None:
    return None
  pattern, code, constants = found
  rows, cols = stored_coordinates(pattern)
  index = Tensor((rows * pattern.shape[1] + cols).astype(np.int32))
  dense = hessian_graph if what == "sphessian" else jacobian_graph
  derivative = SparseNumericalFunction(name, lambda *xs: dense(fn, xs, wrt, what).flatten()[index], fn.inputs,
                                       pattern, device=fn.device)  # fmt: skip
  derivative.derived, derivative.constant_entries = code, constants
  return derivative


def spjacobian(fn: Fn, wrt: int = 0, *, name: str | None = None, scalar: bool | None = None) -> SparseNumericalFunction:
  """The Jacobian with respect to input `wrt` as a sparse function returning a `scipy.sparse.csc_array`.

  The pattern is structural (from the graph, not from numerical zeros). Entries that are the same at every point
  (linear terms: the identity blocks of multiple-shooting defects) are found at trace time and returned as constants.
  Of the others, rows (or columns, whichever is cheaper: a row colour costs REVERSE_PASS_COST column colours) sharing
  no column (row) are coloured together; one batched VJP (JVP) over the colour seeds evaluates the compressed
  Jacobian and a generated gather scatters it into the CSC values. A function of many small tensors (written as a
  loop over stages) is differentiated on its scalar expressions instead (`anvil.ad.scalar`), its entries emitted as
  straight-line code. `scalar` chooses the route: True (on the scalar expressions, where the lowering supports the
  graph: small functions called many times, e.g. an ODE inside an integrator loop), False (tinygrad's), None
  (automatic).

  Example:
    >>> dg = spjacobian(g)              # dg(w, p) -> csc_array of shape (g size, w size)
  """
  arg = check_wrt(fn, wrt, "spjacobian")
  new_name = name if name is not None else f"{fn.name}_spjac"
  if (on_scalars := _on_scalars(fn, new_name, wrt, "spjacobian", scalar)) is not None:
    return on_scalars
  with stage(new_name, "derive"):
    probe, out = _probe_output(fn, "spjacobian")
    pattern = jacobian_sparsity([out.uop], [p.uop for p in probe], wrt)
    rows, cols = stored_coordinates(pattern)
    constant = _constant_entries(probe, out, wrt, pattern, rows, cols)
  # NOTE: entries that are the same at every point (identity blocks of defects, linear constraints) are constants of
  # the generated code; only the others are coloured and evaluated.
  varying = np.isnan(constant)
  evaluated = sp.csc_array((np.ones(int(varying.sum())), (rows[varying], cols[varying])), shape=pattern.shape)
  evaluated.sort_indices()
  plan, position = _jacobian_plan(evaluated, out, arg)
  fixed = ~varying
  gather = np.empty(rows.size, np.int64)
  gather[varying] = position(rows[varying], cols[varying])
  gather[fixed] = plan.length + np.arange(int(fixed.sum()))
  if fixed.any():
    # NOTE: the seeds still carry the constant entries' columns (rows), whose contributions add into the compressed
    # values of the varying entries sharing a colour with them: the gather takes them off again
    added = np.zeros(plan.length)
    np.add.at(added, position(rows[fixed], cols[fixed]), constant[fixed])
    shift = np.zeros(rows.size)
    shift[varying] = -added[gather[varying]]
    shifts = shift if shift.any() else None
    derivative = _sparse(fn, new_name, pattern, plan, gather, wrt, "spjacobian", constant[fixed], shifts)
  else:
    derivative = _sparse(fn, new_name, pattern, plan, gather, wrt, "spjacobian")
  derivative.constant_entries = constant
  return derivative


def constant_jacobian(fn: Fn, wrt: int = 0) -> NDArray[np.float64] | None:
  """The dense Jacobian of `fn`'s single output (flattened) with respect to input `wrt` when it is the same at every
  point (the output is affine in that input, e.g. a tracking residual x - x_ref), found at trace time without running
  anything; None when it depends on the point.

  Example:
    >>> r = NumericalFunction("r", lambda x, ref: (x - ref) * 2.0, (Arg(2), Arg(2)))
    >>> constant_jacobian(r, 0)     # array([[2., 0.], [0., 2.]])
  """
  arg = check_wrt(fn, wrt, "constant_jacobian")
  probe, out = _probe_output(fn, "constant_jacobian")
  values = constant_derivatives([out.uop], [p.uop for p in probe], wrt, np.eye(arg.size))
  return None if np.isnan(values).any() else values


def _constant_entries(
  probe: Sequence[Tensor], out: Tensor, wrt: int, pattern: sp.csc_array, rows: Index, cols: Index
) -> NDArray[np.float64]:
  """Each stored entry's value where it is the same at every point, else NaN (one trace-time forward pass seeded by
  a column colouring, so every row meets each colour in at most one of its columns)."""
  colors = color_columns(pattern)
  if colors.size == 0 or rows.size == 0:
    return np.full(rows.size, np.nan)
  seeds = seed_matrix(colors, colors.size)
  values = constant_derivatives([out.uop], [p.uop for p in probe], wrt, seeds)
  return values[rows, colors[cols]]


def _jacobian_plan(
  evaluated: sp.csc_array, out: Tensor, arg: Arg
) -> tuple[Compression, Callable[[Index, Index], Index]]:
  """The compression of the entries of `evaluated` (JVP over column colours or VJP over row colours, whichever is
  cheaper) and where an entry (row, column) of the Jacobian lands in its flattened result."""
  if evaluated.nnz == 0:  # NOTE: every entry is constant: nothing to evaluate
    nothing = Compression(jvp_graph, np.zeros((0, evaluated.shape[1])), Arg(arg.shape, arg.dtype), 0, 1)
    return nothing, lambda rows, cols: np.zeros(rows.size, np.int64)
  col_colors = _or_identity(color_columns(evaluated))
  row_colors = _or_identity(color_columns(sp.csc_array(evaluated.T)))
  # NOTE: a pass of reverse mode costs REVERSE_PASS_COST forward passes: the VJP wins only with that many times fewer
  # colours.
  if col_colors.size == 0 or (row_colors.size and REVERSE_PASS_COST * (row_colors.max() + 1) <= col_colors.max() + 1):
    plan = _compression(vjp_graph, row_colors, Arg(tuple(int(d) for d in out.shape), out.dtype), evaluated)
    return plan, lambda rows, cols: plan.gather(cols, row_colors[rows])
  plan = _compression(jvp_graph, col_colors, Arg(arg.shape, arg.dtype), sp.csc_array(evaluated.T))
  return plan, lambda rows, cols: plan.gather(rows, col_colors[cols])


def sphessian(fn: Fn, wrt: int = 0, *, name: str | None = None, scalar: bool | None = None) -> SparseNumericalFunction:
  """The upper triangle of the Hessian of a scalar-valued function, as a sparse function returning a CSC array.

  The pattern is structural; a star colouring of the symmetric pattern lets every entry be recovered directly from one
  batched Hessian-vector product over the colour seeds (a function of many small tensors: forward over reverse mode on
  its scalar expressions, `anvil.ad.scalar`; `scalar` chooses the route as in `spjacobian`).
  """
  arg = check_wrt(fn, wrt, "sphessian")
  new_name = name if name is not None else f"{fn.name}_sphess"
  if (on_scalars := _on_scalars(fn, new_name, wrt, "sphessian", scalar)) is not None:
    return on_scalars
  with stage(new_name, "derive"):
    probe, out = _probe_output(fn, "sphessian")
    upper = hessian_sparsity(out.uop, [p.uop for p in probe], wrt)
  full = sp.csc_array(upper + upper.T)
  colors = _or_identity(star_color(full))
  plan = _compression(hvp_graph, colors, Arg(arg.shape, arg.dtype), full)
  at_row, at_color = star_recovery(upper, colors)
  return _sparse(fn, new_name, upper, plan, plan.gather(at_row, at_color), wrt, "sphessian")


def _or_identity(colors: NDArray[np.int64]) -> NDArray[np.int64]:
  """The colouring, or one colour per column when compression saves no pass (identity seeds fold to constants)."""
  return np.arange(colors.size) if colors.size and colors.max() + 1 >= colors.size else colors
