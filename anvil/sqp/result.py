"""What one SQP solve returns: `SQPStatus` and `SQPResult`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from anvil.codegen.native import NativeStatus

if TYPE_CHECKING:
  from anvil.sqp.sensitivity import Sensitivity


class SQPStatus(NativeStatus):
  """How an SQP solve ended (a `str`: `status == "converged"` works). The generated C++ reports it as the code
  `anvil::sqp::Status`, the position of the value in this class.

  Attributes:
    converged: the KKT conditions hold to the tolerance (`SQPOptions.tol`, or the call's `tol`). Use the solution.
    max_iterations: the iteration limit was reached first (the normal outcome of a real-time iteration). The last
      iterate is returned; warm-start the next solve from it, or allow more iterations.
    infeasible: the constraints are locally infeasible: the feasibility restoration converged to a point of nonzero
      violation, which is returned (the least-violation point; `stats["message"]` names the most violated
      constraint). Check the bounds and constraints named there, or soften them.
    numerical_error: NaN/inf in a function (named in the stats) or a breakdown the solver could not recover from (a
      QP that failed even with the restoration phase). Check the functions near the returned point.
    acceptable: the KKT conditions hold to `SQPOptions.acceptable_tol` only (for acceptable_iter iterations in a row,
      or where the line search stalled or a limit was reached), as IPOPT's "Solved To Acceptable Level". Usually
      fine to use; a tighter solution needs a better scaled problem.
    time_limit: the time limit (`SQPOptions.max_time`, or the call's `max_time`) was reached first; the last iterate
      is returned.
  """

  converged = "converged"
  max_iterations = "max_iterations"
  infeasible = "infeasible"
  numerical_error = "numerical_error"
  acceptable = "acceptable"
  time_limit = "time_limit"


#: The statuses whose solution is a solution.
SUCCESS = frozenset({SQPStatus.converged, SQPStatus.acceptable})


@dataclass(frozen=True)
class SQPResult:
  """The outcome of one `SQPFunction` call.

  Attributes:
    x: the last iterate.
    f: the objective there.
    lam_g: constraint multipliers (positive at an active upper bound, negative at an active lower bound).
    lam_x: bound multipliers, same sign convention.
    status: an SQPStatus: "converged", "acceptable", "max_iterations", "time_limit", "infeasible" or
      "numerical_error".
    iterations: SQP iterations taken.
    stats: per-iteration history (arrays over iterations: objective, primal_infeasibility, dual_infeasibility,
      step, regularization, complementarity, qp_iterations, restoration (bool: a feasibility restoration step);
      qp_status: a tuple of QPStatus), the QP solvers that ran (qp_solver, elastic_qp_solver: "osqp",
      "sparse_ipm" or "riccati"), seconds spent (time_evaluation, time_qp_update, time_qp_solve, time_line_search)
      plus diagnostics (`message`, and for failures the most violated constraints and, for a NaN/inf, the function
      and output index that produced it).
  """

  x: NDArray[np.float64]
  f: float
  lam_g: NDArray[np.float64]
  lam_x: NDArray[np.float64]
  status: SQPStatus
  iterations: int
  stats: dict[str, Any] = field(repr=False)
  at_solution: Callable[[], Sensitivity] | None = field(default=None, repr=False, compare=False)

  @property
  def success(self) -> bool:
    """True when the solver converged, to the tolerance or to the acceptable level."""
    return self.status in SUCCESS

  def sensitivity(self, wrt: str = "p") -> Sensitivity:
    """The derivatives of this solution with respect to the parameter (`wrt="p"`): dx/dp, dλ/dp from the KKT system
    at the solution (`anvil.sqp.sensitivity`: exact Hessian, strict complementarity reported by `.strict`). A
    ValueError unless the solve succeeded."""
    if wrt != "p":
      raise ValueError(f"sensitivity: wrt must be 'p' (the NLP's parameter), got {wrt!r}")
    if not self.success or self.at_solution is None:
      raise ValueError(f"sensitivity: the solve ended {self.status}; sensitivities are those of a solution")
    return self.at_solution()
