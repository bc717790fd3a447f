"""MPCFunction: the P2 closed-loop references, call-time parameters and bounds, soft constraints, Gauss-Newton, RTI,
errors; checked against CasADi IPOPT on the same OCPs and against numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import anvil as av
from anvil import Arg, Tensor
from anvil.ad import constant_jacobian
from anvil.mpc import ClosedLoop, LeastSquares, MPCFunction, MPCOptions, Soft, euler, rk4, simulate
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from anvil.problems.backend import TINYGRAD
from anvil.qp import OSQPOptions, RiccatiOptions
from anvil.sqp import SQPStatus
from tests.conftest import qp_named, stabilizing_cartpole

N_SMALL = 10
INF = np.inf
# the SQP stops at scaled KKT residuals <= 1e-8 (its QP solutions are polished to exact active-set solutions); inputs
# agree with IPOPT at tol 1e-12 to this tolerance
U_ATOL = 1e-6


@pytest.mark.parametrize("qp_solver", ["riccati", "osqp"])
def test_p2_stabilizing_closed_loop_reference(qp_solver: str) -> None:
  stabilizing = cm.stabilizing(f"test_mpc_stab_{qp_solver}", MPCOptions(qp=qp_named(qp_solver)))
  cl = simulate(stabilizing, cartpole.step_numpy, cm.X0_STABILIZE, cm.STEPS_STABILIZE)
  assert cl.cost == pytest.approx(cm.COST_STABILIZE, rel=1e-5)
  assert np.linalg.norm(cl.x[-1]) < 1e-5
  assert cl.status_counts == {"converged": cm.STEPS_STABILIZE} and cl.failures == 0
  assert cl.metrics["max_violation"] == 0.0 and cl.solve_times.shape == (cm.STEPS_STABILIZE,)
  np.testing.assert_allclose(cl.stage_costs[0], cm.X0_STABILIZE @ cartpole.Q @ cm.X0_STABILIZE
                             + cartpole.R * cl.u[0] @ cl.u[0], rtol=1e-14)  # fmt: skip


def casadi_ocp(
  x0: np.ndarray,
  n: int,
  x_ref: np.ndarray | None = None,
  u_max: float = 20.0,
  soft_xc: tuple[float, ...] = (),
  tip_max: float | None = None,
) -> np.ndarray:
  """The P2 OCP (stage cost (x - r)ᵀQ(x - r) + R u², terminal 10 Q, |u| <= u_max, |xc| <= 2) solved by IPOPT; with
  soft_xc = (bound, l1, l2) the cart position of x_1..x_N is instead kept in ±bound by slacks costing l1 s + l2 s²;
  with tip_max the pole tip xc + 0.5 sin(theta) stays in ±tip_max at stages 0..n-1 and theta_N = 0. Returns the
  optimal inputs."""
  ca = pytest.importorskip("casadi")
  from anvil.problems.backend import casadi_backend

  b = casadi_backend(ca)
  refs = np.zeros((n + 1, 4)) if x_ref is None else x_ref
  X, U, S = ca.SX.sym("X", 4, n + 1), ca.SX.sym("U", 1, n), ca.SX.sym("S", n if soft_xc else 0)
  J, g, lbg, ubg = 0, [X[:, 0] - x0], [0.0] * 4, [0.0] * 4
  for k in range(n):
    e = X[:, k] - refs[k]
    J += ca.dot(e, ca.DM(cartpole.Q) @ e) + cartpole.R * U[0, k] ** 2
    g.append(X[:, k + 1] - cartpole.step(X[:, k], U[:, k], b))
    lbg, ubg = lbg + [0.0] * 4, ubg + [0.0] * 4
  e = X[:, n] - refs[n]
  J += 10 * ca.dot(e, ca.DM(cartpole.Q) @ e)
  if tip_max is not None:
    g += [X[0, :n].T + 0.5 * ca.sin(X[1, :n].T), X[1, n]]
    lbg, ubg = lbg + [-tip_max] * n + [0.0], ubg + [tip_max] * n + [0.0]
  if soft_xc:
    bound, l1, l2 = soft_xc
    J += l1 * ca.sum1(S) + l2 * ca.sumsqr(S)
    g += [X[0, 1:].T + S, X[0, 1:].T - S]
    lbg, ubg = lbg + [-bound] * n + [-INF] * n, ubg + [INF] * n + [bound] * n
  w = ca.vertcat(ca.vec(X), ca.vec(U), S)
  xc_max = INF if soft_xc else 2.0
  lbw = np.concatenate([np.tile([-xc_max, -INF, -INF, -INF], n + 1), np.full(n, -u_max), np.zeros(S.shape[0])])
  ubw = np.concatenate([-lbw[: 5 * n + 4], np.full(S.shape[0], INF)])
  solver = ca.nlpsol("s", "ipopt", {"x": w, "f": J, "g": ca.vertcat(*g)},
                     {"ipopt.print_level": 0, "print_time": 0, "ipopt.tol": 1e-12})  # fmt: skip
  res = solver(x0=np.zeros(w.shape[0]), lbx=lbw, ubx=ubw, lbg=lbg, ubg=ubg)
  assert solver.stats()["success"]
  return np.array(res["x"]).reshape(-1)[4 * (n + 1) : 4 * (n + 1) + n]


@pytest.fixture(scope="module")
def tracking() -> MPCFunction:
  """Cart-pole tracking a per-stage reference state passed as the parameter p_k (np = 4)."""
  Q = Tensor(np.diag(cartpole.Q).copy())
  F = cm.dynamics("test_mpc_trk_F")
  track = lambda x, u, r: ((x - r) * (x - r) * Q).sum() + cartpole.R * (u * u).sum()
  cost = av.NumericalFunction("test_mpc_trk_l", track, (Arg(4), Arg(1), Arg(4)))
  lN = av.NumericalFunction("test_mpc_trk_lN", lambda x, r: 10 * ((x - r) * (x - r) * Q).sum(), (Arg(4), Arg(4)))
  x_bounds, u_bounds = cm.bounds()
  return MPCFunction("test_mpc_trk", F, cost, lN, horizon=N_SMALL, x_bounds=x_bounds, u_bounds=u_bounds)


def test_per_stage_references_match_ipopt(tracking: MPCFunction) -> None:
  x0 = np.array([0.3, -0.2, 0.1, 0.0])
  refs = np.zeros((N_SMALL + 1, 4))
  refs[:, 0] = np.linspace(0.0, 1.0, N_SMALL + 1)
  tracking.reset()
  sol = tracking(x0, refs)
  assert sol.success and sol.x.shape == (N_SMALL + 1, 4) and sol.u.shape == (N_SMALL, 1)
  np.testing.assert_allclose(sol.u[:, 0], casadi_ocp(x0, N_SMALL, refs), atol=U_ATOL)
  np.testing.assert_allclose(sol.x[0], x0, atol=1e-8)
  for k in range(N_SMALL):  # the predicted trajectory obeys the model
    np.testing.assert_allclose(sol.x[k + 1], cartpole.step_numpy(sol.x[k], sol.u[k]), atol=1e-8)
  shared = tracking(x0, np.array([0.5, 0.0, 0.0, 0.0]))
  per_stage = tracking(x0, np.tile([0.5, 0.0, 0.0, 0.0], (N_SMALL + 1, 1)))
  np.testing.assert_allclose(shared.u, per_stage.u, atol=U_ATOL)
  assert not np.allclose(shared.u, sol.u, atol=1e-3)


def test_call_time_bounds_replace_defaults_for_one_call(tracking: MPCFunction) -> None:
  x0, p = np.array([0.0, 0.5, 0.0, 0.0]), np.zeros(4)
  tracking.reset()
  free = tracking(x0, p)
  assert np.abs(free.u).max() > 3.0
  tight = tracking(x0, p, u_bounds=([-3.0], [3.0]))
  assert tight.success and np.abs(tight.u).max() <= 3.0 + 1e-7
  # NOTE: u_8 sits on its bound with a tiny multiplier (~1e-4): the interior point stops 1e-6 inside it (objective
  # effect < 1e-10, within the KKT tolerance), which moves the weakly coupled last input by a few 1e-6
  np.testing.assert_allclose(tight.u[:, 0], casadi_ocp(x0, N_SMALL, u_max=3.0), atol=5 * U_ATOL)
  again = tracking(x0, p)
  np.testing.assert_allclose(again.u, free.u, atol=U_ATOL)
  stage_wise = np.full((N_SMALL, 1), 20.0)
  stage_wise[0] = 1.0
  first = tracking(x0, p, u_bounds=(-stage_wise, stage_wise))
  assert abs(first.u0[0]) <= 1.0 + 1e-7 and np.abs(first.u[1:]).max() > 1.0


def test_path_and_terminal_constraints_match_ipopt() -> None:
  tip = av.NumericalFunction("test_mpc_tip", lambda x, u: (x[0] + 0.5 * x[1].sin()).reshape(1), (Arg(4), Arg(1)))
  upright = av.NumericalFunction("test_mpc_upright", lambda x: x[1:2] * 1.0, (Arg(4),))
  x_bounds, u_bounds = cm.bounds()
  mpc = MPCFunction("test_mpc_tipc", cm.dynamics("test_mpc_tipc_F"), cm.stage_cost("test_mpc_tipc_l"),
                    cm.terminal_cost("test_mpc_tipc_lN"), horizon=N_SMALL, x_bounds=x_bounds, u_bounds=u_bounds,
                    constraints=(tip, ([-0.2], [0.2])), terminal_constraints=upright,
                    terminal_constraint_bounds=([0.0], [0.0]))  # fmt: skip
  x0 = np.array([0.0, 0.3, 0.0, 0.0])
  sol = mpc(x0)
  assert sol.success
  tips = sol.x[:N_SMALL, 0] + 0.5 * np.sin(sol.x[:N_SMALL, 1])
  assert np.abs(tips).max() <= 0.2 + 1e-8 and abs(sol.x[N_SMALL, 1]) <= 1e-8
  assert np.abs(tips).max() > 0.2 - 1e-6, "the tip constraint is active somewhere (else this test shows nothing)"
  np.testing.assert_allclose(sol.u[:, 0], casadi_ocp(x0, N_SMALL, tip_max=0.2), rtol=1e-6, atol=U_ATOL)
  loose = mpc(x0, constraint_bounds=([-1.0], [1.0]))  # bounds of the path constraints are call-time too
  np.testing.assert_allclose(loose.u[:, 0], casadi_ocp(x0, N_SMALL, tip_max=1.0), rtol=1e-6, atol=U_ATOL)


def test_warm_start_and_guess(tracking: MPCFunction) -> None:
  x0, p = np.array([0.2, 0.1, 0.0, 0.0]), np.zeros(4)
  tracking.reset()
  cold = tracking(x0, p)
  warm = tracking(x0, p)  # the shifted previous solution
  np.testing.assert_allclose(warm.u, cold.u, atol=U_ATOL)
  tracking.set_guess(cold.x, cold.u)
  exact = tracking(x0, p)
  assert exact.success and exact.iterations <= cold.iterations
  np.testing.assert_allclose(exact.u, cold.u, atol=U_ATOL)
  with pytest.raises(ValueError, match="x guess"):
    tracking.set_guess(np.zeros((3, 4)), cold.u)


def test_gauss_newton_hessian_and_closed_loop() -> None:
  r = av.NumericalFunction("test_mpc_gn_r", lambda x, u: x.cat(u), (Arg(4), Arg(1)))
  rN = av.NumericalFunction("test_mpc_gn_rN", lambda x: x * 1.0, (Arg(4),))
  weight = np.concatenate([np.diag(cartpole.Q), [cartpole.R]])
  x_bounds, u_bounds = cm.bounds()
  mpc = MPCFunction("test_mpc_gn", cm.dynamics("test_mpc_gn_F"), LeastSquares(r, weight),
                    LeastSquares(rN, 10 * np.diag(cartpole.Q)), horizon=30, x_bounds=x_bounds, u_bounds=u_bounds,
                    options=MPCOptions(hessian="gauss_newton"))  # fmt: skip
  # the Gauss-Newton Hessian of these linear residuals is exactly 2 blockdiag(W, ..., W, W_N)
  w = np.random.default_rng(0).normal(size=mpc.ocp.nw)
  H = mpc.sqp.hessian(w, mpc.ocp.parameter(np.zeros(4)), np.ones(1), np.zeros(mpc.ocp.ng)).toarray()
  expected = 2 * np.diag(np.concatenate([np.tile(weight, 30), 10 * np.diag(cartpole.Q)]))
  np.testing.assert_allclose(H, np.triu(expected), atol=1e-14)
  cl = simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, cm.STEPS_STABILIZE)
  assert cl.cost == pytest.approx(cm.COST_STABILIZE, rel=1e-5) and cl.failures == 0
  # its real-time iteration: the PSD Gauss-Newton QP is loaded without an inertia test, and tracks the full SQP
  options = MPCOptions(hessian="gauss_newton", mode="rti")
  rti = MPCFunction("test_mpc_gn_rti", mpc.ocp.dynamics, mpc.ocp.stage_cost, mpc.ocp.terminal_cost, horizon=30,
                    x_bounds=x_bounds, u_bounds=u_bounds, options=options)  # fmt: skip
  assert rti.sqp.convex_hessian
  cl_rti = simulate(rti, cartpole.step_numpy, cm.X0_STABILIZE, cm.STEPS_STABILIZE)
  assert cl_rti.failures == 0 and cl_rti.cost == pytest.approx(cl.cost, rel=1e-2)
  assert np.linalg.norm(cl_rti.x[-1]) < 1e-3


def test_gauss_newton_hessian_of_curved_residuals_follows_the_point() -> None:
  """Residuals that are not affine keep their Hessian evaluated at w: 2 J(w)' W J(w), here diag(2 W cos²(x), 2 R)."""
  r = av.NumericalFunction("test_mpc_gn_sin_r", lambda x, u: x.sin().cat(u), (Arg(4), Arg(1)))
  weight = np.concatenate([np.diag(cartpole.Q), [cartpole.R]])
  assert constant_jacobian(r, 0) is None and constant_jacobian(r, 1) is not None
  mpc = MPCFunction("test_mpc_gn_sin", cm.dynamics("test_mpc_gn_F"), LeastSquares(r, weight), horizon=5,
                    options=MPCOptions(hessian="gauss_newton"))  # fmt: skip
  w = np.random.default_rng(1).normal(size=mpc.ocp.nw)
  H = mpc.sqp.hessian(w, mpc.ocp.parameter(np.zeros(4)), np.ones(1), np.zeros(mpc.ocp.ng)).toarray()
  stages = w[: 5 * 5].reshape(5, 5)
  scale = np.concatenate([np.cos(stages[:, :4]) ** 2, np.ones((5, 1))], axis=1).ravel()
  expected = np.diag(np.concatenate([2 * np.tile(weight, 5) * scale, np.zeros(4)]))
  np.testing.assert_allclose(H, expected, atol=1e-13)


