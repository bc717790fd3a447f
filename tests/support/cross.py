"""Cross-build a generated MPC for robot hardware and run it under QEMU: aarch64 Linux (qemu-aarch64) and a bare-metal
Cortex-M7 (qemu-system-arm, MPS2 AN500), and the float32 controller on a bare-metal Cortex-M4F (MPS2 AN386, a
single-precision FPU), each closed loop against the x86 one.

  .venv/bin/python -m tests.support.cross            # or `make embedded`: the cart-pole MPC (N = 30), one table

The toolchains are Debian's: gcc-arm-none-eabi, libnewlib-arm-none-eabi, libstdc++-arm-none-eabi-newlib,
qemu-system-arm, g++-aarch64-linux-gnu and qemu-user (`install_toolchains()` installs them with apt-get).

- aarch64: anvil.mpc.harness's closed_loop.cpp and the module, linked statically, run under qemu-aarch64.
- Cortex-M7: examples/embedded/main.cpp (every workspace static), startup.cpp (vector table, reset, semihosting) and
  mps2.ld, compiled with -fno-exceptions -fno-rtti -Wstack-usage=8192 -Werror and ANVIL_NO_CLOCK; the objects of the
  module and of main.cpp are checked with nm to reference no operator new or delete, malloc, free, exceptions or
  std::chrono's clock; run under qemu-system-arm with semihosting, it prints the closed-loop cost's bits, the final
  state's and the deepest stack the run used (the stack is painted before main). Flash and RAM: arm-none-eabi-size.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anvil.mpc import MPCFunction, MPCOptions, simulate
from anvil.mpc.harness import SOURCE as HARNESS_SOURCE
from anvil.mpc.harness import write_module

#: The firmware's sources (main.cpp, startup.cpp, mps2.ld): an example a robot's bare-metal build starts from.
FIRMWARE = Path(__file__).resolve().parents[2] / "examples" / "embedded"
PACKAGES = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "libstdc++-arm-none-eabi-newlib", "qemu-system-arm",
            "g++-aarch64-linux-gnu", "qemu-user")  # fmt: skip
TOOLS = ("arm-none-eabi-g++", "arm-none-eabi-size", "arm-none-eabi-nm", "qemu-system-arm", "aarch64-linux-gnu-g++",
         "qemu-aarch64")  # fmt: skip
CORTEX_M7 = ("-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard", "-mthumb")
#: A Cortex-M4F: its FPU is single precision (fpv4-sp-d16), a double operation a software call; -Wdouble-promotion
#: (with -Werror) proves that no float of the controller is turned into a double implicitly.
CORTEX_M4F = ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard", "-mthumb", "-Wdouble-promotion")
#: The bare-metal build: no exceptions, no RTTI, frames of at most 8 KB, timing compiled out, unused code dropped.
BARE_METAL = ("-O2", "-std=c++17", "-fno-exceptions", "-fno-rtti", "-fno-math-errno", "-ffunction-sections",
              "-fdata-sections", "-Wall", "-Wextra", "-Wstack-usage=8192", "-Werror", "-DANVIL_NO_CLOCK")  # fmt: skip
#: What a heap-free, exception-free controller object must not reference (nm -u, demangled).
FORBIDDEN = re.compile(r"operator new|operator delete|\bmalloc\b|\bfree\b|__cxa_throw|__cxa_allocate|steady_clock")


def missing_tools() -> list[str]:
  """The cross tools not on PATH."""
  return [t for t in TOOLS if shutil.which(t) is None]


def install_toolchains() -> list[str]:
  """Install the cross toolchains with apt-get when some are missing (as root, or through sudo); returns the tools
  still missing (empty: ready)."""
  if not missing_tools() or shutil.which("apt-get") is None:
    return missing_tools()
  sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
  env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
  for cmd in (
    [*sudo, "apt-get", "update", "-qq"],
    [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
  ):
    if subprocess.run(cmd, capture_output=True, env=env, timeout=900).returncode != 0:
      break
  return missing_tools()


def run_tool(cmd: Sequence[str | Path], cwd: Path, timeout: float = 600) -> str:
  """Run a build or emulator command in cwd; its output (stdout, then stderr); RuntimeError when it fails."""
  proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0:
    raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
  return proc.stdout + proc.stderr  # NOTE: QEMU writes the semihosting console to stderr


def forbidden_references(objects: Sequence[Path], cwd: Path) -> tuple[str, ...]:
  """What the Arm objects reference of FORBIDDEN (the heap, exceptions, std::chrono's clock), by `nm -u`."""
  undefined = run_tool(["arm-none-eabi-nm", "-u", "-C", *objects], cwd)
  return tuple(sorted({m.group(0) for m in FORBIDDEN.finditer(undefined)}))


@dataclass(frozen=True)
class CrossRun:
  """One cross-built closed loop: its target, closed-loop cost and final state, and (bare metal) flash, RAM (.data +
  .bss) and the deepest stack used, in bytes, plus what the checks found."""

  target: str
  cost: float
  final_state: np.ndarray
  flash: int = 0
  ram: int = 0
  stack: int = 0
  forbidden: tuple[str, ...] = ()


def reference(mpc: MPCFunction, x0: np.ndarray, steps: int) -> float:
  """The x86 closed loop's cost: the controller through the Python JIT on its own dynamics, as the harnesses run."""
  return float(simulate(mpc, mpc.ocp.dynamics, x0, steps).cost)


def aarch64(mpc: MPCFunction, out: Path, x0: np.ndarray, steps: int) -> CrossRun:
  """Build the closed-loop harness for aarch64 Linux (static) and run it under qemu-aarch64."""
  out = out.resolve()
  source = write_module(mpc, out, x0=x0)
  exe = out / "closed_loop_aarch64"
  flags = ["-O3", "-std=c++17", "-fno-math-errno", "-static", f"-I{out}"]
  run_tool(["aarch64-linux-gnu-g++", *flags, HARNESS_SOURCE, source, "-o", exe, "-lm"], out)
  stdout = run_tool(["qemu-aarch64", exe, str(steps), *(repr(float(v)) for v in x0)], out)
  cost = float(re.search(r"closed-loop cost: (\S+)", stdout).group(1))  # type: ignore[union-attr]
  state = re.search(r"final state: \[(.*)\]", stdout).group(1)  # type: ignore[union-attr]
  return CrossRun("aarch64 Linux (qemu-aarch64)", cost, np.array([float(v) for v in state.split(",")]))


def _bits(name: str, text: str) -> list[float]:
  return [float(np.frombuffer(int(h, 16).to_bytes(8, "little"), "<f8")[0]) for h in re.findall(rf"^{name} 0x(\w+)$",
                                                                                              text, re.M)]  # fmt: skip


def cortex_m7(mpc: MPCFunction, out: Path, x0: np.ndarray, steps: int) -> CrossRun:
  """Build the controller for a bare-metal Cortex-M7 with static workspaces, check its objects for heap, exceptions
  and clocks, and run it under qemu-system-arm (MPS2 AN500) with semihosting."""
  return bare_metal(mpc, out, x0, steps, CORTEX_M7, "mps2-an500", "Cortex-M7")


def cortex_m4f(mpc: MPCFunction, out: Path, x0: np.ndarray, steps: int) -> CrossRun:
  """The same on a Cortex-M4F (MPS2 AN386), whose FPU is single precision: for a float32 controller."""
  return bare_metal(mpc, out, x0, steps, CORTEX_M4F, "mps2-an386", "Cortex-M4F")


def bare_metal(mpc: MPCFunction, out: Path, x0: np.ndarray, steps: int, cpu: Sequence[str], machine: str,
               core: str) -> CrossRun:  # fmt: skip
  """Build main.cpp with the controller for the bare-metal core (`cpu`: its flags), check its objects for heap,
  exceptions and clocks, and run it under qemu-system-arm (`machine`) with semihosting."""
  out, tag = out.resolve(), core.lower().replace("-", "")
  out.mkdir(parents=True, exist_ok=True)
  source = write_module(mpc, out, x0=x0)
  flags = [*cpu, *BARE_METAL, f"-I{out}", f"-DANVIL_STEPS={steps}"]
  objects = {s: out / f"{s.stem}_{tag}.o" for s in (source, FIRMWARE / "main.cpp", FIRMWARE / "startup.cpp")}
  for s, o in objects.items():
    run_tool(["arm-none-eabi-g++", *flags, "-c", s, "-o", o], out)
  elf = out / f"controller_{tag}.elf"
  run_tool(["arm-none-eabi-g++", *cpu, "-nostartfiles", "--specs=nano.specs", "-T", FIRMWARE / "mps2.ld",
        "-Wl,--gc-sections", *objects.values(), "-lm", "-o", elf], out)  # fmt: skip
  forbidden = forbidden_references([objects[source], objects[FIRMWARE / "main.cpp"]], out)
  sections = dict(re.findall(r"^(\.\w+)\s+(\d+)", run_tool(["arm-none-eabi-size", "-A", elf], out), re.M))
  qemu = ["qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none", "-serial", "none",
          "-semihosting-config", "enable=on,target=native", "-kernel", elf]  # fmt: skip
  text = run_tool(qemu, out)
  (cost,), state = _bits("cost", text), _bits("x", text)
  stack = int(re.search(r"^stack (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
  return CrossRun(f"{core} bare metal, {mpc.options.scalar} (qemu-system-arm {machine})", cost, np.array(state),
                  int(sections[".text"]) + int(sections.get(".data", 0)), int(sections.get(".data", 0)) +
                  int(sections.get(".bss", 0)), stack, forbidden)  # fmt: skip


def table(runs: Sequence[CrossRun], x86_cost: float) -> str:
  """The runs against the x86 closed loop, one row each."""
  rows = [f"{'target':60} {'closed-loop cost':>20} {'vs x86':>9} {'flash KB':>9} {'RAM KB':>8} {'stack KB':>9}"]
  rows.append(f"{'x86-64 (Python JIT)':60} {x86_cost:20.12f} {'-':>9}")
  for r in runs:
    kb = lambda n: f"{n / 1024:.1f}" if n else "-"
    diff = abs(r.cost - x86_cost) / max(abs(x86_cost), 1.0)
    rows.append(f"{r.target:60} {r.cost:20.12f} {diff:9.1e} {kb(r.flash):>9} {kb(r.ram):>8} {kb(r.stack):>9}")
  return "\n".join(rows)


def main() -> int:
  """Cross-build the cart-pole MPC for both targets, run them and print the table."""
  from anvil.problems import cartpole_mpc as cm

  if missing := install_toolchains():
    print(f"cross toolchains missing ({', '.join(missing)}): apt-get install {' '.join(PACKAGES)}", file=sys.stderr)
    return 1
  mpc, x0, steps = cm.stabilizing("cartpole_cross"), np.asarray(cm.X0_STABILIZE, dtype=np.float64), 200
  mpc32 = cm.stabilizing("cartpole_cross_f32", MPCOptions(scalar="float32"))
  out = Path("build/embedded").resolve()
  out.mkdir(parents=True, exist_ok=True)
  runs = [aarch64(mpc, out, x0, steps), cortex_m7(mpc, out / "m7", x0, steps),
          cortex_m4f(mpc32, out / "m4f", x0, steps)]  # fmt: skip
  print(f"cart-pole MPC (N = {mpc.N}), {steps} closed-loop steps from x0 = {x0.tolist()}")
  print(table(runs, reference(mpc, x0, steps)))
  m7, m4f = runs[1], runs[2]
  for core, what, value, budget in (("Cortex-M7", "flash", m7.flash, 192), ("Cortex-M7", "RAM", m7.ram, 96),
                                    ("Cortex-M7", "worst stack", m7.stack, 8), ("Cortex-M4F", "RAM", m4f.ram, 64),
                                    ("Cortex-M4F", "worst stack", m4f.stack, 8)):  # fmt: skip
    verdict = "PASS" if value <= budget * 1024 else "MISS"
    print(f"{core} {what}: {value / 1024:.1f} KB <= {budget} KB (issue 18's budget): {verdict}")
  for r in runs:
    if r.forbidden:
      print(f"{r.target}: the objects reference {', '.join(r.forbidden)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
