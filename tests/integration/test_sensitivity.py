"""Solution sensitivities (issue 20): the derivatives of converged SQP and MPC solutions with respect to the parameters
and x0, from the KKT system at the solution, against central finite differences of converged solves and CasADi's
parametric sensitivities; active-set changes reported (strict complementarity); refused where undefined."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from anvil.qp import RiccatiOptions
from anvil.sqp import SQPFunction, SQPOptions
from tests.conftest import STRICT

H_FD = 1e-6  # central differences of solves converged to 1e-12: error ~1e-10 + rounding 1e-16 / 1e-6
LBX, UBX = np.array([-np.inf, 0.0]), np.array([np.inf, np.inf])
LBG, UBG = np.array([-np.inf, -1.0]), np.array([1.0, np.inf])


@pytest.fixture(scope="module")
def nlp() -> SQPFunction:
  """min (x0 - p0)² + 2 (x1 - p1)² + 0.1 x0 x1  s.t.  x0 + p2 x1 <= 1,  x0 - x1² >= -1,  x1 >= 0."""
  args = (Arg(2), Arg(3))
  f = NumericalFunction("sens_f", lambda x, p: (x[0] - p[0]) ** 2 + 2 * (x[1] - p[1]) ** 2 + 0.1 * x[0] * x[1], args)
  g = NumericalFunction("sens_g", lambda x, p: (x[0] + p[2] * x[1]).reshape(1).cat((x[0] - x[1] * x[1]).reshape(1)),
                        args)  # fmt: skip
  return SQPFunction("sens_nlp", f, g, SQPOptions(tol=1e-12))


def finite_differences(solve: Any, p: np.ndarray) -> np.ndarray:
  """Central differences of solve(p) (an array) in each entry of p: (size, len(p))."""
  return np.stack([(solve(p + H_FD * e) - solve(p - H_FD * e)) / (2 * H_FD) for e in np.eye(p.size)], axis=-1)


@pytest.mark.parametrize(
  ("p", "active_g", "active_x"),
  [([0.2, 0.3, 1.0], (), ()), ([2.0, 1.0, 1.5], (0,), ()), ([2.0, -1.0, 1.0], (0,), (1,))],
  ids=["inactive", "constraint", "constraint_and_bound"],
)
def test_nlp_sensitivities_match_finite_differences(nlp: SQPFunction, p: list[float], active_g: tuple[int, ...],
                                                    active_x: tuple[int, ...]) -> None:  # fmt: skip
  p_ = np.array(p)

  def solve(q: np.ndarray) -> Any:
    res = nlp(np.zeros(2), q, LBX, UBX, LBG, UBG)
    assert res.status == "converged"
    return res

  res = solve(p_)
  S = res.sensitivity("p")
  assert (S.active_g, S.active_x, S.strict) == (active_g, active_x, True)
  np.testing.assert_allclose(S.x, finite_differences(lambda q: solve(q).x, p_), atol=1e-6)
  np.testing.assert_allclose(S.lam_g, finite_differences(lambda q: solve(q).lam_g, p_), atol=1e-6)
  np.testing.assert_allclose(S.lam_x, finite_differences(lambda q: solve(q).lam_x, p_), atol=1e-6)


def test_nlp_sensitivities_match_casadi(nlp: SQPFunction) -> None:
  ca = pytest.importorskip("casadi")
  x, p = ca.SX.sym("x", 2), ca.SX.sym("p", 3)
  f = (x[0] - p[0]) ** 2 + 2 * (x[1] - p[1]) ** 2 + 0.1 * x[0] * x[1]
  g = ca.vertcat(x[0] + p[2] * x[1], x[0] - x[1] ** 2)
  opts = {"qpsol": "qrqp", "print_time": 0, "print_header": False, "print_iteration": False, "print_status": False,
          "qpsol_options": {"print_iter": False, "print_header": False, "print_info": False}, "tol_pr": 1e-12,
          "tol_du": 1e-12}  # fmt: skip
  solver = ca.nlpsol("sens_casadi", "sqpmethod", {"x": x, "p": p, "f": f, "g": g}, opts)
  P = ca.MX.sym("P", 3)
  sol = solver(x0=0, p=P, lbx=ca.DM(LBX), ubx=ca.DM(UBX), lbg=ca.DM(LBG), ubg=ca.DM(UBG))
  dx_dp = ca.Function("dx_dp", [P], [ca.jacobian(sol["x"], P)])
  for point in ([2.0, 1.0, 1.5], [0.2, 0.3, 1.0]):
    S = nlp(np.zeros(2), np.array(point), LBX, UBX, LBG, UBG).sensitivity()
    np.testing.assert_allclose(S.x, np.array(dx_dp(point)), atol=1e-8)


def test_weakly_active_rows_are_reported(nlp: SQPFunction) -> None:
  """At p = (1, 0, 1) the solution sits on x0 + x1 <= 1 with a zero multiplier: the active set changes with p there.
  The derivative is the one of the side where the row stays inactive, and `strict` is False."""
  p = np.array([1.0, 0.0, 1.0])
  res = nlp(np.zeros(2), p, LBX, UBX, LBG, UBG)
  assert res.status == "converged"
  S = res.sensitivity()
  assert not S.strict and S.weakly_active_g == (0,) and S.active_g == ()
  # moving away from the bound (p0 down) the row stays inactive: the one-sided difference equals S
  down = (res.x - nlp(np.zeros(2), p - H_FD * np.eye(3)[0], LBX, UBX, LBG, UBG).x) / H_FD
  np.testing.assert_allclose(S.x[:, 0], down, atol=1e-5)


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  return cm.stabilizing("sens_cartpole", horizon=20)


@pytest.mark.parametrize("x0", [[0.5, 0.3, 0.0, 0.0], [1.5, 0.6, 0.0, 0.0]], ids=["free", "saturated"])
def test_mpc_du0_dx0_matches_finite_differences(mpc: MPCFunction, x0: list[float]) -> None:
  def u0(x: np.ndarray) -> np.ndarray:
    mpc.reset()
    sol = mpc(x, tol=1e-12)
    assert sol.status == "converged"
    return sol.u0

  x = np.array(x0)
  mpc.reset()
  sol = mpc(x, tol=1e-12)
  K = sol.du0_dx0()
  assert K.shape == (cm.NU, cm.NX)
  np.testing.assert_allclose(K, finite_differences(u0, x), atol=1e-6)
  if x0[0] > 1:  # the first input at its bound: a constant
    assert abs(sol.u0[0]) == pytest.approx(cm.U_MAX) and np.abs(K).max() < 1e-12
  else:
    assert np.abs(K).max() > 1


def reference_mpc(name: str = "sens_ref", options: MPCOptions | None = None) -> MPCFunction:
  """The cart-pole tracking a cart position p (np = 1) with a LeastSquares cost: ∂u0/∂p is the feedforward."""
  F = cm.dynamics(f"{name}_F")
  r = NumericalFunction(f"{name}_r", lambda x, u, p: (x - p.pad(((0, 3),))).cat(u), (Arg(4), Arg(1), Arg(1)))
  rN = NumericalFunction(f"{name}_rN", lambda x, p: x - p.pad(((0, 3),)), (Arg(4), Arg(1)))
  weight = np.concatenate([np.diag(cartpole.Q), [cartpole.R]])
  x_bounds, u_bounds = cm.bounds()
  return MPCFunction(name, F, LeastSquares(r, weight), LeastSquares(rN, 10 * np.diag(cartpole.Q)), horizon=15,
                     x_bounds=x_bounds, u_bounds=u_bounds, options=options)  # fmt: skip


def test_mpc_du0_dp_matches_finite_differences() -> None:
  mpc = reference_mpc()
  x0 = np.array([0.2, 0.1, 0.0, 0.0])

  def u0(p: np.ndarray) -> np.ndarray:
    mpc.reset()
    sol = mpc(x0, p, tol=1e-12)
    assert sol.status == "converged"
    return sol.u0

  mpc.reset()
  sol = mpc(x0, np.array([0.3]), tol=1e-12)
  np.testing.assert_allclose(sol.du0_dp(), finite_differences(u0, np.array([0.3])), atol=1e-6)
  per_stage = sol.du0_dp(per_stage=True)
  assert per_stage.shape == (1, 16, 1)
  np.testing.assert_allclose(per_stage.sum(axis=1), sol.du0_dp(), atol=1e-12)
  p_stages = np.full((16, 1), 0.3)
  fd_first = (u0(p_stages + H_FD * np.eye(16)[:, :1]) - u0(p_stages - H_FD * np.eye(16)[:, :1])) / (2 * H_FD)
  np.testing.assert_allclose(per_stage[:, 0, 0], fd_first, atol=1e-6)


def test_sensitivities_are_refused_where_undefined(nlp: SQPFunction, mpc: MPCFunction) -> None:
  res = nlp(np.zeros(2), np.array([2.0, 1.0, 1.5]), LBX, UBX, LBG, UBG, max_iter=0)
  assert res.status == "max_iterations"
  with pytest.raises(ValueError, match="sensitivities are those of a solution"):
    res.sensitivity()
  with pytest.raises(ValueError, match="wrt must be 'p'"):
    nlp(np.zeros(2), np.array([0.2, 0.3, 1.0]), LBX, UBX, LBG, UBG).sensitivity("x0")
  gn, exact = reference_mpc("sens_gn", MPCOptions(hessian="gauss_newton")), reference_mpc("sens_exact")
  # a Gauss-Newton controller's: the sensitivity's own exact Hessian at the same solution
  gn_sol, exact_sol = (
    gn(cm.X0_STABILIZE, np.array([0.3]), tol=1e-12),
    exact(cm.X0_STABILIZE, np.array([0.3]), tol=1e-12),
  )
  assert gn_sol.status == exact_sol.status == "converged"
  np.testing.assert_allclose(gn_sol.du0_dx0(), exact_sol.du0_dx0(), atol=1e-8)
  np.testing.assert_allclose(gn_sol.du0_dp(), exact_sol.du0_dp(), atol=1e-8)
  rti = reference_mpc("sens_rti", MPCOptions(hessian="gauss_newton", mode="rti"))
  with pytest.raises(ValueError, match="converged full-SQP solution"):
    rti(cm.X0_STABILIZE, np.zeros(1)).du0_dx0()


GAIN_HARNESS = r"""
#include <cstdio>
#include "closed_loop_config.hpp"
namespace mpc = ANVIL_MPC;
namespace cfg = closed_loop_config;
static mpc::WS_t ws;
int main() {
  mpc::init(ws);
  mpc::Stats stats;
  static mpc::real x[(mpc::N + 1) * mpc::nx], u[mpc::N * mpc::nu], K[mpc::nu * mpc::nx];
  mpc::call(cfg::x0.data(), cfg::p.data(), cfg::lbx.data(), cfg::ubx.data(), cfg::lbu.data(), cfg::ubu.data(),
            cfg::lbh.data(), cfg::ubh.data(), cfg::lbhN.data(), cfg::ubhN.data(), x, u, stats, ws, 100, 1e-12);
  if (!mpc::du0_dx0(ws, K)) return 3;
  std::printf("%d", stats.status);
  for (double k : K) std::printf(" %.17g", k);
  std::printf("\n");
  return 0;
}
"""


@pytest.mark.parametrize("blocks", [1, 4, 10], ids=["stages", "condensed", "condensed_keeps_v"])
@pytest.mark.parametrize("x0", [[0.5, 0.3, 0.0, 0.0], [1.5, 0.6, 0.0, 0.0]], ids=["free", "saturated"])
def test_generated_du0_dx0_equals_python(mpc: MPCFunction, x0: list[float], blocks: int, tmp_path: Any) -> None:
  """The generated C++ du0_dx0 (the Riccati QP's last factorization at the solution: with partial condensing, the
  first block's; in blocks of 10 inputs, formed from the V the factorization keeps) equals the KKT system's."""
  import subprocess

  if blocks > 1:
    mpc = cm.stabilizing(f"sens_cartpole_{blocks}", MPCOptions(qp=RiccatiOptions(condensing=blocks)), horizon=20)

  from anvil.codegen import find_compiler
  from anvil.mpc.harness import INCLUDES, write_module

  source = write_module(mpc, tmp_path, x0=np.array(x0))
  (tmp_path / "gain.cpp").write_text(GAIN_HARNESS)
  exe = tmp_path / "gain"
  flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", *STRICT, "-Werror", *(f"-I{tmp_path / i}" for i in INCLUDES)]
  built = subprocess.run([find_compiler(), *flags, str(source), str(tmp_path / "gain.cpp"), "-o", str(exe)],
                         capture_output=True, text=True)  # fmt: skip
  assert built.returncode == 0, built.stderr
  out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stdout + out.stderr
  values = np.array(out.stdout.split(), dtype=float)
  assert values[0] == 0  # converged
  mpc.reset()
  sol = mpc(np.array(x0), tol=1e-12)
  np.testing.assert_allclose(values[1:].reshape(cm.NU, cm.NX), sol.du0_dx0(), atol=1e-6)


SQP_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <limits>
#include "sens_module.hpp"
static sens_nlp::WS_t solver;
static sens_nlp_sensitivity::WS_t kkt;
int main(int, char** argv) {
  sens_nlp::init(solver);
  sens_nlp_sensitivity::init(kkt);
  const double inf = std::numeric_limits<double>::infinity();
  double x0[2] = {0, 0}, p[3], lbx[2] = {-inf, 0}, ubx[2] = {inf, inf}, lbg[2] = {-inf, -1}, ubg[2] = {1, inf};
  for (int i = 0; i < 3; ++i) p[i] = std::strtod(argv[1 + i], nullptr);
  double zeros[2] = {0, 0}, x[2], f, lam_g[2], lam_x[2], dx[6], dlam_g[6], dlam_x[6];
  int active[4];
  sens_nlp::Stats stats;
  const int status = sens_nlp::call(x0, p, lbx, ubx, lbg, ubg, zeros, zeros, x, &f, lam_g, lam_x, stats, solver,
                                    sens_nlp::max_iter, 1e-12);
  const int code = sens_nlp_sensitivity::call(x, p, lam_g, lam_x, lbx, ubx, lbg, ubg, dx, dlam_g, dlam_x, active, kkt);
  std::printf("%d %d", status, code);
  for (double v : dx) std::printf(" %.17g", v);
  for (double v : dlam_g) std::printf(" %.17g", v);
  for (double v : dlam_x) std::printf(" %.17g", v);
  for (int a : active) std::printf(" %d", a);
  std::printf("\n");
  return 0;
}
"""

SANITIZED = ["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


def build_sanitized(source: Path, main: str, out: Path) -> Path:
  """Compile the generated module `source` (and the C sources it brings) with main.cpp, warnings as errors, under
  AddressSanitizer and UBSan."""
  from anvil.codegen import find_c_compiler, find_compiler
  from anvil.mpc.harness import INCLUDES

  (out / "main.cpp").write_text(main)
  include = [f"-I{out / i}" for i in INCLUDES]
  objects = []
  for c in sorted((out / "osqp" / "src").glob("*.c")):
    objects.append(out / f"{c.stem}.o")
    built = subprocess.run([find_c_compiler(), "-std=c99", *SANITIZED, *include, "-c", str(c), "-o", str(objects[-1])],
                           capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stderr
  exe = out / "harness"
  built = subprocess.run([find_compiler(), "-std=c++17", *SANITIZED, *include, str(source), str(out / "main.cpp"),
                          *map(str, objects), "-o", str(exe)], capture_output=True, text=True)  # fmt: skip
  assert built.returncode == 0, built.stderr
  return exe


@pytest.mark.parametrize("p", [[0.2, 0.3, 1.0], [2.0, -1.0, 1.0]], ids=["inactive", "constraint_and_bound"])
def test_generated_nlp_sensitivity_equals_python(nlp: SQPFunction, p: list[float], tmp_path: Path) -> None:
  """The SQP and its SensitivityFunction in one generated module, built warning-free under the sanitizers, give the
  sensitivities Python gives (the same C++, loaded by the JIT)."""
  import anvil

  _, source = anvil.generate_module("sens_module", [nlp, nlp.sensitivity_function], out_dir=tmp_path)
  exe = build_sanitized(source, SQP_HARNESS, tmp_path)
  out = subprocess.run([str(exe), *map(repr, p)], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  values = out.stdout.split()
  assert values[:2] == ["0", "0"]  # converged, strict complementarity
  numbers = np.array(values[2:20], dtype=float)
  S = nlp(np.zeros(2), np.array(p), LBX, UBX, LBG, UBG, tol=1e-12).sensitivity()
  np.testing.assert_allclose(numbers[:6].reshape(2, 3), S.x, atol=1e-9)
  np.testing.assert_allclose(numbers[6:12].reshape(2, 3), S.lam_g, atol=1e-9)
  np.testing.assert_allclose(numbers[12:18].reshape(2, 3), S.lam_x, atol=1e-9)
  active = [int(v) for v in values[20:]]
  assert tuple(i for i in range(2) if active[i] > 0) == S.active_g
  assert tuple(i for i in range(2) if active[2 + i] > 0) == S.active_x


MPC_HARNESS = r"""
#include <cstdio>
#include "sens_gen_module.hpp"
#include "config.hpp"
namespace mpc = sens_gen;
namespace sens = sens_gen_sensitivity;
static mpc::WS_t ws;
static sens::WS_t sws;
int main() {
  mpc::init(ws);
  sens::init(sws);
  mpc::Stats stats;
  static mpc::real x[(mpc::N + 1) * mpc::nx], u[mpc::N * mpc::nu];
  static double dx0[sens::nu * sens::nx], dp[sens::nu * (sens::N + 1) * sens::np];
  mpc::call(cfg::x0, cfg::p, cfg::lbx, cfg::ubx, cfg::lbu, cfg::ubu, cfg::lbh, cfg::ubh, cfg::lbhN, cfg::ubhN, x, u,
            stats, ws, 100, 1e-12);
  const int code = sens::call(ws, dx0, dp, sws);
  std::printf("%d %d", stats.status, code);
  for (double v : dx0) std::printf(" %.17g", v);
  for (double v : dp) std::printf(" %.17g", v);
  std::printf("\n");
  return 0;
}
"""


def test_generated_mpc_du0_dp_equals_python(tmp_path: Path) -> None:
  """The controller and its MPCSensitivityFunction generated together: ∂u0/∂x0 and the per-stage ∂u0/∂p_k of the
  C++ (sanitized, warning-free) equal MPCSolution.du0_dx0() and du0_dp(per_stage=True)."""
  import anvil

  mpc = reference_mpc("sens_gen")
  x0 = np.array([0.2, 0.1, 0.0, 0.0])
  _, source = anvil.generate_module("sens_gen_module", [mpc, mpc.sensitivity_function], out_dir=tmp_path)
  arrays = {**mpc.defaults, "x0": x0, "p": np.full(16, 0.3)}
  literal = lambda v: "inf" if v == np.inf else "-inf" if v == -np.inf else repr(float(v))
  lines = [f"constexpr double {k}[] = {{{', '.join(map(literal, np.ravel(v))) or '0'}}};" for k, v in arrays.items()]
  header = "#include <limits>\nnamespace cfg {\nconstexpr double inf = std::numeric_limits<double>::infinity();\n"
  (tmp_path / "config.hpp").write_text(header + "\n".join(lines) + "\n}\n")
  exe = build_sanitized(source, MPC_HARNESS, tmp_path)
  out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  values = np.array(out.stdout.split(), dtype=float)
  assert values[0] == 0 and values[1] == 0  # converged; strict complementarity
  mpc.reset()
  sol = mpc(x0, np.array([0.3]), tol=1e-12)
  np.testing.assert_allclose(values[2 : 2 + cm.NX].reshape(cm.NU, cm.NX), sol.du0_dx0(), atol=1e-8)
  np.testing.assert_allclose(values[2 + cm.NX :].reshape(1, 16, 1), sol.du0_dp(per_stage=True), atol=1e-8)
  assert np.abs(sol.du0_dp()).max() > 0.1  # the feedforward is there to find


def test_singular_kkt_is_reported() -> None:
  """Two active constraints with one gradient (LICQ fails) whose bounds move apart with p: the KKT system has no
  solution (x* has a kink there), a ValueError says so; while they move together it has one (x* moves smoothly, the
  multipliers' split is not unique: the derivatives of the least-norm one). An NLP without a parameter has none."""
  args = (Arg(2), Arg(3))
  f = NumericalFunction("licq_f", lambda x, p: (x[0] - p[0]) ** 2 + (x[1] - p[1]) ** 2, args)
  g = NumericalFunction("licq_g", lambda x, p: x[0].reshape(1).cat((2 * x[0] + p[2]).reshape(1)), args)
  nlp = SQPFunction("licq_nlp", f, g, SQPOptions(tol=1e-10))
  res = nlp(np.zeros(2), np.array([2.0, 0.5, 0.0]), np.full(2, -np.inf), np.full(2, np.inf), [-np.inf] * 2, [1, 2])
  assert res.status == "converged" and np.all(res.lam_g > 0.1)
  with pytest.raises(ValueError, match="KKT matrix at the solution is singular"):
    res.sensitivity()
  g_together = NumericalFunction("licq_g2", lambda x, p: x[0].reshape(1).cat((2 * x[0]).reshape(1)), args)
  together = SQPFunction("licq_together", f, g_together, SQPOptions(tol=1e-10))
  res = together(np.zeros(2), np.array([2.0, 0.5, 0.0]), np.full(2, -np.inf), np.full(2, np.inf), [-np.inf] * 2,
                 [1, 2])  # fmt: skip
  S = res.sensitivity()
  np.testing.assert_allclose(S.x, [[0, 0, 0], [0, 1, 0]], atol=1e-9)
  np.testing.assert_allclose(S.lam_g.T @ [1, 2], [2, 0, 0], atol=1e-9)  # d/dp of the gradient's share: 2 (p0 - 1)
  plain = SQPFunction("plain_nlp", NumericalFunction("plain_f", lambda x, p: (x * x).sum(), (Arg(2), Arg(0))))
  with pytest.raises(ValueError, match="no parameter"):
    plain(np.ones(2), None, np.full(2, -np.inf), np.full(2, np.inf)).sensitivity()