def test_real_time_iteration() -> None:
  mpc = cm.stabilizing("test_mpc_rti", MPCOptions(mode="rti"))
  cl = simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, 100)
  assert set(cl.iterations.tolist()) <= {0, 1} and cl.failures == 0  # 0: the shifted guess was already optimal
  assert np.linalg.norm(cl.x[-1]) < 1e-3
  # one iteration per step from the shifted solution tracks the fully converged closed loop closely
  full = simulate(stabilizing_cartpole(), cartpole.step_numpy, cm.X0_STABILIZE, 100)
  assert cl.cost == pytest.approx(full.cost, rel=1e-2)
  # the preparation/feedback split (prepare() while waiting for the state) computes the same closed loop
  mpc.reset()
  x, xs = cm.X0_STABILIZE.copy(), []
  for _ in range(100):
    sol = mpc(x)
    assert sol.success and sol.real_time_iteration
    x = cartpole.step_numpy(x, sol.u0)
    xs.append(x)
    assert mpc.prepare() == "converged"
  np.testing.assert_allclose(np.array(xs), cl.x[1:], atol=1e-10)


def test_real_time_iteration_at_a_solution_solves_no_qp() -> None:
  """Where the linearization point already solves the new problem to the tolerance (the equilibrium; a plant that
  came to rest along the plan), the feedback returns it as a full SQP would at its first iterate: converged, no QP
  and no step, the plan that solution (the tolerance: the call's)."""
  mpc = cm.stabilizing("test_mpc_rti", MPCOptions(mode="rti"))
  sol = mpc(np.zeros(4))
  assert (sol.status, sol.iterations, int(np.sum(sol.stats["qp_iterations"]))) == ("converged", 0, 0)
  np.testing.assert_array_equal(sol.u, 0.0)
  mpc.reset()
  cl = simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, 200)
  resting = np.flatnonzero(cl.iterations == 0)
  assert resting.size > 20 and resting.min() > 100  # the swing's steps all take their QP step
  assert all(cl.statuses[t] == "converged" for t in resting)
  full = stabilizing_cartpole()
  for t in resting[::10]:
    np.testing.assert_allclose(cl.u[t], full(cl.x[t]).u0, atol=1e-6)
  # the call's tolerance decides: held to a tighter one, the same resting guess takes its QP step
  x = cartpole.step_numpy(cl.x[-1], cl.u[-1])
  assert mpc(x, tol=1e-15).iterations == 1


