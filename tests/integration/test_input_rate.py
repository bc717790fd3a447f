"""Input-rate terms (`MPCFunction(..., u_rate_bounds=, u_rate_weight=)`, anvil.mpc.rate): the controller equals the
hand-augmented formulation (previous inputs as states written by the user) in single solves and closed loops, for
explicit and implicit dynamics, exact and Gauss-Newton Hessians; the rates stay within their bounds from the applied
input on; the C++ harness equals Python; bad arguments are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, irk, rk4, simulate
from anvil.mpc.harness import build_harness, run_harness
from anvil.sqp import SQPOptions

NX, NU, N, WHEELBASE = 4, 2, 20, 2.5
RATE_LO, RATE_HI = np.array([-1.0, -0.05]), np.array([1.0, 0.05])  # acceleration's and steering angle's change per step
RATE_WEIGHT = np.diag([0.5, 20.0])
U_BOUNDS = (np.array([-3.0, -0.4]), np.array([3.0, 0.4]))
X0 = np.array([0.0, 1.5, 0.0, 8.0])  # 1.5 m off the line y = 0, at 8 m/s
OPTIONS = {"sqp": SQPOptions(max_iter=50, tol=1e-10)}


def bicycle(x: Tensor, u: Tensor) -> Tensor:
  """A kinematic bicycle steered by its wheels' angle: x = [px, py, psi, v], u = [a, delta]."""
  return Tensor.stack(x[3] * x[2].cos(), x[3] * x[2].sin(), x[3] * u[1].sin() / (WHEELBASE * u[1].cos()), u[0])


def tracking(x: Tensor, u: Tensor) -> Tensor:
  """Back to the line y = 0 at heading 0 and 8 m/s, with small inputs."""
  return Tensor.stack(x[1], x[2], 0.3 * (x[3] - 8.0), 0.1 * u[0], u[1])


def controllers(name: str, F: NumericalFunction, hessian: str) -> tuple[MPCFunction, MPCFunction]:
  """The MPC with input-rate terms, and the same OCP augmented by hand: x~ = [x; u_prev], F~ = [F(x, u); u], the
  rate in the residual (scaled by the weight's square root) and u - u_prev as path constraints."""
  options = MPCOptions(hessian=hessian, **OPTIONS)
  residual = NumericalFunction(f"{name}_r", tracking, (Arg(NX), Arg(NU)))
  rate = MPCFunction(name, F, LeastSquares(residual, np.eye(5)), horizon=N, u_bounds=U_BOUNDS,
                     u_rate_bounds=(RATE_LO, RATE_HI), u_rate_weight=RATE_WEIGHT, options=options)  # fmt: skip
  root = np.sqrt(np.diag(RATE_WEIGHT))
  augmented = NumericalFunction(f"{name}_hand_F", lambda xa, u: F.compose(xa[:NX], u).cat(u), (Arg(NX + NU), Arg(NU)))
  hand_r = NumericalFunction(f"{name}_hand_r", lambda xa, u: tracking(xa[:NX], u).cat((u - xa[NX:]) * Tensor(root)),
                             (Arg(NX + NU), Arg(NU)))  # fmt: skip
  rows = NumericalFunction(f"{name}_hand_h", lambda xa, u: u - xa[NX:], (Arg(NX + NU), Arg(NU)))
  hand = MPCFunction(f"{name}_hand", augmented, LeastSquares(hand_r, np.eye(7)), horizon=N, u_bounds=U_BOUNDS,
                     constraints=rows, constraint_bounds=(RATE_LO, RATE_HI), options=options)  # fmt: skip
  return rate, hand


