"""float32 solvers (MPCOptions/SQPOptions(scalar="float32")): every generated function, the integrator, the SQP and the
Riccati QP compute in float32, validated against the same problems in float64; misuse is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, rk4, shooting_layout, simulate
from anvil.mpc.stagewise import StageConstraints
from anvil.problems import cartpole, shooting
from anvil.problems import cartpole_mpc as cm
from anvil.problems.backend import TINYGRAD
from anvil.problems.ocp_qp import random_qp
from anvil.qp import OSQPOptions, RiccatiQP
from anvil.sqp import SQPFunction, SQPOptions

X0 = np.asarray(cm.X0_STABILIZE, dtype=np.float64)


def test_float32_mpc_closed_loop_matches_float64() -> None:
  """The cart-pole MPC in float32 (its cost captures a float64 numpy array: lowered too) keeps the pole up with the
  float64 controller's closed-loop cost to 1e-3, every step converged, and its code is float32 throughout."""
  m64 = cm.stabilizing("f32_ref")
  m32 = cm.stabilizing("f32_mpc", MPCOptions(scalar="float32"))
  r64 = simulate(m64, m64.ocp.dynamics, X0, 100)
  r32 = simulate(m32, m64.ocp.dynamics, X0, 100)
  assert all(s == "converged" for s in r32.statuses)
  assert r32.cost == pytest.approx(r64.cost, rel=1e-3)
  assert np.abs(r32.x[-1]).max() < 1e-3
  sqp = m32.sqp
  for fn in (sqp.cost, sqp.gradient, sqp.constraints_code, sqp.jacobian, sqp.hessian):
    assert all(a.dtype == dtypes.float32 for a in fn.inputs), fn.name
  assert "using real = float;" in sqp.header_code
  sol = m32(X0)
  assert sol.x.dtype == np.float64 and sol.u.dtype == np.float64  # results in float64, as every controller's


def _least_squares_cartpole(name: str, options: MPCOptions) -> MPCFunction:
  """The stabilizing cart-pole MPC with its costs as LeastSquares (for the Gauss-Newton Hessian)."""
  q, r = np.diag(cm.Q_DIAG), np.array([[cartpole.R]])
  stage = LeastSquares(NumericalFunction(f"{name}_r", lambda x, u: x.cat(u), (Arg(cm.NX), Arg(cm.NU))),
                       np.block([[q, np.zeros((cm.NX, cm.NU))], [np.zeros((cm.NU, cm.NX)), r]]))  # fmt: skip
  final = LeastSquares(NumericalFunction(f"{name}_rN", lambda x: x * 1.0, (Arg(cm.NX),)), 10.0 * q)
  x_bounds, u_bounds = cm.bounds()
  return MPCFunction(name, cm.dynamics(f"{name}_F"), stage, final, horizon=30, x_bounds=x_bounds, u_bounds=u_bounds,
                     options=options)  # fmt: skip


def test_float32_rti_gauss_newton_matches_float64() -> None:
  """The real-time iteration with the Gauss-Newton Hessian (the GN function and its constant blocks in float32)."""
  options = dict(mode="rti", hessian="gauss_newton")
  m64 = _least_squares_cartpole("f32_rti_ref", MPCOptions(**options))
  m32 = _least_squares_cartpole("f32_rti", MPCOptions(scalar="float32", **options))
  r64 = simulate(m64, m64.ocp.dynamics, X0, 100)
  r32 = simulate(m32, m64.ocp.dynamics, X0, 100)
  assert r32.cost == pytest.approx(r64.cost, rel=1e-3)
  assert np.abs(r32.x[-1]).max() < 1e-2
  # at rest the iterate meets the tolerance raised to float32's floor: "converged", not max_iterations for ever
  assert r32.statuses[-1] == "converged"


@pytest.mark.parametrize("pull", [0.1, 3.0])
def test_float32_riccati_qp_matches_float64(pull: float) -> None:
  """A random OCP QP (few and many active bounds) in float32 against float64: solved, to float32's tolerance floor."""
  rng = np.random.default_rng(7)
  nx, nu, N, ng = 4, 2, 20, 7
  d = random_qp(rng, nx, nu, N, ng, 1, pull)
  ref = RiccatiQP("qp_f64", nx, nu, N, ng=ng, ngN=1)(1e-10, **d)
  sol = RiccatiQP("qp_f32", nx, nu, N, ng=ng, ngN=1, scalar="float32")(1e-10, **d)
  assert sol.status == "solved" and ref.status == "solved"
  scale = max(1.0, np.abs(ref.x).max(), np.abs(ref.u).max())
  # NOTE: float32's floor: residuals of 1e-4, the solution as accurate as the QP's conditioning allows
  assert np.abs(sol.x - ref.x).max() < 1e-2 * scale and np.abs(sol.u - ref.u).max() < 1e-2 * scale
  assert max(sol.residuals) < 1e-3