@pytest.mark.parametrize("mode", ["sqp", "rti"])
def test_a_receding_horizon_starts_its_first_qp_warm(mode: str) -> None:
  """A call from the previous solution shifted starts its first QP from the previous call's last QP solution, shifted
  alike (the Riccati interior point's multipliers and slacks, one stage earlier): fewer iterations than the same
  controller's first QP when every call starts cold (reset before each), and the same plan where the SQP converges."""
  options = MPCOptions(mode=mode)
  mpc, cold = cm.stabilizing(f"test_mpc_shift_{mode}", options), cm.stabilizing(f"test_mpc_shift_{mode}", options)
  x, warm_first, cold_first = cm.X0_STABILIZE.copy(), [], []
  for _ in range(15):
    sol = mpc(x)
    cold.reset()
    reference = cold(x)
    warm_first.append(int(sol.stats["qp_iterations"][0]))
    cold_first.append(int(reference.stats["qp_iterations"][0]))
    if mode == "sqp":
      np.testing.assert_allclose(sol.u, reference.u, atol=U_ATOL)
    x = cartpole.step_numpy(x, sol.u0)
  assert warm_first[0] == cold_first[0], "the first call has nothing to start from"
  assert np.mean(warm_first[1:]) < np.mean(cold_first[1:]), (warm_first, cold_first)


