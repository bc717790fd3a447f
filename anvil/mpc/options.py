"""`MPCOptions`: how an `MPCFunction` iterates and which Hessian and QP solver it uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from anvil.sqp import SQPOptions

MODES = ("sqp", "rti")
HESSIANS = ("exact", "gauss_newton")
QP_SOLVERS = ("osqp", "riccati")


@dataclass(frozen=True, kw_only=True)
class MPCOptions:
  """Settings of an `MPCFunction`, fixed when its code is generated.

  Example:
    >>> MPCOptions(mode="rti", hessian="gauss_newton")
  """

  mode: str = "sqp"
  """"sqp": iterate to convergence every call (robust; the default, since one iteration per step can diverge on hard
  swing-ups). "rti": real-time iteration, one SQP iteration per call from the shifted previous solution."""
  hessian: str = "exact"
  """"exact": the Lagrangian Hessian (regularized only when a QP is nonconvex). "gauss_newton": 2 JᵀWJ of the
  LeastSquares costs (needs every cost given as LeastSquares; other costs keep their exact Hessian)."""
  qp_solver: str = "riccati"
  """The QP solver inside the SQP iterations: "riccati" (the default: a generated interior point exploiting the stage
  structure by a Riccati recursion; OSQP stays for the elastic fallback) or "osqp" (OSQP's embedded C code,
  polished)."""
  riccati_max_iter: int = 60
  """The Riccati interior point's iteration limit per QP."""
  riccati_tol: float = 1e-10
  """The tightest tolerance a Riccati QP is solved to (each QP is solved to 1e-2 of the SQP's current KKT error,
  within [riccati_tol, 1e-6])."""
  sqp: SQPOptions = field(default_factory=lambda: SQPOptions(max_iter=50))
  """Settings of the underlying SQP solver (iteration limit, tolerances, verbosity...)."""
  warm_start: bool = True
  """Start each call from the previous solution shifted by one stage (primal and dual)."""

  def __post_init__(self) -> None:
    for what, value, allowed in (("mode", self.mode, MODES), ("hessian", self.hessian, HESSIANS),
                                 ("qp_solver", self.qp_solver, QP_SOLVERS)):  # fmt: skip
      if value not in allowed:
        raise ValueError(f"MPCOptions.{what}: expected one of {allowed}, got {value!r}")
    if not isinstance(self.sqp, SQPOptions):
      raise TypeError(f"MPCOptions.sqp: expected SQPOptions, got {type(self.sqp).__name__}")
    if (
      isinstance(self.riccati_max_iter, bool) or not isinstance(self.riccati_max_iter, int) or self.riccati_max_iter < 1
    ):
      raise ValueError(f"MPCOptions.riccati_max_iter: expected an int >= 1, got {self.riccati_max_iter!r}")
    if (
      isinstance(self.riccati_tol, bool)
      or not isinstance(self.riccati_tol, (int, float))
      or not 0 < self.riccati_tol <= 1e-6
    ):
      raise ValueError(f"MPCOptions.riccati_tol: expected a number in (0, 1e-6], got {self.riccati_tol!r}")
    if not isinstance(self.warm_start, bool):
      raise TypeError(f"MPCOptions.warm_start: expected a bool, got {self.warm_start!r}")
