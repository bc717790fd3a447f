"""Fault injection: damaged cache artefacts, processes killed mid-build, cache directories that cannot be used, no
compiler on a machine with a warm cache. Each case ends with a process that builds (or loads) correctly and a cache
without temporary files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
X = [0.3, -1.2, 2.5]
#: A process that builds `fault_fn` (its hook, if any, is `HOOK` run first) and prints what it got.
BUILD = """
import json, os, signal, sys, numpy as np
import anvil as av
from anvil.codegen import STAGE_COUNTS
{hook}
f = av.NumericalFunction("fault_fn", lambda x: (x.sin() * 2.0 + x[0]).exp(), av.Arg(3))
y = f(np.array({x}))
assert "namespace fault_fn" in f.header_code  # the rendered code is read too (as generate_module reads it)
print(json.dumps({{"y": y.tolist(), "library": f.library, "stages": dict(STAGE_COUNTS)}}))
"""


def expected() -> np.ndarray:
  x = np.array(X)
  return np.exp(np.sin(x) * 2.0 + x[0])


def run_build(cache: Path, hook: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
  """Run BUILD in a new process on `cache`."""
  env = {**os.environ, "ANVIL_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), **(env or {})}
  script = BUILD.format(hook=hook, x=X)
  return subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def built(cache: Path, **kwargs: object) -> dict:
  """BUILD's result on `cache`, checked against numpy."""
  proc = run_build(cache, **kwargs)  # type: ignore[arg-type]
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  np.testing.assert_allclose(result["y"], expected(), rtol=1e-14)
  return result


