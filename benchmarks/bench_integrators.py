"""One implicit Runge-Kutta step and its Jacobian on stiff models: anvil's `irk` (generated C++ around
anvil/implicit_rk.hpp) against CasADi's generated C for the same step, same run, timed in one C++ harness, with
build times.

Run from the repository root:

  .venv/bin/python -m benchmarks.bench_integrators
  .venv/bin/python -m benchmarks.bench_integrators --reps 20000 --cells 40

Models: the CSTR of anvil.problems.cstr (nx = 2; Arrhenius kinetics 100x faster than the sampling time DT = 0.1),
at its feed state with full cooling; a reaction-diffusion line (nx = --cells: diffusion over the cells, the input
the inflow's concentration, a quadratic reaction; its stiffest mode is ~ -4 D / dx^2 = -1600 at 20 cells, DT = 0.1:
a banded Newton matrix); the chain of masses of anvil.problems.chain with 5 masses (nx = 21, nu = 3: not stiff, a
dense Newton matrix), at rest.
The step: Radau IIA with 3 stages, one step of DT. anvil: `irk(..., newton_tol=1e-10)`, damped Newton from K = 0,
its Jacobian by the implicit function theorem (`F.jacobian`). CasADi: the same collocation equations as an SX
function, solved by `rootfinder("fast_newton")` from K = 0 (abstol 1e-10 on the residual, abstolStep 1e-10), the
step's Jacobian `ca.jacobian` of its MX graph (CasADi differentiates a rootfinder by the implicit function theorem
too). Both compiled at -O3 -fno-math-errno (CasADi's C as C) into one harness; each time is the best of 5 means of
--reps calls. Build: anvil = trace, derive and render the module, then compile it; CasADi = build the graphs and
generate C, then compile it.

Then the CSTR's MPC (anvil.problems.cstr: N = 20 Radau IIA steps) in closed loop for --mpc-steps steps from the feed
state: anvil's controller (`cstr_mpc`, its C++ Stats solve time) against CasADi's IPOPT on the same NLP with the
collocation equations as constraints (`cstr.solve_ipopt`, warm started from the shifted solution, t_wall_total), with
the largest difference between their inputs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import anvil
from anvil.codegen import find_c_compiler, find_compiler
from anvil.mpc import irk, simulate
from anvil.mpc.implicit import collocation_tableau
from anvil.problems import chain, cstr
from anvil.problems.backend import TINYGRAD, casadi_backend
from benchmarks.common import anvil_cache, load_casadi, sh

STAGES, DT, NEWTON_TOL = 3, 0.1, 1e-10
FLAGS = ("-O3", "-fno-math-errno")
DIFFUSION, REACTION = 1.0, 1.0
CHAIN_MASSES = 5


@dataclass(frozen=True)
class Model:
  """A stiff model: its ODE on a backend's vectors (x, u, b) or on tinygrad Tensors, sizes and the point timed."""

  name: str
  ode: Callable[[Any, Any, Any], Any]
  nx: int
  nu: int
  x: np.ndarray
  u: np.ndarray


def reaction_diffusion(cells: int) -> Model:
  """x_i' = D (x_{i-1} - 2 x_i + x_{i+1}) / dx^2 - R x_i^2 on `cells` cells of a unit line, x_0 = u (the inflow),
  no flux out of the last cell."""
  inv_dx2 = DIFFUSION * cells**2

  def ode(x: Any, u: Any, b: Any) -> Any:
    rates = []
    for i in range(cells):
      left = u[0] if i == 0 else x[i - 1]
      right = x[i] if i == cells - 1 else x[i + 1]
      rates.append(inv_dx2 * (left - 2 * x[i] + right) - REACTION * x[i] * x[i])
    return b.stack(*rates)

  return Model(f"diffusion{cells}", ode, cells, 1, np.linspace(0.5, 0.0, cells), np.array([1.0]))


def models(cells: int) -> list[Model]:
  """The CSTR, the reaction-diffusion line and the chain of masses (P4 with 5 masses: not stiff, but its Jacobian
  couples every mass to its neighbours' positions through the springs' lengths: a dense Newton matrix)."""
  chain_ode = lambda x, u, b: chain.ode(x, u, CHAIN_MASSES, b)
  rest = chain.rest_state(CHAIN_MASSES)
  return [Model("cstr", cstr.ode, cstr.NX, cstr.NU, cstr.X0, np.array([cstr.Q_MAX])), reaction_diffusion(cells),
          Model("chain5", chain_ode, rest.size, chain.NU, rest, np.array([0.1, -0.2, 0.3]))]  # fmt: skip


HARNESS_HEAD = r"""
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include "bench_irk.hpp"
extern "C" {
#include "bench_casadi.h"
}
template <class Fn>
static double best_us(Fn&& fn, int reps) {
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < reps; ++k) fn();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
    if (us < best) best = us;
  }
  return best;
}
static casadi_real work[1 << 20];
static casadi_int iwork[1 << 14];
int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 2000;
"""

