"""anvil.robots against Pinocchio on real robots (example-robot-data): dynamics, kinematics, Jacobians, centre of mass
and energies at 50 random states; derivatives by anvil.ad against Pinocchio's analytical ones; the free flyer's and
continuous joints' configuration space."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pinocchio as pin
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.ad import jacobian
from anvil.robots import FrameType, Robot
from tests.robots import (
  MIXED_URDF,
  SMALL_URDF,
  anvil_robot,
  check_reached_posture,
  close,
  pinocchio_model,
  posture_mpc,
)

STATES = 50
REFERENCES = {"local": pin.LOCAL, "world": pin.WORLD, "local_world_aligned": pin.LOCAL_WORLD_ALIGNED}
#: The robots checked against Pinocchio (talos itself is left to the benchmark: its build is the slow one), and a
#: synthetic chain of every axis and placement.
CHECKED = ("panda", "ur5", "talos_arm", "solo12", "double_pendulum", "z1", "mixed")


@cache
def pair(name: str) -> tuple[Robot, Any]:
  """anvil's robot and Pinocchio's model of it, built once per process."""
  if name == "mixed":
    return Robot.from_urdf(MIXED_URDF), pin.buildModelFromXML(MIXED_URDF)
  return anvil_robot(name), pinocchio_model(name)


def test_local_transforms_cross_whole_and_factored() -> None:
  """The mixed chain crosses some local transforms whole and some factored: the checks against Pinocchio cover
  both."""
  from anvil.robots.algorithms import local_transforms
  from anvil.robots.spatial import Factored

  robot, _ = pair("mixed")
  factored = [isinstance(x, Factored) for x in local_transforms(robot.joints, Tensor(robot.neutral()))]
  assert any(factored) and not all(factored)


#: anvil's frame types as Pinocchio's.
FRAME_TYPES = {FrameType.BODY: pin.BODY, FrameType.FIXED_JOINT: pin.FIXED_JOINT, FrameType.JOINT: pin.JOINT}


def checked_frames(robot: Robot, model: Any) -> list[tuple[int, int]]:
  """A few frames of each kind, as (index in robot.frames, Pinocchio's frame id): the last body, the last fixed
  joint, a joint mid-tree."""
  out = []
  for kind, pin_type in FRAME_TYPES.items():
    found = [(i, model.getFrameId(f.name, pin_type)) for i, f in enumerate(robot.frames)
             if f.type is kind and f.joint >= 0 and model.existFrame(f.name, pin_type)]  # fmt: skip
    out += found[-1:] if kind is not FrameType.JOINT else found[len(found) // 2 : len(found) // 2 + 1]
  return out


def everything(robot: Robot, frames: list[tuple[int, int]]) -> av.NumericalFunction[..., Any]:
  """One function of (q, v, a) computing every algorithm at once (one build per robot)."""
  nq, nv = robot.nq, robot.nv

  def body(q: Tensor, v: Tensor, a: Tensor) -> tuple[Tensor, ...]:
    outs = [robot.rnea(q, v, a), robot.aba(q, v, a), robot.crba(q).reshape(-1), robot.nonlinear_effects(q, v),
            robot.generalized_gravity(q), robot.center_of_mass(q), robot.center_of_mass_jacobian(q).reshape(-1),
            robot.kinetic_energy(q, v).reshape(1), robot.potential_energy(q).reshape(1)]  # fmt: skip
    for f, _ in frames:
      rotation, translation = robot.frame_placement(q, f)
      outs += [rotation.reshape(-1), translation]
      for ref in REFERENCES:
        outs += [robot.frame_jacobian(q, f, ref).reshape(-1), robot.frame_velocity(q, v, f, ref)]
    return tuple(outs)

  return av.NumericalFunction(f"{robot.identifier}_everything", body, (av.Arg(nq), av.Arg(nv), av.Arg(nv)))


def reference(
  model: Any, frames: list[tuple[int, int]], q: np.ndarray, v: np.ndarray, a: np.ndarray
) -> list[np.ndarray]:
  """Pinocchio's values of what `everything` computes, in the same order."""
  data = model.createData()
  nv = model.nv
  m = pin.crba(model, data, q)
  m = np.triu(m) + np.triu(m, 1).T
  out = [pin.rnea(model, data, q, v, a), pin.aba(model, data, q, v, a), m.reshape(-1),
         pin.nonLinearEffects(model, data, q, v), pin.computeGeneralizedGravity(model, data, q),
         pin.centerOfMass(model, data, q), pin.jacobianCenterOfMass(model, data, q).reshape(-1),
         np.array([pin.computeKineticEnergy(model, data, q, v)]),
         np.array([pin.computePotentialEnergy(model, data, q)])]  # fmt: skip
  pin.forwardKinematics(model, data, q, v)
  pin.updateFramePlacements(model, data)
  for _, fid in frames:
    out += [data.oMf[fid].rotation.reshape(-1), data.oMf[fid].translation]
    for ref in REFERENCES.values():
      out += [pin.computeFrameJacobian(model, data, q, fid, ref).reshape(6 * nv),
              pin.getFrameVelocity(model, data, fid, ref).vector]  # fmt: skip
  return out


@pytest.mark.parametrize("name", CHECKED)
def test_algorithms_equal_pinocchio(name: str) -> None:
  robot, model = pair(name)
  assert (robot.nq, robot.nv) == (model.nq, model.nv)
  assert robot.joint_names == tuple(model.names)[1:]
  frames = checked_frames(robot, model)
  fn = everything(robot, frames)
  rng = np.random.default_rng(7)
  for _ in range(STATES):
    q = robot.random_configuration(rng)
    v, a = rng.standard_normal(robot.nv), rng.standard_normal(robot.nv)
    for got, want in zip(fn(q, v, a), reference(model, frames, q, v, a), strict=True):
      close(got, want)


def _on_tangent(robot: Robot, what: str) -> av.NumericalFunction[..., Any]:
  """rnea or aba of (z, q) at z = (dq, v, x): at integrate(q, dq), so its Jacobian in z at dq = 0 holds Pinocchio's
  derivatives in the tangent space, [∂/∂q ∂/∂v ∂/∂x]."""
  nv = robot.nv
  algorithm = robot.rnea if what == "rnea" else robot.aba
  return av.NumericalFunction(f"{robot.identifier}_{what}_tangent",
                              lambda z, q: algorithm(robot.integrate(q, z[:nv]), z[nv : 2 * nv], z[2 * nv :]),
                              (av.Arg(3 * nv), av.Arg(robot.nq)))  # fmt: skip


@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.parametrize("what", ["rnea", "aba"])
def test_derivatives_equal_pinocchio(name: str, what: str) -> None:
  robot, model = pair(name)
  derivative = jacobian(_on_tangent(robot, what))
  data = model.createData()
  rng = np.random.default_rng(11)
  nv = robot.nv
  for _ in range(5):
    q = robot.random_configuration(rng)
    v, x = rng.standard_normal(nv), rng.standard_normal(nv)
    derivatives = pin.computeRNEADerivatives if what == "rnea" else pin.computeABADerivatives
    want = [np.array(d) for d in derivatives(model, data, q, v, x)]
    if what == "rnea":
      want[2] = np.triu(want[2]) + np.triu(want[2], 1).T  # ∂τ/∂a = M, upper triangle filled
    close(derivative(np.concatenate([np.zeros(nv), v, x]), q), np.hstack(want), rtol=1e-8)


@pytest.mark.parametrize("name", ["solo12", "double_pendulum"])
def test_integrate_and_difference_equal_pinocchio(name: str) -> None:
  robot, model = pair(name)
  nq, nv = robot.nq, robot.nv
  fn = av.NumericalFunction(f"{name}_manifold", lambda q0, q1, v: (robot.integrate(q0, v), robot.difference(q0, q1)),
                            (av.Arg(nq), av.Arg(nq), av.Arg(nv)))  # fmt: skip
  rng = np.random.default_rng(3)
  for k in range(STATES):
    q0, q1 = robot.random_configuration(rng), robot.random_configuration(rng)
    v = rng.standard_normal(nv) * (1e-5 if k % 5 == 0 else 1.0)  # small angles: the Taylor branches
    if k % 7 == 0:
      q1 = pin.integrate(model, q0, v)  # nearby configurations: a small relative rotation
    integrated, difference = fn(q0, q1, v)
    close(integrated, pin.integrate(model, q0, v))
    close(difference, pin.difference(model, q0, q1))


def test_external_wrenches_equal_pinocchio() -> None:
  robot, model = pair("solo12")
  feet = ["FL_FOOT", "HR_FOOT"]
  nq, nv = robot.nq, robot.nv
  fn = av.NumericalFunction(
    "solo12_contacts",
    lambda q, v, a, f0, f1: (robot.rnea(q, v, a, {feet[0]: f0, feet[1]: f1}, "local_world_aligned"),
                             robot.aba(q, v, a, {feet[0]: f0, feet[1]: f1}, "local"),
                             robot.rnea(q, v, a, {feet[0]: f0, feet[1]: f1}, "world")),
    (av.Arg(nq), av.Arg(nv), av.Arg(nv), av.Arg(6), av.Arg(6)))  # fmt: skip
  data = model.createData()
  rng = np.random.default_rng(5)
  for _ in range(10):
    q = robot.random_configuration(rng)
    v, a, f0, f1 = (rng.standard_normal(n) for n in (nv, nv, 6, 6))
    pin.framesForwardKinematics(model, data, q)
    world_aligned, local, world = ([pin.Force.Zero() for _ in model.joints] for _ in range(3))
    for frame, wrench in zip(feet, (f0, f1), strict=True):
      fr = model.frames[model.getFrameId(frame)]
      placement = data.oMf[model.getFrameId(frame)]
      local_wrench = pin.Force(placement.rotation.T @ wrench[:3], placement.rotation.T @ wrench[3:])
      world_aligned[fr.parentJoint] += fr.placement.act(local_wrench)
      local[fr.parentJoint] += fr.placement.act(pin.Force(wrench[:3], wrench[3:]))
      world[fr.parentJoint] += fr.placement.act(placement.actInv(pin.Force(wrench[:3], wrench[3:])))
    tau, ddq, tau_world = fn(q, v, a, f0, f1)
    close(tau, pin.rnea(model, data, q, v, a, world_aligned))
    close(ddq, pin.aba(model, data, q, v, a, local))
    close(tau_world, pin.rnea(model, data, q, v, a, world))


def test_numpy_calls_build_once_and_check_their_inputs() -> None:
  robot, model = pair("double_pendulum")
  q, v = robot.neutral(), np.array([0.3, -0.2])
  before = len(robot._built)  # NOTE: the robot is shared: other tests' Tensor calls may have built its aba
  close(robot.aba(q, v, np.zeros(2)), pin.aba(model, model.createData(), q, v, np.zeros(2)))
  built = len(robot._built)
  assert built <= before + 1
  robot.aba(q, v, np.ones(2))
  assert len(robot._built) == built
  with pytest.raises(ValueError, match=r"tau must have shape \(2,\)"):
    robot.aba(q, v, np.zeros(3))
  with pytest.raises(ValueError, match="q holds NaN"):
    robot.aba(np.full(robot.nq, np.nan), v, v)
  with pytest.raises(ValueError, match="no frame named 'tip'"):
    robot.frame_placement(q, "tip")
  with pytest.raises(ValueError, match="reference"):
    robot.frame_jacobian(q, "link2", "global")


def _counting_aba(monkeypatch: pytest.MonkeyPatch) -> list[int]:
  """Counts the runs of the forward-dynamics algorithm's Python (robot.aba's body)."""
  import anvil.robots.algorithms as rb

  calls: list[int] = []
  original = rb.forward_dynamics
  monkeypatch.setattr(rb, "forward_dynamics", lambda *a: calls.append(1) or original(*a))
  return calls


def _aba_twice(robot: Robot, name: str) -> av.NumericalFunction[..., Any]:
  """aba at (q, v, tau) and at (q, 2 v, tau): two calls of the algorithm in one trace."""
  nq, nv = robot.nq, robot.nv
  twice = lambda q_, v_, t_: robot.aba(q_, v_, t_).cat(robot.aba(q_, 2 * v_, t_))
  return av.NumericalFunction(name, twice, (av.Arg(nq), av.Arg(nv), av.Arg(nv)))


def test_tensor_calls_run_an_algorithm_once_per_robot(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
  """Inside traces, an algorithm's Python runs once per robot's data: later calls (other arguments, other functions,
  another Robot of the same URDF, as in a new process) replay its graph, stored in the cache, with their arguments,
  and compute what fresh calls compute."""
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(tmp_path))
  calls = _counting_aba(monkeypatch)
  robot, model = anvil_robot("double_pendulum"), pinocchio_model("double_pendulum")
  nq, nv = robot.nq, robot.nv
  q = robot.random_configuration(np.random.default_rng(3))
  v, tau = np.array([0.3, -0.2]), np.array([0.5, 1.5])
  other = av.NumericalFunction("pendulum_aba_again", lambda x: robot.aba(x[:nq], x[nq : nq + nv], x[nq + nv :]),
                               av.Arg(nq + 2 * nv))  # fmt: skip
  values, again = _aba_twice(robot, "pendulum_aba_twice")(q, v, tau), other(np.concatenate([q, v, tau]))
  assert len(calls) == 1
  data = model.createData()
  close(values, np.concatenate([pin.aba(model, data, q, v, tau), pin.aba(model, data, q, 2 * v, tau)]))
  close(again, values[:2])
  close(_aba_twice(anvil_robot("double_pendulum"), "pendulum_aba_twice")(q, v, tau), values)
  assert len(calls) == 1, "another Robot of the same URDF replays the stored graph"


def test_stored_graphs_that_do_not_load_are_traced_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
  """A stored robot graph that is damaged, or names a class that is not tinygrad's, is not used: the algorithm is
  traced again (and its values are right); a robot with other data never takes another's graph."""
  import collections
  import pickle

  from anvil.codegen.cache import write_atomic

  monkeypatch.setenv("ANVIL_CACHE_DIR", str(tmp_path))
  calls = _counting_aba(monkeypatch)
  robot, model = anvil_robot("double_pendulum"), pinocchio_model("double_pendulum")
  q = robot.random_configuration(np.random.default_rng(4))
  v, tau = np.array([-0.4, 0.1]), np.array([1.0, -0.5])
  expected = _aba_twice(robot, "pendulum_aba_stored")(q, v, tau)
  [stored] = (tmp_path / "robots").glob("*.pkl")

  class Touch:  # NOTE: unpickled by an unrestricted unpickler, it would create the file
    def __reduce__(self) -> tuple[Any, ...]:
      return (Path.touch, (tmp_path / "touched",))

  for damage in (b"not a pickle", pickle.dumps(((collections.OrderedDict(),), (), False)), pickle.dumps(Touch())):
    write_atomic(stored, damage)
    close(_aba_twice(anvil_robot("double_pendulum"), "pendulum_aba_stored")(q, v, tau), expected)
  assert len(calls) == 4
  assert not (tmp_path / "touched").exists()
  heavier = Robot(robot.name, robot.joints, robot.frames, gravity=np.array([0.0, 0.0, -20.0]))
  model.gravity.linear = np.array([0.0, 0.0, -20.0])
  data = model.createData()
  reference = np.concatenate([pin.aba(model, data, q, v, tau), pin.aba(model, data, q, 2 * v, tau)])
  close(_aba_twice(heavier, "pendulum_aba_heavier")(q, v, tau), reference)
  assert len(calls) == 5


def test_forward_dynamics_adds_damping_and_friction_to_aba() -> None:
  robot, model = pair("panda")
  data = model.createData()
  nq, nv = robot.nq, robot.nv
  fn = av.NumericalFunction("panda_dynamics", lambda x, u: (robot.forward_dynamics(x, u), robot.ode(x, u)),
                            (av.Arg(robot.nx), av.Arg(robot.nu)))  # fmt: skip
  damping = np.concatenate([j.damping for j in robot.joints])
  friction = np.concatenate([j.friction for j in robot.joints])
  assert damping.any()
  rng = np.random.default_rng(2)
  for _ in range(10):
    q, v, u = robot.random_configuration(rng), rng.standard_normal(nv), rng.standard_normal(nv)
    losses = damping * v + friction * np.tanh(v / robot.friction_velocity)
    ddq, xdot = fn(np.concatenate([q, v]), u)
    close(ddq, pin.aba(model, data, q, v, u - losses))
    close(xdot, np.concatenate([v, ddq]))
  assert (nq, robot.nu) == (7, 7)


def test_free_flyer_ode_and_bounds() -> None:
  robot, model = pair("solo12")
  assert robot.nu == robot.nv - 6 and robot.actuated == tuple(range(6, robot.nv))
  fn = av.NumericalFunction("solo12_ode", robot.ode, (av.Arg(robot.nx), av.Arg(robot.nu)))
  rng = np.random.default_rng(9)
  q, v, u = robot.random_configuration(rng), rng.standard_normal(robot.nv), rng.standard_normal(robot.nu)
  xdot = fn(np.concatenate([q, v]), u)
  h = 1e-6  # the configuration rate is the derivative of integrate along v
  rate = (pin.integrate(model, q, v * h) - pin.integrate(model, q, -v * h)) / (2 * h)
  close(xdot[: robot.nq], rate, rtol=1e-8)
  close(xdot[robot.nq :], pin.aba(model, model.createData(), q, v, np.concatenate([np.zeros(6), u])))
  bounds = robot.bounds()
  (lbx, ubx), (lbu, ubu) = bounds["x_bounds"], bounds["u_bounds"]
  assert lbx.shape == ubx.shape == (robot.nx,) and lbu.shape == (robot.nu,)
  np.testing.assert_array_equal(ubu, model.effortLimit[6:])
  np.testing.assert_array_equal(ubx[robot.nq + 6 :], model.velocityLimit[6:])
  np.testing.assert_array_equal(lbx[7 : robot.nq], model.lowerPositionLimit[7:])


def test_mpc_on_a_urdf_arm_in_closed_loop_with_pinocchio_as_plant() -> None:
  """robot.ode through rk4 and robot.bounds() into an exact-Hessian MPCFunction: every solve converges and the arm
  reaches the target posture, simulated by Pinocchio's ABA."""
  from anvil.mpc import simulate

  robot, model = pair("ur5")
  data = model.createData()
  nq, nv, dt = robot.nq, robot.nv, 0.02
  mpc, target = posture_mpc(robot, "ur5", dt)

  def plant(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    q, v = x[:nq], x[nq:]
    for _ in range(10):  # semi-implicit Euler on the manifold, 10 substeps
      v = v + dt / 10 * pin.aba(model, data, q, v, u)
      q = pin.integrate(model, q, v * dt / 10)
    return np.concatenate([q, v])

  loop = simulate(mpc, plant, np.concatenate([robot.neutral(), np.zeros(nv)]), 40)
  check_reached_posture(robot, loop, target)


@pytest.mark.parametrize("floating_base", [False, True])
def test_second_derivatives_of_the_dynamics_are_exact(floating_base: bool) -> None:
  """The Hessian of μᵀ ABA through the analytical form (the value ABA's, the derivative M⁻¹(∂τ - ∂RNEA)) equals the
  Hessian of the plain articulated-body algorithm's graph: exact Hessians of robot models stay exact."""
  from anvil.ad import hessian
  from anvil.robots.algorithms import aba

  robot = Robot.from_urdf(SMALL_URDF, floating_base=floating_base)
  nq, nv = robot.nq, robot.nv
  size = nq + 2 * nv

  def weighted(dynamics: Any) -> Any:
    return lambda z, mu: (dynamics(z[:nq], z[nq : nq + nv], [z[nq + nv + k] for k in range(nv)]) * mu).sum()

  analytical = weighted(lambda q, v, tau: robot.aba(q, v, Tensor.stack(*tau)))
  plain = weighted(lambda q, v, tau: Tensor.stack(*aba(robot.joints, robot.gravity, q, v, tau)))
  inputs = (av.Arg(size), av.Arg(nv))
  name = f"small_{'floating' if floating_base else 'fixed'}"
  h_analytical = hessian(av.NumericalFunction(f"{name}_analytical", analytical, inputs))
  h_plain = hessian(av.NumericalFunction(f"{name}_plain", plain, inputs))
  rng = np.random.default_rng(8)
  for _ in range(3):
    z = np.concatenate([robot.random_configuration(rng), rng.standard_normal(2 * nv)])
    mu = rng.standard_normal(nv)
    close(h_analytical(z, mu), h_plain(z, mu), rtol=1e-9)


@pytest.mark.parametrize("name", ["panda", "solo12"])
def test_frame_placement_error_equals_crocoddyls_residual(name: str) -> None:
  """log6(target⁻¹ · placement) equals Pinocchio's log6 at random states and targets (all angles up to 3 rad), and its
  Jacobian in the tangent space equals Jlog6 · the frame's local Jacobian (crocoddyl's ResidualModelFramePlacement)."""
  robot, model = pair(name)
  data, rng = model.createData(), np.random.default_rng(21)
  frame = robot.frames[-1].name
  fid = model.getFrameId(frame)
  nv = robot.nv
  error = av.NumericalFunction(f"{robot.identifier}_placement_error",
                               lambda dq, q, r, p: robot.frame_placement_error(robot.integrate(q, dq), frame, r, p),
                               (av.Arg(nv), av.Arg(robot.nq), av.Arg((3, 3)), av.Arg(3)))  # fmt: skip
  derivative = jacobian(error)
  for k in range(10):
    q = robot.random_configuration(rng)
    target = pin.SE3(pin.exp3(rng.standard_normal(3) * (0.3 * k) / 3**0.5), rng.standard_normal(3))
    pin.computeJointJacobians(model, data, q)
    pin.framesForwardKinematics(model, data, q)
    relative = target.inverse() * data.oMf[fid]
    close(robot.frame_placement_error(q, frame, target.rotation, target.translation), pin.log6(relative).vector)
    expected = pin.Jlog6(relative) @ pin.getFrameJacobian(model, data, fid, pin.LOCAL)
    close(derivative(np.zeros(nv), q, target.rotation, target.translation), expected, rtol=1e-9)


@pytest.mark.parametrize("name", ["solo12", "double_pendulum", "panda"])
def test_configuration_rate_is_the_derivative_of_pinocchios_integrate(name: str) -> None:
  """q̇ = d/dt integrate(q, t v) at t = 0: central differences of Pinocchio's integrate (a free flyer's screw motion,
  a continuous joint's rotation) match to their truncation error."""
  robot, model = pair(name)
  rng = np.random.default_rng(8)
  for _ in range(10):
    q, v, eps = robot.random_configuration(rng), rng.standard_normal(robot.nv), 1e-5
    want = (pin.integrate(model, q, eps * v) - pin.integrate(model, q, -eps * v)) / (2 * eps)
    close(robot.configuration_rate(q, v), want, rtol=1e-8)
