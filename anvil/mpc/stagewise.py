"""Stage-wise derivatives of a multiple-shooting NLP whose dynamics are a Runge-Kutta integrator (`rk4`, `irk`).

Differentiating the NLP as one traced graph unrolls every integration step of every stage into the derivative's code
(an RK4 step of 4 substeps is 16 ODE evaluations, each differentiated in place): the code, its build and its
evaluation then grow with the steps and with the model far faster than the ODE does. With dynamics made by `rk4`
(an `ExplicitIntegrator`), an MPC instead generates three small functions of the ODE alone, its rate, its sparse
Jacobian and the sparse Hessian of mu'f (anvil.mpc.ode), and the C++ runtime anvil/explicit_rk.hpp computes the exact
derivatives of the discrete step from them, stage point by stage point, in a loop (forward sensitivities for
dF/d[x; u], the second-order adjoint for the Hessian of lam'F). Dynamics made by `irk` (an `ImplicitIntegrator`, which
no traced graph can hold: its step is Newton's method) go the same way through anvil/implicit_rk.hpp.

`StageDerivative` is the NLP's constraint Jacobian or Lagrangian Hessian built that way: every term but the dynamics
from a sparse derivative of the NLP with the dynamics left out (`rest`, derived as any function is), the dynamics'
blocks -dF/d[x_k; u_k] and -d^2(lam_k'F) stage by stage, both scattered into one CSC pattern (their union).
`StageConstraints` is the NLP's g the same way (the rest minus F on the defect rows, F stepped from the ODE's rate),
so no function of the controller unrolls the integration steps. Both have the C++ interface of a
(Sparse)NumericalFunction (namespace, IN/OUT types, WS_t, init_ws, call), so the SQP solver calls them as it calls
any function, and both are callable from Python (a `scipy.sparse.csc_array`, a numpy array).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import dtypes

from anvil.codegen import NumericalFunction, SparseNumericalFunction
from anvil.codegen.base import FunctionBase
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.precision import cpp_real
from anvil.codegen.runtime import runtime_include
from anvil.codegen.sparse import entry_positions, stored_coordinates
from anvil.codegen.templated import TemplatedFunction
from anvil.mpc.native import native_call
from anvil.mpc.ode import OdeContext, OdeDerivatives
from anvil.mpc.stage_cost import StageCostHessian

KINDS = ("jacobian", "hessian")


@dataclass(frozen=True)
class _Context:
  """What the stage-wise templates need."""

  name: str
  kind: str
  inputs: tuple[int, ...]
  size: int
  rest: str
  rest_size: int
  nx: int
  nu: int
  np: int
  N: int
  stride: int
  p_offset: int
  lam_offset: int
  states: int
  sources: tuple[int, ...]
  z_scale: tuple[float, ...]
  row_scale: tuple[float, ...]
  terms: tuple[str, ...]
  tables: tuple[tuple[str, tuple[int, ...]], ...]
  real: str
  ode: OdeContext
  keeps_steps: bool


class _StageWise(TemplatedFunction):
  """What the stage-wise functions share: `rest` (the same function of the NLP without its dynamics), the ODE's
  functions, where the stages sit, the templates (`kind` picks the part), the method's and the ODE's tables, and a
  thread-safe native call.

  The NLP's w holds stage k's [x_k; u_k] at k * stride, its params p_k at p_offset + k * np, its g the defects
  x_{k+1} - F(x_j, u_j, p_k) of transition k at rows lam_offset + k * states, j = sources[k] (a tree's parent of
  stage k + 1; empty: j = k, a chain). `states` is the NLP's states per stage: the model's nx first, then any the
  dynamics do not step (an input rate's previous inputs, whose rows are the rest's). `scales` (a scaled NLP's,
  anvil.mpc.scaling): the factors of the model's [x; u] in w and of the defect rows (w holds [x; u] / z_scale, g the
  defects / row_scale); empty: none.
  """

  template = "stagewise"
  kind: str
  terms: tuple[StageCostHessian, ...] = ()

  def __init__(
    self, name: str, rest: NumericalFunction[..., Any], ode: OdeDerivatives, N: int, stride: int, p_offset: int,
    lam_offset: int, states: int, *, keep_steps: bool = False, sources: tuple[int, ...] = (),
    scales: tuple[Any, Any] = ((), ()),
  ) -> None:  # fmt: skip
    self.name, self.rest, self.ode, self.keep_steps = name, rest, ode, keep_steps
    self.N, self.stride, self.p_offset, self.lam_offset, self.states = N, stride, p_offset, lam_offset, states
    self.sources = tuple(sources)
    self.z_scale, self.row_scale = (tuple(float(v) for v in values) for values in scales)
    self.inputs = rest.inputs
    self.scalar = "float32" if rest.inputs[0].dtype == dtypes.float32 else "float64"  # NOTE: the rest's, the NLP's
    self.nx, self.nu = ode.integrator.inputs[0].size, ode.integrator.inputs[1].size
    self.np = ode.integrator.inputs[2].size if len(ode.integrator.inputs) > 2 else 0
    self._lock = owned_lock(self)

  @property
  def size(self) -> int:
    """The output's length."""
    return self.rest.outputs[0].size

  @property
  def header_includes(self) -> tuple[str, ...]:
    """The runtime of the dynamics' integrator (explicit or implicit Runge-Kutta) and the stage loops."""
    integrator = "implicit_rk" if self.ode.integrator.implicit else "explicit_rk"
    return (runtime_include(integrator), runtime_include("stagewise"))

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The rest and the ODE's functions this part calls."""
    ode = self.ode
    called = (ode.jacobian,) if self._calls_jacobian else ()
    second = (ode.hessian,) if self.kind == "hessian" and ode.hessian else ()
    return (self.rest, *self.terms, ode.rate, *called, *second)

  @property
  def _calls_jacobian(self) -> bool:
    """Whether this part calls the ODE's Jacobian: for derivatives, and in every part of an implicit step (Newton)."""
    return self.kind != "values" or self.ode.integrator.implicit

  @property
  def tables(self) -> dict[str, tuple[int, ...]]:
    """The scatter tables of this part."""
    return {}

  @property
  def keeps_steps(self) -> bool:
    """Whether this constraint Jacobian keeps the steps its forward sensitivities take, with their stages' inputs
    (C++ `call_keeping`), or these constraints take them (`call_reusing`): asked for (`keep_steps`: N (nx + nu + np
    + nx) numbers of the caller's memory) and an explicit integrator's, whose step() and forward() compute the same
    x_next."""
    return self.keep_steps and self.kind in ("values", "jacobian") and not self.ode.integrator.implicit

  @property
  def _place(self) -> tuple[Any, ...]:
    """Where the stages sit in the NLP (two functions over the same stages have the same)."""
    return (self.N, self.stride, self.p_offset, self.lam_offset, self.states, self.sources, self.z_scale,
            self.row_scale)  # fmt: skip

  @cached_property
  def context(self) -> _Context:
    """Names, sizes, where the stages sit, the ODE and the method, and the tables."""
    ode = OdeContext.of(self.ode, self._calls_jacobian, self.kind == "hessian", self.scalar)
    return _Context(
      name=self.name, kind=self.kind, inputs=tuple(a.size for a in self.inputs), size=self.size, rest=self.rest.name,
      rest_size=self.rest.outputs[0].size, nx=self.nx, nu=self.nu, np=self.np, N=self.N, stride=self.stride,
      p_offset=self.p_offset, lam_offset=self.lam_offset, states=self.states, sources=self.sources,
      z_scale=self.z_scale, row_scale=self.row_scale, terms=tuple(t.name for t in self.terms),
      tables=tuple(self.tables.items()), real=cpp_real(self.scalar), ode=ode, keeps_steps=self.keeps_steps,
    )  # fmt: skip