def temporaries(cache: Path) -> list[Path]:
  return [p for p in cache.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
  """A cache holding fault_fn's code and library, built by another process."""
  cache = tmp_path_factory.mktemp("warm") / "cache"
  built(cache)
  return cache


@pytest.fixture
def copied_cache(warm_cache: Path, tmp_path: Path) -> Path:
  """A private copy of the warm cache, to damage."""
  return Path(shutil.copytree(warm_cache, tmp_path / "cache"))


@pytest.fixture
def resolve_again() -> None:
  """Forget which cache directories this process resolved (each is resolved once per process)."""
  from anvil.codegen import cache

  cache._resolve.cache_clear()
  yield
  cache._resolve.cache_clear()


def _only(cache: Path, folder: str, suffix: str) -> Path:
  (found,) = [p for p in (cache / folder).iterdir() if p.name.endswith(suffix)]
  return found


def _truncate(path: Path) -> None:
  with open(path, "r+b") as f:
    f.truncate(path.stat().st_size // 2)


def _plant_library(path: Path) -> None:
  """Replace the library by a valid library of another function (same entry point names, other results)."""
  other = path.parent.parent / "plant"
  script = BUILD.replace("(x.sin() * 2.0 + x[0]).exp()", "x * 0.0")
  env = {**os.environ, "ANVIL_CACHE_DIR": str(other), "PYTHONPATH": str(ROOT)}
  proc = subprocess.run([sys.executable, "-c", script.format(hook="", x=X)], env=env, cwd=ROOT, capture_output=True,
                        text=True, timeout=300)  # fmt: skip
  planted = json.loads(proc.stdout.strip().splitlines()[-1])["library"]
  shutil.copyfile(planted, path)


def _foreign_library(path: Path) -> None:
  """Replace the library by a shared object without anvil's entry points, its record rewritten to match."""
  source = path.parent / "foreign.c"
  source.write_text("int unrelated(void) { return 7; }\n")
  subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
  source.unlink()
  Path(f"{path}.sha256").write_text(_digest(path.read_bytes()))


DAMAGES: dict[str, tuple[str, str, Callable[[Path], None]]] = {
  "library truncated": ("lib", ".so", _truncate),
  "library empty": ("lib", ".so", lambda p: p.write_bytes(b"")),
  "library garbage": ("lib", ".so", lambda p: p.write_bytes(os.urandom(4096))),
  "library planted": ("lib", ".so", _plant_library),
  "library record missing": ("lib", ".so.sha256", lambda p: p.unlink()),
  "library record garbage": ("lib", ".so.sha256", lambda p: p.write_text("12 nonsense")),
  "library without entry points": ("lib", ".so", _foreign_library),
  "library a directory": ("lib", ".so", lambda p: (p.unlink(), p.mkdir(), (p / "x").write_text(""))),
  "code {}": ("code", ".json", lambda p: p.write_text("{}")),
  "code truncated": ("code", ".json", _truncate),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_artifact_is_rebuilt_and_replaced(copied_cache: Path, damage: str) -> None:
  folder, suffix, hurt = DAMAGES[damage]
  hurt(_only(copied_cache, folder, suffix))
  first = built(copied_cache)
  assert first["stages"].get("compile" if folder == "lib" else "render") == 1, first["stages"]
  second = built(copied_cache)
  assert "compile" not in second["stages"] and "render" not in second["stages"], "the rebuilt artefact verifies"
  assert temporaries(copied_cache) == []


def test_a_code_record_that_matches_garbage_is_not_trusted(
  copied_cache: Path, monkeypatch: pytest.MonkeyPatch, resolve_again: None
) -> None:
  """`{}` written with a matching record (e.g. by an older anvil) still lacks the code: it is not used."""
  from anvil.codegen.cache import write_atomic
  from anvil.codegen.function import _cached_code

  monkeypatch.setenv("ANVIL_CACHE_DIR", str(copied_cache))
  code = _only(copied_cache, "code", ".json")
  assert _cached_code(code.name) is not None
  write_atomic(code, "{}")
  assert _cached_code(code.name) is None


# *** processes killed mid-build ***

KILL_HOOKS = {
  # NOTE: each hook SIGKILLs the building process at one point of its build, after it created temporary files
  "trace": "import anvil.codegen.function as f; f.trace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)",
  "render": (
    "import anvil.codegen.cache as c; publish = c.publish\n"
    "def killing(tmp, path, *rest):\n"
    "  if path.suffix == '.json': os.kill(os.getpid(), signal.SIGKILL)\n"
    "  publish(tmp, path, *rest)\n"
    "c.publish = killing"
  ),
  "compile": (
    "import anvil.codegen.jit as j; run = j._run_compiler\n"
    "def killing(cmd, what, kept):\n"
    "  run(cmd, what, kept); os.kill(os.getpid(), signal.SIGKILL)\n"
    "j._run_compiler = killing"
  ),
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(KILL_HOOKS))
def test_a_build_killed_mid_way_leaves_nothing_behind(tmp_path: Path, stage: str) -> None:
  cache = tmp_path / "cache"
  killed = run_build(cache, hook=KILL_HOOKS[stage])
  assert killed.returncode == -signal.SIGKILL
  if stage != "trace":
    assert temporaries(cache), "the killed build left temporary files (else this test tests nothing)"
  built(cache)
  assert temporaries(cache) == []


PARALLEL = """
import os, sys, time
import anvil as av
from anvil.codegen import parallel
def slow(index):
  os.write(1, b"%d\\n" % os.getpid())
  time.sleep(60)
parallel._build = slow
os.environ["ANVIL_BUILD_JOBS"] = "2"
fns = [av.NumericalFunction(f"orphan_{k}", lambda x: x.sin() * (k + 1.0), av.Arg(3)) for k in range(2)]
parallel.build_in_parallel(fns)
"""


def _running(pid: int) -> bool:
  try:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
  except OSError:
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="forked build workers are Linux-only")
def test_forked_build_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
  env = {**os.environ, "ANVIL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
  parent = subprocess.Popen([sys.executable, "-c", PARALLEL], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
  assert parent.stdout is not None
  workers = [int(parent.stdout.readline()) for _ in range(2)]
  assert all(_running(w) for w in workers)
  parent.kill()
  parent.wait()
  parent.stdout.close()
  deadline = time.monotonic() + 10
  while any(_running(w) for w in workers) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not any(_running(w) for w in workers), "a build worker outlived its parent"


# *** cache directories that cannot be used as they are ***


def test_an_uncreatable_cache_directory_falls_back_to_a_temporary_one(
  tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolve_again: None
) -> None:
  import anvil as av
  from anvil.codegen.cache import cache_dir

  blocker = tmp_path / "a-file"
  blocker.write_text("")
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(blocker / "cache"))
  with pytest.warns(RuntimeWarning, match="ANVIL_CACHE_DIR"):
    fallback = cache_dir()
  assert fallback.is_dir() and not str(fallback).startswith(str(blocker))
  f = av.NumericalFunction("fault_fallback", lambda x: x * 3.0, av.Arg(2))
  np.testing.assert_array_equal(f(np.array([1.0, 2.0])), [3.0, 6.0])
  assert Path(f.library).is_relative_to(fallback)


def _passwd_has(uid: int) -> bool:
  import pwd

  try:
    pwd.getpwuid(uid)
  except KeyError:
    return False
  return True


#: A uid with no passwd entry (a container started with an arbitrary uid), run as by `setpriv` where this is root.
HOMELESS_UID = 54321


@pytest.mark.parametrize("home", [None, ""])
def test_no_home_directory_falls_back_to_a_temporary_cache_removed_at_exit(home: str | None) -> None:
  """$HOME unset (or empty) and no passwd entry, no ANVIL_CACHE_DIR or XDG_CACHE_HOME: the process builds in a private
  temporary cache, says so once, and removes it when it exits. Run under a uid without a passwd entry (setpriv) where
  this process may switch users, else with the passwd lookup stubbed out."""
  env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME", "ANVIL_CACHE_DIR")}
  env |= {"PYTHONPATH": str(ROOT), **({} if home is None else {"HOME": home})}
  prefix = ["setpriv", f"--reuid={HOMELESS_UID}", f"--regid={HOMELESS_UID}", "--clear-groups"]
  switch = os.geteuid() == 0 and shutil.which("setpriv") is not None and not _passwd_has(HOMELESS_UID)
  # NOTE: the other uid must be able to run this Python and import anvil (a checkout in a 0700 directory is not)
  probe = [*prefix, sys.executable, "-c", "import numpy, anvil"]
  switch = switch and subprocess.run(probe, env=env, cwd=ROOT, capture_output=True, timeout=120).returncode == 0
  hook = "" if switch else "import anvil.codegen.cache as c; c._passwd_home = lambda: None"
  prefix = prefix if switch else []
  script = BUILD.format(hook=hook, x=X)
  proc = subprocess.run([*prefix, sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                        timeout=300)  # fmt: skip
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  np.testing.assert_allclose(result["y"], expected(), rtol=1e-14)
  assert proc.stderr.count("no home directory") == 1, proc.stderr
  library = Path(result["library"])
  fallback = next(p for p in library.parents if p.name.startswith("anvil-cache-"))
  assert str(fallback) in proc.stderr and not fallback.exists(), "removed when the process exited"


def test_a_read_only_cache_is_still_read(
  copied_cache: Path, monkeypatch: pytest.MonkeyPatch, resolve_again: None
) -> None:
  """A warm cache that cannot be written (a deployment image) still provides its artefacts; new ones go elsewhere."""
  import anvil as av
  from anvil.codegen import STAGE_COUNTS, cache

  monkeypatch.setattr(cache, "_unwritable", lambda path: "is not writable" if path == copied_cache else None)
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(copied_cache))
  before = dict(STAGE_COUNTS)
  with pytest.warns(RuntimeWarning, match=f"{copied_cache} is not writable"):
    f = av.NumericalFunction("fault_fn", lambda x: (x.sin() * 2.0 + x[0]).exp(), av.Arg(3))
    np.testing.assert_allclose(f(np.array(X)), expected(), rtol=1e-14)
  assert Path(f.library).is_relative_to(copied_cache)
  assert all(STAGE_COUNTS[s] == before.get(s, 0) for s in ("render", "compile")), "read from the read-only cache"


@pytest.mark.parametrize("folder", ["", "lib"])
def test_a_cache_others_can_write_is_not_used(
  tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolve_again: None, folder: str
) -> None:
  """A cache (or a folder in it) that others may write: they could plant code, so it is neither read nor written; the
  process caches privately instead and says why."""
  from anvil.codegen.cache import cache_location

  shared = tmp_path / "shared"
  (shared / "lib").mkdir(parents=True)
  (shared / folder).chmod(0o777)
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(shared))
  with pytest.warns(RuntimeWarning, match="writable by others than its owner.*ANVIL_CACHE_DIR"):
    location = cache_location()
  assert location.write != shared and shared not in location.read
  private = tmp_path / "private"
  private.mkdir(mode=0o700)
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(private))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert cache_location().read == (private,)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's needs root")
def test_a_cache_owned_by_another_user_is_not_used(
  tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolve_again: None
) -> None:
  from anvil.codegen.cache import cache_location

  foreign = tmp_path / "foreign"
  (foreign / "lib").mkdir(parents=True, mode=0o700)
  os.chown(foreign / "lib", HOMELESS_UID, HOMELESS_UID)
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(foreign))
  with pytest.warns(RuntimeWarning, match=f"owned by another user \\(uid {HOMELESS_UID}\\)"):
    location = cache_location()
  assert foreign not in location.read


