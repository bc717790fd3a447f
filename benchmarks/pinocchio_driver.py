"""Pinocchio's C++ timings (aba, computeABADerivatives, rnea, crba) on a URDF model, for comparisons with anvil.

The driver benchmarks/pinocchio/driver.cpp is compiled once (about 2 minutes: Pinocchio is header-only templates) into
a cache folder ($ANVIL_BENCH_CACHE, else ~/.cache/anvil-bench; keyed by a hash of the source, the Pinocchio version,
the compiler and the flags) against the pip wheel `pin` (`libpinocchio`: headers and libpinocchio_* under the cmeel
prefix in site-packages), with `-O3 -march=native -DNDEBUG -std=c++17 -ffp-contract=off` (no fused multiply-adds,
as anvil's default builds; `fma=True`: -ffp-contract=fast, a driver of its own). The algorithms are compiled in the
driver (Pinocchio's explicit template instantiations are not used, so they get -march=native too); only the URDF parser
runs in the wheel's libpinocchio_parsers. Two things the wheel does not ship are taken from elsewhere:
- Eigen (a build-only dependency of the wheels): $EIGEN3_INCLUDE_DIR, the cmeel prefix (pip `cmeel-eigen`),
  /usr/include/eigen3 or /usr/local/include/eigen3 (apt `libeigen3-dev`), or the copy bundled with casadi.
- urdfdom_headers (`urdf_model/*.h`, also build-only): pinocchio/parsers/urdf.hpp includes them for the overloads
  taking a parsed ::urdf::ModelInterface, which the driver does not call (it passes file names, parsed inside
  libpinocchio_parsers), so two one-line stubs declaring ::urdf::ModelInterface and ::urdf::Pose stand in for them.
The model objects cross into libpinocchio_parsers, which was built for baseline x86-64 (Eigen's 16-byte alignment,
malloc taken as aligned); -march=native alone would make Eigen align to 32 or 64 bytes and allocate with its own
aligned malloc, and the driver crashed freeing the parser's model. `-DEIGEN_MAX_ALIGN_BYTES=16
-DEIGEN_MALLOC_ALREADY_ALIGNED=1` keep the wheel's ABI (the vector instructions are still AVX2/AVX-512).

Standalone: `.venv/bin/python -m benchmarks.pinocchio_driver [robot ...] [--calls N] [--repeats R]` prints a table.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from anvil.codegen import find_compiler

log = logging.getLogger(__name__)

DRIVER_SOURCE = Path(__file__).resolve().parent / "pinocchio" / "driver.cpp"
#: The algorithms the driver times, in its output's order: the keys of pinocchio_times's result.
ALGORITHMS = ("aba", "aba_derivatives", "rnea", "crba")
OPT_FLAGS = ("-O3", "-march=native", "-DNDEBUG", "-std=c++17")
#: The wheel's ABI (see the module's docstring) and the definitions its CMake targets give their users.
ABI_FLAGS = (
  "-DEIGEN_MAX_ALIGN_BYTES=16",
  "-DEIGEN_MALLOC_ALREADY_ALIGNED=1",
  "-DBOOST_MPL_LIMIT_LIST_SIZE=30",
  "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
  "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS",
  "-DBOOST_FUSION_INVOKE_MAX_ARITY=12",
  "-DPINOCCHIO_WITH_URDFDOM",
)
LIBS = ("-lpinocchio_parsers", "-lpinocchio_default")
#: Stand-ins for urdfdom_headers: the declarations pinocchio/parsers/urdf.hpp needs from them.
URDF_STUBS = {
  "urdf_model/model.h": "#pragma once\nnamespace urdf {\nclass ModelInterface;\n}\n",
  "urdf_model/pose.h": "#pragma once\nnamespace urdf {\nclass Pose;\n}\n",
}
#: The robots of the standalone table: (floating base, joints locked at their neutral value).
TABLE_ROBOTS: dict[str, tuple[bool, tuple[str, ...]]] = {
  "panda": (False, ("panda_finger_joint1", "panda_finger_joint2")),
  "ur5": (False, ()),
  "solo12": (True, ()),
  "talos": (True, ()),
}


def cmeel_prefix() -> Path:
  """The cmeel prefix holding the `pin` wheel's C++ headers and libraries; RuntimeError when there is none."""
  for entry in sys.path:
    prefix = Path(entry or ".") / "cmeel.prefix"
    headers = (prefix / "include" / "pinocchio" / "config.hpp").is_file()
    if headers and any((prefix / "lib").glob("libpinocchio_parsers.*")):
      return prefix
  raise RuntimeError(
    "Pinocchio's C++ headers and libraries were not found (no cmeel.prefix with include/pinocchio and "
    "lib/libpinocchio_parsers on sys.path): install the pip wheel, e.g. `pip install pin==4.0.0`"
  )


