"""Helpers shared by the benchmarks: compiling and running tight-loop C++ harnesses, timing, tables.

Import as `from benchmarks.common import ...`: the scripts run as modules from the repository root (`-m`).
Method: the box is noisy, so variants are compared within one run, round robin, and reported as medians.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import shutil
import statistics
import subprocess
import time
import timeit
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anvil.codegen import find_compiler

ROOT = Path(__file__).resolve().parent.parent
#: The build stages of anvil's log, as stage_seconds reports them (derive runs inside trace or on its own).
STAGES = ("trace+derive", "schedule", "render", "compile")
STAGE_RE = re.compile(r"^(?P<name>\w+): (?P<stage>trace|derive|schedule|render|compile) (?P<s>[0-9.]+) s$")
OPT_FLAGS = ("-O3", "-fno-math-errno")
CXX_FLAGS = (*OPT_FLAGS, "-std=c++17")
C_FLAGS = (*OPT_FLAGS, "-std=c11")


@dataclass
class Exe:
  """A compiled timing harness: the executable and the object file of the generated code it links."""

  name: str
  path: Path
  obj: Path
  compile_s: float
  y: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class Row:
  """One line of the result table."""

  label: str
  median: str
  best: str = ""
  target: str = ""
  status: str = ""


def sh(cmd: Sequence[str | Path], **kw: Any) -> subprocess.CompletedProcess[str]:
  """Run a command, raising with its output on failure."""
  proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
  if proc.returncode != 0:
    raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}")
  return proc


def load_casadi() -> Any:
  """The casadi module, or None when it is not installed."""
  with contextlib.suppress(ImportError):
    return importlib.import_module("casadi")
  return None


def casadi_solver(ca: Any, name: str, plugin: str, nlp: dict[str, Any], opts: dict[str, Any], notes: list[str]) -> Any:
  """`ca.nlpsol(name, plugin, nlp, opts)`, dropping (and noting) options this CasADi version rejects."""
  while True:
    try:
      return ca.nlpsol(name, plugin, nlp, opts)
    except RuntimeError as e:
      bad = next((k for k in opts if f"'{k}'" in str(e) or f'"{k}"' in str(e)), None)
      if bad is None:
        raise
      notes.append(f"{plugin}: option {bad!r} rejected, dropped")
      opts = {k: v for k, v in opts.items() if k != bad}


class StageRecorder(logging.Handler):
  """Records the `anvil` logger's lines with the perf_counter time they were emitted."""

  def __init__(self) -> None:
    super().__init__(logging.INFO)
    self.records: list[tuple[float, str]] = []
    log = logging.getLogger("anvil")
    log.setLevel(logging.INFO)
    log.addHandler(self)

  def emit(self, record: logging.LogRecord) -> None:
    self.records.append((time.perf_counter(), record.getMessage()))

  def take(self) -> list[tuple[float, str]]:
    out, self.records = self.records, []
    return out


def stage_seconds(records: Sequence[Sequence[Any]]) -> dict[str, float]:
  """Seconds per stage from the logged lines; a stage nested in another of the same function (derive in trace) is
  counted once, in the outer one. Keys: STAGES; `derive` outside trace is added to `trace+derive`."""
  spans = []
  for t_end, msg in records:
    if m := STAGE_RE.match(msg):
      spans.append((m["name"], m["stage"], float(t_end) - float(m["s"]), float(t_end)))
  out = dict.fromkeys(STAGES, 0.0)
  eps = 2e-3  # the log has millisecond resolution
  for i, (name, what, a, b) in enumerate(spans):
    if any(
      j != i and n2 == name and a2 - eps <= a and b <= b2 + eps and b2 - a2 > b - a
      for j, (n2, _, a2, b2) in enumerate(spans)
    ):
      continue
    out["trace+derive" if what in ("trace", "derive") else what] += b - a
  return out


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
  """Set environment variables for the duration (anvil reads ANVIL_CACHE_DIR, ANVIL_FMA, ... at each use)."""
  old = {name: os.environ.get(name) for name in values}
  os.environ.update(values)
  try:
    yield
  finally:
    for name, value in old.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value


def anvil_cache(path: Path) -> contextlib.AbstractContextManager[None]:
  """Point anvil's disk cache at `path` for the duration."""
  return environment(ANVIL_CACHE_DIR=str(path))


def shift(v: np.ndarray, block: int, tail: int) -> np.ndarray:
  """The previous solution moved one stage earlier (blocks of `block` entries, the last `tail` entries repeated)."""
  out = v.copy()
  out[: len(v) - block - tail] = v[block : len(v) - tail]
  out[len(v) - block - tail : len(v) - block] = v[len(v) - tail :]
  return out


def fmt_array(a: np.ndarray) -> str:
  return ", ".join(repr(float(v)) for v in a)


