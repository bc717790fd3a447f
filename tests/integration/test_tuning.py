"""Run-time weights and soft penalties (issue 19): a controller called with other weights or penalties runs the closed
loop of a controller built with them, in Python and in the generated C++, without a rebuild; bad tuning is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import anvil as av
from anvil import Arg, NumericalFunction
from anvil.codegen.jit import find_compiler
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, Soft
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from tests.conftest import STRICT

Q = np.diag(cartpole.Q)
W_BUILD = np.concatenate([Q, [cartpole.R]])
W_CALL = np.concatenate([3 * Q, [0.5 * cartpole.R]])
X0 = np.array([1.2, 0.3, 0.0, 0.0])


def controller(name: str, weight: np.ndarray, terminal: np.ndarray, soft: Soft, options: MPCOptions) -> MPCFunction:
  """The cart-pole MPC with LeastSquares costs and |xc| <= 1 m softened (active from X0: the cart starts at 1.2 m)."""
  r = NumericalFunction(f"{name}_r", lambda x, u: x.cat(u), (Arg(4), Arg(1)))
  rN = NumericalFunction(f"{name}_rN", lambda x: x * 1.0, (Arg(4),))
  x_hi = np.array([1.0, np.inf, np.inf, np.inf])
  return MPCFunction(name, cm.dynamics(f"{name}_F"), LeastSquares(r, weight), LeastSquares(rN, terminal), horizon=20,
                     x_bounds=(-x_hi, x_hi), u_bounds=(np.array([-20.0]), np.array([20.0])), soft={"x": soft},
                     options=options)  # fmt: skip


def closed_loop(mpc: MPCFunction, steps: int, **tuning: object) -> tuple[np.ndarray, list[str]]:
  """The applied inputs and statuses of a closed loop on the controller's own model, every call with `tuning`."""
  mpc.reset()
  x, us, statuses = X0.copy(), [], []
  for _ in range(steps):
    sol = mpc(x, **tuning)  # type: ignore[arg-type]
    us.append(sol.u0)
    statuses.append(str(sol.status))
    x = np.asarray(mpc.ocp.dynamics(x, sol.u0))
  return np.array(us), statuses


@pytest.mark.parametrize(("hessian", "mode"), [("exact", "sqp"), ("gauss_newton", "sqp"), ("gauss_newton", "rti")])
def test_weights_and_penalties_at_call_time_equal_a_rebuilt_controller(hessian: str, mode: str) -> None:
  options = MPCOptions(hessian=hessian, mode=mode)
  built = controller(f"tune_a_{hessian}_{mode}", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), options)
  rebuilt = controller(f"tune_b_{hessian}_{mode}", W_CALL, 5 * Q, Soft(l1=40.0, l2=2.0), options)
  reference, _ = closed_loop(rebuilt, 60)
  u, statuses = closed_loop(built, 60, weights={"stage_cost": W_CALL, "terminal_cost": 5 * Q},
                            soft_penalties={"x": (40.0, 2.0)})  # fmt: skip
  assert all(s == ("converged" if mode == "sqp" else s) for s in statuses)
  np.testing.assert_allclose(u, reference, rtol=1e-10, atol=1e-10)
  # a call without them is the build-time controller again
  default, _ = closed_loop(built, 60)
  assert np.abs(default - reference).max() > 1e-3


def test_float32_controller_takes_the_tuning() -> None:
  """A float32 controller called with other weights follows the float64 one called with them (to float32's
  accuracy: a QP tolerance of 1e-4 and an input weight of 0.05 leave input differences of a few tenths in the
  transient), far closer than to its own build-time behaviour."""
  weights = {"stage_cost": W_CALL}
  m64 = controller("tune_f64", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), MPCOptions())
  m32 = controller("tune_f32", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), MPCOptions(scalar="float32"))
  u64, _ = closed_loop(m64, 30, weights=weights)
  u32, statuses = closed_loop(m32, 30, weights=weights)
  default, _ = closed_loop(m32, 30)
  assert all(s == "converged" for s in statuses)
  assert np.abs(u32 - u64).max() < 0.2 * np.abs(u32 - default).max()
  assert np.abs(u32[-5:] - u64[-5:]).max() < 1e-2  # the same rest


def test_bad_tuning_is_refused_by_name() -> None:
  mpc = controller("tune_bad", W_BUILD, 10 * Q, Soft(l1=100.0), MPCOptions())
  with pytest.raises(ValueError, match="positive semidefinite"):
    mpc(X0, weights={"stage_cost": -np.ones(5)})
  with pytest.raises(ValueError, match="5x5"):
    mpc(X0, weights={"stage_cost": np.ones(4)})
  with pytest.raises(ValueError, match="keys"):
    mpc(X0, weights={"stage": W_BUILD})
  with pytest.raises(ValueError, match="no softened bound"):
    mpc(X0, soft_penalties={"u": (1.0, 0.0)})
  with pytest.raises(ValueError, match="l1"):
    mpc(X0, soft_penalties={"x": (-1.0, 0.0)})
  with pytest.raises(TypeError, match=r"\(l1, l2\)"):
    mpc(X0, soft_penalties={"x": (1.0, 2.0, 3.0)})
  np.testing.assert_array_equal(mpc.tuning(soft_penalties={"x": np.array([5.0, 1.0])}),
                                mpc.tuning(soft_penalties={"x": (5.0, 1.0)}))  # fmt: skip
  with pytest.raises(ValueError, match="fixed at build time"):
    mpc(X0, soft_penalties={"x": Soft(indices=(1,), l1=5.0)})
  plain = cm.stabilizing("tune_plain")  # its costs are plain NumericalFunctions: no weight to change
  with pytest.raises(ValueError, match="not a LeastSquares"):
    plain(cm.X0_STABILIZE, weights={"stage_cost": W_BUILD})


