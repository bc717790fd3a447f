"""Derivative benchmark: anvil's dense/sparse Jacobians and sparse Hessians vs CasADi, in one run.

Run from the repository root (about 3-4 minutes with the defaults; most of it compiling CasADi's C at N = 50):

  .venv/bin/python -m benchmarks.bench_ad                 # P1 and P3 for N = 20, 50, 100, 200
  .venv/bin/python -m benchmarks.bench_ad --n 20 50       # P3 for some horizons only
  .venv/bin/python -m benchmarks.bench_ad --skip-p3       # P1 only (--skip-p1: P3 only)

What it measures (the reference problems of anvil.problems; method as in benchmarks/bench_eval.py):
1. P1: the Jacobian of the quadrotor RK4 step w.r.t. z = [x; u] (16), as a function of z alone (anvil
   differentiates w.r.t. one input, so `z[:12]`, `z[12:]` are split inside): anvil `jacobian` (dense 12 x 16) and
   `spjacobian` (CSC values) vs CasADi `densify(jacobian(F(z), z))` and `jacobian(F(z), z)` (SX, generated C).
   Time per call in a tight C++ loop, nnz, ratio anvil / CasADi, call from Python, values checked against CasADi.
2. P3: the P2 multiple-shooting defects g(w, x_init) and Lagrangian L(w, x_init, lam) for each N: anvil
   `spjacobian(g)` and `sphessian(L)` (upper triangle) vs CasADi SX `jacobian(g, w)` and `triu(hessian(L, w))`
   (unrolled over the stages, the same math via a CasADi backend). anvil cold build (fresh subprocess, empty cache)
   per stage from the `anvil` logger lines ("<name>: <stage> <seconds> s"; derive nested in trace counted once),
   warm build (fresh subprocesses on the same cache), kernel count, nnz (expected 19N+4 and 8N), time per call in the
   tight C++ loop and from Python. CasADi's generated C is compiled with gcc -O3 only for N <= --casadi-max-n
   (default 50) and killed after --casadi-compile-limit seconds (default 60) per file: its compile time grows much
   faster than N (tens of seconds to minutes at N = 50 on a 2-core box).

Both generated sources are compiled on their own (`-O3 -fno-math-errno`; `-std=c++17` for anvil's C++, `-std=c11`
for CasADi's C) and linked with the same C++ harness (no LTO), so neither call is inlined into the loop. The loop
feeds 1e-12 * out[0] back into the first input, so consecutive calls are dependent. The box is noisy: all harnesses
of a problem run round robin (`--rounds` rounds of `--reps` repetitions of about `--rep-ms` ms each); ratios are the
median of the per-round ratios. Targets are printed with PASS/MISS; they are informational and the script exits 0.
Temporary files go to build/bench_ad/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import anvil as av
from anvil.ad import jacobian, sphessian, spjacobian
from anvil.codegen import find_c_compiler, find_compiler
from anvil.problems import cartpole, quadrotor, shooting
from anvil.problems.backend import casadi_backend
from benchmarks.common import (
  C_FLAGS,
  CXX_FLAGS,
  STAGES,
  Exe,
  Row,
  StageRecorder,
  anvil_cache,
  flat,
  fmt_array,
  link_harness,
  link_object,
  load_casadi,
  med,
  print_table,
  run_exe,
  sh,
  stage_seconds,
  tight_loops,
  time_python,
  verdict,
)

ROOT = Path(__file__).resolve().parent.parent

BUILD = ROOT / "build" / "bench_ad"
NZ = quadrotor.NX + quadrotor.NU
Z = np.concatenate([quadrotor.TEST_X, quadrotor.TEST_U])
X_INIT = np.array([0.0, np.pi, 0.0, 0.0])

TARGET_P1_RATIO = 1.0
CASADI_P1_ISSUE_US = {"dense": 0.90, "sparse": 0.82}  # CasADi on this box, as quoted in the issue
TARGET_VALUES = 1e-10
TARGET_COLD_S = 10.0
TARGET_WARM_S = 0.5
TARGET_COLD_FLAT = 1.5  # cold build max / min over N
TARGET_EXPONENT = 1.1  # eval time ~ N^p, p from a log-log fit
TARGET_P3_RATIO = 1.0

# Generic tight-loop harness. @INIT@ defines INIT<i>[] (the check point of every input); @SETUP@ defines in<i>
# (double*), `yout` (const double*) and `eval()`. Arguments: calls per repetition, repetitions, warm-up calls.
HARNESS = r"""// Tight-loop timing harness written by benchmarks/bench_ad.py.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
@INCLUDE@

