"""Robot MPC against crocoddyl: crocoddyl's arm-reaching OCP solved by BoxFDDP and by anvil's MPC, same run.

    .venv/bin/python -m benchmarks.bench_robot_mpc [--robots panda,talos_arm] [--rounds 5] [--casadi PYTHON]

The OCP (crocoddyl's `arm_manipulation` setup, on example-robot-data's URDFs): free forward dynamics (ABA), crocoddyl's
Euler step (v+ = v + a dt, q+ = q + v+ dt; dt = 0.01), T = 100 knots, from the robot's reference posture at rest;
costs, each crocoddyl's 0.5 weight |r|^2 and dt-scaled on the running knots: the end effector's placement error to a
target (log6(target^-1 placement), weight 1 per knot and 1e3 at the end), the state's distance to the start (1e-4) and
the torque's to gravity compensation (1e-4); the torques boxed by the URDF's effort limits.

Per robot, crocoddyl's BoxFDDP (one thread, as anvil; a second row on crocoddyl's default, every core) and anvil's
MPCFunction (Gauss-Newton Hessian, as FDDP's, and the exact one) each: a full solve from the start at rest (crocoddyl:
its default warm start, the start state repeated and zero torques; anvil: its own cold guess, the same), the cost it
converges to and its time; then a warm MPC step: from the plan's next state x1, started from the plan at x0 shifted by
one knot, one iteration (anvil: its real-time iteration controller, `mode="rti"`, the whole step; in brackets its
feedback phase alone, after `prepare()` ran while waiting for x1) and up to ten iterations (anvil: SQP to convergence);
and at equal accuracy: anvil's SQP at the loosest tolerance whose cost comes as close to its converged step's as
crocoddyl's 10 iterations come to its own (relative cost, shown on crocoddyl's row); medians of `--rounds` repetitions.
anvil's controllers are built from anvil.robots' ABA (`euler` on (v + dt a, a): crocoddyl's Euler step; a third row on
RK4 of ẋ = (v, a), another discretization of the same problem), their build time in the last columns: construction and
first call less that call's solve, cold or from the cache, and in a new Python process once the cache holds the
controller (the warm build a restarted script waits for). With `--casadi PYTHON` (a Python with pip
`cmeel-casadi-kin-dyn`, as for bench_robots), IPOPT solves the same NLP from the same cold start on Pinocchio's own ABA
as CasADi functions: the optimum's independent check (its time is CasADi's virtual machine's, for reference)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tinygrad import Tensor

import anvil as av
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, euler, rk4
from anvil.robots import Robot
from anvil.sqp import SQPOptions
from benchmarks.common import median_seconds, print_markdown
from benchmarks.pinocchio_driver import robot_urdf

DT, T = 0.01, 100
#: robot -> (end-effector frame, locked joints, target offset from the start's end-effector position)
ROBOTS = {
  "panda": ("panda_hand_tcp", ("panda_finger_joint1", "panda_finger_joint2"), (0.1, -0.2, -0.15)),
  "talos_arm": ("gripper_left_joint", (), (0.05, 0.15, 0.1)),
}
W_GOAL, W_GOAL_END, W_X, W_U = 1.0, 1e3, 1e-4, 1e-4


def problem(name: str) -> dict[str, Any]:
  """The OCP's data: anvil's robot, Pinocchio's model, the start state, the target, the torque limits."""
  import pinocchio as pin

  frame, locked, offset = ROBOTS[name]
  urdf = robot_urdf(name)
  robot = Robot.from_urdf(urdf, locked_joints=list(locked))
  model = pin.buildModelFromUrdf(urdf)
  if locked:
    model = pin.buildReducedModel(model, [model.getJointId(j) for j in locked], pin.neutral(model))
  q0 = np.clip(0.3 * np.ones(robot.nq), model.lowerPositionLimit, model.upperPositionLimit)
  x0 = np.concatenate([q0, np.zeros(robot.nv)])
  rotation, position = robot.frame_placement(q0, frame)
  return {"robot": robot, "model": model, "frame": frame, "x0": x0, "target": (rotation, position + offset),
          "effort": np.asarray(model.effortLimit, dtype=np.float64)}  # fmt: skip