def test_umask_000_makes_a_private_cache(tmp_path: Path) -> None:
  """Whatever the umask (000: common in containers and shared CI runners), the cache's folders are 0700 and its files
  0600: no one else can plant code in it."""
  cache = tmp_path / "cache"
  built(cache, hook="os.umask(0)")
  entries = [cache, *cache.rglob("*")]
  assert len(entries) > 10
  for entry in entries:
    mode = stat.S_IMODE(entry.lstat().st_mode)
    assert mode == (0o700 if entry.is_dir() else 0o600), f"{entry}: {oct(mode)}"


def test_an_index_entry_pointing_outside_the_cache_is_never_loaded(copied_cache: Path, tmp_path: Path) -> None:
  """An index entry (with a matching record) rewritten to lead out of the cache, to a library whose constructor
  would run when loaded, and no compiler: the entry is not a key, nothing outside the cache is loaded."""
  marker = tmp_path / "constructor-ran"
  outside = copied_cache.parent / "outside"
  outside.mkdir()
  source = outside / "x.c"
  source.write_text(
    f'#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {{ fclose(fopen("{marker}", "w")); }}\n'
  )
  subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(outside / "x.so")], check=True)
  (outside / "x.so.sha256").write_text(_digest((outside / "x.so").read_bytes()))
  for entry in (copied_cache / "index").iterdir():
    if not entry.name.endswith(".sha256"):
      entry.write_text("../../outside/x")
      Path(f"{entry}.sha256").write_text(_digest(b"../../outside/x"))
  proc = run_build(copied_cache, env={"CXX": "/nonexistent/c++"})
  assert proc.returncode != 0 and "has no library built for this code" in proc.stderr
  assert not marker.exists(), "the library outside the cache was loaded"


