"""Multi-stage robust MPC (MPCFunction(..., scenarios=Scenarios(...))): the scenario tree's OCP solved by anvil equals
the same tree written out in CasADi and solved by IPOPT (every branch's trajectory, the first robust_horizon inputs
shared where the branches have met the same values); one scenario is the nominal MPC at its values; the tree's nodes,
weights and parameters are do-mpc's; and what the tree cannot take says so."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.codegen import find_compiler
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, Scenarios, rk4
from anvil.mpc.scenarios import ScenarioTree
from anvil.qp import OSQPOptions
from tests.conftest import STRICT

H, N = 0.1, 8
X0 = np.array([1.0, 0.0])
U_MAX, V_MAX = 2.0, 1.0


def ode(x: Any, u: Any, p: Any, b: Any = None) -> Any:
  """A mass on a spring driven by a force: mass p[0], stiffness p[1] (tinygrad, or CasADi with `b` = casadi)."""
  rate = (u[0] - p[1] * x[0]) / p[0]
  return b.vertcat(x[1], rate) if b is not None else Tensor.stack(x[1], rate)


def stage_cost(x: Any, u: Any) -> Any:
  return x[0] * x[0] + x[1] * x[1] + 0.1 * u[0] * u[0]


def terminal_cost(x: Any) -> Any:
  return 10 * (x[0] * x[0] + x[1] * x[1])


def controller(name: str, scenarios: Scenarios | None, options: MPCOptions | None = None) -> MPCFunction:
  F = rk4(f"{name}_F", ode, H, nx=2, nu=1, np=2)
  cost = av.NumericalFunction(
    f"{name}_l", lambda x, u, p: stage_cost(x, u).reshape(1), (av.Arg(2), av.Arg(1), av.Arg(2))
  )
  lN = av.NumericalFunction(f"{name}_lN", lambda x, p: terminal_cost(x).reshape(1), (av.Arg(2), av.Arg(2)))
  return MPCFunction(name, F, cost, lN, horizon=N, x_bounds=([-np.inf, -V_MAX], [np.inf, V_MAX]),
                     u_bounds=([-U_MAX], [U_MAX]), scenarios=scenarios, options=options)  # fmt: skip


def ipopt_tree(scenarios: Scenarios, x0: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
  """The scenario tree's OCP written out in CasADi, one trajectory per branch whose inputs are shared with every
  branch that has met the same values so far (one variable per tree node), weighted by the branches' probabilities;
  IPOPT's (cost, u per branch (B, N), x per branch (B, N + 1, 2))."""
  ca = pytest.importorskip("casadi")
  values, weights, r = np.asarray(scenarios.values), np.asarray(scenarios.weights), scenarios.robust_horizon
  branches = list(np.ndindex(*([len(values)] * r)))  # the values met at the first r splits, in anvil's order
  inputs: dict[tuple[Any, ...], Any] = {}  # (stage, the values met before it, or the branch after r) -> u
  w, g, cost = [], [], 0.0
  xs_all, us_all = [], []

  def rk4_step(x: Any, u: Any, p: np.ndarray) -> Any:
    f = lambda z: ode(z, u, p, ca)
    k1 = f(x)
    k2 = f(x + H / 2 * k1)
    k3 = f(x + H / 2 * k2)
    k4 = f(x + H * k3)
    return x + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

  lbw, ubw = [], []
  for branch in branches:
    prob = float(np.prod([weights[s] for s in branch]))
    x, xs, us = ca.DM(x0), [ca.DM(x0)], []
    for k in range(N):
      key = (k, branch[:k]) if k < r else (k, branch)
      if key not in inputs:
        inputs[key] = ca.SX.sym(f"u_{k}_{len(inputs)}")
        w.append(inputs[key])
        lbw.append(-U_MAX)
        ubw.append(U_MAX)
      u = inputs[key]
      cost = cost + prob * stage_cost(x, [u])
      x_next = ca.SX.sym(f"x_{k + 1}_{len(w)}", 2)
      w.append(x_next)
      lbw += [-np.inf, -V_MAX]
      ubw += [np.inf, V_MAX]
      g.append(x_next - rk4_step(x, u, values[branch[min(k, r - 1)]]))
      x = x_next
      xs.append(x)
      us.append(u)
    cost = cost + prob * terminal_cost(x)
    xs_all.append(xs)
    us_all.append(us)
  nlp = {"x": ca.vertcat(*w), "f": cost, "g": ca.vertcat(*g)}
  solver = ca.nlpsol("tree", "ipopt", nlp, {"ipopt.tol": 1e-12, "ipopt.print_level": 0, "print_time": False})
  res = solver(x0=0, lbx=lbw, ubx=ubw, lbg=0, ubg=0)
  assert solver.stats()["success"]
  values_of = ca.Function("values", [nlp["x"]], [ca.horzcat(*[ca.vertcat(*u) for u in us_all])])
  xs_of = ca.Function("xs", [nlp["x"]], [ca.horzcat(*[ca.horzcat(*x) for x in xs_all])])
  u = np.array(values_of(res["x"])).T
  x = np.array(xs_of(res["x"])).T.reshape(len(branches), N + 1, 2)
  return float(res["f"]), u, x


