"""Per-stage evaluation of the exact derivatives of the chain model's discrete step (P4, anvil.problems.chain): anvil's
stage-wise derivatives against CasADi's generated C for the same derivatives of one stage, with build times.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_stage_derivatives                     # n_mass 3 5 8 (nx 9, 21, 39)
  .venv/bin/python -m benchmarks.bench_stage_derivatives --sizes 5 --reps 200

anvil: the chain MPC's constraint Jacobian and Lagrangian Hessian (`MPCFunction.sqp.jacobian` / `.hessian`,
StageDerivatives: the dynamics' blocks of all N = 40 stages from the run-time integrator derivatives of
anvil/explicit_rk.hpp, plus the rest of the NLP's derivative, which this time includes), called through the JIT
library; per stage = per call / N. Build: both derivatives (and the ODE functions and rests they call) on an empty
cache, trace to loaded library. CasADi: the step F(x, u) (4 RK4 steps, the same model code) as SX, its Jacobian in
[x; u] and the upper triangle of the Hessian of lam'F in [x; u] (`ca.jacobian`, `ca.hessian`), generated as C and
compiled with gcc at --opt (default -O3; the CasADi codegen's usual), timed in C (one stage per call). Times are the
best of 5 medians of `--reps` calls; derive = CasADi's symbolic derivatives and code generation.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from anvil.codegen import find_c_compiler
from anvil.mpc import MPCOptions
from anvil.problems import chain
from anvil.problems.backend import casadi_backend
from benchmarks.common import anvil_cache, load_casadi, sh

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "stage.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double best(int which, int reps) {
  casadi_int sz_arg, sz_res, sz_iw, sz_w;
  if (which)
    stage_hessian_work(&sz_arg, &sz_res, &sz_iw, &sz_w);
  else
    stage_jacobian_work(&sz_arg, &sz_res, &sz_iw, &sz_w);
  static double x[64], u[3], lam[64], out[64 * 64], w[1 << 20];
  static casadi_int iw[1 << 12];
  if (sz_w > (1 << 20) || sz_iw > (1 << 12)) return -1.0;
  for (int i = 0; i < 64; ++i) { x[i] = 0.01 * i; lam[i] = 1.0 - 0.02 * i; }
  u[0] = 0.1; u[1] = -0.2; u[2] = 0.3;
  const double* arg[3] = {x, u, lam};
  double* res[1] = {out};
  double result = 1e9;
  for (int r = 0; r < 5; ++r) {
    double t = now();
    for (int k = 0; k < reps; ++k) {
      if (which) stage_hessian(arg, res, iw, w, 0); else stage_jacobian(arg, res, iw, w, 0);
      x[k % 8] += 1e-300 * out[0];
    }
    double per = (now() - t) / reps;
    if (per < result) result = per;
  }
  return result;
}
int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 1000;
  printf("%.9g %.9g\n", best(0, reps), best(1, reps));
  return 0;
}
"""


def anvil_stage(n_mass: int, reps: int) -> dict[str, float]:
  """Build seconds and per-stage microseconds of the chain MPC's stage-wise Jacobian and Hessian."""
  nx = chain.state_size(n_mass)
  with tempfile.TemporaryDirectory(prefix="bench_stage_") as cache, anvil_cache(Path(cache)):
    start = time.perf_counter()
    mpc = chain.chain_mpc(f"bench_stage{n_mass}", n_mass, MPCOptions())
    jac, hess = mpc.sqp.jacobian, mpc.sqp.hessian
    ocp = mpc.ocp
    rng = np.random.default_rng(0)
    w = rng.normal(size=ocp.nw) * 0.05
    for k in range(ocp.N + 1):
      w[k * ocp.nz : k * ocp.nz + nx] += chain.rest_state(n_mass)
    params = ocp.parameter(chain.initial_state(n_mass))  # x_0 and the default weights
    inputs = {"jacobian": (w, params), "hessian": (w, params, np.ones(1), rng.normal(size=ocp.ng))}
    for fn, args in ((jac, inputs["jacobian"]), (hess, inputs["hessian"])):
      fn(*args)
    out = {"build": time.perf_counter() - start}
    for what, fn in (("jacobian", jac), ("hessian", hess)):
      out[what] = _native_best(fn, inputs[what], reps) / ocp.N * 1e6
  return out


