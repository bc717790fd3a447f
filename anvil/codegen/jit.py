"""The JIT: find a C++ compiler, compile generated code into a cached shared library, load it with ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anvil.codegen.cache import (
  cache_dir,
  discard,
  find_artifact,
  publish,
  read_artifact,
  temporary_beside,
  write_atomic,
)
from anvil.codegen.forksafe import owned_lock
from anvil.version import __version__

#: Flags of every JIT build; extra flags may be appended through the ANVIL_CXXFLAGS environment variable. Symbols are
#: hidden but for the entry points (ANVIL_EXPORT): two libraries of functions with one name (a controller rebuilt with
#: another model in one session) would otherwise share their vague-linkage symbols process-wide (GCC binds the static
#: tables of class templates as STB_GNU_UNIQUE), the second computing with the first's tables.
CXXFLAGS = ("-O3", "-std=c++17", "-fPIC", "-shared", "-fno-math-errno", "-fvisibility=hidden",
            "-fvisibility-inlines-hidden")  # fmt: skip
#: Flags that fit a JIT build to the CPU it is built on, where it also runs, the first set the compiler takes: the
#: vector units the baseline ISA leaves idle (AVX2 on x86-64) run the dense stage kernels and sensitivities 1.2-1.5x
#: faster. No fused multiply-adds (-ffp-contract=off): results stay the baseline build's. Two vectorizer paths stay off,
#: each of which GCC 12 miscompiled here: 512-bit vectors in the auto-vectorizer (its SLP vectorizer changed the Riccati
#: QP's results; anvil/dense.hpp's own vectors, which keep each sum's order, do use AVX-512's) and loops if-converted
#: into masked loads (a guarded load at a negative offset, as rendered kernels have, read zeros). None with
#: ANVIL_PORTABLE=1 (a cache shared by machines with other CPUs). The last set is for compilers without GCC's
#: vectorizer options (clang warns about them: an exported module's CMake build with ANVIL_NATIVE tests each set with
#: warnings as errors).
HOST_FLAGS = (
  ("-march=native", "-mprefer-vector-width=256", "-ffp-contract=off", "-fno-tree-loop-if-convert"),
  ("-march=native", "-ffp-contract=off", "-fno-tree-loop-if-convert"),
  ("-march=native", "-ffp-contract=off"),
)
COMPILERS = ("c++", "g++", "clang++")
#: Flags of every CUDA module build: nvcc drives the host C++ compiler; the module loads the CUDA driver and NVRTC at
#: run time, so it links neither the CUDA runtime nor the driver. ANVIL_CXXFLAGS does not apply to it.
NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-fno-math-errno,-fvisibility=hidden", "--cudart",
              "none")  # fmt: skip


class CompilerNotFoundError(RuntimeError):
  """No C++17 compiler could be found."""


class CompileError(RuntimeError):
  """The C++ compiler rejected generated code; the message carries its first error lines and the kept source."""


def find_compiler() -> str:
  """The C++ compiler: $CXX if set, else the first of c++, g++, clang++ on PATH."""
  if cxx := os.environ.get("CXX"):
    if (path := shutil.which(cxx)) is None:
      raise CompilerNotFoundError(
        f"CXX={cxx!r} is not an executable on PATH; install a C++17 compiler "
        "(Debian/Ubuntu: apt-get install g++) or point CXX at one"
      )
    return path
  for name in COMPILERS:
    if path := shutil.which(name):
      return path
  raise CompilerNotFoundError(
    "no C++ compiler found (looked for $CXX, c++, g++, clang++); install one, e.g. "
    "`apt-get install g++` (Debian/Ubuntu), `xcode-select --install` (macOS), or set CXX"
  )


def find_nvcc() -> str:
  """nvcc: $NVCC if set, else nvcc on PATH, else $CUDA_PATH/bin/nvcc ($CUDA_PATH defaults to /usr/local/cuda)."""
  if nvcc := os.environ.get("NVCC"):
    if (path := shutil.which(nvcc)) is None:
      raise CompilerNotFoundError(f"NVCC={nvcc!r} is not an executable; install the CUDA toolkit or point NVCC at nvcc")
    return path
  for candidate in ("nvcc", os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "bin", "nvcc")):
    if path := shutil.which(candidate):
      return path
  raise CompilerNotFoundError(
    "nvcc not found (looked for $NVCC, nvcc on PATH, $CUDA_PATH/bin): install the CUDA toolkit"
  )


@dataclass(frozen=True)
class Toolchain:
  """A compiler and the flags that build a shared library from one C++ translation unit."""

  compiler: str
  flags: tuple[str, ...]

  @classmethod
  def for_device(cls, device: str) -> Toolchain:
    """nvcc for CUDA modules; the C++ compiler and `cxxflags()` otherwise."""
    if device == "CUDA":
      return cls(find_nvcc(), NVCC_FLAGS)
    return cls(find_compiler(), cxxflags())


def find_c_compiler() -> str:
  """The C compiler for C sources built outside the JIT (e.g. OSQP's in a standalone build): $CC if set, else the
  first of cc, gcc, clang on PATH."""
  for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
    if name and (path := shutil.which(name)):
      return path
  raise CompilerNotFoundError("no C compiler found (looked for $CC, cc, gcc, clang); install one, e.g. gcc")


@functools.cache
def compiler_identity(cxx: str) -> str:
  """The compiler's path and first `--version` line (part of every cache key)."""
  try:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
  except OSError as e:
    raise CompilerNotFoundError(f"cannot run the C++ compiler {cxx}: {e}") from e
  # NOTE: nvcc's first line names no version; its last line does.
  lines = out.splitlines()
  return f"{cxx}|{lines[0] if lines else ''}|{lines[-1] if lines else ''}"


#: Flags of builds with fused multiply-adds (ANVIL_FMA=1; -DANVIL_FMA=ON in an exported module's CMake build), after
#: the host's (which turn them off): the compiler contracts a * b + c into one instruction where the target has one.
#: ANVIL_FMA tells anvil/support.hpp, whose straight-line chunks need one more optimization for g++ to fuse them.
FMA_FLAGS = ("-ffp-contract=fast", "-DANVIL_FMA")


def cxxflags() -> tuple[str, ...]:
  """The JIT's compiler flags: CXXFLAGS, the host's (`host_flags`), FMA_FLAGS with `fused_multiply_adds()`, then
  ANVIL_CXXFLAGS."""
  fma = FMA_FLAGS if fused_multiply_adds() else ()
  return CXXFLAGS + host_flags(find_compiler()) + fma + tuple(os.environ.get("ANVIL_CXXFLAGS", "").split())


def fused_multiply_adds() -> bool:
  """Whether JIT builds fuse multiply-adds (ANVIL_FMA set to anything but 0): faster where the CPU has them, results
  no longer equal to the bit to the default builds' (nor across CPUs: a library is keyed on its flags and the CPU)."""
  return os.environ.get("ANVIL_FMA", "0") not in ("", "0")


def portable_builds() -> bool:
  """Whether JIT builds are for the baseline ISA (ANVIL_PORTABLE set to anything but 0) instead of this CPU."""
  return os.environ.get("ANVIL_PORTABLE", "0") not in ("", "0")


def _accepts(cxx: str, flags: tuple[str, ...]) -> bool:
  try:
    cmd = [cxx, *flags, "-x", "c++", "-fsyntax-only", "-"]
    return subprocess.run(cmd, input="int anvil_probe;\n", capture_output=True, text=True, timeout=60).returncode == 0
  except (OSError, subprocess.TimeoutExpired):
    return False


@functools.cache
def _host_flags(cxx: str) -> tuple[str, ...]:
  return next((flags for flags in HOST_FLAGS if _accepts(cxx, flags)), ())


def host_flags(cxx: str) -> tuple[str, ...]:
  """The first of HOST_FLAGS that `cxx` takes, unless builds are `portable_builds()`; else none."""
  return () if portable_builds() else _host_flags(cxx)


@functools.cache
def _cpu_identity() -> str:
  """This machine's architecture and CPU (model and feature flags where the OS lists them)."""
  described = platform.processor()
  try:
    lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
  except OSError:
    lines = []
  keys = ("model name", "flags", "Features", "CPU implementer", "CPU part")
  fields = (line.partition(":") for line in lines)
  listed = {k.strip(): v.strip() for k, colon, v in fields if colon and k.strip() in keys}
  return f"{platform.machine()}|{described}|{sorted(listed.items())}"


def host_tag() -> str:
  """What a library built here for this CPU is keyed on (its architecture and CPU; empty when builds are portable):
  a cache shared with another CPU never hands it a library built for this one."""
  return "" if portable_builds() else hashlib.sha256(_cpu_identity().encode()).hexdigest()[:16]


@functools.cache
def sources_fingerprint(root: Path) -> str:
  """anvil's version and a hash of every Python source, jinja2 template and runtime header under `root`."""
  h = hashlib.sha256(__version__.encode())
  for path in sorted([*root.rglob("*.py"), *root.rglob("*.j2"), *root.rglob("*.hpp")]):
    h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
  return h.hexdigest()[:16]


def codegen_fingerprint() -> str:
  """The fingerprint of the code generator's own sources and templates, so any change to them (an upgrade, or an edit
  in an editable install) invalidates every cached artefact."""
  return sources_fingerprint(Path(__file__).parent)


def library_key(source_key: str, device: str = "CPU") -> str:
  """Cache key of a compiled library: the generated code's key plus compiler, flags and code generator.

  Without a compiler (a deployment machine with a warm cache) it is the key of the library last built for the same
  code on `device`, by whichever compiler and flags built it; CompilerNotFoundError when there is none."""
  portable = hashlib.sha256(f"{source_key}|{device}|{codegen_fingerprint()}|{host_tag()}".encode()).hexdigest()[:32]
  try:
    tc = Toolchain.for_device(device)
  except CompilerNotFoundError as e:
    if (key := _last_built(portable)) is not None:
      return key
    raise CompilerNotFoundError(f"{e}; the cache ({cache_dir()}) has no library built for this code either") from None
  ident = f"{source_key}|{compiler_identity(tc.compiler)}|{' '.join(tc.flags)}|{codegen_fingerprint()}|{host_tag()}"
  key = hashlib.sha256(ident.encode()).hexdigest()[:32]
  _PORTABLE_KEYS[key] = portable
  return key


#: The compiler-independent key of each library key computed in this process (what `_last_built` looks up).
_PORTABLE_KEYS: dict[str, str] = {}


def _last_built(portable: str) -> str | None:
  """The key of the library last built for the compiler-independent key `portable`, if it is in the cache."""
  if (data := read_artifact(f"index/{portable}")) is None:
    return None
  key = data.decode(errors="replace")
  return key if is_key(key) and find_artifact(f"lib/{key}.so") is not None else None


def is_key(text: str) -> bool:
  """Whether `text` is a cache key as anvil makes them (32 lowercase hex digits): what else an index entry or a
  shipped library names is never joined into a path."""
  return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def store_library(key: str, data: bytes) -> Path:
  """Put the compiled library `data` into the cache as the library of `key`; returns its path."""
  path = cache_dir() / "lib" / f"{key}.so"
  write_atomic(path, data)
  _index(key)
  return path


def _index(key: str) -> None:
  """Record `key` as the library last built for its compiler-independent key."""
  if (portable := _PORTABLE_KEYS.get(key)) is not None:
    write_atomic(cache_dir() / "index" / portable, key)


@dataclass(frozen=True)
class ShippedLibrary:
  """A compiled library's bytes and cache keys, to be put into another process's disk cache (on another machine):
  code that builds the same library there then finds it instead of compiling, where the compiler, flags and CPU are
  the same (the key holds them); elsewhere the key differs and it builds its own.

  Attributes:
    key: the library's cache key.
    portable: its compiler-independent key, when known (a machine without a compiler finds the library by it).
    data: the library file's bytes.
  """

  key: str
  portable: str | None
  data: bytes

  def __post_init__(self) -> None:
    if not is_key(self.key) or (self.portable is not None and not is_key(self.portable)):
      raise ValueError(f"ShippedLibrary: keys are 32 hex digits, got {self.key!r} and {self.portable!r}")

  @classmethod
  def of(cls, path: str | Path) -> ShippedLibrary:
    """The library at `path` (in the cache: "<cache>/lib/<key>.so")."""
    key = Path(path).stem
    return cls(key, _PORTABLE_KEYS.get(key), Path(path).read_bytes())

  def install(self) -> None:
    """Put it into this process's cache, unless it is there."""
    if find_artifact(f"lib/{self.key}.so") is None:
      write_atomic(cache_dir() / "lib" / f"{self.key}.so", self.data)
      if self.portable is not None:
        write_atomic(cache_dir() / "index" / self.portable, self.key)


def cached_library(key: str, entry: str | None = None) -> Path | None:
  """The cached library for `key` when it matches its record, loads and exports `entry` (an entry point it must
  have: `anvil_<name>_ws_new`); None when it must be (re)built, a library that does not load or lacks the entry point
  set aside first, whatever its record says (the rebuilt one is loaded from its own file, a new handle)."""
  if (path := find_artifact(f"lib/{key}.so")) is None:
    return None
  try:
    lib = load_library(path)
  except LibraryLoadError:
    discard(path)
    return None
  if entry is not None and not hasattr(lib, entry):
    with _LOADING:
      _LOADED.pop(str(path), None)
    discard(path)
    return None
  return path


class LibraryLoadError(RuntimeError):
  """A shared library could not be loaded."""


_LOADED: dict[str, ctypes.PyDLL] = {}
_LOADING = owned_lock(sys.modules[__name__], "_LOADING")


def load_library(path: Path | str) -> ctypes.PyDLL:
  """Load a compiled library (once per process). PyDLL keeps the GIL during calls, so one workspace is never used by
  two threads at once."""
  with _LOADING:
    if (lib := _LOADED.get(str(path))) is None:
      lib = _LOADED[str(path)] = _open(Path(path))
  return lib


def _open(path: Path) -> ctypes.PyDLL:
  try:
    return ctypes.PyDLL(str(path))
  except OSError as e:
    raise LibraryLoadError(f"cannot load the library {path}: {e}") from None


#: Flags for C sources linked into a library (OSQP's embedded solver): compiled as C, symbols hidden so they never
#: clash with another copy (e.g. the osqp Python extension) in the same process.
CFLAGS = ("-x", "c", "-std=c99", "-O3", "-fPIC", "-fvisibility=hidden")


def _run_compiler(cmd: list[str], what: str, kept: Path) -> None:
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True)
  except OSError as e:
    raise CompilerNotFoundError(f"{what}: cannot run the C++ compiler {cmd[0]}: {e}") from e
  if proc.returncode != 0:
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()
    first = "\n".join(errors[:10])
    raise CompileError(
      f"{what}: the C++ compiler failed (exit {proc.returncode}); source kept at {kept}\n"
      f"command: {' '.join(cmd)}\n{first}"
    )


