"""The P2 stabilizing benchmark: the cart-pole (4 states, the force on the cart as input), an MPC of horizon N = 30
with terminal cost 10 Q, 200 closed-loop steps of 0.05 s from [0.5, 0.3, 0, 0].

The model and the controller are written here with the public API (the ODE in tinygrad Tensor math, one RK4 step
per sample, quadratic costs, box bounds); the plant is anvil.problems.cartpole's numpy simulation of the same ODE.
cartpole_swingup.py, demo.py and cartpole_cpp.py reuse them.

Run: `python examples/cartpole_stabilize.py [--out DIR] [--steps K]`. Prints the closed-loop metrics and compares the
closed-loop cost with the reference (CasADi IPOPT and sqpmethod agree on it), and plots the run.
"""

from __future__ import annotations

import time

import numpy as np
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import MPCFunction, plot_closed_loop, rk4, simulate
from anvil.problems import cartpole

from cli import example_arguments

MC, MP, LP, G = 1.0, 0.3, 0.5, 9.81  # cart mass (kg), pole mass (kg), pole length (m), gravity (m/s²)
H = 0.05  # the sample time (s): one RK4 step per sample
NX, NU = 4, 1
Q, R = np.array([1.0, 1.0, 0.1, 0.1]), 0.01  # the stage cost xᵀ diag(Q) x + R u²
U_MAX, XC_MAX = 20.0, 2.0  # |u| <= 20 N, |xc| <= 2 m
X0, STEPS = np.array([0.5, 0.3, 0.0, 0.0]), 200
COST = 5.478384  # Σ l over the 200 closed-loop steps from X0 (CasADi IPOPT and sqpmethod agree on it)
NAMES = ("xc", "theta", "xc_dot", "theta_dot")


def ode(x: Tensor, u: Tensor) -> Tensor:
  """The continuous dynamics: x = [xc, theta, xc_dot, theta_dot] (theta = 0 upright), u = [force]."""
  theta, xd, thd, force = x[1], x[2], x[3], u[0]
  s, c = theta.sin(), theta.cos()
  d = MC + MP * s * s
  xdd = (force - MP * LP * s * thd * thd + MP * G * s * c) / d
  thdd = (force * c - MP * LP * s * c * thd * thd + (MC + MP) * G * s) / (LP * d)
  return Tensor.stack(xd, thd, xdd, thdd)


def dynamics(name: str) -> NumericalFunction:
  """F(x, u): one RK4 step of the ODE over a sample."""
  return rk4(name, ode, H, nx=NX, nu=NU)


def stage_cost(name: str) -> NumericalFunction:
  """l(x, u) = xᵀ diag(Q) x + R u²."""
  return NumericalFunction(name, lambda x, u: (x * x * Tensor(Q)).sum() + R * (u * u).sum(), (Arg(NX), Arg(NU)))


def terminal_cost(name: str) -> NumericalFunction:
  """l_N(x) = 10 xᵀ diag(Q) x."""
  return NumericalFunction(name, lambda x: 10.0 * (x * x * Tensor(Q)).sum(), (Arg(NX),))


def bounds() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
  """(x_bounds, u_bounds): |xc| <= XC_MAX, |u| <= U_MAX."""
  x_hi = np.array([XC_MAX, np.inf, np.inf, np.inf])
  return (-x_hi, x_hi), (np.array([-U_MAX]), np.array([U_MAX]))


def controller(name: str) -> MPCFunction:
  """The stabilizing MPC: N = 30, terminal cost 10 xᵀ diag(Q) x, no terminal constraint."""
  x_bounds, u_bounds = bounds()
  return MPCFunction(name, dynamics(f"{name}_F"), stage_cost(f"{name}_l"), terminal_cost(f"{name}_lN"), horizon=30,
                     x_bounds=x_bounds, u_bounds=u_bounds)  # fmt: skip


def main() -> None:
  """Run the benchmark's closed loop for `--steps` steps of 0.05 s (the reference cost is for 200), report and plot."""
  args = example_arguments(__doc__, STEPS)

  mpc = controller("cartpole_stabilize")
  start = time.perf_counter()
  mpc(X0)  # the first call builds the controller (trace, generate, compile) or loads it from the cache
  print(f"build and first solve: {time.perf_counter() - start:.1f} s")

  cl = simulate(mpc, cartpole.step_numpy, X0, args.steps)
  print(cl.summary())
  error = cl.cost - COST
  print(f"closed-loop cost {cl.cost:.6f}, reference {COST:.6f} ({STEPS} steps): "
        f"difference {error:.2e}, relative {error / COST:.2e}")  # fmt: skip
  print(f"plot: {plot_closed_loop(cl, args.out / 'cartpole_stabilize.png', H, NAMES)}")


if __name__ == "__main__":
  main()