def test_real_time_iteration_without_warm_start_prepares_nothing() -> None:
  """Without a warm start the next guess depends on the next state: prepare() is a no-op (it used to dereference
  the absent state and crash the process), and each call prepares at its own cold guess."""
  mpc = cm.stabilizing("test_mpc_rti_cold", MPCOptions(mode="rti", warm_start=False), horizon=10)
  first = mpc(cm.X0_STABILIZE)
  assert first.success
  assert mpc.prepare() == "converged"
  again = mpc(cm.X0_STABILIZE)
  assert again.success
  np.testing.assert_allclose(again.u, first.u, atol=1e-12)  # both start cold from the same state


SOFT = Soft(indices=(0,), l1=10.0, l2=10.0)


@pytest.fixture(scope="module", params=["osqp", "riccati"])
def narrow(request: pytest.FixtureRequest) -> dict[str, MPCFunction]:
  """|xc| <= 0.1 as a hard bound and softened (L1 + L2 penalty on x_1 .. x_N), with each QP solver (the Riccati QP
  eliminates the slacks: their rows are elastic, x_N's too; OSQP keeps them as variables)."""
  u_bounds = (np.array([-20.0]), np.array([20.0]))
  x_hi = np.array([0.1, INF, INF, INF])
  options = MPCOptions(qp=qp_named(request.param))
  make = lambda name, soft: MPCFunction(name, cm.dynamics(f"{name}_F"), cm.stage_cost(f"{name}_l"),
                                        cm.terminal_cost(f"{name}_lN"), horizon=N_SMALL, x_bounds=(-x_hi, x_hi),
                                        u_bounds=u_bounds, soft=soft, options=options)  # fmt: skip
  soft = make(f"test_mpc_soft_{request.param}", {"x": SOFT, "x_terminal": SOFT})
  return {"hard": make(f"test_mpc_hard_{request.param}", None), "soft": soft}


def test_soft_bounds_make_an_infeasible_problem_solvable(narrow: dict[str, MPCFunction]) -> None:
  hard, soft = narrow["hard"], narrow["soft"]
  assert soft.ocp.ns == N_SMALL  # x_1 .. x_N
  # x_1 = xc_0 + 0.05 v_0 + O(0.05² |u|max) > 0.1 whatever the input: the hard problem is infeasible
  moving = np.array([0.0, 0.0, 4.0, 0.0])
  hard.reset(), soft.reset()
  infeasible, relaxed = hard(moving), soft(moving)
  assert not infeasible.success and infeasible.status != "converged"
  assert relaxed.success and relaxed.x[1:, 0].max() > 0.1
  np.testing.assert_allclose(relaxed.u[:, 0], casadi_ocp(moving, N_SMALL, soft_xc=(0.1, SOFT.l1, SOFT.l2)),
                             atol=U_ATOL)  # fmt: skip
  for k in range(N_SMALL):
    np.testing.assert_allclose(relaxed.x[k + 1], cartpole.step_numpy(relaxed.x[k], relaxed.u[k]), atol=1e-8)