def crocoddyl_solver(p: dict[str, Any], threads: int = 1) -> Any:
  """crocoddyl's BoxFDDP on the OCP, its problem's calc and calcDiff on `threads` threads (crocoddyl's own default is
  every core: one thread is anvil's, the symmetric comparison)."""
  import crocoddyl
  import pinocchio as pin

  state = crocoddyl.StateMultibody(p["model"])
  actuation = crocoddyl.ActuationModelFull(state)
  fid = p["model"].getFrameId(p["frame"])
  goal = crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelFramePlacement(state, fid, pin.SE3(*p["target"])))
  x_reg = crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelState(state, p["x0"]))
  u_reg = crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelControlGrav(state))
  running, terminal = crocoddyl.CostModelSum(state), crocoddyl.CostModelSum(state)
  running.addCost("goal", goal, W_GOAL)
  running.addCost("x_reg", x_reg, W_X)
  running.addCost("u_reg", u_reg, W_U)
  terminal.addCost("goal", goal, W_GOAL_END)
  model = crocoddyl.IntegratedActionModelEuler(
    crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, running), DT
  )
  model.u_lb, model.u_ub = -p["effort"], p["effort"]
  end = crocoddyl.IntegratedActionModelEuler(
    crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, terminal), 0.0
  )
  shooting = crocoddyl.ShootingProblem(p["x0"], [model] * T, end)
  shooting.nthreads = threads
  solver = crocoddyl.SolverBoxFDDP(shooting)
  solver.th_stop = 1e-12
  return solver


def anvil_controller(p: dict[str, Any], hessian: str, mode: str = "sqp", integrator: str = "euler") -> MPCFunction:
  """anvil's MPC on the same OCP (its costs as least squares: rᵀ W r with W = 0.5 weight, dt on the running knots);
  `integrator` "euler" (crocoddyl's step) or "rk4" (RK4 of ẋ = (v, a): another discretization, another optimum)."""
  robot: Robot = p["robot"]
  nq, nx, nu = robot.nq, robot.nx, robot.nu
  rotation, position = (Tensor(a) for a in p["target"])
  x0 = Tensor(p["x0"])
  tag = f"{robot.identifier}_{hessian}_{mode}" + ("" if integrator == "euler" else f"_{integrator}")

  def rate(x: Tensor, u: Tensor) -> Tensor:  # NOTE: explicit Euler on (v + dt a, a) is crocoddyl's Euler step
    a = robot.aba(x[:nq], x[nq:], u)
    return (x[nq:] + DT * a).cat(a)

  def ode(x: Tensor, u: Tensor) -> Tensor:
    return x[nq:].cat(robot.aba(x[:nq], x[nq:], u))

  step = (
    euler(f"reach_{tag}_F", rate, DT, nx=nx, nu=nu) if integrator == "euler" else rk4(f"reach_{tag}_F", ode, DT, nx, nu)
  )

  def running(x: Tensor, u: Tensor) -> Tensor:
    error = robot.frame_placement_error(x[:nq], p["frame"], rotation, position)
    return error.cat(x - x0, u - robot.generalized_gravity(x[:nq]))

  weights = DT * 0.5 * np.r_[np.full(6, W_GOAL), np.full(nx, W_X), np.full(nu, W_U)]
  terminal = av.NumericalFunction(f"reach_{tag}_rN",
                                  lambda x: robot.frame_placement_error(x[:nq], p["frame"], rotation, position),
                                  (av.Arg(nx),))  # fmt: skip
  return MPCFunction(
    f"reach_{tag}",
    step,
    LeastSquares(av.NumericalFunction(f"reach_{tag}_r", running, (av.Arg(nx), av.Arg(nu))), weights),
    LeastSquares(terminal, np.full(6, 0.5 * W_GOAL_END)),
    horizon=T,
    u_bounds=(-p["effort"], p["effort"]),
    options=MPCOptions(mode=mode, hessian=hessian, sqp=SQPOptions(max_iter=300, tol=1e-9)),
  )


