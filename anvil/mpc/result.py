"""`MPCSolution`: what one controller call returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil.sqp.result import SQPStatus


@dataclass(frozen=True)
class MPCSolution:
  """The outcome of one `MPCFunction` call.

  Attributes:
    x: predicted states, (N + 1, nx); x[0] is the measured state.
    u: planned inputs, (N, nu); apply u0 = u[0].
    status: the SQP's status (an SQPStatus): "converged", "max_iterations", "infeasible" or "numerical_error".
    iterations: SQP iterations taken.
    cost: the OCP's optimal cost (slack penalties included).
    solve_time: seconds spent in the generated C++ call.
    real_time_iteration: True when the controller runs one SQP iteration per call (then "max_iterations" is the
      normal outcome).
    stats: the SQP's per-iteration history and diagnostics (see `SQPResult.stats`).
  """

  x: NDArray[np.float64]
  u: NDArray[np.float64]
  status: SQPStatus
  iterations: int
  cost: float
  solve_time: float
  real_time_iteration: bool = False
  stats: dict[str, Any] = field(default_factory=dict, repr=False)

  @property
  def u0(self) -> NDArray[np.float64]:
    """The input to apply now, u[0]."""
    return self.u[0]

  @property
  def success(self) -> bool:
    """True when the SQP converged (in real-time-iteration mode: when its one iteration completed)."""
    return self.status == SQPStatus.converged or (self.real_time_iteration and self.status == SQPStatus.max_iterations)
