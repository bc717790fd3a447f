"""SQPFunction on classic NLPs with known optima: objective, solution, multiplier signs, KKT residuals, statuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import anvil as av
from anvil import Arg, NumericalFunction, Tensor
from anvil.codegen import templated
from anvil.sqp import SQPFunction, SQPOptions
from anvil.sqp.boundary import SQP_SCALARS
from tests.conftest import STRICT, qp_named

INF = np.inf


def kkt(res, grad_f: np.ndarray, jac: np.ndarray) -> float:
  """Stationarity residual ‖∇f + Jᵀλ_g + λ_x‖∞ computed independently in numpy."""
  return float(np.abs(grad_f + jac.T @ res.lam_g + res.lam_x).max())


@pytest.fixture(scope="module")
def rosenbrock() -> SQPFunction:
  f = av.NumericalFunction(
    "sqp_rosen_f", lambda x, p: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2, (Arg(2), Arg(0))
  )
  return SQPFunction("sqp_rosen", f)


def test_rosenbrock(rosenbrock: SQPFunction) -> None:
  res = rosenbrock(np.array([-1.2, 1.0]), np.zeros(0), np.full(2, -INF), np.full(2, INF))
  assert res.success and res.status == "converged" and res.iterations < 50
  np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-6)
  assert res.f < 1e-10
  assert len(res.stats["objective"]) == res.iterations + 1 and res.stats["dual_infeasibility"][-1] <= 1e-8
  again = rosenbrock(np.array([-1.2, 1.0]), np.zeros(0), np.full(2, -INF), np.full(2, INF))
  assert again.iterations == res.iterations and again.stats is not res.stats, "every call returns its own stats"
  np.testing.assert_array_equal(again.x, res.x)


def test_hs071() -> None:
  f = av.NumericalFunction("sqp_hs71_f", lambda x, p: x[0] * x[3] * (x[0] + x[1] + x[2]) + x[2], (Arg(4), Arg(0)))
  g = av.NumericalFunction("sqp_hs71_g", lambda x, p: Tensor.stack(x[0] * x[1] * x[2] * x[3], (x * x).sum()),
                           (Arg(4), Arg(0)))  # fmt: skip
  res = SQPFunction("sqp_hs71", f, g)(np.array([1.0, 5.0, 5.0, 1.0]), np.zeros(0), np.ones(4), np.full(4, 5.0),
                                      [25.0, 40.0], [INF, 40.0])  # fmt: skip
  assert res.success
  assert res.f == pytest.approx(17.0140173, rel=1e-6)
  np.testing.assert_allclose(res.x, [1.0, 4.7429994, 3.8211503, 1.3794082], atol=1e-6)
  assert res.lam_g[0] < 0 and res.lam_x[0] < 0, "active lower bounds carry negative multipliers"
  x = res.x
  grad = np.array([x[3] * (2 * x[0] + x[1] + x[2]), x[0] * x[3], x[0] * x[3] + 1, x[0] * (x[0] + x[1] + x[2])])
  jac = np.array([[x[1] * x[2] * x[3], x[0] * x[2] * x[3], x[0] * x[1] * x[3], x[0] * x[1] * x[2]], 2 * x])
  assert kkt(res, grad, jac) < 1e-6
  # complementarity, recomputed here: multipliers vanish off their bounds
  g = np.array([np.prod(x), x @ x])
  distance_g = np.where(res.lam_g > 0, 40.0 - g, g - 25.0)
  distance_x = np.where(res.lam_x > 0, 5.0 - x, x - 1.0)
  assert max(np.abs(res.lam_g * distance_g).max(), np.abs(res.lam_x * distance_x).max()) < 1e-7
  assert res.stats["complementarity"][-1] < 1e-7


def test_generated_functions_compiled_as_translation_units_of_their_own(
  fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  # NOTE: a large model's derivatives are compiled side by side with the solver; here every function is "large"
  monkeypatch.setattr(templated, "SPLIT_OVER", 1)
  f = av.NumericalFunction("sqp_split_f", lambda x, p: x[0] * x[3] * (x[0] + x[1] + x[2]) + x[2], (Arg(4), Arg(0)))
  g = av.NumericalFunction("sqp_split_g", lambda x, p: Tensor.stack(x[0] * x[1] * x[2] * x[3], (x * x).sum()),
                           (Arg(4), Arg(0)))  # fmt: skip
  res = SQPFunction("sqp_split", f, g)(np.array([1.0, 5.0, 5.0, 1.0]), np.zeros(0), np.ones(4), np.full(4, 5.0),
                                       [25.0, 40.0], [INF, 40.0])  # fmt: skip
  assert res.success and res.f == pytest.approx(17.0140173, rel=1e-6)
  np.testing.assert_allclose(res.x, [1.0, 4.7429994, 3.8211503, 1.3794082], atol=1e-6)
  parts = {p.name: p.read_text() for p in fresh_cache.glob("src/*/anvil_jit_sqp_split_part*.cpp")}
  holding = {fn: {name for name, text in parts.items() if f"namespace {fn} {{" in text}
             for fn in ("sqp_split_lagrangian_hessian", "sqp_split_constraint_jacobian")}  # fmt: skip
  assert all(len(names) == 1 for names in holding.values()), holding
  assert holding["sqp_split_lagrangian_hessian"] != holding["sqp_split_constraint_jacobian"], "a unit each"


def test_active_bounds_and_equalities_with_a_parameter() -> None:
  f = av.NumericalFunction("sqp_par_f", lambda x, p: ((x - p[:2]) ** 2).sum(), (Arg(2), Arg(3)))
  g = av.NumericalFunction("sqp_par_g", lambda x, p: (x.sum() - p[2]).reshape(1), (Arg(2), Arg(3)))
  solver = SQPFunction("sqp_par", f, g)
  # equality x0 + x1 = 1 closest to (0, 0): (0.5, 0.5), multiplier -1
  res = solver(np.zeros(2), np.array([0.0, 0.0, 1.0]), np.full(2, -INF), np.full(2, INF), [0.0], [0.0])
  np.testing.assert_allclose(res.x, [0.5, 0.5], atol=1e-7)
  np.testing.assert_allclose(res.lam_g, [-1.0], atol=1e-6)
  # a new parameter without regenerating: target (2, -1) in the box [0, 1]^2, the equality relaxed to <= 5
  res = solver(np.zeros(2), np.array([2.0, -1.0, 5.0]), np.zeros(2), np.ones(2), [-INF], [0.0])
  assert res.success
  np.testing.assert_allclose(res.x, [1.0, 0.0], atol=1e-7)
  np.testing.assert_allclose(res.lam_x, [2.0, -2.0], atol=1e-6)  # upper active > 0, lower active < 0
  np.testing.assert_allclose(res.lam_g, [0.0], atol=1e-6)


def test_infeasible_problem_reports_a_status() -> None:
  f = av.NumericalFunction("sqp_inf_f", lambda x, p: (x * x).sum(), (Arg(2), Arg(0)))
  g = av.NumericalFunction("sqp_inf_g", lambda x, p: x.sum().reshape(1), (Arg(2), Arg(0)))
  res = SQPFunction("sqp_inf", f, g)(np.zeros(2), np.zeros(0), np.zeros(2), np.ones(2), [3.0], [INF])
  # x0 + x1 >= 3 in the unit box: the least violation is 1, at the corner (1, 1)
  assert res.status == "infeasible" and not res.success
  np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-6)
  assert res.stats["message"] == "infeasible: constraints: row 0 of sqp_inf_g violated by 1"


def test_nan_at_the_start_is_reported_by_name() -> None:
  f = av.NumericalFunction("sqp_nan_f", lambda x, p: x.log().sum(), (Arg(2), Arg(0)))
  res = SQPFunction("sqp_nan", f)(np.array([-1.0, 1.0]), np.zeros(0), np.full(2, -INF), np.full(2, INF))
  assert res.status == "numerical_error"
  assert res.stats["failed_function"] == "sqp_nan_f" and "sqp_nan_f returned NaN/inf" in res.stats["message"]


def test_bad_inputs_raise(rosenbrock: SQPFunction) -> None:
  z, lo, hi = np.zeros(0), np.full(2, -INF), np.full(2, INF)
  with pytest.raises(ValueError, match=r"x0: expected shape \(2,\), got \(3,\)"):
    rosenbrock(np.zeros(3), z, lo, hi)
  with pytest.raises(ValueError, match=r"lbx, ubx: lower > upper at index 1 \(lower 2.0, upper 1.0\)"):
    rosenbrock(np.zeros(2), z, np.array([0.0, 2.0]), np.ones(2))
  with pytest.raises(ValueError, match="x0 contains NaN"):
    rosenbrock(np.array([np.nan, 0.0]), z, lo, hi)
  with pytest.raises(ValueError, match="lbx contains NaN"):
    rosenbrock(np.zeros(2), z, np.array([np.nan, 0.0]), hi)
  with pytest.raises(TypeError, match=r"cost must be a NumericalFunction of"):
    SQPFunction("sqp_bad", av.NumericalFunction("sqp_bad_f", lambda x: x.sum(), Arg(2)))
  with pytest.raises(ValueError, match=r"SQPOptions\.tol"):
    SQPOptions(tol=-1.0)
  with pytest.raises(ValueError, match="convex_hessian=True declares a given hessian positive semidefinite"):
    SQPFunction("sqp_bad_convex", rosenbrock.cost, convex_hessian=True)


def test_standalone_module_matches_python(tmp_path: Path) -> None:
  f = av.NumericalFunction("sqp_mod_f", lambda x, p: ((x - p) ** 2).sum() + (x[0] * x[1]).sin(), (Arg(2), Arg(2)))
  g = av.NumericalFunction("sqp_mod_g", lambda x, p: (x * x).sum().reshape(1), (Arg(2), Arg(2)))
  solver = SQPFunction("sqp_mod", f, g, SQPOptions(max_iter=60))
  p = np.array([1.0, 2.0])
  res = solver(np.zeros(2), p, np.full(2, -INF), np.full(2, INF), [-INF], [1.0])
  assert res.success
  av.generate_module("nlp_solver", [solver], out_dir=tmp_path)
  main = """#include <cstdio>
