"""A stiff model: the CSTR of anvil.problems.cstr (reaction 100x faster than the 0.1 s sampling time), discretized by
one 3-stage Radau IIA step per sample (`irk`), controlled from its feed state to a steady state.

Run: `python examples/cstr_stiff.py [--out DIR] [--steps K]`. Shows why an implicit method: over one sample from
the feed state (the fastest transient), RK4 is unstable with fewer than 4 steps while Radau IIA is stable with one
(L-stable) and accurate with two; then prints the MPC's closed-loop metrics, the build time and the distance to the
steady state, and plots the run.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.integrate import solve_ivp

from anvil.mpc import irk, plot_closed_loop, rk4, simulate
from anvil.problems import cstr
from anvil.problems.backend import NUMPY, TINYGRAD

from cli import example_arguments


def main() -> None:
  """Compare the integrators on the start state, build the MPC, run `--steps` steps of 0.1 s, report and plot."""
  args = example_arguments(__doc__, 50)
  implicit = cstr.dynamics("cstr_example_F")
  u = np.array([cstr.Q_REF])
  exact = solve_ivp(lambda t, x: cstr.ode(x, u, NUMPY), (0.0, cstr.DT), cstr.X0, method="Radau", rtol=1e-12, atol=1e-12)
  print("one sample (0.1 s) from the feed state, error against scipy's Radau at rtol 1e-12:")
  for steps in (1, 2, 4, 8):
    explicit = rk4(f"cstr_example_rk4_{steps}", lambda x, u: cstr.ode(x, u, TINYGRAD), cstr.DT, nx=2, nu=1, steps=steps)
    print(f"  RK4, {steps} step(s): {np.abs(explicit(cstr.X0, u) - exact.y[:, -1]).max():.2e}")
  for steps in (1, 2):
    radau = implicit if steps == 1 else irk("cstr_example_F2", lambda x, u: cstr.ode(x, u, TINYGRAD), cstr.DT, nx=2,
                                             nu=1, steps=steps)  # fmt: skip
    print(f"  Radau IIA (3 stages), {steps} step(s): {np.abs(radau(cstr.X0, u) - exact.y[:, -1]).max():.2e}")

  mpc = cstr.cstr_mpc("cstr_example")
  start = time.perf_counter()
  mpc(cstr.X0)
  print(f"build (trace, generate, compile or load from cache) and first solve: {time.perf_counter() - start:.1f} s")
  cl = simulate(mpc, implicit, cstr.X0, args.steps)
  print(cl.summary())
  error = np.abs(cl.x[-1] - np.array([cstr.C_REF, cstr.T_REF]))
  print(f"final distance to the steady state: {error.max():.2e}")
  print(f"plot: {plot_closed_loop(cl, args.out / 'cstr_stiff.png', cstr.DT, ('c', 'T'))}")


if __name__ == "__main__":
  main()
