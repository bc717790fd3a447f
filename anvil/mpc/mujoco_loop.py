"""`mujoco_loop`: a generated MPC closing the loop on a MuJoCo model in plain C++ (programs/mujoco_loop: mujoco_loop.cpp
and its CMakeLists.txt): write the controller's module (with the CMake files anvil emits), the plant's model and the
run's config, build it with CMake against pip mujoco's C library, run it, read the closed loop back.

The C++ side of `simulate(mpc, MuJoCoPlant(...))`: the same samples, the same parameters (an array, a table per step,
or a generated function of (t, x) called on the measured state) and the same pushes (`Push`), so the two loops can be
compared step by step (tests/integration/test_mujoco_loop.py; examples/mujoco_cpp_loop.py runs a panda and a solo12).
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

import anvil
from anvil import NumericalFunction
from anvil.mpc import MPCFunction, MuJoCoPlant
from anvil.mpc.harness import read_csv

#: The CMake project of the loop (mujoco_loop.cpp and its CMakeLists.txt), shipped with the package.
PROGRAM = Path(__file__).resolve().parent / "programs" / "mujoco_loop"
CONFIG = "mujoco_loop_config.hpp"
MODEL = "model.mjb"


@dataclass(frozen=True)
class Run:
  """One run: x (steps + 1, nx), u (steps, nu), per-step solve times (s, wall clock around call()), the statuses
  (anvil::sqp::Status numbers) and SQP iterations per step."""

  x: NDArray[np.float64]
  u: NDArray[np.float64]
  solve_times: NDArray[np.float64]
  statuses: NDArray[np.int64]
  iterations: NDArray[np.int64]


def mujoco_dir() -> Path:
  """pip mujoco's package folder: its C headers (include/) and library (libmujoco.so*)."""
  import mujoco

  return Path(mujoco.__file__).resolve().parent


@dataclass(frozen=True)
class Push:
  """A wrench (force, torque (6,), world axes, at the body's centre of mass: MuJoCo's xfrc_applied) held on `body`
  over the samples first <= t < end."""

  body: str
  wrench: tuple[float, ...]
  first: int
  end: int

  def plant(self, plant: MuJoCoPlant) -> Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]]:
    """`plant` as `simulate` steps it with this push applied (the samples counted by the calls): the Python side of
    the loop mujoco_loop.cpp runs."""
    samples = itertools.count()

    def pushed(x: NDArray[np.float64], u: NDArray[np.float64]) -> NDArray[np.float64]:
      plant.apply(self.body, self.wrench if self.first <= next(samples) < self.end else None)
      return plant(x, u)

    return pushed