#include <cmath>
#include "nlp_solver.hpp"
int main() {
  const double x0[2] = {0.0, 0.0}, p[2] = {1.0, 2.0}, lbx[2] = {-HUGE_VAL, -HUGE_VAL}, ubx[2] = {HUGE_VAL, HUGE_VAL};
  const double lbg[1] = {-HUGE_VAL}, ubg[1] = {1.0}, zero[2] = {0.0, 0.0};
  double x[2], f, lam_g[1], lam_x[2];
  static sqp_mod::Stats stats;
  sqp_mod::WS_t ws = sqp_mod::init_ws();
  int status = sqp_mod::call(x0, p, lbx, ubx, lbg, ubg, zero, zero, x, &f, lam_g, lam_x, stats, ws);
  std::printf("%d %d %.17g %.17g %.17g\\n", status, stats.iterations, x[0], x[1], f);
  sqp_mod::Options options;  // the build-time limits, by name
  options.tol = 1e-3;
  status = sqp_mod::call(x0, p, sqp_mod::Bounds{lbx, ubx, lbg, ubg}, zero, zero, x, &f, lam_g, lam_x, stats, ws,
                         options);
  std::printf("%d %d %.17g %.17g %.17g\\n", status, stats.iterations, x[0], x[1], f);
}
"""
  (tmp_path / "main.cpp").write_text(main)
  sources = sorted(str(s.relative_to(tmp_path)) for s in tmp_path.glob("osqp/**/*.c"))
  inc = ["-Iosqp", "-Iosqp/inc/public", "-Iosqp/inc/private"]
  objects = []
  for src in sources:
    obj = src.replace("/", "_") + ".o"
    subprocess.run(["cc", "-std=c99", "-O2", *inc, "-c", src, "-o", obj], cwd=tmp_path, check=True)
    objects.append(obj)
  build = subprocess.run(["c++", "-std=c++17", "-O2", "-Wall", "-Wextra", *STRICT, "-Werror", *inc, "main.cpp",
                          "nlp_solver.cpp", *objects, "-o", "main", "-lm"], cwd=tmp_path, capture_output=True,
                         text=True)  # fmt: skip
  assert build.returncode == 0, build.stderr
  lines = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.splitlines()
  out = lines[0].split()
  assert int(out[0]) == 0 and int(out[1]) == res.iterations
  np.testing.assert_allclose([float(v) for v in out[2:]], [*res.x, res.f], rtol=1e-12, atol=1e-14)
  loose = solver(np.zeros(2), p, np.full(2, -INF), np.full(2, INF), [-INF], [1.0], tol=1e-3)  # call() by structs
  out = lines[1].split()
  assert int(out[0]) == 0 and int(out[1]) == loose.iterations < res.iterations
  np.testing.assert_allclose([float(v) for v in out[2:]], [*loose.x, loose.f], rtol=1e-12, atol=1e-14)


def test_inconsistent_linearization_at_the_start_is_recovered() -> None:
  # at x = 0 the linearized circle constraint reads 0 = 1: the elastic QP keeps the solver going
  f = av.NumericalFunction("sqp_circle_f", lambda x, p: (x[0] - 2) ** 2 + x[1] ** 2, (Arg(2), Arg(0)))
  g = av.NumericalFunction("sqp_circle_g", lambda x, p: (x * x).sum().reshape(1), (Arg(2), Arg(0)))
  res = SQPFunction("sqp_circle", f, g)(np.zeros(2), np.zeros(0), np.full(2, -INF), np.full(2, INF), [1.0], [1.0])
  assert res.success
  np.testing.assert_allclose(res.x, [1.0, 0.0], atol=1e-7)
  np.testing.assert_allclose(res.lam_g, [1.0], atol=1e-6)


def test_locally_infeasible_constraints_end_at_the_least_violation() -> None:
  f = av.NumericalFunction("sqp_far_f", lambda x, p: (x * x).sum(), (Arg(2), Arg(0)))
  g = av.NumericalFunction("sqp_far_g", lambda x, p: x.sum().reshape(1), (Arg(2), Arg(0)))
  res = SQPFunction("sqp_far", f, g)(np.zeros(2), np.zeros(0), np.zeros(2), np.ones(2), [3.0], [INF])
  assert res.status == "infeasible"
  np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-6)  # the feasible point closest to x0 + x1 >= 3
  assert res.stats["most_violated"][:2] == ("g", 0) and res.stats["most_violated"][2] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("qp", ["sparse_ipm", "osqp", "riccati"])
def test_p2_cartpole_swing_up(qp: str) -> None:
  from anvil.mpc import shooting_layout
  from anvil.problems import shooting

  n = 50
  size = shooting.size(n)
  f = av.NumericalFunction(f"swing_{qp}_cost", lambda w, x0: shooting.stage_cost(w, n), (Arg(size), Arg(4)))
  g = av.NumericalFunction(f"swing_{qp}_defects", lambda w, x0: shooting.defects(w, x0, n), (Arg(size), Arg(4)))
  # the NLP has the multiple-shooting stage layout, so its QPs can go to the Riccati interior point
  options = SQPOptions(qp=qp_named(qp))
  x_init, lbx, ubx, w0 = shooting.swing_up(n)
  solver = SQPFunction(f"swing_up_{qp}", f, g, options, stages=shooting_layout(n, 4, 1))
  res = solver(w0, x_init, lbx, ubx, np.zeros(4 * n + 4), np.zeros(4 * n + 4))
  # NOTE: OSQP's path takes 34 iterations on one machine, 43 on another (the same code: rounding differs)
  assert res.success and res.iterations <= 50 and res.stats["qp_solver"] == qp
  assert res.f == pytest.approx(173.28254, rel=1e-6)  # the local optimum IPOPT and CasADi's sqpmethod find
  assert np.abs(shooting.defects_numpy(res.x, x_init, n)).max() < 1e-8
  assert np.all(res.x >= lbx - 1e-8) and np.all(res.x <= ubx + 1e-8)


def test_nonlinear_infeasible_nlp_ends_at_the_least_violation_point() -> None:
  """x in the unit disc and x0 + x1 >= 3 cannot both hold; the L1 violation (|x|² - 1)⁺ + (3 - x0 - x1)⁺ is least at
  x = (1, 1)/√2, where it is 3 - √2 (worked out by hand: along the diagonal at radius r it is 3 - √2 r for r <= 1)."""
  f = av.NumericalFunction("sqp_lv_f", lambda x, p: (x * x).sum(), (Arg(2), Arg(0)))
  g = av.NumericalFunction("sqp_lv_g", lambda x, p: Tensor.stack((x * x).sum(), x[0] + x[1]), (Arg(2), Arg(0)))
  res = SQPFunction("sqp_lv", f, g)(np.array([0.3, 0.1]), np.zeros(0), np.full(2, -INF), np.full(2, INF),
                                    [-INF, 3.0], [1.0, INF])  # fmt: skip
  assert res.status == "infeasible" and not res.success
  np.testing.assert_allclose(res.x, [2**-0.5, 2**-0.5], atol=1e-5)
  violation = max(res.x @ res.x - 1, 0) + max(3 - res.x.sum(), 0)
  # the restoration minimizes f + rho·violation: f's share moves the point by O(|grad f| / rho) (here ~1e-6)
  assert violation == pytest.approx(3 - 2**0.5, abs=1e-5)
  assert res.stats["message"].startswith("infeasible: constraints: row 1 of sqp_lv_g violated by 1.59")


def test_call_time_limits(rosenbrock: SQPFunction) -> None:
  """max_iter, tol and max_time replace the options' for one call."""
  args = (np.array([-1.2, 1.0]), np.zeros(0), np.full(2, -INF), np.full(2, INF))
  full = rosenbrock(*args)
  capped = rosenbrock(*args, max_iter=3)
  assert capped.status == "max_iterations" and capped.iterations == 3
  dual = capped.stats["dual_infeasibility"][-1]
  assert capped.stats["message"] == f"max_iterations: primal infeasibility 0, dual infeasibility {dual:.3g}"
  loose = rosenbrock(*args, tol=1e-3)
  assert loose.status == "converged" and loose.iterations < full.iterations
  assert rosenbrock(*args, max_time=1e-9).status == "time_limit"
  again = rosenbrock(*args)
  assert again.status == "converged" and again.iterations == full.iterations, "limits hold for one call only"
  for bad in ({"max_iter": 10_000}, {"max_iter": -1}, {"tol": 0.0}, {"max_time": -1.0}):
    with pytest.raises(ValueError, match=next(iter(bad))):
      rosenbrock(*args, **bad)  # type: ignore[arg-type]


