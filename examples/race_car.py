"""A race car on a track given as a table: acados's `race_cars` MPC, its track curvature an `anvil.interpolant`.

The car (acados's 1:43 model: a Frenet-frame bicycle, states s, n, alpha, v, D, delta; inputs the rates of the throttle
D and the steering angle delta) follows the centre line of a track known only by its curvature kappa at 1500 unevenly
spaced arc lengths s (as a track file gives it), within the track's width and the acceleration limits (softened with
an L1 penalty, as acados does); the MPC (horizon 50 of 0.02 s) reads kappa(s) from a cubic spline of that table.

Run: `python examples/race_car.py [--steps K] [--out DIR] [--ipopt]`. It builds three controllers on the same OCP:
  * "table": kappa from the track table, its spline in the generated code,
  * "table, data in p": the same spline with the table's data a run-time input (`values_as_input`, in every stage's
    parameter), so that the same controller drives another track without a rebuild,
  * "closed form": kappa as the formula the table was sampled from (what a hand-written model would do),
and, with --ipopt (CasADi needed), the same OCP in CasADi (kappa from CasADi's bspline interpolant of the same table,
the same RK4 step and soft bounds) solved by IPOPT. It runs one closed loop per controller from the same start (a plant
of ten RK4 steps per sample on the exact curvature), prints the time per step side by side (same run) and how far the
closed loops are apart, then gives the run-time table controller a second track's data and races that, and plots both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
from tinygrad import Tensor

from anvil import Arg, NumericalFunction, interpolant
from anvil.mpc import MPCFunction, MPCOptions, Soft, rk4
from anvil.sqp import SQPOptions

from cli import example_arguments

N, DT = 50, 0.02  # horizon: 1 s
M, C1, C2, CM1, CM2, CR0, CR2 = 0.043, 0.5, 15.5, 0.28, 0.05, 0.011, 0.006  # the car (acados's bicycle_model.py)
N_MAX, A_MAX = 0.12, 4.0  # half the track's width (m); lateral and longitudinal acceleration limits (m/s^2)
PROGRESS = 3.0  # the progress asked of each horizon (m): the reference runs from s0 to s0 + PROGRESS
Q = np.array([1e-1, 1e-8, 1e-8, 1e-8, 1e-3, 5e-3])  # weights of the state error, the inputs and the final state
R = np.array([1e-3, 5e-3])
QE = np.array([5e0, 1e1, 1e-8, 1e-8, 5e-3, 2e-3])
SOFT_L1 = 100.0  # the L1 penalty on leaving the track and on exceeding the acceleration limits (acados's zl, zu)
TOL = 1e-10  # the SQP's tolerance (IPOPT's too): the weights of 1e-8 leave directions nearly flat, where 1e-8 would
#: leave the first input uncertain in its fourth digit
X0 = np.array([-2.0, 0.0, 0.0, 0.0, 0.0, 0.0])
LENGTH = 60.0  # the tracks' tables cover s in [-5, LENGTH]
NODES = 1500


def curvature(s: Any, track: int = 0) -> Any:
  """The tracks' curvature (1/m) at arc length s: numpy arrays or Tensors."""
  sin = np.sin if isinstance(s, np.ndarray) else Tensor.sin
  if track == 0:
    return 1.0 * sin(2 * np.pi * s / 5.0) + 0.4 * sin(2 * np.pi * s / 1.7 + 0.5)
  return 1.2 * sin(2 * np.pi * s / 4.0 + 1.0) - 0.4 * sin(2 * np.pi * s / 2.3)


def track_nodes() -> np.ndarray:
  """The table's arc lengths: unevenly spaced, denser where the spacing's own wave says so (as a surveyed track)."""
  t = np.linspace(0.0, 1.0, NODES)
  return -5.0 + (LENGTH + 5.0) * (t + 0.02 * np.sin(14 * np.pi * t))


#: The math the model is written in: Tensor operations (anvil), or CasADi's for the IPOPT reference.
TENSOR_MATH = SimpleNamespace(cos=Tensor.cos, sin=Tensor.sin, tanh=Tensor.tanh, stack=Tensor.stack)