def pinocchio_version(prefix: Path) -> str:
  """The Pinocchio version of the headers under `prefix` (PINOCCHIO_VERSION in pinocchio/config.hpp)."""
  text = (prefix / "include" / "pinocchio" / "config.hpp").read_text()
  match = re.search(r'#\s*define\s+PINOCCHIO_VERSION\s+"([^"]+)"', text)
  return match.group(1) if match else "unknown"


def eigen_include(prefix: Path) -> Path:
  """A folder holding Eigen/Core (see the module's docstring for the order); RuntimeError when there is none."""
  candidates = [Path(p) for p in (os.environ.get("EIGEN3_INCLUDE_DIR"),) if p]
  candidates += [prefix / "include" / "eigen3", Path(sys.prefix) / "include" / "eigen3"]
  candidates += [Path("/usr/include/eigen3"), Path("/usr/local/include/eigen3")]
  spec = importlib.util.find_spec("casadi")
  if spec is not None and spec.origin is not None:
    candidates.append(Path(spec.origin).parent / "include" / "eigen3")
  for candidate in candidates:
    if (candidate / "Eigen" / "Core").is_file():
      return candidate
  raise RuntimeError(
    "Eigen's headers were not found (Pinocchio's wheels do not ship them): `pip install cmeel-eigen`, "
    "`apt-get install libeigen3-dev`, or set EIGEN3_INCLUDE_DIR to the folder holding Eigen/Core"
  )


def cache_root() -> Path:
  """The folder the compiled driver is kept under: $ANVIL_BENCH_CACHE, else ~/.cache/anvil-bench."""
  if root := os.environ.get("ANVIL_BENCH_CACHE"):
    return Path(root)
  return Path.home() / ".cache" / "anvil-bench"


def contraction(fma: bool) -> str:
  """The flag that fuses multiply-adds (`fma`) or keeps every multiplication and addition rounded apart."""
  return "-ffp-contract=fast" if fma else "-ffp-contract=off"


def _build_command(cxx: str, prefix: Path, eigen: Path, stubs: Path, out: Path, fma: bool) -> list[str]:
  """The compile-and-link command of the driver, writing the executable `out`."""
  lib = prefix / "lib"
  return [
    cxx,
    *OPT_FLAGS,
    contraction(fma),
    *ABI_FLAGS,
    f"-I{prefix / 'include'}",
    "-isystem",
    str(eigen),
    "-isystem",
    str(stubs),
    str(DRIVER_SOURCE),
    "-o",
    str(out),
    f"-L{lib}",
    f"-Wl,-rpath,{lib}",
    *LIBS,
  ]