def _c_object(cxx: str, src_dir: Path, filename: str, text: str, includes: list[str], what: str) -> Path:
  """A C source compiled once into the cache, keyed on its text, its include folder's content and the flags."""
  digest = hashlib.sha256(f"{compiler_identity(cxx)}|{CFLAGS}|{includes}|{filename}|{text}".encode())
  for inc in sorted(includes):
    for header in sorted(Path(inc).glob("*.h")):
      digest.update(header.name.encode() + header.read_bytes())
  name = f"{digest.hexdigest()[:32]}.o"
  if (found := find_artifact(f"obj/{name}")) is not None:
    return found
  obj = cache_dir() / "obj" / name
  source = src_dir / filename
  _compile_to([cxx, *CFLAGS, *(f"-I{i}" for i in includes), "-c", str(source)], obj, what, source)
  return obj


def _compile_to(cmd: list[str], out: Path, what: str, kept: Path, loads: bool = False, recorded: bool = True) -> None:
  """Run `cmd -o <private file>` and publish the result as `out` (renamed atomically; a `recorded` artefact flushed
  and recorded first); nothing is left behind on failure. A library (`loads`) is loaded from the private file first
  and not cached when that fails (e.g. $CXX is a C compiler that left C++ symbols unresolved); it stays loaded for
  `load_library(out)`."""
  tmp = temporary_beside(out)
  try:
    _run_compiler([*cmd, "-o", str(tmp)], what, kept)
    if loads:
      try:
        lib = _open(tmp)
      except LibraryLoadError as e:
        raise CompileError(f"{what}: the compiler ({cmd[0]}) built a library that does not load, so it was not "
                           f"cached: {e}; is it a C++ compiler? (set CXX, e.g. CXX=g++)") from None  # fmt: skip
      with _LOADING:
        _LOADED[str(out)] = lib
    publish(tmp, out, recorded)
  finally:
    tmp.unlink(missing_ok=True)