def test_soft_x_covers_the_terminal_state_unless_it_has_bounds_of_its_own(narrow: dict[str, MPCFunction]) -> None:
  soft = narrow["soft"]  # {"x": SOFT, "x_terminal": SOFT}
  x_hi = np.array([0.1, INF, INF, INF])
  make = lambda name, **kw: MPCFunction(name, soft.ocp.dynamics, soft.ocp.stage_cost, soft.ocp.terminal_cost,
                                        horizon=N_SMALL, x_bounds=(-x_hi, x_hi), u_bounds=([-20.0], [20.0]),
                                        soft={"x": SOFT}, options=soft.options, **kw)  # fmt: skip
  alone = make(f"{soft.name}_x_only")
  assert alone.ocp.soft_entries == soft.ocp.soft_entries  # x_N's bound (x_bounds' last row) is softened too
  moving = np.array([0.0, 0.0, 4.0, 0.0])
  alone.reset(), soft.reset()
  np.testing.assert_allclose(alone(moving).u, soft(moving).u, atol=1e-10)
  # x_N with bounds of its own keeps them hard unless "x_terminal" softens them
  apart = make(f"{soft.name}_x_apart", x_terminal_bounds=(-x_hi, x_hi))
  assert apart.ocp.ns == N_SMALL - 1 and all(e.stage < N_SMALL for e in apart.ocp.soft_entries)


def least_violation_plan(x0: np.ndarray, n: int, xc_max: float) -> np.ndarray:
  """The least-violation states of the narrow OCP, by IPOPT: casadi_ocp with |xc| <= xc_max on x_1..x_N softened at
  1e6 per unit of violation (the P2 cost only breaks ties), its inputs rolled out with the numpy model."""
  us, xs = casadi_ocp(x0, n, soft_xc=(xc_max, 1e6, 0.0)), [x0]
  for k in range(n):
    xs.append(cartpole.step_numpy(xs[-1], us[k : k + 1]))
  return np.array(xs)


@pytest.mark.parametrize("x0", [[0.0, 0.0, 4.0, 0.0], [0.5, 0.0, 0.0, 0.0]], ids=["4m/s", "outside"])
def test_an_infeasible_call_returns_the_least_violation_plan_and_the_next_recovers(
  narrow: dict[str, MPCFunction], x0: list[float]
) -> None:
  """x_1 cannot reach |xc| <= 0.1 from 4 m/s, nor from xc = 0.5: the call ends "infeasible" with IPOPT's
  least-violation plan (the price of violation is raised until it is that point, not a compromise with the cost), its
  inputs within their bounds and its dynamics met, its message in the OCP's terms; the next call from a feasible
  state succeeds without reset()."""
  hard = narrow["hard"]
  hard.reset()
  sol = hard(np.array(x0))
  assert sol.status == "infeasible" and sol.fallback == "least_violation", sol.message
  assert np.all(np.abs(sol.u) <= 20.0 + 1e-9)
  for k in range(N_SMALL):
    np.testing.assert_allclose(sol.x[k + 1], cartpole.step_numpy(sol.x[k], sol.u[k]), atol=1e-8)
  reference = least_violation_plan(np.array(x0), N_SMALL, 0.1)
  violation = lambda xs: np.maximum(np.abs(xs[1:, 0]) - 0.1, 0.0).sum()
  assert violation(sol.x) == pytest.approx(violation(reference), rel=1e-6)
  np.testing.assert_allclose(sol.x[:, 0], reference[:, 0], atol=1e-5)
  assert sol.message.startswith("infeasible: x_bounds: x[0] at stage "), sol.message
  assert "_nlp_" not in sol.message, "the message names the user's functions, not the NLP's"
  still = hard(cartpole.step_numpy(sol.x[0], sol.u0))
  assert still.status == "infeasible" and not still.stats["restarted_cold"], still.message
  assert still.iterations < sol.iterations, "the next infeasible call starts from the shifted least-violation plan"
  recovered = hard(np.array([0.05, 0.0, 0.0, 0.0]))
  assert recovered.success and recovered.fallback == "none"


def test_a_jump_of_the_state_after_a_run_recovers_within_the_call() -> None:
  """After a closed-loop run, x0 jumps far from the shifted plan (whose linearization is inconsistent there): the call
  restarts from the cold guess by itself and ends at the cold solve's optimum, without reset()."""
  mpc = stabilizing_cartpole()
  jump = np.array([1.5, -0.8, 1.0, 0.0])
  mpc.reset()
  cold = mpc(jump)
  assert cold.success and not cold.stats["restarted_cold"]
  mpc.reset()
  simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, 10)
  sol = mpc(jump)
  assert sol.success and sol.stats["restarted_cold"], sol.message
  assert sol.cost == pytest.approx(cold.cost, rel=1e-9)
  np.testing.assert_allclose(sol.u, cold.u, atol=U_ATOL)
  assert mpc(cartpole.step_numpy(jump, sol.u0)).stats["restarted_cold"] is False, "the next call is warm again"


def test_failures_inside_simulate_are_reported(narrow: dict[str, MPCFunction]) -> None:
  cl = simulate(narrow["hard"], cartpole.step_numpy, np.array([0.0, 0.0, 4.0, 0.0]), 3)
  assert cl.failures >= 1 and sum(cl.status_counts.values()) == 3
  assert np.all(np.isfinite(cl.u)) and cl.violations.max() > 0


