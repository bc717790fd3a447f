"""Quadruped standing MPC against crocoddyl: solo12 shifting its base over its feet, same robot, horizon and step.

    .venv/bin/python -m benchmarks.bench_quadruped [--rounds 5]

anvil: examples/quadruped_stand.py's controller (whole-body dynamics with the feet's contact forces as inputs, nu = 24;
feet held by softened position constraints, friction pyramids, Gauss-Newton), N = 10, dt = 0.02, crocoddyl's
semi-implicit Euler. crocoddyl 3.2: its rigid-contact formulation (DifferentialActionModelContactFwdDynamics with four
3-D contacts, Baumgarte gains (0, 50): the forces solved from the contact constraints, nu = 12; friction cones as
quadratic-barrier costs), the same N, dt and Euler step, the base's target as a centre-of-mass target, FDDP. The two
OCPs differ (forces as inputs and hard constraints against forces from the contact dynamics and barrier costs), so
the table compares what each user writes for the task, not one NLP. Columns: a full solve from the standing state to
the shifted target (anvil: SQP to convergence; crocoddyl: FDDP from the quasi-static guess) and a warm step from the
plan's next state started from the plan shifted by one knot (anvil: its real-time iteration; crocoddyl: one FDDP
iteration); medians of `--rounds`, one thread.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from benchmarks.common import ROOT, median_seconds, print_markdown

sys.path.insert(0, str(ROOT / "examples"))
import quadruped_stand as example

SHIFT = example.SHIFT


def crocoddyl_solver() -> tuple[Any, np.ndarray]:
  """crocoddyl's FDDP on solo12 standing with its centre of mass shifted by SHIFT, and the start state."""
  import crocoddyl
  import pinocchio as pin

  model = pin.buildModelFromUrdf(example.urdf(), pin.JointModelFreeFlyer())
  data = model.createData()
  q0 = pin.neutral(model)
  q0[7:] = example.STANDING
  pin.framesForwardKinematics(model, data, q0)
  q0[2] = example.RADIUS - data.oMf[model.getFrameId(example.FEET[0])].translation[2]
  pin.framesForwardKinematics(model, data, q0)
  x0 = np.r_[q0, np.zeros(model.nv)]
  state = crocoddyl.StateMultibody(model)
  actuation = crocoddyl.ActuationModelFloatingBase(state)
  target = pin.centerOfMass(model, data, q0) + SHIFT
  weights = np.r_[np.zeros(3), np.full(3, example.W_UPRIGHT), np.full(12, example.W_POSTURE), np.full(18, 1.0)]

  def knot(dt: float) -> Any:
    contacts, costs = crocoddyl.ContactModelMultiple(state, actuation.nu), crocoddyl.CostModelSum(state, actuation.nu)
    for foot in example.FEET:
      fid = model.getFrameId(foot)
      contact = crocoddyl.ContactModel3D(state, fid, data.oMf[fid].translation.copy(), pin.LOCAL_WORLD_ALIGNED,
                                         actuation.nu, np.array([0.0, 50.0]))  # fmt: skip
      contacts.addContact(foot, contact)
      cone = crocoddyl.FrictionCone(np.eye(3), example.MU, 4, False)
      barrier = crocoddyl.ActivationModelQuadraticBarrier(crocoddyl.ActivationBounds(cone.lb, cone.ub))
      residual = crocoddyl.ResidualModelContactFrictionCone(state, fid, cone, actuation.nu)
      costs.addCost(f"{foot}_cone", crocoddyl.CostModelResidual(state, barrier, residual), 10.0)
    com = crocoddyl.ResidualModelCoMPosition(state, target, actuation.nu)
    costs.addCost("com", crocoddyl.CostModelResidual(state, com), example.W_BASE)
    x_reg = crocoddyl.ResidualModelState(state, x0, actuation.nu)
    costs.addCost("x", crocoddyl.CostModelResidual(state, crocoddyl.ActivationModelWeightedQuad(weights), x_reg), 1.0)
    costs.addCost("u", crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelControl(state, actuation.nu)),
                  example.W_TORQUE)  # fmt: skip
    dynamics = crocoddyl.DifferentialActionModelContactFwdDynamics(state, actuation, contacts, costs, 0.0, True)
    return crocoddyl.IntegratedActionModelEuler(dynamics, dt)

  problem = crocoddyl.ShootingProblem(x0, [knot(example.DT)] * example.N, knot(0.0))
  problem.nthreads = 1  # NOTE: crocoddyl's default is every core; anvil's step runs on one
  solver = crocoddyl.SolverFDDP(problem)
  solver.th_stop = 1e-9
  return solver, x0


def main() -> None:
  """Both solvers, one table."""
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  solver, x0 = crocoddyl_solver()
  problem = solver.problem
  guess = ([x0] * (example.N + 1), problem.quasiStatic([x0] * example.N))
  full = median_seconds(lambda: solver.solve(*guess, 200), args.rounds)
  iterations = solver.iter
  xs, us = list(solver.xs), list(solver.us)

  def warm() -> None:
    problem.x0 = xs[1]
    solver.solve([*xs[1:], xs[-1]], [*us[1:], us[-1]], 1)

  rows = [
    [
      "crocoddyl FDDP (contact dynamics)",
      str(iterations),
      f"{1e3 * full:.2f}",
      f"{1e3 * median_seconds(warm, args.rounds):.2f}",
    ]
  ]
  from anvil.robots import Robot

  robot = Robot.from_urdf(example.urdf(), floating_base=True)
  q_stand = example.standing(robot)
  feet = np.concatenate([robot.frame_placement(q_stand, foot)[1] for foot in example.FEET])
  p = np.r_[feet, q_stand[:3] + SHIFT]
  x_stand = np.r_[q_stand, np.zeros(robot.nv)]
  sqp, rti = example.controller(robot, q_stand, "sqp"), example.controller(robot, q_stand, "rti")
  sqp(x_stand, p)

  def cold() -> Any:
    sqp.reset()
    return sqp(x_stand, p)

  full, sol = median_seconds(cold, args.rounds), cold()
  for _ in range(30):  # NOTE: to the plan at x0 (a real-time iteration takes one iteration per call)
    rti(x_stand, p)

  def step() -> None:
    rti.set_guess(np.vstack([sol.x[1:], sol.x[-1:]]), np.vstack([sol.u[1:], sol.u[-1:]]))
    rti(sol.x[1], p)

  rows.append(["anvil SQP / RTI (forces as inputs)", str(sol.iterations), f"{1e3 * full:.2f}",
               f"{1e3 * median_seconds(step, args.rounds):.2f}"])  # fmt: skip
  header = ["solver", "iterations", "full solve ms", "warm step, 1 iteration ms"]
  print_markdown(header, rows)


if __name__ == "__main__":
  main()
