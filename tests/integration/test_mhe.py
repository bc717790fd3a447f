"""Moving-horizon estimation (issue 20): MHEFunction's estimates equal CasADi IPOPT's on the same NLP at every step
of a run (the arrival cost recomputed independently here with numpy from IPOPT's solutions), the estimation error
is below the measurement noise, an MPC on the estimates keeps the cart-pole's pole up, the generated C++ (built with
sanitizers, warning-free) gives Python's estimates, and bad inputs raise clear errors."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anvil
from anvil import Arg, NumericalFunction
from anvil.codegen import find_compiler
from anvil.mpc import MHEFunction, MPCOptions, rk4, simulate
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from anvil.problems.backend import TINYGRAD, casadi_backend
from tests.conftest import STRICT

NX, NU, NY, M, STEPS = 4, 1, 2, 10, 36
SIGMA_Y, SIGMA_W = 0.02, 0.002  # measurement and process noise (standard deviations)
Q_W, R_W = np.full(NX, SIGMA_W**-2), np.full(NY, SIGMA_Y**-2)
P_0 = np.diag([100.0, 100.0, 10.0, 10.0])
X_PRIOR = np.array([0.1, 0.1, 0.0, 0.0])
TOL = 1e-6


def measured(name: str) -> NumericalFunction:
  """h(x) = (xc, theta)."""
  return NumericalFunction(name, lambda x: x[0:2], (Arg(NX),))


def cartpole_mhe(process_noise_weight: np.ndarray = Q_W) -> MHEFunction:
  """The cart-pole's estimator (a new instance; one library in the cache for the same weights)."""
  return MHEFunction("mhe_cartpole", cm.dynamics("mhe_cartpole_F"), measured("mhe_cartpole_h"), M,
                     process_noise_weight=process_noise_weight, measurement_weight=R_W, arrival_weight=P_0,
                     x_prior=X_PRIOR)  # fmt: skip


@pytest.fixture(scope="module")
def mhe() -> MHEFunction:
  return cartpole_mhe()