def casadi_log6(rotation: Any, position: Any, target: tuple[np.ndarray, np.ndarray]) -> Any:
  """log6(target⁻¹ · placement) (Pinocchio's log6: linear, then angular) in CasADi, smooth at zero rotation: the
  angle's θ / (2 sin θ) and V⁻¹'s (1 - θ sin θ / (2 (1 - cos θ))) / θ² from their series near zero, the closed forms
  fed a stand-in there (every branch finite, so no NaN reaches a derivative)."""
  import casadi as ca

  target_rotation, target_position = (ca.DM(a) for a in target)
  R = target_rotation.T @ rotation
  t = target_rotation.T @ (position - target_position)
  s = ca.vertcat(R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1])  # 2 sin θ times the axis
  sin2, cos = ca.sumsqr(s) / 4, (R[0, 0] + R[1, 1] + R[2, 2] - 1) / 2
  small = ca.logic_and(sin2 < 1e-6, cos > 0)
  sin2_closed = ca.if_else(small, 0.25, sin2)
  half_closed = ca.atan2(ca.sqrt(sin2_closed), cos) / (2 * ca.sqrt(sin2_closed))
  w = ca.if_else(small, 0.5 * (1 + sin2 / 6 + 3 * sin2**2 / 40), half_closed) * s
  theta2 = ca.sumsqr(w)
  tiny = theta2 < 1e-6
  theta2_closed = ca.if_else(tiny, 1.0, theta2)
  angle = ca.sqrt(theta2_closed)
  closed = (1 - angle * ca.sin(angle) / (2 * (1 - ca.cos(angle)))) / theta2_closed
  g = ca.if_else(tiny, 1 / 12 + theta2 / 720 + theta2**2 / 30240, closed)
  return ca.vertcat(t - 0.5 * ca.cross(w, t) + g * ca.cross(w, ca.cross(w, t)), w)


def kin_dyn_functions(name: str, python: str) -> tuple[Any, Any, Any]:
  """Pinocchio's ABA, RNEA and end-effector kinematics of robot `name` as CasADi functions, saved by
  benchmarks/casadi/kin_dyn_save.py (run by `python`) into a temporary folder and loaded by anvil's CasADi."""
  import casadi as ca

  frame, locked, _ = ROBOTS[name]
  script = Path(__file__).resolve().parent / "casadi" / "kin_dyn_save.py"
  with tempfile.TemporaryDirectory(prefix="bench_robot_mpc_") as folder:
    subprocess.run([python, str(script), str(robot_urdf(name)), frame, folder, ",".join(locked)], check=True,
                   capture_output=True, text=True)  # fmt: skip
    aba, rnea, fk = (ca.Function.load(str(Path(folder) / f"{n}.casadi")) for n in ("aba", "rnea", "fk"))
  return aba, rnea, fk


def ipopt_solve(name: str, p: dict[str, Any], python: str) -> tuple[int, float, float]:
  """IPOPT (CasADi's, exact Hessian, tol 1e-10) on the same NLP from the same cold start, its model Pinocchio's own ABA,
  RNEA and kinematics as CasADi functions (benchmarks/casadi/kin_dyn_save.py run by `python`, a Python with pip
  `cmeel-casadi-kin-dyn`): iterations, cost, seconds (CasADi evaluates the model in its virtual machine: the time is
  for reference, not a like-for-like speed)."""
  import casadi as ca
  import pinocchio as pin

  frame = ROBOTS[name][0]
  aba, rnea, fk = kin_dyn_functions(name, python)
  robot: Robot = p["robot"]
  nq, nv, nx, nu = robot.nq, robot.nv, robot.nx, robot.nu
  q_, x_, u_ = ca.SX.sym("q", nq), ca.SX.sym("x", nx), ca.SX.sym("u", nu)
  position, rotation = fk(q_)
  goal = ca.Function("goal", [q_], [casadi_log6(rotation, position, p["target"])])
  check = pin.SE3(*p["target"]).actInv(pin.SE3(*robot.frame_placement(p["x0"][:nq], frame)))
  if not np.allclose(np.asarray(goal(p["x0"][:nq])).ravel(), pin.log6(check).vector, atol=1e-10):
    raise RuntimeError("casadi_log6 differs from Pinocchio's log6")
  q, v = x_[:nq], x_[nq:]
  v_next = v + DT * aba(q, v, u_)
  step = ca.Function("step", [x_, u_], [ca.vertcat(q + DT * v_next, v_next)])
  gravity = rnea(q, ca.DM.zeros(nv), ca.DM.zeros(nv))
  running = ca.Function("running", [x_, u_], [DT * 0.5 * (W_GOAL * ca.sumsqr(goal(q)) + W_X * ca.sumsqr(x_ - p["x0"])
                                                          + W_U * ca.sumsqr(u_ - gravity))])  # fmt: skip
  X, U = ca.MX.sym("X", nx, T + 1), ca.MX.sym("U", nu, T)
  cost = ca.sum2(running.map(T)(X[:, :T], U)) + 0.5 * W_GOAL_END * ca.sumsqr(goal(X[:nq, T]))
  defects = ca.vertcat(ca.vec(X[:, 0] - p["x0"]), ca.vec(X[:, 1:] - step.map(T)(X[:, :T], U)))
  w = ca.vertcat(ca.vec(X), ca.vec(U))
  options = {"expand": True, "print_time": 0, "ipopt.print_level": 0, "ipopt.tol": 1e-10, "ipopt.max_iter": 1000}
  solver = ca.nlpsol("reach", "ipopt", {"x": w, "f": cost, "g": defects}, options)
  effort = p["effort"]
  lbw = np.r_[np.full(nx * (T + 1), -np.inf), np.tile(-effort, T)]
  ubw = np.r_[np.full(nx * (T + 1), np.inf), np.tile(effort, T)]
  guess = np.r_[np.tile(p["x0"], T + 1), np.zeros(nu * T)]
  start = time.perf_counter()
  sol = solver(x0=guess, lbx=lbw, ubx=ubw, lbg=0, ubg=0)
  seconds, stats = time.perf_counter() - start, solver.stats()
  if not stats["success"]:
    raise RuntimeError(f"IPOPT: {stats['return_status']}")
  return int(stats["iter_count"]), float(sol["f"]), seconds


