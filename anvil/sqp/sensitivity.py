"""Solution sensitivities: the derivatives of a converged SQP solution with respect to the NLP's parameter p, from the
KKT system at the solution (the implicit function theorem: one sparse factorization, one right-hand side per entry of
p).

At a solution (x*, λ*) with the active set held fixed, stationarity ∇f + Jᵀλ_g + λ_x = 0 and the active rows
g_a(x, p) = bound, x_b = bound stay satisfied as p moves, so

  [ H    A_aᵀ ] [ dx/dp  ]     [ ∂²L/∂x∂p  ]
  [ A_a   0   ] [ dλ_a/dp ] = -[ ∂g_a/∂p   ]

with H the exact Hessian of the Lagrangian and A_a the Jacobian of the active rows (unit rows for active bounds on x).
This holds where the active set does not change with p: strict complementarity (every active inequality has a nonzero
multiplier), the rows' Jacobian of full rank and H positive definite on its null space. A row at its bound with a zero
multiplier (weakly active) breaks the first: the derivative is then one-sided, and `Sensitivity.strict` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.ad import gradient, jacobian, sphessian, spjacobian
from anvil.codegen import Arg, NumericalFunction

if TYPE_CHECKING:
  from anvil.sqp.solver import SQPFunction

F64 = NDArray[np.float64]
#: A multiplier this small against the largest one is taken as zero (its row weakly active when at its bound).
MULTIPLIER_TOL = 1e-9
#: A row within this distance of its bound (relative to the bound's size, at least 1) is at the bound.
BOUND_TOL = 1e-6


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


class ParametricDerivatives:
  """The derivatives a sensitivity needs, generated from the SQP's cost and constraints and compiled on first use: the
  exact Hessian of the Lagrangian (the solver's may be an approximation, or C++ alone), ∂g/∂x, ∂²L/∂x∂p (n, np) and
  ∂g/∂p (m, np)."""

  def __init__(self, sqp: SQPFunction) -> None:
    cost, constraints = sqp.cost.fn, None if sqp.constraints is None else sqp.constraints.fn

    def lagrangian(x: Tensor, p: Tensor, lam: Tensor) -> Tensor:
      value = cost(x, p)
      return value if constraints is None else value + (constraints(x, p) * lam).sum()

    args = (Arg(sqp.n), Arg(sqp.np), Arg(max(sqp.m, 1)))
    L = NumericalFunction(f"{sqp.name}_parametric_lagrangian", lagrangian, args)
    self.hessian = sphessian(L, 0, name=f"{sqp.name}_lagrangian_xx")
    self.mixed = jacobian(gradient(L, 0), 1, name=f"{sqp.name}_lagrangian_xp")
    g = sqp.constraints
    self.g_x = None if g is None else spjacobian(g, 0, name=f"{sqp.name}_constraints_x")
    self.g_p = None if g is None else jacobian(g, 1, name=f"{sqp.name}_constraints_p")


def active_set(
  values: F64, lower: F64, upper: F64, lam: F64, scale: float
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
  """(active, weakly active) indices: equalities, and rows at a bound with a multiplier of its sign (active) or zero
  (weakly active)."""
  reach = BOUND_TOL * np.maximum(1.0, np.maximum(np.abs(np.where(np.isfinite(lower), lower, 0.0)),
                                                 np.abs(np.where(np.isfinite(upper), upper, 0.0))))  # fmt: skip
  at_lower, at_upper = values - lower <= reach, upper - values <= reach
  zero = np.abs(lam) <= MULTIPLIER_TOL * scale
  equality = lower == upper
  active = equality | (at_lower & (lam < 0) & ~zero) | (at_upper & (lam > 0) & ~zero)
  weak = ~equality & (at_lower | at_upper) & zero
  return np.flatnonzero(active), np.flatnonzero(weak)


def solution_sensitivity(
  sqp: SQPFunction, x: F64, p: F64, lam_g: F64, lam_x: F64, bounds: tuple[F64, ...]
) -> Sensitivity:
  """The Sensitivity of the solution (x, λ_g, λ_x) of `sqp` at parameter p with bounds (lbx, ubx, lbg, ubg)."""
  n, m, n_p = sqp.n, sqp.m, sqp.np
  lbx, ubx, lbg, ubg = bounds
  derivatives = sqp.parametric
  lam = lam_g if m else np.zeros(1)
  H = _symmetric(derivatives.hessian(x, p, lam))
  scale = max(1.0, float(np.abs(np.concatenate([lam_g, lam_x])).max(initial=0.0)))
  rows: list[Any] = []
  rhs_rows: list[F64] = []
  active_g, weak_g = (np.zeros(0, np.intp),) * 2
  if sqp.constraints is not None and derivatives.g_x is not None and derivatives.g_p is not None:
    g = np.asarray(sqp.constraints(x, p), dtype=np.float64).reshape(m)
    active_g, weak_g = active_set(g, lbg, ubg, lam_g, scale)
    J = sp.csr_array(derivatives.g_x(x, p))
    rows.append(J[active_g])
    g_p = np.asarray(derivatives.g_p(x, p), dtype=np.float64).reshape(m, n_p)
    rhs_rows.append(g_p[active_g])
  active_x, weak_x = active_set(x, lbx, ubx, lam_x, scale)
  rows.append(sp.csr_array((np.ones(active_x.size), (np.arange(active_x.size), active_x)), shape=(active_x.size, n)))
  rhs_rows.append(np.zeros((active_x.size, n_p)))
  A = sp.vstack(rows, format="csc")
  k = A.shape[0]
  K = sp.bmat([[H, A.T], [A, None]], format="csc")
  mixed = np.asarray(derivatives.mixed(x, p, lam), dtype=np.float64).reshape(n, n_p)
  rhs = -np.vstack([mixed, *rhs_rows])
  try:
    solution = spla.splu(K).solve(rhs) if n_p else np.zeros((n + k, 0))
  except RuntimeError as e:
    raise ValueError(f"{sqp.name}: the KKT matrix at the solution is singular ({e}): the active rows' Jacobian is "
                     "rank deficient or the Hessian is singular on its null space, so the solution is not a "
                     "differentiable function of p there") from e  # fmt: skip
  dx, dlam = solution[:n], solution[n:]
  d_lam_g, d_lam_x = np.zeros((m, n_p)), np.zeros((n, n_p))
  d_lam_g[active_g] = dlam[: active_g.size]
  d_lam_x[active_x] = dlam[active_g.size :]
  return Sensitivity(dx, d_lam_g, d_lam_x, tuple(map(int, active_g)), tuple(map(int, active_x)),
                     tuple(map(int, weak_g)), tuple(map(int, weak_x)))  # fmt: skip


def _symmetric(upper: Any) -> sp.csc_array:
  """The symmetric matrix whose upper triangle is `upper`."""
  U = sp.csc_array(upper)
  return sp.csc_array(U + U.T - sp.diags_array(U.diagonal()))