def test_two_solvers_of_one_name_keep_their_own_code() -> None:
  """Two SQP solvers named alike but of different problems (a model rebuilt in one session), loaded in one process:
  each solves its own. Their libraries' symbols are hidden: GCC binds the static tables of class templates process-
  wide (STB_GNU_UNIQUE), and the second solved with the first's sparsity tables."""
  args = (Arg(2), Arg(0))
  f = NumericalFunction("twin_f", lambda x, p: ((x - Tensor([1.0, 2.0])) ** 2).sum(), args)
  first = SQPFunction("twin", f, NumericalFunction("twin_g", lambda x, p: (x[0] + x[1]).reshape(1), args))
  second = SQPFunction("twin", f, NumericalFunction("twin_g", lambda x, p: (x[1] * 1.0).reshape(1), args))
  bounds = (np.full(2, -np.inf), np.full(2, np.inf), [-np.inf], [1.0])
  np.testing.assert_allclose(first(np.zeros(2), None, *bounds).x, [0.0, 1.0], atol=1e-8)  # x0 + x1 <= 1
  np.testing.assert_allclose(second(np.zeros(2), None, *bounds).x, [1.0, 1.0], atol=1e-8)  # x1 <= 1


def hanging_chain(n: int) -> tuple[SQPFunction, tuple[np.ndarray, ...]]:
  """COPS' hanging chain: n links of length 1.5 / n between (0, 0) and (1, 0) (the ends fixed by bounds), least
  potential energy (a linear cost), the links' lengths as equalities: the solver and (x0, lbx, ubx, lbg, ubg)."""
  length = 1.5 / n

  def links(w: Tensor, p: Tensor) -> Tensor:
    x, y = w[: n + 1], w[n + 1 :]
    dx, dy = x[1:] - x[:-1], y[1:] - y[:-1]
    return dx * dx + dy * dy

  args = (Arg(2 * (n + 1)), Arg(0))
  f = NumericalFunction(f"sqp_chain{n}_f", lambda w, p: w[n + 1 :].sum() / n, args)
  solver = SQPFunction(f"sqp_chain{n}", f, NumericalFunction(f"sqp_chain{n}_g", links, args))
  lbx, ubx = np.full(2 * (n + 1), -INF), np.full(2 * (n + 1), INF)
  lbx[[0, n, n + 1, 2 * n + 1]] = ubx[[0, n, n + 1, 2 * n + 1]] = [0.0, 1.0, 0.0, 0.0]
  t = np.linspace(0.0, 1.0, n + 1)
  return solver, (np.concatenate([t, -0.6 * np.sin(np.pi * t)]), lbx, ubx, np.full(n, length**2), np.full(n, length**2))