@INIT@

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const long warmup = argc > 3 ? std::atol(argv[3]) : 100;
@SETUP@
@COPY@
  eval();
  std::printf("y");
  for (int i = 0; i < @NY@; ++i) std::printf(" %.17g", yout[i]);
  std::printf("\n");
  for (long i = 0; i < warmup; ++i) {
    eval();
    in0[0] = INIT0[0] + 1e-12 * yout[0];
  }
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) {
      eval();
      in0[0] = INIT0[0] + 1e-12 * yout[0];  // dependent calls; keeps the loop honest
    }
    const auto t1 = std::chrono::steady_clock::now();
    std::printf("ns %.3f\n", std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
  return 0;
}
"""

# One anvil build in a fresh interpreter; prints one JSON line.
CHILD = """import time
t0 = time.perf_counter()
import json, sys
from anvil.codegen import STAGE_COUNTS
from benchmarks.bench_ad import p3_function, p3_point
from benchmarks.common import StageRecorder
recorder = StageRecorder()
t1 = time.perf_counter()
fn = p3_function({kind!r}, {n})
y = fn(*p3_point({kind!r}, {n}))
t2 = time.perf_counter()
kernels = len(fn.program.kernels) if STAGE_COUNTS["schedule"] else None
print(json.dumps({{"import_s": t1 - t0, "build_s": t2 - t1, "stages": dict(STAGE_COUNTS), "records": recorder.records,
                  "kernels": kernels, "nnz": fn.nnz}}))
"""


# *** the functions ***


def quad_z(z: Any) -> Any:
  """P1 step as a function of z = [x; u]."""
  return quadrotor.step(z[: quadrotor.NX], z[quadrotor.NX :])


def p1_functions() -> dict[str, av.NumericalFunction[..., Any]]:
  f = av.NumericalFunction("quad_z", quad_z, (av.Arg(NZ),))
  return {"dense": jacobian(f, 0, name="quad_jac"), "sparse": spjacobian(f, 0, name="quad_spjac")}


def p3_function(kind: str, n: int) -> av.SparseNumericalFunction:
  """anvil's spjacobian of the defects ("jac") or sphessian of the Lagrangian ("hess") for horizon n."""
  nw, ng = shooting.size(n), shooting.NX * (n + 1)
  if kind == "jac":
    g = av.NumericalFunction(f"shoot_g_{n}", lambda w, xi: shooting.defects(w, xi, n), (av.Arg(nw), av.Arg(4)))
    return spjacobian(g, 0, name=f"shoot_jac_{n}")
  lag = av.NumericalFunction(
    f"shoot_l_{n}", lambda w, xi, lam: shooting.lagrangian(w, xi, lam, n), (av.Arg(nw), av.Arg(4), av.Arg(ng))
  )
  return sphessian(lag, 0, name=f"shoot_hess_{n}")


def p3_point(kind: str, n: int) -> tuple[np.ndarray, ...]:
  """The inputs the P3 functions are evaluated and timed at: (w, x_init) or (w, x_init, lam)."""
  rng = np.random.default_rng(1000 + n)
  w = rng.uniform(-1.0, 1.0, shooting.size(n))
  lam = rng.uniform(-1.0, 1.0, shooting.NX * (n + 1))
  return (w, X_INIT) if kind == "jac" else (w, X_INIT, lam)


def expected_nnz(kind: str, n: int) -> int:
  return 19 * n + 4 if kind == "jac" else 8 * n


def casadi_p1(ca: Any) -> dict[str, Any]:
  z = ca.SX.sym("z", NZ)
  jac = ca.jacobian(quadrotor.step(z[: quadrotor.NX], z[quadrotor.NX :], casadi_backend(ca)), z)
  return {
    "dense": ca.Function("cas_quad_jac", [z], [ca.densify(jac)]),
    "sparse": ca.Function("cas_quad_spjac", [z], [jac]),
  }


def casadi_p3(ca: Any, kind: str, n: int) -> Any:
  """CasADi SX: jacobian(g, w) or triu(hessian(L, w)), unrolled over the stages (same math as shooting.py)."""
  b, st, nx = casadi_backend(ca), shooting.STAGE, shooting.NX
  w, xi = ca.SX.sym("w", shooting.size(n)), ca.SX.sym("xi", nx)
  lam = ca.SX.sym("lam", nx * (n + 1))
  xs = [w[st * k : st * k + nx] for k in range(n + 1)]
  us = [w[st * k + nx : st * (k + 1)] for k in range(n)]
  g = ca.vertcat(xs[0] - xi, *[xs[k + 1] - cartpole.step(xs[k], us[k], b) for k in range(n)])
  if kind == "jac":
    return ca.Function(f"cas_jac_{n}", [w, xi], [ca.jacobian(g, w)])
  cost = sum(ca.dot(xs[k] * xs[k], ca.DM(shooting.Q_DIAG)) + cartpole.R * us[k][0] * us[k][0] for k in range(n))
  hess, _ = ca.hessian(cost + ca.dot(g, lam), w)
  return ca.Function(f"cas_hess_{n}", [w, xi, lam], [ca.triu(hess)])


