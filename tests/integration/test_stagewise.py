"""Stage-wise derivatives of multiple-shooting NLPs whose dynamics come from `rk4` (anvil.mpc.stagewise and the run-time
integrator derivatives of anvil/explicit_rk.hpp): equal to the derivatives of the NLP differentiated as one graph,
and the controllers built on them equal to those built without."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av
from anvil import Arg, NumericalFunction, Tensor
from anvil.ad import sphessian, spjacobian
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, Soft, rk4, simulate
from anvil.mpc.integrators import ExplicitIntegrator
from anvil.mpc.stagewise import StageConstraints, StageDerivative
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm

NX, NU, NP, N = 3, 2, 2, 4


def ode(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
  """A nonlinear 3-state model with two inputs and two parameters (every kind of second derivative: states with
  states, states with inputs and parameters)."""
  return x[1:2].cat(
    -p[0] * x[0:1].sin() + u[0:1] * x[2:3] - p[1] * x[1:2] * x[1:2].abs(), (u[1:2] - x[2:3]) * x[0:1].cos()
  )


def ocp(name: str, options: MPCOptions, affine: bool = False) -> MPCFunction:
  """The test OCP; `affine` makes its stage residual affine in (x, u) and adds an affine terminal residual."""
  F = rk4(f"{name}_F", ode, 0.1, nx=NX, nu=NU, np=NP, steps=2)
  stage = (
    (lambda x, u, p: (x - p[0]).cat(u * 2.0 - x[0:1])) if affine else (lambda x, u, p: (x - p[0]).cat(u * x[0:1].exp()))
  )
  residual = NumericalFunction(f"{name}_r", stage, (Arg(NX), Arg(NU), Arg(NP)))
  terminal = (
    LeastSquares(NumericalFunction(f"{name}_rN", lambda x: x[0:2] * 3.0, (Arg(NX),)), np.ones(2)) if affine else None
  )
  path = NumericalFunction(f"{name}_h", lambda x, u, p: (x[0:1] * u[0:1] + p[1]).cat(x[2:3] ** 2), (Arg(NX), Arg(NU),
                           Arg(NP)))  # fmt: skip
  return MPCFunction(
    name, F, LeastSquares(residual, np.ones(NX + NU)), terminal, horizon=N, constraints=path,
    constraint_bounds=(np.array([-5.0, 0.0]), np.array([5.0, 4.0])), x_bounds=(np.full(NX, -3.0), np.full(NX, 3.0)),
    soft={"x": Soft(l1=1.0, l2=10.0)}, options=options,
  )  # fmt: skip


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  return ocp("test_stagewise", MPCOptions())


def test_the_integrator_knows_its_ode_and_method() -> None:
  F = rk4("test_stagewise_rk4", ode, 0.3, nx=NX, nu=NU, np=NP, steps=3)
  assert isinstance(F, ExplicitIntegrator) and F.steps == 3 and F.h == pytest.approx(0.1)
  x, u, p = np.array([0.3, -0.2, 0.5]), np.array([0.4, -0.7]), np.array([1.5, 0.2])
  step = lambda x: x + F.h * sum(b * k for b, k in zip(F.b, _stages(F, x, u, p), strict=True))
  np.testing.assert_allclose(F(x, u, p), step(step(step(x))), rtol=1e-13)


def _stages(F: ExplicitIntegrator, x: np.ndarray, u: np.ndarray, p: np.ndarray) -> list[np.ndarray]:
  ks: list[np.ndarray] = []
  for row in F.a:
    point = x + F.h * sum((a * k for a, k in zip(row, ks, strict=False)), np.zeros_like(x))
    ks.append(np.asarray(F.rate(point, u, p)))
  return ks


@pytest.mark.parametrize("affine", [False, True], ids=["nonlinear_residual", "affine_residuals"])
def test_stage_functions_equal_the_nlp_functions(mpc: MPCFunction, affine: bool) -> None:
  if affine:  # NOTE: affine least squares: the cost's exact Hessian comes from its Gauss-Newton blocks (a term)
    mpc = ocp("test_stagewise_affine", MPCOptions(), affine=True)
  ocp_, sqp = mpc.ocp, mpc.sqp
  assert isinstance(sqp.jacobian, StageDerivative) and isinstance(sqp.hessian, StageDerivative)
  assert len(sqp.hessian.terms) == 1  # the cost's Hessian stage by stage (Gauss-Newton blocks where affine)
  assert isinstance(sqp.constraints_code, StageConstraints)
  _, constraints = ocp_.functions()
  rng = np.random.default_rng(3)
  reference_jacobian = spjacobian(constraints, 0, name="test_stagewise_reference_jacobian")

  def lagrangian(w: Tensor, params: Tensor, sigma: Tensor, lam: Tensor) -> Tensor:
    return sigma[0] * ocp_.cost(w, params) + (ocp_.constraint_values(w, params) * lam).sum()

  args = (Arg(ocp_.nw), Arg(ocp_.n_params), Arg(1), Arg(ocp_.ng))
  reference_hessian = sphessian(NumericalFunction("test_stagewise_lagrangian", lagrangian, args), 0,
                                name="test_stagewise_reference_hessian")  # fmt: skip
  for _ in range(3):
    w, params = rng.normal(size=ocp_.nw), rng.normal(size=ocp_.n_params)
    sigma, lam = rng.uniform(0.1, 2.0, size=1), rng.normal(size=ocp_.ng)
    g, g_ref = sqp.constraints_code(w, params), constraints(w, params)
    np.testing.assert_allclose(g, g_ref, rtol=1e-13, atol=1e-13 * np.abs(g_ref).max())
    J, J_ref = sqp.jacobian(w, params).toarray(), reference_jacobian(w, params).toarray()
    np.testing.assert_allclose(J, J_ref, rtol=1e-12, atol=1e-12 * np.abs(J_ref).max())
    H, H_ref = sqp.hessian(w, params, sigma, lam).toarray(), reference_hessian(w, params, sigma, lam).toarray()
    np.testing.assert_allclose(H, H_ref, rtol=1e-12, atol=1e-12 * np.abs(H_ref).max())
    assert np.abs(H_ref).max() > 1.0 and np.count_nonzero(np.triu(H_ref, 1)) > 0  # curved, coupled: a real check
  # x_N's block: dense on the coordinates the terminal residual uses (the Gauss-Newton block's; the reference's cost
  # reads its diagonal weight on its pattern alone), none where it ignores x_N[2]
  last = slice(N * (NX + NU), N * (NX + NU) + NX)
  pattern = lambda f: sp.csc_array((np.ones(f.nnz), f.indices, f.indptr), shape=f.shape).toarray()[last, last] != 0
  used = pattern(reference_hessian).any(axis=0)
  assert not used[2]
  np.testing.assert_array_equal(pattern(sqp.hessian), np.triu(np.outer(used, used)))
  # the dynamics' entries vary; the rest keeps its constants (the defects' identity blocks)
  constants = sqp.jacobian.constant_entries
  assert constants is not None and np.isnan(constants[sqp.jacobian.block_to_out]).all()
  assert np.sum(constants == 1.0) >= NX * (N + 1)


def _array(name: str, values: np.ndarray) -> str:
  """A C++ array of doubles, exact (hexadecimal literals)."""
  return f"static const double {name}[] = {{{', '.join(float(v).hex() for v in values)}}};"


def test_constraints_take_the_steps_the_jacobian_kept(mpc: MPCFunction, tmp_path: Path) -> None:
  """The constraints at the point of the last Jacobian evaluation (a real-time iteration's feedback) take the steps
  its forward sensitivities computed instead of stepping again: the generated pair, run in C++, gives g equal to the
  bit to the constraints' own stepping, and a stage whose input or parameter changed since is stepped again."""
  constraints, jacobian, _ = mpc.ocp.stagewise("test_stagewise_kept", hessian=False, keep_steps=True)
  assert constraints.takes_steps_from(jacobian) and not constraints.takes_steps_from(mpc.sqp.jacobian)
  assert not mpc.sqp.reuses_steps  # a full SQP's line search never evaluates g where the Jacobian was: no memory
  assert ocp("test_stagewise_kept_rti", MPCOptions(mode="rti")).sqp.reuses_steps
  av.generate_module("kept", [constraints, jacobian], out_dir=tmp_path)
  rng = np.random.default_rng(7)
  w, params = rng.normal(size=mpc.ocp.nw), rng.normal(size=mpc.ocp.n_params)
  stage, u_at, p_at = 1, 1 * (NX + NU) + NX, mpc.ocp.nx + 1 * NP  # stage 1's first input and first parameter
  row = mpc.ocp.nx + stage * NX  # its first defect row
  c, j = constraints.name, jacobian.name
  main = f"""#include <cmath>
#include <cstdio>
#include <cstring>
#include "kept.hpp"
{_array("w0", w)}
{_array("p0", params)}
static {c}::WS_t wc;
static {j}::WS_t wj;
static {c}::Kept kept;
static {c}::IN0_t w;
static {c}::IN1_t p;
static {c}::OUT0_t g, reused;
static {j}::OUT0_t jac;
// 1 where call_reusing gives what call gives, to the bit
static int same() {{
  {c}::call(w, p, g, wc);
  {c}::call_reusing(w, p, reused, wc, kept);
  return std::memcmp(g.data(), reused.data(), sizeof(double) * {c}::OUT0_t::size) == 0;
}}
int main() {{
  {c}::init(wc);
  {j}::init(wj);
  for (std::size_t k = 0; k < {c}::IN0_t::size; ++k) w[k] = w0[k];
  for (std::size_t k = 0; k < {c}::IN1_t::size; ++k) p[k] = p0[k];
  std::printf("%d\\n", same());  // nothing kept yet
  {j}::call_keeping(w, p, jac, wj, kept);
  std::printf("%d\\n", same());  // every stage's step taken from the Jacobian's
  kept.x_next[{stage}][0] += 1.0;  // a kept step marked: taken where the stage's inputs match
  const int marked = !same() && std::fabs(reused[{row}] - (g[{row}] - 1.0)) < 1e-12;
  reused[{row}] = g[{row}];
  std::printf("%d\\n", marked && std::memcmp(g.data(), reused.data(), sizeof(double) * {c}::OUT0_t::size) == 0);
  w[{u_at}] = std::nextafter(w[{u_at}], 1e300);  // another input: stepped again
  std::printf("%d\\n", same());
  w[{u_at}] = w0[{u_at}];
  p[{p_at}] = -p[{p_at}];  // another parameter: stepped again
  std::printf("%d\\n", same());
  p[{p_at}] = p0[{p_at}];
  std::printf("%d\\n", !same());  // the marked step again
  return 0;
}}
"""
  (tmp_path / "main.cpp").write_text(main)
  build = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
                          "-fno-sanitize-recover=all", "main.cpp", "kept.cpp", "-o", "kept"], cwd=tmp_path,
                         capture_output=True, text=True)  # fmt: skip
  assert build.returncode == 0, build.stderr
  run = subprocess.run([str(tmp_path / "kept")], capture_output=True, text=True)
  assert run.returncode == 0 and run.stdout.split() == ["1"] * 6, run.stdout + run.stderr


