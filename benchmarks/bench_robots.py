"""anvil.robots' generated C++ against Pinocchio's C++ on real robots, and how builds grow with the number of bodies.

    .venv/bin/python -m benchmarks.bench_robots [--robots panda,solo12,talos] [--chain 2,4,8,16,32] [--rounds 5]
        [--casadi PYTHON [--casadi-robots panda,ur5]] [--fma]

Per robot (example-robot-data's URDFs): ABA, its Jacobian in (q, v, tau) by anvil.ad (`jacobian` of ABA on the stacked
z = (q, v, tau): Pinocchio's computeABADerivatives gives the same three blocks, in the tangent space), RNEA and CRBA.
anvil's functions are compiled with anvil's own JIT flags (-O3 -march=native, no fused multiply-adds) into tight-loop
harnesses; Pinocchio's C++ runs in benchmarks/pinocchio/driver.cpp (-O3 -march=native -ffp-contract=off,
benchmarks/pinocchio_driver.py). With `--fma` all sides fuse multiply-adds instead (anvil's ANVIL_FMA=1 build,
-ffp-contract=fast for the others): the same table, everyone at their fastest.
Both are timed in the same run, round robin, `--rounds` times: each round's best of its repetitions, the median over
rounds. "cold build" is a fresh process with an empty cache building ABA and its Jacobian (trace, derive, render,
compile). The chain table builds the same two functions for a synthetic chain of N revolute bodies. With `--casadi
PYTHON` (a Python with pip `cmeel-casadi-kin-dyn`, in a virtual environment of its own: it pins an old Pinocchio),
CasADi's generated C of Pinocchio's ABA and of its Jacobian (benchmarks/casadi/kin_dyn_gen.py; gcc -O3 -march=native
with the same contraction flag, its build time the compile's) joins the same round robin for `--casadi-robots`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import anvil as av
import benchmarks.bench_ad as bench_ad
from anvil.ad import jacobian
from anvil.codegen.jit import CXXFLAGS, FMA_FLAGS, HOST_FLAGS
from anvil.robots import Robot
from benchmarks.common import ROOT, Exe, run_exe
from benchmarks.pinocchio_driver import contraction, pinocchio_times, robot_urdf

#: The robots of the table: example-robot-data name -> (free flyer, locked joints).
ROBOTS = {
  "panda": (False, ("panda_finger_joint1", "panda_finger_joint2")),
  "ur5": (False, ()),
  "talos_arm": (False, ()),
  "solo12": (True, ()),
  "talos": (True, ()),
}
#: anvil's JIT flags, for an object file instead of a shared library.
ANVIL_FLAGS = tuple(f for f in CXXFLAGS if f not in ("-shared", "-fPIC")) + HOST_FLAGS[0]


def anvil_flags(fma: bool) -> tuple[str, ...]:
  """ANVIL_FLAGS, with FMA_FLAGS after them when `fma` (as an ANVIL_FMA=1 build)."""
  return ANVIL_FLAGS + (FMA_FLAGS if fma else ())


CHILD = """import json, sys, time
t0 = time.perf_counter()
import numpy as np
from benchmarks.bench_robots import functions, load
robot = load({spec!r})
aba, daba = functions(robot)
z = np.zeros(aba.inputs[0].size)
aba(z)
t1 = time.perf_counter()
daba(z)
t2 = time.perf_counter()
print(json.dumps({{"aba_s": t1 - t0, "derivative_s": t2 - t1, "total_s": t2 - t0, "aba_kb": len(aba.source_code) / 1024,
                  "derivative_kb": len(daba.source_code) / 1024}}))