def casadi_csc(fun: Any, args: Sequence[np.ndarray]) -> sp.csc_array:
  """A CasADi Function's (sparse) output as a scipy CSC array."""
  out = fun(*args)
  s = out.sparsity()
  return sp.csc_array((np.array(out.nonzeros()), np.array(s.row()), np.array(s.colind())), shape=out.shape)


# *** build-stage log ***


def child_build(kind: str, n: int, cache: Path) -> dict[str, Any]:
  """Build + first call of a P3 function in a fresh interpreter using `cache` (also tinygrad's cache db)."""
  env = {**os.environ, "ANVIL_CACHE_DIR": str(cache), "CACHEDB": str(cache / "tinygrad-cache.db")}
  t0 = time.perf_counter()
  proc = sh([sys.executable, "-c", CHILD.format(kind=kind, n=n)], env=env, cwd=ROOT)
  result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
  result["process_s"] = time.perf_counter() - t0
  result["per_stage"] = stage_seconds(result["records"])
  return result


# *** harnesses ***


def harness_source(include: str, setup: str, inputs: Sequence[np.ndarray], ny: int, template: str = HARNESS) -> str:
  init = "\n".join(f"static const double INIT{i}[{a.size}] = {{{fmt_array(a)}}};" for i, a in enumerate(inputs))
  copy = "\n".join(f"  std::memcpy(in{i}, INIT{i}, sizeof INIT{i});" for i in range(len(inputs)))
  text = template.replace("@INCLUDE@", include).replace("@INIT@", init).replace("@SETUP@", setup)
  return text.replace("@COPY@", copy).replace("@NY@", str(ny))


def anvil_harness(
  label: str,
  fn: av.NumericalFunction[..., Any],
  inputs: Sequence[np.ndarray],
  ny: int,
  out: Path,
  compile_runs: int,
  flags: Sequence[str] = CXX_FLAGS,
  template: str = HARNESS,
) -> Exe:
  """generate_module + the harness (`template`) calling `fn` in a loop (the generated code compiled with `flags`)."""
  _, source = av.generate_module(label, [fn], out_dir=out)
  ns, k = fn.name, len(inputs)
  setup = [f"  {ns}::IN{i}_t b{i};\n  double* in{i} = b{i}.data();" for i in range(k)]
  setup.append(f"  {ns}::OUT0_t bout;\n  const double* yout = bout.data();\n  {ns}::WS_t ws = {ns}::init_ws();")
  bufs = ", ".join(f"b{i}" for i in range(k))
  setup.append(f"  auto eval = [&]() {{ {ns}::call({bufs}, bout, ws); }};")
  harness = out / "harness.cpp"
  harness.write_text(harness_source(f'#include "{label}.hpp"', "\n".join(setup), inputs, ny, template))
  cmd = [find_compiler(), *flags, "-I", str(out), str(source)]
  return link_harness(label, cmd, harness, out, compile_runs=compile_runs)


def casadi_setup(fname: str, inputs: Sequence[np.ndarray], ny: int) -> str:
  lines = [
    "  casadi_int sz_arg = 0, sz_res = 0, sz_iw = 0, sz_w = 0;",
    f"  {fname}_work(&sz_arg, &sz_res, &sz_iw, &sz_w);",
    "  std::vector<const double*> arg(sz_arg + 1);",
    "  std::vector<double*> res(sz_res + 1);",
    "  std::vector<casadi_int> iw(sz_iw + 1);",
    "  std::vector<double> w(sz_w + 1);",
  ]
  for i, a in enumerate(inputs):
    lines.append(f"  std::vector<double> b{i}({a.size});\n  double* in{i} = b{i}.data();\n  arg[{i}] = in{i};")
  lines.append(f"  std::vector<double> bout({ny});\n  res[0] = bout.data();\n  const double* yout = bout.data();")
  lines.append(f"  auto eval = [&]() {{ {fname}(arg.data(), res.data(), iw.data(), w.data(), 0); }};")
  return "\n".join(lines)


