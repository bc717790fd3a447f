"""anvil showcase: the P1 quadrotor RK4 step as plain Python math -> standalone C++ -> called from Python and C++,
then its derivatives: a dense Jacobian and the sparse Jacobian/Hessian of the P2 multiple-shooting problem.

Run with `make demo`. It traces the step, checks it against numpy, writes the generated module to build/, compiles a
small C++ program against it with the system compiler, and prints build and call timings.
"""

from __future__ import annotations

import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anvil as av  # noqa: E402
from anvil.ad import jacobian, sphessian, spjacobian  # noqa: E402
from anvil.codegen.jit import find_compiler  # noqa: E402
from examples.models import quadrotor, shooting  # noqa: E402

BUILD = ROOT / "build" / "demo"
MAIN_CPP = """#include <chrono>
#include <cstdio>
#include "quadrotor.hpp"

int main() {
  const double x[12] = {@X@};
  const double u[4] = {@U@};
  quad_step::IN0_t in0; quad_step::IN1_t in1; quad_step::OUT0_t out0;
  for (int i = 0; i < 12; ++i) in0[i] = x[i];
  for (int i = 0; i < 4; ++i) in1[i] = u[i];
  quad_step::WS_t ws = quad_step::init_ws();
  const int n = 1000000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    quad_step::call(in0, in1, out0, ws);
    in0[0] = x[0] + 1e-12 * out0[0];  // keep the loop honest
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
  in0[0] = x[0];
  quad_step::call(in0, in1, out0, ws);
  for (int i = 0; i < 12; ++i) std::printf("%.17g\\n", out0[i]);
  std::fprintf(stderr, "%.1f\\n", ns);
}
"""


def main() -> None:
  t0 = time.perf_counter()
  step = av.NumericalFunction("quad_step", quadrotor.step, (av.Arg(12), av.Arg(4)))
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  y = step(x, u)
  build_s = time.perf_counter() - t0
  ref = quadrotor.step_numpy(x, u)
  print("P1 quadrotor RK4 step, F(x, u) at the check point of problems.md")
  print(f"  anvil : {np.array2string(y, precision=6, max_line_width=120)}")
  print(f"  numpy : {np.array2string(ref, precision=6, max_line_width=120)}")
  print(f"  max |anvil - numpy| = {np.abs(y - ref).max():.2e}")

  header, source = av.generate_module("quadrotor", [step], out_dir=BUILD)
  print(f"\nwrote {header.relative_to(ROOT)} and {source.relative_to(ROOT)}")
  main_cpp = BUILD / "main.cpp"
  main_cpp.write_text(
    MAIN_CPP.replace("@X@", ", ".join(f"{v!r}" for v in x.tolist())).replace(
      "@U@", ", ".join(f"{v!r}" for v in u.tolist())
    )
  )
  cxx = find_compiler()
  t1 = time.perf_counter()
  exe = BUILD / "quadrotor_demo"
  cmd = [cxx, "-O3", "-std=c++17", "-Wall", "-Wextra", str(main_cpp), str(source), "-I", str(BUILD), "-o", str(exe)]
  subprocess.run(cmd, check=True)
  compile_s = time.perf_counter() - t1
  run = subprocess.run([str(exe)], check=True, capture_output=True, text=True)
  cpp_y = np.array([float(v) for v in run.stdout.split()])
  print(
    f"compiled it with {Path(cxx).name} in {compile_s:.2f} s; standalone C++ result max |C++ - numpy| = "
    f"{np.abs(cpp_y - ref).max():.2e}"
  )

  n = 20000
  py_us = min(timeit.repeat(lambda: step(x, u), number=n, repeat=5)) / n * 1e6
  np_us = min(timeit.repeat(lambda: quadrotor.step_numpy(x, u), number=200, repeat=3)) / 200 * 1e6
  print("\ntimings")
  print(f"  first build in this process (trace + schedule + render + compile, or cache) : {build_s:8.3f} s")
  print(f"  generated C++, tight C++ loop                                              : {float(run.stderr):8.1f} ns")
  print(f"  call from Python                                                           : {py_us:8.2f} us")
  print(f"  numpy, same math                                                           : {np_us:8.2f} us")


def _timed(fn: Callable[[], object]) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def derivatives() -> None:
  """Dense Jacobian of the P1 step; sparse Jacobian and Hessian of P2 multiple shooting (problems.md)."""
  print("\nderivatives (anvil.ad)")
  step = av.NumericalFunction("quad_step", quadrotor.step, (av.Arg(12), av.Arg(4)))
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  jac = jacobian(step, wrt=0)
  build = _timed(lambda: jac(x, u))
  h = 1e-6
  fd = np.stack(
    [(quadrotor.step_numpy(x + h * e, u) - quadrotor.step_numpy(x - h * e, u)) / (2 * h) for e in np.eye(12)], 1
  )
  print(
    f"  P1 dF/dx (12x12): built in {build:.2f} s, max |anvil - finite differences| = {np.abs(jac(x, u) - fd).max():.1e}"
  )
  n = 30
  g = av.NumericalFunction(
    "shooting_g", lambda w, x0: shooting.defects(w, x0, n), (av.Arg(shooting.size(n)), av.Arg(4))
  )
  lag = av.NumericalFunction("shooting_L", lambda w, x0, lam: shooting.lagrangian(w, x0, lam, n),
                             (av.Arg(shooting.size(n)), av.Arg(4), av.Arg(4 * n + 4)))  # fmt: skip
  rng = np.random.default_rng(0)
  w, x0, lam = rng.uniform(-1, 1, shooting.size(n)), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4 * n + 4)
  for what, fn, args, expected in (("dg/dw", spjacobian(g), (w, x0), 19 * n + 4),
                                   ("upper d2L/dw2", sphessian(lag), (w, x0, lam), 8 * n)):  # fmt: skip
    build = _timed(lambda fn=fn, args=args: fn(*args))
    call_us = min(timeit.repeat(lambda fn=fn, args=args: fn(*args), number=200, repeat=3)) / 200 * 1e6
    print(
      f"  P2 N={n} {what}: {fn.shape[0]}x{fn.shape[1]}, nnz {fn.nnz} (CasADi: {expected}), "
      f"built in {build:.2f} s, {call_us:.1f} us per call from Python"
    )


if __name__ == "__main__":
  main()
  derivatives()