def test_run_time_weights_keep_the_hessians_sparsity() -> None:
  """The costs read their run-time weights on the weights' patterns (diagonal here): the Lagrangian Hessian derived
  from the NLP has fewer entries than with full patterns (which let a call couple the residuals' components: x_N's
  block, which no dynamics fill, turns dense), the same solution with the same weights; a weight outside the pattern
  is refused by name; a full pattern takes a coupled weight as a controller built with it does."""
  F = cm.dynamics("tune_pattern_F")

  def make(name: str, weight: np.ndarray, full: bool = False) -> MPCFunction:
    r = NumericalFunction(f"{name}_r", lambda x, u: x.cat(u), (Arg(4), Arg(1)))
    rN = NumericalFunction(f"{name}_rN", lambda x: x * 1.0, (Arg(4),))
    pattern, pattern_N = (np.ones((5, 5), dtype=bool), np.ones((4, 4), dtype=bool)) if full else (None, None)
    return MPCFunction(name, F, LeastSquares(r, weight, pattern), LeastSquares(rN, 10 * Q, pattern_N), horizon=20,
                       u_bounds=(np.array([-20.0]), np.array([20.0])),
                       options=MPCOptions(integrator_derivatives=False))  # fmt: skip

  sparse, dense = make("tune_pattern_diag", W_BUILD), make("tune_pattern_full", W_BUILD, full=True)
  # the pattern is part of the controller's cache key (else the second would load the first's library)
  assert make("tune_pattern_key", W_BUILD).problem_key != make("tune_pattern_key", W_BUILD, full=True).problem_key
  assert sparse.sqp.hessian.nnz < dense.sqp.hessian.nnz
  np.testing.assert_allclose(sparse(X0).u, dense(X0).u, rtol=1e-10, atol=1e-12)
  coupled = np.diag(W_BUILD)
  coupled[0, 4] = coupled[4, 0] = 0.05
  with pytest.raises(ValueError, match=r"nonzeros outside the pattern .* \(0, 4\)"):
    sparse(X0, weights={"stage_cost": coupled})
  dense.reset()
  np.testing.assert_allclose(dense(X0, weights={"stage_cost": coupled}).u, make("tune_pattern_coupled", coupled)(X0).u,
                             rtol=1e-10, atol=1e-12)  # fmt: skip
  with pytest.raises(ValueError, match="pattern must hold the weight's nonzeros"):
    LeastSquares(NumericalFunction("tune_pattern_bad", lambda x: x * 1.0, (Arg(5),)), coupled, np.eye(5, dtype=bool))


