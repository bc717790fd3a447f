"""anvil showcase: plain tinygrad Tensor math -> generated C++, up to a model predictive controller.

Run with `make demo`. It
  1. builds the P1 quadrotor RK4 step and checks it against numpy (a few lines: the core idea);
  2. builds the P2 stabilizing cart-pole MPC (N = 30: multiple shooting, SQP with the Riccati QP solver, all C++);
  3. runs its closed loop from Python (`anvil.mpc.simulate`) and plots it to build/demo/cartpole_closed_loop.png;
  4. generates, compiles and runs the same controller in the standalone C++ harness (examples/cpp, build/demo/cpp);
  5. prints one table comparing the Python and C++ closed loops with the CasADi reference cost.
"""

from __future__ import annotations

import time
import timeit
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

import anvil as av
from anvil.mpc import MPCFunction, plot_closed_loop, simulate
from anvil.mpc.harness import build_harness, run_harness
from anvil.problems import cartpole, quadrotor

from cartpole_stabilize import COST, STEPS, U_MAX, X0, XC_MAX, H, controller

ROOT = Path(__file__).resolve().parent.parent

BUILD = ROOT / "build" / "demo"
CPP_DIR = BUILD / "cpp"
MODULE = "cartpole_controller"
STATE_NAMES = ("xc [m]", "theta [rad]", "xc_dot [m/s]", "theta_dot [rad/s]")


def quadrotor_step() -> None:
  """P1 in three lines: trace the RK4 step, compare with numpy, time a call from Python."""
  start = time.perf_counter()
  step = av.NumericalFunction("quad_step", quadrotor.step, (av.Arg(12), av.Arg(4)))
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  y = step(x, u)
  build_s = time.perf_counter() - start
  error = np.abs(y - quadrotor.step_numpy(x, u)).max()
  call_us = min(timeit.repeat(lambda: step(x, u), number=2000, repeat=5)) / 2000 * 1e6
  numpy_us = min(timeit.repeat(lambda: quadrotor.step_numpy(x, u), number=200, repeat=3)) / 200 * 1e6
  print("P1 quadrotor RK4 step F(x, u): Tensor math -> C++ -> callable from Python")
  print(f"  built in {build_s:.2f} s, max |anvil - numpy| = {error:.1e}, "
        f"{call_us:.2f} us per call from Python (numpy, same math: {numpy_us:.1f} us)\n")  # fmt: skip


def _ms(seconds: Sequence[float] | NDArray[np.float64]) -> str:
  """median / p95 / max of per-step times, in ms."""
  ms = np.asarray(seconds) * 1e3
  return f"{np.median(ms):.3f} / {np.percentile(ms, 95):.3f} / {ms.max():.3f}"


def _first(seconds: NDArray[np.float64], iterations: NDArray[np.int64]) -> str:
  """The first step's solve time (ms) and SQP iterations: the solve without a warm start."""
  return f"{seconds[0] * 1e3:.3f}, {iterations[0]}"


def _statuses(statuses: Sequence[str]) -> str:
  """Status counts, e.g. "converged 200"."""
  return ", ".join(f"{s} {n}" for s, n in Counter(statuses).items())


def python_call_times(mpc: MPCFunction, states: NDArray[np.float64]) -> NDArray[np.float64]:
  """Python wall time of each controller call, replaying the closed loop's states (same warm starts, same solves)."""
  mpc.reset()
  times = []
  for x in states:
    start = time.perf_counter()
    mpc(x)
    times.append(time.perf_counter() - start)
  return np.array(times)


def main() -> None:
  """Build the cart-pole MPC, run its closed loop in Python and in standalone C++, print the comparison."""
  quadrotor_step()

  print(f"P2 stabilizing cart-pole MPC (examples/cartpole_stabilize.py): N = 30, |u| <= {U_MAX:g} N, |xc| <= "
        f"{XC_MAX:g} m, {STEPS} steps of {H} s from x0 = {X0.tolist()}")  # fmt: skip
  start = time.perf_counter()
  mpc = controller("cartpole_mpc")
  mpc(X0)  # the first call builds the controller (trace, generate, compile) or loads it from the cache
  print(f"  controller built (or loaded from the cache) in {time.perf_counter() - start:.2f} s")

  start = time.perf_counter()
  cl = simulate(mpc, cartpole.step_numpy, X0, STEPS)
  sim_s = time.perf_counter() - start
  wall = python_call_times(mpc, cl.x[:-1])
  BUILD.mkdir(parents=True, exist_ok=True)
  plot = plot_closed_loop(cl, BUILD / "cartpole_closed_loop.png", dt=H, state_names=STATE_NAMES)
  print(f"  Python closed loop (numpy plant) in {sim_s:.2f} s, plot: {plot.relative_to(ROOT)}")

  start = time.perf_counter()
  CPP_DIR.mkdir(parents=True, exist_ok=True)
  exe = build_harness(mpc, CPP_DIR, module=MODULE, x0=X0)
  build_s = time.perf_counter() - start
  run = run_harness(exe, X0, STEPS)
  print(f"  C++ harness generated and compiled in {build_s:.2f} s: {exe.relative_to(ROOT)}\n")

  ref = COST
  rows = [
    ("closed-loop cost", f"{cl.cost:.9f}", f"{run.cost:.9f}"),
    (f"  relative error vs reference {ref}", f"{(cl.cost - ref) / ref:.1e}", f"{(run.cost - ref) / ref:.1e}"),
    ("max |x_py - x_cpp| over the run", f"{np.abs(cl.x - run.x).max():.1e}", ""),
    ("solve time med / p95 / max [ms]", _ms(cl.solve_times), _ms(run.solve_times)),
    ("  measured", "inside the C++ call", "around call(), C++"),
    (
      "  first step (cold) [ms], SQP iterations",
      _first(cl.solve_times, cl.iterations),
      _first(run.solve_times, run.iterations),
    ),
    ("Python wall per call med / p95 / max [ms]", _ms(wall), "-"),
    ("SQP iterations, mean", f"{cl.iterations.mean():.2f}", f"{run.iterations.mean():.2f}"),
    ("statuses", _statuses(cl.statuses), _statuses(run.statuses)),
  ]
  print(f"{'':43} {'Python (anvil.mpc.simulate)':>32} {'C++ (anvil.mpc.harness)':>32}")
  for label, py, cpp in rows:
    print(f"{label:43} {py:>32} {cpp:>32}".rstrip())

  # NOTE: what is there, not a list to keep in step with the generator
  written = ", ".join(sorted(p.name for p in CPP_DIR.iterdir() if p.is_file()))
  print(f"\ngenerated C++ in {CPP_DIR.relative_to(ROOT)} ({MODULE}.hpp/.cpp: controller, dynamics, stage cost):")
  print(f"  {written}")
  print("build it by hand or with CMake: examples/cpp/README.md (its commands use build/cpp; substitute this folder)")


if __name__ == "__main__":
  main()
