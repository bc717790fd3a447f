"""The kinematic bicycle avoiding a circular obstacle: the classic hard case of SQP MPC (a nonconvex feasible set,
whose first linearization at a cold start points the car into a braking halfspace rather than around the obstacle).

State x = [px, py, psi, v, delta] (rear-axle position m, heading rad, speed m/s, steering angle rad), input
u = [a, ddelta] (acceleration m/s², steering rate rad/s), so the input bounds are the steering's rate limits. The
continuous model px' = v cos psi, py' = v sin psi, psi' = v tan(delta) / L, v' = a, delta' = ddelta (wheelbase
L = 2.5 m) is discretized by one RK4 step of DT = 0.1 s; the MPC has N = 30 stages (3 s).

The OCP (`bicycle_mpc`, and the same NLP for IPOPT in `ipopt_reference`):
  stage cost    ‖(py, psi, v - V_REF, delta, a, ddelta)‖²_W, W = diag(STATE_WEIGHTS, INPUT_WEIGHTS): track the line
                y = 0 at heading 0 and V_REF = 10 m/s, straight wheels, small inputs;
  terminal cost ‖(py, psi, v - V_REF, delta)‖²_{diag(STATE_WEIGHTS)}, the stage cost's state part;
  obstacle      (px - ox)² + (py - oy)² >= R_OBS² at stages 0..N-1 (path constraint) and at x_N (terminal
                constraint), the circle of radius 2 m centred at (20, 0.5), slightly off the reference line so the
                problem is not symmetric;
  hard bounds   |a| <= 4 m/s², |ddelta| <= 0.5 rad/s, |delta| <= 0.5 rad;
  soft bound    0 <= v <= V_MAX = 25 m/s on x_1..x_N, one slack s >= 0 per stage costing SOFT_L1 s + SOFT_L2 s²
                (v + s >= 0, v - s <= V_MAX), as anvil's transcription softens a bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil import Arg, NumericalFunction
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, Soft, rk4
from anvil.problems.backend import NUMPY, TINYGRAD, Backend, casadi_backend
from anvil.problems.backend import rk4 as rk4_step

WHEELBASE = 2.5
DT = 0.1
HORIZON = 30
NX, NU = 5, 2
STATE_NAMES = ("px", "py", "psi", "v", "delta")
INPUT_NAMES = ("a", "ddelta")
V_REF = 10.0
V_MAX = 25.0
A_MAX, DDELTA_MAX, DELTA_MAX = 4.0, 0.5, 0.5
OBSTACLE = np.array([20.0, 0.5])
R_OBS = 2.0
#: Weights of the tracked state part (py, psi, v - V_REF, delta): a 1 m lateral offset costs as much as 0.7 rad of
#: heading error, 3.2 m/s of speed error or 1 rad of steering.
STATE_WEIGHTS = np.array([1.0, 2.0, 0.1, 1.0])
#: Weights of the inputs (a, ddelta): small, so the bounds (not the weights) limit how hard the car swerves.
INPUT_WEIGHTS = np.array([0.01, 0.1])
#: The softened speed bound's penalty per slack (m/s): l1 s + l2 s².
SOFT_L1, SOFT_L2 = 100.0, 10.0
SOFT_SPEED = Soft(indices=(3,), l1=SOFT_L1, l2=SOFT_L2)
#: Cold starts the MPC must handle: heading straight at the obstacle (reached inside the horizon; at 20 m/s in under
#: a second), on the obstacle's centre line (no side is preferred by the first linearization), and speeding above
#: V_MAX (the soft bound is violated on the first stages, whatever the inputs).
HARD_STARTS = {
  "straight_12": np.array([0.0, 0.0, 0.0, 12.0, 0.0]),
  "straight_20": np.array([0.0, 0.0, 0.0, 20.0, 0.0]),
  "centre_line_12": np.array([0.0, 0.5, 0.0, 12.0, 0.0]),
  "speeding_27": np.array([0.0, 0.0, 0.0, 27.0, 0.0]),
}

F64 = NDArray[np.float64]


def ode(x: Any, u: Any, b: Backend) -> Any:
  """Continuous kinematic bicycle (rear-axle reference): x' = f(x, u), tan(delta) written as sin / cos."""
  psi, v, delta = x[2], x[3], x[4]
  return b.stack(v * b.cos(psi), v * b.sin(psi), v * b.sin(delta) / (WHEELBASE * b.cos(delta)), u[0], u[1])


def step(x: Any, u: Any, b: Backend = TINYGRAD) -> Any:
  """F(x, u): one RK4 step of DT = 0.1 s."""
  return rk4_step(lambda x_, u_: ode(x_, u_, b), x, u, DT)


def step_numpy(x: F64, u: F64) -> F64:
  """F(x, u) evaluated with numpy (the closed-loop plant)."""
  return np.asarray(step(x, u, NUMPY), dtype=np.float64)


