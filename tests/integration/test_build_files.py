"""The build files generate_module writes beside a CPU module: the static library built by CMake (CMakeLists.txt and
<module>.cmake) and by a plain Makefile (<module>.mk), OSQP's C sources compiled as C, linked into a program whose
results equal Python's; a folder's own CMakeLists.txt is left alone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import anvil as av
from anvil import Arg, Tensor
from anvil.codegen import find_compiler
from anvil.sqp import SQPFunction

pytestmark = pytest.mark.xdist_group("build_files")
INF = np.inf
MAIN = """#include <cstdio>
#include "hs_module.hpp"
int main() {
  static hs_build::WS_t ws;  // static placement: prepared in place, nothing allocated
  static hs_build::Stats stats;
  hs_build::init(ws);
  const double x0[4] = {1, 5, 5, 1}, lbx[4] = {1, 1, 1, 1}, ubx[4] = {5, 5, 5, 5}, lbg[2] = {25, 40};
  const double ubg[2] = {1e300, 40}, zeros[4] = {0, 0, 0, 0};
  double x[4], f, lam_g[2], lam_x[4];
  const int status = hs_build::call(x0, nullptr, lbx, ubx, lbg, ubg, zeros, zeros, x, &f, lam_g, lam_x, stats, ws);
  std::printf("%d %.17g %.17g %.17g %.17g %.17g\\n", status, f, x[0], x[1], x[2], x[3]);
}
"""


@pytest.fixture(scope="module")
def solver() -> SQPFunction:
  f = av.NumericalFunction("hs_build_f", lambda x, p: x[0] * x[3] * (x[0] + x[1] + x[2]) + x[2], (Arg(4), Arg(0)))
  g = av.NumericalFunction("hs_build_g", lambda x, p: Tensor.stack(x[0] * x[1] * x[2] * x[3], (x * x).sum()),
                           (Arg(4), Arg(0)))  # fmt: skip
  return SQPFunction("hs_build", f, g)


def _check(stdout: str, solver: SQPFunction) -> None:
  status, f, *x = stdout.split()
  res = solver(np.array([1.0, 5.0, 5.0, 1.0]), np.zeros(0), np.ones(4), np.full(4, 5.0), [25.0, 40.0], [INF, 40.0])
  assert int(status) == 0 and res.success
  assert float(f) == pytest.approx(res.f, rel=1e-9)
  np.testing.assert_allclose([float(v) for v in x], res.x, rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
@pytest.mark.parametrize(("native", "fma"), [(False, False), (True, False), (True, True)])
def test_cmake_builds_the_module_library(solver: SQPFunction, tmp_path: Path, native: bool, fma: bool) -> None:
  """Built by CMake into a program; with -DANVIL_NATIVE=ON the module (and only it) gets the JIT's host flags, with
  -DANVIL_FMA=ON fused multiply-adds after them (the host's flags turn them off)."""
  generated = tmp_path / "generated"
  av.generate_module("hs_module", [solver], out_dir=generated)
  assert (generated / "hs_module.cmake").exists() and any(generated.rglob("*.c")), "OSQP's C sources beside it"
  (tmp_path / "main.cpp").write_text(MAIN)
  (tmp_path / "CMakeLists.txt").write_text(
    "cmake_minimum_required(VERSION 3.16)\nproject(robot LANGUAGES C CXX)\nadd_subdirectory(generated)\n"
    "add_executable(robot main.cpp)\ntarget_link_libraries(robot PRIVATE hs_module)\n"
  )
  build = tmp_path / "build"
  configure = ["cmake", "-S", tmp_path, "-B", build, f"-DCMAKE_CXX_COMPILER={find_compiler()}",
               f"-DANVIL_NATIVE={'ON' if native else 'OFF'}", f"-DANVIL_FMA={'ON' if fma else 'OFF'}"]  # fmt: skip
  for cmd in (configure, ["cmake", "--build", build, "-j", "2", "--verbose"]):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
  compiles = [line for line in proc.stdout.splitlines() if " -c " in line and ".cpp" in line]
  module, program = (next(c for c in compiles if name in c) for name in ("hs_module.cpp", "main.cpp"))
  assert ("-march=native" in module) == native and "-march=native" not in program
  assert ("-ffp-contract=fast" in module) == fma and "-ffp-contract=fast" not in program
  if fma:
    assert module.index("-ffp-contract=fast") > module.index("-ffp-contract=off")
  _check(subprocess.run([build / "robot"], capture_output=True, text=True, check=True).stdout, solver)


def test_makefile_fragment_builds_the_module_library(solver: SQPFunction, tmp_path: Path) -> None:
  av.generate_module("hs_module", [solver], out_dir=tmp_path)
  (tmp_path / "main.cpp").write_text(MAIN)
  (tmp_path / "Makefile").write_text(
    "include hs_module.mk\nrobot: main.cpp $(HS_MODULE_LIB)\n"
    "\t$(CXX) -std=c++17 $(HS_MODULE_CPPFLAGS) main.cpp $(HS_MODULE_LIB) -lm -o robot\n"
  )
  proc = subprocess.run(["make", "-j2", "robot", f"CXX={find_compiler()}"], cwd=tmp_path, capture_output=True,
                        text=True)  # fmt: skip
  assert proc.returncode == 0, proc.stdout + proc.stderr
  _check(subprocess.run([tmp_path / "robot"], capture_output=True, text=True, check=True).stdout, solver)


def test_a_users_cmakelists_is_left_alone(solver: SQPFunction, tmp_path: Path) -> None:
  own = "# my project\nproject(mine)\n"
  (tmp_path / "CMakeLists.txt").write_text(own)
  av.generate_module("hs_module", [solver], out_dir=tmp_path)
  assert (tmp_path / "CMakeLists.txt").read_text() == own
  assert (tmp_path / "hs_module.cmake").exists() and (tmp_path / "hs_module.mk").exists()
