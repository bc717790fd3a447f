"""What one SQP solve returns: `SQPStatus` and `SQPResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil.codegen.native import NativeStatus


class SQPStatus(NativeStatus):
  """How an SQP solve ended (a `str`: `status == "converged"` works). The generated C++ reports it as the code
  `anvil::sqp::Status`, the position of the value in this class.

  Attributes:
    converged: the KKT conditions hold to `SQPOptions.tol`.
    max_iterations: the iteration limit was reached first (the normal outcome of a real-time iteration).
    infeasible: the constraints are (locally) infeasible: no step reduces their violation.
    numerical_error: NaN/inf in a function (named in the stats), a QP that could not be solved, or a line search that
      found no acceptable step.
  """

  converged = "converged"
  max_iterations = "max_iterations"
  infeasible = "infeasible"
  numerical_error = "numerical_error"


@dataclass(frozen=True)
class SQPResult:
  """The outcome of one `SQPFunction` call.

  Attributes:
    x: the last iterate.
    f: the objective there.
    lam_g: constraint multipliers (positive at an active upper bound, negative at an active lower bound).
    lam_x: bound multipliers, same sign convention.
    status: an SQPStatus: "converged", "max_iterations", "infeasible" or "numerical_error".
    iterations: SQP iterations taken.
    stats: per-iteration history (arrays over iterations: objective, primal_infeasibility, dual_infeasibility,
      step, regularization, complementarity, qp_iterations; qp_status: a tuple of QPStatus), seconds spent
      (time_evaluation, time_qp_update, time_qp_solve, time_line_search) plus diagnostics (`message`, and for
      failures the most violated constraints and, for a NaN/inf, the function and output index that produced it).
  """

  x: NDArray[np.float64]
  f: float
  lam_g: NDArray[np.float64]
  lam_x: NDArray[np.float64]
  status: SQPStatus
  iterations: int
  stats: dict[str, Any] = field(repr=False)

  @property
  def success(self) -> bool:
    """True only when the solver converged."""
    return self.status == "converged"
