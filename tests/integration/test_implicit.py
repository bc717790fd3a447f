"""Implicit Runge-Kutta integrators (`irk`, anvil/implicit_rk.hpp): the collocation tableaus, stiff accuracy against
scipy's Radau (Van der Pol with mu = 1000, Robertson's kinetics), the order of convergence, an index-1 DAE, the
step's derivatives against finite differences, failures reported, and bad arguments refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from tinygrad import Tensor

import anvil as av
from anvil.mpc import irk
from anvil.mpc.implicit import collocation_tableau

MU = 1000.0


def van_der_pol(x: Tensor, u: Tensor) -> Tensor:
  return Tensor.stack(x[1], MU * (1 - x[0] * x[0]) * x[1] - x[0] + u[0])


def robertson(x: Tensor, u: Tensor) -> Tensor:
  fast = 1e4 * x[1] * x[2]
  return Tensor.stack(-0.04 * x[0] + fast, 0.04 * x[0] - fast - 3e7 * x[1] * x[1], 3e7 * x[1] * x[1])


def pendulum(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
  return Tensor.stack(x[1], -p[0] * x[0].sin() + u[0])


def reference(rhs, x0: np.ndarray, t: float, **kwargs) -> np.ndarray:  # type: ignore[no-untyped-def]
  """x(t) by scipy's Radau at rtol 1e-12."""
  return solve_ivp(rhs, (0.0, t), x0, method="Radau", rtol=1e-12, atol=1e-14, **kwargs).y[:, -1]