def write(
  mpc: MPCFunction, plant: MuJoCoPlant, x0: ArrayLike, steps: int, out_dir: str | Path,
  p: ArrayLike | Callable[[int], ArrayLike] | NumericalFunction[..., Any] = (), module: str | None = None,
  pushes: Sequence[Push] = (),
) -> str:  # fmt: skip
  """Write the controller's module (and the CMake files anvil emits beside it), the plant's model (model.mjb) and
  mujoco_loop_config.hpp into out_dir. `p` is an array, a callable of the step (tabled for every step), or a
  NumericalFunction of (t (1,), x (nx,)) -> p (np,) generated into the module and called at every step on the measured
  state (in Python: `lambda t, x: p([t], x)`); every stage gets its value. Returns the module's name (its CMake
  library)."""
  module = module or f"{mpc.name}_controller"
  out = Path(out_dir)
  parameter = p if isinstance(p, NumericalFunction) else None
  if parameter is not None and [a.shape for a in parameter.inputs] != [(1,), (mpc.nx,)]:
    raise ValueError(f"mujoco_loop.write: p must be a function of (t (1,), x ({mpc.nx},)), got inputs "
                     f"{[a.shape for a in parameter.inputs]}")  # fmt: skip
  anvil.generate_module(module, [mpc] if parameter is None else [mpc, parameter], out_dir=out)
  import mujoco

  mujoco.mj_saveModel(plant.model, str(out / MODEL), None)
  per_step = [] if parameter is not None else [
    np.broadcast_to(np.asarray(p(t) if callable(p) else p, dtype=np.float64), (mpc.N + 1, mpc.np)) for t in range(steps)
  ]  # fmt: skip
  body = lambda name: mujoco.mj_name2id(plant.model, mujoco.mjtObj.mjOBJ_BODY, name)
  if any(body(push.body) < 0 for push in pushes):
    raise ValueError(f"mujoco_loop.write: the model has no body among {[push.body for push in pushes]}")
  real = f"{mpc.name}::real"
  arrays = {**mpc.defaults, "x0": np.asarray(x0, dtype=np.float64), "p": np.array(per_step),
            "push_wrench": np.array([push.wrench for push in pushes], dtype=np.float64)}  # fmt: skip
  numbers = lambda a: ", ".join("inf" if v == np.inf else "-inf" if v == -np.inf else repr(float(v)) for v in a.ravel())
  ints: dict[str, Sequence[int] | NDArray[np.int64]] = {
    "qpos": plant.qpos, "qvel": plant.qvel, "torque": plant.torque, "push_body": [body(q.body) for q in pushes],
    "push_first": [q.first for q in pushes], "push_end": [q.end for q in pushes],
  }  # fmt: skip
  array_line = lambda kind, name, values, text: (
    f"inline constexpr std::array<{kind}, {max(np.size(values), 1)}> {name} = {{{text or '0'}}};"
  )
  base_qpos, base_dof = plant.base
  lines = [
    "// Written by anvil.mpc.mujoco_loop: what mujoco_loop.cpp runs. Do not edit.",
    "#pragma once",
    "#include <array>",
    "#include <limits>",
    f'#include "{module}.hpp"',
    f"#define ANVIL_MPC {mpc.name}",
    *([f"#define ANVIL_PARAMETER {parameter.name}"] if parameter is not None else []),
    "namespace mujoco_loop_config {",
    f"inline constexpr int steps = {steps}, substeps = {plant.steps}, nq = {plant.nq};",
    f"inline constexpr bool free = {'true' if plant.free else 'false'};",
    f"inline constexpr int base_qpos = {base_qpos}, base_dof = {base_dof};",
    f"inline constexpr int joints = {plant.qpos.size}, torques = {plant.torque.size}, pushes = {len(pushes)};",
    f"inline constexpr {real} inf = std::numeric_limits<{real}>::infinity();",
    *[array_line("int", k, v, ", ".join(map(str, v))) for k, v in ints.items()],
    *[array_line(real, k, v, numbers(np.asarray(v))) for k, v in arrays.items()],
    "}  // namespace mujoco_loop_config",
  ]
  (out / CONFIG).write_text("\n".join(lines) + "\n")
  return module


def build(out_dir: str | Path, module: str) -> Path:
  """Configure and build mujoco_loop with CMake (the module through the CMake files anvil emitted, for this machine's
  CPU with the JIT's flags: ANVIL_NATIVE); returns the executable. Raises RuntimeError with CMake's output on
  failure."""
  out = Path(out_dir).resolve()
  configure = ["cmake", "-S", str(PROGRAM), "-B", str(out / "cmake"), f"-DANVIL_GENERATED_DIR={out}",
               f"-DANVIL_MODULE={module}", f"-DMUJOCO_DIR={mujoco_dir()}", "-DANVIL_NATIVE=ON"]  # fmt: skip
  for command in (configure, ["cmake", "--build", str(out / "cmake"), "-j", "2"]):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
      raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
  return out / "cmake" / "mujoco_loop"


def run(exe: str | Path, out_dir: str | Path, timeout: float = 600) -> Run:
  """Run the built loop on out_dir's model; the closed loop it wrote."""
  out = Path(out_dir)
  proc = subprocess.run([str(exe), str(out / MODEL), str(out / "loop.csv")], capture_output=True, text=True,
                        timeout=timeout)  # fmt: skip
  if proc.returncode != 0:
    raise RuntimeError(f"{exe} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
  x, u, solve_times, statuses, iterations = read_csv(out / "loop.csv")
  return Run(x, u, solve_times, np.array([int(s) for s in statuses]), iterations)