def test_float32_is_refused_where_it_cannot_run() -> None:
  with pytest.raises(ValueError, match="scalar"):
    MPCOptions(scalar="float16")
  with pytest.raises(ValueError, match="Riccati"):
    MPCOptions(scalar="float32", qp=OSQPOptions())
  with pytest.raises(ValueError, match="scalar"):
    SQPOptions(scalar="half")
  f = NumericalFunction("f32_rosen", lambda x, p: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2, (Arg(2), Arg(0)))
  solver = SQPFunction("f32_nlp", f, options=SQPOptions(scalar="float32"))
  with pytest.raises(ValueError, match="stage layout"):
    _ = solver.qp_options  # no stage structure: no Riccati QP, and the other QP solvers factor in double
  with pytest.raises(ValueError, match="Riccati"):
    _ = SQPFunction("f32_osqp", f, options=SQPOptions(scalar="float32", qp=OSQPOptions())).qp_options


def test_float32_tracing_keeps_captured_constants_in_float32() -> None:
  """A float64 numpy array captured by math traced on float32 inputs becomes float32 (no double ops, no mix)."""
  weights = np.array([1.0, 2.0, 3.0])
  fn = NumericalFunction("f32_captured", lambda x: (x * Tensor(weights)).sum(), (Arg(3, dtype=dtypes.float32),))
  assert fn.outputs[0].dtype == dtypes.float32
  assert float(fn(np.ones(3, dtype=np.float32))) == pytest.approx(6.0)


def test_float32_sqp_solves_the_shooting_swing_up() -> None:
  """An SQPFunction given float64 functions and a stage layout, in float32: the swing-up NLP's local optimum (IPOPT's
  and CasADi's, 173.28254) to float32's tolerance, its defects within it."""
  n = 50
  size = shooting.size(n)
  f = NumericalFunction("f32_swing_cost", lambda w, x0: shooting.stage_cost(w, n), (Arg(size), Arg(4)))
  g = NumericalFunction("f32_swing_defects", lambda w, x0: shooting.defects(w, x0, n), (Arg(size), Arg(4)))
  solver = SQPFunction("f32_swing_up", f, g, SQPOptions(scalar="float32"), stages=shooting_layout(n, 4, 1))
  assert all(a.dtype == dtypes.float32 for a in solver.cost.inputs)
  x_init, lbx, ubx, w0 = shooting.swing_up(n)
  res = solver(w0, x_init, lbx, ubx, np.zeros(4 * n + 4), np.zeros(4 * n + 4))
  assert res.status in ("converged", "acceptable") and res.x.dtype == np.float64
  assert res.f == pytest.approx(173.28254, rel=1e-4)
  assert np.abs(shooting.defects_numpy(res.x, x_init, n)).max() < 1e-3


def test_float32_keeps_composed_functions_in_float32() -> None:
  """Dynamics that call another NumericalFunction (a composition) stay float32 in a float32 controller."""
  ode = NumericalFunction("f32_ode", lambda x, u: cartpole.ode(x, u, TINYGRAD), (Arg(4), Arg(1)))
  F = rk4("f32_composed_F", lambda x, u: ode(x, u), cartpole.H, nx=4, nu=1)
  x_bounds, u_bounds = cm.bounds()
  mpc = MPCFunction("f32_composed", F, cm.stage_cost("f32_composed_l"), cm.terminal_cost("f32_composed_lN"),
                    horizon=30, x_bounds=x_bounds, u_bounds=u_bounds, options=MPCOptions(scalar="float32"))  # fmt: skip
  code = mpc.sqp.constraints_code
  assert isinstance(code, StageConstraints) and "double" not in code.ode.rate.source_code
  run = simulate(mpc, cm.dynamics("f32_composed_plant"), X0, 100)
  reference = simulate(cm.stabilizing("f32_composed_ref"), cm.dynamics("f32_composed_plant"), X0, 100)
  assert run.cost == pytest.approx(reference.cost, rel=1e-3)
