"""MPCFunction(..., scaling=Scaling(...) | "auto"): the SQP works on scaled states, inputs and constraint rows, and
nobody else sees it. A cart-pole written in micro-units fails to converge unscaled and converges scaled to the plan of
the cart-pole in SI units; scaling a well-scaled OCP (constraints, soft bounds, input rates, a terminal constraint,
implicit dynamics, RTI, a scenario tree) changes no plan; the C++ module scales its call as Python does; messages
and results are in the model's units."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.codegen import find_compiler
from anvil.mpc import AutoScaling, MPCFunction, MPCOptions, Scaling, Scenarios, Soft, irk, rk4
from anvil.mpc.scaling import GROUPS, Linearization
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from anvil.problems.backend import TINYGRAD
from tests.conftest import STRICT

MICRO = 1e6  # the badly chosen units: micrometres, microradians, micronewtons


def micro_cartpole(name: str, scaling: Scaling | str | None, integrator: str = "rk4") -> MPCFunction:
  """The P2 stabilizing cart-pole with every state and the force in micro-units (the same OCP, numbers 1e6 larger)."""
  ode = lambda x, u: cartpole.ode(x / MICRO, u / MICRO, TINYGRAD) * MICRO
  F = (rk4 if integrator == "rk4" else irk)(f"{name}_F", ode, cartpole.H, nx=4, nu=1)
  q = Tensor(cm.Q_DIAG / MICRO**2)
  stage = av.NumericalFunction(f"{name}_l", lambda x, u: (x * x * q).sum() + cartpole.R * (u * u).sum() / MICRO**2,
                               (av.Arg(4), av.Arg(1)))  # fmt: skip
  final = av.NumericalFunction(f"{name}_lN", lambda x: 10 * (x * x * q).sum(), (av.Arg(4),))
  (x_lo, x_hi), (u_lo, u_hi) = cm.bounds()
  return MPCFunction(name, F, stage, final, horizon=30, x_bounds=(x_lo * MICRO, x_hi * MICRO),
                     u_bounds=(u_lo * MICRO, u_hi * MICRO), scaling=scaling)  # fmt: skip


@pytest.mark.parametrize("integrator", ["rk4", "irk"])
def test_a_badly_scaled_model_converges_scaled_to_the_well_scaled_plan(integrator: str) -> None:
  reference = cm.stabilizing("scale_reference")(cm.X0_STABILIZE)
  unscaled = micro_cartpole(f"scale_micro_{integrator}", None, integrator)(cm.X0_STABILIZE * MICRO)
  assert unscaled.status == "max_iterations"  # the SQP's tolerances, absolute, mean nothing at these magnitudes
  scaled_mpc = micro_cartpole(f"scale_micro_{integrator}_s", Scaling(x=[MICRO] * 4, u=[MICRO]), integrator)
  scaled = scaled_mpc(cm.X0_STABILIZE * MICRO)
  assert scaled.status == "converged" and scaled.iterations <= reference.iterations + 1
  atol = 1e-7 if integrator == "rk4" else 1e-3  # irk: a Radau step, not RK4
  np.testing.assert_allclose(scaled.u / MICRO, reference.u, atol=atol)
  np.testing.assert_allclose(scaled.x / MICRO, reference.x, atol=atol)


def rich(name: str, scaling: Scaling | str | None, options: MPCOptions | None = None,
         scenarios: Scenarios | None = None) -> MPCFunction:  # fmt: skip
  """The cart-pole with a path constraint, soft state bounds, an input-rate penalty and bound, and a terminal
  constraint (with p: the scenarios' pole length gain, 1 nominally)."""
  ode = lambda x, u, p: cartpole.ode(x, u * p[0], TINYGRAD)
  F = rk4(f"{name}_F", ode, cartpole.H, nx=4, nu=1, np=1)
  args = (av.Arg(4), av.Arg(1), av.Arg(1))
  q = Tensor(cm.Q_DIAG)
  stage = av.NumericalFunction(f"{name}_l", lambda x, u, p: (x * x * q).sum() + 0.01 * (u * u).sum(), args)
  final = av.NumericalFunction(f"{name}_lN", lambda x, p: 10 * (x * x * q).sum(), args[::2])
  h = av.NumericalFunction(f"{name}_h", lambda x, u, p: (x[0] + 0.1 * x[1]).reshape(1), args)
  hN = av.NumericalFunction(f"{name}_hN", lambda x, p: (x[1] * x[1]).reshape(1), args[::2])
  _, (u_lo, u_hi) = cm.bounds()
  x_hi = np.array([2.0, np.inf, 1.5, np.inf])
  return MPCFunction(name, F, stage, final, horizon=20, x_bounds=(-x_hi, x_hi), u_bounds=(u_lo, u_hi),
                     constraints=(h, ([-0.6], [0.6])), terminal_constraints=(hN, ([0.0], [0.02])),
                     soft={"x": Soft(l1=100.0, l2=10.0, side="upper")}, u_rate_weight=[0.001],
                     u_rate_bounds=([-8.0], [8.0]), scaling=scaling, options=options, scenarios=scenarios)  # fmt: skip


@pytest.mark.parametrize("mode", ["sqp", "rti", "tree"])
def test_scaling_a_well_scaled_ocp_changes_no_plan(mode: str) -> None:
  # NOTE: scaling changes the SQP's path, not its solution: with the terminal row scaled too (by 0.02: 50 times up),
  # the first solve takes 184 iterations instead of 24 (the same plan); test_the_terminal_rows_scale_alone checks it
  factors = Scaling(x=[2.0, 3.0, 0.25, 7.0], u=[20.0], constraints=[0.6])
  options = MPCOptions(mode="rti" if mode == "rti" else "sqp", sqp=av.sqp.SQPOptions(tol=1e-10, max_iter=200))
  scenarios = Scenarios([[1.0], [0.8], [1.2]]) if mode == "tree" else None
  plain, scaled = (rich(f"scale_rich_{mode}_{tag}", scaling, options, scenarios) for tag, scaling in
                   (("plain", None), ("scaled", factors)))  # fmt: skip
  p = None if scenarios else np.ones(1)
  if mode == "rti":  # a real-time iteration starts from a converged plan
    start = rich("scale_rich_start", None)(cm.X0_STABILIZE, p)
    for mpc in (plain, scaled):
      mpc.set_guess(start.x, start.u)
  x = cm.X0_STABILIZE.copy()
  for _ in range(12):
    a, b = plain(x, p), scaled(x, p)
    assert a.status == b.status and a.status in ("converged", "max_iterations")
    np.testing.assert_allclose(b.u, a.u, atol=1e-5)  # NOTE: each solved to 1e-10 in its own units
    np.testing.assert_allclose(b.x, a.x, atol=1e-6)
    assert b.cost == pytest.approx(a.cost, rel=1e-8, abs=1e-10)
    x = a.x[1]


def test_the_terminal_rows_scale_alone() -> None:
  options = MPCOptions(sqp=av.sqp.SQPOptions(tol=1e-10))
  a = rich("scale_terminal_plain", None, options)(cm.X0_STABILIZE, np.ones(1))
  b = rich("scale_terminal", Scaling(terminal_constraints=[0.02]), options)(cm.X0_STABILIZE, np.ones(1))
  assert a.status == b.status == "converged"
  np.testing.assert_allclose(b.u, a.u, atol=1e-6)


def central_differences(F: Callable[..., np.ndarray], x: np.ndarray, u: np.ndarray, *p: np.ndarray) -> np.ndarray:
  """dF/d[x; u] at (x, u[, p]) by central differences (relative steps)."""
  z = np.concatenate([x, u])
  columns = []
  for j in range(z.size):
    step = 1e-6 * max(1.0, abs(z[j]))
    plus, minus = z.copy(), z.copy()
    plus[j] += step
    minus[j] -= step
    columns.append((F(plus[: x.size], plus[x.size :], *p) - F(minus[: x.size], minus[x.size :], *p)) / (2 * step))
  return np.stack(columns, axis=1)


@pytest.mark.parametrize("integrator", ["rk4", "irk"])
def test_auto_scaling_linearizes_the_dynamics(integrator: str) -> None:
  """The micro cart-pole has bounds on the cart's position and the force alone: scaled from its bounds, the other
  states keep 1 and the SQP ends max_iterations; "auto" also scales each of them by the change one linearized step
  makes in it when the force and the position move by their factors, and converges to the SI plan."""
  mpc = micro_cartpole(f"scale_auto_{integrator}", "auto", integrator)
  dynamics = central_differences(mpc.ocp.dynamics, np.zeros(4), np.zeros(1))  # at 0: inside the bounds
  sx, su = mpc.ocp.scales["x"], mpc.ocp.scales["u"]
  np.testing.assert_array_equal([sx[0], su[0]], [2e6, 20e6])  # the bounds
  reach = np.maximum(np.abs(dynamics[1:, 4]) * 20e6, np.abs(dynamics[1:, 0]) * 2e6)  # the force's, the position's
  np.testing.assert_allclose(sx[1:], reach, rtol=1e-6)
  reference = cm.stabilizing("scale_reference")(cm.X0_STABILIZE)
  scaled = mpc(cm.X0_STABILIZE * MICRO)
  assert scaled.status == "converged"
  atol = 1e-7 if integrator == "rk4" else 1e-3  # irk: a Radau step, not RK4
  np.testing.assert_allclose(scaled.u / MICRO, reference.u, atol=atol)
  if integrator == "rk4":
    bounds_only = micro_cartpole("scale_bounds_only", Scaling.from_bounds(mpc.defaults))
    assert bounds_only(cm.X0_STABILIZE * MICRO).status == "max_iterations"


def test_auto_scaling_linearizes_a_tree_at_its_first_scenario() -> None:
  """Over a scenario tree the default point's p holds the first scenario's values (rich's force gain: 2, which
  doubles the velocities' reach); the bounded components keep their bounds' magnitudes."""
  tree = rich("scale_auto_tree", "auto", scenarios=Scenarios([[2.0], [0.8]]))
  chain, nominal = rich("scale_auto_p2", AutoScaling(p=[2.0])), rich("scale_auto_p1", AutoScaling(p=[1.0]))
  for group in ("x", "u", "constraints", "terminal_constraints"):
    np.testing.assert_array_equal(tree.ocp.scales[group], chain.ocp.scales[group])
  np.testing.assert_array_equal(nominal.ocp.scales["x"][[0, 2]], [2.0, 1.5])
  np.testing.assert_allclose(chain.ocp.scales["x"][[1, 3]], 2 * nominal.ocp.scales["x"][[1, 3]], rtol=1e-12)
  np.testing.assert_array_equal([nominal.ocp.scales[g][0] for g in GROUPS[1:]], [20.0, 0.6, 0.02])


def velocity_row(name: str, scaling: AutoScaling | None) -> MPCFunction:
  """The P2 cart-pole kept to a cart velocity >= -0.1 m/s by a row of gain p: p (-v - 0.1) <= 0."""
  F = rk4(f"{name}_F", lambda x, u, p: cartpole.ode(x, u, TINYGRAD), cartpole.H, nx=4, nu=1, np=1)
  args = (av.Arg(4), av.Arg(1), av.Arg(1))
  q = Tensor(cm.Q_DIAG)
  stage = av.NumericalFunction(f"{name}_l", lambda x, u, p: (x * x * q).sum() + 0.01 * (u * u).sum(), args)
  final = av.NumericalFunction(f"{name}_lN", lambda x, p: 10 * (x * x * q).sum(), args[::2])
  h = av.NumericalFunction(f"{name}_h", lambda x, u, p: ((-x[2] - 0.1) * p[0]).reshape(1), args)
  (x_lo, x_hi), (u_lo, u_hi) = cm.bounds()
  return MPCFunction(name, F, stage, final, horizon=30, x_bounds=(x_lo, x_hi), u_bounds=(u_lo, u_hi),
                     constraints=(h, ([-np.inf], [0.0])), scaling=scaling)  # fmt: skip


@pytest.mark.parametrize("gain", [1e6, 1e-6])
def test_auto_scaling_scales_a_row_by_its_gradient(gain: float) -> None:
  """A row with no bound magnitude (h <= 0) in awkward units defeats the unscaled SQP (its absolute tolerances on h
  mean 1e-12 m/s or 1 m/s); scaled to a unit gradient in the scaled variables it converges to the plan of gain 1."""
  plain = velocity_row("scale_row_plain", None)
  reference = plain(cm.X0_STABILIZE, [1.0])
  assert reference.status == "converged" and reference.x[:, 2].min() == pytest.approx(-0.1, abs=1e-8)
  plain.reset()  # NOTE: a cold start, as the scaled controller's
  assert plain(cm.X0_STABILIZE, [gain]).status != "converged"
  tag = "up" if gain < 1 else "down"
  mpc = velocity_row(f"scale_row_{tag}", AutoScaling(p=[gain]))
  assert mpc.ocp.scales["constraints"][0] == pytest.approx(gain * mpc.ocp.scales["x"][2], rel=1e-12)
  scaled = mpc(cm.X0_STABILIZE, [gain])
  assert scaled.status == "converged"
  np.testing.assert_allclose(scaled.u, reference.u, atol=1e-6)


def test_auto_scaling_rules() -> None:
  """AutoScaling's rules on a linear chain x0 -> x1 -> x2 driven by u (x0 bounded), with a path row bounded at 0.1
  whose gradient is steep, and a terminal row without bounds."""
  defaults = {"lbx": np.array([[-np.inf] * 3, [-10.0, -np.inf, -np.inf]]), "ubx": np.array([[np.inf] * 3] * 2),
              "lbu": np.array([[-1.0]]), "ubu": np.array([[2.0]]), "lbh": np.array([[-np.inf]]),
              "ubh": np.array([[0.1]]), "lbhN": np.array([-np.inf]), "ubhN": np.array([np.inf])}  # fmt: skip
  step = np.array([[1.0, 0.0, 0.0, 1.0], [0.5, 1.0, 0.0, 0.0], [0.0, 0.1, 1.0, 0.0]])  # x0 += u, x1 += 0.5 x0, ...
  model = Linearization(step, np.array([[0.0, 3e3, 0.0, 0.0]]), np.array([[0.0, 0.0, 4.0]]))
  auto = AutoScaling(x=[0.0, 0.0, 0.01])
  point = auto.point("t", defaults, (3, 1, 0), np.zeros(0))
  factors = auto.factors_at("t", defaults, point, model)
  np.testing.assert_allclose(factors.x, [10.0, 5.0, 0.5])  # bounds; 0.5 x0's 10 (wave 1); 0.1 x1's 5 (wave 2)
  np.testing.assert_allclose(factors.u, [2.0])
  np.testing.assert_allclose(factors.constraints, [3e3 * 5.0 / 100])  # the bound 0.1, raised to gradient / 100
  np.testing.assert_allclose(factors.terminal_constraints, [4.0 * 0.5])  # no bound: a unit gradient
  np.testing.assert_array_equal(point[0], [0.0, 0.0, 0.01])
  singular = model._replace(dynamics=np.where(step > 0.4, np.inf, step))
  with pytest.raises(ValueError, match=r"dynamics' Jacobian is not finite .* give AutoScaling\(x=..."):
    auto.factors_at("t", defaults, point, singular)
  with pytest.raises(ValueError, match="max_gradient must be a positive"):
    AutoScaling(max_gradient=0.0).point("t", defaults, (3, 1, 0), np.zeros(0))
  with pytest.raises(ValueError, match=r"scaling.x: expected shape \(3,\)"):
    AutoScaling(x=[1.0]).point("t", defaults, (3, 1, 0), np.zeros(0))


def test_messages_are_in_the_models_units() -> None:
  """An infeasible call (x_N's cart position out of reach with a tiny force) names the most violated bound and its
  value with the model's numbers, scaled or not."""
  plain, scaled = rich("scale_msg_plain", None), rich("scale_msg_scaled", Scaling(x=[4.0, 30.0, 0.25, 7.0]))
  calls = dict(u_bounds=([-0.01], [0.01]), x_terminal_bounds=([1.5, -9.0, -9.0, -9.0], [2.0, 9.0, 9.0, 9.0]))
  a, b = (m(cm.X0_STABILIZE, np.ones(1), **calls) for m in (plain, scaled))
  assert a.status == b.status == "infeasible"
  numbers = lambda message: [float(v) for v in re.findall(r"(?:is|bound|by) (-?[0-9.e+-]+)", message)]
  assert numbers(a.message) and numbers(b.message) == pytest.approx(numbers(a.message), rel=1e-4), (
    a.message,
    b.message,
  )


def test_scaling_is_checked() -> None:
  with pytest.raises(ValueError, match=r"scaling.x: expected shape \(4,\)"):
    rich("scale_bad_size", Scaling(x=[1.0, 2.0]))
  with pytest.raises(ValueError, match=r"scaling\.u must be positive"):
    rich("scale_bad_sign", Scaling(u=[-1.0]))
  with pytest.raises(TypeError, match=r'scaling must be a Scaling, an AutoScaling or "auto"'):
    rich("scale_bad_type", "on")
  with pytest.raises(ValueError, match=r"scaling.u: expected shape \(1,\)"):
    rich("scale_bad_point", AutoScaling(u=[1.0, 2.0]))
  with pytest.raises(ValueError, match="scaling needs MPCOptions"):
    rich("scale_bad_gn", Scaling(u=[20.0]), MPCOptions(hessian="gauss_newton"))
  with pytest.raises(ValueError, match="a scaled one"):
    _ = rich("scale_no_sensitivity", Scaling(u=[20.0])).sensitivity_function


MAIN = r"""
#include <cstdio>
#include "scale_module.hpp"
namespace c = scale_cpp;
static c::WS_t ws;
int main() {
  c::init(ws);
  static c::Stats stats;
  const double x0[4] = {0.5, 0.3, 0.0, 0.0}, p[c::param_rows] = {};
  static double x[(c::N + 1) * c::nx], u[c::N * c::nu];
  for (int k = 0; k < 3; ++k) {
    c::call(x0, p, c::defaults.bounds(), x, u, stats, ws);
    std::printf("%d %.17g %.17g\n", stats.status, u[0], x[c::nx]);
  }
  return 0;
}
"""


def test_the_exported_module_scales_its_call(tmp_path: Path) -> None:
  mpc = micro_cartpole("scale_cpp", Scaling(x=[MICRO] * 4, u=[MICRO]))
  x0 = cm.X0_STABILIZE * MICRO
  expected = [mpc(x0) for _ in range(3)]
  _, source = av.generate_module("scale_module", [mpc], out_dir=tmp_path)
  (tmp_path / "main.cpp").write_text(MAIN.replace("{0.5, 0.3, 0.0, 0.0}", "{0.5e6, 0.3e6, 0.0, 0.0}"))
  exe = tmp_path / "scale"
  flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", *STRICT, "-Werror", f"-I{tmp_path}"]
  built = subprocess.run([find_compiler(), *flags, str(source), str(tmp_path / "main.cpp"), "-o", str(exe)],
                         capture_output=True, text=True)  # fmt: skip
  assert built.returncode == 0, built.stderr
  lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
  for line, sol in zip(lines, expected, strict=True):
    status, u0, x1 = line.split()
    assert int(status) == 0
    np.testing.assert_allclose([float(u0), float(x1)], [sol.u0[0], sol.x[1, 0]], rtol=1e-9)
