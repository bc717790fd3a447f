"""Solution sensitivities: the derivatives of a converged SQP solution with respect to the NLP's parameter p, from the
KKT system at the solution (the implicit function theorem: one sparse factorization, one right-hand side per entry of
p), generated as C++ (`SensitivityFunction`, anvil/sensitivity.hpp): Python calls the same code a C++ program links.

At a solution (x*, λ*) with the active set held fixed, stationarity ∇f + Jᵀλ_g + λ_x = 0 and the active rows
g_a(x, p) = bound, x_b = bound stay satisfied as p moves, so

  [ H    A_aᵀ ] [ dx/dp  ]     [ ∂²L/∂x∂p  ]
  [ A_a   0   ] [ dλ_a/dp ] = -[ ∂g_a/∂p   ]

with H the exact Hessian of the Lagrangian and A_a the Jacobian of the active rows (unit rows for active bounds on x).
This holds where the active set does not change with p: strict complementarity (every active inequality has a nonzero
multiplier), the rows' Jacobian of full rank and H positive definite on its null space. A row at its bound with a zero
multiplier (weakly active) breaks the first: the derivative is then one-sided, and `Sensitivity.strict` says so. Where
the active rows' Jacobian is rank deficient but the system still has a solution (rows with one gradient whose bounds
move together), dx/dp is unique and the multipliers' derivatives are those of the least-norm multipliers.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.ad import gradient, jacobian, sphessian, spjacobian
from anvil.codegen import Arg, FunctionBase, NumericalFunction
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.templated import TemplatedFunction
from anvil.qp.kkt import ActiveSetKKT
from anvil.qp.qdldl import UsesQDLDL

if TYPE_CHECKING:
  from anvil.sqp.nlp import NLP

F64 = NDArray[np.float64]
#: What the C++ returns besides the count of weakly active rows (anvil/sensitivity.hpp's Failure).
_FAILURES = {
  -1: "the KKT matrix at the solution is singular (the active rows' Jacobian rank deficient, the Hessian "
  "singular on their null space, and no solution) or the Hessian is not positive definite on that null space: the "
  "solution is not a differentiable function of p there",
  -2: "a derivative at the solution (the Lagrangian's Hessian, dg/dx, d2L/dxdp or dg/dp) is NaN/inf",
}


@dataclass(frozen=True)
class Sensitivity:
  """Derivatives of an SQP solution with respect to the parameter p.

  Attributes:
    x: dx*/dp, (n, np).
    lam_g: dλ_g/dp, (m, np) (zero for inactive rows).
    lam_x: dλ_x/dp, (n, np).
    active_g, active_x: the constraint rows and variables held at a bound (equalities included).
    weakly_active_g, weakly_active_x: rows and variables at a bound whose multiplier is zero: strict complementarity
      fails there, and the derivatives are those of the side where the bound stays inactive.
  """

  x: F64
  lam_g: F64
  lam_x: F64
  active_g: tuple[int, ...]
  active_x: tuple[int, ...]
  weakly_active_g: tuple[int, ...] = ()
  weakly_active_x: tuple[int, ...] = ()

  @property
  def strict(self) -> bool:
    """Whether strict complementarity holds (no weakly active row): the derivatives are then two-sided."""
    return not self.weakly_active_g and not self.weakly_active_x


@dataclass(frozen=True)
class _SensitivityContext:
  """What the sensitivity's templates need."""

  name: str
  sqp: str
  n: int
  ng: int
  np: int
  nnz_P: int
  nnz_A: int
  nnz_J: int
  constraints: str
  jacobian: str
  constraints_p: str
  hessian: str
  mixed: str
  evaluations: tuple[str, ...]
  buffers: tuple[tuple[str, str, int], ...]
  tables: tuple[tuple[str, tuple[int, ...]], ...]