class StageConstraints(_StageWise):
  """The constraints g(w, params) of a multiple-shooting NLP: `rest` (g without its dynamics: the defects x_{k+1})
  minus F(x_k, u_k, p_k) on each stage's defect rows, F stepped by the run-time integrator (anvil/explicit_rk.hpp or
  implicit_rk.hpp) from the ODE's functions: the code of the NLP's constraints without the integration steps
  unrolled. It has the C++ interface of a NumericalFunction of (w, params) -> g; calling it returns g."""

  kind = "values"

  def takes_steps_from(self, jacobian: object) -> bool:
    """Whether `jacobian` is the constraint Jacobian over the same stages and ODE that keeps its steps: the SQP
    solver's constraints then take them where a stage's inputs are those of the last Jacobian evaluation (C++
    `call_reusing`: a real-time iteration's feedback evaluates g at its linearization point without stepping)."""
    return (
      isinstance(jacobian, StageDerivative) and jacobian.kind == "jacobian" and self.keeps_steps
      and jacobian.keeps_steps and jacobian.ode is self.ode and jacobian._place == self._place
    )  # fmt: skip

  def __call__(self, *args: Any) -> NDArray[np.float64]:
    """Evaluate in this process at numpy inputs shaped as `inputs`; thread-safe."""
    return native_call(self, args, self.size, self.scalar, self._lock)