def casadi_generate(ca: Any, fun: Any, out: Path) -> Path:
  """CasADi's C for `fun` (with header) in `out`; returns the .c path."""
  out.mkdir(parents=True, exist_ok=True)
  gen = ca.CodeGenerator(f"{fun.name()}.c", {"with_header": True})
  gen.add(fun)
  gen.generate(f"{out}/")
  return out / f"{fun.name()}.c"


def compile_limited(cmd: Sequence[str | Path], limit_s: float) -> float | None:
  """Run a compile command; its wall time, or None if it ran past limit_s (its whole process group is killed)."""
  t0 = time.perf_counter()
  proc = subprocess.Popen(
    [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
  )
  try:
    stdout, stderr = proc.communicate(timeout=limit_s)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)  # cc and the cc1 it started
    proc.communicate()
    return None
  if proc.returncode != 0:
    raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{stdout}\n{stderr}")
  return time.perf_counter() - t0


def casadi_harness(
  label: str,
  ca: Any,
  fun: Any,
  inputs: Sequence[np.ndarray],
  out: Path,
  limit_s: float | None,
  template: str = HARNESS,
) -> tuple[Exe | None, float | None]:
  """CasADi's generated C compiled (with a time limit, or best of 3 when limit_s is None) and linked with the harness.

  Returns (None, None) when the compile ran past the limit."""
  source = casadi_generate(ca, fun, out)
  ny = int(fun.sparsity_out(0).nnz())
  harness = out / "harness.cpp"
  setup = casadi_setup(fun.name(), inputs, ny)
  harness.write_text(harness_source(f'#include "{fun.name()}.h"', setup, inputs, ny, template))
  cmd = [find_c_compiler(), *C_FLAGS, str(source)]
  if limit_s is None:
    return link_harness(label, cmd, harness, out), None
  obj = out / f"{label}_gen.o"
  compile_s = compile_limited([*cmd, "-c", "-o", obj], limit_s)
  if compile_s is None:
    return None, None
  return link_object(label, obj, compile_s, harness, out), compile_s


def calibrate(exes: Sequence[Exe], rep_ms: float) -> dict[str, int]:
  """Calls per repetition so that one repetition of each harness takes about rep_ms."""
  calls = {}
  for e in exes:
    _, ns = run_exe(e, 200, 1, 20)
    calls[e.name] = max(50, int(rep_ms * 1e6 / max(ns[0], 1.0)))
  return calls


# *** report helpers ***


def print_grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
  """A table: first column left-aligned, the others right-aligned."""
  w = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

  def line(r: Sequence[str]) -> str:
    return "  " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()

  print(line(header))
  print("  " + "-" * (sum(w) + 2 * (len(w) - 1)))
  for r in rows:
    print(line(r))


def ratio_rounds(a: Sequence[Sequence[float]], c: Sequence[Sequence[float]]) -> float:
  """Median over rounds of median(a) / median(c) within the round."""
  return med([med(x) / med(y) for x, y in zip(a, c, strict=True)])


def loglog_exponent(ns: Sequence[int], ts: Sequence[float]) -> float:
  """p in t ~ N^p (least squares on logs)."""
  if len(ns) < 2:
    return float("nan")
  return float(np.polyfit(np.log(np.asarray(ns, dtype=float)), np.log(np.asarray(ts)), 1)[0])


def maxdiff(a: Any, b: Any) -> float:
  da = a.toarray() if sp.issparse(a) else np.asarray(a)
  db = b.toarray() if sp.issparse(b) else np.asarray(b)
  return float(np.abs(da - db).max())


def same_pattern(a: sp.csc_array, b: sp.csc_array) -> bool:
  a, b = sp.csc_array(a), sp.csc_array(b)
  a.sort_indices()
  b.sort_indices()
  return a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)


# *** P1 ***