def test_the_cpp_call_takes_the_tuning(tmp_path: Path) -> None:
  """The generated call() with a tuning vector equals the Python call with the same weights (and nullptr: defaults);
  the exported header's `defaults` hold the constructor's bounds and tuning, and call() takes named options."""
  mpc = controller("tune_cpp", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), MPCOptions())
  weights = {"stage_cost": W_CALL}
  tuning = mpc.tuning(weights)
  np.testing.assert_array_equal(mpc.tuning(), mpc.ocp.default_tuning)
  x0 = np.array([0.2, 0.05, 0.0, 0.0])  # NOTE: the input unsaturated, so it tells the weights apart
  mpc.reset()
  expected = mpc(x0, weights=weights).u0
  mpc.reset()
  default = mpc(x0).u0
  av.generate_module("tune_module", [mpc], out_dir=tmp_path)
  bounds = {k: ", ".join("-HUGE_VAL" if v == -np.inf else "HUGE_VAL" if v == np.inf else repr(float(v))
                         for v in np.ravel(b)) or "0" for k, b in mpc.defaults.items()}  # fmt: skip
  main = tmp_path / "main.cpp"
  main.write_text(
    '#include <cmath>\n#include <cstdio>\n#include "tune_module.hpp"\nnamespace c = tune_cpp;\n'
    + "".join(f"static double {k}[] = {{{v}}};\n" for k, v in bounds.items())
    + f"static double tuning[] = {{{', '.join(repr(float(v)) for v in tuning)}}};\n"
    + "static c::WS_t ws;\nint main() {\n  c::init(ws);\n  static c::Stats stats;\n"
    + f"  double x0[] = {{{', '.join(map(repr, x0.tolist()))}}}, x[(c::N + 1) * c::nx], u[c::N * c::nu];\n"
    + "  static_assert(c::n_tuning == sizeof(tuning) / sizeof(tuning[0]));\n"
    + "  const double* b[] = {lbx, ubx, lbu, ubu, lbh, ubh, lbhN, ubhN};\n"
    + "  for (const double* t : {static_cast<const double*>(tuning), static_cast<const double*>(nullptr)}) {\n"
    + "    c::reset(ws);\n"
    + "    c::call(x0, nullptr, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], x, u, stats, ws, c::N > 0 ? 50 : 0,"
    + " 1e-8, HUGE_VAL, t);\n"
    + '    std::printf("%.17g\\n", u[0]);\n  }\n'
    # the exported defaults: the bounds and tuning the controller was built with, and call() by named options
    + "  c::reset(ws);\n  c::call(x0, nullptr, x, u, stats, ws);\n"
    + '  std::printf("%.17g\\n", u[0]);\n'
    + "  c::Options options;\n  options.tuning = tuning;\n  options.max_iter = 50;\n  c::reset(ws);\n"
    + "  const c::Defaults& d = c::defaults;\n"
    + "  c::call(x0, nullptr, d.lbx, d.ubx, d.lbu, d.ubu, d.lbh, d.ubh, d.lbhN, d.ubhN, x, u, stats, ws, options);\n"
    + '  std::printf("%.17g\\n", u[0]);\n'
    + "  int same = 1;\n"
    + "  for (int i = 0; i < (c::N + 1) * c::nx; ++i) same &= d.lbx[i] == lbx[i] && d.ubx[i] == ubx[i];\n"
    + "  for (int i = 0; i < c::N * c::nu; ++i) same &= d.lbu[i] == lbu[i] && d.ubu[i] == ubu[i];\n"
    + "  for (int i = 0; i < c::n_tuning; ++i) same &= c::tuning_default[i] == c::defaults.options.tuning[i];\n"
    + '  std::printf("%d\\n", same);\n}\n'
  )
  exe = tmp_path / "tune"
  subprocess.run([find_compiler(), "-O1", "-std=c++17", "-Wall", "-Wextra", *STRICT, "-Werror", f"-I{tmp_path}",
                  str(main), str(tmp_path / "tune_module.cpp"), "-o", str(exe)],
                 check=True, capture_output=True)  # fmt: skip
  out = subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()
  tuned, untuned, by_defaults, by_options = (float(v) for v in out[:4])
  assert tuned == pytest.approx(float(expected[0]), rel=1e-9, abs=1e-12)
  assert untuned == pytest.approx(float(default[0]), rel=1e-9, abs=1e-12)
  assert abs(tuned - untuned) > 1e-6
  assert by_defaults == untuned and by_options == tuned
  assert out[4] == "1", "the exported defaults are the constructor's bounds and tuning"
  np.testing.assert_array_equal(mpc.ocp.default_tuning, mpc.tuning())


def test_constructor_weights_and_penalties_rebuild_nothing() -> None:
  """Controllers that differ only in their weights and penalties share one library (Python passes them on every
  call), and each solves with its own: as the first one called with the second's weights."""
  first = controller("tune_defaults", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), MPCOptions())
  second = controller("tune_defaults", W_CALL, 20 * Q, Soft(l1=300.0, l2=1.0), MPCOptions())
  # NOTE: the same JIT code, under the same quick key of the problem: the second finds the first's library
  assert (first.header_code, first.source_code) == (second.header_code, second.source_code)
  assert first.problem_key == second.problem_key
  x0 = np.array([0.2, 0.05, 0.0, 0.0])
  first.reset()
  retuned = first(x0, weights={"stage_cost": W_CALL, "terminal_cost": 20 * Q}, soft_penalties={"x": (300.0, 1.0)})
  np.testing.assert_allclose(second(x0).u, retuned.u, rtol=1e-12, atol=1e-12)
  assert first.exported_header_code != second.exported_header_code, "the exported module keeps each one's defaults"


def test_a_controller_found_in_the_cache_builds_no_derivatives() -> None:
  """A controller whose library another built (as a new process finds it in the cache) solves, checks its call's
  limits and words its messages without building its SQP solver (the NLP's derivatives: most of a warm build's
  time)."""
  first = controller("tune_warm", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), MPCOptions())
  reference = first(X0)
  second = controller("tune_warm", W_BUILD, 10 * Q, Soft(l1=100.0, l2=10.0), MPCOptions())
  sol = second(X0)
  np.testing.assert_allclose(sol.u, reference.u, rtol=1e-12, atol=1e-12)
  assert sol.stats["qp_solver"] == reference.stats["qp_solver"] == first.sqp.qp.options.solver
  short = second(X0 + 0.3, max_iter=1)
  assert short.status == "max_iterations" and short.stats["message"].startswith("max_iterations: ")
  with pytest.raises(ValueError, match="max_iter must be an int"):
    second(X0, max_iter=-1)
  assert "sqp" not in vars(second), "the warm controller built its SQP solver"