def test_controllers_equal_the_ones_without_stage_derivatives() -> None:
  x0 = np.array([0.4, -0.3, 0.2])
  F = rk4("test_stagewise_plant", ode, 0.1, nx=NX, nu=NU, np=NP, steps=2)
  plant = lambda x, u: np.asarray(F(x, u, np.array([1.5, 0.2])))
  loops = {}
  for hessian, stagewise in (("exact", True), ("exact", False), ("gauss_newton", True)):
    name = f"test_stagewise_{hessian}_{int(stagewise)}"
    mpc = ocp(name, MPCOptions(hessian=hessian, integrator_derivatives=stagewise))
    assert isinstance(mpc.sqp.jacobian, StageDerivative) is stagewise
    loops[hessian, stagewise] = cl = simulate(mpc, plant, x0, 8, p=np.array([1.5, 0.2]))
    assert cl.status_counts == {"converged": 8}
  # every controller converges to the same KKT points: the same closed loop
  for key in (("exact", False), ("gauss_newton", True)):
    np.testing.assert_allclose(loops[key].u, loops["exact", True].u, atol=1e-7)


def test_simulate_gives_a_parameter_callable_the_plants_state() -> None:
  """p(t, x): a reference that depends on the state is called with the plant's state of each step (the one the
  controller then sees); p(t) keeps getting the step alone."""
  mpc = ocp("test_stagewise_exact_1", MPCOptions(hessian="exact"))
  F = rk4("test_stagewise_plant", ode, 0.1, nx=NX, nu=NU, np=NP, steps=2)
  plant = lambda x, u: np.asarray(F(x, u, np.array([1.5, 0.2])))
  seen: list[tuple[int, np.ndarray]] = []
  by_state = simulate(mpc, plant, np.array([0.4, -0.3, 0.2]), 5,
                      p=lambda t, x: seen.append((t, x.copy())) or np.array([1.5, 0.2]))  # fmt: skip
  assert [t for t, _ in seen] == list(range(5))
  np.testing.assert_array_equal(np.array([x for _, x in seen]), by_state.x[:-1])
  by_step = simulate(mpc, plant, np.array([0.4, -0.3, 0.2]), 5, p=lambda t: np.array([1.5, 0.2]))
  np.testing.assert_array_equal(by_step.u, by_state.u)