def run_p1(ca: Any, args: argparse.Namespace, recorder: StageRecorder) -> None:
  out = BUILD / "p1"
  shutil.rmtree(out, ignore_errors=True)
  out.mkdir(parents=True)
  print("\n=== P1: Jacobian of the quadrotor RK4 step w.r.t. z = [x; u] (12 x 16) at the check point ===")
  fns: dict[str, av.NumericalFunction[..., Any]] = {}
  build: dict[str, tuple[float, dict[str, float], int]] = {}
  with anvil_cache(out / "cache"):  # empty: these in-process builds are cold (tinygrad already imported)
    for kind, fn in p1_functions().items():
      recorder.take()
      t0 = time.perf_counter()
      fn(Z)
      build[kind] = (time.perf_counter() - t0, stage_seconds(recorder.take()), len(fn.program.kernels))
      fns[kind] = fn
    exes = {
      k: anvil_harness(f"anvil_{k}", fn, [Z], 12 * NZ if k == "dense" else fn.nnz, out / f"anvil_{k}", 3)
      for k, fn in fns.items()
    }
  cas: dict[str, Any] = {}
  if ca is not None:
    cas = casadi_p1(ca)
    for k, fun in cas.items():
      exe, _ = casadi_harness(f"casadi_{k}", ca, fun, [Z], out / f"casadi_{k}", None)
      assert exe is not None
      exes[f"c{k}"] = exe
  loops = tight_loops(list(exes.values()), args.rounds, calibrate(list(exes.values()), args.rep_ms), args.reps)
  z = Z.copy()
  py_fns: dict[str, Callable[[], object]] = {f"anvil_{k}": (lambda f=f: f(z)) for k, f in fns.items()}
  py_fns.update({f"casadi_{k}": (lambda f=f: f(z)) for k, f in cas.items()})
  py = time_python(py_fns, args.rounds)

  # correctness
  dense, sparse = fns["dense"](Z), fns["sparse"](Z)
  eps = 1e-6
  fd = np.stack(
    [
      (quadrotor.step_numpy(*np.split(Z + eps * e, [12])) - quadrotor.step_numpy(*np.split(Z - eps * e, [12])))
      / (2 * eps)
      for e in np.eye(NZ)
    ],
    axis=1,
  )
  checks = {
    "anvil dense vs sparse": maxdiff(dense, sparse),
    "anvil C harness vs Python (dense)": float(np.abs(exes["dense"].y - dense.ravel()).max()),
    "anvil C harness vs Python (sparse)": float(np.abs(exes["sparse"].y - sparse.data).max()),
  }
  print("\ncorrectness (max abs diff)")
  if cas:
    ref = casadi_csc(cas["sparse"], [Z])
    checks["anvil dense vs CasADi"] = maxdiff(dense, ref)
    checks["anvil sparse vs CasADi"] = maxdiff(sparse, ref)
    checks["CasADi C harness vs Python (dense)"] = float(np.abs(exes["cdense"].y - ref.toarray().ravel("F")).max())
    checks["CasADi C harness vs Python (sparse)"] = float(np.abs(exes["csparse"].y - ref.data).max())
  bad = max(checks.values()) > TARGET_VALUES
  print(
    "  " + ", ".join(f"{k} {v:.1e}" for k, v in checks.items()) + ("  BAD" if bad else f"  OK (<= {TARGET_VALUES})")
  )
  print(f"  (info) anvil vs central finite differences of step_numpy, h = 1e-6: {maxdiff(dense, fd):.1e}")
  if cas:
    print(f"  sparsity: anvil nnz {fns['sparse'].nnz}, CasADi nnz {ref.nnz}; same pattern: {same_pattern(sparse, ref)}")

  rows: list[Row] = []
  for k in ("dense", "sparse"):
    a_ns = flat(loops[exes[k].name])
    nnz = 12 * NZ if k == "dense" else fns[k].nnz
    rows.append(Row(f"anvil {k} Jacobian ({nnz} values), C++ loop [ns/call]", f"{med(a_ns):.1f}", f"{min(a_ns):.1f}"))
    if cas:
      c_ns = flat(loops[exes[f"c{k}"].name])
      c_nnz = 12 * NZ if k == "dense" else ref.nnz
      rows.append(
        Row(
          f"CasADi {k} Jacobian ({c_nnz} values), C loop [ns/call] (issue: {CASADI_P1_ISSUE_US[k] * 1e3:.0f})",
          f"{med(c_ns):.1f}",
          f"{min(c_ns):.1f}",
        )
      )
      ratio = ratio_rounds(loops[exes[k].name], loops[exes[f"c{k}"].name])
      rows.append(
        Row(
          f"ratio anvil / CasADi, {k} (median of per-round ratios; best = min/min)",
          f"{ratio:.3f}",
          f"{min(a_ns) / min(c_ns):.3f}",
          f"<= {TARGET_P1_RATIO}",
          verdict(ratio, TARGET_P1_RATIO),
        )
      )
  for k in ("dense", "sparse"):
    p = py[f"anvil_{k}"]
    what = "ndarray" if k == "dense" else "csc_array"
    rows.append(Row(f"anvil {k} call from Python J(z) -> {what} [us/call]", f"{med(p):.2f}", f"{min(p):.2f}"))
    if cas:
      p = py[f"casadi_{k}"]
      rows.append(Row(f"CasADi {k} call from Python J(z) -> DM [us/call]", f"{med(p):.2f}", f"{min(p):.2f}"))
  for k, (build_s, stages, kernels) in build.items():
    detail = ", ".join(f"{s} {v:.2f}" for s, v in stages.items())
    rows.append(Row(f"anvil {k}: in-process cold build + first call [s] ({kernels} kernel(s))", f"{build_s:.2f}"))
    rows.append(Row(f"  {detail}", ""))
  for e in exes.values():
    rows.append(Row(f"{e.name}: generated TU compile (-c, best of 3) [s]", f"{e.compile_s:.2f}"))
  print(f"\nresults ({args.rounds} rounds round robin; C++: {args.reps} reps of ~{args.rep_ms:g} ms per round)")
  print_table(rows)
  print(f"  sources and executables in {out.relative_to(ROOT)}/")


