"""HPIPM on one OCP QP, for bench_riccati's per-iteration comparison at the same partial condensing.

Needs an HPIPM installation with BLASFEO (acados's install prefix holds both: include/hpipm/include,
include/blasfeo/include, lib/; benchmarks/acados_chain.py says how it is built). The driver benchmarks/hpipm/qp.c reads
the QP from a file this module writes (RiccatiQP's layout: boxes on the inputs, one elastic row per stage priced L1 +
L2, a hard terminal row; x_0 = x0 posed as HPIPM's users pose it, a box on x_0), condenses it to cond_N stages
(d_part_cond_qp_cond; cond_N = N: none), solves it from a cold start in SPEED mode (acados's default) and expands the
solution, `repeats` times, reporting each part's least time.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT

DRIVER = ROOT / "benchmarks" / "hpipm" / "qp.c"


@dataclass(frozen=True)
class HPIPMSolve:
  """One QP's solve by HPIPM: status (0 solved), iterations, the least seconds over the repeats of the partial
  condensing, of the interior point and of the expansion, the objective (slacks' prices included) and u_0."""

  status: int
  iterations: int
  cond_seconds: float
  ipm_seconds: float
  expand_seconds: float
  objective: float
  u0: np.ndarray

  @property
  def seconds(self) -> float:
    """Condensing, interior point and expansion: the time a solve of the uncondensed QP takes."""
    return self.cond_seconds + self.ipm_seconds + self.expand_seconds


def build_driver(prefix: Path, out: Path) -> Path:
  """The driver built against HPIPM and BLASFEO at `prefix` (cc -O3 -march=native, as anvil's JIT builds)."""
  include = [f"-I{prefix / d}" for d in ("include/hpipm/include", "include/blasfeo/include")]
  exe, lib = out / "hpipm_qp", prefix / "lib"
  command = ["cc", "-O3", "-march=native", "-std=c99", *include, str(DRIVER), "-o", str(exe), f"-L{lib}",
             f"-Wl,--disable-new-dtags,-rpath,{lib}", "-lhpipm", "-lblasfeo", "-lm"]  # fmt: skip
  subprocess.run(command, check=True, capture_output=True, text=True)
  return exe


def write_qp(d: dict[str, Any], path: Path) -> None:
  """The QP `d` (RiccatiQP data with boxes and quadratic prices: G/lo/hi with nz box rows and one stored row, GN/loN
  with nx box rows and one stored row) in the driver's file layout (its header comment)."""
  N, nx, nu = d["B"].shape
  nz = nx + nu
  parts = []
  for k in range(N):
    parts += [d["H"][k], d["g"][k], d["A"][k], d["B"][k], d["c"][k], d["lo"][k, nx:nz], d["hi"][k, nx:nz]]
    parts += [d["G"][k, 0], d["lo"][k, nz:], d["z"][k, nz:], d["w"][k, nz:]]
  parts += [d["HN"], d["gN"], d["GN"][0], d["loN"][nx:], d["x0"]]
  np.concatenate([np.ravel(p) for p in parts]).astype(np.float64).tofile(path)


def solve(exe: Path, path: Path, shape: tuple[int, int, int], cond_N: int, repeats: int, tol: float,
          iter_max: int = 100) -> HPIPMSolve:  # fmt: skip
  """The QP at `path` of (nx, nu, N) `shape` condensed to cond_N stages, solved `repeats` times to `tol` in at most
  `iter_max` interior-point iterations."""
  nx, nu, N = shape
  args = [str(exe), str(path), str(nx), str(nu), str(N), str(cond_N), str(repeats), repr(tol), str(iter_max)]
  result = subprocess.run(args, check=True, capture_output=True, text=True)
  lines = dict(line.partition(" ")[::2] for line in result.stdout.splitlines())
  return HPIPMSolve(int(lines["status"]), int(lines["iterations"]), float(lines["cond_seconds"]),
                    float(lines["ipm_seconds"]), float(lines["expand_seconds"]), float(lines["objective"]),
                    np.array(lines["u0"].split(), dtype=float))  # fmt: skip
