"""A continuous stirred-tank reactor with fast exothermic kinetics: a stiff model, for implicit integrators (`irk`).

State x = [c, T] (the reactant's concentration and the temperature, both dimensionless: the feed's are 1), input
u = [q] (cooling power). A first-order exothermic reaction with Arrhenius rate k(T) = K0 exp(GAMMA (1 - 1/T)):

  c' = (1 - c) / THETA - k(T) c,      T' = (1 - T) / THETA + BETA k(T) c - q,

with residence time THETA = 1. At the feed temperature k = K0 = 100: the concentration's time constant is 0.01 while
the sampling time is DT = 0.1, so explicit Runge-Kutta needs many steps per sample (RK4 is unstable beyond
h |lambda| = 2.8: 4 steps at least) and one step of a 3-stage Radau IIA method (L-stable, order 5) is accurate.

The OCP (`cstr_mpc`, and the same NLP for IPOPT in `solve_ipopt`): N = 20 stages (2 s) of one Radau IIA step each
(`dynamics`), least-squares tracking ‖(c - C_REF, T - T_REF, q - Q_REF)‖²_W at every stage and of the state part at
x_N, the cooling within 0 <= q <= Q_MAX and the temperature below T_MAX. (C_REF, T_REF, Q_REF) is a steady state.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, irk
from anvil.mpc.implicit import ImplicitIntegrator, collocation_tableau
from anvil.problems.backend import TINYGRAD, Backend, casadi_backend

THETA, K0, GAMMA, BETA = 1.0, 100.0, 2.0, 0.5
DT, HORIZON, STAGES = 0.1, 20, 3
NX, NU = 2, 1
#: The steady state tracked: at T_REF, the rate K_REF converts all but C_REF = 1 / (1 + K_REF THETA) of the feed, and
#: the cooling Q_REF holds the temperature there.
T_REF = 1.1
K_REF = K0 * np.exp(GAMMA * (1.0 - 1.0 / T_REF))
C_REF = 1.0 / (1.0 + K_REF * THETA)
Q_REF = (1.0 - T_REF) / THETA + BETA * K_REF * C_REF
Q_MAX, T_MAX = 3.0, 1.4
WEIGHTS = np.array([1e3, 10.0, 0.1])
#: A start at the feed's state: the reaction runs at its fastest (k = K0) and heats the reactor.
X0 = np.array([1.0, 1.0])

F64 = NDArray[np.float64]


def ode(x: Any, u: Any, b: Backend) -> Any:
  """The continuous dynamics (module docstring)."""
  k = K0 * b.exp(GAMMA * (1.0 - 1.0 / x[1]))
  return b.stack((1.0 - x[0]) / THETA - k * x[0], (1.0 - x[1]) / THETA + BETA * k * x[0] - u[0])


def dynamics(name: str) -> ImplicitIntegrator:
  """F(x, u): one 3-stage Radau IIA step of DT."""
  return irk(name, lambda x, u: ode(x, u, TINYGRAD), DT, nx=NX, nu=NU, stages=STAGES)


def residual(x: Any, u: Any, b: Backend) -> Any:
  """The stage cost's residual (c - C_REF, T - T_REF, q - Q_REF)."""
  return b.stack(x[0] - C_REF, x[1] - T_REF, u[0] - Q_REF)


def state_residual(x: Any, b: Backend) -> Any:
  """The terminal cost's residual (c - C_REF, T - T_REF)."""
  return b.stack(x[0] - C_REF, x[1] - T_REF)


def cstr_mpc(name: str, options: MPCOptions | None = None) -> MPCFunction:
  """The CSTR MPC (module docstring). `name` must be a C++ identifier unique per build."""
  r = NumericalFunction(f"{name}_r", lambda x, u: residual(x, u, TINYGRAD), (Arg(NX), Arg(NU)))
  r_N = NumericalFunction(f"{name}_rN", lambda x: state_residual(x, TINYGRAD), (Arg(NX),))
  return MPCFunction(
    name, dynamics(f"{name}_F"), LeastSquares(r, WEIGHTS), LeastSquares(r_N, WEIGHTS[:NX]), horizon=HORIZON,
    x_bounds=(np.array([-np.inf, -np.inf]), np.array([np.inf, T_MAX])), u_bounds=(np.zeros(1), np.array([Q_MAX])),
    options=options,
  )  # fmt: skip