def noisy_run(steps: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """States, applied inputs and measurements of the cart-pole driven by u_t = 2 sin(0.4 t), seeded noise."""
  rng = np.random.default_rng(seed)
  xs, us = [np.array([0.15, 0.05, 0.0, 0.0])], []
  for t in range(steps - 1):
    us.append(np.array([2.0 * np.sin(0.4 * t)]))
    xs.append(cartpole.step_numpy(xs[-1], us[-1]) + rng.normal(0.0, SIGMA_W, NX))
  ys = np.array([x[:NY] + rng.normal(0.0, SIGMA_Y, NY) for x in xs])
  return np.array(xs), np.array(us).reshape(-1, NU), ys


class Reference:
  """The MHE NLP solved by IPOPT, with the smoothed EKF arrival update computed from its solutions (numpy)."""

  def __init__(self, step: Callable[..., Any], h: Callable[..., Any], Q: np.ndarray, R: np.ndarray,
               x_bounds: tuple[np.ndarray, np.ndarray] | None = None, window: int = M) -> None:  # fmt: skip
    self.ca = pytest.importorskip("casadi")
    self.step, self.h, self.Q, self.R, self.x_bounds, self.window = step, h, Q, R, x_bounds, window
    x, u, p = self.ca.SX.sym("x", NX), self.ca.SX.sym("u", NU), self.ca.SX.sym("p", 1)
    self.A = self.ca.Function("A", [x, u, p], [self.ca.jacobian(step(x, u, p), x)])
    self.C = self.ca.Function("C", [x, p], [self.ca.jacobian(h(x, p), x)])
    self.guess: np.ndarray | None = None

  def solve(self, ys: np.ndarray, us: np.ndarray, ps: np.ndarray, center: np.ndarray, P: np.ndarray) -> np.ndarray:
    """The window's states (k, nx) minimizing the MHE cost from the arrival cost (center, P)."""
    ca, k = self.ca, len(ys)
    X, W = ca.SX.sym("X", NX, k), ca.SX.sym("W", NX, k - 1)
    J = ca.mtimes([(X[:, 0] - center).T, P, X[:, 0] - center])
    for j in range(k):
      e = ys[j] - self.h(X[:, j], ps[j])
      J += ca.mtimes([e.T, self.R, e])
    g = []
    for j in range(k - 1):
      J += ca.mtimes([W[:, j].T, self.Q, W[:, j]])
      g.append(X[:, j + 1] - self.step(X[:, j], us[j], ps[j]) - W[:, j])
    lbx, ubx = -np.inf * np.ones(NX * (2 * k - 1)), np.inf * np.ones(NX * (2 * k - 1))
    if self.x_bounds is not None:
      lbx[: NX * k], ubx[: NX * k] = np.tile(self.x_bounds[0], k), np.tile(self.x_bounds[1], k)
    nlp = {"x": ca.veccat(X, W), "f": J, "g": ca.vertcat(*g) if g else ca.SX(0, 1)}
    solver = ca.nlpsol("mhe", "ipopt", nlp, {"ipopt.print_level": 0, "print_time": 0, "ipopt.tol": 1e-10})
    guess = np.concatenate([np.tile(center, k), np.zeros(NX * (k - 1))]) if self.guess is None else self.guess
    sol = solver(x0=guess[: NX * (2 * k - 1)], lbg=0, ubg=0, lbx=lbx, ubx=ubx)
    assert solver.stats()["success"], solver.stats()["return_status"]
    z = np.array(sol["x"]).ravel()
    xs, ws = z[: NX * k].reshape(k, NX), z[NX * k :].reshape(k - 1, NX)
    # the next window's guess: this one's, shifted when the window is full
    shift = 1 if k == self.window else 0
    nxt = np.vstack([xs[shift:], xs[-1:]])[: min(k + 1, self.window)]
    self.guess = np.concatenate([nxt.ravel(), np.vstack([ws[shift:], np.zeros((1, NX))])[: len(nxt) - 1].ravel()])
    return xs

  def advance(self, xs: np.ndarray, u0: np.ndarray, p0: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The next window's arrival cost: center x_1, weight (A (P + C'RC)^-1 A' + Q^-1)^-1 at x_0."""
    A, C = np.array(self.A(xs[0], u0, p0)), np.array(self.C(xs[0], p0))
    info = P + C.T @ self.R @ C
    return xs[1], np.linalg.inv(A @ np.linalg.inv(info) @ A.T + np.linalg.inv(self.Q))


def cartpole_reference() -> Reference:
  b = casadi_backend(pytest.importorskip("casadi"))
  return Reference(lambda x, u, p: cartpole.step(x, u, b), lambda x, p: x[0:NY], np.diag(Q_W), np.diag(R_W))


@pytest.fixture(scope="module")
def run(mhe: MHEFunction) -> dict[str, Any]:
  """The estimator over a noisy run (windows growing to M, then sliding), against the reference at every step."""
  ref = cartpole_reference()
  xs, us, ys = noisy_run(STEPS, seed=3)
  mhe.reset()
  center, P = X_PRIOR.copy(), P_0.copy()
  out: dict[str, Any] = {"truth": xs, "y": ys, "u": us, "est": [], "ref": [], "arrival": [], "ref_arrival": []}
  for t in range(STEPS):
    k = min(t + 1, M)
    window = slice(t + 1 - k, t + 1)
    est = mhe(ys[window], us[t + 1 - k : t])
    assert est.success, est.message
    out["est"].append(est)
    out["ref"].append(ref.solve(ys[window], us[t + 1 - k : t], np.zeros((k, 1)), center, P))
    if k == M:
      center, P = ref.advance(out["ref"][-1], us[t + 1 - k], np.zeros(1), P)
    out["arrival"].append(mhe.arrival)
    out["ref_arrival"].append((center, P))
  return out


def test_estimates_equal_ipopt_at_every_step(run: dict[str, Any]) -> None:
  for t, (est, ref) in enumerate(zip(run["est"], run["ref"], strict=True)):
    assert est.x.shape == ref.shape == (min(t + 1, M), NX)
    np.testing.assert_allclose(est.x, ref, atol=TOL, err_msg=f"step {t}")
    np.testing.assert_array_equal(est.x_hat, est.x[-1])
    # the window's noise is its dynamics' defects
    for j in range(len(est.w)):
      u = run["u"][t + 1 - len(est.x) + j]
      np.testing.assert_allclose(est.w[j], est.x[j + 1] - cartpole.step_numpy(est.x[j], u), atol=1e-9)


def test_arrival_cost_follows_the_smoothed_ekf_update(run: dict[str, Any]) -> None:
  for t, ((center, P), (ref_center, ref_P)) in enumerate(zip(run["arrival"], run["ref_arrival"], strict=True)):
    np.testing.assert_allclose(center, ref_center, atol=TOL, err_msg=f"step {t}")
    np.testing.assert_allclose(P, ref_P, rtol=1e-6, atol=1e-6 * np.abs(ref_P).max(), err_msg=f"step {t}")
  assert not np.allclose(run["arrival"][-1][1], P_0)  # it moved


def test_estimation_error_is_below_the_measurement_noise(run: dict[str, Any]) -> None:
  truth = run["truth"][M:]
  estimates = np.array([e.x_hat for e in run["est"][M:]])
  measurement_error = np.sqrt(np.mean((run["y"][M:] - truth[:, :NY]) ** 2))
  estimation_error = np.sqrt(np.mean((estimates[:, :NY] - truth[:, :NY]) ** 2))
  assert estimation_error < 0.8 * measurement_error, (estimation_error, measurement_error)
  # the unmeasured rates: within a quarter of the error of a finite difference of two measurements
  rate_error = np.sqrt(np.mean((estimates[:, NY:] - truth[:, NY:]) ** 2))
  assert rate_error < 0.25 * np.sqrt(2) * SIGMA_Y / cartpole.H, rate_error


def test_float32_estimator_follows_the_float64_one(run: dict[str, Any]) -> None:
  """MPCOptions(scalar="float32"): the OCP, the model and the arrival update in float (a microcontroller's FPU)."""
  mhe = MHEFunction("mhe_cartpole_f32", cm.dynamics("mhe_cartpole_f32_F"), measured("mhe_cartpole_f32_h"), M,
                    process_noise_weight=Q_W, measurement_weight=R_W, arrival_weight=P_0, x_prior=X_PRIOR,
                    options=MPCOptions(scalar="float32"))  # fmt: skip
  ys, us = run["y"], run["u"]
  for t, reference in enumerate(run["est"]):
    k = min(t + 1, M)
    est = mhe(ys[t + 1 - k : t + 1], us[t + 1 - k : t])
    assert est.success, est.message
    np.testing.assert_allclose(est.x_hat, reference.x_hat, atol=1e-3, err_msg=f"step {t}")
  np.testing.assert_allclose(mhe.arrival[1], run["arrival"][-1][1], rtol=1e-4)


def test_mpc_on_estimates_keeps_the_pole_up(mhe: MHEFunction) -> None:
  mpc = cm.stabilizing("mhe_loop_mpc", horizon=20)
  noise = np.random.default_rng(11).normal(0.0, SIGMA_Y, (80, NY))
  loop = simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, 80, estimator=mhe,
                  measure=lambda t, x: x[:NY] + noise[t])  # fmt: skip
  assert loop.failure is None and loop.x_estimated is not None
  assert loop.x_estimated.shape == (80, NX) and loop.estimation_times.shape == (80,)
  assert np.abs(loop.x[-20:, 1]).max() < 0.05 and np.abs(loop.x[-1, 0]) < 0.1, loop.x[-1]
  assert np.abs(loop.x_estimated[20:, :NY] - loop.x[20:-1, :NY]).max() < 3 * SIGMA_Y


