"""P4, the chain of masses (acados's `chain_mass` example, the standard NMPC scaling benchmark): n_mass masses, the
first fixed at the origin, the last one moved by its velocity u ∈ R³ (|u_i| <= 1); the M = n_mass - 2 masses between
them (MASS kg each) hang on springs of force D (1 - L/|d|) d under gravity.

State x = [positions of masses 1..M+1 (3 (M + 1)); velocities of masses 1..M (3 M)], nx = 3 (2 M + 1), nu = 3. One
stage is 4 classical RK4 steps of TS / 4, TS = 0.2 s; the MPC has N = 40 stages.

The OCP (`chain_mpc`):
  stage cost    TS · ½ ‖(x - x_rest, u)‖²_W, W = blkdiag(Q, R), Q = 2 diag(q) (q = 1, q = M + 1 on the last mass's
                position), R = 2e-2 I;
  terminal cost ½ ‖x_N - x_rest‖²_Q;
  wall          the y position of masses 1..M+1 >= WALL at stages 1..N-1, a soft bound whose slack s costs
                TS (s + ½ 1e3 s²);
  hard bounds   |u_i| <= 1.
x_rest is the chain at rest with its last mass at [L (M + 1) 6, 0, 0] (`rest_state`); the closed loop starts from
x_rest moved by 5 steps of the model with u = [-1, 1, 1] (`initial_state`) and runs 25 steps on the same model.
CasADi's solvers get the same NLP from `CasadiChain`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import scipy.optimize
from numpy.typing import NDArray

from anvil import Arg, NumericalFunction, Tensor
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, Soft, rk4
from anvil.problems.backend import NUMPY, TINYGRAD, Backend, casadi_backend
from anvil.problems.backend import rk4 as rk4_step

MASS, SPRING, REST_LENGTH, GRAVITY = 0.033, 1.0, 0.033, 9.81
TS, HORIZON, RK4_STEPS = 0.2, 40, 4
NU = 3
U_MAX = 1.0
WALL = -0.05
#: The wall's slack penalty per stage: TS (L1 s + L2 s²).
WALL_L1, WALL_L2 = 1.0, 500.0
PERTURBATION = np.array([-1.0, 1.0, 1.0])
PERTURBATION_STEPS = 5
CLOSED_LOOP_STEPS = 25
#: The sizes of the benchmark (nx = 9, 15, 21, 27, 39).
SIZES = (3, 4, 5, 6, 8)

F64 = NDArray[np.float64]


def intermediate(n_mass: int) -> int:
  """M, the masses between the fixed one and the moved one; n_mass >= 3."""
  if isinstance(n_mass, bool) or not isinstance(n_mass, int) or n_mass < 3:
    raise ValueError(f"chain: n_mass must be an int >= 3, got {n_mass!r}")
  return n_mass - 2


def state_size(n_mass: int) -> int:
  """nx = 3 (2 M + 1)."""
  return 3 * (2 * intermediate(n_mass) + 1)


def ode(x: Any, u: Any, n_mass: int, b: Backend) -> Any:
  """x' = f(x, u): the positions move with their velocities (the last one with u), the intermediate masses
  accelerate with the spring forces on both sides and gravity."""
  M = intermediate(n_mass)
  positions = [x[3 * i : 3 * i + 3] for i in range(M + 1)]
  velocities = [x[3 * (M + 1) + 3 * i : 3 * (M + 1) + 3 * i + 3] for i in range(M)]
  forces = []
  for i in range(M + 1):
    d = positions[i] - positions[i - 1] if i else positions[0]
    length = b.sqrt(b.sum(d * d))
    forces.append(SPRING * (1 - REST_LENGTH / length) * d)
  accelerations = []
  for i in range(M):
    a = (forces[i + 1] - forces[i]) / MASS
    accelerations.append(b.cat(a[0:2], a[2:3] - GRAVITY))
  return b.cat(*velocities, u, *accelerations)


def step(x: Any, u: Any, n_mass: int, b: Backend) -> Any:
  """F(x, u): RK4_STEPS classical RK4 steps of TS / RK4_STEPS."""
  for _ in range(RK4_STEPS):
    x = rk4_step(lambda x_, u_: ode(x_, u_, n_mass, b), x, u, TS / RK4_STEPS)
  return x


def step_numpy(n_mass: int) -> Any:
  """The plant x_next = F(x, u), evaluated with numpy."""
  return lambda x, u: np.asarray(step(np.asarray(x, np.float64), np.asarray(u, np.float64), n_mass, NUMPY))


def state_weights(n_mass: int) -> F64:
  """q of Q = 2 diag(q): 1, and M + 1 on the last mass's position."""
  M = intermediate(n_mass)
  q = np.ones(state_size(n_mass))
  q[3 * M : 3 * M + 3] = M + 1
  return q