class StageDerivative(_StageWise):
  """The constraint Jacobian (`kind` "jacobian": a function of (w, params)) or the Lagrangian Hessian's upper
  triangle ("hessian": of (w, params, sigma, lam)) of a multiple-shooting NLP, `rest` (the same derivative of the NLP
  without its dynamics) plus the dynamics' blocks from the integrator's run-time derivatives (module docstring).

  `terms` (a Hessian's only) are further sparse functions of the same inputs whose entries are added to the rest's,
  e.g. the cost's Hessian stage by stage (anvil.mpc.stage_cost), without the colored Hessian-vector products a
  derivative of the whole cost would evaluate.

  Attributes (those of a SparseNumericalFunction the SQP solver reads): shape, indices, indptr, nnz, inputs,
  constant_entries (the rest's constant entries, NaN on the dynamics' blocks; None where the rest's are unknown, or
  with `terms`). The terms add their values into the output themselves (`add_to`: no buffer of their own).
  """

  def __init__(
    self, name: str, kind: str, rest: SparseNumericalFunction, ode: OdeDerivatives, N: int, stride: int,
    p_offset: int, lam_offset: int, states: int, *, terms: tuple[StageCostHessian, ...] = (),
    keep_steps: bool = False, sources: tuple[int, ...] = (), scales: tuple[Any, Any] = ((), ()),
  ) -> None:  # fmt: skip
    if kind not in KINDS or (kind == "hessian" and ode.hessian is None):
      raise ValueError(f"{name}: kind must be one of {KINDS} (a hessian needs the ODE's Hessian), got {kind!r}")
    if terms and kind != "hessian":
      raise ValueError(f"{name}: only a Lagrangian Hessian adds further terms to its rest")
    self.kind, self.terms = kind, terms
    super().__init__(name, rest, ode, N, stride, p_offset, lam_offset, states, keep_steps=keep_steps, sources=sources,
                     scales=scales)  # fmt: skip
    rows, cols = self._block_entries()
    union = sp.csc_array((np.ones(rows.size), (rows, cols)), shape=rest.shape)
    for indices, indptr in [(rest.indices, rest.indptr), *((t.indices, t.indptr) for t in terms)]:
      union = sp.csc_array(union + sp.csc_array((np.ones(indices.size), indices, indptr), shape=rest.shape))
    union.sort_indices()
    self.shape: tuple[int, int] = rest.shape
    self.indices, self.indptr = union.indices.astype(np.int64), union.indptr.astype(np.int64)
    self.rest_to_out = entry_positions(union, *stored_coordinates(rest))
    if np.any(np.diff(self.rest_to_out) <= 0):  # NOTE: the C++ moves the rest's values into place in the output itself
      raise ValueError(f"{name}: the rest's entries must be stored in the output's order (sorted compressed columns)")
    self.terms_to_out = [entry_positions(union, *stored_coordinates(t)) for t in terms]
    self.block_to_out = entry_positions(union, rows, cols)
    if kind == "jacobian" and np.intersect1d(self.rest_to_out, self.block_to_out).size:
      raise ValueError(f"{name}: the NLP without its dynamics has entries where the dynamics' Jacobian has its own")
    constants = rest.constant_entries
    self.constant_entries: NDArray[np.float64] | None = None
    if constants is not None and not terms:
      self.constant_entries = np.full(self.nnz, np.nan)
      self.constant_entries[self.rest_to_out] = constants

  @property
  def nnz(self) -> int:
    """Stored entries."""
    return int(self.indptr[-1])

  @property
  def size(self) -> int:
    """The output's length: the stored entries."""
    return self.nnz

  @property
  def tables(self) -> dict[str, tuple[int, ...]]:
    """Where the rest's entries, the terms' and the dynamics' blocks go."""
    ints = lambda a: tuple(int(v) for v in a)
    terms = {f"term{i}_to_out": ints(to) for i, to in enumerate(self.terms_to_out)}
    return {"rest_to_out": ints(self.rest_to_out), **terms, "block_to_out": ints(self.block_to_out)}

  def _block_entries(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Rows and columns of the dynamics' entries, stage-major, in the order the C++ writes them: the Jacobian's block
    row-major (defect rows x [x_k; u_k]); the Hessian's upper triangle of [x_k; u_k] row-major."""
    nx, nz, N = self.nx, self.nx + self.nu, self.N
    place = lambda i: np.where(i < nx, i, i + self.states - nx)  # NOTE: [x; u] of the model within the stage's w
    starts = self.stride * np.asarray(self.sources or range(N))  # NOTE: the stage each transition leaves
    if self.kind == "jacobian":
      r, c = np.meshgrid(np.arange(nx), np.arange(nz), indexing="ij")
      local_rows, local_cols = r.ravel(), place(c.ravel())
      rows = (self.lam_offset + self.states * np.arange(N))[:, None] + local_rows[None, :]
    else:
      local_rows, local_cols = (place(i) for i in np.triu_indices(nz))
      rows = starts[:, None] + local_rows[None, :]
    cols = starts[:, None] + local_cols[None, :]
    return rows.ravel().astype(np.int64), cols.ravel().astype(np.int64)

  def __call__(self, *args: Any) -> sp.csc_array:
    """Evaluate in this process at numpy inputs shaped as `inputs` (a csc_array); thread-safe."""
    values = native_call(self, args, self.size, self.scalar, self._lock)
    return sp.csc_array((values, self.indices, self.indptr), shape=self.shape)