@pytest.mark.parametrize("hessian", ["exact", "gauss_newton"])
def test_equals_the_hand_augmented_formulation(hessian: str) -> None:
  F = rk4(f"rate_bicycle_{hessian}_F", bicycle, 0.1, nx=NX, nu=NU)
  rate, hand = controllers(f"rate_bicycle_{hessian}", F, hessian)
  assert rate.nx == NX and rate.ocp.nx == NX + NU, "the user sees the model's states; the NLP carries u_prev"
  # closed loops from fresh controllers: the default u_prev is the last u0 returned (zeros at first)
  loop = simulate(rate, F, X0, 25, progress=False)
  xs, us, applied = [X0], [], np.zeros(NU)
  for _ in range(25):
    sol = hand(np.concatenate([xs[-1], applied]))
    applied = sol.u0
    us.append(applied)
    xs.append(F(xs[-1], applied))
  np.testing.assert_allclose(loop.u, np.array(us), atol=1e-8)
  np.testing.assert_allclose(loop.x, np.array(xs), atol=1e-8)
  steps = np.diff(np.vstack([np.zeros(NU), loop.u]), axis=0)
  assert np.all(steps >= RATE_LO - 1e-9) and np.all(steps <= RATE_HI + 1e-9), "rates within bounds from u_{-1} on"
  assert np.abs(steps[:, 1]).max() == pytest.approx(RATE_HI[1], abs=1e-9), "the steering rate limit is active"
  assert abs(loop.x[-1, 1]) < 0.3, "back near the line"
  u_prev = np.array([0.5, -0.02])  # a given previous input (both warm-started from their loops)
  one, ref = rate(X0, u_prev=u_prev), hand(np.concatenate([X0, u_prev]))
  assert one.status == ref.status == "converged" and one.x.shape == (N + 1, NX)
  np.testing.assert_allclose(one.u, ref.u, atol=1e-8)
  np.testing.assert_allclose(one.x, ref.x[:, :NX], atol=1e-8)
  assert one.cost == pytest.approx(ref.cost, rel=1e-9)
  # NOTE: reset() forgets the last input too (issue 54): the run after it is the first run again
  rate.reset()
  again = simulate(rate, F, X0, 3, progress=False)
  np.testing.assert_allclose(again.u, loop.u[:3], atol=1e-10)


def test_real_time_iteration_takes_its_jacobians_steps() -> None:
  """A real-time iteration with input-rate terms (the NLP's states: the model's, then the previous inputs) takes the
  dynamics' steps its preparation's Jacobian computed (SQPFunction.reuses_steps): its closed loop equals the one of
  the same controller whose derivatives differentiate the NLP as one graph (nothing kept)."""
  F = rk4("rate_rti_F", bicycle, 0.1, nx=NX, nu=NU)
  residual = NumericalFunction("rate_rti_r", tracking, (Arg(NX), Arg(NU)))
  make = lambda name, stagewise: MPCFunction(
    name, F, LeastSquares(residual, np.eye(5)), horizon=N, u_bounds=U_BOUNDS, u_rate_bounds=(RATE_LO, RATE_HI),
    u_rate_weight=RATE_WEIGHT, options=MPCOptions(hessian="gauss_newton", mode="rti", integrator_derivatives=stagewise,
                                                  **OPTIONS),
  )  # fmt: skip
  kept, unrolled = make("rate_rti", True), make("rate_rti_unrolled", False)
  assert kept.sqp.reuses_steps and not unrolled.sqp.reuses_steps
  a, b = simulate(kept, F, X0, 25, progress=False), simulate(unrolled, F, X0, 25, progress=False)
  assert a.failures == 0 and a.cost == pytest.approx(b.cost, rel=1e-12)
  np.testing.assert_allclose(a.u, b.u, atol=1e-12)


def test_implicit_dynamics_and_its_derivatives() -> None:
  F = irk("rate_irk_F", bicycle, 0.1, nx=NX, nu=NU, stages=2)
  rate = MPCFunction("rate_irk", F, LeastSquares(NumericalFunction("rate_irk_r", tracking, (Arg(NX), Arg(NU))),
                                                 np.eye(5)), horizon=5, u_rate_weight=RATE_WEIGHT,
                     u_rate_bounds=(RATE_LO, RATE_HI))  # fmt: skip
  ocp, sqp = rate.ocp, rate.sqp
  rng = np.random.default_rng(5)
  w, params = rng.normal(scale=0.3, size=ocp.nw), ocp.parameter(rng.normal(size=ocp.nx))
  sigma, lam = np.array([0.8]), rng.normal(size=ocp.ng)
  eps, J, H = 1e-6, sqp.jacobian(w, params).toarray(), sqp.hessian(w, params, sigma, lam).toarray()
  H = H + np.triu(H, 1).T
  gradient = lambda w_: sigma[0] * sqp.gradient(w_, params) + sqp.jacobian(w_, params).toarray().T @ lam
  for j in range(ocp.nw):
    d = np.zeros(ocp.nw)
    d[j] = eps
    g_column = (sqp.constraints_code(w + d, params) - sqp.constraints_code(w - d, params)) / (2 * eps)
    np.testing.assert_allclose(J[:, j], g_column, atol=1e-7 * max(1.0, np.abs(J).max()))
    np.testing.assert_allclose(H[:, j], (gradient(w + d) - gradient(w - d)) / (2 * eps), atol=1e-6 * np.abs(H).max())
  sol = rate(X0, u_prev=np.array([0.0, 0.1]))
  assert sol.status == "converged" and abs(sol.u[0, 1] - 0.1) <= RATE_HI[1] + 1e-9