@cache
def rest_state(n_mass: int) -> F64:
  """x_rest: the last mass at [L (M + 1) 6, 0, 0], the intermediate masses where the spring forces balance gravity,
  every velocity zero (found from the straight line between the ends by a root finder, as acados's
  `compute_steady_state` does)."""
  M = intermediate(n_mass)
  last = np.array([REST_LENGTH * (M + 1) * 6, 0.0, 0.0])

  def accelerations(inner: F64) -> F64:
    x = np.concatenate([inner, last, np.zeros(3 * M)])
    return np.asarray(ode(x, np.zeros(NU), n_mass, NUMPY))[3 * (M + 1) :]

  line = np.concatenate([last * (i + 1) / (M + 1) for i in range(M)])
  inner, _, converged, message = scipy.optimize.fsolve(accelerations, line, xtol=1e-14, full_output=True)
  if converged != 1:
    raise RuntimeError(f"chain: the rest state of {n_mass} masses was not found: {message}")
  return np.concatenate([inner, last, np.zeros(3 * M)])


@cache
def initial_state(n_mass: int) -> F64:
  """x0 of the closed loop: x_rest moved by PERTURBATION_STEPS steps of the model with u = PERTURBATION."""
  x, plant = rest_state(n_mass), step_numpy(n_mass)
  for _ in range(PERTURBATION_STEPS):
    x = plant(x, PERTURBATION)
  return np.asarray(x)


def wall_indices(n_mass: int) -> tuple[int, ...]:
  """The y positions of masses 1..M+1 in x."""
  return tuple(3 * i + 1 for i in range(intermediate(n_mass) + 1))


def bounds(n_mass: int) -> tuple[tuple[F64, F64], tuple[F64, F64]]:
  """(x_bounds, u_bounds): the wall on the y positions (softened by `chain_mpc`), |u_i| <= U_MAX."""
  nx = state_size(n_mass)
  x_lo = np.full(nx, -np.inf)
  x_lo[list(wall_indices(n_mass))] = WALL
  return (x_lo, np.full(nx, np.inf)), (np.full(NU, -U_MAX), np.full(NU, U_MAX))


def chain_mpc(name: str, n_mass: int, options: MPCOptions | None = None) -> MPCFunction:
  """The chain MPC of `n_mass` masses (module docstring). `name` must be a C++ identifier unique per build (the
  model functions are named after it)."""
  nx, x_rest = state_size(n_mass), rest_state(n_mass)
  q = state_weights(n_mass)
  rest = Tensor(np.array(x_rest))
  residual = NumericalFunction(f"{name}_r", lambda x, u: (x - rest).cat(u), (Arg(nx), Arg(NU)))
  residual_N = NumericalFunction(f"{name}_rN", lambda x: x - rest, (Arg(nx),))
  weight = TS * np.concatenate([q, np.full(NU, 1e-2)])  # TS · ½ · 2 diag(q, 1e-2)
  F = rk4(f"{name}_F", lambda x, u: ode(x, u, n_mass, TINYGRAD), TS, nx=nx, nu=NU, steps=RK4_STEPS)
  x_bounds, u_bounds = bounds(n_mass)
  free = np.full(nx, np.inf)
  wall = Soft(indices=wall_indices(n_mass), l1=TS * WALL_L1, l2=TS * WALL_L2)
  return MPCFunction(
    name, F, LeastSquares(residual, weight), LeastSquares(residual_N, q), horizon=HORIZON, x_bounds=x_bounds,
    u_bounds=u_bounds, x_terminal_bounds=(-free, free), soft={"x": wall}, options=options,
  )  # fmt: skip


@dataclass(frozen=True)
class CasadiSolution:
  """The chain OCP from one state, solved by a CasADi NLP solver.

  Attributes:
    cost: the optimal cost (slack penalties included, as `MPCSolution.cost`). x: states (N + 1, nx). u: inputs
    (N, nu). w, lam_g, lam_x: the solver's primal and dual solution (a warm start for the next call). status: the
    solver's return status. iterations: its iterations. success: its own verdict. seconds: its t_wall_total.
  """

  cost: float
  x: F64
  u: F64
  w: F64
  lam_g: F64
  lam_x: F64
  status: str
  iterations: int
  success: bool
  seconds: float