def _digest(data: bytes) -> str:
  from anvil.codegen.cache import _digest as digest

  return digest(data)


def test_orphaned_temporary_files_are_removed(tmp_path: Path) -> None:
  from anvil.codegen.cache import remove_orphans

  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  (tmp_path / "lib").mkdir()
  (tmp_path / "src" / "k").mkdir(parents=True)
  orphans = [tmp_path / "lib" / f".k.so.{dead.pid}.ab_c.tmp", tmp_path / "src" / "k" / f".jit.cpp.{dead.pid}.x.tmp"]
  alive = tmp_path / "lib" / f".j.so.{os.getpid()}.x1.tmp"
  unknown = tmp_path / "lib" / ".old.tmp"
  for p in [*orphans, alive, unknown]:
    p.write_text("")
  os.utime(unknown, (0, 0))
  assert sorted(remove_orphans(tmp_path)) == sorted([*orphans, unknown])
  assert alive.exists()


# *** compilers ***


GCC_AS_CXX = """
import numpy as np
import anvil as av
from anvil.codegen.jit import CompileError
f = av.NumericalFunction("fault_gcc", lambda x: x.sin(), av.Arg(2))
try:
  f.library
  print("loaded")
except CompileError as e:
  print("refused" if "does not load, so it was not cached" in str(e) else f"other: {e}")
"""


def test_a_c_compiler_as_cxx_caches_nothing(fresh_cache: Path) -> None:
  """gcc compiles C++ but does not link libstdc++: the library does not load, so it must not be cached. In a new
  process: one that has loaded libstdc++ globally (importing ray does) would load it."""
  import anvil as av

  if shutil.which("gcc") is None:
    pytest.skip("no gcc")
  env = {**os.environ, "ANVIL_CACHE_DIR": str(fresh_cache), "PYTHONPATH": str(ROOT), "CXX": "gcc"}
  proc = subprocess.run([sys.executable, "-c", GCC_AS_CXX], env=env, cwd=ROOT, capture_output=True, text=True,
                        timeout=300)  # fmt: skip
  assert proc.stdout.strip().splitlines()[-1:] == ["refused"], proc.stdout + proc.stderr
  assert not list((fresh_cache / "lib").glob("*.so"))
  g = av.NumericalFunction("fault_gcc", lambda x: x.sin(), av.Arg(2))
  np.testing.assert_allclose(g(np.array([0.5, 1.0])), np.sin([0.5, 1.0]), rtol=1e-15)


@pytest.mark.slow
def test_a_warm_cache_needs_no_compiler(copied_cache: Path, tmp_path: Path) -> None:
  no_compiler = {"CXX": "/nonexistent/c++"}
  warm = built(copied_cache, env=no_compiler)
  assert "compile" not in warm["stages"]
  cold = run_build(tmp_path / "empty", env=no_compiler)
  assert cold.returncode != 0 and "has no library built for this code" in cold.stderr