def compile_library(
  key: str,
  sources: dict[str, str],
  main: str,
  what: str,
  c_sources: Sequence[str] = (),
  include_dirs: Sequence[str] = (),
  toolchain: Toolchain | None = None,
  cxx_parts: Sequence[str] = (),
) -> Path:
  """Compile `main` (one of `sources`, all written beside it) into the cached library for `key`.

  Sources are kept under the cache's `src/<key>/` so a compiler error can point at them. `c_sources` (also among
  `sources`) are compiled as C into cached objects and linked in; `cxx_parts` (also among `sources`) are further C++
  translation units, compiled beside `main` and linked in; `include_dirs` are relative to the source folder.
  Concurrent builds of the same key each compile into a private file and atomically rename it into place. `toolchain`
  (default: the CPU one) builds `main`; C sources and parts always use the CPU one.
  """
  cxx = find_compiler()
  src_dir = cache_dir() / "src" / key
  for filename, text in sources.items():
    write_atomic(src_dir / filename, text, recorded=False)
  includes = [str(src_dir / d) for d in include_dirs]
  out = cache_dir() / "lib" / f"{key}.so"
  if not c_sources and not cxx_parts:
    tc = toolchain or Toolchain(cxx, cxxflags())
    link = [tc.compiler, *tc.flags, *(f"-I{i}" for i in includes), str(src_dir / main)]
  else:
    link = [cxx, *cxxflags(), *_compile_objects(cxx, src_dir, sources, [main, *cxx_parts], c_sources, includes, what)]
  _compile_to(link, out, what, src_dir / main, loads=True)
  _index(key)
  return out


