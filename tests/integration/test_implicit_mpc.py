"""MPC on dynamics made by `irk`: the NLP's derivatives from the implicit function theorem against finite differences
(an ODE and an index-1 DAE), the stiff CSTR's closed loop against CasADi IPOPT on the same Radau collocation, float32,
the C++ harness equal to Python (warning-free, sanitized), and the combinations refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, irk, simulate
from anvil.mpc.harness import INCLUDES, SOURCE, build_harness, run_harness
from anvil.mpc.stagewise import StageConstraints, StageDerivative
from anvil.problems import cstr
from anvil.problems.backend import NUMPY, TINYGRAD
from anvil.sqp import SQPOptions
from tests.conftest import STRICT
from tests.integration.test_implicit import cartesian_pendulum, pendulum, with_algebraic_state, with_torque_eliminated

CLOSED_LOOP_STEPS = 15


def tracking(name: str, nx: int, nu: int) -> LeastSquares:
  return LeastSquares(NumericalFunction(name, lambda x, u: x.cat(u), (Arg(nx), Arg(nu))), np.ones(nx + nu))


def lagrangian_gradient(mpc: MPCFunction, w: np.ndarray, params: np.ndarray, sigma: np.ndarray, lam: np.ndarray):  # type: ignore[no-untyped-def]
  sqp = mpc.sqp
  return sigma[0] * sqp.gradient(w, params) + sqp.jacobian(w, params).toarray().T @ lam


@pytest.mark.parametrize("model", ["ode", "dae"])
def test_nlp_derivatives_match_finite_differences(model: str) -> None:
  if model == "ode":
    F = irk("irk_mpc_ode_F", pendulum, 0.3, nx=2, nu=1, np=1, method="gauss", stages=2, steps=2)
    mpc = MPCFunction("irk_mpc_ode", F, tracking("irk_mpc_ode_r", 2, 1), horizon=3)
  else:
    F = irk("irk_mpc_dae_F", cartesian_pendulum, 0.2, nx=4, nu=1, nz=1, stages=2, steps=2, z_guess=[9.81])
    mpc = MPCFunction("irk_mpc_dae", F, tracking("irk_mpc_dae_r", 4, 1), horizon=3)
  ocp, sqp = mpc.ocp, mpc.sqp
  assert isinstance(sqp.constraints_code, StageConstraints) and isinstance(sqp.hessian, StageDerivative)
  rng = np.random.default_rng(7)
  w = rng.normal(size=ocp.nw)
  if model == "dae":  # near the circle |p| = 1, where the tension is positive
    for k in range(ocp.N + 1):
      w[k * ocp.nz : k * ocp.nz + 2] = [np.sin(0.5 + 0.1 * k), -np.cos(0.5 + 0.1 * k)]
  params = mpc.ocp.parameter(np.zeros(ocp.nx), np.full((ocp.N + 1, ocp.np), 8.0) if ocp.np else None)
  sigma, lam = np.array([0.7]), rng.normal(scale=3.0, size=ocp.ng)
  g = sqp.constraints_code(w, params)
  x_next = np.array([F(w[k * ocp.nz : k * ocp.nz + ocp.nx], w[k * ocp.nz + ocp.nx : (k + 1) * ocp.nz],
                       *([params[ocp.nx + k * ocp.np : ocp.nx + (k + 1) * ocp.np]] if ocp.np else []))
                     for k in range(ocp.N)])  # fmt: skip
  x_following = np.array([w[(k + 1) * ocp.nz : (k + 1) * ocp.nz + ocp.nx] for k in range(ocp.N)])
  np.testing.assert_allclose(g[ocp.nx : ocp.nx * (ocp.N + 1)], (x_following - x_next).ravel(), atol=1e-12)
  eps, J, H = 1e-6, sqp.jacobian(w, params).toarray(), sqp.hessian(w, params, sigma, lam).toarray()
  H = H + np.triu(H, 1).T
  for j in range(ocp.nw):
    d = np.zeros(ocp.nw)
    d[j] = eps
    column = (sqp.constraints_code(w + d, params) - sqp.constraints_code(w - d, params)) / (2 * eps)
    np.testing.assert_allclose(J[:, j], column, atol=1e-7 * max(1.0, np.abs(J).max()))
    column = (lagrangian_gradient(mpc, w + d, params, sigma, lam) - lagrangian_gradient(mpc, w - d, params, sigma,
                                                                                          lam)) / (2 * eps)  # fmt: skip
    np.testing.assert_allclose(H[:, j], column, atol=1e-6 * max(1.0, np.abs(H).max()))
  assert np.abs(np.triu(H, 1)).max() > 1e-2, "the dynamics' curvature couples states and inputs: a real check"


def closed_loop_cost(x: np.ndarray, u: np.ndarray) -> float:
  """The CSTR's stage costs summed over a closed loop."""
  return sum(float(np.sum(cstr.WEIGHTS * cstr.residual(x[k], u[k], NUMPY) ** 2)) for k in range(len(u)))


