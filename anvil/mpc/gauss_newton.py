"""The Gauss-Newton Hessian of a multiple-shooting NLP's least-squares costs, stage by stage.

Traced over the horizon, the blocks J_kᵀ (W + Wᵀ) J_k of N stages are a vmap of the residual's Jacobian: batched
tinygrad kernels that recompute the residual's whole computation (a robot's kinematics and SE(3) logarithm) per seed
(the panda reaching MPC of benchmarks/bench_robot_mpc.py spent half of each SQP iteration there). Here one function of
one stage, `anvil.ad.gauss_newton` of the residual on the stage's [x; u] (derived on its scalar expressions:
straight-line code holding only the products of entries of J and W that are not structurally zero), is called stage
after stage by a C++ loop, which scatters each block into the NLP's pattern and adds the input rate's constant block;
then the terminal residual's block and the slacks' 2 l2, all times sigma. Its C++ interface is a
SparseNumericalFunction's of (w, params, sigma, lam), so the SQP solver calls it as its Hessian.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from anvil.ad import gauss_newton
from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.base import FunctionBase, render_template
from anvil.codegen.precision import SCALARS, cpp_real, in_precision
from anvil.codegen.sparse import entry_positions
from anvil.codegen.templated import TemplatedFunction, module_library
from anvil.mpc.costs import LeastSquares
from anvil.mpc.stagewise import native_call


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
class _Context:
  """What the templates need."""

  name: str
  real: str
  inputs: tuple[int, ...]
  nnz: int
  N: int
  stride: int
  states: int
  nx_model: int
  nu: int
  nz_model: int
  np: int
  p_offset: int
  stage: str
  stage_takes_p: bool
  stage_weight: int
  final: str
  final_takes_p: bool
  terminal_weight: int
  l2: int
  stage_step: int
  stage_to_out: tuple[int, ...]
  stage_from: tuple[int, ...]
  rate: tuple[float, ...]
  final_to_out: tuple[int, ...]
  final_from: tuple[int, ...]
  slack_to_out: tuple[int, ...]


class StageGaussNewton(TemplatedFunction):
  """The upper triangle of sigma (blockdiag(J_kᵀ (W + Wᵀ) J_k + R, J_Nᵀ (W_N + W_Nᵀ) J_N) + diag(2 l2)) on the CSC
  `pattern` (module docstring): R the input rate's constant block `rate` (nz x nz in a stage's coordinates, or None),
  W, W_N and l2 read from the NLP parameter at `weights` ("stage_weight", "terminal_weight", "l2": offsets).

  Args:
    name: the function's name.
    inputs: the Args of (w, params, sigma, lam).
    pattern: the output's CSC pattern (upper triangle, n x n), holding every entry written.
    stage, final: the stage's and the terminal LeastSquares (final None: none).
    takes_p: whether each residual takes p (stage, terminal).
    place: where the stages sit.
    used: the coordinates of a stage's w and of x_N whose rows and columns the blocks fill.
    rate: R, or None.
    weights: offsets in the NLP parameter.
    slacks: the slacks' columns.
    scalar: "float64" or "float32".

  Attributes (those of a SparseNumericalFunction the SQP solver reads): shape, indices, indptr, nnz, inputs,
  constant_entries (None).
  """

  template = "gauss_newton"
  constant_entries = None

  def __init__(
    self, name: str, inputs: tuple[Arg, ...], pattern: sp.csc_array, stage: LeastSquares, final: LeastSquares | None,
    takes_p: tuple[bool, bool], place: StagePlace, used: tuple[NDArray[np.bool_], NDArray[np.bool_]],
    rate: NDArray[np.float64] | None, weights: dict[str, int], slacks: NDArray[np.int64], scalar: str,
  ) -> None:  # fmt: skip
    self.name, self.inputs, self.place, self.scalar = name, inputs, place, scalar
    self.shape: tuple[int, int] = (int(pattern.shape[0]), int(pattern.shape[1]))
    self.indices, self.indptr = pattern.indices.astype(np.int64), pattern.indptr.astype(np.int64)
    self.takes_p, self.weights = takes_p, weights
    self.stage_block = self._block(stage, f"{name}_stage", takes_p[0], place.nx + place.nu)
    self.final_block = None if final is None else self._block(final, f"{name}_terminal", takes_p[1], place.nx)
    self._tables = self._scatter(pattern, used, rate, slacks)
    self._lock = threading.Lock()

  def _block(self, cost: LeastSquares, name: str, takes_p: bool, size: int) -> NumericalFunction[..., Any]:
    """gauss_newton of the cost's residual on the stacked [x; u] (or x_N), in the NLP's scalar."""
    residual, nx = in_precision(cost.residual, self.scalar), self.place.nx
    dtype = SCALARS[self.scalar]
    p_args = tuple(Arg(a.size, dtype=dtype, name="p") for a in residual.inputs[-1:] if takes_p)
    on_z = (lambda z, *p: residual.fn(z[:nx], z[nx:], *p)) if size > nx else residual.fn
    stacked = NumericalFunction(f"{name}_residual", on_z, (Arg(size, dtype=dtype, name="z"), *p_args))
    return gauss_newton(stacked, 0, weight_pattern=cost.pattern, name=f"{name}_gauss_newton", scalar=True)

  def _scatter(
    self, pattern: sp.csc_array, used: tuple[NDArray[np.bool_], NDArray[np.bool_]], rate: NDArray[np.float64] | None,
    slacks: NDArray[np.int64],
  ) -> dict[str, Any]:  # fmt: skip
    """Where each block entry goes in the output and what it reads (the template's tables)."""
    place = self.place
    nz, nz_model = place.states + place.nu, place.nx + place.nu
    model = lambda i: i if i < place.nx else i - (place.states - place.nx) if i >= place.states else -1
    pairs, final_pairs = _upper_pairs(used[0]), _upper_pairs(used[1])
    rows, cols = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    stage_to_out = np.stack([entry_positions(pattern, rows + k * nz, cols + k * nz) for k in range(place.N)])
    steps = np.diff(stage_to_out, axis=0)
    if steps.size and not np.all(steps == steps[0, 0]):
      raise ValueError(f"{self.name}: the stages' blocks must sit at a fixed stride in the pattern")
    read = lambda i, j, n: model(i) * n + model(j) if model(i) >= 0 and model(j) >= 0 else -1
    start = place.N * nz
    final = np.array(final_pairs if self.final_block else [], dtype=np.int64).reshape(-1, 2).T + start
    final_to_out = entry_positions(pattern, final[0], final[1])
    nx_model = place.nx
    return {
      "stage_step": int(steps[0, 0]) if steps.size else 0,
      "stage_to_out": tuple(int(v) for v in stage_to_out[0]),
      "stage_from": tuple(read(i, j, nz_model) for i, j in pairs),
      "rate": tuple(float(rate[i, j]) if rate is not None else 0.0 for i, j in pairs),
      "final_to_out": tuple(int(v) for v in final_to_out),
      "final_from": tuple(i * nx_model + j if j < nx_model else -1 for i, j in final_pairs) if self.final_block else (),
      "slack_to_out": tuple(int(v) for v in entry_positions(pattern, slacks, slacks)),
    }

  @property
  def nnz(self) -> int:
    """Stored entries."""
    return int(self.indptr[-1])

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The blocks' functions this one calls."""
    return (self.stage_block, *(() if self.final_block is None else (self.final_block,)))

  @cached_property
  def context(self) -> _Context:
    """Names, sizes, where the stages and weights sit, and the scatter tables."""
    place = self.place
    return _Context(
      name=self.name, real=cpp_real(self.scalar), inputs=tuple(a.size for a in self.inputs), nnz=self.nnz, N=place.N,
      stride=place.stride, states=place.states, nx_model=place.nx, nu=place.nu, nz_model=place.nx + place.nu,
      np=place.np, p_offset=place.p_offset, stage=self.stage_block.name, stage_takes_p=self.takes_p[0],
      stage_weight=self.weights.get("stage_weight", 0),
      final="" if self.final_block is None else self.final_block.name, final_takes_p=self.takes_p[1],
      terminal_weight=self.weights.get("terminal_weight", 0), l2=self.weights.get("l2", 0), **self._tables,
    )  # fmt: skip

  @cached_property
  def library(self) -> str:
    """Path of the compiled JIT library, with the stage-wise functions' entry points (inputs, then the output)."""
    folder = Path(__file__).parent / "templates"
    entry_points = lambda module: render_template("stagewise_jit.cpp.j2", folder=folder, c=self.context, module=module)
    return module_library(self, entry_points)

  def __call__(self, *args: Any) -> sp.csc_array:
    """Evaluate in this process at numpy inputs shaped as `inputs` (a csc_array); thread-safe."""
    values = native_call(self, args, self.nnz, self.scalar, self._lock)
    return sp.csc_array((values, self.indices, self.indptr), shape=self.shape)


def _upper_pairs(used: NDArray[np.bool_]) -> list[tuple[int, int]]:
  """The (row, column) pairs of the upper triangle on the `used` coordinates, column by column."""
  return [(i, j) for j in map(int, np.flatnonzero(used)) for i in map(int, np.flatnonzero(used[: j + 1]))]