@pytest.mark.parametrize("method", ["radau", "gauss"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_tableaus_satisfy_the_collocation_order_conditions(method: str, stages: int) -> None:
  a, b = (np.array(t) for t in collocation_tableau(method, stages))
  c = a.sum(axis=1)
  order = 2 * stages if method == "gauss" else 2 * stages - 1
  for k in range(1, order + 1):  # B(order): the quadrature integrates t^(k-1) exactly
    assert b @ c ** (k - 1) == pytest.approx(1 / k, abs=1e-14)
  for k in range(1, stages + 1):  # C(s): each stage's quadrature too
    np.testing.assert_allclose(a @ c ** (k - 1), c**k / k, atol=1e-14)
  if method == "radau":
    assert c[-1] == pytest.approx(1.0, abs=1e-15) and np.array_equal(a[-1], b)


def test_known_tableaus() -> None:
  a, b = collocation_tableau("radau", 2)
  np.testing.assert_allclose(a, [[5 / 12, -1 / 12], [3 / 4, 1 / 4]], atol=1e-15)
  np.testing.assert_allclose(b, [3 / 4, 1 / 4], atol=1e-15)
  a, b = collocation_tableau("gauss", 2)
  r = np.sqrt(3) / 6
  np.testing.assert_allclose(a, [[1 / 4, 1 / 4 - r], [1 / 4 + r, 1 / 4]], atol=1e-15)
  np.testing.assert_allclose(b, [1 / 2, 1 / 2], atol=1e-15)


@pytest.mark.parametrize("stages", [2, 3])
def test_van_der_pol_mu_1000_matches_scipy_radau(stages: int) -> None:
  # NOTE: Radau IIA only: Gauss is A- but not L-stable (its stability function is 1 in magnitude at infinity), so it
  # does not damp the fast transient from x0 off the slow manifold at this step size (0.02 off here: order reduction)
  x0 = np.array([2.0, 0.0])
  F = irk(f"irk_vdp_{stages}", van_der_pol, 0.5, nx=2, nu=1, stages=stages, steps=10)
  expected = reference(lambda t, x: [x[1], MU * (1 - x[0] ** 2) * x[1] - x[0]], x0, 0.5)
  np.testing.assert_allclose(F(x0, np.zeros(1)), expected, rtol=1e-9, atol=1e-12)


def test_robertson_matches_scipy_radau() -> None:
  x0 = np.array([1.0, 0.0, 0.0])
  F = irk("irk_robertson", robertson, 40.0, nx=3, nu=0, steps=100)
  rates = lambda t, x: [-0.04 * x[0] + 1e4 * x[1] * x[2], 0.04 * x[0] - 1e4 * x[1] * x[2] - 3e7 * x[1] ** 2,
                        3e7 * x[1] ** 2]  # fmt: skip
  expected = solve_ivp(rates, (0.0, 40.0), x0, method="Radau", rtol=1e-12, atol=1e-16).y[:, -1]
  got = F(x0, np.zeros(0))
  np.testing.assert_allclose(got, expected, rtol=1e-8)
  assert got.sum() == pytest.approx(1.0, abs=1e-12), "the kinetics conserve mass; Radau IIA does too"


@pytest.mark.parametrize(("method", "stages"), [("gauss", 1), ("gauss", 2), ("gauss", 3), ("radau", 1), ("radau", 2),
                                                ("radau", 3), ("radau", 4)])  # fmt: skip
def test_order_of_convergence(method: str, stages: int) -> None:
  x0, u, p = np.array([1.0, 0.0]), np.array([0.3]), np.array([2.0])
  rhs = lambda t, x: [x[1], -p[0] * np.sin(x[0]) + u[0]]
  expected = solve_ivp(rhs, (0.0, 1.0), x0, method="DOP853", rtol=2.3e-14, atol=1e-14).y[:, -1]
  errors = []
  for steps in (4, 8):
    F = irk(f"irk_order_{method}{stages}_{steps}", pendulum, 1.0, nx=2, nu=1, np=1, method=method, stages=stages,
            steps=steps)  # fmt: skip
    errors.append(np.abs(F(x0, u, p) - expected).max())
  order = 2 * stages if method == "gauss" else 2 * stages - 1
  assert np.log2(errors[0] / errors[1]) == pytest.approx(order, abs=0.3)


def central_differences(F, x: np.ndarray, u: np.ndarray, *p: np.ndarray, eps: float = 1e-6) -> np.ndarray:  # type: ignore[no-untyped-def]
  """dF/d[x; u] by central differences of the converged step."""
  w, nx = np.concatenate([x, u]), x.size
  columns = []
  for k in range(w.size):
    d = np.zeros(w.size)
    d[k] = eps
    plus, minus = w + d, w - d
    columns.append((F(plus[:nx], plus[nx:], *p) - F(minus[:nx], minus[nx:], *p)) / (2 * eps))
  return np.stack(columns, axis=1)


@pytest.mark.parametrize("method", ["radau", "gauss"])
def test_step_jacobian_matches_finite_differences(method: str) -> None:
  F = irk(f"irk_jac_{method}", pendulum, 0.4, nx=2, nu=1, np=1, method=method, stages=2, steps=3)
  x, u, p = np.array([0.7, -0.4]), np.array([0.5]), np.array([3.0])
  x_next, J = F.jacobian(x, u, p)
  np.testing.assert_array_equal(x_next, F(x, u, p))
  np.testing.assert_allclose(J, central_differences(F, x, u, p), atol=1e-8)
  stiff = irk("irk_jac_vdp", van_der_pol, 0.05, nx=2, nu=1)
  x, u = np.array([2.0, -0.5]), np.array([0.1])
  J = stiff.jacobian(x, u)[1]
  np.testing.assert_allclose(J, central_differences(stiff, x, u), rtol=1e-7, atol=1e-7 * np.abs(J).max())


# *** an index-1 DAE: the pendulum in Cartesian coordinates, its rod's tension z as an algebraic state ***
LENGTH, GRAVITY = 1.0, 9.81


def cartesian_pendulum(x: Tensor, z: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
  """x = [px, py, vx, vy], z = [tension per mass], u = [horizontal force per mass]: the acceleration a = -z p + (u, -g)
  and, for the tension, the constraint |p| = L differentiated twice: p.a + |v|^2 = 0."""
  ax, ay = -z[0] * x[0] + u[0], -z[0] * x[1] - GRAVITY
  return Tensor.stack(x[2], x[3], ax, ay), (x[0] * ax + x[1] * ay + x[2] * x[2] + x[3] * x[3]).reshape(1)


def cartesian_pendulum_ode(t: float, x: np.ndarray, u: float) -> list[float]:
  """The same with the tension solved from the constraint: the equivalent ODE."""
  z = (x[0] * u - x[1] * GRAVITY + x[2] ** 2 + x[3] ** 2) / (x[0] ** 2 + x[1] ** 2)
  return [x[2], x[3], -z * x[0] + u, -z * x[1] - GRAVITY]


def test_index1_dae_matches_the_equivalent_ode() -> None:
  F = irk("irk_dae_pendulum", cartesian_pendulum, 0.5, nx=4, nu=1, nz=1, steps=20, z_guess=[GRAVITY])
  angle = 0.6
  x0 = np.array([LENGTH * np.sin(angle), -LENGTH * np.cos(angle), 0.0, 0.0])
  u = np.array([0.8])
  expected = reference(cartesian_pendulum_ode, x0, 0.5, args=(0.8,))
  got = F(x0, u)
  np.testing.assert_allclose(got, expected, atol=1e-9)
  np.testing.assert_allclose(F.jacobian(x0, u)[1], central_differences(F, x0, u), atol=2e-7)


def with_algebraic_state(x: Tensor, z: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
  """A pendulum-like DAE: x = [angle, rate], its restoring torque z solved from 0 = z (1 + angle^2) - 4 sin(angle)."""
  return Tensor.stack(x[1], -z[0] + u[0]), (z[0] * (1 + x[0] * x[0]) - 4 * x[0].sin()).reshape(1)


def with_torque_eliminated(x: Tensor, u: Tensor) -> Tensor:
  """The same with z substituted: the equivalent ODE."""
  return Tensor.stack(x[1], -4 * x[0].sin() / (1 + x[0] * x[0]) + u[0])


def test_a_dae_steps_as_its_ode_over_the_state_space() -> None:
  # NOTE: Radau IIA on a semi-explicit index-1 DAE is Radau IIA on its ODE (z = z(x) substituted): Newton must find
  # the same step everywhere, from the same start (K = 0, z = z_guess), within newton_iter
  dae = irk("irk_sweep_dae", with_algebraic_state, 0.1, nx=2, nu=1, nz=1, stages=2)
  ode = irk("irk_sweep_ode", with_torque_eliminated, 0.1, nx=2, nu=1, stages=2)
  rng = np.random.default_rng(1)
  for _ in range(300):
    x, u = rng.uniform(-3, 3, 2), rng.uniform(-3, 3, 1)
    (a, Ja), (b, Jb) = dae.jacobian(x, u), ode.jacobian(x, u)
    np.testing.assert_allclose(a, b, atol=1e-11)
    np.testing.assert_allclose(Ja, Jb, atol=1e-10)


# *** failures and bad arguments ***


def test_failed_steps_raise_with_the_reason() -> None:
  few = irk("irk_few_newton", van_der_pol, 0.5, nx=2, nu=1, newton_iter=1)
  with pytest.raises(RuntimeError, match=r"irk_few_newton: the implicit step failed .*did not converge"):
    few(np.array([2.0, 0.0]), np.zeros(1))
  sqrt = irk("irk_sqrt", lambda x, u: (x - 4.0).sqrt() + u, 0.1, nx=1, nu=1)
  with pytest.raises(RuntimeError, match="returned NaN/inf"):
    sqrt(np.array([1.0]), np.zeros(1))
  assert sqrt(np.array([5.0]), np.zeros(1))[0] > 5.0, "a later step in range succeeds: no state is left over"


def test_bad_arguments_are_refused() -> None:
  with pytest.raises(ValueError, match=r"irk\(b\): method must be one of"):
    irk("b", van_der_pol, 0.1, nx=2, nu=1, method="lobatto")
  with pytest.raises(ValueError, match="stages must be 1 to 4"):
    irk("b", van_der_pol, 0.1, nx=2, nu=1, stages=5)
  with pytest.raises(ValueError, match="needs method='radau'"):
    irk("b", cartesian_pendulum, 0.1, nx=4, nu=1, nz=1, method="gauss")
  with pytest.raises(ValueError, match="z_guess must be 1 finite numbers"):
    irk("b", cartesian_pendulum, 0.1, nx=4, nu=1, nz=1, z_guess=[np.nan])
  with pytest.raises(ValueError, match="dt must be a positive number"):
    irk("b", van_der_pol, 0.0, nx=2, nu=1)
  with pytest.raises(ValueError, match="newton_tol must be a number in"):
    irk("b", van_der_pol, 0.1, nx=2, nu=1, newton_tol=0)
  wrong = irk("irk_wrong_shape", van_der_pol, 0.1, nx=3, nu=1)
  with pytest.raises(ValueError, match=r"ode must return a Tensor of shape \(3,\)"):
    wrong(np.zeros(3), np.zeros(1))
  dae = irk("irk_wrong_dae", lambda x, z, u: x, 0.1, nx=4, nu=1, nz=1)
  with pytest.raises(ValueError, match=r"must return \(xdot, g\)"):
    dae(np.zeros(4), np.zeros(1))
  F = irk("irk_called", van_der_pol, 0.1, nx=2, nu=1)
  with pytest.raises(ValueError, match="input 0"):
    F(np.zeros(3), np.zeros(1))
  with pytest.raises(TypeError, match="cannot be traced into another function"):
    F(Tensor.zeros(2), Tensor.zeros(1))
  with pytest.raises(ValueError, match=r"irk_called: input 0 \(x\) has NaN/inf"):
    F(np.array([np.nan, 0.0]), np.zeros(1))


# *** the generated C++ ***

MAIN = r"""
#include <cmath>
#include <cstdio>
#include "irk_cpp_mod.hpp"
static irk_cpp_jacobian::WS_t ws;
static irk_cpp_few::WS_t few_ws;
int main() {
  irk_cpp_jacobian::init(ws);
  irk_cpp_few::init(few_ws);
  double x[2] = {0.7, -0.4}, u[1] = {0.5}, p[1] = {3.0}, x_next[2], J[6];
  irk_cpp_jacobian::OUT0_t out0(x_next);
  irk_cpp_jacobian::OUT1_t out1(J);
  const bool ok = irk_cpp_jacobian::call(irk_cpp_jacobian::IN0_t(x), irk_cpp_jacobian::IN1_t(u),
                                         irk_cpp_jacobian::IN2_t(p), out0, out1, ws);
  std::printf("%d", ok);
  for (double v : x_next) std::printf(" %.17g", v);
  for (double v : J) std::printf(" %.17g", v);
  double y[2] = {2.0, 0.0}, v[1] = {0.0}, y_next[2];
  irk_cpp_few::OUT0_t out(y_next);
  const bool failed = !irk_cpp_few::call(irk_cpp_few::IN0_t(y), irk_cpp_few::IN1_t(v), out, few_ws);
  std::printf("\n%d %d %d\n", failed, few_ws.rk.status, std::isnan(y_next[0]) ? 1 : 0);
  return 0;
}
"""


def test_generated_module_equals_python_and_reports_failures(tmp_path: Path) -> None:
  cxx = shutil.which("g++") or shutil.which("clang++")
  if cxx is None:
    pytest.skip("no C++ compiler")
  F = irk("irk_cpp", pendulum, 0.4, nx=2, nu=1, np=1, stages=2, steps=2)
  few = irk("irk_cpp_few", van_der_pol, 0.5, nx=2, nu=1, newton_iter=1)
  av.generate_module("irk_cpp_mod", [F.jacobian, few], out_dir=tmp_path)
  (tmp_path / "main.cpp").write_text(MAIN)
  flags = ["-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all"]  # fmt: skip
  build = subprocess.run([cxx, *flags, "main.cpp", "irk_cpp_mod.cpp", "-o", "main"], cwd=tmp_path, capture_output=True,
                         text=True)  # fmt: skip
  assert build.returncode == 0 and not build.stderr, build.stderr
  run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True)
  assert run.returncode == 0 and "runtime error" not in run.stderr, run.stderr
  first, second = run.stdout.splitlines()
  values = [float(v) for v in first.split()]
  x_next, J = F.jacobian(np.array([0.7, -0.4]), np.array([0.5]), np.array([3.0]))
  assert values[0] == 1.0
  np.testing.assert_array_equal(values[1:3], x_next)
  np.testing.assert_array_equal(np.reshape(values[3:], (2, 3)), J)
  assert second.split() == ["1", "1", "1"], "a step that fails returns false, status 1 (no convergence), NaN"
