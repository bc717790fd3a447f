"""`harness`: an `MPCFunction`'s closed loop in standalone C++ (programs/closed_loop: closed_loop.cpp and its
CMakeLists.txt): the controller's module with the plant (its dynamics) and the stage cost, written, compiled and run
without Python, as a robot's code would run it.

`write_module` writes the module, closed_loop_config.hpp (which module and namespaces the program drives, the default
bounds, the parameter p and the default x0) and a copy of closed_loop.cpp into a folder; `build_harness` compiles them
(OSQP's C sources as C) into an executable; `run_harness` runs it and reads its CSV back (`HarnessRun`).
examples/cartpole_cpp.py writes the cart-pole's; tests/integration/test_mpc_harness.py checks it against `simulate`.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

import anvil
from anvil.codegen import NumericalFunction, find_c_compiler, find_compiler
from anvil.mpc import MPCFunction

#: The CMake project of the closed loop (closed_loop.cpp and its CMakeLists.txt), shipped with the package.
PROGRAM = Path(__file__).resolve().parent / "programs" / "closed_loop"
SOURCE = PROGRAM / "closed_loop.cpp"
CONFIG = "closed_loop_config.hpp"
#: The JIT's optimization flags: the harness then computes exactly what the Python controller computes.
FLAGS = ("-O3", "-fno-math-errno")
INCLUDES = (".", "osqp", "osqp/inc/public", "osqp/inc/private")


@dataclass(frozen=True)
class HarnessRun:
  """One run of the harness: x (steps + 1, nx), u (steps, nu), per-step solve times (s, wall clock around call()),
  statuses and SQP iterations per step, the closed-loop cost Σ l(x_t, u_t), and what it printed."""

  x: NDArray[np.float64]
  u: NDArray[np.float64]
  solve_times: NDArray[np.float64]
  statuses: tuple[str, ...]
  iterations: NDArray[np.int64]
  cost: float
  stdout: str


def _c_array(name: str, values: NDArray[np.float64], real: str) -> str:
  items = ", ".join("inf" if v == np.inf else "-inf" if v == -np.inf else repr(float(v)) for v in values.reshape(-1))
  return f"inline constexpr std::array<{real}, {values.size}> {name} = {{{items}}};"


def write_module(
  mpc: MPCFunction, out_dir: str | Path, module: str | None = None, x0: ArrayLike | None = None, p: ArrayLike = ()
) -> Path:
  """Write the controller module (with the dynamics and stage cost: the harness's plant and closed-loop cost),
  closed_loop_config.hpp (the names, the default bounds, the parameter p and the default x0) and closed_loop.cpp into
  out_dir.

  Returns the path of the module's .cpp. module defaults to `<mpc.name>_controller`, x0 to zeros, p to zeros.
  """
  dynamics, cost = mpc.ocp.dynamics, mpc.ocp.stage_cost
  if len(dynamics.inputs) != 2 or not isinstance(cost, NumericalFunction) or len(cost.inputs) != 2:
    raise TypeError(f"{mpc.name}: the harness needs dynamics and a stage cost that are NumericalFunctions of (x, u)")
  module = module or f"{mpc.name}_controller"
  out = Path(out_dir)
  _, source = anvil.generate_module(module, [mpc, dynamics, cost], out_dir=out)
  x_init = np.zeros(mpc.nx) if x0 is None else np.asarray(x0, dtype=np.float64).reshape(mpc.nx)
  params = np.broadcast_to(np.asarray(p, dtype=np.float64), (mpc.N + 1, mpc.np)) if mpc.np else np.zeros(0)
  arrays = {**mpc.defaults, "p": params, "x0": x_init}
  lines = [
    "// Written by anvil.mpc.harness: what closed_loop.cpp drives. Do not edit.",
    "#pragma once",
    "#include <array>",
    "#include <limits>",
    f'#include "{module}.hpp"',
    f"#define ANVIL_MPC {mpc.name}",
    f"#define ANVIL_PLANT {dynamics.name}",
    f"#define ANVIL_STAGE_COST {cost.name}",
    "namespace closed_loop_config {",
    f"inline constexpr {mpc.name}::real inf = std::numeric_limits<{mpc.name}::real>::infinity();",
    *(_c_array(k, np.asarray(v, dtype=np.float64), f"{mpc.name}::real") for k, v in arrays.items()),
    "}  // namespace closed_loop_config",
  ]
  (out / CONFIG).write_text("\n".join(lines) + "\n")
  shutil.copyfile(SOURCE, out / SOURCE.name)
  return source


def _run(cmd: Sequence[str | Path], cwd: Path) -> None:
  proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
  if proc.returncode != 0:
    raise RuntimeError(f"harness build failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stderr}")


def build_harness(
  mpc: MPCFunction,
  out_dir: str | Path,
  compiler: str | None = None,
  flags: Sequence[str] = FLAGS,
  module: str | None = None,
  x0: ArrayLike | None = None,
) -> Path:
  """Generate the module into out_dir, compile OSQP's C sources (C), the module and closed_loop.cpp (C++) with
  `flags`, and link out_dir/closed_loop. Returns the executable's path; raises RuntimeError with the compiler's
  output on failure."""
  out = Path(out_dir).resolve()
  source = write_module(mpc, out, module, x0)
  cxx, cc = compiler or find_compiler(), find_c_compiler()
  inc = [f"-I{out / i}" for i in INCLUDES]
  (out / "obj").mkdir(exist_ok=True)
  c_sources = sorted((out / "osqp" / "src").glob("*.c")) + sorted((out / "osqp").glob("*workspace.c"))
  sources = [(cc, "-std=c99", s) for s in c_sources] + [(cxx, "-std=c++17", s) for s in (source, out / SOURCE.name)]
  objects = [out / "obj" / f"{s.stem}.o" for _, _, s in sources]
  jobs = [[tool, std, *flags, *inc, "-c", s, "-o", o] for (tool, std, s), o in zip(sources, objects, strict=True)]
  with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    list(pool.map(lambda cmd: _run(cmd, out), jobs))
  exe = out / "closed_loop"
  _run([cxx, *flags, *objects, "-o", exe, "-lm"], out)
  return exe


def run_harness(
  exe: str | Path, x0: ArrayLike, steps: int, env: dict[str, str] | None = None, timeout: float = 600
) -> HarnessRun:
  """Run the harness for `steps` steps from x0 and read back its CSV; raises RuntimeError when it fails."""
  with tempfile.TemporaryDirectory(prefix="closed_loop_") as tmp:
    path = Path(tmp) / "closed_loop.csv"
    cmd = [str(exe), str(steps), *(repr(float(v)) for v in np.asarray(x0).reshape(-1)), "--csv", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
      raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    x, u, solve_times, statuses, iterations = read_csv(path)
  cost = next(float(ln.split(":")[1]) for ln in proc.stdout.splitlines() if ln.startswith("closed-loop cost:"))
  return HarnessRun(x, u, solve_times, statuses, iterations, cost, proc.stdout)


def read_csv(path: Path) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], tuple[str, ...],
                                  NDArray[np.int64]]:  # fmt: skip
  """A closed loop's CSV, as closed_loop.cpp and mujoco_loop.cpp write it: x (steps + 1, nx), u (steps, nu), the
  per-step solve times, each step's status (as written) and SQP iterations."""
  with path.open() as f:
    header, *rows = list(csv.reader(f))
  nx, nu = sum(h.startswith("x") for h in header), sum(h.startswith("u") for h in header)
  table = np.array([[float(v) for v in row[1 : 2 + nx + nu]] for row in rows])
  return (table[:, :nx], table[:-1, nx : nx + nu], table[:-1, nx + nu], tuple(row[-2] for row in rows[:-1]),
          np.array([int(row[-1]) for row in rows[:-1]], dtype=np.int64))  # fmt: skip
