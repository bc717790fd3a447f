"""`SQPOptions`: the settings of a generated SQP solver, each a number with a meaning."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from anvil.codegen.precision import check_scalar
from anvil.qp.options import (
  OSQPOptions,
  QPOptions,
  check_bool,
  check_int,
  check_positive,
)


@dataclass(frozen=True, kw_only=True)
class SQPOptions:
  """Settings of an `SQPFunction`, fixed when its code is generated.

  Example:
    >>> SQPOptions(max_iter=50, tol=1e-8, verbose=True)
    >>> SQPOptions(qp=OSQPOptions(eps_abs=1e-8, eps_rel=1e-8))
  """

  max_iter: int = 100
  """Maximum number of SQP iterations (each solves one QP)."""
  tol: float = 1e-8
  """Termination: primal infeasibility ≤ tol, and dual infeasibility (stationarity of the Lagrangian) and
  complementarity (|multiplier| x distance to its bound) ≤ tol · max(1, ‖∇f‖∞). A call may ask for another."""
  acceptable_tol: float = 1e-6
  """The same test at a looser level: met `acceptable_iter` iterations in a row, or where the line search stalls or a
  limit is reached, the solve ends "acceptable" (as IPOPT's "Solved To Acceptable Level")."""
  acceptable_iter: int = 5
  """Iterations in a row within acceptable_tol that end a solve as "acceptable"."""
  max_time: float = float("inf")
  """Seconds a solve may take (checked once per iteration): past it, it ends "time_limit" with the last iterate (or
  "acceptable" there). A call may ask for another."""
  qp: QPOptions | None = None
  """The QP solver and its settings: None (the default: automatic, `SQPFunction.qp_options`: the Riccati interior
  point for an NLP with a stage layout, given or detected, else the sparse interior point), `SparseIPMOptions` (the
  sparse interior point, for any NLP, no stage structure used), `OSQPOptions` (OSQP's ADMM, polished) or
  `RiccatiOptions` (for NLPs with a stage layout, given as `SQPFunction(..., stages=...)`, as `MPCFunction` builds
  them, or detected). The restoration phase's elastic QPs are the Riccati interior point's own (elastic rows) with a
  stage layout, the sparse interior point's with its QPs, else OSQP's with its settings."""
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
  max_soc: int = 1
  """Second-order corrections tried when a full step is rejected with more violation than the point it leaves (the
  Maratos effect: the constraints' curvature, which their linearization misses), each a QP with the same matrices and
  constants g(x + d) - J d (IPOPT's max_soc; 0: none); tried only after an iteration whose step was shortened (far
  from a solution a corrected full step can leave the basin the line search keeps to). On crocoddyl's panda reaching
  OCP one correction took a Gauss-Newton SQP from 102 iterations (60 of them steps of 1/8) to 50, on the cart-pole
  swing-up from 24 to 20 (the same optimum)."""
  verbose: bool = False
  """Print one line per iteration from the generated code."""
  scalar: str = "float64"
  """The type the solver computes in: "float64", or "float32" for targets whose floating-point unit is single
  precision (a Cortex-M4F). A float32 solver is generated from the same (float64) functions, all of its code in
  float32 (anvil.codegen.precision); its tolerances cannot go below float32's rounding: tol is at least
  FLOAT32_TOL (1e-4) and acceptable_tol at least 10x that (also at call time), the QPs' at least 1e3 eps (1.2e-4)
  times their data's scale, and its QPs are solved by the Riccati interior point (QDLDL, which OSQP and the sparse
  interior point factor with, is double only)."""

  def __post_init__(self) -> None:
    for name in ("tol", "acceptable_tol", "max_time", "regularization_min", "regularization_max", "armijo", "backtrack",
                 "min_step"):  # fmt: skip
      check_positive("SQPOptions", name, getattr(self, name))
    check_int("SQPOptions", "max_iter", self.max_iter)
    check_int("SQPOptions", "acceptable_iter", self.acceptable_iter)
    check_int("SQPOptions", "max_soc", self.max_soc, least=0)
    check_bool("SQPOptions", "verbose", self.verbose)
    check_scalar("SQPOptions", self.scalar)
    if not 0 < self.backtrack < 1 or not 0 < self.armijo < 0.5:
      raise ValueError("SQPOptions: backtrack must be in (0, 1) and armijo in (0, 0.5)")
    if self.regularization_min > self.regularization_max:
      raise ValueError("SQPOptions: regularization_min must not exceed regularization_max")
    if self.qp is not None and not isinstance(self.qp, QPOptions):
      raise TypeError(
        f"SQPOptions.qp: expected OSQPOptions, SparseIPMOptions or RiccatiOptions, got {type(self.qp).__name__}"
      )

  @property
  def osqp(self) -> OSQPOptions:
    """The settings of the QPs OSQP solves: `qp` when it is OSQP's, else OSQP's defaults."""
    return self.qp if isinstance(self.qp, OSQPOptions) else OSQPOptions()

  def with_qp(self, qp: QPOptions) -> SQPOptions:
    """These options with the QP solver `qp`."""
    return dataclasses.replace(self, qp=qp)