def test_cartpole_swing_up_with_stage_derivatives_matches_the_reference() -> None:
  """The P2 stabilizing MPC (dynamics from rk4, so stage derivatives by default) reaches the reference cost."""
  stabilizing = cm.stabilizing("test_stagewise_p2", MPCOptions())
  assert isinstance(stabilizing.sqp.hessian, StageDerivative)
  cl = simulate(stabilizing, cartpole.step_numpy, cm.X0_STABILIZE, cm.STEPS_STABILIZE)
  assert cl.cost == pytest.approx(cm.COST_STABILIZE, rel=1e-5)


def test_a_nan_in_the_stage_wise_dynamics_is_a_status_not_a_crash() -> None:
  """An ODE that returns NaN (sqrt of a negative state) inside the run-time integrator: the call reports
  numerical_error naming the dynamics and the stage, its input stays finite, and the next call from a valid state
  converges."""
  F = rk4("test_stagewise_nan_F", lambda x, u: x[0:1].sqrt().cat(u - x[1:2]), 0.1, nx=2, nu=1)
  residual = NumericalFunction("test_stagewise_nan_r", lambda x, u: x.cat(u), (Arg(2), Arg(1)))
  mpc = MPCFunction("test_stagewise_nan", F, LeastSquares(residual, np.ones(3)), None, horizon=5)
  assert isinstance(mpc.sqp.jacobian, StageDerivative)
  sol = mpc(np.array([-1.0, 0.0]))
  assert sol.status == "numerical_error" and "dynamics test_stagewise_nan_F" in sol.stats["message"]
  assert "stage 0" in sol.stats["message"] and np.isfinite(sol.u0).all()
  assert mpc(np.array([1.0, 0.0])).status == "converged"


