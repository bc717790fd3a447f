"""The ODE-level functions and tables the run-time integrators (anvil/explicit_rk.hpp, anvil/implicit_rk.hpp) work
from: the ODE's function e(v[, p]) at v = [x; z; u] (z: a DAE's algebraic states, none for an ODE), its sparse
Jacobian, the sparse Hessian of mu'e, and what the templates' `Ode` struct (templates/ode.j2) holds: the method's
Butcher tableau, the steps, Newton's settings and the Jacobian's and Hessian's patterns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from anvil.ad import sphessian, spjacobian
from anvil.codegen import Arg, NumericalFunction, SparseNumericalFunction
from anvil.codegen.precision import SCALARS, cpp_real, in_precision, in_scalar
from anvil.codegen.sparse import stored_coordinates

#: The tightest Newton tolerance a float32 implicit step asks for (an update of 1e-5 leaves ~1e-10: float32's rounding
#: is ~1e-7 of the states).
FLOAT32_NEWTON_TOL = 1e-5


class Integrator(Protocol):
  """What the run-time integrators need of a discrete-time model made by `rk4` or `irk`."""

  name: str
  inputs: tuple[Arg, ...]
  rate: NumericalFunction[..., Any]
  h: float
  steps: int
  a: tuple[tuple[float, ...], ...]
  b: tuple[float, ...]
  algebraic: int
  implicit: bool


@dataclass(frozen=True)
class OdeDerivatives:
  """The ODE-level functions the run-time integrators call: the rate e(x[, z], u[, p]) (f, or [f; g] for a DAE), its
  Jacobian in v = [x; z; u] (CSC, ne x nv) and, for exact Hessians, the upper triangle of the Hessian of mu'e in v
  (CSC, nv x nv) as a function of (v, mu[, p])."""

  integrator: Integrator
  rate: NumericalFunction[..., Any]
  jacobian: SparseNumericalFunction
  hessian: SparseNumericalFunction | None

  @staticmethod
  def of(F: Integrator, hessian: bool, scalar: str = "float64") -> OdeDerivatives:
    """The functions of F's ODE (the Hessian with `hessian`), computing in `scalar` (their names end in "_f32" in
    float32: a module may hold both); made once per F, so a module holding F and an MPC on it holds each once."""
    made: dict[tuple[str, bool], OdeDerivatives] = vars(F).setdefault("_ode_derivatives", {})
    if (scalar, False) not in made:
      rate, on_v = _on_v(F, scalar)
      # NOTE: derived on the scalar expressions: straight-line code, called at every stage point (tinygrad's kernels
      # of the same Jacobian took a quarter of the chain's stage-wise Jacobian)
      jac = spjacobian(on_v, 0, name=f"{F.name}_ode_jacobian{_suffix(scalar)}", scalar=True)
      made[scalar, False] = OdeDerivatives(F, rate, jac, None)
    if hessian and (scalar, True) not in made:
      first, (_, on_v) = made[scalar, False], _on_v(F, scalar)
      ne = F.inputs[0].size + F.algebraic
      lagrangian = lambda v, mu, *p: (on_v.replay(v, *p) * mu).sum()
      args = (on_v.inputs[0], Arg(ne, dtype=on_v.inputs[0].dtype, name="mu"), *on_v.inputs[1:])
      lag = NumericalFunction(f"{F.name}_ode_mu_f{_suffix(scalar)}", lagrangian, args)
      hess = sphessian(lag, 0, name=f"{F.name}_ode_hessian{_suffix(scalar)}", scalar=True)
      made[scalar, True] = OdeDerivatives(F, first.rate, first.jacobian, hess)
    return made[scalar, hessian]


def _suffix(scalar: str) -> str:
  """The ending of the names of the ODE's functions in `scalar`."""
  return "" if scalar == "float64" else "_f32"


def _on_v(F: Integrator, scalar: str) -> tuple[NumericalFunction[..., Any], NumericalFunction[..., Any]]:
  """F's rate in `scalar`, and the same as a function of v = [x; z; u] (and p)."""
  nx, ne = F.inputs[0].size, F.inputs[0].size + F.algebraic
  nv, dtype = ne + F.inputs[1].size, SCALARS[scalar]
  p_args = tuple(Arg(a.size, dtype=dtype, name="p") for a in F.inputs[2:])
  rate = in_precision(F.rate, scalar)
  split = (slice(0, nx), slice(nx, ne), slice(ne, nv)) if F.algebraic else (slice(0, nx), slice(nx, nv))
  at = in_scalar(lambda v, *p: rate.replay(*(v[part] for part in split), *p), scalar)
  return rate, NumericalFunction(f"{F.name}_ode_v{_suffix(scalar)}", at, (Arg(nv, dtype=dtype, name="v"), *p_args))


