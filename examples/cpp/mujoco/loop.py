"""A generated MPC closing the loop on a MuJoCo model in plain C++ (examples/cpp/mujoco/mujoco_loop.cpp): write the
controller's module (with the CMake files anvil emits), the plant's model and the run's config, build it with CMake
against pip mujoco's C library, run it, read the closed loop back.

    python examples/cpp/mujoco/loop.py [--steps K] [--out DIR]   # examples/arm_reach.py's panda, in C++

Shared by tests/integration/test_mujoco_loop.py, which checks it against `anvil.mpc.simulate` with a `MuJoCoPlant`.
"""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

import anvil
from anvil.mpc import MPCFunction, MuJoCoPlant

HERE = Path(__file__).resolve().parent
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


def write(
  mpc: MPCFunction, plant: MuJoCoPlant, x0: ArrayLike, steps: int, out_dir: str | Path,
  p: ArrayLike | Callable[[int], ArrayLike] = (), module: str | None = None,
) -> str:  # fmt: skip
  """Write the controller's module (and the CMake files anvil emits beside it), the plant's model (model.mjb) and
  mujoco_loop_config.hpp into out_dir; `p` as `simulate` takes it (an array, or a callable of the step). Returns the
  module's name (its CMake library)."""
  if plant.free:
    raise ValueError("loop.write: mujoco_loop.cpp maps hinge and slide joints (a fixed-base robot); run a floating "
                     "base's loop with anvil.mpc.simulate")  # fmt: skip
  module = module or f"{mpc.name}_controller"
  out = Path(out_dir)
  anvil.generate_module(module, [mpc], out_dir=out)
  import mujoco

  mujoco.mj_saveModel(plant.model, str(out / MODEL), None)
  per_step = [np.broadcast_to(np.asarray(p(t) if callable(p) else p, dtype=np.float64), (mpc.N + 1, mpc.np))
              for t in range(steps)]  # fmt: skip
  real = f"{mpc.name}::real"
  arrays = {**mpc.defaults, "x0": np.asarray(x0, dtype=np.float64), "p": np.array(per_step)}
  numbers = lambda a: ", ".join("inf" if v == np.inf else "-inf" if v == -np.inf else repr(float(v)) for v in a.ravel())
  ints = {"qpos": plant.qpos, "qvel": plant.qvel, "torque": plant.torque}
  int_lines = [
    f"inline constexpr std::array<int, {len(v)}> {k} = {{{', '.join(map(str, v))}}};" for k, v in ints.items()
  ]
  real_lines = [
    f"inline constexpr std::array<{real}, {max(np.size(v), 1)}> {k} = {{{numbers(np.asarray(v)) or '0'}}};"
    for k, v in arrays.items()
  ]
  lines = [
    "// Written by examples/cpp/mujoco/loop.py: what mujoco_loop.cpp runs. Do not edit.",
    "#pragma once",
    "#include <array>",
    "#include <limits>",
    f'#include "{module}.hpp"',
    f"#define ANVIL_MPC {mpc.name}",
    "namespace mujoco_loop_config {",
    f"inline constexpr int steps = {steps}, substeps = {plant.steps};",
    f"inline constexpr {real} inf = std::numeric_limits<{real}>::infinity();",
    *int_lines,
    *real_lines,
    "}  // namespace mujoco_loop_config",
  ]
  (out / CONFIG).write_text("\n".join(lines) + "\n")
  return module


def build(out_dir: str | Path, module: str) -> Path:
  """Configure and build mujoco_loop with CMake (the module through the CMake files anvil emitted); returns the
  executable. Raises RuntimeError with CMake's output on failure."""
  out = Path(out_dir).resolve()
  configure = ["cmake", "-S", str(HERE), "-B", str(out / "cmake"), f"-DANVIL_GENERATED_DIR={out}",
               f"-DANVIL_MODULE={module}", f"-DMUJOCO_DIR={mujoco_dir()}"]  # fmt: skip
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
  with (out / "loop.csv").open() as f:
    header, *rows = list(csv.reader(f))
  nx, nu = sum(h.startswith("x") for h in header), sum(h.startswith("u") for h in header)
  table = np.array([[float(v) for v in row[1 : 2 + nx + nu]] for row in rows])
  return Run(table[:, :nx], table[:-1, nx : nx + nu], table[:-1, nx + nu],
             np.array([int(r[-2]) for r in rows[:-1]]), np.array([int(r[-1]) for r in rows[:-1]]))  # fmt: skip


def main() -> None:
  """examples/arm_reach.py's panda reaching its targets in MuJoCo, the loop in C++: how close, how fast."""
  import sys

  sys.path.insert(0, str(HERE.parent.parent))
  from arm_reach import DT, HAND, controller, reaching, urdf

  from cli import example_arguments

  args = example_arguments(__doc__, 150)
  robot, q0, targets, segment = reaching(args.steps)
  mpc = controller(robot)
  plant = MuJoCoPlant(urdf(), robot.joint_names, DT)
  out = args.out / "mujoco_loop"
  module = write(mpc, plant, np.r_[q0, np.zeros(robot.nv)], args.steps, out,
                 lambda t: targets[min(t // segment, len(targets) - 1)])  # fmt: skip
  loop = run(build(out, module), out)
  print(f"{args.steps} steps in C++: per-step solve {1e3 * np.median(loop.solve_times):.2f} ms median, "
        f"{1e3 * loop.solve_times.max():.2f} ms max; statuses {np.bincount(loop.statuses).tolist()}")  # fmt: skip
  for k, target in enumerate(targets):
    t = min((k + 1) * segment, args.steps)
    error = robot.frame_placement_error(loop.x[t, : robot.nq], HAND, target[:9].reshape(3, 3), target[9:])
    print(f"target {k}: position error {1e3 * np.linalg.norm(error[:3]):.3f} mm")


if __name__ == "__main__":
  main()
