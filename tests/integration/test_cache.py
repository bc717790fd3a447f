"""The on-disk build cache: a second process skips schedule/render/compile; concurrent first builds both succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = """
import json, sys, numpy as np
import anvil as av
from anvil.codegen import STAGE_COUNTS
from anvil.problems import cartpole
C = av.Tensor(np.array([0.5, -1.0, 2.0, 0.25]))
f = av.NumericalFunction("cache_fn", lambda x, u: cartpole.step(x, u) * C, (av.Arg(4), av.Arg(1)))
y = f(cartpole.TEST_X, cartpole.TEST_U)
err = float(np.abs(y - cartpole.step_numpy(cartpole.TEST_X, cartpole.TEST_U) * [0.5, -1.0, 2.0, 0.25]).max())
print(json.dumps({"stages": dict(STAGE_COUNTS), "err": err, "library": f.library}))
"""


def _build(cache: Path) -> subprocess.Popen[str]:
  env = {**os.environ, "ANVIL_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
  return subprocess.Popen([sys.executable, "-c", BUILD], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip


def _result(proc: subprocess.Popen[str]) -> dict:
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 0, err
  return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_reuses_the_library(fresh_cache: Path) -> None:
  first = _result(_build(fresh_cache))
  assert first["stages"].get("schedule") == 1 and first["stages"].get("render") == 1
  assert first["stages"].get("compile") == 1 and first["err"] < 1e-12
  second = _result(_build(fresh_cache))
  assert second["stages"] == {"trace": 1}, "a warm start must skip schedule, render and compile"
  assert second["err"] < 1e-12 and second["library"] == first["library"]


@pytest.mark.slow
def test_concurrent_first_builds_both_succeed(fresh_cache: Path) -> None:
  procs = [_build(fresh_cache) for _ in range(2)]
  results = [_result(p) for p in procs]
  assert all(r["err"] < 1e-12 for r in results)
  assert results[0]["library"] == results[1]["library"]
  libs = sorted(p.name for p in (fresh_cache / "lib").iterdir())
  assert [Path(n).suffix for n in libs] == [".so", ".sha256"], f"temporary files left behind: {libs}"


def test_cache_key_follows_constant_data(fresh_cache: Path) -> None:
  import numpy as np

  import anvil as av

  def make(values: list[float]) -> av.NumericalFunction:
    c = av.Tensor(np.array(values))
    return av.NumericalFunction("cache_const", lambda x: x * c, av.Arg(2))

  a, b = make([1.0, 2.0]), make([3.0, 4.0])
  assert a.key != b.key and a.key == make([1.0, 2.0]).key
  np.testing.assert_array_equal(a(np.ones(2)), [1.0, 2.0])
  np.testing.assert_array_equal(b(np.ones(2)), [3.0, 4.0])


def test_libraries_are_built_for_this_cpu_unless_portable(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """A JIT library is built for the CPU it runs on (the host's flags, keyed on the CPU, no fused multiply-adds);
  ANVIL_PORTABLE=1 builds for the baseline ISA under a key of its own, with results equal to the bit."""
  import numpy as np

  import anvil as av
  from anvil.codegen import jit
  from anvil.problems import cartpole

  monkeypatch.delenv("ANVIL_PORTABLE", raising=False)
  monkeypatch.delenv("ANVIL_CXXFLAGS", raising=False)
  flags, tag = jit.cxxflags(), jit.host_tag()
  assert len(tag) == 16 and "-ffp-contract=off" in flags and "-march=native" in flags  # g++ and clang++ take them
  make = lambda: av.NumericalFunction("cache_host", cartpole.step, (av.Arg(4), av.Arg(1)))
  x, u = np.array([0.3, -0.2, 2.0, 1.0]), np.array([4.0])
  host = make()
  y_host, library = host(x, u), host.library
  monkeypatch.setenv("ANVIL_PORTABLE", "1")
  assert jit.host_tag() == "" and not set(jit.cxxflags()) - set(jit.CXXFLAGS)
  baseline = make()
  y_baseline = baseline(x, u)
  assert baseline.library != library and sorted(p.suffix for p in (fresh_cache / "lib").iterdir()).count(".so") == 2
  np.testing.assert_array_equal(y_host, y_baseline)
  np.testing.assert_allclose(y_host, cartpole.step_numpy(x, u), rtol=1e-14)


def test_fused_multiply_adds_are_an_option(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """ANVIL_FMA=1 builds with fused multiply-adds (after the host's flags, which turn them off) under a key of its own,
  with results equal to the default build's to rounding."""
  import numpy as np

  import anvil as av
  from anvil.codegen import jit
  from anvil.problems import cartpole

  for name in ("ANVIL_FMA", "ANVIL_CXXFLAGS", "ANVIL_PORTABLE"):
    monkeypatch.delenv(name, raising=False)
  assert "-ffp-contract=fast" not in jit.cxxflags() and not jit.fused_multiply_adds()
  make = lambda: av.NumericalFunction("cache_fma", cartpole.step, (av.Arg(4), av.Arg(1)))
  x, u = np.array([0.3, -0.2, 2.0, 1.0]), np.array([4.0])
  default = make()
  y_default = default(x, u)
  monkeypatch.setenv("ANVIL_FMA", "1")
  flags = jit.cxxflags()
  assert jit.fused_multiply_adds() and flags.index("-ffp-contract=fast") > flags.index("-ffp-contract=off")
  fused = make()
  assert fused.library != default.library
  np.testing.assert_allclose(fused(x, u), y_default, rtol=1e-13)


def test_fused_multiply_adds_reach_straight_line_code(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """ANVIL_FMA=1 fuses the straight-line chunks' a * b + c too (g++ compiles them at -O1, which alone fuses nothing):
  (1 + 2⁻³⁰)(1 - 2⁻³⁰) - 1 is -2⁻⁶⁰ fused, 0 rounded, on a CPU with fused multiply-adds."""
  import numpy as np

  import anvil as av

  terms = 80
  products = lambda x: av.Tensor.stack(*[x[3 * k] * x[3 * k + 1] + x[3 * k + 2] for k in range(terms)])
  x = np.tile([1 + 2.0**-30, 1 - 2.0**-30, -1.0], terms)
  monkeypatch.delenv("ANVIL_CXXFLAGS", raising=False)
  results = {}
  for fma in ("0", "1"):
    monkeypatch.setenv("ANVIL_FMA", fma)
    fn = av.NumericalFunction("straight_fma", products, av.Arg(3 * terms))
    assert "ANVIL_STRAIGHT_LINE" in fn.source_code
    results[fma] = fn(x)
  np.testing.assert_array_equal(results["0"], 0.0)
  has_fma = " fma " in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False
  np.testing.assert_array_equal(results["1"], -(2.0**-60) if has_fma else 0.0)


def test_cache_dir_defaults_to_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
  from anvil.codegen.jit import cache_dir

  monkeypatch.delenv("ANVIL_CACHE_DIR", raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert cache_dir() == tmp_path / "anvil"
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(tmp_path / "x"))
  assert cache_dir() == tmp_path / "x"


def test_builds_from_several_threads(fresh_cache: Path) -> None:
  import threading

  import numpy as np

  import anvil as av

  results: dict[int, np.ndarray] = {}

  def build(k: int) -> None:
    f = av.NumericalFunction(f"thread_fn{k}", lambda x: (x * (k + 1)).sin(), av.Arg(3))
    results[k] = f(np.ones(3))

  threads = [threading.Thread(target=build, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  for k in range(4):
    np.testing.assert_allclose(results[k], np.sin(np.full(3, k + 1.0)), rtol=1e-15)


def test_the_kernels_of_one_function_render_in_forked_workers(monkeypatch: pytest.MonkeyPatch) -> None:
  """A function's kernels are rendered by forked workers and this process, each every n-th kernel, into exactly the
  kernels one process renders; a worker that fails, or one the system refuses to start, has its share rendered here;
  an error here is raised (the workers killed)."""
  import os

  import anvil as av
  from anvil.codegen import parallel
  from anvil.codegen.program import schedule
  from anvil.codegen.renderer import render_kernel

  def fn(x):  # NOTE: every reduction ends a kernel
    y = x
    for k in range(6):
      y = (y.sin() * (k + 1.0)).sum() * y + x
    return y

  f = av.NumericalFunction("par_kernels", fn, (av.Arg(4),))
  jobs = [(item.src[0], f"k{i}") for i, item in enumerate(schedule(f.traced)) if item.src[0].op.name == "SINK"]
  assert len(jobs) >= 6
  serial = [render_kernel(ast, name) for ast, name in jobs]
  monkeypatch.setenv("ANVIL_BUILD_JOBS", "3")
  monkeypatch.setattr(parallel, "KERNELS_PER_RENDER_WORKER", 2)
  here = os.getpid()
  rendered_here: list[str] = []

  def counted(ast, name):
    if os.getpid() == here:
      rendered_here.append(name)
    return render_kernel(ast, name)

  assert parallel.render_in_parallel(jobs, counted) == serial
  assert rendered_here == [name for _, name in jobs[::3]], "this process rendered only its share"

  def failing(ast, name):
    if os.getpid() != here:
      raise RuntimeError("a worker fails")
    return render_kernel(ast, name)

  assert parallel.render_in_parallel(jobs, failing) == serial

  def refused() -> int:
    raise OSError("no more processes")

  monkeypatch.setattr(os, "fork", refused)
  assert parallel.render_in_parallel(jobs, render_kernel) == serial, "the shares no worker took are rendered here"
  monkeypatch.undo()
  monkeypatch.setenv("ANVIL_BUILD_JOBS", "3")
  monkeypatch.setattr(parallel, "KERNELS_PER_RENDER_WORKER", 2)

  def failing_here(ast, name):
    if os.getpid() == here:
      raise ValueError("this process fails")
    return render_kernel(ast, name)

  with pytest.raises(ValueError, match="this process fails"):
    parallel.render_in_parallel(jobs, failing_here)


def test_functions_of_a_module_build_in_parallel_workers(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """Two uncached functions are scheduled and rendered in forked workers: the parent does neither, finds their code in
  the cache, and it is the code a build in this process makes."""
  import numpy as np

  import anvil as av
  from anvil.codegen import STAGE_COUNTS
  from anvil.codegen.parallel import build_in_parallel, build_jobs

  make = lambda: [av.NumericalFunction("par_a", lambda x: x.sin() * 2.0, (av.Arg(3),)),
                  av.NumericalFunction("par_b", lambda x: (x * x).sum().reshape(1), (av.Arg(3),))]  # fmt: skip
  monkeypatch.setenv("ANVIL_BUILD_JOBS", "2")
  fns = make()
  assert all(f.build_size > 0 for f in fns)
  release = threading.Event()
  other = threading.Thread(target=release.wait)
  other.start()
  build_in_parallel(fns)  # a second thread is running: no fork (the child could deadlock)
  release.set()
  other.join()
  assert all(f.build_size > 0 for f in fns)
  before = dict(STAGE_COUNTS)
  build_in_parallel(fns)
  assert all(f.build_size == 0 for f in fns), "the workers left the code in the cache"
  codes = [(f.header_code, f.source_code) for f in fns]
  assert {k: STAGE_COUNTS[k] - before.get(k, 0) for k in ("schedule", "render")} == {"schedule": 0, "render": 0}
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(fresh_cache.parent / "sequential"))
  monkeypatch.setenv("ANVIL_BUILD_JOBS", "1")
  here = make()
  build_in_parallel(here)  # one job: nothing happens until the code is read
  assert all(f.build_size > 0 for f in here)
  assert codes == [(f.header_code, f.source_code) for f in here]
  x = np.array([0.1, -0.4, 2.0])
  np.testing.assert_allclose(fns[0](x), 2.0 * np.sin(x), rtol=1e-15)
  monkeypatch.setenv("ANVIL_BUILD_JOBS", "zero")
  with pytest.raises(ValueError, match="ANVIL_BUILD_JOBS"):
    build_jobs()