def link_harness(name: str, gen_cmd: list[str], harness: Path, out_dir: Path, compile_runs: int = 3) -> Exe:
  """Compile the generated TU (gen_cmd, timed, best of `compile_runs`) and the harness, and link them."""
  obj = out_dir / f"{name}_gen.o"
  compile_s = float("inf")
  for _ in range(compile_runs):  # best of 3: the first run of a compiler on a cold disk cache is slow
    t0 = time.perf_counter()
    sh([*gen_cmd, "-c", "-o", obj])
    compile_s = min(compile_s, time.perf_counter() - t0)
  return link_object(name, obj, compile_s, harness, out_dir)


def link_object(name: str, obj: Path, compile_s: float, harness: Path, out_dir: Path) -> Exe:
  """Compile the harness and link it with the already compiled generated code `obj`."""
  cxx = find_compiler()
  harness_obj = out_dir / f"{name}_harness.o"
  sh([cxx, *CXX_FLAGS, "-I", out_dir, "-c", harness, "-o", harness_obj])
  exe = out_dir / f"{name}_bench"
  sh([cxx, *CXX_FLAGS, harness_obj, obj, "-o", exe, "-lm"])
  return Exe(name, exe, obj, compile_s)


def run_exe(exe: Exe, calls: int, reps: int, warmup: int) -> tuple[np.ndarray, list[float]]:
  """Run a harness; returns its output at the check point and the ns/call of each repetition."""
  lines = sh([exe.path, str(calls), str(reps), str(warmup)]).stdout.splitlines()
  y = np.array([float(v) for v in lines[0].split()[1:]])
  return y, [float(ln.split()[1]) for ln in lines[1:] if ln.startswith("ns ")]


def tight_loops(
  exes: Sequence[Exe], rounds: int, calls: int | dict[str, int], reps: int
) -> dict[str, list[list[float]]]:
  """Round robin over the executables; per executable, the ns/call repetitions of each round.

  `calls` is the number of calls per repetition, one for all or one per executable name.
  """
  samples: dict[str, list[list[float]]] = {e.name: [] for e in exes}
  for r in range(rounds):
    order = exes if r % 2 == 0 else list(reversed(exes))  # alternate who goes first
    for e in order:
      n = calls if isinstance(calls, int) else calls[e.name]
      y, ns = run_exe(e, n, reps, warmup=n // 5)
      e.y = y
      samples[e.name].append(ns)
  return samples


def callgrind_costs(path: Path) -> Counter[str]:
  """Self instruction counts per object file (executable, libm, libc, ...) of a callgrind output file."""
  names: dict[str, str] = {}
  per_object: Counter[str] = Counter()
  current, skip = "?", False
  for ln in path.read_text().splitlines():
    if m := re.match(r"c?ob=\((\d+)\)(?:\s+(.*))?", ln):
      if m.group(2):
        names[m.group(1)] = m.group(2)
      if ln.startswith("ob="):
        current = names.get(m.group(1), "?")
    elif ln.startswith("calls="):
      skip = True  # the next cost line is the inclusive cost of that call, not self cost
    elif ln[:1].isdigit() or ln[:1] in "+-*":
      if skip:
        skip = False
      elif len(parts := ln.split()) >= 2:
        per_object[current] += int(parts[1])
  return per_object


def math_call_sites(obj: Path) -> Counter[str]:
  """Static libm call sites in an object file (objdump -dr relocations)."""
  if not shutil.which("objdump"):
    return Counter()
  text = sh(["objdump", "-dr", obj]).stdout
  return Counter(re.findall(r"R_X86_64_(?:PLT32|PC32)\s+(sin|cos|sincos|tan|sqrt)(?:@\S+)?-0x4", text))


def time_python(fns: dict[str, Callable[[], object]], rounds: int, target_s: float = 0.04) -> dict[str, list[float]]:
  """us/call of each callable, one timeit sample per round, round robin."""
  numbers = {}
  for name, fn in fns.items():
    n, _ = timeit.Timer(fn).autorange()
    per_call = timeit.timeit(fn, number=n) / n
    numbers[name] = max(1, int(target_s / per_call))
  out: dict[str, list[float]] = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      out[name].append(timeit.timeit(fn, number=numbers[name]) / numbers[name] * 1e6)
  return out


def median_seconds(fn: Callable[[], Any], rounds: int) -> float:
  """Median seconds of `rounds` calls of fn (each timed alone: a solver's call, not a tight loop)."""
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def med(xs: Sequence[float]) -> float:
  return statistics.median(xs)


def flat(rounds: Sequence[Sequence[float]]) -> list[float]:
  return [v for r in rounds for v in r]


def verdict(value: float, limit: float) -> str:
  return "PASS" if value <= limit else "MISS"


def print_markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
  """A table as Markdown, the form a closing note quotes."""
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for row in rows:
    print("| " + " | ".join(row) + " |")


def print_table(rows: Sequence[Row]) -> None:
  head = Row("quantity", "median", "best", "target", "status")
  w = [max(len(getattr(r, a)) for r in [head, *rows]) for a in ("label", "median", "best", "target")]
  for i, r in enumerate([head, *rows]):
    print(f"  {r.label:<{w[0]}}  {r.median:>{w[1]}}  {r.best:>{w[2]}}  {r.target:>{w[3]}}  {r.status}".rstrip())
    if i == 0:
      print("  " + "-" * (sum(w) + 6 + 8))