def built(p: dict[str, Any], hessian: str, integrator: str) -> tuple[MPCFunction, float]:
  """The controller and the seconds its build took: construction and first call, less that call's solve (the
  first call builds or loads the C++; its solve is control, not build)."""
  start = time.perf_counter()
  mpc = anvil_controller(p, hessian, "sqp", integrator)
  sol = mpc(p["x0"])
  return mpc, time.perf_counter() - start - sol.solve_time


def warm_build(name: str, hessian: str, integrator: str) -> float:
  """Seconds a new Python process takes to build the controller (as `built`) from the cache the run has filled:
  what a user's restarted script waits for. The problem's data (URDF, Pinocchio) is not counted."""
  script = (
    f"from benchmarks.bench_robot_mpc import problem, built; p = problem({name!r}); "
    f"print(built(p, {hessian!r}, {integrator!r})[1])"
  )
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
  return float(out.stdout.split()[-1])


def equal_accuracy(mpc: MPCFunction, x0: np.ndarray, x1: np.ndarray, accuracy: float,
                   timed: Callable[[float], float]) -> str:  # fmt: skip
  """The warm step's time at the loosest SQP tolerance (of 1e-4 ... 1e-9) whose cost is within `accuracy` (relative)
  of the converged step's, as crocoddyl's 10 iterations are of its own limit: the same accuracy on both sides."""
  mpc(x0)
  limit = mpc(x1).cost
  for tol in (1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9):
    mpc(x0)
    if abs(mpc(x1, tol=tol).cost - limit) <= accuracy * abs(limit):
      return f"{1e3 * timed(tol):.2f} (tol {tol:.0e})"
  return "not reached"


def anvil_row(name: str, p: dict[str, Any], hessian: str, integrator: str, x1: np.ndarray, cost: float,
              rounds: int, accuracy: float) -> list[str]:  # fmt: skip
  """anvil's row: the full solve from the cold guess, the warm steps from x1 (RTI: one iteration; SQP: to
  convergence, and to crocoddyl's 10-iteration `accuracy`), the build (`built`) and the warm build in a new
  process."""
  mpc, build = built(p, hessian, integrator)
  mpc.reset()
  start = time.perf_counter()
  sol = mpc(p["x0"])
  full = time.perf_counter() - start

  def step(mpc: MPCFunction, settle: int, tol: float | None = None, prepared: bool = False) -> float:
    for _ in range(settle):  # NOTE: to the plan at x0 (a real-time iteration takes one iteration per call)
      mpc(p["x0"])
    if prepared:  # NOTE: the preparation phase, run while waiting for x1: the call is the feedback phase alone
      mpc.prepare()
    start = time.perf_counter()
    mpc(x1, tol=tol)
    return time.perf_counter() - start

  rti_mpc = anvil_controller(p, hessian, "rti", integrator)
  rti = statistics.median(step(rti_mpc, 30) for _ in range(rounds))
  feedback = statistics.median(step(rti_mpc, 30, prepared=True) for _ in range(rounds))
  converged = statistics.median(step(mpc, 1) for _ in range(rounds))
  equal = equal_accuracy(
    mpc, p["x0"], x1, accuracy, lambda tol: statistics.median(step(mpc, 1, tol) for _ in range(rounds))
  )
  versus = f"{abs(sol.cost - cost) / abs(cost):.1e}" + (" (RK4: another NLP)" if integrator == "rk4" else "")
  return [name, f"anvil SQP, {hessian.replace('_', '-')}, {'Euler' if integrator == 'euler' else 'RK4'}",
          str(sol.iterations), f"{sol.cost:.9g}", versus, f"{1e3 * full:.1f}",
          f"{1e3 * full / max(sol.iterations, 1):.2f}", f"{1e3 * rti:.2f} (feedback {1e3 * feedback:.2f})",
          f"{1e3 * converged:.2f}", equal,
          f"{build:.1f} s", f"{warm_build(name, hessian, integrator):.2f} s"]  # fmt: skip