@pytest.mark.parametrize("robust_horizon,weights", [(1, None), (2, (0.5, 0.3, 0.2))])
def test_the_tree_equals_ipopt_on_the_same_tree(robust_horizon: int, weights: tuple[float, ...] | None) -> None:
  scenarios = Scenarios([[1.0, 1.0], [1.5, 2.0], [0.7, 0.5]], weights=weights, robust_horizon=robust_horizon)
  mpc = controller(f"scen_ipopt_{robust_horizon}", scenarios, MPCOptions(sqp=av.sqp.SQPOptions(tol=1e-10)))
  sol = mpc(X0)
  assert sol.status == "converged" and sol.x_scenarios is not None and sol.u_scenarios is not None
  cost, u_ref, x_ref = ipopt_tree(scenarios, X0)
  assert sol.u_scenarios.shape == (3**robust_horizon, N, 1) and sol.x_scenarios.shape == (3**robust_horizon, N + 1, 2)
  np.testing.assert_allclose(sol.u_scenarios[:, :, 0], u_ref, atol=1e-6)
  np.testing.assert_allclose(sol.x_scenarios, x_ref, atol=1e-6)
  np.testing.assert_allclose(sol.cost, cost, rtol=1e-8)
  assert np.ptp(sol.u_scenarios[:, 0]) == 0.0 and np.ptp(sol.u_scenarios[:, robust_horizon]) > 1e-3
  np.testing.assert_array_equal(sol.u, sol.u_scenarios[0])


def test_one_scenario_is_the_nominal_mpc_at_its_values() -> None:
  values = np.array([1.5, 2.0])
  robust = controller("scen_one", Scenarios(values.reshape(1, 2)))
  nominal = controller("scen_nominal", None)
  a, b = robust(X0), nominal(X0, p=values)
  assert a.status == b.status == "converged"
  np.testing.assert_allclose(a.u, b.u, atol=1e-10)
  np.testing.assert_allclose(a.cost, b.cost, rtol=1e-10)


def test_the_tree_of_do_mpc() -> None:
  """n_robust = 1 over 9 scenarios (do-mpc's industrial polymerization): a root, 9 branches of N stages; each node's
  weight is its branches' share, each transition takes its branch's values."""
  tree = ScenarioTree.of(Scenarios.grid([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]), 20)
  assert tree.N == 9 * 20 and len(tree.leaves) == 9 and tree.weight[0] == pytest.approx(1.0)
  np.testing.assert_allclose([tree.weight[k] for k in tree.leaves], 1 / 9)
  assert [tree.realization[path[1]] for path in tree.paths] == list(range(9))
  assert all(tree.realization[k] == tree.realization[path[1]] for path in tree.paths for k in path[1:])
  deep = ScenarioTree.of(Scenarios([[1.0], [2.0]], robust_horizon=2), 3)
  assert len(deep.leaves) == 4 and deep.N == 2 + 4 + 4
  assert [len(path) for path in deep.paths] == [4] * 4 and deep.paths[0][:2] == deep.paths[1][:2]


@pytest.mark.parametrize("options", ["riccati", "osqp", "rti"])
def test_closed_loop_over_the_tree_warm_starts(options: str) -> None:
  chosen = {"riccati": MPCOptions(), "osqp": MPCOptions(qp=OSQPOptions()), "rti": MPCOptions(mode="rti")}[options]
  mpc = controller(f"scen_loop_{options}", Scenarios([[1.0, 1.0], [1.5, 2.0], [0.7, 0.5]]), chosen)
  if options == "rti":  # a real-time iteration starts from a converged plan
    start = controller("scen_loop_start", Scenarios([[1.0, 1.0], [1.5, 2.0], [0.7, 0.5]]))(X0)
    mpc.set_guess(start.x, start.u)
  x, iterations = X0.copy(), []
  for _ in range(40):
    sol = mpc(x)
    assert sol.status in ("converged", "max_iterations") and sol.fallback == "none"
    iterations.append(sol.iterations)
    assert sol.x_scenarios is not None
    x = sol.x_scenarios[1][1]  # the plant is the second scenario's model
    assert abs(x[1]) <= V_MAX + 1e-6
  assert np.abs(x).max() < 0.05 and max(iterations[3:]) <= 3