def model(kappa: Callable[[Any, Any], Any], m: SimpleNamespace = TENSOR_MATH) -> tuple[Callable[..., Any], ...]:
  """The car's ODE and its path constraints (longitudinal and lateral acceleration) for a curvature kappa(s, p)."""

  def force(v: Any, D: Any) -> Any:
    return (CM1 - CM2 * v) * D - CR2 * v * v - CR0 * m.tanh(5 * v)

  def ode(x: Any, u: Any, p: Any) -> Any:
    s, n, alpha, v, D, delta = (x[i] for i in range(6))
    k = kappa(s, p)
    sdot = v * m.cos(alpha + C1 * delta) / (1 - k * n)
    return m.stack(sdot, v * m.sin(alpha + C1 * delta), v * C2 * delta - k * sdot,
                   force(v, D) / M * m.cos(C1 * delta), u[0], u[1])  # fmt: skip

  def accelerations(x: Any, u: Any, p: Any) -> Any:
    v, D, delta = x[3], x[4], x[5]
    return m.stack(force(v, D) / M, C2 * v * v * delta + force(v, D) * m.sin(C1 * delta) / M)

  return ode, accelerations


def controller(name: str, kappa: Callable[[Tensor, Tensor], Tensor], np_: int) -> MPCFunction:
  """The race-car MPC for a curvature kappa(s, p); p = (the track's data if any, the reference of s)."""
  ode, accelerations = model(kappa)
  args = (Arg(6), Arg(2), Arg(np_))
  return MPCFunction(
    name,
    dynamics=rk4(f"{name}_F", ode, DT, nx=6, nu=2, np=np_),
    stage_cost=NumericalFunction(f"{name}_l", lambda x, u, p: _cost(Q, x, p) + (Tensor(R) * u * u).sum(), args),
    terminal_cost=NumericalFunction(f"{name}_lN", lambda x, p: _cost(QE, x, p), (Arg(6), Arg(np_))),
    horizon=N,
    x_bounds=([-np.inf, -N_MAX, -np.inf, -np.inf, -1.0, -0.4], [np.inf, N_MAX, np.inf, np.inf, 1.0, 0.4]),
    u_bounds=([-10.0, -2.0], [10.0, 2.0]),
    constraints=NumericalFunction(f"{name}_h", accelerations, args),
    constraint_bounds=([-A_MAX, -A_MAX], [A_MAX, A_MAX]),
    soft={"x": Soft(indices=(1,), l1=SOFT_L1), "constraints": Soft(l1=SOFT_L1)},
    options=MPCOptions(sqp=SQPOptions(max_iter=50, tol=TOL)),
  )


def _cost(weights: np.ndarray, x: Tensor, p: Tensor) -> Tensor:
  """Weighted squared distance of x to (s_ref, 0, ...), s_ref the parameter's last entry."""
  e = x - Tensor.stack(p[-1], *(Tensor(0.0) for _ in range(5)))
  return (Tensor(weights) * e * e).sum()


def references(s0: float) -> np.ndarray:
  """The reference of s over the horizon from s0: s0 .. s0 + PROGRESS, (N + 1, 1)."""
  return (s0 + PROGRESS * np.arange(N + 1) / N)[:, None]


def plant(track: int) -> NumericalFunction:
  """The simulated car: ten RK4 steps per sample with the exact curvature."""
  ode, _ = model(lambda s, p: curvature(s, track))
  return rk4(f"race_plant_{track}", ode, DT, nx=6, nu=2, np=1, steps=10)


def race(solve: Callable[[np.ndarray, np.ndarray], np.ndarray], simulate: NumericalFunction, steps: int
         ) -> tuple[np.ndarray, list[float]]:  # fmt: skip
  """A closed loop from X0: the states and the time per step."""
  xs, times = [X0], []
  for _ in range(steps):
    start = time.perf_counter()
    u = solve(xs[-1], references(xs[-1][0]))
    times.append(time.perf_counter() - start)
    xs.append(simulate(xs[-1], u, np.zeros(1)))
  return np.array(xs), times


