"""acados on the chain-of-masses OCP (anvil.problems.chain), in closed loop, for bench_chain's same-run comparison.

Needs an acados installation (its include/ and lib/ under one prefix) and casadi. Measured with acados built from
source with its pinned BLASFEO and HPIPM (`git submodule update --init external/blasfeo external/hpipm`):
  cmake .. -DCMAKE_BUILD_TYPE=Release -DBLASFEO_TARGET=X64_INTEL_HASWELL -DHPIPM_TARGET=AVX
    -DACADOS_WITH_{QPOASES,OSQP,DAQP,QPDUNES,HPMPC,CLARABEL}=OFF -DCMAKE_INSTALL_PREFIX=<prefix>, then make install.

The model's functions are generated from the same model code anvil's controllers trace (chain.ode, through CasADi's
SX), with the signatures acados's ERK integrator calls (expl_ode_fun, expl_vde_forw, expl_vde_adj, expl_ode_hess, as
acados's own code generation builds them); the driver benchmarks/acados/chain.c sets up the same OCP (LINEAR_LS cost,
the wall as soft bounds, x_0 fixed) and runs its closed loop. acados is configured as its users tune it for speed:
HPIPM in SPEED mode, warm-started, every call from the previous solution shifted; the stages' partial condensing (and
an exact Hessian's regularization) are swept and the fastest configuration whose closed loop has no failed call is
kept. Between steps the solution is shifted primal and dual (x, u, pi, lam, sl, su), and a full SQP's first QP is
warm-started from the NLP's multipliers (warm_start_first_qp_from_nlp), as anvil's controllers do; the SQP's
tolerances are `--tol` (bench_chain passes its own); each step's time is its least over the repeats (bench_chain times
anvil's controllers the same way). A configuration whose driver fails or prints no result counts as failed (acados's
warnings on stdout are skipped).

Standalone: `.venv/bin/python -m benchmarks.acados_chain --acados /path/to/acados/install --sizes 3 5 [--tol 1e-8]`.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anvil.problems import chain
from anvil.problems.backend import casadi_backend
from benchmarks.common import ROOT

DRIVER = ROOT / "benchmarks" / "acados" / "chain.c"
#: The controllers as acados runs them: (the driver's nlp argument, the regularizations swept).
CONTROLLERS = {
  "rti": ("rti", ("NO_REGULARIZE",)),
  "gn": ("sqp", ("NO_REGULARIZE",)),
  "sqp": (
    "sqp_exact",
    ("NO_REGULARIZE", "MIRROR", "PROJECT", "PROJECT_REDUC_HESS", "CONVEXIFY", "GERSHGORIN_LEVENBERG_MARQUARDT"),
  ),
}
#: The stage QPs' partial condensing swept: cond_N, the stages after condensing (N = 40: none; full condensing is
#: slower at every size measured).
CONDENSING = (40, 10, 5, 2)


@dataclass(frozen=True)
class AcadosLoop:
  """One configuration's closed loop: each step's wall time (s, the fastest of the repeats), SQP and QP iterations,
  the closed-loop cost, the calls that failed (nonzero status) and each step's time in the QPs (condensing
  included, of the fastest repeat)."""

  configuration: str
  seconds: np.ndarray
  sqp_iterations: np.ndarray
  qp_iterations: np.ndarray
  cost: float
  failures: int
  qp_seconds: np.ndarray


def model_code(n_mass: int, out: Path, steps: int) -> None:
  """chain_model.c/.h (the ODE's functions with acados's ERK signatures) and chain_data.h (sizes, weights, x0) for
  `n_mass` masses and a closed loop of `steps` steps."""
  import casadi as ca

  nx, nu = chain.state_size(n_mass), chain.NU
  x, u, p = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("p", 0, 1)
  Sx, Su, lam = ca.SX.sym("Sx", nx, nx), ca.SX.sym("Su", nx, nu), ca.SX.sym("lambdaX", nx, 1)
  f = chain.ode(x, u, n_mass, casadi_backend(ca))
  z = ca.vertcat(x, u)
  adj = ca.jtimes(f, z, lam, True)
  S = ca.vertcat(ca.horzcat(Sx, Su), ca.horzcat(ca.DM.zeros(nu, nx), ca.DM.eye(nu)))
  hess = ca.mtimes(S.T, ca.jtimes(adj, z, S))
  lower = ca.vertcat(*[hess[i, j] for j in range(nx + nu) for i in range(j, nx + nu)])
  options = {"cse": True}
  functions = [
    ca.Function("chain_expl_ode_fun", [x, u, p], [f], options),
    ca.Function("chain_expl_vde_forw", [x, Sx, Su, u, p], [f, ca.jtimes(f, x, Sx), ca.jacobian(f, u) +
                ca.jtimes(f, x, Su)], options),
    ca.Function("chain_expl_vde_adj", [x, lam, u, p], [adj], options),
    ca.Function("chain_expl_ode_hess", [x, Sx, Su, lam, u, p], [adj, lower], options),
  ]  # fmt: skip
  code = ca.CodeGenerator("chain_model.c", {"casadi_int": "int", "casadi_real": "double", "with_header": True})
  for fn in functions:
    code.add(fn)
  code.generate(f"{out}/")
  values = lambda a: ", ".join(repr(float(v)) for v in a)
  walls = chain.wall_indices(n_mass)
  (out / "chain_data.h").write_text(
    f"// anvil.problems.chain, n_mass = {n_mass} (benchmarks/acados_chain.py)\n"
    f"#define NX {nx}\n#define NU {nu}\n#define NWALL {len(walls)}\n#define HORIZON {chain.HORIZON}\n"
    f"#define TS {chain.TS!r}\n#define RK4_STEPS {chain.RK4_STEPS}\n#define CL_STEPS {steps}\n"
    f"#define U_MAX {chain.U_MAX!r}\n#define WALL {chain.WALL!r}\n"
    f"#define WALL_L1 {chain.WALL_L1!r}\n#define WALL_L2 {chain.WALL_L2!r}\n"
    f"static const double X_INIT[NX] = {{{values(chain.initial_state(n_mass))}}};\n"
    f"static const double X_REST[NX] = {{{values(chain.rest_state(n_mass))}}};\n"
    f"static const double QW[NX] = {{{values(chain.state_weights(n_mass))}}};\n"
    f"static const int WALL_IDX[NWALL] = {{{', '.join(str(i) for i in walls)}}};\n"
  )


def build_driver(prefix: Path, n_mass: int, out: Path, steps: int) -> Path:
  """The driver for `n_mass` masses built against acados at `prefix` (cc -O3 -march=native, as the model code)."""
  model_code(n_mass, out, steps)
  include = [f"-I{prefix / d}" for d in ("include", "include/blasfeo/include", "include/hpipm/include")]
  exe, lib = out / "chain", prefix / "lib"
  command = ["cc", "-O3", "-march=native", "-std=c99", f"-I{out}", *include, str(DRIVER), str(out / "chain_model.c"),
             "-o", str(exe), f"-L{lib}", f"-Wl,--disable-new-dtags,-rpath,{lib}", "-lacados", "-lhpipm", "-lblasfeo",
             "-lm"]  # fmt: skip
  subprocess.run(command, check=True, capture_output=True, text=True)
  return exe


#: The lines the driver prints, by their first word; anything else it prints (acados's warnings) is skipped.
RESULT_KEYS = ("cost", "failures", "sqp_iterations", "qp_iterations", "seconds", "qp_seconds")


def run(exe: Path, nlp: str, condensing: int, regularization: str, repeats: int, tol: float) -> AcadosLoop | None:
  """One configuration's closed loop, `repeats` times (each step's least time over them); None where the driver
  failed or printed no result (the configuration counts as failed, its output is not parsed into one)."""
  result = subprocess.run([str(exe), nlp, str(condensing), str(repeats), repr(tol), regularization],
                          capture_output=True, text=True)  # fmt: skip
  lines = {}
  for line in result.stdout.splitlines():
    key, _, rest = line.partition(" ")
    if key in RESULT_KEYS:
      lines[key] = rest
  if result.returncode != 0 or set(lines) != set(RESULT_KEYS):
    return None
  array = lambda key, kind: np.array(lines[key].split(), dtype=kind)
  name = f"cond_N {condensing}" + ("" if regularization == "NO_REGULARIZE" else f", {regularization}")
  return AcadosLoop(name, array("seconds", float), array("sqp_iterations", int), array("qp_iterations", int),
                    float(lines["cost"]), int(lines["failures"]), array("qp_seconds", float))  # fmt: skip


def best_loops(prefix: Path, n_mass: int, controllers: list[str], steps: int, repeats: int = 5,
               tol: float = 1e-6) -> dict[str, Any]:  # fmt: skip
  """Each controller's fastest configuration (least median step) among those whose closed loop has no failed call
  (an AcadosLoop), or None where every one failed."""
  best: dict[str, Any] = {}
  with tempfile.TemporaryDirectory(prefix="acados_chain_") as out:
    exe = build_driver(prefix, n_mass, Path(out), steps)
    for kind in controllers:
      nlp, regularizations = CONTROLLERS[kind]
      loops = [run(exe, nlp, cond, reg, repeats, tol) for cond, reg in itertools.product(CONDENSING, regularizations)]
      passing = [lp for lp in loops if lp is not None and lp.failures == 0]
      best[kind] = min(passing, key=lambda lp: float(np.median(lp.seconds)), default=None)
  return best


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--acados", type=Path, required=True, help="acados's install prefix (include/, lib/)")
  parser.add_argument("--sizes", type=int, nargs="+", default=[3], help="n_mass values")
  parser.add_argument("--controllers", nargs="+", default=list(CONTROLLERS), choices=list(CONTROLLERS))
  parser.add_argument("--tol", type=float, default=1e-6, help="the SQP's tolerances (acados's default 1e-6)")
  parser.add_argument("--repeats", type=int, default=5, help="closed loops per configuration (each step's least)")
  args = parser.parse_args()
  for n_mass in args.sizes:
    nx = chain.state_size(n_mass)
    print(f"\nchain of {n_mass} masses (nx = {nx}), acados's fastest configuration per controller")
    loops = best_loops(args.acados, n_mass, args.controllers, chain.CLOSED_LOOP_STEPS, args.repeats, args.tol)
    for kind, lp in loops.items():
      if lp is None:
        print(f"  acados {kind:<4} every configuration failed a call")
        continue
      ms = np.median(lp.seconds) * 1e3, np.percentile(lp.seconds, 95) * 1e3
      print(f"  acados {kind:<4} {ms[0]:8.3f} ms median, p95 {ms[1]:.3f}, its {lp.sqp_iterations.mean():.2f}, "
            f"QP its {lp.qp_iterations.mean():.2f}, cost {lp.cost:.6f} ({lp.configuration})")  # fmt: skip


if __name__ == "__main__":
  main()