def test_equality_multipliers_are_estimated_at_a_cold_start() -> None:
  """Without lam_g0 the equalities' multipliers start at IPOPT's least-squares estimate. With zeros the Lagrangian's
  Hessian is the cost's alone, zero for the chain's linear cost: the first QP is an LP bounded only by the
  regularization and the iterates left for a violation of 1e3 (numerical_error, f = -73; 29 iterations at n = 20,
  6 with the estimate). The solution is checked against scipy's SLSQP on the same NLP."""
  from scipy.optimize import minimize

  n = 10
  solver, (w0, lbx, ubx, lbg, ubg) = hanging_chain(n)
  res = solver(w0, None, lbx, ubx, lbg, ubg)
  assert res.status == "converged" and res.iterations <= 10, res.stats["message"]
  links = lambda w: np.diff(w[: n + 1]) ** 2 + np.diff(w[n + 1 :]) ** 2 - lbg
  ref = minimize(lambda w: w[n + 1 :].sum() / n, w0, method="SLSQP", bounds=list(zip(lbx, ubx, strict=True)),
                 constraints=[{"type": "eq", "fun": links}], options={"maxiter": 500, "ftol": 1e-12})  # fmt: skip
  assert ref.success
  assert res.f == pytest.approx(ref.fun, rel=1e-7)
  np.testing.assert_allclose(res.x, ref.x, atol=1e-5)
  assert np.abs(links(res.x)).max() < 1e-10 and np.all(res.lam_g > 0), "every link in tension"
  warm = solver(res.x, None, lbx, ubx, lbg, ubg, lam_g0=res.lam_g, lam_x0=res.lam_x)  # given: used as they are
  assert warm.status == "converged" and warm.iterations == 0