@dataclass(frozen=True)
class IpoptSolution:
  """The CSTR OCP solved by CasADi's IPOPT: the optimal cost, states (N + 1, nx), inputs (N, nu), IPOPT's verdict,
  its iterations and its solve's wall time (s, CasADi's t_wall_total)."""

  cost: float
  x: F64
  u: F64
  success: bool
  iterations: int
  seconds: float


def solve_ipopt(x0: F64, guess: tuple[F64, F64] | None = None, tol: float = 1e-12) -> IpoptSolution:
  """The OCP of `cstr_mpc` built with CasADi and solved by IPOPT: multiple shooting, each stage's Radau IIA step
  written as its collocation equations K_i = f(x + DT sum_j a_ij K_j, u) with the stage derivatives K as decision
  variables (the same discretization `irk` solves by Newton's method), from `guess` (x (N + 1, nx), u (N, nu);
  default x0 everywhere and u = 0: anvil's cold start). Needs casadi."""
  N, x0 = HORIZON, np.asarray(x0, dtype=np.float64)
  solver, lbw, ubw = _ipopt(tol)
  x_guess, u_guess = guess if guess is not None else (np.tile(x0, (N + 1, 1)), np.zeros((N, NU)))
  w0 = np.concatenate([np.asarray(x_guess).ravel(), np.asarray(u_guess).ravel(), np.zeros(NX * STAGES * N)])
  sol = solver(x0=w0, p=x0, lbx=lbw, ubx=ubw, lbg=0.0, ubg=0.0)
  values = np.asarray(sol["x"]).ravel()
  x = values[: NX * (N + 1)].reshape(N + 1, NX)
  u = values[NX * (N + 1) : NX * (N + 1) + NU * N].reshape(N, NU)
  stats = solver.stats()
  seconds = float(stats["t_wall_total"])
  return IpoptSolution(float(sol["f"]), x, u, bool(stats["success"]), int(stats["iter_count"]), seconds)


@functools.cache
def _ipopt(tol: float) -> tuple[Any, F64, F64]:
  """IPOPT on the OCP with the initial state as its parameter (built once per tolerance: a closed loop reuses it),
  and the bounds on its variables [X; U; K]."""
  import casadi as ca

  b, N = casadi_backend(ca), HORIZON
  a, weights = collocation_tableau("radau", STAGES)
  X, U, K = ca.SX.sym("X", NX, N + 1), ca.SX.sym("U", NU, N), ca.SX.sym("K", NX * STAGES, N)
  x_init = ca.SX.sym("x_init", NX)
  J, g = ca.SX(0.0), [X[:, 0] - x_init]
  for k in range(N):
    r = residual(X[:, k], U[:, k], b)
    J += ca.dot(r, ca.DM(WEIGHTS) * r)
    stages = [K[i * NX : (i + 1) * NX, k] for i in range(STAGES)]
    for i in range(STAGES):
      point = X[:, k] + DT * sum(a[i][j] * stages[j] for j in range(STAGES))
      g.append(stages[i] - ode(point, U[:, k], b))
    g.append(X[:, k + 1] - X[:, k] - DT * sum(weights[i] * stages[i] for i in range(STAGES)))
  rN = state_residual(X[:, N], b)
  J += ca.dot(rN, ca.DM(WEIGHTS[:NX]) * rN)
  w = ca.vertcat(ca.vec(X), ca.vec(U), ca.vec(K))
  lbw = np.concatenate([np.tile([-np.inf, -np.inf], N + 1), np.zeros(N), np.full(K.numel(), -np.inf)])
  ubw = np.concatenate([np.tile([np.inf, T_MAX], N + 1), np.full(N, Q_MAX), np.full(K.numel(), np.inf)])
  settings = {"ipopt.tol": tol, "ipopt.print_level": 0, "print_time": False, "record_time": True,
              "ipopt.bound_relax_factor": 0.0}  # fmt: skip
  return ca.nlpsol("cstr", "ipopt", {"x": w, "p": x_init, "f": J, "g": ca.vertcat(*g)}, settings), lbw, ubw
