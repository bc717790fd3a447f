"""The P2 cart-pole MPCs: the stabilizing controller (N = 30, terminal cost 10 Q, |u| <= 20 N, |xc| <= 2 m) and the
swing-up (N = 50, x_N = 0), defined once for the examples, tests, demo and benchmarks."""

from __future__ import annotations

import numpy as np
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import MPCFunction, MPCOptions, rk4
from anvil.problems import cartpole
from anvil.problems.backend import TINYGRAD

NX, NU = cartpole.NX, cartpole.NU
Q_DIAG = np.diag(cartpole.Q).copy()
U_MAX, XC_MAX = 20.0, 2.0
#: The stabilizing benchmark: N = 30, terminal cost 10 Q, 200 steps from X0_STABILIZE.
X0_STABILIZE = np.array([0.5, 0.3, 0.0, 0.0])
STEPS_STABILIZE = 200
#: Σ l over the 200 closed-loop steps (CasADi IPOPT and sqpmethod agree on it).
COST_STABILIZE = 5.478384
X0_SWING_UP = np.array([0.0, np.pi, 0.0, 0.0])
STATE_NAMES = ("xc", "theta", "xc_dot", "theta_dot")


def dynamics(name: str) -> NumericalFunction:
  """F(x, u): one RK4 step of 0.05 s of the cart-pole ODE."""
  return rk4(name, lambda x, u: cartpole.ode(x, u, TINYGRAD), cartpole.H, nx=NX, nu=NU)


def stage_cost(name: str) -> NumericalFunction:
  """l(x, u) = xᵀQx + R u²."""
  return NumericalFunction(
    name, lambda x, u: (x * x * Tensor(Q_DIAG)).sum() + cartpole.R * (u * u).sum(), (Arg(NX), Arg(NU))
  )


def terminal_cost(name: str, weight: float = 10.0) -> NumericalFunction:
  """l_N(x) = weight · xᵀQx."""
  return NumericalFunction(name, lambda x: weight * (x * x * Tensor(Q_DIAG)).sum(), (Arg(NX),))


def bounds() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
  """(x_bounds, u_bounds): |xc| <= 2 m, |u| <= 20 N."""
  x_hi = np.array([XC_MAX, np.inf, np.inf, np.inf])
  return (-x_hi, x_hi), (np.array([-U_MAX]), np.array([U_MAX]))


def stabilizing(name: str = "cartpole_mpc", options: MPCOptions | None = None, horizon: int = 30) -> MPCFunction:
  """The P2 stabilizing MPC: N = 30, terminal cost 10 Q, no terminal constraint."""
  x_bounds, u_bounds = bounds()
  return MPCFunction(
    name, dynamics(f"{name}_F"), stage_cost(f"{name}_l"), terminal_cost(f"{name}_lN"), horizon=horizon,
    x_bounds=x_bounds, u_bounds=u_bounds, options=options,
  )  # fmt: skip


def swing_up(name: str = "cartpole_swing_up", options: MPCOptions | None = None, horizon: int = 50) -> MPCFunction:
  """The swing-up as an MPC: N = 50, terminal constraint x_N = 0 (no terminal cost), |u| <= 20, |xc| <= 2."""
  x_bounds, u_bounds = bounds()
  return MPCFunction(
    name, dynamics(f"{name}_F"), stage_cost(f"{name}_l"), None, horizon=horizon, x_bounds=x_bounds,
    u_bounds=u_bounds, x_terminal_bounds=(np.zeros(NX), np.zeros(NX)), options=options,
  )  # fmt: skip


def swing_up_guess(x0: np.ndarray, horizon: int = 50) -> tuple[np.ndarray, np.ndarray]:
  """The first solve's guess: states interpolated linearly from x0 to the upright state, zero force."""
  ramp = 1.0 - np.arange(horizon + 1)[:, None] / horizon
  return ramp * x0, np.zeros((horizon, NU))
