"""The standalone C++ closed-loop harness (examples/cpp): the same closed loop as the Python controller, the generated
module warning-free under g++ and clang++, and the harness clean under AddressSanitizer and UBSan."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from anvil.mpc import MPCFunction, simulate
from anvil.mpc.harness import INCLUDES, SOURCE, build_harness, run_harness
from anvil.problems import cartpole_mpc as cm
from tests.conftest import STRICT

STEPS = 20
SANITIZE = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all")


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  return cm.stabilizing("harness_mpc")


@pytest.fixture(scope="module")
def harness(mpc: MPCFunction, tmp_path_factory: pytest.TempPathFactory) -> Path:
  """The harness built with the JIT's flags (the module and OSQP sources sit beside it)."""
  return build_harness(mpc, tmp_path_factory.mktemp("harness"), x0=cm.X0_STABILIZE)


def test_python_and_cpp_closed_loops_agree(mpc: MPCFunction, harness: Path) -> None:
  run = run_harness(harness, cm.X0_STABILIZE, STEPS)
  cl = simulate(mpc, mpc.ocp.dynamics, cm.X0_STABILIZE, STEPS, progress=False)
  assert run.x.shape == (STEPS + 1, mpc.nx) and run.u.shape == (STEPS, mpc.nu)
  np.testing.assert_allclose(run.x, cl.x, rtol=0, atol=1e-9)
  np.testing.assert_allclose(run.u, cl.u, rtol=0, atol=1e-9)
  assert run.statuses == cl.statuses and all(s == "converged" for s in run.statuses)
  np.testing.assert_array_equal(run.iterations, cl.iterations)
  assert run.cost == pytest.approx(cl.cost, rel=1e-12)
  assert np.all(run.solve_times > 0) and "solve time [ms]: median" in run.stdout


@pytest.mark.parametrize("flags", [("-O2",), ("-Os",)])
def test_other_optimization_levels_run_the_same_loop(mpc: MPCFunction, harness: Path, flags: tuple[str, ...],
                                                     tmp_path: Path) -> None:  # fmt: skip
  """The module built as robot code often is (-O2: CMake's RelWithDebInfo; -Os) runs the JIT flags' loop. GCC 12's
  -O2 vectorizer once took the integrator's arrays for aligned where they were not: a segfault (explicit_rk.hpp)."""
  exe = build_harness(mpc, tmp_path, flags=flags, x0=cm.X0_STABILIZE)
  run, reference = run_harness(exe, cm.X0_STABILIZE, STEPS), run_harness(harness, cm.X0_STABILIZE, STEPS)
  np.testing.assert_allclose(run.u, reference.u, rtol=0, atol=1e-8)
  assert run.statuses == reference.statuses


def test_full_closed_loop_cost_matches_casadi_reference(harness: Path) -> None:
  # COST_STABILIZE is the closed-loop cost that CasADi IPOPT and sqpmethod agree on (anvil/problems/cartpole_mpc.py)
  run = run_harness(harness, cm.X0_STABILIZE, cm.STEPS_STABILIZE)
  assert run.cost == pytest.approx(cm.COST_STABILIZE, abs=2e-6)
  assert np.abs(run.x[-1]).max() < 1e-6, "the cart-pole is stabilized at the origin"


@pytest.mark.parametrize("compiler", ["g++", "clang++"])
def test_module_compiles_warning_free(harness: Path, compiler: str) -> None:
  if shutil.which(compiler) is None:
    pytest.skip(f"{compiler} not installed")
  out = harness.parent
  inc = [f"-I{out / i}" for i in INCLUDES]
  flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", *inc, "-c"]
  # NOTE: the generated module is -Wshadow and -Wconversion clean too (the example harness need not be)
  for source, strict in ((out / "harness_mpc_controller.cpp", STRICT), (SOURCE, [])):
    proc = subprocess.run([compiler, *flags, *strict, str(source), "-o", os.devnull], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, f"{compiler} {source.name}:\n{proc.stderr}"


def test_sanitized_short_run(mpc: MPCFunction, tmp_path: Path) -> None:
  exe = build_harness(mpc, tmp_path, flags=SANITIZE, x0=cm.X0_STABILIZE)
  env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
  proc = subprocess.run([str(exe), "4", "--csv", str(tmp_path / "run.csv")], capture_output=True, text=True, env=env)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "runtime error" not in proc.stderr and "Sanitizer" not in proc.stderr, proc.stderr
  assert "status: converged 4" in proc.stdout