class SensitivityFunction(UsesQDLDL, TemplatedFunction):
  """The solution sensitivity of an SQPFunction's NLP generated as C++ (`<sqp>_sensitivity::call`): at a converged
  solution, dx/dp, dλ_g/dp and dλ_x/dp from the KKT system of the active set, with the exact Hessian of the Lagrangian
  and ∂²L/∂x∂p, ∂g/∂x, ∂g/∂p generated from the NLP's cost and constraints (in double, whatever the solver's scalar).
  `generate_module(..., [sqp, sqp.sensitivity_function])` puts it beside the solver; calling it from Python runs the
  same code.

  Args:
    nlp: the solver's NLP (`SQPFunction.nlp`, with a parameter: np > 0).
  """

  template = "sensitivity"
  source_runtime = ("sensitivity",)

  def __init__(self, nlp: NLP) -> None:
    if nlp.np == 0:
      raise ValueError(f"{nlp.name}: the NLP has no parameter (np = 0): there is nothing to differentiate by")
    self.name = f"{nlp.name}_sensitivity"
    self.nlp = nlp
    self._lock = owned_lock(self)
    cost, constraints = nlp.cost.fn, None if nlp.constraints is None else nlp.constraints.fn

    def lagrangian(x: Tensor, p: Tensor, lam: Tensor) -> Tensor:
      value = cost(x, p)
      return value if constraints is None else value + (constraints(x, p) * lam).sum()

    args = (Arg(nlp.n), Arg(nlp.np), Arg(max(nlp.m, 1)))
    L = NumericalFunction(f"{nlp.name}_parametric_lagrangian", lagrangian, args)
    self.hessian = sphessian(L, 0, name=f"{nlp.name}_lagrangian_xx")
    self.mixed = jacobian(gradient(L, 0), 1, name=f"{nlp.name}_lagrangian_xp")
    self.constraints: NumericalFunction | None = None
    if constraints is not None:
      own = nlp.scalar == "float64" and nlp.constraints is not None
      self.constraints = nlp.constraints if own else NumericalFunction(f"{nlp.name}_g_double", constraints,
                                                                         (Arg(nlp.n), Arg(nlp.np)))  # fmt: skip
    g = self.constraints
    self.g_x = None if g is None else spjacobian(g, 0, name=f"{nlp.name}_constraints_x")
    self.g_p = None if g is None else jacobian(g, 1, name=f"{nlp.name}_constraints_p")

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The derivative functions (and g)."""
    return tuple(f for f in (self.constraints, self.g_x, self.g_p, self.hessian, self.mixed) if f is not None)

  @cached_property
  def _patterns(self) -> tuple[sp.csc_array, sp.csc_array, NDArray[np.int64]]:
    """H's pattern (upper triangle, the Hessian's storage order), A = [∂g/∂x; I]'s, and where each entry of ∂g/∂x
    (then of I) goes in A's storage."""
    n, m = self.nlp.n, self.nlp.m
    h = self.hessian
    hess = sp.csc_array((np.ones(h.nnz), h.indices, h.indptr), shape=(n, n))
    nnz_j = 0 if self.g_x is None else self.g_x.nnz
    if self.g_x is None:
      jac = sp.csc_array((m, n))
    else:
      jac = sp.csc_array((np.arange(1, nnz_j + 1, dtype=np.float64), self.g_x.indices, self.g_x.indptr), shape=(m, n))
    eye = sp.csc_array((np.arange(nnz_j + 1, nnz_j + n + 1, dtype=np.float64), (np.arange(n), np.arange(n))),
                       shape=(n, n))  # fmt: skip
    A = sp.csc_array(sp.vstack([jac, eye], format="csc"))
    A.sort_indices()
    where = np.empty(nnz_j + n, dtype=np.int64)
    where[A.data.astype(np.int64) - 1] = np.arange(A.nnz)
    return hess, sp.csc_array((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape), where

  @cached_property
  def kkt(self) -> ActiveSetKKT:
    """The KKT system's pattern: P = the Hessian's upper triangle, A = [∂g/∂x; I]."""
    hess, a, _ = self._patterns
    return ActiveSetKKT(hess, a)

  @cached_property
  def context(self) -> _SensitivityContext:
    """Sizes, the functions' names, the KKT system's buffers and tables."""
    nlp, (hess, a, where) = self.nlp, self._patterns
    n, ng, n_p = nlp.n, nlp.m, nlp.np
    nnz_j = where.size - n
    tables = {**self.kkt.tables, "J_to_A": tuple(int(v) for v in where[:nnz_j]),
              "I_to_A": tuple(int(v) for v in where[nnz_j:])}  # fmt: skip
    doubles = (("hess", hess.nnz), ("jac", nnz_j), ("A", a.nnz), ("g", ng), ("mixed", n * n_p), ("g_p", ng * n_p))
    buffers = (*self.kkt.buffers, *(("double", name, max(size, 1)) for name, size in doubles))
    name_of = lambda f: "" if f is None else f.name
    return _SensitivityContext(
      name=self.name, sqp=nlp.name, n=n, ng=ng, np=n_p, nnz_P=hess.nnz, nnz_A=a.nnz, nnz_J=nnz_j,
      constraints=name_of(self.constraints), jacobian=name_of(self.g_x), constraints_p=name_of(self.g_p),
      hessian=self.hessian.name, mixed=self.mixed.name, evaluations=tuple(f.name for f in self.dependencies()),
      buffers=buffers, tables=tuple(tables.items()),
    )  # fmt: skip

  @cached_property
  def _call(self) -> Any:
    return self.handle.entry("call", ctypes.c_int, *[ctypes.c_void_p] * 4)

  def __call__(self, x: F64, p: F64, lam_g: F64, lam_x: F64, bounds: tuple[F64, ...]) -> Sensitivity:
    """The Sensitivity of the solution (x, λ_g, λ_x) at parameter p with bounds (lbx, ubx, lbg, ubg) (float64
    arrays of the NLP's sizes, checked by the caller); ValueError where the KKT matrix is singular."""
    nlp = self.nlp
    n, m, n_p = nlp.n, nlp.m, nlp.np
    inputs = [np.ascontiguousarray(a, dtype=np.float64) for a in (x, p, lam_g, lam_x, *bounds)]
    inputs = [a if a.size else np.zeros(1) for a in inputs]
    outs = [np.zeros((n, n_p)), np.zeros((max(m, 1), n_p)), np.zeros((n, n_p))]
    active = np.zeros(m + n, dtype=np.int32)
    in_ptrs = (ctypes.c_void_p * 8)(*(a.ctypes.data for a in inputs))
    out_ptrs = (ctypes.c_void_p * 3)(*(a.ctypes.data for a in outs))
    with self._lock:  # NOTE: one workspace, however many threads call
      code = self._call(in_ptrs, out_ptrs, active.ctypes.data, self.handle.pointer)
    if code < 0:
      raise ValueError(f"{nlp.name}: {_FAILURES[code]}")
    rows = lambda part, code_of: tuple(int(i) for i in np.flatnonzero(code_of(part)))
    g_part, x_part = active[:m], active[m:]
    return Sensitivity(outs[0], outs[1][:m], outs[2], rows(g_part, lambda a: a > 0), rows(x_part, lambda a: a > 0),
                       rows(g_part, lambda a: a < 0), rows(x_part, lambda a: a < 0))  # fmt: skip
