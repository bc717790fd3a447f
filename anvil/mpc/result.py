"""`MPCSolution`: what one controller call returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil.sqp.result import SUCCESS, SQPStatus
from anvil.sqp.sensitivity import Sensitivity

#: What a call's plan is (anvil::mpc::Stats::fallback): the SQP's solution, the previous plan shifted by one stage
#: with its inputs clipped to their bounds, or the least-violation solution of an infeasible OCP.
FALLBACKS = ("none", "shifted", "least_violation")


def succeeded(status: SQPStatus, real_time_iteration: bool) -> bool:
  """Whether a controller call ending with `status` succeeded: the SQP converged or reached the acceptable level, or
  (a real-time iteration) its one iteration completed."""
  return status in SUCCESS or (real_time_iteration and status == SQPStatus.max_iterations)


@dataclass(frozen=True)
class MPCSolution:
  """The outcome of one `MPCFunction` call.

  Attributes:
    x: predicted states, (N + 1, nx); x[0] is the measured state.
    u: planned inputs, (N, nu); apply u0 = u[0].
    status: the SQP's status (an SQPStatus): "converged", "acceptable", "max_iterations", "time_limit",
      "infeasible" or "numerical_error" (see SQPStatus for what each means and what to do).
    iterations: SQP iterations taken (both solves' when a failed warm start restarted cold).
    cost: the OCP's optimal cost (slack penalties included).
    solve_time: seconds spent in the generated C++ call.
    real_time_iteration: True when the controller runs one SQP iteration per call (then "max_iterations" is the
      normal outcome; "converged", 0 iterations: the shifted guess already solved the problem, no QP was needed).
    stats: the SQP's per-iteration history and diagnostics (see `SQPResult.stats`; of the cold solve when the call
      restarted cold, `stats["restarted_cold"]`).
    fallback: what x and u are when the SQP did not succeed: "none" (the SQP's solution), "least_violation" (status
      "infeasible": the trajectory that violates the constraints least, inputs within their bounds) or "shifted"
      (the call's initial guess: the previous plan shifted by one stage, or the cold guess after a reset, with its
      inputs clipped to their bounds). u0 is usable in every case.
    at_solution: the sensitivity of a converged full-SQP call's NLP solution, computed when called (None otherwise);
      nlp_sizes: the NLP's states per stage and parameters per stage (where u_0 and p sit in it).
    x_scenarios, u_scenarios: with scenarios (multi-stage robust MPC), every branch's states (branches, N + 1, nx) and
      inputs (branches, N, nu), branch by branch (x and u are the first's; u_scenarios[:, 0] all equal u0); else
      None.
  """

  x: NDArray[np.float64]
  u: NDArray[np.float64]
  status: SQPStatus
  iterations: int
  cost: float
  solve_time: float
  real_time_iteration: bool = False
  stats: dict[str, Any] = field(default_factory=dict, repr=False)
  fallback: str = "none"
  at_solution: Callable[[], Sensitivity] | None = field(default=None, repr=False, compare=False)
  nlp_sizes: tuple[int, int] = field(default=(0, 0), repr=False, compare=False)
  x_scenarios: NDArray[np.float64] | None = field(default=None, repr=False, compare=False)
  u_scenarios: NDArray[np.float64] | None = field(default=None, repr=False, compare=False)

  @property
  def u0(self) -> NDArray[np.float64]:
    """The input to apply now, u[0]."""
    return self.u[0]

  @property
  def message(self) -> str:
    """How the call ended, in the OCP's terms: the status, and for a failure the most violated bound or constraint
    ("x_bounds: x[0] at stage 7 is 3, upper bound 2") or the function that returned NaN/inf."""
    return str(self.stats.get("message", self.status))

  @property
  def success(self) -> bool:
    """True when the SQP converged or reached the acceptable level (in real-time-iteration mode: when its one
    iteration completed)."""
    return succeeded(self.status, self.real_time_iteration)

  def sensitivity(self) -> Sensitivity:
    """The derivatives of the OCP's NLP solution (w = [x_0, u_0, ..., x_N, slacks]) with respect to its parameter
    [x0; p_0 ... p_N; tuning] (`anvil.sqp.sensitivity`: from the KKT system at the solution, exact Hessian; the
    first use builds the derivatives it needs). A ValueError unless the call was a full-SQP solve that succeeded."""
    if self.at_solution is None:
      raise ValueError(f"sensitivity: this call ended {self.status} (fallback {self.fallback!r}"
                       f"{', real-time iteration' if self.real_time_iteration else ''}); sensitivities are those of a "
                       "converged full-SQP solution")  # fmt: skip
    return self.at_solution()

  def du0_dx0(self) -> NDArray[np.float64]:
    """∂u0/∂x0 (nu, nx): how the applied input moves with the measured state (the MPC's local feedback gain)."""
    nx_nlp, nu, nx = self.nlp_sizes[0], self.u.shape[1], self.x.shape[1]
    return self.sensitivity().x[nx_nlp : nx_nlp + nu, :nx]

  def du0_dp(self, per_stage: bool = False) -> NDArray[np.float64]:
    """∂u0/∂p: (nu, np) for a parameter shared by every stage (the sum over the stages), or with per_stage (nu, N + 1,
    np), the derivative with respect to each stage's p_k."""
    (nx_nlp, n_p), N, nu = self.nlp_sizes, self.u.shape[0], self.u.shape[1]
    per = self.sensitivity().x[nx_nlp : nx_nlp + nu, nx_nlp : nx_nlp + (N + 1) * n_p].reshape(nu, N + 1, n_p)
    return per if per_stage else per.sum(axis=1)


@dataclass(frozen=True)
class MHEEstimate:
  """The outcome of one `MHEFunction` call.

  Attributes:
    x_hat: the current state estimate (nx,): the window's last state.
    x: the window's states, (k, nx), oldest first (k: the call's measurements).
    w: the window's process noise, (k - 1, nx): x[j + 1] = F(x[j], u[j], p[j]) + w[j].
    status: the SQP's status on the window's OCP (an SQPStatus, as MPCSolution's).
    iterations: SQP iterations taken.
    cost: the window's optimal cost (arrival, noise and measurement terms).
    solve_time: seconds spent in the generated C++ call.
    stats: the SQP's per-iteration history and diagnostics (see `SQPResult.stats`).
    fallback: what x is when the SQP did not succeed (as MPCSolution's).
  """

  x_hat: NDArray[np.float64]
  x: NDArray[np.float64]
  w: NDArray[np.float64]
  status: SQPStatus
  iterations: int
  cost: float
  solve_time: float
  stats: dict[str, Any] = field(default_factory=dict, repr=False)
  fallback: str = "none"

  @property
  def success(self) -> bool:
    """True when the SQP converged or reached the acceptable level."""
    return succeeded(self.status, False)

  @property
  def message(self) -> str:
    """How the call ended (the status, or for a failure its diagnosis)."""
    return str(self.stats.get("message", self.status))