def ipopt_controller(nodes: np.ndarray, kappa_values: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
  """The same OCP in CasADi (bspline interpolant of the same table, one RK4 step), solved by IPOPT (tol 1e-10) from
  the previous solution."""
  import casadi as ca

  table = ca.interpolant("kappa", "bspline", [nodes], kappa_values)
  math = SimpleNamespace(cos=ca.cos, sin=ca.sin, tanh=ca.tanh, stack=ca.vertcat)
  ode, accelerations = model(lambda s, p: table(s), math)
  x, u = ca.SX.sym("x", 6), ca.SX.sym("u", 2)
  k1 = ode(x, u, None)
  k2 = ode(x + DT / 2 * k1, u, None)
  k3 = ode(x + DT / 2 * k2, u, None)
  k4 = ode(x + DT * k3, u, None)
  step = ca.Function("F", [x, u], [x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)])
  h = ca.Function("h", [x, u], [accelerations(x, u, None)])
  # the soft bounds as anvil's Soft makes them: one slack >= 0 per softened component and stage, both sides
  X, U, P = ca.MX.sym("X", 6, N + 1), ca.MX.sym("U", 2, N), ca.MX.sym("P", 7, N + 1)  # P: x0 then s_ref
  S_n, S_a = ca.MX.sym("S_n", N), ca.MX.sym("S_a", 2, N)  # slacks: |n_k| (k = 1..N), |a_k| (k = 0..N-1)
  cost, g, lbg, ubg = SOFT_L1 * (ca.sum1(S_n) + ca.sum1(ca.vec(S_a))), [X[:, 0] - P[:6, 0]], [0.0] * 6, [0.0] * 6
  for k in range(N):
    e = X[:, k] - ca.vertcat(P[6, k], 0, 0, 0, 0, 0)
    cost += ca.dot(Q * e, e) + ca.dot(R * U[:, k], U[:, k])
    a = h(X[:, k], U[:, k])
    g += [step(X[:, k], U[:, k]) - X[:, k + 1], a + S_a[:, k], a - S_a[:, k]]
    g += [X[1, k + 1] + S_n[k], X[1, k + 1] - S_n[k]]
    lbg += [0.0] * 6 + [-A_MAX] * 2 + [-np.inf] * 2 + [-N_MAX, -np.inf]
    ubg += [0.0] * 6 + [np.inf] * 2 + [A_MAX] * 2 + [np.inf, N_MAX]
  e = X[:, N] - ca.vertcat(P[6, N], 0, 0, 0, 0, 0)
  cost += ca.dot(QE * e, e)
  w = ca.vertcat(ca.vec(X), ca.vec(U), S_n, ca.vec(S_a))
  opts = {"ipopt.tol": TOL, "ipopt.print_level": 0, "print_time": False, "ipopt.warm_start_init_point": "yes"}
  nlp = ca.nlpsol("race", "ipopt", {"x": w, "f": cost, "g": ca.vertcat(*g), "p": ca.vec(P)}, opts)
  lx = np.tile([-np.inf, -np.inf, -np.inf, -np.inf, -1.0, -0.4], N + 1)
  ux = np.tile([np.inf, np.inf, np.inf, np.inf, 1.0, 0.4], N + 1)
  lbw = np.r_[lx, np.tile([-10.0, -2.0], N), np.zeros(3 * N)]
  ubw = np.r_[ux, np.tile([10.0, 2.0], N), np.full(3 * N, np.inf)]
  state: dict[str, np.ndarray] = {}
  nw = 6 * (N + 1) + 2 * N

  def solve(x0: np.ndarray, s_ref: np.ndarray) -> np.ndarray:
    w0 = state.get("w", np.r_[np.tile(x0, N + 1), np.zeros(2 * N + 3 * N)])
    p = np.c_[np.tile(x0, (N + 1, 1)), s_ref].ravel()
    sol = nlp(x0=w0, lam_x0=state.get("lam_x", 0), lam_g0=state.get("lam_g", 0), lbx=lbw, ubx=ubw, lbg=lbg, ubg=ubg,
              p=p)  # fmt: skip
    w = np.array(sol["x"]).ravel()
    xs, us = w[: 6 * (N + 1)].reshape(N + 1, 6), w[6 * (N + 1) : nw].reshape(N, 2)
    state["w"] = np.r_[np.r_[xs[1:], xs[-1:]].ravel(), np.r_[us[1:], us[-1:]].ravel(), w[nw:]]
    state["lam_x"], state["lam_g"] = np.array(sol["lam_x"]).ravel(), np.array(sol["lam_g"]).ravel()
    return us[0]

  return solve