def ipopt_closed_loop(x0: np.ndarray, steps: int, plant) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
  """The CSTR's closed loop with IPOPT as the controller (warm started from the shifted solution)."""
  xs, us, guess = [x0], [], None
  for _ in range(steps):
    sol = cstr.solve_ipopt(xs[-1], guess)
    assert sol.success
    us.append(sol.u[0])
    guess = (np.vstack([sol.x[1:], sol.x[-1:]]), np.vstack([sol.u[1:], sol.u[-1:]]))
    xs.append(plant(xs[-1], sol.u[0]))
  return np.array(xs), np.array(us)


@pytest.fixture(scope="module")
def ipopt_loop() -> tuple[np.ndarray, np.ndarray]:
  pytest.importorskip("casadi")
  return ipopt_closed_loop(cstr.X0, CLOSED_LOOP_STEPS, cstr.dynamics("irk_cstr_plant"))


@pytest.mark.parametrize("hessian", ["exact", "gauss_newton"])
def test_stiff_cstr_closed_loop_matches_ipopt(hessian: str, ipopt_loop: tuple[np.ndarray, np.ndarray]) -> None:
  # NOTE: tol relative to the cost's gradient (~2e3 at the start); no "acceptable" stop (Gauss-Newton is linear)
  mpc = cstr.cstr_mpc(
    f"irk_cstr_{hessian}", MPCOptions(hessian=hessian, sqp=SQPOptions(max_iter=50, tol=1e-10, acceptable_tol=1e-10))
  )
  plant = cstr.dynamics("irk_cstr_plant")
  loop = simulate(mpc, plant, cstr.X0, CLOSED_LOOP_STEPS, progress=False)
  assert all(s == "converged" for s in loop.statuses)
  xs, us = ipopt_loop
  np.testing.assert_allclose(loop.u, us, atol=1e-6)
  np.testing.assert_allclose(loop.x, xs, atol=1e-6)
  assert closed_loop_cost(loop.x, loop.u) == pytest.approx(closed_loop_cost(xs, us), rel=1e-9)
  assert loop.x[:, 1].max() > cstr.T_REF + 0.1 and loop.u.max() > 3 * cstr.Q_REF, "the start heats the reactor"


def test_stiff_cstr_float32_controller_tracks_the_float64_one() -> None:
  plant = cstr.dynamics("irk_cstr_plant")
  double = simulate(cstr.cstr_mpc("irk_cstr_f64"), plant, cstr.X0, CLOSED_LOOP_STEPS, progress=False)
  single = simulate(cstr.cstr_mpc("irk_cstr_f32", MPCOptions(scalar="float32")), plant, cstr.X0, CLOSED_LOOP_STEPS,
                    progress=False)  # fmt: skip
  assert all(s == "converged" for s in single.statuses)
  # NOTE: float32's tolerance (1e-4 of the cost's gradient, ~2e3 at the start) leaves u0 1% off in a flat direction
  np.testing.assert_allclose(single.x, double.x, atol=3e-3)
  assert closed_loop_cost(single.x, single.u) == pytest.approx(closed_loop_cost(double.x, double.u), rel=1e-6)


def test_mpc_on_a_dae_equals_the_mpc_on_its_ode() -> None:
  # NOTE: Radau IIA on a semi-explicit index-1 DAE is Radau IIA on the ODE with z = z(x) substituted: the same
  # discrete model, so the two controllers' closed loops agree to Newton's and the SQP's tolerances
  dae = irk("irk_dae_mpc_F", with_algebraic_state, 0.1, nx=2, nu=1, nz=1, stages=2)
  ode = irk("irk_ode_mpc_F", with_torque_eliminated, 0.1, nx=2, nu=1, stages=2)
  options = MPCOptions(sqp=SQPOptions(max_iter=50, tol=1e-10))
  bounds = (np.array([-3.0]), np.array([3.0]))
  loops = []
  for name, F in (("irk_dae_mpc", dae), ("irk_ode_mpc", ode)):
    mpc = MPCFunction(name, F, tracking(f"{name}_r", 2, 1), horizon=15, u_bounds=bounds, options=options)
    loops.append(simulate(mpc, F, np.array([1.2, 0.0]), 12, progress=False))
  assert all(s == "converged" for loop in loops for s in loop.statuses)
  np.testing.assert_allclose(loops[0].u, loops[1].u, atol=1e-8)
  np.testing.assert_allclose(loops[0].x, loops[1].x, atol=1e-8)
  assert loops[0].x[-1, 0] < 0.4 and np.abs(loops[0].u).max() > 0.5, "the controller acts: the angle falls from 1.2"