@functools.cache
def driver_path(fma: bool = False) -> Path:
  """The compiled driver (with fused multiply-adds when `fma`), built on first use (once per process, reused from the
  cache folder across processes)."""
  if not DRIVER_SOURCE.is_file():
    raise RuntimeError(f"the driver's source {DRIVER_SOURCE} is missing")
  prefix = cmeel_prefix()
  eigen = eigen_include(prefix)
  cxx = find_compiler()
  version = pinocchio_version(prefix)
  key = hashlib.sha256()
  for part in (DRIVER_SOURCE.read_bytes(), version.encode(), cxx.encode(), str(prefix).encode(), str(eigen).encode()):
    key.update(part)
    key.update(b"\0")
  key.update(" ".join((*OPT_FLAGS, contraction(fma), *ABI_FLAGS, *LIBS)).encode())
  folder = cache_root() / "pinocchio" / f"{version}-{key.hexdigest()[:16]}"
  exe = folder / "driver"
  if exe.is_file():
    return exe
  folder.mkdir(parents=True, exist_ok=True)
  stubs = folder / "urdf_stubs"
  for name, text in URDF_STUBS.items():
    (stubs / name).parent.mkdir(parents=True, exist_ok=True)
    (stubs / name).write_text(text)
  # Built under a temporary name, then renamed: concurrent builds never see a half-written executable.
  fd, tmp_name = tempfile.mkstemp(prefix="driver.", suffix=".tmp", dir=folder)
  os.close(fd)
  tmp = Path(tmp_name)
  cmd = _build_command(cxx, prefix, eigen, stubs, tmp, fma)
  log.info("compiling the Pinocchio %s driver (about 2 minutes): %s", version, " ".join(cmd))
  start = time.perf_counter()
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
      raise RuntimeError(f"compiling the Pinocchio driver failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    tmp.chmod(0o755)
    os.replace(tmp, exe)
  finally:
    tmp.unlink(missing_ok=True)
  log.info("compiled the Pinocchio driver in %.0f s: %s", time.perf_counter() - start, exe)
  return exe


def driver_available() -> bool:
  """Whether the driver can be built (or is): Pinocchio's wheel, Eigen's headers and a C++ compiler are there."""
  try:
    eigen_include(cmeel_prefix())
    find_compiler()
  except RuntimeError:
    return False
  return DRIVER_SOURCE.is_file()


def parse_output(text: str) -> dict[str, tuple[float, float]]:
  """The driver's `<name> <min_us> <median_us>` lines as {name: (min, median)}; RuntimeError if one is missing."""
  times: dict[str, tuple[float, float]] = {}
  for line in text.splitlines():
    fields = line.split()
    if len(fields) == 3 and fields[0] in ALGORITHMS:
      times[fields[0]] = (float(fields[1]), float(fields[2]))
  if missing := [name for name in ALGORITHMS if name not in times]:
    raise RuntimeError(f"the Pinocchio driver's output lacks {', '.join(missing)}:\n{text}")
  return times


def pinocchio_times(
  urdf: str | Path,
  *,
  floating_base: bool = False,
  locked_joints: Sequence[str] = (),
  calls: int = 2000,
  repeats: int = 5,
  fma: bool = False,
) -> dict[str, tuple[float, float]]:
  """Pinocchio's C++ time per call (µs: min and median over `repeats` repeats of `calls` calls) of each algorithm.

  Keys: "aba" (aba(model, data, q, v, tau)), "aba_derivatives" (computeABADerivatives(model, data, q, v, tau)),
  "rnea" (rnea(model, data, q, v, a)), "crba" (crba(model, data, q)), with Pinocchio 4's default (LOCAL) convention.
  The model is `urdf` (a free-flyer root joint when `floating_base`), reduced by pinocchio::buildReducedModel with
  `locked_joints` held at their neutral value. The inputs are random (fixed seed), q within the position limits.
  `fma`: the driver built with fused multiply-adds.
  """
  if isinstance(locked_joints, str):
    raise TypeError("locked_joints takes a sequence of joint names, not one string")
  if calls < 1 or repeats < 1:
    raise ValueError(f"calls and repeats must be positive (got {calls}, {repeats})")
  path = Path(urdf)
  if not path.is_file():
    raise FileNotFoundError(f"no URDF file {path}")
  cmd = [str(driver_path(fma)), str(path), "--calls", str(calls), "--repeats", str(repeats)]
  if floating_base:
    cmd.append("--free-flyer")
  if locked_joints:
    if bad := [name for name in locked_joints if not name or "," in name]:
      raise ValueError(f"joint names must be non-empty and free of commas: {bad}")
    cmd += ["--lock", ",".join(locked_joints)]
  proc = subprocess.run(cmd, capture_output=True, text=True)
  if proc.returncode != 0:
    raise RuntimeError(f"the Pinocchio driver failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
  return parse_output(proc.stdout)


def _robot_loader(name: str) -> type:
  """example-robot-data's loader class of the robot `name` (ValueError listing the names when it has none)."""
  try:
    from example_robot_data.robots_loader import ROBOTS  # imports pinocchio's Python bindings
  except ImportError as e:
    raise RuntimeError(
      "example-robot-data's loaders are not importable: `pip install example-robot-data example-robot-data-loaders`"
    ) from e
  if name not in ROBOTS:
    raise ValueError(f"example-robot-data has no robot {name!r}; it has {', '.join(sorted(ROBOTS))}")
  return ROBOTS[name]


def robot_urdf(name: str) -> Path:
  """The URDF file of example-robot-data's robot `name` (a key of example_robot_data.robots_loader.ROBOTS).

  The path is the loader's `path`/`urdf_subpath`/`urdf_filename` under the robots folder getModelPath finds (the
  wheel's share/example-robot-data/robots); no model is built. Meshes are referenced as package:// URIs, which the
  dynamics do not need. Some robots ("cassie") are described by SDF only: ValueError.
  """
  from example_robot_data.utils import getModelPath

  loader = _robot_loader(name)
  if not loader.urdf_filename:
    raise ValueError(f"example-robot-data's {name!r} has no URDF (its model is {loader.sdf_filename or 'unknown'})")
  subpath = os.path.join(loader.path, loader.urdf_subpath, loader.urdf_filename)
  return (Path(getModelPath(subpath)) / subpath).resolve()


def robot_floating_base(name: str) -> bool:
  """Whether example-robot-data's loader puts a free-flyer root joint under the robot `name` (legged robots)."""
  return bool(_robot_loader(name).free_flyer)


def main(argv: Sequence[str] | None = None) -> None:
  """Print Pinocchio's times for some example-robot-data robots (the free flyer as their loaders add it)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("robots", nargs="*", default=list(TABLE_ROBOTS), help="example-robot-data names")
  parser.add_argument("--calls", type=int, default=2000)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  print(f"{'robot':<10} {'algorithm':<16} {'min us':>9} {'median us':>10}")
  for robot in args.robots:
    floating, locked = TABLE_ROBOTS.get(robot, (robot_floating_base(robot), ()))
    times = pinocchio_times(
      robot_urdf(robot), floating_base=floating, locked_joints=locked, calls=args.calls, repeats=args.repeats
    )
    for algorithm, (best, median) in times.items():
      print(f"{robot:<10} {algorithm:<16} {best:>9.3f} {median:>10.3f}")


if __name__ == "__main__":
  main()
