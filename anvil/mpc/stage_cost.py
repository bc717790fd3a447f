"""The derivatives of a multiple-shooting NLP's cost, stage by stage: its gradient, and its Hessian (Gauss-Newton
blocks of least-squares costs, or the exact Hessian of any cost).

Traced over the horizon, the derivatives of N stages are a vmap of the stage cost's: batched tinygrad kernels that
recompute the cost's whole computation (a robot's kinematics and SE(3) logarithm) per seed or per color: for a robot's
reaching cost, half of each Gauss-Newton SQP iteration and much of the cold build. Here one function of one stage's
[x; u] (and p, and the run-time weight W of a least-squares cost) gives the stage's part, derived on its scalar
expressions (straight-line code): the gradient of the stage cost (rᵀ W r for a LeastSquares), `anvil.ad.gauss_newton` of
the residual (Jᵀ (W + Wᵀ) J, dense on the coordinates it uses), or the sparse Hessian of the cost. A C++ loop calls it
stage after stage and puts each part in its place with the input rate's (the rate's cost is quadratic: its constant
block, its gradient from u - u_prev); then the terminal cost's part and the slacks' (l1 + 2 l2 s, 2 l2).

`StageCostGradient` has the C++ interface of a NumericalFunction of (w, params) (the SQP solver's cost gradient);
`StageCostHessian` that of a SparseNumericalFunction of (w, params, sigma, lam), sigma times the Hessian's upper
triangle: the SQP solver calls it as its Hessian (Gauss-Newton), or a stage-wise Lagrangian Hessian adds it to the
constraints' curvature (exact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.ad import SparsityError, gauss_newton, gradient, sphessian
from anvil.ad.sparsity import jacobian_sparsity
from anvil.ad.transforms import placeholders
from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.base import FunctionBase, render_template
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.precision import SCALARS, cpp_real, in_precision
from anvil.codegen.sparse import entry_positions, stored_coordinates
from anvil.codegen.templated import TemplatedFunction, module_library
from anvil.mpc.costs import LeastSquares
from anvil.mpc.native import native_call

#: The Hessians a stage's block can be: Gauss-Newton (least-squares costs) or exact.
KINDS = ("gauss_newton", "exact")


@dataclass(frozen=True)
class StagePlace:
  """Where a stage's values sit in the NLP: N stages of `stride` entries of w, each its states (`states`, the model's
  `nx` first) then its `nu` inputs; p_k at `p_offset` + k np in the parameter; x_N after the stages."""

  N: int
  stride: int
  states: int
  nx: int
  nu: int
  np: int
  p_offset: int


@dataclass(frozen=True)
class StagePart:
  """A generated function of one stage's z = [x; u] (or of x_N), then of p where `takes_p`, then of the least-squares
  weight W where `takes_weight`: what a stage-wise cost derivative calls at every stage."""

  fn: FunctionBase
  takes_p: bool
  takes_weight: bool

  @staticmethod
  def gradient_of(cost: Any, name: str, takes_p: bool, nx: int, size: int, scalar: str) -> StagePart:
    """The gradient of `cost` (a LeastSquares or a NumericalFunction) on z = [x; u] of `size` entries (x_N alone:
    `size` = nx), in `scalar`, as straight-line code (as the ODE's derivatives are)."""
    value = cost_value(cost, name, takes_p, nx, size, scalar)
    return StagePart(gradient(value, 0, name=f"{name}_gradient", scalar=True), takes_p, isinstance(cost, LeastSquares))

  def arguments(self, p_at: str, weight_at: int) -> tuple[str, ...]:
    """The C++ offsets into the NLP parameter of the inputs after z: p at `p_at`, then W at `weight_at`."""
    return (*([p_at] if self.takes_p else []), *([str(weight_at)] if self.takes_weight else []))


@dataclass(frozen=True)
class Block(StagePart):
  """One stage's (or the terminal) Hessian block: a StagePart with `size` output values; `entries` {(i, j): e}: the
  upper entries (i <= j, in z's coordinates) that are not structurally zero, each with the output value e holding
  it."""

  size: int
  entries: dict[tuple[int, int], int]

  @staticmethod
  def of(cost: Any, kind: str, name: str, takes_p: bool, nx: int, size: int, scalar: str) -> Block:
    """The Hessian block of `cost` (a LeastSquares, or for `kind` "exact" a NumericalFunction) on z = [x; u] of
    `size` entries (x_N alone: `size` = nx), in `scalar`."""
    if kind not in KINDS:
      raise ValueError(f"{name}: kind must be one of {KINDS}, got {kind!r}")
    if kind == "gauss_newton":
      stacked = on_z(cost.residual, name, takes_p, nx, size, scalar)
      block = gauss_newton(stacked, 0, weight_pattern=cost.pattern, name=f"{name}_gauss_newton", scalar=True)
      used = _gauss_newton_pattern(stacked)
      entries = {(i, j): i * size + j for i in range(size) for j in range(i, size) if used[i, j]}
      return Block(block, takes_p, True, size * size, entries)
    value = cost_value(cost, name, takes_p, nx, size, scalar)
    hessian = sphessian(value, 0, name=f"{name}_hessian", scalar=True)
    rows, cols = stored_coordinates(hessian)
    entries = {(int(i), int(j)): e for e, (i, j) in enumerate(zip(rows, cols, strict=True))}
    return Block(hessian, takes_p, isinstance(cost, LeastSquares), hessian.nnz, entries)


def on_z(fn: NumericalFunction[..., Any], name: str, takes_p: bool, nx: int, size: int, scalar: str
         ) -> NumericalFunction[..., Any]:  # fmt: skip
  """`fn` of (x, u[, p]) (or of (x_N[, p]) when `size` = nx) as a function of the stacked z = [x; u] (and p), in
  `scalar`, named `name`_on_z."""
  fn = in_precision(fn, scalar)
  dtype = SCALARS[scalar]
  p_args = tuple(Arg(a.size, dtype=dtype, name="p") for a in fn.inputs[-1:] if takes_p)
  body: Callable[..., Tensor] = (lambda z, *p: fn.fn(z[:nx], z[nx:], *p)) if size > nx else fn.fn
  return NumericalFunction(f"{name}_on_z", body, (Arg(size, dtype=dtype, name="z"), *p_args))


def cost_value(cost: Any, name: str, takes_p: bool, nx: int, size: int, scalar: str) -> NumericalFunction[..., Any]:
  """The stage (or terminal) cost as a scalar function of (z[, p]), and of the run-time weight W (last) for a
  LeastSquares: rᵀ W r, W read on its pattern alone."""
  if not isinstance(cost, LeastSquares):
    fn = on_z(cost, name, takes_p, nx, size, scalar)
    return NumericalFunction(f"{name}_cost", lambda *xs: fn.fn(*xs).reshape(()), fn.inputs)
  residual = on_z(cost.residual, name, takes_p, nx, size, scalar)
  nr, mask = residual.outputs[0].size, Tensor(cost.pattern.astype(np.float64))
  weighted = lambda r, W: (r * ((W * mask).cast(r.dtype) @ r)).sum()
  args = (*residual.inputs, Arg((nr, nr), dtype=SCALARS[scalar], name="W"))
  return NumericalFunction(f"{name}_cost", lambda *xs: weighted(residual.fn(*xs[:-1]), xs[-1]), args)


def _gauss_newton_pattern(residual: NumericalFunction[..., Any]) -> NDArray[np.bool_]:
  """Where Jᵀ (W + Wᵀ) J is stored: dense on the coordinates J's structural pattern uses (every one where it cannot be
  told). Not sparser through W's pattern: the QP solvers' factorizations follow the stored pattern, and the closed
  loops tested through OSQP were tuned on these dense blocks (a sparser one changes their rounding, and the bicycle's
  nonconvex OSQP loop then ends elsewhere)."""
  probe = placeholders(residual.inputs)
  try:
    J = jacobian_sparsity([residual.fn(*probe).uop], [p.uop for p in probe], 0).toarray()
  except SparsityError:
    return np.ones((residual.inputs[0].size,) * 2, bool)
  used = J.any(axis=0)
  return np.outer(used, used)


#: The stage functions a stage-wise cost derivative calls: Hessian blocks, or plain StageParts (gradients).
Part = TypeVar("Part", bound=StagePart)


@dataclass(frozen=True)
class _StageContext:
  """What the templates of both derivatives need: names, sizes, where the stages sit, the stage's and the terminal
  functions and the offsets in the NLP parameter of their inputs after z (C++ expressions)."""

  name: str
  real: str
  inputs: tuple[int, ...]
  N: int
  stride: int
  states: int
  nx_model: int
  nu: int
  nz_model: int
  stage: str
  stage_args: tuple[str, ...]
  final: str
  final_args: tuple[str, ...]
  l2: int


class _StageCost(TemplatedFunction, Generic[Part]):
  """What both stage-wise cost derivatives share: their stage's and terminal functions (`final` None: no terminal
  cost), where the stages and the weights sit, the context's common fields, their JIT library and native call."""

  def __init__(
    self, name: str, inputs: tuple[Arg, ...], stage: Part, final: Part | None, place: StagePlace,
    weights: dict[str, int], scalar: str,
  ) -> None:  # fmt: skip
    self.name, self.inputs, self.place, self.scalar = name, inputs, place, scalar
    self.stage, self.final, self.weights = stage, final, weights
    self._lock = owned_lock(self)

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The stage functions this one calls."""
    return (self.stage.fn, *(() if self.final is None else (self.final.fn,)))

  def _weight(self, key: str) -> int:
    """The offset of a run-time weight or penalty in the NLP parameter (0 where there is none: never read)."""
    return self.weights.get(key, 0)

  def _common(self) -> dict[str, Any]:
    """The `_StageContext` fields."""
    place, stage, final = self.place, self.stage, self.final
    return dict(
      name=self.name, real=cpp_real(self.scalar), inputs=tuple(a.size for a in self.inputs), N=place.N,
      stride=place.stride, states=place.states, nx_model=place.nx, nu=place.nu, nz_model=place.nx + place.nu,
      stage=stage.fn.name,
      stage_args=stage.arguments(f"{place.p_offset} + k * {place.np}", self._weight("stage_weight")),
      final="" if final is None else final.fn.name,
      final_args=() if final is None else final.arguments(f"{place.p_offset} + {place.N * place.np}",
                                                          self._weight("terminal_weight")),
      l2=self._weight("l2"),
    )  # fmt: skip

  @cached_property
  def library(self) -> str:
    """Path of the compiled JIT library, with the stage-wise functions' entry points (inputs, then the output)."""
    folder = Path(__file__).parent / "templates"
    entry_points = lambda module: render_template("stagewise_jit.cpp.j2", folder=folder, c=self.context, module=module)
    return module_library(self, entry_points)

  def _native(self, args: tuple[Any, ...], size: int) -> NDArray[np.float64]:
    """The output (`size` values) at numpy inputs shaped as `inputs`, thread-safe."""
    return native_call(self, args, size, self.scalar, self._lock)


@dataclass(frozen=True)
class _Context(_StageContext):
  """What the Hessian's templates need besides: its size, the blocks' sizes and the scatter tables."""

  nnz: int
  stage_size: int
  final_size: int
  stage_step: int
  stage_to_out: tuple[int, ...]
  stage_from: tuple[int, ...]
  rate: tuple[float, ...]
  final_to_out: tuple[int, ...]
  final_from: tuple[int, ...]
  slack_to_out: tuple[int, ...]


class StageCostHessian(_StageCost[Block]):
  """The upper triangle of sigma (blockdiag(B_k + R, B_N) + diag(2 l2)) (module docstring): B_k stage k's block of
  `stage`, R the input rate's constant block `rate` (nz x nz in a stage's coordinates, or None), B_N the terminal
  block of `final`, the weights W, W_N and the penalties l2 read from the NLP parameter at `weights` ("stage_weight",
  "terminal_weight", "l2": offsets).

  Args:
    name: the function's name.
    inputs: the Args of (w, params, sigma, lam).
    stage, final: the stage's and the terminal blocks (final None: none).
    place: where the stages sit.
    rate: R, or None.
    weights: offsets in the NLP parameter.
    slacks: the slacks' columns (each stores 2 l2).
    scalar: "float64" or "float32".

  Attributes (those of a SparseNumericalFunction the SQP solver reads): shape, indices, indptr, nnz, inputs,
  constant_entries (None).
  """

  template = "cost_hessian"
  constant_entries = None

  def __init__(
    self, name: str, inputs: tuple[Arg, ...], stage: Block, final: Block | None, place: StagePlace,
    rate: NDArray[np.float64] | None, weights: dict[str, int], slacks: NDArray[np.int64], scalar: str,
  ) -> None:  # fmt: skip
    super().__init__(name, inputs, stage, final, place, weights, scalar)
    nw = inputs[0].size
    stage_pairs, final_pairs = self._stage_pairs(rate), self._final_pairs()
    start = place.N * place.stride
    rows = [i + k * place.stride for k in range(place.N) for i, _ in stage_pairs] + [start + i for i, _ in final_pairs]
    cols = [j + k * place.stride for k in range(place.N) for _, j in stage_pairs] + [start + j for _, j in final_pairs]
    rows, cols = rows + slacks.tolist(), cols + slacks.tolist()
    pattern = sp.csc_array((np.ones(len(rows)), (rows, cols)), shape=(nw, nw))
    pattern.sort_indices()
    self.shape: tuple[int, int] = (nw, nw)
    self.indices, self.indptr = pattern.indices.astype(np.int64), pattern.indptr.astype(np.int64)
    self._tables = self._scatter(pattern, stage_pairs, final_pairs, rate, slacks, start)

  def _model(self, i: int) -> int:
    """A stage's coordinate i in z = [x; u] (the model's states, then the inputs), -1 for a previous input."""
    place = self.place
    return i if i < place.nx else i - (place.states - place.nx) if i >= place.states else -1

  def _stage_pairs(self, rate: NDArray[np.float64] | None) -> list[tuple[int, int]]:
    """The upper entries (i, j) of a stage's block in its w coordinates: the block's and the rate's, column-major."""
    place, block = self.place, self.stage
    stage = lambda i: i if i < place.nx else i + place.states - place.nx
    found = {(stage(i), stage(j)) for i, j in block.entries}
    if rate is not None:
      found |= {(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(rate)), strict=True)}
    return sorted(found, key=lambda e: (e[1], e[0]))

  def _final_pairs(self) -> list[tuple[int, int]]:
    """The upper entries of the terminal block, column-major (none without one)."""
    found = set() if self.final is None else set(self.final.entries)
    return sorted(found, key=lambda e: (e[1], e[0]))

  def _scatter(
    self, pattern: sp.csc_array, stage_pairs: list[tuple[int, int]], final_pairs: list[tuple[int, int]],
    rate: NDArray[np.float64] | None, slacks: NDArray[np.int64], start: int,
  ) -> dict[str, Any]:  # fmt: skip
    """Where each block entry goes in the output and which value of its block's function it reads (the tables)."""
    place = self.place
    positions = lambda pairs, at: entry_positions(pattern, [at + i for i, _ in pairs], [at + j for _, j in pairs])
    stage_to_out = np.stack([positions(stage_pairs, k * place.stride) for k in range(place.N)])
    steps = np.diff(stage_to_out, axis=0)
    if steps.size and not np.all(steps == steps[0, 0]):
      raise ValueError(f"{self.name}: the stages' blocks must sit at a fixed stride in the pattern")
    stage_values = self.stage.entries
    final_values = {} if self.final is None else self.final.entries
    stage_from = lambda i, j: stage_values.get((self._model(i), self._model(j)), -1)
    return {
      "stage_step": int(steps[0, 0]) if steps.size else 0,
      "stage_to_out": tuple(int(v) for v in stage_to_out[0]),
      "stage_from": tuple(stage_from(i, j) for i, j in stage_pairs),
      "rate": tuple(float(rate[i, j]) if rate is not None else 0.0 for i, j in stage_pairs),
      "final_to_out": tuple(int(v) for v in positions(final_pairs, start)),
      "final_from": tuple(final_values.get((i, j), -1) for i, j in final_pairs),
      "slack_to_out": tuple(int(v) for v in entry_positions(pattern, slacks, slacks)),
    }

  @property
  def nnz(self) -> int:
    """Stored entries."""
    return int(self.indptr[-1])

  @cached_property
  def context(self) -> _Context:
    """Names, sizes, where the stages and weights sit, and the scatter tables."""
    final = self.final
    return _Context(**self._common(), nnz=self.nnz, stage_size=self.stage.size,
                    final_size=0 if final is None else final.size, **self._tables)  # fmt: skip

  def __call__(self, *args: Any) -> sp.csc_array:
    """Evaluate in this process at numpy inputs shaped as `inputs` (a csc_array); thread-safe."""
    return sp.csc_array((self._native(args, self.nnz), self.indices, self.indptr), shape=self.shape)