class CasadiChain:
  """The OCP of `chain_mpc` built once with CasADi (SX, the same model code) for CasADi's NLP solvers. The NLP is
  anvil's multiple-shooting transcription: w = [x_0, u_0, ..., x_{N-1}, u_{N-1}, x_N, s_1..s_{N-1}] with one slack
  per wall row and stage, g = [x_0 - x0; x_{k+1} - F(x_k, u_k); y_k + s_k (k = 1..N-1)], x0 the parameter. Needs
  casadi.

  Example:
    >>> nlp = CasadiChain(3); sol = nlp.solve(nlp.ipopt(), chain.initial_state(3))
  """

  def __init__(self, n_mass: int) -> None:
    import casadi as ca

    self.ca, self.n_mass, self.nx, N = ca, n_mass, state_size(n_mass), HORIZON
    nx, walls, b = self.nx, list(wall_indices(n_mass)), casadi_backend(ca)
    X, U, S = ca.SX.sym("X", nx, N + 1), ca.SX.sym("U", NU, N), ca.SX.sym("S", len(walls), N - 1)
    x0 = ca.SX.sym("x0", nx)
    q, rest = state_weights(n_mass), rest_state(n_mass)
    J = ca.SX(0.0)
    for k in range(N):
      e = X[:, k] - rest
      J += TS * (ca.dot(e, ca.DM(q) * e) + 1e-2 * ca.dot(U[:, k], U[:, k]))
    e = X[:, N] - rest
    J += ca.dot(e, ca.DM(q) * e) + TS * (WALL_L1 * ca.sum1(ca.vec(S)) + WALL_L2 * ca.sumsqr(S))
    g = [X[:, 0] - x0] + [X[:, k + 1] - step(X[:, k], U[:, k], n_mass, b) for k in range(N)]
    g += [X[walls, k] + S[:, k - 1] for k in range(1, N)]
    w = ca.vertcat(*[ca.vertcat(X[:, k], U[:, k]) for k in range(N)], X[:, N], ca.vec(S))
    self.nlp: dict[str, Any] = {"x": w, "p": x0, "f": J, "g": ca.vertcat(*g)}
    slacks = len(walls) * (N - 1)
    self.lbg = np.concatenate([np.zeros(nx * (N + 1)), np.full(slacks, WALL)])
    self.ubg = np.concatenate([np.zeros(nx * (N + 1)), np.full(slacks, np.inf)])
    stage_lo = np.concatenate([np.full(nx, -np.inf), np.full(NU, -U_MAX)])
    stage_hi = np.concatenate([np.full(nx, np.inf), np.full(NU, U_MAX)])
    self.lbw = np.concatenate([np.tile(stage_lo, N), np.full(nx, -np.inf), np.zeros(slacks)])
    self.ubw = np.concatenate([np.tile(stage_hi, N), np.full(nx, np.inf), np.full(slacks, np.inf)])

  @staticmethod
  def ipopt_options(tol: float = 1e-10) -> dict[str, Any]:
    """IPOPT (exact Hessian) to tol with bound_relax_factor 0 (its default relaxation of every bound by 1e-8 moves the
    optimum), quiet."""
    return {"ipopt.tol": tol, "ipopt.bound_relax_factor": 0.0, "ipopt.print_level": 0, "ipopt.sb": "yes",
            "print_time": False}  # fmt: skip

  def ipopt(self, tol: float = 1e-10) -> Any:
    """IPOPT on this NLP (ipopt_options)."""
    return self.ca.nlpsol(f"chain_ipopt_{self.n_mass}", "ipopt", self.nlp, self.ipopt_options(tol))

  def solve(self, solver: Any, x0: F64, guess: dict[str, F64] | tuple[F64, F64] | None = None) -> CasadiSolution:
    """Solve from x0 with a solver of this NLP, starting at `guess`: the solver's own start ({"x0": w, "lam_g0": ...,
    "lam_x0": ...}), a pair (x (N + 1, nx), u (N, nu)) with slacks 0, or None for anvil's cold start (every
    x_k = x0, u_k = 0)."""
    N, nx = HORIZON, self.nx
    x0 = np.asarray(x0, dtype=np.float64)
    if isinstance(guess, dict):
      start = dict(guess)
    else:
      xs, us = (np.tile(x0, (N + 1, 1)), np.zeros((N, NU))) if guess is None else guess
      slacks = self.lbw.size - N * (nx + NU) - nx
      start = {"x0": np.concatenate([np.concatenate([xs[k], us[k]]) for k in range(N)] + [xs[N], np.zeros(slacks)])}
    res = solver(p=x0, lbx=self.lbw, ubx=self.ubw, lbg=self.lbg, ubg=self.ubg, **start)
    stats = solver.stats()
    w = np.array(res["x"]).reshape(-1)
    stages = w[: N * (nx + NU)].reshape(N, nx + NU)
    x = np.vstack([stages[:, :nx], w[N * (nx + NU) : N * (nx + NU) + nx]])
    return CasadiSolution(
      float(res["f"]), x, stages[:, nx:].copy(), w, np.array(res["lam_g"]).reshape(-1),
      np.array(res["lam_x"]).reshape(-1), str(stats["return_status"]), int(stats["iter_count"]),
      bool(stats["success"]), float(stats.get("t_wall_total", float("nan"))),  # with record_time
    )  # fmt: skip


def stage_cost(n_mass: int, x: F64, u: F64) -> float:
  """The closed loop's stage cost TS · ½ ‖(x - x_rest, u)‖²_W (numpy)."""
  e = np.asarray(x) - rest_state(n_mass)
  return float(TS * (e @ (state_weights(n_mass) * e) + 1e-2 * np.asarray(u) @ np.asarray(u)))