SOLVERS = """
import json, numpy as np
import anvil as av
from anvil.codegen import STAGE_COUNTS
from anvil.sqp import SQPFunction
from tests.conftest import stabilizing_cartpole
f = av.NumericalFunction("sqp_par_f", lambda x, p: ((x - p[:2]) ** 2).sum(), (av.Arg(2), av.Arg(3)))
g = av.NumericalFunction("sqp_par_g", lambda x, p: (x.sum() - p[2]).reshape(1), (av.Arg(2), av.Arg(3)))
res = SQPFunction("sqp_par", f, g)(np.zeros(2), np.array([0.2, 0.3, 0.0]), np.full(2, -np.inf), np.full(2, np.inf),
                                   [-np.inf], [0.0])
sol = stabilizing_cartpole()(np.array([0.3, 0.0, 0.1, 0.0]))
print(json.dumps({"x": res.x.tolist(), "u0": sol.u0.tolist(), "stages": dict(STAGE_COUNTS)}))
"""


@pytest.mark.slow
def test_solvers_load_from_a_warm_cache_without_a_compiler() -> None:
  """An SQP solver and an MPC controller (the shared cart-pole's, in the suite's cache) load where no compiler is."""
  runs = []
  for env in ({}, {"CXX": "/nonexistent/c++"}):
    proc = subprocess.run([sys.executable, "-c", SOLVERS], env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
  warm, deployed = runs
  assert "compile" not in deployed["stages"]
  assert deployed["x"] == warm["x"] and deployed["u0"] == warm["u0"]
  np.testing.assert_allclose(warm["x"], [-0.05, 0.05], atol=1e-8)


def test_a_workspace_too_large_raises_memory_error(fresh_cache: Path) -> None:
  import anvil as av

  n = 6_000_000  # an n x n intermediate: 288 TB, beyond any address space

  def outer(a: av.Tensor) -> av.Tensor:
    x = (a.reshape(-1, 1) * a.reshape(1, -1)).exp().contiguous()
    return x.sum(0).contiguous() * x.sum(1)

  f = av.NumericalFunction("fault_huge", outer, av.Arg(n))
  with pytest.raises(MemoryError, match="fault_huge: not enough memory"):
    f(np.zeros(n))


HEAVY = ("scipy.interpolate", "scipy.linalg", "scipy.sparse.linalg", "scipy.special")


def test_import_anvil_is_lean_and_works_in_little_memory() -> None:
  """`import anvil` imports none of scipy's heavy modules (they start thread pools: under `ulimit -v 250000` the
  import hung in them), and completes under that limit."""
  import resource

  script = f"import sys, anvil; print([m for m in {HEAVY!r} if m in sys.modules])"
  limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (250_000 * 1024, 250_000 * 1024))
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                        preexec_fn=limit)  # fmt: skip
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == "[]"


# *** graphs too deep ***


def _chain(steps: int) -> Callable[[Any], Any]:
  def chained(x: Any) -> Any:
    for _ in range(steps):
      x = x * 1.0001 + 1.0
    return x

  return chained


def test_a_graph_too_deep_is_refused_before_any_build(fresh_cache: Path) -> None:
  import anvil as av
  from anvil.codegen.trace import MAX_DEPTH

  # NOTE: 10^5 chained operations (tinygrad raised "infinite loop in graph_rewrite" after 169 s; 80,000 crash g++)
  f = av.NumericalFunction("deep_chain", _chain(50_000), [av.Arg(3)])
  start = time.perf_counter()
  with pytest.raises(av.GraphTooDeepError, match=rf"deep_chain: .* more than {MAX_DEPTH:,} dependent operations"):
    f(np.ones(3))
  assert time.perf_counter() - start < 60.0  # NOTE: the trace alone, not minutes of rewriting and compiling
  assert not (fresh_cache / "lib").exists() or not any((fresh_cache / "lib").iterdir())


def test_the_depth_limit_counts_the_longest_chain(monkeypatch: pytest.MonkeyPatch) -> None:
  import anvil as av
  from anvil.codegen import trace

  monkeypatch.setattr(trace, "MAX_DEPTH", 100)
  wide = av.NumericalFunction("deep_wide", lambda x: av.Tensor.stack(*(x * float(k) for k in range(200))).sum(0),
                              [av.Arg(3)])  # fmt: skip
  np.testing.assert_allclose(wide(np.ones(3)), np.full(3, sum(range(200))))  # NOTE: 200 products, one sum: shallow
  with pytest.raises(av.GraphTooDeepError, match=r"deep_long: .* \(a NumericalFunction of one or a few steps"):
    _ = av.NumericalFunction("deep_long", _chain(60), [av.Arg(3)]).key
