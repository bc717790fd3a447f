"""Evaluation and build-time benchmark of the P1 quadrotor RK4 step: anvil vs CasADi vs numpy, in one run.

Run from the repository root (takes well under two minutes):

  .venv/bin/python -m benchmarks.bench_eval              # the table
  .venv/bin/python -m benchmarks.bench_eval --callgrind  # plus deterministic instructions/eval (needs valgrind)
  make bench

What it measures (P1 of anvil.problems; method: variants round robin in one run, medians, as benchmarks/common.py):
1. anvil's generated C++ (`generate_module`) called in a tight C++ loop, ns/call.
2. The same function called from Python (`NumericalFunction.__call__`), us/call.
3. numpy on the same math (`quadrotor.step_numpy`), us/call.
4. If casadi is importable: CasADi's generated C for the same math (SX, `CodeGenerator`), in the same tight-loop
   harness, and CasADi's Python call `F(x, u)` on numpy inputs (DM conversion included).
5. Ratios anvil / CasADi for the C++ loop and the Python call.
6. Cold build (fresh empty cache, fresh subprocess: NumericalFunction + first call) and warm build (another fresh
   subprocess on the same cache; its STAGE_COUNTS show that schedule, render and compile were skipped).

Both generated sources are compiled on their own as a separate translation unit with the same optimization flags
(`-O3 -fno-math-errno`; `-std=c++17` for anvil's C++, `-std=c11` for CasADi's C), and linked with the same C++ harness
(`-O3 -std=c++17 -fno-math-errno`, no LTO), so neither call is inlined into the loop. The loop feeds 1e-12 * out[0]
back into x[0], so consecutive calls are dependent, as in a simulation. The box is noisy: the two executables run
round robin (`--rounds` rounds, each `--reps` repetitions of `--calls` calls after a warm-up), and the C++ ratio is
the median of the per-round ratios. `--callgrind` adds instructions per evaluation, libm included (difference of two
run lengths), which is deterministic and the tie-breaker when wall times are close.

Targets are printed beside the measured values with PASS/MISS; they are informational and the script exits 0.
Temporary files go to build/bench/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import anvil as av
from anvil.codegen import find_c_compiler, find_compiler
from anvil.problems import quadrotor
from anvil.problems.backend import casadi_backend
from benchmarks.common import (
  C_FLAGS,
  CXX_FLAGS,
  Exe,
  Row,
  callgrind_costs,
  flat,
  fmt_array,
  link_harness,
  load_casadi,
  math_call_sites,
  med,
  print_table,
  sh,
  tight_loops,
  time_python,
  verdict,
)

ROOT = Path(__file__).resolve().parent.parent

BUILD = ROOT / "build" / "bench"
NX, NU = quadrotor.NX, quadrotor.NU
X, U = quadrotor.TEST_X, quadrotor.TEST_U

TARGET_CPP_RATIO = 0.9
TARGET_WARM_S = 0.3
TARGET_COLD_S = 3.0

# One harness for both: @INCLUDE@ pulls in the generated API, @SETUP@ allocates inputs/outputs/work arrays and defines
# `xin`, `uin` (double*), `yout` (const double*) and `eval()`. Arguments: calls per repetition, repetitions, warm-up.
HARNESS = r"""// Tight-loop timing harness written by benchmarks/bench_eval.py.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
@INCLUDE@