def state_residual(x: Any, b: Backend) -> Any:
  """The tracked state part (py, psi, v - V_REF, delta)."""
  return b.stack(x[1], x[2], x[3] - V_REF, x[4])


def stage_residual(x: Any, u: Any, b: Backend) -> Any:
  """The stage cost's residual (py, psi, v - V_REF, delta, a, ddelta)."""
  return b.stack(x[1], x[2], x[3] - V_REF, x[4], u[0], u[1])


def clearance(x: Any) -> Any:
  """(px - ox)² + (py - oy)²: at least R_OBS² outside the obstacle."""
  dx, dy = x[0] - float(OBSTACLE[0]), x[1] - float(OBSTACLE[1])
  return dx * dx + dy * dy


def bounds() -> tuple[tuple[F64, F64], tuple[F64, F64]]:
  """(x_bounds, u_bounds): 0 <= v <= V_MAX (softened by `bicycle_mpc`), |delta| <= 0.5; |a| <= 4, |ddelta| <= 0.5."""
  inf = np.inf
  x_lo = np.array([-inf, -inf, -inf, 0.0, -DELTA_MAX])
  x_hi = np.array([inf, inf, inf, V_MAX, DELTA_MAX])
  u_hi = np.array([A_MAX, DDELTA_MAX])
  return (x_lo, x_hi), (-u_hi, u_hi)


def bicycle_mpc(name: str, options: MPCOptions | None = None) -> MPCFunction:
  """The bicycle MPC (module docstring): N = 30, least-squares tracking costs, the obstacle as path and terminal
  constraints, hard input and steering bounds, the speed bound softened on x_1..x_N. `name` must be a C++ identifier
  unique per build (the model functions are named after it)."""
  W = np.concatenate([STATE_WEIGHTS, INPUT_WEIGHTS])
  residual = NumericalFunction(f"{name}_r", lambda x, u: stage_residual(x, u, TINYGRAD), (Arg(NX), Arg(NU)))
  residual_N = NumericalFunction(f"{name}_rN", lambda x: state_residual(x, TINYGRAD), (Arg(NX),))
  obstacle = NumericalFunction(f"{name}_h", lambda x, u: clearance(x).reshape(1), (Arg(NX), Arg(NU)))
  obstacle_N = NumericalFunction(f"{name}_hN", lambda x: clearance(x).reshape(1), (Arg(NX),))
  clear = (np.array([R_OBS**2]), np.array([np.inf]))
  x_bounds, u_bounds = bounds()
  return MPCFunction(
    name, rk4(f"{name}_F", lambda x, u: ode(x, u, TINYGRAD), DT, nx=NX, nu=NU), LeastSquares(residual, W),
    LeastSquares(residual_N, STATE_WEIGHTS), horizon=HORIZON, x_bounds=x_bounds, u_bounds=u_bounds,
    constraints=obstacle, constraint_bounds=clear, terminal_constraints=obstacle_N, terminal_constraint_bounds=clear,
    soft={"x": SOFT_SPEED, "x_terminal": SOFT_SPEED}, options=options,
  )  # fmt: skip


def cold_guess(x0: F64) -> tuple[F64, F64]:
  """anvil's cold start (`cold_guess` in anvil/mpc/include/anvil/mpc.hpp): every x_k = x0, u_k = 0 clipped to the
  input bounds (0 lies within them), slacks 0."""
  return np.tile(np.asarray(x0, dtype=np.float64), (HORIZON + 1, 1)), np.zeros((HORIZON, NU))


def swerve_guess(x0: F64, side: float = -1.0) -> tuple[F64, F64]:
  """A rollout of the model from x0 that swerves around the obstacle: braking at A_MAX while faster than V_REF, the
  steering rate at its limit towards `side` (-1: right, passing below the obstacle; +1: left) for 0.3 s, back for
  0.6 s and towards `side` again for 0.3 s (the wheels straight again, 1.2 m sideways from 12 m/s), then held.
  A start from which anvil and IPOPT find the same local optimum (their cold starts may not, see the tests)."""
  xs, us = [np.asarray(x0, dtype=np.float64)], []
  for k in range(HORIZON):
    turn = side if k < 3 else -side if k < 9 else side if k < 12 else 0.0
    us.append(np.array([-A_MAX if xs[-1][3] > V_REF else 0.0, turn * DDELTA_MAX]))
    xs.append(step_numpy(xs[-1], us[-1]))
  return np.array(xs), np.array(us)


@dataclass(frozen=True)
class IpoptSolution:
  """The bicycle OCP solved by CasADi's IPOPT.

  Attributes:
    cost: the optimal cost (slack penalties included, as `MPCSolution.cost`).
    x: states (N + 1, nx). u: inputs (N, nu). slack: the speed slacks of x_1..x_N, (N,).
    status: IPOPT's return status ("Solve_Succeeded", ...). iterations: IPOPT iterations.
    success: IPOPT's own verdict.
  """

  cost: float
  x: F64
  u: F64
  slack: F64
  status: str
  iterations: int
  success: bool


