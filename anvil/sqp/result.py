"""`SQPResult`: what one solve returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class SQPResult:
  """The outcome of one `SQPFunction` call.

  Attributes:
    x: the last iterate.
    f: the objective there.
    lam_g: constraint multipliers (positive at an active upper bound, negative at an active lower bound).
    lam_x: bound multipliers, same sign convention.
    status: "converged", "max_iterations", "infeasible" or "numerical_error".
    iterations: SQP iterations taken.
    stats: per-iteration history (arrays over iterations: objective, primal_infeasibility, dual_infeasibility,
      step, regularization, complementarity, qp_iterations, qp_status), seconds spent (time_evaluation, time_qp_update,
      time_qp_solve, time_line_search) plus diagnostics (`message`, and for failures the most
      violated constraints and, for a NaN/inf, the function and output index that produced it).
  """

  x: NDArray[np.float64]
  f: float
  lam_g: NDArray[np.float64]
  lam_x: NDArray[np.float64]
  status: str
  iterations: int
  stats: dict[str, Any] = field(repr=False)

  @property
  def success(self) -> bool:
    """True only when the solver converged."""
    return self.status == "converged"
