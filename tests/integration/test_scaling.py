"""MPCFunction(..., scaling=Scaling(...) | "auto"): the SQP works on scaled states, inputs and constraint rows, and
nobody else sees it. A cart-pole written in micro-units fails to converge unscaled and converges scaled to the plan of
the cart-pole in SI units; scaling a well-scaled OCP (constraints, soft bounds, input rates, a terminal constraint,
implicit dynamics, RTI, a scenario tree) changes no plan; the C++ module scales its call as Python does; messages
and results are in the model's units."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.codegen import find_compiler
from anvil.mpc import MPCFunction, MPCOptions, Scaling, Scenarios, Soft, irk, rk4
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


def test_auto_scaling_takes_each_components_largest_bound() -> None:
  options = MPCOptions(sqp=av.sqp.SQPOptions(tol=1e-10, max_iter=200))
  mpc = rich("scale_rich_auto", "auto", options)
  np.testing.assert_array_equal(mpc.ocp.scales["x"], [2.0, 1.0, 1.5, 1.0])  # no finite bound: 1
  np.testing.assert_array_equal(mpc.ocp.scales["u"], [20.0])
  np.testing.assert_array_equal(mpc.ocp.scales["constraints"], [0.6])
  np.testing.assert_array_equal(mpc.ocp.scales["terminal_constraints"], [0.02])
  reference = rich("scale_rich_plain_auto", None, options)(cm.X0_STABILIZE, np.ones(1))
  np.testing.assert_allclose(mpc(cm.X0_STABILIZE, np.ones(1)).u, reference.u, atol=1e-5)


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
  with pytest.raises(TypeError, match=r'scaling must be a Scaling or "auto"'):
    rich("scale_bad_type", "on")
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