def solve_ipopt(x0: F64, guess: tuple[F64, F64] | None = None, tol: float = 1e-10) -> IpoptSolution:
  """The OCP of `bicycle_mpc` built with CasADi over the same model and solved by IPOPT, from `guess` (x (N + 1, nx),
  u (N, nu); default: anvil's cold start, so both solvers start at the same point); slacks start at 0.

  The NLP is anvil's multiple-shooting transcription: w = [x_0, u_0, ..., x_{N-1}, u_{N-1}, x_N, s_1..s_N],
  g = [x_0 - x0; x_{k+1} - F(x_k, u_k); h(x_k) (k < N); h(x_N); v_k + s_k; v_k - s_k], the speed bound moved from
  w's bounds to the two slack rows. IPOPT runs to tol (1e-10) with bound_relax_factor 0: its default relaxes every
  bound by 1e-8, which lets the obstacle and the input bounds give way and moved the cost by ~1e-6 relative. Needs
  casadi."""
  import casadi as ca

  b = casadi_backend(ca)
  N = HORIZON
  x0 = np.asarray(x0, dtype=np.float64)
  X, U, S = ca.SX.sym("X", NX, N + 1), ca.SX.sym("U", NU, N), ca.SX.sym("S", N)
  W, WN = np.concatenate([STATE_WEIGHTS, INPUT_WEIGHTS]), STATE_WEIGHTS
  J = ca.SX(0.0)
  for k in range(N):
    r = stage_residual(X[:, k], U[:, k], b)
    J += ca.dot(r, ca.DM(W) * r)
  rN = state_residual(X[:, N], b)
  J += ca.dot(rN, ca.DM(WN) * rN)
  J += SOFT_L1 * ca.sum1(S) + SOFT_L2 * ca.sumsqr(S)
  g = [X[:, 0] - x0] + [X[:, k + 1] - step(X[:, k], U[:, k], b) for k in range(N)]
  g += [clearance(X[:, k]) for k in range(N + 1)]
  speeds = X[3, 1:].T
  g += [speeds + S, speeds - S]
  inf = np.inf
  lbg = np.concatenate([np.zeros(NX * (N + 1)), np.full(N + 1, R_OBS**2), np.zeros(N), np.full(N, -inf)])
  ubg = np.concatenate([np.zeros(NX * (N + 1)), np.full(N + 1, inf), np.full(N, inf), np.full(N, V_MAX)])
  (x_lo, x_hi), (u_lo, u_hi) = bounds()
  x_lo, x_hi = x_lo.copy(), x_hi.copy()
  x_lo[3], x_hi[3] = -inf, inf  # softened: in the slack rows
  free = np.full(NX, inf)
  lbw = np.concatenate([np.concatenate([-free, u_lo])] + [np.concatenate([x_lo, u_lo])] * (N - 1) + [x_lo])
  ubw = np.concatenate([np.concatenate([free, u_hi])] + [np.concatenate([x_hi, u_hi])] * (N - 1) + [x_hi])
  w = ca.vertcat(*[ca.vertcat(X[:, k], U[:, k]) for k in range(N)], X[:, N], S)
  xs, us = cold_guess(x0) if guess is None else (np.asarray(guess[0], np.float64), np.asarray(guess[1], np.float64))
  w0 = np.concatenate([np.concatenate([xs[k], us[k]]) for k in range(N)] + [xs[N], np.zeros(N)])
  options: dict[str, Any] = {
    "ipopt.tol": tol,
    "ipopt.bound_relax_factor": 0.0,
    "ipopt.print_level": 0,
    "ipopt.sb": "yes",
    "print_time": False,
  }
  solver = ca.nlpsol("bicycle_ipopt", "ipopt", {"x": w, "f": J, "g": ca.vertcat(*g)}, options)
  res = solver(x0=w0, lbx=np.concatenate([lbw, np.zeros(N)]), ubx=np.concatenate([ubw, np.full(N, inf)]),
               lbg=lbg, ubg=ubg)  # fmt: skip
  stats = solver.stats()
  sol = np.array(res["x"]).reshape(-1)
  stages = sol[: N * (NX + NU)].reshape(N, NX + NU)
  x = np.vstack([stages[:, :NX], sol[N * (NX + NU) : N * (NX + NU) + NX]])
  return IpoptSolution(float(res["f"]), x, stages[:, NX:].copy(), sol[-N:].copy(), str(stats["return_status"]),
                       int(stats["iter_count"]), bool(stats["success"]))  # fmt: skip


def ipopt_reference(x0: F64) -> tuple[float, F64, F64, str]:
  """(cost, x (N + 1, nx), u (N, nu), IPOPT's return status) of the OCP solved by IPOPT (tol 1e-10) from anvil's cold
  start, see `solve_ipopt`."""
  sol = solve_ipopt(x0)
  return sol.cost, sol.x, sol.u, sol.status
