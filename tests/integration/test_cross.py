"""The cart-pole MPC on robot hardware, emulated: cross-built for aarch64 Linux (run under qemu-aarch64) and for a
bare-metal Cortex-M7 with every workspace static (run under qemu-system-arm), each closed loop equal to the x86 one,
and the float32 controller on a bare-metal Cortex-M4F.
The toolchains are installed with apt-get when missing; the tests skip only when that is impossible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anvil.mpc import MPCFunction, MPCOptions
from anvil.problems import cartpole_mpc as cm
from tests.support import cross

pytestmark = pytest.mark.xdist_group("cross")
STEPS = 100


@pytest.fixture(scope="module")
def toolchains() -> None:
  if missing := cross.install_toolchains():
    pytest.skip(f"cross toolchains cannot be installed here (missing: {', '.join(missing)})")


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  return cm.stabilizing("cross_mpc")


@pytest.fixture(scope="module")
def x86_cost(mpc: MPCFunction) -> float:
  return cross.reference(mpc, np.asarray(cm.X0_STABILIZE, dtype=np.float64), STEPS)


def test_aarch64_closed_loop_equals_x86(toolchains: None, mpc: MPCFunction, x86_cost: float, tmp_path: Path) -> None:
  run = cross.aarch64(mpc, tmp_path, np.asarray(cm.X0_STABILIZE, dtype=np.float64), STEPS)
  assert run.cost == pytest.approx(x86_cost, rel=1e-9, abs=1e-12)


def test_cortex_m7_runs_heap_free_and_equals_x86(
  toolchains: None, mpc: MPCFunction, x86_cost: float, tmp_path: Path
) -> None:
  run = cross.cortex_m7(mpc, tmp_path, np.asarray(cm.X0_STABILIZE, dtype=np.float64), STEPS)
  assert run.forbidden == (), f"the controller's objects reference {run.forbidden}"
  assert run.cost == pytest.approx(x86_cost, rel=1e-9, abs=1e-12)
  assert np.all(np.abs(run.final_state) < 1e-3), "the pole is balanced at the origin"
  # the budget: flash <= 192 KB, RAM (.data + .bss) <= 96 KB and a worst stack <= 8 KB (measured by painting
  # the stack)
  assert 0 < run.flash <= 192 * 1024 and 0 < run.stack <= 8 * 1024
  assert 0 < run.ram <= 96 * 1024, f"RAM {run.ram / 1024:.1f} KB"


def test_float32_controller_on_cortex_m4f(toolchains: None, x86_cost: float, tmp_path: Path) -> None:
  """The float32 controller on a single-precision FPU: heap-free, its closed loop within 1e-3 of the float64 x86 one
  (issue 18: RAM <= 64 KB)."""
  mpc32 = cm.stabilizing("cross_mpc_f32", MPCOptions(scalar="float32"))
  run = cross.cortex_m4f(mpc32, tmp_path, np.asarray(cm.X0_STABILIZE, dtype=np.float64), STEPS)
  assert run.forbidden == (), f"the controller's objects reference {run.forbidden}"
  assert run.cost == pytest.approx(x86_cost, rel=1e-3)
  assert np.all(np.abs(run.final_state) < 1e-3), "the pole is balanced at the origin"
  assert 0 < run.stack <= 8 * 1024 and 0 < run.ram <= 64 * 1024, f"RAM {run.ram / 1024:.1f} KB"


def test_forbidden_symbols_are_caught(toolchains: None, tmp_path: Path) -> None:
  """The nm check itself: an object that allocates is reported."""
  source = tmp_path / "allocates.cpp"
  source.write_text("#include <new>\nint* make() { return new int(3); }\n")
  obj = tmp_path / "allocates.o"
  cross.run_tool(["arm-none-eabi-g++", *cross.CORTEX_M7, "-fno-exceptions", "-c", source, "-o", obj], tmp_path)
  assert "operator new" in cross.forbidden_references([obj], tmp_path)