def test_closed_loop_failures_follow_the_solutions_success() -> None:
  """`failures` counts the steps whose MPCSolution.success is False: acceptable succeeds; max_iterations fails a full
  SQP and is a real-time iteration's normal outcome (it counted acceptable as a failure, max_iterations never)."""
  statuses = (SQPStatus.converged, SQPStatus.acceptable, SQPStatus.max_iterations, SQPStatus.infeasible)
  x, u, t = np.zeros((5, 1)), np.zeros((4, 1)), np.zeros(4)
  run = lambda rti: ClosedLoop(x, u, t, t, np.zeros(4, np.int64), statuses, t, (x[0], x[0]), (u[0], u[0]),
                               real_time_iteration=rti)  # fmt: skip
  assert (run(False).failures, run(True).failures) == (2, 1)


def test_rk4_matches_the_reference_model() -> None:
  F = rk4("test_mpc_rk4", lambda x, u: cartpole.ode(x, u, TINYGRAD), cartpole.H, nx=4, nu=1)
  np.testing.assert_allclose(F(cartpole.TEST_X, cartpole.TEST_U), cartpole.step_numpy(cartpole.TEST_X, cartpole.TEST_U),
                             rtol=1e-14, atol=1e-15)  # fmt: skip
  two = rk4("test_mpc_rk4_2", lambda x, u, p: -p[0] * x + u, 0.1, nx=1, nu=1, np=1, steps=2)
  h, a = 0.05, 0.7
  step = lambda x: (
    x + h / 6 * sum(c * k for c, k in zip((1, 2, 2, 1), _stages(lambda y: -a * y + 1.0, x, h), strict=True))
  )
  np.testing.assert_allclose(two(np.array([2.0]), np.array([1.0]), np.array([a])), step(step(2.0)), rtol=1e-14)


def test_euler_steps_and_its_stage_derivatives() -> None:
  """euler: explicit Euler steps; an MPC on it (its derivatives from the run-time integrator, stage by stage) solves
  as the same MPC on the same step as a plain function (the NLP differentiated as one graph)."""
  two = euler("test_mpc_euler_2", lambda x, u, p: -p[0] * x * x + u, 0.1, nx=1, nu=1, np=1, steps=2)
  step = lambda x: x + 0.05 * (-0.7 * x * x + 1.0)
  np.testing.assert_allclose(two(np.array([2.0]), np.array([1.0]), np.array([0.7])), step(step(2.0)), rtol=1e-15)
  # crocoddyl's semi-implicit Euler of a pendulum, as explicit Euler on (v + h a, a)
  h = 0.05
  accel = lambda x, u: -9.81 * x[0].sin() - 0.1 * x[1] + u[0]
  rate = lambda x, u: Tensor.stack(x[1] + h * accel(x, u), accel(x, u))
  plain = av.NumericalFunction("test_mpc_euler_plain", lambda x, u: x + h * rate(x, u), (Arg(2), Arg(1)))
  up = lambda x, u: ((x - Tensor([np.pi, 0.0])) ** 2).sum() + 1e-2 * (u * u).sum()
  cost = av.NumericalFunction("test_mpc_euler_l", up, (Arg(2), Arg(1)))
  solutions = [
    MPCFunction(f"test_mpc_euler_{k}", F, cost, horizon=30, u_bounds=([-4.0], [4.0]))(np.array([0.3, 0.0]))
    for k, F in (("runtime", euler("test_mpc_euler_F", rate, h, nx=2, nu=1)), ("graph", plain))
  ]
  assert all(s.status == "converged" for s in solutions)
  np.testing.assert_allclose(solutions[0].u, solutions[1].u, atol=1e-7)
  assert solutions[0].cost == pytest.approx(solutions[1].cost, rel=1e-10)


def _stages(f: Any, x: float, h: float) -> list[float]:
  k1 = f(x)
  k2 = f(x + h / 2 * k1)
  k3 = f(x + h / 2 * k2)
  return [k1, k2, k3, f(x + h * k3)]


def test_bad_inputs_raise_clear_errors(tracking: MPCFunction) -> None:
  F, cost = cm.dynamics("test_mpc_err_F"), cm.stage_cost("test_mpc_err_l")
  with pytest.raises(ValueError, match="horizon"):
    MPCFunction("test_mpc_err", F, cost, horizon=0)
  with pytest.raises(ValueError, match="lower > upper"):
    MPCFunction("test_mpc_err", F, cost, horizon=5, u_bounds=([1.0], [-1.0]))
  with pytest.raises(ValueError, match="soft groups"):
    MPCFunction("test_mpc_err", F, cost, horizon=5, soft={"y": Soft()})
  # NOTE: at construction, not at the first call (issues 53 and 54)
  with pytest.raises(ValueError, match=r"test_mpc_err: soft\['x'\]: Soft.indices \(12,\) out of range: .* 4 bounds"):
    MPCFunction("test_mpc_err", F, cost, horizon=5, x_bounds=(-np.ones(4), np.ones(4)), soft={"x": Soft(indices=(12,))})
  with pytest.raises(ValueError, match="inputs shaped"):
    MPCFunction("test_mpc_err", F, av.NumericalFunction("test_mpc_err_l3", lambda x: x.sum(), (Arg(4),)), horizon=5)
  with pytest.raises(TypeError, match="options"):
    MPCFunction("test_mpc_err", F, cost, horizon=5, options=object())  # type: ignore[arg-type]
  with pytest.raises(TypeError, match=r"MPCOptions\.qp: expected RiccatiOptions or OSQPOptions"):
    MPCOptions(qp="osqp")  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"RiccatiOptions\.max_iter"):
    MPCOptions(qp=RiccatiOptions(max_iter=0))
  p = np.zeros(4)
  with pytest.raises(ValueError, match=r"x0: expected shape \(4,\)"):
    tracking(np.zeros(3), p)
  with pytest.raises(ValueError, match="NaN"):
    tracking(np.array([0.0, np.nan, 0.0, 0.0]), p)
  with pytest.raises(ValueError, match="pass p"):
    tracking(np.zeros(4))
  with pytest.raises(ValueError, match=r"p: expected shape \(4,\) or per stage"):
    tracking(np.zeros(4), np.zeros((3, 4)))
  with pytest.raises(ValueError, match="lower > upper at stage 2"):
    lo = np.full((N_SMALL, 1), -1.0)
    lo[2] = 2.0
    tracking(np.zeros(4), p, u_bounds=(lo, np.ones((N_SMALL, 1))))
  with pytest.raises(ValueError, match=r"x_bounds lower: expected shape \(4,\) or per stage"):
    tracking(np.zeros(4), p, x_bounds=(np.zeros(3), np.ones(3)))