def test_step_error_compares_a_step_with_two_halves() -> None:
  """On x' = -40 x + u, RK4 steps multiply x by R(h λ) (its stability polynomial): the error estimate is the
  difference of R(-4) and R(-2)² (one unstable step of 0.1 s against two stable ones), and ten steps are stable."""
  decay = lambda x, u: -40.0 * x + u[0]
  R = lambda z: 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24
  x, u = np.array([2.0]), np.zeros(1)
  one = rk4("test_stagewise_decay1", decay, 0.1, nx=1, nu=1)
  assert one.step_error(x, u) == pytest.approx(abs(R(-4.0) - R(-2.0) ** 2) * 2.0 / 3.0, rel=1e-12)
  assert "take more (steps=) or use irk" in one.unstable_hint(x, u)
  ten = rk4("test_stagewise_decay10", decay, 0.1, nx=1, nu=1, steps=10)
  assert ten.step_error(x, u) == pytest.approx(abs(R(-0.4) ** 10 - R(-0.2) ** 20) * 2.0 / 3.0, rel=1e-9)
  assert ten.unstable_hint(x, u) == ""


def test_a_diverging_explicit_model_says_why_it_failed() -> None:
  """A stiff reactor (its reaction 100x faster than the sample) under one RK4 step per sample: the solve ends
  numerical_error, its message saying the step is too long for the model; ten steps solve it."""

  def cstr(x: Tensor, u: Tensor) -> Tensor:
    k = 100.0 * (2.0 * (1.0 - 1.0 / x[1])).exp()
    return Tensor.stack(1.0 - x[0] - k * x[0], 1.0 - x[1] + 0.5 * k * x[0] - u[0])

  x0, residual = np.array([1.0, 1.0]), lambda x, u: x.cat(u) - Tensor([0.0083, 1.1, 0.396])
  for steps, ok in ((1, False), (10, True)):
    name = f"test_stagewise_stiff{steps}"
    r = NumericalFunction(f"{name}_r", residual, (Arg(2), Arg(1)))
    mpc = MPCFunction(name, rk4(f"{name}_F", cstr, 0.1, nx=2, nu=1, steps=steps), LeastSquares(r, [1e3, 10.0, 0.1]),
                      horizon=10, u_bounds=([0.0], [3.0]))  # fmt: skip
    sol = mpc(x0)
    assert sol.success == ok, (steps, sol.status, sol.message)
    assert ("steps of 0.1 s are too long for the model" in sol.message) != ok, sol.message
