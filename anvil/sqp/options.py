"""`SQPOptions`: the settings of a generated SQP solver, each a number with a meaning."""

from __future__ import annotations

from dataclasses import dataclass, fields

STATUSES = ("converged", "max_iterations", "infeasible", "numerical_error")


@dataclass(frozen=True, kw_only=True)
class SQPOptions:
  """Settings of an `SQPFunction`, fixed when its code is generated.

  Example:
    >>> SQPOptions(max_iter=50, tol=1e-8, verbose=True)
  """

  max_iter: int = 100
  """Maximum number of SQP iterations (each solves one QP)."""
  tol: float = 1e-8
  """Termination: primal infeasibility ≤ tol, and dual infeasibility (stationarity of the Lagrangian) and
  complementarity (|multiplier| x distance to its bound) ≤ tol · max(1, ‖∇f‖∞)."""
  qp_eps_abs: float = 1e-10
  """OSQP's absolute tolerance for each QP."""
  qp_eps_rel: float = 1e-10
  """OSQP's relative tolerance for each QP."""
  qp_max_iter: int = 20000
  """OSQP's iteration limit for each QP."""
  regularization_min: float = 1e-8
  """Smallest multiple of the identity added to a Hessian that makes the QP nonconvex."""
  regularization_max: float = 1e8
  """Largest regularization tried before the iteration reports a numerical error."""
  armijo: float = 1e-4
  """Sufficient (Armijo) decrease of f a step must achieve when the filter asks for objective decrease."""
  backtrack: float = 0.5
  """Step length reduction per line-search trial."""
  min_step: float = 1e-10
  """Smallest step length tried before the line search gives up."""
  verbose: bool = False
  """Print one line per iteration from the generated code."""

  def __post_init__(self) -> None:
    for f in fields(self):
      value = getattr(self, f.name)
      if f.name == "verbose":
        if not isinstance(value, bool):
          raise TypeError(f"SQPOptions.verbose: expected a bool, got {value!r}")
      elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"SQPOptions.{f.name}: expected a positive number, got {value!r}")
    if not isinstance(self.max_iter, int) or not isinstance(self.qp_max_iter, int):
      raise TypeError("SQPOptions: max_iter and qp_max_iter must be ints")
    if not 0 < self.backtrack < 1 or not 0 < self.armijo < 0.5:
      raise ValueError("SQPOptions: backtrack must be in (0, 1) and armijo in (0, 0.5)")
    if self.regularization_min > self.regularization_max:
      raise ValueError("SQPOptions: regularization_min must not exceed regularization_max")