@dataclass(frozen=True)
class _GradientContext(_StageContext):
  """What the gradient's templates need besides: its size, the input rate's weight, where the slacks sit."""

  size: int
  rate: tuple[float, ...]
  slacks: int
  ns: int
  l1: int


class StageCostGradient(_StageCost[StagePart]):
  """The gradient of the NLP's cost (module docstring) at (w, params): each stage's cost's gradient in its [x; u] from
  `stage` (a function of (z[, p][, W])), plus the input rate's 2 W_r (u - u_prev) (in u, and its negative in u_prev),
  the terminal cost's from `final`, and each slack's l1 + 2 l2 s; the weights and penalties from the NLP parameter at
  `weights` ("stage_weight", "terminal_weight", "l1", "l2": offsets). Its output has the size of w.

  Args:
    name: the function's name.
    inputs: the Args of (w, params).
    stage, final: the stage cost's and the terminal cost's gradients (final None: no terminal cost).
    place: where the stages sit.
    rate: W_r (nu x nu) of the input rate's cost, or None.
    weights: offsets in the NLP parameter.
    slacks: the first slack's index in w, and the number of slacks.
    scalar: "float64" or "float32".
  """

  template = "cost_gradient"

  def __init__(
    self, name: str, inputs: tuple[Arg, ...], stage: StagePart, final: StagePart | None, place: StagePlace,
    rate: NDArray[np.float64] | None, weights: dict[str, int], slacks: tuple[int, int], scalar: str,
  ) -> None:  # fmt: skip
    super().__init__(name, inputs, stage, final, place, weights, scalar)
    self.rate, self.slacks = rate, slacks

  @property
  def size(self) -> int:
    """The output's length: w's."""
    return self.inputs[0].size

  @cached_property
  def context(self) -> _GradientContext:
    """Names, sizes, where the stages and weights sit, the rate's weight."""
    rate = () if self.rate is None else tuple(float(v) for v in self.rate.ravel())
    return _GradientContext(**self._common(), size=self.size, rate=rate, slacks=self.slacks[0], ns=self.slacks[1],
                            l1=self._weight("l1"))  # fmt: skip

  def __call__(self, *args: Any) -> NDArray[np.float64]:
    """Evaluate in this process at numpy inputs shaped as `inputs`; thread-safe."""
    return self._native(args, self.size)