def test_riccati_qp_solver_swing_up_and_module(tmp_path: Any) -> None:
  mpc = stabilizing_cartpole()
  swing = cm.swing_up("test_mpc_ric_swing", MPCOptions())
  swing.set_guess(*cm.swing_up_guess(cm.X0_SWING_UP))
  sol = swing(cm.X0_SWING_UP)  # the swing-up NLP through the transcription, QPs by the Riccati interior point
  assert sol.success and sol.cost == pytest.approx(173.28254, rel=1e-6)
  # the generated controller (SQP loop + Riccati QP) compiles warning-free with g++ and clang++
  import subprocess

  from tests.conftest import STRICT, available_compilers

  _, source = av.generate_module("ric_controller", [mpc], out_dir=tmp_path)
  flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Wpedantic", *STRICT, "-Werror", "-I", str(tmp_path / "osqp"),
           "-I", str(tmp_path / "osqp/inc/public"), "-I", str(tmp_path / "osqp/inc/private"), "-c", str(source), "-o",
           str(tmp_path / "m.o")]  # fmt: skip
  for cxx in available_compilers():
    proc = subprocess.run([cxx, *flags], capture_output=True, text=True)
    assert proc.returncode == 0, (cxx, proc.stderr[:2000])


def test_soft_path_input_and_terminal_constraints_agree_across_qp_solvers() -> None:
  """Softened path constraints, input bounds and terminal constraints: the Riccati QP (the slacks eliminated: their
  rows elastic, priced by the slacks' L1 and L2 costs, the terminal one L2 alone) and OSQP (slacks as plain variables)
  solve the same NLP to the same point, with the slacks in use."""
  tip = av.NumericalFunction("test_mpc_stip", lambda x, u: (x[0] + 0.5 * x[1].sin()).reshape(1), (Arg(4), Arg(1)))
  upright = av.NumericalFunction("test_mpc_supright", lambda x: x[1:3] * 1.0, (Arg(4),))
  x_bounds, _ = cm.bounds()
  soft = {"constraints": Soft(l1=5.0, l2=50.0), "u": Soft(l1=1.0, l2=10.0), "terminal_constraints": Soft(l2=100.0)}
  solutions = {}
  riccati = RiccatiOptions(max_iter=40, tol_min=1e-9)
  for qp in ("riccati", "osqp"):
    name = f"test_mpc_soft3_{qp}"
    mpc = MPCFunction(name, cm.dynamics(f"{name}_F"), cm.stage_cost(f"{name}_l"),
                      cm.terminal_cost(f"{name}_lN"), horizon=N_SMALL, x_bounds=x_bounds,
                      u_bounds=([-2.0], [2.0]), constraints=(tip, ([-0.05], [0.05])), terminal_constraints=upright,
                      terminal_constraint_bounds=([0.0, 0.0], [0.0, 0.0]), soft=soft,
                      options=MPCOptions(qp=riccati if qp == "riccati" else OSQPOptions()))  # fmt: skip
    solutions[qp] = mpc(np.array([0.3, 0.4, 0.5, 0.0]))
    if qp == "riccati":
      ipm = mpc.sqp.qp.solver  # the Riccati QP's solver, its options those given
      assert (ipm.max_iter, mpc.sqp.qp.options.tol_min) == (40, 1e-9)
      assert (ipm.nu, ipm.nuN) == (1, 0), "the tip and input slacks per stage and the 2 terminal ones eliminated"
      assert len(mpc.sqp.qp.soft) == 2 * N_SMALL + 2
    assert solutions[qp].success, (qp, solutions[qp].status)
  ric, ref = solutions["riccati"], solutions["osqp"]
  np.testing.assert_allclose(ric.u, ref.u, atol=U_ATOL)
  np.testing.assert_allclose(ric.x, ref.x, atol=U_ATOL)
  assert ric.cost == pytest.approx(ref.cost, rel=1e-8)
  tips = ric.x[:N_SMALL, 0] + 0.5 * np.sin(ric.x[:N_SMALL, 1])
  assert np.abs(ric.u).max() > 2.0 + 1e-4 and np.abs(tips).max() > 0.05 + 1e-4, "the slacks are in use"
  assert np.abs(ric.x[N_SMALL, 1:3]).max() > 1e-4