def test_second_order_corrections_overcome_the_maratos_effect() -> None:
  """Powell's example of the Maratos effect: min 2 (x0² + x1² - 1) - x0 on the unit circle (optimum (1, 0), multiplier
  -3/2 for the row as written). From a point on the circle near the optimum each full SQP step leaves it by O(|d|²)
  while decreasing f too little for the filter: without corrections the line search shortens the first steps; with
  one second-order correction per rejected step (the default, tried once a step has been shortened) every later step
  is a full one and the solve converges sooner."""
  f = av.NumericalFunction("sqp_maratos_f", lambda x, p: 2 * ((x * x).sum() - 1) - x[0], (Arg(2), Arg(0)))
  g = av.NumericalFunction("sqp_maratos_g", lambda x, p: (x * x).sum().reshape(1), (Arg(2), Arg(0)))
  x0 = np.array([np.cos(0.3), np.sin(0.3)])
  solved = {}
  for soc in (0, 1):
    solver = SQPFunction(f"sqp_maratos_{soc}", f, g, SQPOptions(max_soc=soc))
    res = solver(x0, np.zeros(0), np.full(2, -INF), np.full(2, INF), [1.0], [1.0])
    assert res.success
    np.testing.assert_allclose(res.x, [1.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(res.lam_g, [-1.5], atol=1e-6)
    solved[soc] = res
  assert solved[1].iterations < solved[0].iterations
  steps = solved[1].stats["step"][: solved[1].iterations]
  assert steps[0] < 1.0 and np.all(steps[1:] == 1.0)  # after the first shortened step, full (corrected) ones
  with pytest.raises(ValueError, match="max_soc"):
    SQPOptions(max_soc=-1)


@pytest.mark.parametrize(("qp", "staged"), [(None, False), (None, True), ("osqp", False), ("osqp", True),
                                           ("sparse_ipm", False), ("sparse_ipm", True), ("riccati", True)])  # fmt: skip
def test_reported_qp_solvers_are_the_backends_built(qp: str | None, staged: bool) -> None:
  """stats["qp_solver"] and ["elastic_qp_solver"], worded from the options alone (an MPC found in the cache builds no
  backend), name the backends the solver builds, with and without a stage layout."""
  from anvil.mpc import shooting_layout
  from anvil.problems import shooting

  n = 3
  size = shooting.size(n)
  f = av.NumericalFunction("names_cost", lambda w, x0: shooting.stage_cost(w, n), (Arg(size), Arg(4)))
  g = av.NumericalFunction("names_defects", lambda w, x0: shooting.defects(w, x0, n), (Arg(size), Arg(4)))
  stages = shooting_layout(n, 4, 1) if staged else None  # NOTE: without, the default's search finds it
  options = SQPOptions(qp=None if qp is None else qp_named(qp))
  solver = SQPFunction(f"names_{qp}_{staged}", f, g, options, stages=stages)
  history, ihistory = solver.stats_reader.buffers()
  scalars = SQP_SCALARS.mirror(failed_function=-1, worst_constraint=-1)
  _, _, stats = solver.stats_reader.unpack(history, ihistory, scalars, None, solver.labels)
  assert stats["qp_solver"] == solver.qp.options.solver
  assert stats["elastic_qp_solver"] == (solver.elastic or solver.qp).options.solver


def test_a_solver_found_in_the_cache_derives_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
  """A solver of plain functions whose library another built (as a new process finds it in the cache, by its problem
  key) solves and checks its calls' bounds against its stage layout without deriving the NLP's Jacobian or Hessian
  (most of a warm build's time): the layout's facts are cached beside it."""
  from anvil.problems import shooting
  from anvil.sqp.nlp import NLP

  n, N = shooting.size(50), 50
  x_init, lbx, ubx, w0 = shooting.swing_up(N)
  cost = lambda: NumericalFunction("warm_sqp_cost", lambda w, x0: shooting.stage_cost(w, N), (Arg(n), Arg(4)))
  defects = lambda: NumericalFunction("warm_sqp_g", lambda w, x0: shooting.defects(w, x0, N), (Arg(n), Arg(4)))
  zeros = np.zeros(4 * N + 4)
  first = SQPFunction("warm_sqp", cost(), defects())
  reference = first(w0, x_init, lbx, ubx, zeros, zeros)
  assert first.layout is not None and first.equality_rows  # the swing-up's stages, found in the patterns
  for derivative in ("jacobian", "hessian"):
    monkeypatch.setattr(NLP, derivative, property(lambda _: pytest.fail("the warm solver derived its NLP")))
  second = SQPFunction("warm_sqp", cost(), defects())
  result = second(w0, x_init, lbx, ubx, zeros, zeros)
  np.testing.assert_array_equal(result.x, reference.x)
  assert result.status == reference.status == "converged"
  assert second.equality_rows == first.equality_rows and second.stats_reader.staged == first.stats_reader.staged
  monkeypatch.undo()
  bad = zeros.copy()
  bad[second.equality_rows[-1]] = 1.0  # a dynamics row the Riccati QP keeps an equality, given a range
  with pytest.raises(ValueError, match="lbg and ubg must be equal"):
    second(w0, x_init, lbx, ubx, zeros, bad)