def test_a_failing_implicit_step_ends_the_solve_with_a_message() -> None:
  F = irk("irk_failing_F", lambda x, u: cstr.ode(x, u, TINYGRAD), cstr.DT, nx=cstr.NX, nu=cstr.NU, newton_iter=1)
  residual = NumericalFunction(
    "irk_failing_r", lambda x, u: cstr.residual(x, u, TINYGRAD), (Arg(cstr.NX), Arg(cstr.NU))
  )
  sol = MPCFunction("irk_failing", F, LeastSquares(residual, cstr.WEIGHTS), horizon=5)(cstr.X0)
  assert sol.status == "numerical_error"
  assert "dynamics irk_failing_F returned NaN/inf at stage 0" in sol.message
  assert "Newton's method fails" in sol.message


def test_irk_dynamics_need_the_run_time_integrator() -> None:
  F = irk("irk_refused_F", pendulum, 0.3, nx=2, nu=1, np=1)
  with pytest.raises(ValueError, match=r"dynamics made by irk .* need MPCOptions\(integrator_derivatives=True\)"):
    MPCFunction("irk_refused", F, tracking("irk_refused_r", 2, 1), options=MPCOptions(integrator_derivatives=False))


# *** the C++ harness: the generated controller (and the irk plant) in a robot-side closed loop ***


@pytest.fixture(scope="module")
def harness_mpc() -> MPCFunction:
  r = lambda x, u: cstr.residual(x, u, TINYGRAD)
  cost = NumericalFunction("irk_harness_l", lambda x, u: (Tensor(cstr.WEIGHTS) * r(x, u) * r(x, u)).sum(),
                           (Arg(cstr.NX), Arg(cstr.NU)))  # fmt: skip
  return MPCFunction("irk_harness", cstr.dynamics("irk_harness_F"), cost, horizon=cstr.HORIZON,
                     x_bounds=(np.array([-np.inf, -np.inf]), np.array([np.inf, cstr.T_MAX])),
                     u_bounds=(np.zeros(1), np.array([cstr.Q_MAX])))  # fmt: skip


def test_cpp_closed_loop_equals_python_and_compiles_warning_free(harness_mpc: MPCFunction, tmp_path: Path) -> None:
  exe = build_harness(harness_mpc, tmp_path, x0=cstr.X0)
  run = run_harness(exe, cstr.X0, 10)
  loop = simulate(harness_mpc, harness_mpc.ocp.dynamics, cstr.X0, 10, progress=False)
  np.testing.assert_allclose(run.x, loop.x, atol=1e-9)
  np.testing.assert_allclose(run.u, loop.u, atol=1e-9)
  for compiler in ("g++", "clang++"):
    if shutil.which(compiler) is None:
      continue
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror", *(f"-I{tmp_path / i}" for i in INCLUDES)]
    for source, strict in ((tmp_path / "irk_harness_controller.cpp", STRICT), (SOURCE, [])):
      command = [compiler, *flags, *strict, "-c", str(source), "-o", os.devnull]
      proc = subprocess.run(command, capture_output=True, text=True)
      assert proc.returncode == 0 and not proc.stderr, f"{compiler} {source.name}:\n{proc.stderr}"


def test_cpp_closed_loop_is_clean_under_sanitizers(harness_mpc: MPCFunction, tmp_path: Path) -> None:
  flags = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all")
  exe = build_harness(harness_mpc, tmp_path, flags=flags, x0=cstr.X0)
  env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"}
  proc = subprocess.run([str(exe), "4", "--csv", str(tmp_path / "run.csv")], capture_output=True, text=True, env=env)
  assert proc.returncode == 0 and "runtime error" not in proc.stderr and "Sanitizer" not in proc.stderr, proc.stderr
  assert "status: converged 4" in proc.stdout