HARNESS_MODEL = r"""
  {{
    static double x[{nx}] = {{{x}}}, u[{nu}] = {{{u}}}, xa[{nx}], ja[{nx} * {nz}], xc[{nx}], jc[{nx} * {nz}];
    static {m}_F::WS_t ws;
    static {m}_F_jacobian::WS_t wj;
    {m}_F::init(ws);
    {m}_F_jacobian::init(wj);
    const {m}_F::IN0_t x0(x);
    const {m}_F::IN1_t u0(u);
    {m}_F::OUT0_t xn(xa);
    {m}_F_jacobian::OUT0_t xn2(xa);
    {m}_F_jacobian::OUT1_t jac(ja);
    // NOTE: CasADi's functions use arg and res beyond their inputs and outputs as scratch (sz_arg, sz_res)
    static const casadi_real* arg[256] = {{x, u}};
    static casadi_real* res_step[256] = {{xc}};
    static casadi_real* res_jac[256] = {{xc, jc}};
    double anvil_step = best_us([&] {{ {m}_F::call(x0, u0, xn, ws); }}, reps);
    double anvil_jac = best_us([&] {{ {m}_F_jacobian::call(x0, u0, xn2, jac, wj); }}, reps);
    double casadi_step = best_us([&] {{ ca_{m}_F(arg, res_step, iwork, work, 0); }}, reps);
    double casadi_jac = best_us([&] {{ ca_{m}_J(arg, res_jac, iwork, work, 0); }}, reps);
    double diff = 0;
    for (int i = 0; i < {nx}; ++i) diff = std::fmax(diff, std::fabs(xa[i] - xc[i]));
    for (int i = 0; i < {nx} * {nz}; ++i) diff = std::fmax(diff, std::fabs(ja[i] - jc[i]));
    std::printf("{m} %.6g %.6g %.6g %.6g %.3g\n", anvil_step, anvil_jac, casadi_step, casadi_jac, diff);
  }}
"""


def anvil_functions(model: Model) -> list[anvil.FunctionBase]:
  """The model's step (<name>_F) and the step with its Jacobian in [x; u] (<name>_F_jacobian)."""
  F = irk(f"{model.name}_F", lambda x, u: model.ode(x, u, TINYGRAD), DT, nx=model.nx, nu=model.nu, stages=STAGES,
          newton_tol=NEWTON_TOL)  # fmt: skip
  return [F, F.jacobian]