def main() -> None:
  """Build the controllers, race, compare, switch tracks, plot."""
  args = example_arguments(__doc__, 150, flags={"ipopt": "also solve the OCP by IPOPT (CasADi) and compare"})
  nodes = track_nodes()
  first, second = curvature(nodes, 0), curvature(nodes, 1)
  fixed = interpolant("race_kappa", nodes, first, method="cubic")
  runtime = interpolant("race_kappa_data", nodes, first, method="cubic", values_as_input=True)
  data = runtime.coefficients(first)
  controllers = {  # label: (controller, the track's data it takes in p)
    "table": (controller("race_table", lambda s, p: fixed(s), 1), None),
    "table, data in p": (controller("race_table_p", lambda s, p: runtime(s, p[:-1]), data.size + 1), data),
    "closed form": (controller("race_closed", lambda s, p: curvature(s, 0), 1), None),
  }
  start = time.perf_counter()
  for mpc, track in controllers.values():
    _solver(mpc, track)(X0, references(X0[0]))
  print(f"build (trace, generate, compile or load from cache) and first solves: {time.perf_counter() - start:.1f} s")
  simulate = plant(0)
  results = {label: race(_solver(mpc, track), simulate, args.steps) for label, (mpc, track) in controllers.items()}
  if args.ipopt:
    results["IPOPT"] = race(ipopt_controller(nodes, first), simulate, args.steps)
  print(f"\n{'controller':<17} {'ms per step (median)':>21} {'p95':>8} {'ratio to closed form':>21}")
  reference_time = float(np.median(results["closed form"][1]))
  for label, (_, times) in results.items():
    median = float(np.median(times))
    print(f"{label:<17} {1e3 * median:>21.2f} {1e3 * np.percentile(times, 95):>8.2f} {median / reference_time:>21.2f}")
  xs = results["table"][0]
  for label in results:
    if label != "table":
      print(f"max |x_table - x| of {label:<16} {np.max(np.abs(xs - results[label][0])):.2e}")
  raced = f"{xs[-1, 0] - X0[0]:.3f} m raced in {args.steps * DT:.2f} s"
  print(f"track 1: {raced}, max |n| {np.max(np.abs(xs[:, 1])):.4f} m")

  mpc = controllers["table, data in p"][0]
  built = mpc.library
  second_lap, _ = race(_solver(mpc, runtime.coefficients(second)), plant(1), args.steps)
  rebuilt = "no" if mpc.library is built else "yes"
  print(
    f"track 2, the same controller with the second table's data (rebuilt: {rebuilt}): "
    f"{second_lap[-1, 0] - X0[0]:.3f} m raced, max |n| {np.max(np.abs(second_lap[:, 1])):.4f} m"
  )
  _plot(args.out / "race_car.png", xs, second_lap)


def _solver(mpc: MPCFunction, track: np.ndarray | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
  """u0 = the controller's first input from (x0, the reference of s), the track's data (if any) in every stage's p;
  the controller reset (its warm start forgotten)."""
  mpc.reset()
  data = np.zeros((N + 1, 0)) if track is None else np.broadcast_to(track.ravel(), (N + 1, track.size))
  return lambda x, s_ref: mpc(x, np.c_[data, s_ref]).u0


def _plot(path: Any, first: np.ndarray, second: np.ndarray) -> None:
  """Distance from the centre line along the track, both laps."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(8, 3))
  for xs, label in ((first, "track 1"), (second, "track 2")):
    ax.plot(xs[:, 0], xs[:, 1], label=label)
  ax.axhline(N_MAX, color="k", lw=0.5)
  ax.axhline(-N_MAX, color="k", lw=0.5)
  ax.set(xlabel="s (m)", ylabel="n (m)", title="race car: distance from the centre line")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path)
  print(f"plot: {path}")


if __name__ == "__main__":
  main()