def test_scenarios_are_checked() -> None:
  with pytest.raises(ValueError, match=r"Scenarios: values must have shape \(S, n\)"):
    Scenarios([1.0, 2.0])
  with pytest.raises(ValueError, match="Scenarios: weights must be positive"):
    Scenarios([[1.0], [2.0]], weights=(1.0, 0.0))
  with pytest.raises(ValueError, match="robust_horizon must be an int >= 1"):
    Scenarios([[1.0]], robust_horizon=0)
  with pytest.raises(
    ValueError, match=r"scenarios give 3 values per scenario, for the components \[0, 1\] of p, but the model's p has 2"
  ):
    controller("scen_bad_width", Scenarios([[1.0, 2.0, 3.0]]))
  with pytest.raises(ValueError, match="scenarios need MPCOptions"):
    controller("scen_bad_gn", Scenarios([[1.0, 2.0]]), MPCOptions(hessian="gauss_newton"))
  with pytest.raises(TypeError, match="scenarios must be a Scenarios"):
    controller("scen_bad_type", [[1.0, 2.0]])  # type: ignore[arg-type]
  tree = controller("scen_no_sensitivity", Scenarios([[1.0, 2.0], [2.0, 1.0]]))
  with pytest.raises(ValueError, match="sensitivities of a scenario-tree MPC"):
    _ = tree.sensitivity_function


MAIN = r"""
#include <cstdio>
#include "scen_module.hpp"
#include "scen_params.hpp"
namespace c = scen_cpp;
static c::WS_t ws;
int main() {
  c::init(ws);
  static c::Stats stats;
  const double x0[2] = {1.0, 0.0};
  static double x[(c::N + 1) * c::nx], u[c::N * c::nu];
  c::call(x0, params, c::defaults.bounds(), x, u, stats, ws);
  std::printf("%d %.17g\n", stats.status, u[0]);
  return 0;
}
"""


def test_the_exported_module_runs_the_tree_in_cpp(tmp_path: Path) -> None:
  mpc = controller("scen_cpp", Scenarios([[1.0, 1.0], [1.5, 2.0], [0.7, 0.5]]))
  expected = mpc(X0)
  _, source = av.generate_module("scen_module", [mpc], out_dir=tmp_path)
  params = mpc.node_parameters()
  assert params.shape == (mpc.ocp.param_rows, 2) and mpc.ocp.param_rows == 2 * mpc.ocp.N + 1
  values = ", ".join(map(repr, params.ravel().tolist()))
  (tmp_path / "scen_params.hpp").write_text(f"const double params[] = {{{values}}};\n")
  (tmp_path / "main.cpp").write_text(MAIN)
  osqp = [f"-I{tmp_path / d}" for d in ("osqp", "osqp/inc/public", "osqp/inc/private")]
  flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", *STRICT, "-Werror", f"-I{tmp_path}", *osqp]
  exe = tmp_path / "scen"
  built = subprocess.run([find_compiler(), *flags, str(source), str(tmp_path / "main.cpp"), "-o", str(exe)],
                         capture_output=True, text=True)  # fmt: skip
  assert built.returncode == 0, built.stderr
  status, u0 = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
  assert int(status) == 0
  np.testing.assert_allclose(float(u0), expected.u0[0], atol=1e-9)


