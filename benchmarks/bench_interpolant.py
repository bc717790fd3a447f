"""Lookup tables: anvil's generated C++ against CasADi's generated C for the same `interpolant`, in one run.

    .venv/bin/python -m benchmarks.bench_interpolant [--rounds 7] [--methods linear,bspline]

Tables (random values): 1-D with 1000 nodes, 2-D 100 x 100, 3-D 20 x 20 x 20, each evenly spaced (anvil finds the
interval by one division, CasADi by its default lookup: a linear scan up to 100 nodes, binary search above) and, in 1-D,
unevenly spaced (binary search in both). Per table and method: the value at one point and its Jacobian (gradient) per
call in a tight loop (benchmarks/bench_ad.py's harness: both generated sources compiled with -O3 -fno-math-errno and
linked with the same harness), round robin, median over rounds of each round's best, at a new random point every call
(cycling through 4096, the same for both: an interval search's branches cannot be learnt, as along a horizon) and at
one point (bench_ad's loop, where a branchy search is predicted perfectly); and
the build: anvil's cold build of both functions in a fresh process with an empty cache (from the table's data to both
functions called once: spline fit, trace, derive, render, compile; Python's imports not counted) against the compile of
CasADi's C (its generation not counted). Values are checked equal first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import anvil as av
from anvil.ad import jacobian
from benchmarks.bench_ad import HARNESS, anvil_harness, calibrate, casadi_harness
from benchmarks.common import CXX_FLAGS, ROOT, Exe, fmt_array, load_casadi, tight_loops

#: name -> node counts per dimension, evenly spaced or not.
TABLES = {"1-D 1000": ((1000,), True), "1-D 1000 uneven": ((1000,), False), "2-D 100x100": ((100, 100), True),
          "3-D 20^3": ((20, 20, 20), True)}  # fmt: skip

#: The tight loop at a new point every call: a cycle of POINT_COUNT random points inside the grid (the same sequence
#: for both), so that neither's interval search is a branch the processor has learnt.
POINT_COUNT = 4096
RANDOM_HARNESS = HARNESS.replace("@INIT@", "@INIT@\nstatic const double POINTS[] = {@POINTS@};").replace(
  "in0[0] = INIT0[0] + 1e-12 * yout[0];",
  "std::memcpy(in0, POINTS + (i % @COUNT@) * @D@, @D@ * sizeof(double)); in0[0] += 1e-300 * yout[0];",
)

CHILD = """import json, sys, time
from benchmarks.bench_interpolant import functions
t0 = time.perf_counter()
value, gradient, point = functions({table!r}, {method!r})
value(point)
gradient(point)
print(json.dumps({{"build_s": time.perf_counter() - t0}}))
"""


def data(table: str) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
  """The grids, values and evaluation point of a table (fixed seed)."""
  sizes, even = TABLES[table]
  rng = np.random.default_rng(sum(sizes))
  grids = [np.linspace(0.0, 10.0, n) if even else np.cumsum(rng.uniform(0.5, 1.5, n)) for n in sizes]
  values = rng.standard_normal(sizes)
  point = np.array([g[0] + 0.37 * (g[-1] - g[0]) for g in grids])
  return grids, values, point


def functions(table: str, method: str) -> tuple[Any, Any, np.ndarray]:
  """anvil's table and its Jacobian, and the evaluation point."""
  grids, values, point = data(table)
  name = f"{method}_{'_'.join(str(len(g)) for g in grids)}{'' if TABLES[table][1] else '_uneven'}"
  f = av.interpolant(f"t_{name}", grids, values, method=method, extrapolation="linear")
  return f, jacobian(f, name=f"t_{name}_jac"), point


