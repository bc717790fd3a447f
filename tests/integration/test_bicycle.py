"""The kinematic bicycle avoiding a circular obstacle: cold starts of the MPC (Riccati and OSQP QPs) against IPOPT
on the same OCP, both started from a common swerving guess, and a closed loop past the obstacle.

Findings these tests record (default MPCOptions: SQP max_iter 50):
- From the cold guess (x_k = x0, u_k = 0) the first QP is inconsistent: the obstacle's linearization at px = 0 is the
  halfspace px <= ~9.9 m (40 px + py <= 396.25 from (0, 0)), within which the car cannot brake from 12 m/s (it needs
  18 m), so every hard start begins in the restoration phase and, but for the centre-line one, reaches a far detour
  (cost ~1e3-1e4). The optimality phase then starts from zero multipliers (the restoration's price the penalty, not
  the constraints); the obstacle's curvature, -2 lambda I in (px, py), which carry no cost, makes later QPs nonconvex
  along the steps, and the regularized steps (OSQP: up to 100 x I) converge linearly.
- The cold starts of anvil and IPOPT can end in different genuine local optima: from straight_20 anvil's SQP ends in
  a U-turn around the obstacle (cost 1338.46; IPOPT started from perturbations of it returns to it) while IPOPT passes
  above the obstacle (130.00), and the best optimum found passes below (103.93, from `swerve_guess`). From
  speeding_27 anvil's SQP ends in the swerve that `swerve_guess` leads to (877.18). From
  speeding_27 IPOPT's cold start stops with "Infeasible_Problem_Detected" on this feasible problem. There the cold
  result is certified instead by IPOPT started from anvil's solution, and `test_swerve_guess_matches_ipopt` compares
  both from the same informative start.
- The SQP's dual tolerance is relative to max(1, ‖∇f‖∞), which the speed slacks' L1 weight (100) sets to 100 even
  with no slack in use; the weakly weighted steering rates then settle only to ~2e-4 (they agree to 1e-8 with a call
  tol of 1e-10), hence U_ATOL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from anvil.mpc import ClosedLoop, MPCFunction, MPCOptions, MPCSolution, simulate
from anvil.problems import bicycle
from tests.conftest import qp_named

QP_SOLVERS = ("riccati", "osqp")
COST_RTOL = 1e-6
#: the inputs' agreement with IPOPT at the SQP's default tolerance (see the module docstring)
U_ATOL = 5e-4
#: the obstacle is met to the constraint tolerance (clearance² is ~4..1e3)
CLEARANCE_TOL = 1e-6
STEPS = 40
#: How IPOPT's solution to compare a cold start with is found: "cold", started as anvil's cold start (they land in the
#: same local optimum); "anvil", started from anvil's solution, where IPOPT's cold start lands elsewhere (a genuine
#: different local optimum, see the module docstring): IPOPT then certifies anvil's point as a local optimum.
COLD_REFERENCE = {"straight_12": "cold", "straight_20": "anvil", "centre_line_12": "cold", "speeding_27": "anvil"}

#: Cold starts that end "max_iterations" with the default 50 SQP iterations, and why (measured with max_iter=300).
COLD_FAILURES = {
  ("straight_12", "osqp"): "max_iterations: restoration from the inconsistent first QP, then steps damped by a "
  "Hessian regularized by up to 100 x I; it converges in 173 iterations to IPOPT's optimum with max_iter=300",
  ("speeding_27", "osqp"): "max_iterations: 15 restoration iterations whose QPs hit OSQP's iteration cap (the "
  "regularization climbing to 1e8), then 35 at 10 x I whose QP solutions are ADMM's own (the polish fails on a "
  "degenerate active set): linear convergence, primal 7e-6 and dual 1.7 after 50 iterations",
}


def cases() -> list[Any]:
  """(start, qp_solver) pairs, the known failures marked xfail with their diagnosis."""
  out = []
  for qp in QP_SOLVERS:
    for start in bicycle.HARD_STARTS:
      reason = COLD_FAILURES.get((start, qp))
      marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
      out.append(pytest.param(start, qp, marks=marks, id=f"{start}-{qp}"))
  return out


@pytest.fixture(scope="module")
def controllers() -> dict[str, MPCFunction]:
  """The bicycle MPC with each QP solver (built on first call)."""
  return {qp: bicycle.bicycle_mpc(f"test_bicycle_{qp}", MPCOptions(qp=qp_named(qp))) for qp in QP_SOLVERS}


def check_plan(sol: MPCSolution, x0: np.ndarray) -> None:
  """The plan starts at x0, follows the numpy model, keeps its hard bounds and clears the obstacle at every stage."""
  restoration = np.flatnonzero(sol.stats["restoration"]).tolist()
  assert sol.success, f"{sol.message} after {sol.iterations} iterations, restoration at iterations {restoration}"
  np.testing.assert_allclose(sol.x[0], x0, atol=1e-12)
  for k in range(bicycle.HORIZON):
    np.testing.assert_allclose(sol.x[k + 1], bicycle.step_numpy(sol.x[k], sol.u[k]), atol=1e-7)
  _, (u_lo, u_hi) = bicycle.bounds()
  assert np.all(sol.u >= u_lo - 1e-9) and np.all(sol.u <= u_hi + 1e-9)
  assert np.abs(sol.x[:, 4]).max() <= bicycle.DELTA_MAX + 1e-9
  clearance = bicycle.clearance(sol.x.T)
  assert clearance.min() >= bicycle.R_OBS**2 - CLEARANCE_TOL, f"stage {clearance.argmin()} is inside the obstacle"


def check_same_optimum(sol: MPCSolution, ref: bicycle.IpoptSolution) -> None:
  """anvil's cost (slack penalties included) and inputs are IPOPT's."""
  assert ref.success, ref.status
  assert sol.cost == pytest.approx(ref.cost, rel=COST_RTOL), f"anvil {sol.cost!r} vs IPOPT {ref.cost!r}"
  np.testing.assert_allclose(sol.u, ref.u, atol=U_ATOL)


@pytest.mark.parametrize(("start", "qp"), cases())
def test_cold_start_matches_ipopt(controllers: dict[str, MPCFunction], start: str, qp: str) -> None:
  pytest.importorskip("casadi")
  mpc, x0 = controllers[qp], bicycle.HARD_STARTS[start]
  mpc.reset()
  sol = mpc(x0)
  check_plan(sol, x0)
  guess = None if COLD_REFERENCE[start] == "cold" else (sol.x, sol.u)
  check_same_optimum(sol, bicycle.solve_ipopt(x0, guess))


@pytest.mark.parametrize("qp", QP_SOLVERS)
@pytest.mark.parametrize("start", list(bicycle.HARD_STARTS))
def test_swerve_guess_matches_ipopt(controllers: dict[str, MPCFunction], start: str, qp: str) -> None:
  """From the same swerving guess anvil and IPOPT find the same local optimum, passing below the obstacle (with the
  speed slacks in use from speeding_27)."""
  pytest.importorskip("casadi")
  mpc, x0 = controllers[qp], bicycle.HARD_STARTS[start]
  guess = bicycle.swerve_guess(x0)
  mpc.reset()
  mpc.set_guess(*guess)
  sol = mpc(x0)
  check_plan(sol, x0)
  ref = bicycle.solve_ipopt(x0, guess)
  check_same_optimum(sol, ref)
  obstacle_y = bicycle.OBSTACLE[1]
  assert sol.x[:, 1].min() < obstacle_y - bicycle.R_OBS + 0.1, "the plan passes below the obstacle"
  if start == "speeding_27":
    assert ref.slack.max() > 1.0 and sol.x[1, 3] > bicycle.V_MAX, "the soft speed bound is violated at first"


@pytest.fixture(scope="module")
def closed_loop(controllers: dict[str, MPCFunction]) -> Callable[[str], ClosedLoop]:
  """The closed loop from the 12 m/s straight start (40 steps of 0.1 s), run once per QP solver on demand."""
  runs: dict[str, ClosedLoop] = {}

  def run(qp: str) -> ClosedLoop:
    if qp not in runs:
      runs[qp] = simulate(controllers[qp], bicycle.step_numpy, bicycle.HARD_STARTS["straight_12"], STEPS)
    return runs[qp]

  return run


@pytest.mark.parametrize("qp", QP_SOLVERS)
def test_closed_loop_passes_the_obstacle(closed_loop: Callable[[str], ClosedLoop], qp: str) -> None:
  cl = closed_loop(qp)
  clearance = bicycle.clearance(cl.x.T)
  assert clearance.min() >= bicycle.R_OBS**2 - CLEARANCE_TOL, f"step {clearance.argmin()} is inside the obstacle"
  assert cl.x[-1, 0] > bicycle.OBSTACLE[0] + bicycle.R_OBS, "the car is past the obstacle"
  assert abs(cl.x[-1, 1]) < 0.5 and abs(cl.x[-1, 2]) < 0.1, "and back near the reference line"
  assert cl.metrics["max_violation"] == 0.0, "the hard input and steering bounds hold (the speed bound too)"


OSQP_LOOP = (
  "the first 3 calls end max_iterations (50 iterations each, from the cold guess: see COLD_FAILURES); their fallback "
  "input u = 0 lets the car coast for 0.3 s, the 4th call converges in 7 iterations and the others in 1-9"
)


@pytest.mark.parametrize(
  "qp", ["riccati", pytest.param("osqp", marks=pytest.mark.xfail(strict=False, reason=OSQP_LOOP))]
)
def test_closed_loop_has_no_failed_step(closed_loop: Callable[[str], ClosedLoop], qp: str) -> None:
  cl = closed_loop(qp)
  assert all(s in ("converged", "acceptable") for s in cl.statuses), cl.status_counts


def test_real_time_iteration_from_a_converged_plan_passes_the_obstacle(controllers: dict[str, MPCFunction]) -> None:
  """The start MPCOptions.mode documents for a real-time iteration: from the full SQP's converged plan it keeps the
  car outside the obstacle at every step (from the cold guess, a straight line through it, the linearized clearance
  is inconsistent and the elastic steps drive through it)."""
  x0, full = bicycle.HARD_STARTS["straight_12"], controllers["riccati"]
  full.reset()
  plan = full(x0)
  full.reset()
  assert plan.status == "converged"
  rti = bicycle.bicycle_mpc("test_bicycle_rti", MPCOptions(mode="rti"))
  cl = simulate(rti, bicycle.step_numpy, x0, STEPS, guess=(plan.x, plan.u))
  assert cl.failures == 0, cl.status_counts
  assert bicycle.clearance(cl.x.T).min() >= bicycle.R_OBS**2 - CLEARANCE_TOL
  assert cl.x[-1, 0] > bicycle.OBSTACLE[0] + bicycle.R_OBS, "the car is past the obstacle"
  cold = simulate(rti, bicycle.step_numpy, x0, STEPS)
  assert bicycle.clearance(cold.x.T).min() < bicycle.R_OBS**2, "the documented failure from the cold guess"


def test_closed_loop_from_20_m_s_has_no_failed_step(controllers: dict[str, MPCFunction]) -> None:
  """From the 20 m/s straight start the 4th call's warm start failed and its cold restart ended numerical_error: an
  elastic QP (always feasible) reported infeasible, its multipliers blown up. Such a QP is now solved again with more
  regularization, as a nonconvex one is, and the restart converges."""
  mpc = controllers["riccati"]
  mpc.reset()
  cl = simulate(mpc, bicycle.step_numpy, bicycle.HARD_STARTS["straight_20"], 6)
  assert all(s in ("converged", "acceptable") for s in cl.statuses), cl.status_counts
