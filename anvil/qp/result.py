"""What the QP layer's solvers report: `QPStatus`, and `OCPQPSolution` (a `RiccatiQP` solve)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from anvil.codegen.native import NativeStatus

F64 = NDArray[np.float64]


class QPStatus(NativeStatus):
  """How a QP solve ended (a `str`: `status == "solved"` works). The generated C++ reports it as the code
  `anvil::qp::Status`, the position of the value in this class.

  Attributes:
    solved: to the tolerance asked for.
    max_iterations: the iteration limit was reached first.
    infeasible: the constraints cannot be met.
    nonconvex: the QP is not convex on the null space of its (expected) active constraints.
    numerical_error: NaN/inf, or a factorization failed.
  """

  solved = "solved"
  max_iterations = "max_iterations"
  infeasible = "infeasible"
  nonconvex = "nonconvex"
  numerical_error = "numerical_error"


@dataclass(frozen=True)
class OCPQPSolution:
  """What `RiccatiQP` returns: x (N + 1, nx), u (N, nu), pi (N, nx) (multipliers of the dynamics), lam (N, ng) and
  lamN (ngN,) (row multipliers, positive at an active upper bound; an equality row's free multiplier), status,
  iterations, the final residuals (stationarity, equality, inequality, complementarity), the solve time in seconds
  (measured in the C++) and uN (nuN,), the terminal inputs."""

  x: F64
  u: F64
  pi: F64
  lam: F64
  lamN: F64
  status: QPStatus
  iterations: int
  residuals: tuple[float, float, float, float]
  solve_time: float
  uN: F64 = field(default_factory=lambda: np.zeros(0))