# *** P3 ***


@dataclass
class P3Case:
  """One (kind, N): anvil's builds and harness, CasADi's harness."""

  kind: str
  n: int
  fn: av.SparseNumericalFunction
  cold: dict[str, Any]
  warm: list[dict[str, Any]]
  exe: Exe
  cas_fun: Any = None
  cas_exe: Exe | None = None
  cas_compile: str = "-"
  checks: dict[str, float] = field(default_factory=dict)
  notes: list[str] = field(default_factory=list)


def run_p3(ca: Any, args: argparse.Namespace) -> None:
  ns = sorted(set(args.n))
  print(f"\n=== P3: sparse derivatives of P2 multiple shooting (cart-pole, 5 N + 4 variables), N = {ns} ===")
  if ca is not None:
    print(
      f"  CasADi C compiled for N <= {args.casadi_max_n} only (--casadi-max-n), each file killed after "
      f"{args.casadi_compile_limit:g} s (--casadi-compile-limit)"
    )
  kinds = {"jac": "spjacobian(g) w.r.t. w", "hess": "sphessian(L) w.r.t. w, upper triangle"}
  cases: list[P3Case] = []
  t_builds = time.perf_counter()
  for n in ns:
    for kind in kinds:
      base = BUILD / "p3" / f"{kind}_{n}"
      shutil.rmtree(base, ignore_errors=True)
      cache = base / "cache"
      cache.mkdir(parents=True)
      cold = child_build(kind, n, cache)
      warm = [child_build(kind, n, cache) for _ in range(args.warm_runs)]
      print(
        f"  built anvil {kind} N={n}: cold {cold['build_s']:.2f} s, warm "
        f"{med([w['build_s'] for w in warm]) if warm else float('nan'):.2f} s",
        flush=True,
      )
      point = p3_point(kind, n)
      with anvil_cache(cache):  # warm: trace only; generate_module reuses the cached sources
        fn = p3_function(kind, n)
        y = fn(*point)
        exe = anvil_harness(f"anvil_{kind}_{n}", fn, point, fn.nnz, base / "anvil", 1)
      case = P3Case(kind, n, fn, cold, warm, exe)
      exe.y, _ = run_exe(exe, 1, 1, 0)
      case.checks["anvil C harness vs Python"] = float(np.abs(exe.y - y.data).max())
      if ca is not None:
        case.cas_fun = casadi_p3(ca, kind, n)
        ref = casadi_csc(case.cas_fun, point)
        case.checks["anvil vs CasADi"] = maxdiff(y, ref)
        case.checks["nnz CasADi - anvil"] = float(ref.nnz - fn.nnz)
        if not same_pattern(y, ref):
          case.notes.append(f"{kind} N={n}: anvil and CasADi patterns differ (anvil {fn.nnz}, CasADi {ref.nnz})")
        if n <= args.casadi_max_n:
          cas_exe, cs = casadi_harness(
            f"casadi_{kind}_{n}", ca, case.cas_fun, point, base / "casadi", args.casadi_compile_limit
          )
          case.cas_exe = cas_exe
          case.cas_compile = f"> {args.casadi_compile_limit:g} (killed)" if cs is None else f"{cs:.1f}"
          if cas_exe is not None:
            cas_exe.y, _ = run_exe(cas_exe, 1, 1, 0)
            case.checks["CasADi C harness vs Python"] = float(np.abs(cas_exe.y - ref.data).max())
          print(f"  compiled CasADi {kind} N={n}: {case.cas_compile} s", flush=True)
        else:
          case.cas_compile = f"skipped (N > {args.casadi_max_n})"
      cases.append(case)
  builds_s = time.perf_counter() - t_builds

  exes = [e for c in cases for e in (c.exe, c.cas_exe) if e is not None]
  t0 = time.perf_counter()
  loops = tight_loops(exes, args.rounds, calibrate(exes, args.rep_ms), args.reps)
  loops_s = time.perf_counter() - t0
  py_fns: dict[str, Callable[[], object]] = {}
  for c in cases:
    point = p3_point(c.kind, c.n)
    py_fns[f"anvil_{c.kind}_{c.n}"] = lambda f=c.fn, p=point: f(*p)
    if c.cas_fun is not None:
      py_fns[f"casadi_{c.kind}_{c.n}"] = lambda f=c.cas_fun, p=point: f(*p)
  py = time_python(py_fns, max(3, args.rounds // 2), target_s=0.02)

  # *** correctness ***
  print("\ncorrectness (max abs diff; nnz difference)")
  for c in cases:
    ok = all(v <= TARGET_VALUES for k, v in c.checks.items() if not k.startswith("nnz")) and not c.notes
    print(
      f"  {c.kind} N={c.n}: "
      + ", ".join(f"{k} {v:.1e}" if not k.startswith("nnz") else f"{k} {v:.0f}" for k, v in c.checks.items())
      + ("  OK" if ok else "  BAD")
    )
    for note in c.notes:
      print(f"    {note}")
  if ca is None:
    print("  casadi not installed: values not cross-checked")

  for kind, what in kinds.items():
    cs = [c for c in cases if c.kind == kind]
    print(f"\n--- {kind}: anvil {what} vs CasADi ---")
    print(
      "build: anvil cold (fresh subprocess, empty cache: build + first call) by stage, warm (fresh subprocess, "
      f"same cache; median of {args.warm_runs}) [s]"
    )
    rows = []
    for c in cs:
      st = c.cold["per_stage"]
      other = c.cold["build_s"] - sum(st.values())
      warm = med([w["build_s"] for w in c.warm]) if c.warm else float("nan")
      warm_stages = ",".join(sorted(k for k, v in c.warm[0]["stages"].items() if v)) if c.warm else "-"
      rows.append(
        [
          str(c.n),
          f"{c.fn.nnz} ({expected_nnz(kind, c.n)})",
          str(c.cold["kernels"]),
          *(f"{st[s]:.2f}" for s in STAGES),
          f"{other:.2f}",
          f"{c.cold['build_s']:.2f}",
          f"{c.cold['process_s']:.2f}",
          f"{warm:.3f}",
          warm_stages,
        ]
      )
    print_grid(
      ["N", "nnz (expect)", "kernels", *STAGES, "other", "cold", "cold process", "warm", "warm stages ran"], rows
    )

    print(
      "eval per call: tight C++ loop median (min); from Python median (anvil -> csc_array, CasADi -> DM);"
      " compile of the generated TU alone with -O3"
    )
    rows = []
    for c in cs:
      a = flat(loops[c.exe.name])
      row = [str(c.n), f"{med(a) / 1e3:.3f} ({min(a) / 1e3:.3f})", f"{med(a) / c.fn.nnz:.2f}"]
      if c.cas_exe is not None:
        b = flat(loops[c.cas_exe.name])
        ratio = ratio_rounds(loops[c.exe.name], loops[c.cas_exe.name])
        row += [f"{med(b) / 1e3:.3f} ({min(b) / 1e3:.3f})", f"{ratio:.3f}"]
      else:
        row += ["n/a", "n/a"]
      row += [
        c.cas_compile if ca is not None else "n/a",
        f"{c.exe.compile_s:.2f}",
        f"{med(py[f'anvil_{kind}_{c.n}']):.2f}",
      ]
      row.append(f"{med(py[f'casadi_{kind}_{c.n}']):.2f}" if c.cas_fun is not None else "n/a")
      rows.append(row)
    print_grid(
      [
        "N",
        "anvil C++ [us]",
        "[ns/nnz]",
        "CasADi C [us]",
        "anvil/CasADi",
        "CasADi cc -c [s]",
        "anvil c++ -c [s]",
        "anvil Py [us]",
        "CasADi Py, SX VM [us]",
      ],
      rows,
    )

  # *** targets ***
  print(f"\ntargets (N = {ns})")
  rows_t: list[Row] = []
  for kind in kinds:
    cs = [c for c in cases if c.kind == kind]
    kern = {c.cold["kernels"] for c in cs}
    rows_t.append(
      Row(
        f"{kind}: kernel count independent of N",
        "/".join(str(c.cold["kernels"]) for c in cs),
        "",
        "same for all N",
        "PASS" if len(kern) == 1 else "MISS",
      )
    )
    nnz_ok = all(c.fn.nnz == expected_nnz(kind, c.n) for c in cs)
    formula = "19N+4" if kind == "jac" else "8N"
    rows_t.append(
      Row(f"{kind}: nnz = {formula}", "/".join(str(c.fn.nnz) for c in cs), "", formula, "PASS" if nnz_ok else "MISS")
    )
    cold = [c.cold["build_s"] for c in cs]
    rows_t.append(
      Row(
        f"{kind}: cold build at N={cs[-1].n} [s]",
        f"{cold[-1]:.2f}",
        "",
        f"<= {TARGET_COLD_S:g}",
        verdict(cold[-1], TARGET_COLD_S) + ("" if cs[-1].n >= 200 else " (N<200)"),
      )
    )
    flat_ratio = max(cold) / min(cold)
    rows_t.append(
      Row(
        f"{kind}: cold build max/min over N (independent of N)",
        f"{flat_ratio:.2f}",
        "",
        f"<= {TARGET_COLD_FLAT}",
        verdict(flat_ratio, TARGET_COLD_FLAT),
      )
    )
    warm = [med([w["build_s"] for w in c.warm]) for c in cs if c.warm]
    if warm:
      rows_t.append(
        Row(
          f"{kind}: warm build, worst N [s]",
          f"{max(warm):.3f}",
          "",
          f"<= {TARGET_WARM_S}",
          verdict(max(warm), TARGET_WARM_S),
        )
      )
    evals = [med(flat(loops[c.exe.name])) for c in cs]
    p = loglog_exponent([c.n for c in cs], evals)
    rows_t.append(
      Row(
        f"{kind}: eval time ~ N^p (log-log fit of the C++ loop medians)",
        f"p = {p:.2f}",
        "",
        f"p <= {TARGET_EXPONENT}",
        verdict(p, TARGET_EXPONENT) if len(cs) > 1 else "n/a",
      )
    )
    for c in cs:
      if c.cas_exe is None:
        continue
      r = ratio_rounds(loops[c.exe.name], loops[c.cas_exe.name])
      rows_t.append(
        Row(
          f"{kind}: eval anvil / CasADi C at N={c.n}",
          f"{r:.3f}",
          "",
          f"<= {TARGET_P3_RATIO}",
          verdict(r, TARGET_P3_RATIO),
        )
      )
    if missing := [str(c.n) for c in cs if c.cas_exe is None]:
      rows_t.append(Row(f"{kind}: eval anvil / CasADi C at N={','.join(missing)}", "n/a", "", "", "no CasADi C"))
  print_table(rows_t)
  print(
    f"  anvil builds + CasADi compiles {builds_s:.0f} s; C++ loops {loops_s:.1f} s ({args.rounds} rounds x "
    f"{args.reps} reps of ~{args.rep_ms:g} ms); sources and executables in {(BUILD / 'p3').relative_to(ROOT)}/"
  )


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--n", type=int, nargs="+", default=[20, 50, 100, 200], help="P3 horizons")
  ap.add_argument("--rounds", type=int, default=7, help="round-robin rounds of the C++ loops and Python calls")
  ap.add_argument("--reps", type=int, default=5, help="repetitions per C++ harness run")
  ap.add_argument("--rep-ms", type=float, default=20.0, help="approximate duration of one repetition")
  ap.add_argument("--warm-runs", type=int, default=2, help="warm-build subprocesses per P3 function")
  ap.add_argument("--casadi-compile-limit", type=float, default=60.0, help="seconds per gcc -O3 of CasADi's C")
  ap.add_argument("--casadi-max-n", type=int, default=50, help="compile CasADi's C only up to this N")
  ap.add_argument("--skip-p1", action="store_true")
  ap.add_argument("--skip-p3", action="store_true")
  args = ap.parse_args()

  t_start = time.perf_counter()
  ca: Any = load_casadi()
  BUILD.mkdir(parents=True, exist_ok=True)
  recorder = StageRecorder()
  cxx = find_compiler()
  print("anvil derivatives (anvil.ad) vs CasADi: P1 Jacobian, P3 sparse Jacobian/Hessian scaling")
  print(f"  anvil {av.__version__}, casadi {ca.__version__ if ca else 'not installed'}, numpy {np.__version__}")
  print(
    f"  {Path(cxx).name} ({sh([cxx, '--version']).stdout.splitlines()[0]})"
    + (f"; C for CasADi: {Path(find_c_compiler()).name}" if ca else "")
  )
  print(
    f"  generated code: {' '.join(CXX_FLAGS)} (anvil) / {' '.join(C_FLAGS)} (CasADi); harness {' '.join(CXX_FLAGS)}"
  )
  print(f"  {platform.machine()}, {os.cpu_count()} cores, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
  if not args.skip_p1:
    run_p1(ca, args, recorder)
  if not args.skip_p3:
    run_p3(ca, args)
  print(f"\ntotal {time.perf_counter() - t_start:.0f} s; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
  main()