def casadi_functions(ca: Any, model: Model) -> list[Any]:
  """The step (ca_<name>_F) and its Jacobian in [x; u] (ca_<name>_J, with the step) by a rootfinder on the same
  collocation equations."""
  a, b_ = collocation_tableau("radau", STAGES)
  nx, nu = model.nx, model.nu
  x, u, K = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("K", nx * STAGES)
  stages = [K[i * nx : (i + 1) * nx] for i in range(STAGES)]
  backend = casadi_backend(ca)
  residual = ca.vertcat(*[stages[i] - model.ode(x + DT * sum(a[i][j] * stages[j] for j in range(STAGES)), u,
                                                backend) for i in range(STAGES)])  # fmt: skip
  equations = ca.Function(f"{model.name}_collocation", [K, ca.vertcat(x, u)], [residual])
  solver = ca.rootfinder(f"{model.name}_newton", "fast_newton", equations,
                         {"abstol": NEWTON_TOL, "abstolStep": NEWTON_TOL, "max_iter": 50})  # fmt: skip
  xs, us = ca.MX.sym("x", nx), ca.MX.sym("u", nu)
  solved = solver(ca.MX.zeros(nx * STAGES), ca.vertcat(xs, us))
  x_next = xs + DT * sum(b_[i] * solved[i * nx : (i + 1) * nx] for i in range(STAGES))
  jac = ca.densify(ca.jacobian(x_next, ca.vertcat(xs, us)).T)  # NOTE: column-major: the transpose is row-major J
  return [
    ca.Function(f"ca_{model.name}_F", [xs, us], [x_next]),
    ca.Function(f"ca_{model.name}_J", [xs, us], [x_next, jac]),
  ]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--reps", type=int, default=2000, help="calls per timing round")
  parser.add_argument("--cells", type=int, default=20, help="cells of the reaction-diffusion line (its nx)")
  parser.add_argument("--mpc-steps", type=int, default=30, help="closed-loop steps of the CSTR's MPC (0: none)")
  args = parser.parse_args()
  ca = load_casadi()
  chosen = models(args.cells)
  with tempfile.TemporaryDirectory(prefix="bench_irk_") as tmp:
    folder = Path(tmp)
    with anvil_cache(folder / "cache"):
      start = time.perf_counter()
      anvil.generate_module("bench_irk", [f for m in chosen for f in anvil_functions(m)], out_dir=folder)
      anvil_generate = time.perf_counter() - start
    start = time.perf_counter()
    gen = ca.CodeGenerator("bench_casadi.c", {"with_header": True})
    for model in chosen:
      for fn in casadi_functions(ca, model):
        gen.add(fn)
    gen.generate(f"{folder}/")
    casadi_generate = time.perf_counter() - start
    blocks = [HARNESS_MODEL.format(m=m.name, nx=m.nx, nu=m.nu, nz=m.nx + m.nu, x=", ".join(map(repr, m.x.tolist())),
                                   u=", ".join(map(repr, m.u.tolist()))) for m in chosen]  # fmt: skip
    (folder / "main.cpp").write_text(HARNESS_HEAD + "".join(blocks) + "  return 0;\n}\n")
    cxx, cc = find_compiler(), find_c_compiler()
    start = time.perf_counter()
    sh([cxx, "-std=c++17", *FLAGS, "-c", folder / "bench_irk.cpp", "-o", folder / "anvil.o"])
    anvil_compile = time.perf_counter() - start
    start = time.perf_counter()
    sh([cc, *FLAGS, "-c", folder / "bench_casadi.c", "-o", folder / "casadi.o"])
    casadi_compile = time.perf_counter() - start
    sh([cxx, "-std=c++17", *FLAGS, f"-I{folder}", "-c", folder / "main.cpp", "-o", folder / "main.o"])
    sh([cxx, folder / "main.o", folder / "anvil.o", folder / "casadi.o", "-o", folder / "bench", "-lm"])
    lines = sh([folder / "bench", str(args.reps)]).stdout.split("\n")
  print(f"one Radau IIA step ({STAGES} stages, DT = {DT}) and its Jacobian d[x_next]/d[x; u], microseconds per call")
  print(f"{'model':<14}{'nx':>4}  {'anvil step':>11}{'CasADi step':>12}{'ratio':>7}  {'anvil jac':>10}"
        f"{'CasADi jac':>11}{'ratio':>7}  {'max |diff|':>11}")  # fmt: skip
  for model, line in zip(chosen, lines, strict=False):
    _, step_a, jac_a, step_c, jac_c, diff = line.split()
    sa, ja, sc, jc = (float(v) for v in (step_a, jac_a, step_c, jac_c))
    print(f"{model.name:<14}{model.nx:>4}  {sa:>11.3f}{sc:>12.3f}{sa / sc:>7.2f}  {ja:>10.3f}{jc:>11.3f}{ja / jc:>7.2f}"
          f"  {float(diff):>11.2g}")  # fmt: skip
  print(
    f"build, all models [s]: anvil generate {anvil_generate:.2f} + compile {anvil_compile:.2f}; "
    f"CasADi generate {casadi_generate:.2f} + compile {casadi_compile:.2f}"
  )
  if args.mpc_steps:
    closed_loops(args.mpc_steps)


def closed_loops(steps: int) -> None:
  """The CSTR's MPC against IPOPT on the same NLP, in closed loop with the same plant; per-step milliseconds."""
  plant = cstr.dynamics("bench_cstr_plant")
  loop = simulate(cstr.cstr_mpc("bench_cstr"), plant, cstr.X0, steps, progress=False)
  x, guess, seconds, iterations, us = cstr.X0, None, [], [], []
  for _ in range(steps):
    sol = cstr.solve_ipopt(x, guess)
    seconds.append(sol.seconds)
    iterations.append(sol.iterations)
    us.append(sol.u[0])
    guess = (np.vstack([sol.x[1:], sol.x[-1:]]), np.vstack([sol.u[1:], sol.u[-1:]]))
    x = plant(x, sol.u[0])
  anvil_ms, ipopt_ms = 1e3 * np.asarray(loop.solve_times), 1e3 * np.asarray(seconds)
  print(f"\nCSTR MPC (N = {cstr.HORIZON}, one Radau IIA step per stage), {steps} closed-loop steps from the feed state")
  print(f"{'controller':<16}{'median ms':>10}{'p95 ms':>9}{'max ms':>9}{'iterations':>11}")
  for name, ms, its in (("anvil SQP", anvil_ms, loop.iterations), ("CasADi IPOPT", ipopt_ms, iterations)):
    print(f"{name:<16}{np.median(ms):>10.3f}{np.percentile(ms, 95):>9.3f}{ms.max():>9.3f}{np.mean(its):>11.2f}")
  print(f"median ratio anvil / IPOPT: {np.median(anvil_ms) / np.median(ipopt_ms):.3f}; "
        f"max |u_anvil - u_ipopt| over the loop: {np.abs(loop.u - np.array(us)).max():.1e}")  # fmt: skip


if __name__ == "__main__":
  main()