HARNESS = r"""
#include <cstdio>
#include "mhe_module.hpp"
#include "mhe_windows.hpp"
namespace e = mhe_cartpole;
static e::WS_t ws;
int main() {
  e::init(ws);
  e::Stats stats;
  e::real x[e::M * e::nx], w[e::M * e::nx], p[1] = {0};
  for (int t = 0; t < steps; ++t) {
    const int k = t + 1 < e::M ? t + 1 : e::M, first = t + 1 - k;
    if (t % 2) {  // the limits by name: the build-time ones
      e::call(ys + first * e::ny, us + first * e::nu, p, k, x, w, stats, ws, e::Options{});
    } else {
      e::call(ys + first * e::ny, us + first * e::nu, p, k, x, w, stats, ws);
    }
    for (int i = 0; i < e::nx; ++i) std::printf("%.17g ", x[(k - 1) * e::nx + i]);
    std::printf("%d\n", stats.status);
  }
  return 0;
}
"""


def test_cpp_equals_python(mhe: MHEFunction, run: dict[str, Any], tmp_path: Path) -> None:
  _, source = anvil.generate_module("mhe_module", [mhe], out_dir=tmp_path)
  lines = [f"constexpr int steps = {STEPS};",
           f"constexpr double ys[] = {{{', '.join(map(repr, run['y'].ravel().tolist()))}}};",
           f"constexpr double us[] = {{{', '.join(map(repr, run['u'].ravel().tolist()))}}};"]  # fmt: skip
  (tmp_path / "mhe_windows.hpp").write_text("\n".join(lines) + "\n")
  (tmp_path / "main.cpp").write_text(HARNESS)
  exe = tmp_path / "mhe_harness"
  flags = ["-std=c++17", "-O1", "-g", "-Wall", "-Wextra", *STRICT, "-Werror", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all"]  # fmt: skip
  built = subprocess.run([find_compiler(), *flags, f"-I{tmp_path}", str(source), str(tmp_path / "main.cpp"), "-o",
                          str(exe)], capture_output=True, text=True)  # fmt: skip
  assert built.returncode == 0, built.stderr
  out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  rows = np.array([[float(v) for v in line.split()] for line in out.stdout.splitlines()])
  assert (rows[:, -1] == 0).all()  # converged
  np.testing.assert_allclose(rows[:, :NX], [e.x_hat for e in run["est"]], atol=1e-9)


def test_parameters_bounds_nonlinear_measurements_and_gauss_newton_match_ipopt() -> None:
  """A model with a parameter (the input's gain, per measurement time), a nonlinear measurement, a state bound the
  estimate presses on and Gauss-Newton Hessians: windows of 5 growing then sliding, estimates and arrival costs."""
  F = rk4("mhe_gain_F", lambda x, u, p: cartpole.ode(x, u * p[0], TINYGRAD), cartpole.H, nx=NX, nu=NU, np=1)

  def range_angle(x: Any, p: Any) -> Any:
    return (x[0] + 0.5 * x[1] * x[1]).reshape(1).cat(x[1].sin().reshape(1))

  h = NumericalFunction("mhe_gain_h", range_angle, (Arg(NX), Arg(1)))
  window, steps = 5, 8
  xs, us, _ = noisy_run(steps, seed=5)
  ceiling = 0.5 * xs[:, 2].max()  # half the cart's top speed: the estimates press on it
  assert ceiling > 0
  bound = (np.full(NX, -np.inf), np.array([np.inf, np.inf, ceiling, np.inf]))
  mhe = MHEFunction("mhe_gain", F, h, window, process_noise_weight=Q_W, measurement_weight=R_W, arrival_weight=P_0,
                    x_bounds=bound, x_prior=X_PRIOR, options=MPCOptions(hessian="gauss_newton"))  # fmt: skip
  ca = pytest.importorskip("casadi")
  b = casadi_backend(ca)
  ref = Reference(lambda x, u, p: cartpole.rk4(lambda x_, u_: cartpole.ode(x_, u_ * p[0], b), x, u, cartpole.H),
                  lambda x, p: ca.vertcat(x[0] + 0.5 * x[1] ** 2, ca.sin(x[1])), np.diag(Q_W), np.diag(R_W), bound,
                  window)  # fmt: skip
  ys = np.array([[x[0] + 0.5 * x[1] ** 2, np.sin(x[1])] for x in xs]) + 0.01
  gains = 1.0 + 0.2 * np.sin(np.arange(steps))[:, None]
  center, P, pressed = X_PRIOR.copy(), P_0.copy(), False
  for t in range(steps):
    k = min(t + 1, window)
    at = slice(t + 1 - k, t + 1)
    est = mhe(ys[at], us[t + 1 - k : t], gains[at])
    assert est.success, est.message
    reference = ref.solve(ys[at], us[t + 1 - k : t], gains[at], center, P)
    np.testing.assert_allclose(est.x, reference, atol=TOL, err_msg=f"step {t}")
    pressed = pressed or est.x[:, 2].max() == pytest.approx(ceiling, abs=1e-8)
    if k == window:
      center, P = ref.advance(reference, us[t + 1 - k], gains[t + 1 - k], P)
      np.testing.assert_allclose(mhe.arrival[0], center, atol=TOL)
      np.testing.assert_allclose(mhe.arrival[1], P, rtol=1e-6, atol=1e-6 * np.abs(P).max())
  assert pressed  # the bound was active


def test_bad_inputs_raise(mhe: MHEFunction) -> None:
  y = np.zeros((3, NY))
  with pytest.raises(ValueError, match="y_window must have shape"):
    mhe(np.zeros((M + 1, NY)), np.zeros((M, NU)))
  with pytest.raises(ValueError, match="y_window"):
    mhe(np.full((3, NY), np.nan), np.zeros((2, NU)))
  with pytest.raises(ValueError, match="u_window must have shape"):
    mhe(y, np.zeros((3, NU)))
  with pytest.raises(ValueError, match="u_window is required"):
    mhe(y)
  with pytest.raises(ValueError, match="p must have shape"):
    mhe(y, np.zeros((2, NU)), np.zeros((3, 2)))
  F, h = cm.dynamics("mhe_bad_F"), measured("mhe_bad_h")
  kw: dict[str, Any] = {"process_noise_weight": Q_W, "measurement_weight": R_W, "arrival_weight": P_0}
  with pytest.raises(ValueError, match="positive definite"):
    MHEFunction("mhe_bad", F, h, M, **{**kw, "process_noise_weight": np.zeros(NX)})
  with pytest.raises(ValueError, match="measurement_weight"):
    MHEFunction("mhe_bad", F, h, M, **{**kw, "measurement_weight": np.ones(3)})
  with pytest.raises(ValueError, match="horizon"):
    MHEFunction("mhe_bad", F, h, 1, **kw)
  with pytest.raises(ValueError, match="mode"):
    MHEFunction("mhe_bad", F, h, M, **kw, options=MPCOptions(hessian="gauss_newton", mode="rti"))
  with pytest.raises(TypeError, match="measurement"):
    MHEFunction("mhe_bad", F, "h", M, **kw)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="measurement must map"):
    MHEFunction("mhe_bad", F, NumericalFunction("mhe_bad_h2", lambda x: x[0:2], (Arg(3),)), M, **kw)
  with pytest.raises(ValueError, match="x_bounds"):
    MHEFunction("mhe_bad", F, h, M, **kw, x_bounds=(np.ones(NX), np.zeros(NX)))
  with pytest.raises(ValueError, match="x_prior"):
    mhe.reset(x_prior=np.full(NX, np.inf))


def test_an_estimator_found_in_the_cache_derives_nothing(mhe: MHEFunction) -> None:
  """An estimator whose library another built (as a new process finds it in the cache, by its problem key) estimates
  without building its window's SQP solver or the arrival update's Jacobians (a warm build's derivatives); another
  weight is another key (its code holds the weights)."""
  _, us, ys = noisy_run(M, 3)
  mhe.reset()
  reference = mhe(ys, us[: M - 1])
  again = cartpole_mhe()
  np.testing.assert_array_equal(again(ys, us[: M - 1]).x, reference.x)
  assert "sqp" not in vars(again.ocp) and "jacobians" not in vars(again), "the warm estimator derived"
  assert cartpole_mhe(2 * Q_W).problem_key != again.problem_key