"""


def load(spec: str) -> Robot:
  """The robot of a table name, or "chainN" for a chain of N revolute bodies."""
  if spec.startswith("chain"):
    return Robot.from_urdf(chain_urdf(int(spec[5:])))
  floating, locked = ROBOTS[spec]
  return Robot.from_urdf(robot_urdf(spec), floating_base=floating, locked_joints=list(locked))


def chain_urdf(n: int) -> str:
  """A chain of n bodies on revolute joints whose axes cycle through z, y, x and a skew one."""
  axes = ("0 0 1", "0 1 0", "1 0 0", "0.6 0.8 0")
  links = "".join(f'<link name="l{k}"><inertial><origin xyz="0.01 0.02 0.15"/><mass value="{1 + k % 3}"/>'
                  f'<inertia ixx="0.02" ixy="0.001" ixz="0" iyy="0.03" iyz="0.002" izz="0.01"/></inertial></link>'
                  for k in range(n + 1))  # fmt: skip
  joints = "".join(f'<joint name="j{k}" type="revolute"><parent link="l{k}"/><child link="l{k + 1}"/>'
                   f'<origin xyz="0 0.05 0.3" rpy="0.1 0 0"/><axis xyz="{axes[k % 4]}"/>'
                   '<limit lower="-3" upper="3" effort="50" velocity="5"/></joint>' for k in range(n))  # fmt: skip
  return f'<robot name="chain{n}">{links}{joints}</robot>'


def functions(robot: Robot) -> tuple[av.NumericalFunction[..., Any], av.NumericalFunction[..., Any]]:
  """ABA of z = (q, v, tau), and its Jacobian by anvil.ad."""
  nq, nv = robot.nq, robot.nv
  aba = av.NumericalFunction(f"{robot.identifier}_aba", lambda z: robot.aba(z[:nq], z[nq : nq + nv], z[nq + nv :]),
                             av.Arg(nq + 2 * nv))  # fmt: skip
  return aba, jacobian(aba)


def cold_build(spec: str, fma: bool) -> dict[str, float]:
  """Seconds to build ABA and its Jacobian in a fresh process with an empty cache (with ANVIL_FMA=1 when `fma`)."""
  with tempfile.TemporaryDirectory() as cache:
    env = {"ANVIL_CACHE_DIR": cache, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "ANVIL_FMA": str(int(fma))}
    proc = subprocess.run([sys.executable, "-c", CHILD.format(spec=spec)], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=True)  # fmt: skip
  result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
  return result


def harnesses(robot: Robot, out: Path, fma: bool) -> dict[str, tuple[Exe, int]]:
  """Tight-loop harnesses of anvil's aba, its Jacobian, rnea and crba at a random state, built as ANVIL_FMA=1 would
  when `fma`: name -> (exe, outputs)."""
  rng = np.random.default_rng(0)
  nq, nv = robot.nq, robot.nv
  q, v, x = robot.random_configuration(rng), rng.standard_normal(nv), rng.standard_normal(nv)
  aba, daba = functions(robot)
  rnea = av.NumericalFunction(f"{robot.identifier}_rnea", lambda z: robot.rnea(z[:nq], z[nq : nq + nv], z[nq + nv :]),
                              av.Arg(nq + 2 * nv))  # fmt: skip
  crba = av.NumericalFunction(f"{robot.identifier}_crba", lambda q_: robot.crba(q_).reshape(-1), av.Arg(nq))
  z = np.concatenate([q, v, x])
  cases = {"aba": (aba, [z], nv), "aba_derivatives": (daba, [z], nv * (nq + 2 * nv)), "rnea": (rnea, [z], nv),
           "crba": (crba, [q], nv * nv)}  # fmt: skip
  made = {}
  for name, (fn, inputs, ny) in cases.items():
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    made[name] = (bench_ad.anvil_harness(fn.name, fn, inputs, ny, folder, 1, anvil_flags(fma)), ny)
  return made


def casadi_harnesses(python: str, spec: str, out: Path, fma: bool) -> tuple[dict[str, Path], float]:
  """CasADi's aba and its Jacobian (benchmarks/casadi/kin_dyn_gen.py run by `python`) in tight-loop harnesses, with
  fused multiply-adds when `fma` (gcc's own default for C), else without as anvil's and Pinocchio's: {"aba" |
  "aba_derivatives": executable}, and the seconds gcc took to build them."""
  folder = out / spec / "casadi"
  folder.mkdir(parents=True, exist_ok=True)
  _, locked = ROBOTS[spec]
  script = ROOT / "benchmarks" / "casadi" / "kin_dyn_gen.py"
  subprocess.run([python, str(script), str(robot_urdf(spec)), str(folder), ",".join(locked)], check=True,
                 capture_output=True, text=True)  # fmt: skip
  exes, seconds = {}, 0.0
  for name, fn in (("aba", "cas_aba"), ("aba_derivatives", "cas_daba")):
    shutil.copy(folder / f"{fn}.h", folder / "fn.h")
    harness = ROOT / "benchmarks" / "casadi" / "robot_harness.c"
    start = time.perf_counter()
    command = ["gcc", "-O3", "-march=native", contraction(fma), f"-DFN={fn}", "-I", str(folder), str(harness),
               str(folder / f"{fn}.c")]  # fmt: skip
    subprocess.run([*command, "-o", str(folder / fn), "-lm"], check=True)
    seconds += time.perf_counter() - start
    exes[name] = folder / fn
  return exes, seconds


def compare(
  spec: str, rounds: int, out: Path, casadi: dict[str, Path], fma: bool
) -> dict[str, tuple[float, float, float]]:
  """{algorithm: (anvil µs, Pinocchio µs, CasADi µs or NaN)}: medians over rounds of each round's best, alternating
  who goes first."""
  robot = load(spec)
  exes = harnesses(robot, out / spec, fma)
  floating, locked = ROBOTS[spec]
  times: dict[str, dict[str, list[float]]] = {side: {k: [] for k in exes} for side in ("anvil", "pinocchio", "casadi")}
  for r in range(rounds):
    for side in ("anvil", "pinocchio", "casadi")[:: 1 if r % 2 == 0 else -1]:
      if side == "pinocchio":
        found = pinocchio_times(robot_urdf(spec), floating_base=floating, locked_joints=locked, calls=2000, repeats=5,
                                fma=fma)  # fmt: skip
        for k in exes:
          times[side][k].append(found[k][0])
      for k, path in casadi.items() if side == "casadi" else ():
        lines = subprocess.run([str(path), "2000", "5"], capture_output=True, text=True, check=True).stdout.split("\n")
        times[side][k].append(min(float(ln.split()[1]) for ln in lines if ln.startswith("ns ")) / 1000)
      for k, (exe, _) in exes.items() if side == "anvil" else ():
        _, ns = run_exe(exe, 2000, 5, 200)
        times[side][k].append(min(ns) / 1000)
  median = lambda xs: statistics.median(xs) if xs else float("nan")
  return {k: (median(times["anvil"][k]), median(times["pinocchio"][k]), median(times["casadi"][k])) for k in exes}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--robots", default="panda,solo12,talos")
  parser.add_argument("--chain", default="2,4,8,16,32", help="chain sizes for the growth table ('' for none)")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--casadi", default="", help="a Python with cmeel-casadi-kin-dyn: CasADi's ABA joins the run")
  parser.add_argument("--casadi-robots", default="panda,ur5", help="the robots CasADi's ABA is generated for")
  parser.add_argument("--fma", action="store_true", help="every side built with fused multiply-adds")
  args = parser.parse_args()
  out = Path(tempfile.mkdtemp(prefix="bench_robots_"))
  flags = " ".join(anvil_flags(args.fma))
  print(f"anvil flags: {flags}; Pinocchio and CasADi: {contraction(args.fma)}; harnesses in {out}\n")
  print(f"{'robot':<10} {'nq/nv':>6} {'algorithm':<16} {'anvil us':>9} {'pinocchio us':>13} {'ratio':>6} "
        f"{'casadi us':>10} {'ratio':>6}")  # fmt: skip
  builds, casadi_builds = {}, {}
  for spec in [s for s in args.robots.split(",") if s]:
    robot = load(spec)
    casadi: dict[str, Path] = {}
    if args.casadi and spec in args.casadi_robots.split(","):
      casadi, casadi_builds[spec] = casadi_harnesses(args.casadi, spec, out, args.fma)
    for k, (mine, theirs, cas) in compare(spec, args.rounds, out, casadi, args.fma).items():
      print(f"{spec:<10} {f'{robot.nq}/{robot.nv}':>6} {k:<16} {mine:>9.3f} {theirs:>13.3f} {mine / theirs:>6.2f} "
            f"{cas:>10.3f} {mine / cas:>6.2f}")  # fmt: skip
    builds[spec] = cold_build(spec, args.fma)
  for spec, seconds in casadi_builds.items():
    print(f"{spec}: CasADi's aba and Jacobian C compiled in {seconds:.1f} s (gcc -O3 -march=native; generation apart)")
  print(
    f"\n{'robot':<10} {'bodies':>6} {'cold build s (aba + derivatives)':>34} {'aba .cpp KB':>12} {'deriv .cpp KB':>14}"
  )
  chains = [f"chain{c}" for c in args.chain.split(",") if c]
  for spec in chains:
    builds[spec] = cold_build(spec, args.fma)
  for spec, b in builds.items():
    print(
      f"{spec:<10} {len(load(spec).joints):>6} {b['total_s']:>34.1f} {b['aba_kb']:>12.0f} {b['derivative_kb']:>14.0f}"
    )


if __name__ == "__main__":
  main()
