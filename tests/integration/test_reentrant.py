"""Reentrant controllers (issue 18): the QP's state lives in the workspace (the Riccati interior point's, and OSQP's
solver as a per-instance struct), so instances of one generated controller, each with its own workspace, run at once
in C++ threads (no GIL to serialize them, as the Python calls have), each closed loop bit for bit as when it runs
alone, and ThreadSanitizer (where the compiler has it) finds no data race. A workspace copied bitwise mid-run goes on
as the original does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from anvil.codegen import find_c_compiler, find_compiler
from anvil.mpc import MPCOptions
from anvil.mpc.harness import INCLUDES, write_module
from anvil.problems import cartpole_mpc as cm
from tests.conftest import qp_named

#: Two instances' closed loops from different states, alone then in two threads at once; then a bitwise copy of one
#: instance and the instance itself go on from the same state, at once. Exit 0 when every input of the concurrent
#: runs equals the lone runs' and the copy's inputs equal the original's.
SOURCE = r"""
#include <cstdio>
#include <cstring>
#include <thread>

#include "closed_loop_config.hpp"

namespace mpc = ANVIL_MPC;
namespace plant = ANVIL_PLANT;
namespace cfg = closed_loop_config;
constexpr int steps = 60, more = 20, nx = mpc::nx, nu = mpc::nu;

struct Instance {
  mpc::WS_t ws;
  mpc::Stats stats;
  plant::WS_t plant_ws;
  mpc::real xs[(mpc::N + 1) * nx], us[mpc::N * nu];
  double x[nx];
  double inputs[steps * nu];
};

void run(Instance& in, int count) {
  double x_next[nx], u[nu];
  for (int t = 0; t < count; ++t) {
    mpc::real x_now[nx];
    for (int i = 0; i < nx; ++i) x_now[i] = in.x[i];
    mpc::call(x_now, cfg::p.data(), cfg::lbx.data(), cfg::ubx.data(), cfg::lbu.data(), cfg::ubu.data(), cfg::lbh.data(),
              cfg::ubh.data(), cfg::lbhN.data(), cfg::ubhN.data(), in.xs, in.us, in.stats, in.ws);
    for (int j = 0; j < nu; ++j) in.inputs[t * nu + j] = u[j] = in.us[j];
    plant::OUT0_t out(x_next);
    plant::call(plant::IN0_t(in.x), plant::IN1_t(u), out, in.plant_ws);
    for (int i = 0; i < nx; ++i) in.x[i] = x_next[i];
  }
}

void closed_loop(Instance& in, double scale) {
  mpc::init(in.ws);
  plant::init(in.plant_ws);
  for (int i = 0; i < nx; ++i) in.x[i] = scale * cfg::x0[i];
  run(in, steps);
}

static Instance alone[2], together[2], copy;

int main() {
  const double scales[2] = {1.0, -0.6};
  for (int k = 0; k < 2; ++k) closed_loop(alone[k], scales[k]);
  std::thread a(closed_loop, std::ref(together[0]), scales[0]), b(closed_loop, std::ref(together[1]), scales[1]);
  a.join();
  b.join();
  for (int k = 0; k < 2; ++k)
    if (std::memcmp(alone[k].inputs, together[k].inputs, sizeof(alone[k].inputs)) != 0) {
      std::printf("instance %d: its inputs differ when it runs beside the other\n", k);
      return 1;
    }
  copy = alone[1];
  std::thread c(run, std::ref(alone[1]), more), d(run, std::ref(copy), more);
  c.join();
  d.join();
  if (std::memcmp(alone[1].inputs, copy.inputs, more * nu * sizeof(double)) != 0) {
    std::printf("a copied workspace's inputs differ from the original's\n");
    return 1;
  }
  std::printf("same inputs, alone, at once and copied\n");
  return 0;
}
"""


def _sanitizes_threads(cxx: str, tmp: Path) -> bool:
  """Whether cxx builds and runs a program with -fsanitize=thread."""
  probe = tmp / "tsan_probe.cpp"
  probe.write_text("int main() { return 0; }\n")
  built = subprocess.run([cxx, "-fsanitize=thread", str(probe), "-o", str(tmp / "tsan_probe")], capture_output=True)
  return built.returncode == 0 and subprocess.run([str(tmp / "tsan_probe")], capture_output=True).returncode == 0


def _build(cmd: list[str], cwd: Path) -> None:
  built = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
  assert built.returncode == 0, built.stderr


@pytest.mark.parametrize("qp_solver", ["riccati", "osqp"])
def test_instances_run_at_once_in_threads(tmp_path: Path, qp_solver: str) -> None:
  mpc = cm.stabilizing(f"reentrant_{qp_solver}", MPCOptions(qp=qp_named(qp_solver)))
  source = write_module(mpc, tmp_path, x0=cm.X0_STABILIZE)
  (tmp_path / "two_instances.cpp").write_text(SOURCE)
  cxx = find_compiler()
  tsan = ["-fsanitize=thread"] if _sanitizes_threads(cxx, tmp_path) else []
  flags, includes = ["-O1", "-g", *tsan], [f"-I{tmp_path / i}" for i in INCLUDES]
  c_sources = sorted((tmp_path / "osqp" / "src").glob("*.c")) + sorted((tmp_path / "osqp").glob("*workspace.c"))
  assert bool(c_sources) == (qp_solver == "osqp")
  objects = [tmp_path / f"{c.stem}.o" for c in c_sources]
  for c, o in zip(c_sources, objects, strict=True):
    _build([find_c_compiler(), "-std=c99", *flags, *includes, "-c", str(c), "-o", str(o)], tmp_path)
  exe = tmp_path / "two_instances"
  sources = [str(source), str(tmp_path / "two_instances.cpp"), *map(str, objects)]
  _build([cxx, "-std=c++17", *flags, "-pthread", *includes, *sources, "-o", str(exe), "-lm"], tmp_path)
  run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stdout + run.stderr
  assert "same inputs" in run.stdout and "WARNING: ThreadSanitizer" not in run.stderr, run.stderr
  if not tsan:
    pytest.skip("the compiler has no ThreadSanitizer: the runs agree, the race check did not run")