#: The ODE's tables the runtimes read (empty where a part does not use them).
ODE_TABLES = (
  "jac_p",
  "jac_i",
  "jac_row_p",
  "jac_row_u",
  "jac_row_j",
  "jac_row_e",
  "hess_p",
  "hess_i",
  "hess_rows",
  "hess_of",
)


@dataclass(frozen=True)
class OdeContext:
  """What templates/ode.j2 renders: the `Ode` struct (sizes, method, Newton's settings, tables) and the evaluations
  of the ODE's functions the integrator calls."""

  real: str
  runtime: str
  nx: int
  nu: int
  na: int
  steps: int
  h: float
  a: tuple[tuple[float, ...], ...]
  b: tuple[float, ...]
  newton_tol: float
  newton_iter: int
  z_guess: tuple[float, ...]
  rate: str
  rate_inputs: tuple[str, ...]
  jacobian: str
  hessian: str
  jac_nnz: int
  hess_nnz: int
  n_hess_rows: int
  tables: tuple[tuple[str, tuple[int, ...]], ...]
  np: int

  @staticmethod
  def of(ode: OdeDerivatives, jacobian: bool, hessian: bool, scalar: str) -> OdeContext:
    """The context of `ode`'s functions for an integrator that calls the Jacobian (`jacobian`) and the Hessian."""
    F = ode.integrator
    nx, nu, na = F.inputs[0].size, F.inputs[1].size, F.algebraic
    jac = ode.jacobian if jacobian else None
    hess = ode.hessian if hessian else None
    tables: dict[str, tuple[int, ...]] = {k: () for k in ODE_TABLES}
    if jac is not None:
      tables |= _jacobian_tables(jac, nx)
    if hess is not None:
      hess_rows = tuple(sorted({int(v) for v in np.concatenate(stored_coordinates(hess))}))
      of = tuple(hess_rows.index(i) if i in hess_rows else -1 for i in range(hess.shape[0]))
      tables |= {"hess_p": _ints(hess.indptr), "hess_i": _ints(hess.indices), "hess_rows": hess_rows, "hess_of": of}
    tol = float(getattr(F, "newton_tol", 0.0))
    inputs = ("v", "v + Ode::nx", "v + Ode::nx + Ode::na") if na else ("v", "v + Ode::nx")
    return OdeContext(
      real=cpp_real(scalar), runtime="ImplicitRK" if F.implicit else "ExplicitRK", nx=nx, nu=nu, na=na,
      steps=F.steps, h=F.h, a=F.a, b=F.b, newton_tol=tol if scalar == "float64" else max(tol, FLOAT32_NEWTON_TOL),
      newton_iter=int(getattr(F, "newton_iter", 0)), z_guess=tuple(getattr(F, "z_guess", ())), rate=ode.rate.name,
      rate_inputs=inputs, jacobian="" if jac is None else jac.name, hessian="" if hess is None else hess.name,
      jac_nnz=0 if jac is None else jac.nnz, hess_nnz=0 if hess is None else hess.nnz,
      n_hess_rows=len(tables["hess_rows"]), tables=tuple(tables.items()), np=sum(a.size for a in F.inputs[2:]),
    )  # fmt: skip


def _ints(values: Any) -> tuple[int, ...]:
  return tuple(int(v) for v in values)


def _jacobian_tables(jac: SparseNumericalFunction, nx: int) -> dict[str, tuple[int, ...]]:
  """The Jacobian's CSC pattern, and the same entries row by row (ExplicitRK's stage sensitivities)."""
  positions = np.arange(1, jac.nnz + 1)  # NOTE: from 1, so no stored entry is a zero to drop
  rows = sp.csc_array((positions, jac.indices, jac.indptr), shape=jac.shape).tocsr()
  rows.sort_indices()
  states = np.concatenate([[0], np.cumsum(rows.indices < nx)])  # state entries before each position
  return {"jac_p": _ints(jac.indptr), "jac_i": _ints(jac.indices), "jac_row_p": _ints(rows.indptr),
          "jac_row_u": _ints(rows.indptr[:-1] + states[rows.indptr[1:]] - states[rows.indptr[:-1]]),
          "jac_row_j": _ints(rows.indices), "jac_row_e": _ints(rows.data - 1)}  # fmt: skip