def casadi_functions(ca: Any, table: str, method: str) -> tuple[Any, Any]:
  """CasADi's table and its Jacobian as Functions of one point."""
  grids, values, _ = data(table)
  f = ca.interpolant("f", method, grids, values.ravel(order="F"))
  x = ca.MX.sym("x", len(grids))
  tag = f"{method}_{abs(hash(table)) % 10**6}"
  return ca.Function(f"cv_{tag}", [x], [f(x)]), ca.Function(f"cj_{tag}", [x], [ca.jacobian(f(x), x)])


def cold_build(table: str, method: str) -> float:
  """anvil's build of the value and Jacobian in a fresh process with an empty cache."""
  with tempfile.TemporaryDirectory() as cache:
    env = {"ANVIL_CACHE_DIR": cache, "CACHEDB": f"{cache}/tinygrad.db", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", CHILD.format(table=table, method=method)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["build_s"])


def measure(ca: Any, table: str, method: str, rounds: int, work: Path) -> list[str]:
  """One row: per call times (value, Jacobian; at random points, at one point) of anvil and CasADi, their ratios,
  and the build times."""
  value, gradient, point = functions(table, method)
  cv, cj = casadi_functions(ca, table, method)
  grids = data(table)[0]
  points = np.random.default_rng(1).uniform([g[0] for g in grids], [g[-1] for g in grids], (POINT_COUNT, len(grids)))
  for x in points[:50]:
    assert np.allclose(value(x), float(cv(x)), atol=1e-12), table
    assert np.allclose(gradient(x).ravel(), np.array(cj(x)).ravel(), atol=1e-10), table
  random = RANDOM_HARNESS.replace("@POINTS@", fmt_array(points.ravel())).replace("@COUNT@", str(POINT_COUNT))
  random = random.replace("@D@", str(len(grids)))
  exes: list[Exe] = []
  casadi_compile = 0.0
  for label, fn, cfn in (("value", value, cv), ("jacobian", gradient, cj)):
    for at, template in (("random", random), ("fixed", HARNESS)):
      out = work / f"{fn.name}_{at}"
      exes.append(anvil_harness(f"anvil_{label}_{at}", fn, [point], fn.outputs[0].size, out / "anvil", 1, CXX_FLAGS,
                                template))  # fmt: skip
      exe, compile_s = casadi_harness(f"casadi_{label}_{at}", ca, cfn, [point], out / "casadi", 120, template)
      assert exe is not None
      exes.append(exe)
      casadi_compile += (compile_s or 0.0) / 2
  samples = tight_loops(exes, rounds, calibrate(exes, 20), 5)
  ns = {e.name: statistics.median(min(r) for r in samples[e.name]) for e in exes}
  cells = [f"{table}, {method}"]
  for kind in ("value_random", "jacobian_random", "value_fixed", "jacobian_fixed"):
    anvil_ns, casadi_ns = ns[f"anvil_{kind}"], ns[f"casadi_{kind}"]
    cells.append(f"{anvil_ns:.1f} / {casadi_ns:.1f} = {anvil_ns / casadi_ns:.2f}")
  return [*cells, f"{cold_build(table, method):.2f}", f"{casadi_compile:.2f}"]


def main() -> None:
  """Measure every table and method; print one table."""
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--methods", default="linear,bspline")
  parser.add_argument("--tables", default=",".join(TABLES))
  args = parser.parse_args()
  ca = load_casadi()
  header = ["table, method", "value, random x", "Jacobian, random x", "value, one x", "Jacobian, one x",
            "anvil build s", "CasADi compile s"]  # fmt: skip
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for table in args.tables.split(","):
      for method in args.methods.split(","):
        rows.append(measure(ca, table, method, args.rounds, Path(tmp)))
        print(" | ".join(rows[-1]), flush=True)
  widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
  print("\n| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
  print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
  for r in rows:
    print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
  print("\nns per call, anvil / CasADi = ratio (target <= 1.0): at a new random point every call, and at one point")
  print("(the loop of benchmarks/bench_ad.py); anvil build: cold, value + Jacobian (target <= 3 s)")


if __name__ == "__main__":
  main()