def _native_best(fn: Any, args: tuple[np.ndarray, ...], reps: int) -> float:
  """Best of 5 medians of the native call's seconds (no Python conversion in the loop)."""
  arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in args]
  out = np.zeros(fn.nnz)
  pointers = (ctypes.c_void_p * (len(arrays) + 1))(*(a.ctypes.data for a in (*arrays, out)))
  call = fn.handle.entry("call", None, ctypes.c_void_p, ctypes.c_void_p)
  rounds = []
  for _ in range(5):
    times = []
    for _ in range(reps):
      start = time.perf_counter()
      call(pointers, fn.handle.pointer)
      times.append(time.perf_counter() - start)
    rounds.append(statistics.median(times))
  return min(rounds)


def casadi_stage(ca: Any, n_mass: int, reps: int, opt: str, folder: Path) -> dict[str, float]:
  """Derive, generate, compile and time CasADi's stage Jacobian and Hessian."""
  nx = chain.state_size(n_mass)
  start = time.perf_counter()
  x, u, lam = ca.SX.sym("x", nx), ca.SX.sym("u", chain.NU), ca.SX.sym("lam", nx)
  F = chain.step(x, u, n_mass, casadi_backend(ca))
  z = ca.vertcat(x, u)
  jac = ca.Function("stage_jacobian", [x, u], [ca.jacobian(F, z)])
  hess = ca.Function("stage_hessian", [x, u, lam], [ca.triu(ca.hessian(ca.dot(lam, F), z)[0])])
  gen = ca.CodeGenerator("stage.c", {"with_header": True})
  gen.add(jac)
  gen.add(hess)
  gen.generate(f"{folder}/")
  derive = time.perf_counter() - start
  (folder / "main.c").write_text(HARNESS)
  start = time.perf_counter()
  cc = find_c_compiler()
  sh([cc, opt, "-fno-math-errno", "-o", folder / "stage", folder / "main.c", folder / "stage.c", "-lm"])
  compile_s = time.perf_counter() - start
  jac_s, hess_s = (float(v) for v in sh([folder / "stage", str(reps)]).stdout.split())
  return {"derive": derive, "compile": compile_s, "jacobian": jac_s * 1e6, "hessian": hess_s * 1e6}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", type=int, nargs="+", default=[3, 5, 8], help="n_mass values (nx = 3 (2 n_mass - 3))")
  parser.add_argument("--reps", type=int, default=100, help="calls per timing round")
  parser.add_argument("--opt", default="-O3", help="gcc optimization level for CasADi's C")
  args = parser.parse_args()
  ca = load_casadi()
  head = (f"{'nx':>4} {'anvil jac us':>12} {'anvil hess us':>13} {'anvil build s':>13}   {'CasADi jac us':>13} "
          f"{'CasADi hess us':>14} {'derive s':>8} {'gcc s':>7}   {'jac ratio':>9} {'hess ratio':>10}")  # fmt: skip
  print(f"per stage of the chain's discrete step (4 RK4 steps), N = {chain.HORIZON}; CasADi's C at {args.opt}")
  print(head + "\n" + "-" * len(head))
  for n_mass in args.sizes:
    a = anvil_stage(n_mass, args.reps)
    line = f"{chain.state_size(n_mass):>4} {a['jacobian']:12.2f} {a['hessian']:13.2f} {a['build']:13.1f}"
    if ca is not None:
      with tempfile.TemporaryDirectory(prefix="bench_stage_casadi_") as folder:
        c = casadi_stage(ca, n_mass, args.reps * 10, args.opt, Path(folder))
      line += (f"   {c['jacobian']:13.2f} {c['hessian']:14.2f} {c['derive']:8.1f} {c['compile']:7.1f}   "
               f"{a['jacobian'] / c['jacobian']:9.2f} {a['hessian'] / c['hessian']:10.2f}")  # fmt: skip
    print(line, flush=True)
  if ca is None:
    print("casadi is not installed: no CasADi columns")


if __name__ == "__main__":
  main()