def test_cpp_harness_equals_python(tmp_path: Path) -> None:
  F = rk4("rate_harness_F", bicycle, 0.1, nx=NX, nu=NU)
  cost = NumericalFunction("rate_harness_l", lambda x, u: (tracking(x, u) * tracking(x, u)).sum(), (Arg(NX), Arg(NU)))
  mpc = MPCFunction("rate_harness", F, cost, horizon=N, u_bounds=U_BOUNDS, u_rate_bounds=(RATE_LO, RATE_HI),
                    u_rate_weight=RATE_WEIGHT)  # fmt: skip
  run = run_harness(build_harness(mpc, tmp_path, x0=X0), X0, 12)
  loop = simulate(mpc, F, X0, 12, progress=False)
  np.testing.assert_allclose(run.u, loop.u, atol=1e-9)
  np.testing.assert_allclose(run.x, loop.x, atol=1e-9)


def test_infeasible_rates_are_named() -> None:
  F = rk4("rate_named_F", bicycle, 0.1, nx=NX, nu=NU)
  cost = NumericalFunction("rate_named_l", lambda x, u: (tracking(x, u) * tracking(x, u)).sum(), (Arg(NX), Arg(NU)))
  mpc = MPCFunction("rate_named", F, cost, horizon=5, u_bounds=(np.array([2.0, -0.4]), np.array([3.0, 0.4])),
                    u_rate_bounds=(RATE_LO, RATE_HI))  # fmt: skip
  sol = mpc(X0, u_prev=np.zeros(NU))  # a >= 2 is 2 away from the previous 0, its rate at most 1
  assert sol.status == "infeasible" and "u_rate_bounds" in sol.message and "u_prev[0]" in sol.message


def test_bad_arguments_are_refused() -> None:
  F = rk4("rate_bad_F", bicycle, 0.1, nx=NX, nu=NU)
  cost = NumericalFunction("rate_bad_l", lambda x, u: (x * x).sum() + (u * u).sum(), (Arg(NX), Arg(NU)))
  with pytest.raises(ValueError, match=r"u_rate_weight: weight must be 2x2"):
    MPCFunction("rate_bad", F, cost, u_rate_weight=np.eye(3))
  with pytest.raises(ValueError, match="u_rate_bounds must allow a zero rate"):
    MPCFunction("rate_bad", F, cost, u_rate_bounds=(np.array([0.1, -1.0]), np.array([1.0, 1.0])))
  with pytest.raises(ValueError, match="u_rate_bounds"):
    MPCFunction("rate_bad", F, cost, u_rate_bounds=(np.array([1.0, 1.0]), np.array([-1.0, -1.0])))
  plain = MPCFunction("rate_plain", F, cost, horizon=5)
  with pytest.raises(ValueError, match="this MPC has none"):
    plain(X0, u_prev=np.zeros(NU))
  rate = MPCFunction("rate_nan", F, cost, horizon=5, u_rate_weight=np.ones(NU))
  with pytest.raises(ValueError, match="u_prev"):
    rate(X0, u_prev=np.array([np.nan, 0.0]))


def test_float32_with_a_weight_alone_tracks_float64() -> None:
  F = rk4("rate_f32_F", bicycle, 0.1, nx=NX, nu=NU)
  cost = NumericalFunction("rate_f32_l", lambda x, u: (tracking(x, u) * tracking(x, u)).sum(), (Arg(NX), Arg(NU)))
  loops = [simulate(MPCFunction(f"rate_{scalar}", F, cost, horizon=N, u_bounds=U_BOUNDS, u_rate_weight=RATE_WEIGHT,
                                options=MPCOptions(scalar=scalar)), F, X0, 10, progress=False)
           for scalar in ("float64", "float32")]  # fmt: skip
  assert all(s == "converged" for s in loops[1].statuses)
  assert loops[1].cost == pytest.approx(loops[0].cost, rel=1e-5)