def ipopt_rich_tree(scenarios: Scenarios, x0: np.ndarray, reference: np.ndarray) -> tuple[float, np.ndarray]:
  """`rich_controller`'s OCP over the tree written out in CasADi (one trajectory per branch, the first inputs shared,
  the path constraint at every stage before the last, the terminal one at every branch's end, the rate penalty from
  u_prev = 0, the stages' references in p[2]); IPOPT's (cost, u per branch (B, N))."""
  ca = pytest.importorskip("casadi")
  values, weights = np.asarray(scenarios.values), np.asarray(scenarios.weights)
  shared = ca.SX.sym("u0")
  w, lbw, ubw, g, lbg, ubg, cost, us_all = [shared], [-U_MAX], [U_MAX], [], [], [], 0.0, []
  for s, (mass, stiffness) in enumerate(values):
    x, u_prev, us = ca.DM(x0), 0.0, []
    for k in range(N):
      u = shared if k == 0 else ca.SX.sym(f"u_{s}_{k}")
      if k > 0:
        w.append(u)
        lbw.append(-U_MAX)
        ubw.append(U_MAX)
      p = ca.vertcat(mass, stiffness, reference[k])
      r = ca.vertcat(x[0] - reference[k], x[1], u)
      cost = cost + weights[s] * (r.T @ np.diag(STAGE_W) @ r + RATE_W * (u - u_prev) ** 2)
      g.append(x[0] + 0.1 * u)
      lbg.append(-1.0)
      ubg.append(1.5)
      x_next = ca.SX.sym(f"x_{s}_{k}", 2)
      w.append(x_next)
      lbw += [-np.inf, -V_MAX]
      ubw += [np.inf, V_MAX]
      step = lambda z, u=u, p=p: rich_ode(z, u, p, ca)
      k1 = step(x)
      k2 = step(x + H / 2 * k1)
      k3 = step(x + H / 2 * k2)
      k4 = step(x + H * k3)
      g.append(x_next - (x + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)))
      lbg += [0.0, 0.0]
      ubg += [0.0, 0.0]
      x, u_prev = x_next, u
      us.append(u)
    rN = ca.vertcat(x[0] - reference[N], x[1])
    cost = cost + weights[s] * (rN.T @ np.diag(TERMINAL_W) @ rN)
    g.append(x[0] * x[0])
    lbg.append(0.0)
    ubg.append(0.5)
    us_all.append(us)
  nlp = {"x": ca.vertcat(*w), "f": cost, "g": ca.vertcat(*g)}
  solver = ca.nlpsol("rich", "ipopt", nlp, {"ipopt.tol": 1e-12, "ipopt.print_level": 0, "print_time": False})
  res = solver(x0=0, lbx=lbw, ubx=ubw, lbg=lbg, ubg=ubg)
  assert solver.stats()["success"]
  inputs = ca.Function("inputs", [nlp["x"]], [ca.horzcat(*[ca.vertcat(*u) for u in us_all])])
  return float(res["f"]), np.array(inputs(res["x"])).T


STAGE_W, TERMINAL_W, RATE_W = np.array([1.0, 0.1, 0.01]), np.array([10.0, 1.0]), 0.05


def rich_ode(x: Any, u: Any, p: Any, b: Any = None) -> Any:
  """`ode` with p[2] a drift the stages' references set (p = [mass, stiffness, reference])."""
  rate = (u[0] - p[1] * x[0]) / p[0] + 0.1 * p[2]
  return b.vertcat(x[1], rate) if b is not None else Tensor.stack(x[1], rate)


@pytest.mark.parametrize("qp", ["riccati", "osqp"])
def test_constraints_rates_and_stage_parameters_over_the_tree_equal_ipopt(qp: str) -> None:
  """Least-squares costs tracking a per-stage reference p[2] (not uncertain: the scenarios give p[0] and p[1]), a
  path constraint, a terminal constraint at every branch's end and an input-rate penalty, over the tree: as IPOPT
  solves the same tree written out."""
  scenarios = Scenarios([[1.0, 1.0], [1.5, 2.0], [0.7, 0.5]], indices=(0, 1), weights=(0.2, 0.5, 0.3))
  F = rk4(f"scen_rich_{qp}_F", rich_ode, H, nx=2, nu=1, np=3)
  args = (av.Arg(2), av.Arg(1), av.Arg(3))
  res = av.NumericalFunction(f"scen_rich_{qp}_r", lambda x, u, p: Tensor.stack(x[0] - p[2], x[1], u[0]), args)
  resN = av.NumericalFunction(f"scen_rich_{qp}_rN", lambda x, p: Tensor.stack(x[0] - p[2], x[1]), args[::2])
  h = av.NumericalFunction(f"scen_rich_{qp}_h", lambda x, u, p: (x[0] + 0.1 * u[0]).reshape(1), args)
  hN = av.NumericalFunction(f"scen_rich_{qp}_hN", lambda x, p: (x[0] * x[0]).reshape(1), args[::2])
  options = MPCOptions(qp=OSQPOptions() if qp == "osqp" else MPCOptions().qp, sqp=av.sqp.SQPOptions(tol=1e-10))
  mpc = MPCFunction(f"scen_rich_{qp}", F, LeastSquares(res, np.diag(STAGE_W)), LeastSquares(resN, np.diag(TERMINAL_W)),
                    horizon=N, x_bounds=([-np.inf, -V_MAX], [np.inf, V_MAX]), u_bounds=([-U_MAX], [U_MAX]),
                    constraints=(h, ([-1.0], [1.5])), terminal_constraints=(hN, ([0.0], [0.5])),
                    u_rate_weight=[RATE_W], scenarios=scenarios, options=options)  # fmt: skip
  reference = np.linspace(0.4, 0.0, N + 1)
  p = np.zeros((N + 1, 3))
  p[:, 2] = reference
  sol = mpc(X0, p=p)
  cost, u_ref = ipopt_rich_tree(scenarios, X0, reference)
  assert sol.status == "converged" and sol.u_scenarios is not None
  np.testing.assert_allclose(sol.u_scenarios[:, :, 0], u_ref, atol=1e-6)
  np.testing.assert_allclose(sol.cost, cost, rtol=1e-8)