static const double X0[@NX@] = {@X@};
static const double U0[@NU@] = {@U@};

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 100000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const long warmup = argc > 3 ? std::atol(argv[3]) : 10000;
@SETUP@
  for (int i = 0; i < @NX@; ++i) xin[i] = X0[i];
  for (int i = 0; i < @NU@; ++i) uin[i] = U0[i];
  eval();
  std::printf("y");
  for (int i = 0; i < @NX@; ++i) std::printf(" %.17g", yout[i]);
  std::printf("\n");
  for (long i = 0; i < warmup; ++i) {
    eval();
    xin[0] = X0[0] + 1e-12 * yout[0];
  }
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) {
      eval();
      xin[0] = X0[0] + 1e-12 * yout[0];  // dependent calls; keeps the loop honest
    }
    const auto t1 = std::chrono::steady_clock::now();
    std::printf("ns %.3f\n", std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
  return 0;
}
"""

ANVIL_SETUP = """  quad_step::IN0_t in0;
  quad_step::IN1_t in1;
  quad_step::OUT0_t out0;
  quad_step::WS_t ws = quad_step::init_ws();
  double* xin = in0.data();
  double* uin = in1.data();
  const double* yout = out0.data();
  auto eval = [&]() { quad_step::call(in0, in1, out0, ws); };"""

CASADI_SETUP = """  casadi_int sz_arg = 0, sz_res = 0, sz_iw = 0, sz_w = 0;
  quad_step_cas_work(&sz_arg, &sz_res, &sz_iw, &sz_w);
  std::vector<const double*> arg(sz_arg + 1);
  std::vector<double*> res(sz_res + 1);
  std::vector<casadi_int> iw(sz_iw + 1);
  std::vector<double> w(sz_w + 1);
  std::vector<double> xbuf(@NX@), ubuf(@NU@), ybuf(@NX@);
  double* xin = xbuf.data();
  double* uin = ubuf.data();
  const double* yout = ybuf.data();
  arg[0] = xin;
  arg[1] = uin;
  res[0] = ybuf.data();
  auto eval = [&]() { quad_step_cas(arg.data(), res.data(), iw.data(), w.data(), 0); };"""

# Measured in a fresh interpreter; prints one JSON line.
CHILD = """import time
t0 = time.perf_counter()
import json, sys
import anvil as av
from anvil.codegen import STAGE_COUNTS
from anvil.problems import quadrotor
t1 = time.perf_counter()
f = av.NumericalFunction("quad_step", quadrotor.step, (av.Arg(12), av.Arg(4)))
y = f(quadrotor.TEST_X, quadrotor.TEST_U)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "stages": dict(STAGE_COUNTS), "y": y.tolist()}))
"""


def harness_source(include: str, setup: str) -> str:
  """The timing harness with the generated API's include and setup spliced in."""
  text = HARNESS.replace("@INCLUDE@", include).replace("@SETUP@", setup)
  for key, val in {"@NX@": str(NX), "@NU@": str(NU), "@X@": fmt_array(X), "@U@": fmt_array(U)}.items():
    text = text.replace(key, val)
  return text


# *** anvil ***


def build_anvil() -> tuple[av.NumericalFunction[..., Any], Exe, float]:
  """The NumericalFunction (built in this process, default cache) and the C++ harness linked with its module."""
  t0 = time.perf_counter()
  f = av.NumericalFunction("quad_step", quadrotor.step, (av.Arg(NX), av.Arg(NU)))
  f(X, U)
  build_s = time.perf_counter() - t0
  out = BUILD / "anvil"
  _, source = av.generate_module("quad_bench", [f], out_dir=out)
  harness = out / "harness.cpp"
  harness.write_text(harness_source('#include "quad_bench.hpp"', ANVIL_SETUP))
  exe = link_harness("anvil", [find_compiler(), *CXX_FLAGS, "-I", str(out), str(source)], harness, out)
  return f, exe, build_s


# *** CasADi ***


def build_casadi(ca: Any) -> tuple[Any, Exe, float]:
  """casadi.Function of the same step (SX) and the C++ harness linked with its generated C."""
  t0 = time.perf_counter()
  xs, us = ca.SX.sym("x", NX), ca.SX.sym("u", NU)
  fun = ca.Function("quad_step_cas", [xs, us], [quadrotor.step(xs, us, casadi_backend(ca))], ["x", "u"], ["x_next"])
  build_s = time.perf_counter() - t0
  out = BUILD / "casadi"
  out.mkdir(parents=True, exist_ok=True)
  gen = ca.CodeGenerator("quad_cas.c", {"with_header": True})
  gen.add(fun)
  gen.generate(f"{out}/")
  harness = out / "harness.cpp"
  harness.write_text(harness_source('#include "quad_cas.h"', CASADI_SETUP.replace("@NX@", str(NX))))
  exe = link_harness("casadi", [find_c_compiler(), *C_FLAGS, str(out / "quad_cas.c")], harness, out)
  return fun, exe, build_s


# *** measurements ***


def callgrind(exe: Exe, short: int = 1000, long: int = 11000) -> tuple[float, float]:
  """Instructions per evaluation (total, libm part), from the difference of two callgrind runs of different lengths."""

  def measure(n: int) -> tuple[int, int]:
    out = BUILD / f"callgrind.{exe.name}.{n}.out"
    sh(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe.path, str(n), "1", "0"])
    costs = callgrind_costs(out)
    return sum(costs.values()), sum(v for k, v in costs.items() if "libm" in Path(k).name)

  (t1, m1), (t2, m2) = measure(short), measure(long)
  return (t2 - t1) / (long - short), (m2 - m1) / (long - short)