def _compile_objects(
  cxx: str,
  src_dir: Path,
  sources: dict[str, str],
  units: list[str],
  c_sources: Sequence[str],
  includes: list[str],
  what: str,
) -> list[str]:
  """The objects of a library of several translation units: the C++ `units` compiled side by side with the C sources
  (cached objects), in parallel. The C++ objects are intermediates of this build, kept beside their sources."""
  flags = [cxx, *(f for f in cxxflags() if f != "-shared"), *(f"-I{i}" for i in includes), "-c"]
  objects = [src_dir / f"{Path(unit).stem}.o" for unit in units]
  with ThreadPoolExecutor(max_workers=min(len(c_sources) + len(units), os.cpu_count() or 2)) as pool:
    cxx_jobs = [
      pool.submit(_compile_to, [*flags, str(src_dir / u)], o, what, src_dir / u, recorded=False)
      for u, o in zip(units, objects, strict=True)
    ]
    c_objects = [str(o) for o in pool.map(lambda c: _c_object(cxx, src_dir, c, sources[c], includes, what), c_sources)]
    for job in cxx_jobs:
      job.result()
  return [*map(str, objects), *c_objects]


@functools.cache
def array_data_offset() -> int | None:
  """Byte offset of the data pointer inside a numpy array object, or None if this numpy does not match the layout."""
  offset = object.__basicsize__
  probe = np.arange(3.0)
  found = ctypes.c_void_p.from_address(id(probe) + offset).value
  return offset if found == probe.ctypes.data else None
