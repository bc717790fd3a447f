"""`MPCOptions`: how an `MPCFunction` iterates and which Hessian and QP solver it uses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from anvil.codegen.precision import check_scalar
from anvil.qp.options import OSQPOptions, QPOptions, RiccatiOptions, check_bool
from anvil.sqp import SQPOptions

MODES = ("sqp", "rti")
HESSIANS = ("exact", "gauss_newton")


@dataclass(frozen=True, kw_only=True)
class MPCOptions:
  """Settings of an `MPCFunction`, fixed when its code is generated.

  Example:
    >>> MPCOptions(mode="rti", hessian="gauss_newton")
    >>> MPCOptions(qp=RiccatiOptions(max_iter=40, tol_min=1e-9))
  """

  mode: str = "sqp"
  """"sqp": iterate to convergence every call (robust; the default, since one iteration per step can diverge on hard
  swing-ups). "rti": real-time iteration, one SQP iteration per call from the shifted previous solution (none where
  that already meets the tolerance); start it from a converged plan (`set_guess`, `simulate(guess=...)`): from the cold
  guess a nonconvex constraint's linearization may be inconsistent for many steps (the bicycle's obstacle from a
  straight line through it: "infeasible", the elastic step taken, the car through the obstacle)."""
  hessian: str = "exact"
  """"exact": the Lagrangian Hessian (regularized only when a QP is nonconvex). "gauss_newton": 2 JᵀWJ of the
  LeastSquares costs (needs every cost given as LeastSquares; other costs keep their exact Hessian)."""
  qp: QPOptions = field(default_factory=RiccatiOptions)
  """The QP solver inside the SQP iterations and its settings: `RiccatiOptions()` (the default: a generated interior
  point exploiting the stage structure by a Riccati recursion, which solves the elastic QPs of the restoration phase
  too) or `OSQPOptions` (OSQP's embedded C code, polished)."""
  sqp: SQPOptions = field(default_factory=lambda: SQPOptions(max_iter=50))
  """Settings of the underlying SQP solver (iteration limit, tolerances, verbosity...)."""
  warm_start: bool = True
  """Start each call from the previous solution shifted by one stage (primal and dual)."""
  integrator_derivatives: bool = True
  """With dynamics made by `rk4`: the derivatives of each stage's step computed at run time from the ODE's own
  (forward sensitivities and the second-order adjoint over the integration steps, anvil/explicit_rk.hpp), so the
  generated code holds the ODE's derivatives once instead of the unrolled steps'. False: the NLP differentiated as
  one graph (the only way for dynamics given as a plain NumericalFunction; not possible for dynamics made by `irk`,
  whose implicit steps always run in the run-time integrator, anvil/implicit_rk.hpp)."""
  scalar: str = "float64"
  """The type the controller computes in: "float64", or "float32" (the derivative functions, the integrator, the
  SQP and the Riccati QP all in float32, for targets whose floating-point unit is single precision; tolerances as
  `SQPOptions.scalar` says; needs the Riccati QP solver). `sqp.scalar` follows it."""

  def __post_init__(self) -> None:
    for what, value, allowed in (("mode", self.mode, MODES), ("hessian", self.hessian, HESSIANS)):
      if value not in allowed:
        raise ValueError(f"MPCOptions.{what}: expected one of {allowed}, got {value!r}")
    if not isinstance(self.sqp, SQPOptions):
      raise TypeError(f"MPCOptions.sqp: expected SQPOptions, got {type(self.sqp).__name__}")
    check_bool("MPCOptions", "warm_start", self.warm_start)
    check_bool("MPCOptions", "integrator_derivatives", self.integrator_derivatives)
    check_scalar("MPCOptions", self.scalar)
    if self.sqp.scalar not in ("float64", self.scalar):
      raise ValueError(f"MPCOptions: scalar={self.scalar!r} disagrees with sqp.scalar={self.sqp.scalar!r}")
    if not isinstance(self.qp, (OSQPOptions, RiccatiOptions)):
      raise TypeError(f"MPCOptions.qp: expected RiccatiOptions or OSQPOptions, got {type(self.qp).__name__}")
    if self.scalar != "float64" and not isinstance(self.qp, RiccatiOptions):
      raise ValueError(f"MPCOptions: scalar={self.scalar!r} needs the Riccati QP solver (qp=RiccatiOptions()): OSQP "
                       "factors in double")  # fmt: skip

  @property
  def sqp_options(self) -> SQPOptions:
    """The options of the SQP solver: `sqp` with the QP solver `qp` (and one iteration per call in "rti" mode)."""
    options = dataclasses.replace(self.sqp.with_qp(self.qp), scalar=self.scalar)
    return dataclasses.replace(options, max_iter=1) if self.mode == "rti" else options