def test_path_equalities_agree_across_qp_solvers() -> None:
  """A path constraint with equal bounds (u = -2 x_c - 0.5 sin(theta) at every stage) is a true equality row of the
  Riccati QP at each stage: the solution matches OSQP's and meets the law to rounding."""
  law = av.NumericalFunction("test_mpc_law", lambda x, u: (u[0] + 2.0 * x[0] + 0.5 * x[1].sin()).reshape(1),
                             (Arg(4), Arg(1)))  # fmt: skip
  x_bounds, u_bounds = cm.bounds()
  x0, solutions = np.array([0.3, 0.2, 0.0, 0.0]), {}
  for qp in ("riccati", "osqp"):
    name = f"test_mpc_law_{qp}"
    mpc = MPCFunction(name, cm.dynamics(f"{name}_F"), cm.stage_cost(f"{name}_l"), cm.terminal_cost(f"{name}_lN"),
                      horizon=N_SMALL, x_bounds=x_bounds, u_bounds=u_bounds, constraints=(law, ([0.0], [0.0])),
                      options=MPCOptions(qp=qp_named(qp)))  # fmt: skip
    solutions[qp] = mpc(x0)
    assert solutions[qp].success
  ric, ref = solutions["riccati"], solutions["osqp"]
  np.testing.assert_allclose(ric.u, ref.u, atol=U_ATOL)
  np.testing.assert_allclose(ric.x, ref.x, atol=U_ATOL)
  residual = ric.u[:, 0] + 2.0 * ric.x[:N_SMALL, 0] + 0.5 * np.sin(ric.x[:N_SMALL, 1])
  assert np.abs(residual).max() < 1e-10


def test_simulate_starts_from_a_given_guess() -> None:
  swing = cm.swing_up("test_mpc_stab_riccati_swing", MPCOptions())
  guess = cm.swing_up_guess(cm.X0_SWING_UP)
  cl = simulate(swing, cartpole.step_numpy, cm.X0_SWING_UP, 2, guess=guess)
  swing.set_guess(*guess)
  first = swing(cm.X0_SWING_UP)  # the same first solve, started by hand
  assert cl.statuses[0] == "converged" and first.success
  np.testing.assert_allclose(cl.u[0], first.u0, atol=1e-12)


@pytest.mark.parametrize("mode", ["sqp", "rti"])
def test_partial_condensing_steers_as_the_stage_qps(mode: str) -> None:
  """RiccatiOptions(condensing=4): the cart-pole's stage QPs solved in blocks of 4 stages (N = 30: the last block
  padded) steer the closed loop as the stage QPs do, the warm starts shifted by one stage through the blocks."""
  options = MPCOptions(mode=mode, qp=RiccatiOptions(condensing=4))
  blocks = cm.stabilizing(f"test_mpc_blocks_{mode}", options)
  stages = cm.stabilizing(f"test_mpc_stages_{mode}", MPCOptions(mode=mode))
  cl, reference = (simulate(m, cartpole.step_numpy, cm.X0_STABILIZE, 60) for m in (blocks, stages))
  assert cl.failures == reference.failures == 0 and cl.statuses == reference.statuses
  np.testing.assert_allclose(cl.u, reference.u, atol=U_ATOL)
  assert cl.cost == pytest.approx(reference.cost, rel=1e-9)


def test_one_sided_soft_bounds_keep_the_other_side_hard() -> None:
  """Soft(side="upper") prices leaving the upper bound and keeps the lower one hard (side="lower" the mirror): driven
  past the soft side it solves as the two-sided soft controller does (the other side inactive); driven past the hard
  side, as the controller without slacks does. The Riccati QP (slacks eliminated, the hard side's row free) and OSQP
  agree."""
  ode = lambda x, u, p: Tensor.stack(x[1], u[0])
  cost = lambda x, u, p: (x[0] - p[0]) ** 2 + 0.1 * x[1] ** 2 + 0.01 * u[0] ** 2
  x_bounds = ([-0.5, -INF], [0.5, INF])

  def controller(side: str | None, qp: str = "riccati") -> MPCFunction:
    name = f"test_mpc_side_{side}_{qp}"
    soft = {} if side is None else {"x": Soft(indices=(0,), l1=0.5, l2=1.0, side=side)}
    return MPCFunction(name, rk4(f"{name}_F", ode, 0.1, nx=2, nu=1, np=1),
                       av.NumericalFunction(f"{name}_l", cost, (Arg(2), Arg(1), Arg(1))), horizon=N_SMALL,
                       x_bounds=x_bounds, u_bounds=([-5.0], [5.0]), soft=soft,
                       options=MPCOptions(qp=qp_named(qp)))  # fmt: skip

  mpcs = {side: controller(side) for side in (None, "both", "lower", "upper")}
  x0 = np.zeros(2)
  for target, soft_side, hard_side in ((2.0, "upper", "lower"), (-2.0, "lower", "upper")):
    solve = {side: mpc(x0, np.array([target])) for side, mpc in mpcs.items()}
    assert all(s.success for s in solve.values()), {k: s.status for k, s in solve.items()}
    np.testing.assert_allclose(solve[soft_side].x, solve["both"].x, atol=1e-5)
    np.testing.assert_allclose(solve[hard_side].x, solve[None].x, atol=1e-5)
    assert np.abs(solve[soft_side].x[:, 0]).max() > 0.5 + 1e-3, "the soft side is used"
    assert np.abs(solve[hard_side].x[:, 0]).max() <= 0.5 + 1e-7, "the other side holds"
  osqp = controller("upper", "osqp")(x0, np.array([-2.0]))
  np.testing.assert_allclose(osqp.x, mpcs[None](x0, np.array([-2.0])).x, atol=1e-6)
  with pytest.raises(ValueError, match=r"Soft.side: expected one of \('both', 'lower', 'upper'\), got 'top'"):
    Soft(side="top")