def crocoddyl_row(name: str, p: dict[str, Any], rounds: int, threads: int) -> tuple[list[str], dict[str, Any]]:
  """crocoddyl's row on `threads` threads, and what anvil's rows are measured against: the plan's next state x1, the
  converged cost, and the relative accuracy of crocoddyl's 10-iteration warm step."""
  solver = crocoddyl_solver(p, threads)
  start = time.perf_counter()
  solver.solve([], [], 1000)
  full, iterations, cost = time.perf_counter() - start, solver.iter, solver.cost
  xs, us = list(solver.xs), list(solver.us)
  x1 = np.array(xs[1])
  shifted_xs, shifted_us = [*xs[1:], xs[-1]], [*us[1:], us[-1]]

  def warm(k: int) -> None:
    solver.problem.x0 = x1
    solver.solve(shifted_xs, shifted_us, k)

  one, ten = median_seconds(lambda: warm(1), rounds), median_seconds(lambda: warm(10), rounds)
  warm(10)
  ten_cost = solver.cost
  warm(1000)
  accuracy = abs(ten_cost - solver.cost) / abs(solver.cost)  # NOTE: of the 10 iterations, against its own limit
  label = "crocoddyl BoxFDDP" + ("" if threads == 1 else f" ({threads} threads)")
  row = [name, label, str(iterations), f"{cost:.9g}", "", f"{1e3 * full:.1f}", f"{1e3 * full / max(iterations, 1):.2f}",
         f"{1e3 * one:.2f}", f"{1e3 * ten:.2f}", f"{1e3 * ten:.2f} (cost to {accuracy:.0e})", "", ""]  # fmt: skip
  return row, {"x1": x1, "cost": cost, "accuracy": accuracy}


def measure(name: str, rounds: int, casadi: str = "") -> list[list[str]]:
  """Rows of one robot: crocoddyl on one thread (and on its default, every core, for reference), anvil Gauss-Newton,
  anvil exact. The warm steps: the plan's next state x1, started from the plan at x0 shifted by one knot (crocoddyl:
  the shifted xs, us given; anvil: its own warm start)."""
  p = problem(name)
  row, ref = crocoddyl_row(name, p, rounds, 1)
  rows = [row]
  if (cores := os.cpu_count() or 1) > 1:
    rows.append(crocoddyl_row(name, p, rounds, cores)[0])
  if casadi:
    its, ipopt_cost, seconds = ipopt_solve(name, p, casadi)
    rows.append([name, "IPOPT (CasADi; Pinocchio's ABA)", str(its), f"{ipopt_cost:.9g}",
                 f"{abs(ipopt_cost - ref['cost']) / abs(ref['cost']):.1e}", f"{1e3 * seconds:.1f}",
                 f"{1e3 * seconds / max(its, 1):.2f}", "", "", "", "", ""])  # fmt: skip
  for hessian, integrator in (("gauss_newton", "euler"), ("exact", "euler"), ("gauss_newton", "rk4")):
    rows.append(anvil_row(name, p, hessian, integrator, ref["x1"], ref["cost"], rounds, ref["accuracy"]))
  return rows


def main() -> None:
  """Measure every robot; print one table."""
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--robots", default=",".join(ROBOTS))
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--casadi", default="", help="a Python with cmeel-casadi-kin-dyn: IPOPT solves the same NLP")
  args = parser.parse_args()
  header = ["robot", "solver", "iterations", "cost", "vs crocoddyl", "full solve ms", "per iteration ms",
            "warm step, 1 iteration ms", "warm step, ≤ 10 it. / converged ms",
            "warm step, crocoddyl's 10-it. accuracy ms", "build (cold or cached)",
            "warm build, new process"]  # fmt: skip
  rows = [row for name in args.robots.split(",") for row in measure(name, args.rounds, args.casadi)]
  print_markdown(header, rows)


if __name__ == "__main__":
  main()