def build_time(cache: Path) -> dict[str, Any]:
  """NumericalFunction construction + first call in a fresh interpreter using `cache` (also tinygrad's cache db)."""
  env = {**os.environ, "ANVIL_CACHE_DIR": str(cache), "CACHEDB": str(cache / "tinygrad-cache.db")}
  t0 = time.perf_counter()
  proc = sh([sys.executable, "-c", CHILD], env=env, cwd=ROOT)
  result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
  result["process_s"] = time.perf_counter() - t0
  return result


# *** report ***


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--rounds", type=int, default=7, help="round-robin rounds of the C++ loops and Python calls")
  ap.add_argument("--reps", type=int, default=5, help="repetitions per C++ harness run")
  ap.add_argument("--calls", type=int, default=100000, help="calls per repetition in the C++ loop")
  ap.add_argument("--callgrind", action="store_true", help="also count instructions/eval with valgrind")
  ap.add_argument("--no-build-time", action="store_true", help="skip the cold/warm build subprocesses")
  args = ap.parse_args()

  ca: Any = load_casadi()
  BUILD.mkdir(parents=True, exist_ok=True)
  ref = quadrotor.step_numpy(X, U)
  cxx = find_compiler()
  cxx_version = sh([cxx, "--version"]).stdout.splitlines()[0]
  print("P1 quadrotor RK4 step (12 states, 4 inputs, h = 0.02 s) at quadrotor.TEST_X, TEST_U")
  print(f"  anvil {av.__version__}, casadi {ca.__version__ if ca else 'not installed'}, numpy {np.__version__}")
  print(f"  {Path(cxx).name} ({cxx_version})" + (f"; C for CasADi: {Path(find_c_compiler()).name}" if ca else ""))
  print(
    f"  generated code: {' '.join(CXX_FLAGS)} (anvil) / {' '.join(C_FLAGS)} (CasADi); harness {' '.join(CXX_FLAGS)}"
  )
  print(f"  {platform.machine()}, {os.cpu_count()} cores, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")

  f, anvil_exe, anvil_build_s = build_anvil()
  exes = [anvil_exe]
  fun: Any = None
  casadi_build_s = 0.0
  if ca is not None:
    fun, casadi_exe, casadi_build_s = build_casadi(ca)
    exes.append(casadi_exe)

  # C++ tight loops, round robin
  t0 = time.perf_counter()
  loops = tight_loops(exes, args.rounds, args.calls, args.reps)
  loops_s = time.perf_counter() - t0

  # Python calls, round robin
  x, u = X.copy(), U.copy()
  py_fns: dict[str, Callable[[], object]] = {"anvil": lambda: f(x, u), "numpy": lambda: quadrotor.step_numpy(x, u)}
  if fun is not None:
    py_fns["casadi"] = lambda: fun(x, u)
    py_fns["casadi_full"] = lambda: fun(x, u).full()
  py = time_python(py_fns, args.rounds)

  cg: dict[str, tuple[float, float]] = {}
  if args.callgrind:
    if shutil.which("valgrind"):
      cg = {e.name: callgrind(e) for e in exes}
    else:
      print("  (--callgrind: valgrind not found, skipped)")

  builds: dict[str, list[dict[str, Any]]] = {}
  if not args.no_build_time:
    cache = BUILD / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    builds["cold"] = [build_time(cache)]
    builds["warm"] = [build_time(cache) for _ in range(3)]

  # *** correctness ***
  print("\ncorrectness: max |y - numpy step_numpy|")
  errs = {"anvil Python call": np.abs(f(X, U) - ref).max()}
  errs.update({f"{e.name} C harness": np.abs(e.y - ref).max() for e in exes})
  if fun is not None:
    errs["casadi Python call"] = np.abs(np.asarray(fun(X, U)).ravel() - ref).max()
  for k, bs in builds.items():
    errs[f"{k} build subprocess"] = max(np.abs(np.array(b["y"]) - ref).max() for b in bs)
  print(
    "  " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()) + ("  OK" if max(errs.values()) <= 1e-12 else "  BAD")
  )

  # *** table ***
  rows: list[Row] = []
  a_ns = flat(loops["anvil"])
  rows.append(Row("anvil generated C++, tight C++ loop [ns/call]", f"{med(a_ns):.1f}", f"{min(a_ns):.1f}"))
  if "casadi" in loops:
    c_ns = flat(loops["casadi"])
    rows.append(Row("CasADi generated C, tight C++ loop [ns/call]", f"{med(c_ns):.1f}", f"{min(c_ns):.1f}"))
    per_round = [med(a) / med(c) for a, c in zip(loops["anvil"], loops["casadi"], strict=True)]
    ratio = med(per_round)
    rows.append(
      Row(
        "ratio anvil C++ / CasADi C (median of per-round ratios; best = min/min)",
        f"{ratio:.3f}",
        f"{min(a_ns) / min(c_ns):.3f}",
        f"<= {TARGET_CPP_RATIO}",
        verdict(ratio, TARGET_CPP_RATIO),
      )
    )
  if cg:
    a_i, a_m = cg["anvil"]
    rows.append(Row("anvil instructions/eval (callgrind; libm part)", f"{a_i:.0f}", f"libm {a_m:.0f}"))
    if "casadi" in cg:
      c_i, c_m = cg["casadi"]
      rows.append(Row("CasADi instructions/eval (callgrind; libm part)", f"{c_i:.0f}", f"libm {c_m:.0f}"))
      rows.append(
        Row(
          "ratio anvil / CasADi instructions (total; best col = non-libm part)",
          f"{a_i / c_i:.3f}",
          f"{(a_i - a_m) / (c_i - c_m):.3f}",
          "",
          "info",
        )
      )
  rows.append(Row("anvil call from Python f(x, u) [us/call]", f"{med(py['anvil']):.2f}", f"{min(py['anvil']):.2f}"))
  if "casadi" in py:
    rows.append(
      Row("CasADi call from Python F(x, u) -> DM [us/call]", f"{med(py['casadi']):.2f}", f"{min(py['casadi']):.2f}")
    )
    rows.append(
      Row(
        "CasADi call from Python F(x, u).full() -> ndarray [us/call]",
        f"{med(py['casadi_full']):.2f}",
        f"{min(py['casadi_full']):.2f}",
      )
    )
    rows.append(
      Row(
        "ratio anvil / CasADi Python call (vs F(x, u); best = min/min)",
        f"{med(py['anvil']) / med(py['casadi']):.3f}",
        f"{min(py['anvil']) / min(py['casadi']):.3f}",
        "info",
      )
    )
  rows.append(Row("numpy step_numpy(x, u), same math [us/call]", f"{med(py['numpy']):.2f}", f"{min(py['numpy']):.2f}"))
  rows.append(
    Row(
      "ratio numpy / anvil Python call",
      f"{med(py['numpy']) / med(py['anvil']):.1f}x",
      f"{min(py['numpy']) / min(py['anvil']):.1f}x",
      "info",
    )
  )
  for kind, limit in (("cold", TARGET_COLD_S), ("warm", TARGET_WARM_S)):
    if kind not in builds:
      continue
    bs = builds[kind]
    b = [r["build_s"] for r in bs]
    n = f" (median of {len(bs)})" if len(bs) > 1 else ""
    rows.append(
      Row(
        f"{kind} build: NumericalFunction + first call, fresh process [s]{n}",
        f"{med(b):.3f}",
        f"{min(b):.3f}",
        f"<= {limit}",
        verdict(med(b), limit),
      )
    )
    rows.append(Row(f"  {kind}: import anvil + model in that process [s]", f"{med([r['import_s'] for r in bs]):.3f}"))
    rows.append(Row(f"  {kind}: whole subprocess wall time [s]", f"{med([r['process_s'] for r in bs]):.3f}"))
  rows.append(Row("anvil generated TU compile (c++ -c, best of 3) [s]", f"{anvil_exe.compile_s:.2f}"))
  if len(exes) > 1:
    rows.append(Row("CasADi generated C compile (cc -c, best of 3) [s]", f"{exes[1].compile_s:.2f}"))
  print(f"\nresults ({args.rounds} rounds round robin; C++: {args.reps} reps x {args.calls} calls per round)")
  print_table(rows)

  for kind, bs in builds.items():
    for i, r in enumerate(bs):
      stages = ", ".join(f"{k}={v}" for k, v in sorted(r["stages"].items())) or "none"
      print(f"  {kind} build #{i + 1} STAGE_COUNTS: {stages}")
  for e in exes:
    sites = math_call_sites(e.obj)
    if sites:
      print(f"  {e.name} object: libm call sites " + ", ".join(f"{k} {v}" for k, v in sorted(sites.items())))
  print(f"  anvil build in this benchmark process (default cache): {anvil_build_s:.2f} s", end="")
  print(f"; CasADi SX + Function: {casadi_build_s:.3f} s" if fun is not None else "")
  print(f"  C++ loop phase {loops_s:.1f} s; sources and executables in {BUILD.relative_to(ROOT)}/")


if __name__ == "__main__":
  main()
