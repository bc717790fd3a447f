"""`Robot`: a URDF's rigid-body model, its algorithms on Tensors, and the same algorithms on numpy arrays.

Every algorithm method takes Tensors inside a traced function (an `NumericalFunction`, an MPC's ODE, a cost) and
returns Tensors; called with numpy arrays instead, it builds (once, then cached on the robot) a NumericalFunction of
that algorithm and returns numpy arrays, as Pinocchio's Python API does.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.trace import default_float, replay
from anvil.robots import algorithms as rb
from anvil.robots import configuration as cfg
from anvil.robots import spatial as sp
from anvil.robots.model import Frame, FrameType, Joint, JointType
from anvil.robots.spatial import Force, Motion, Transform, V, scale, sub
from anvil.robots.stored import StoredGraph, robot_fingerprint, stored_graph
from anvil.robots.urdf import LockedJoints, UrdfSource, load_urdf

Reference = Literal["local", "world", "local_world_aligned"]
#: Pinocchio's reference frames, by their names here.
REFERENCES = ("local", "world", "local_world_aligned")
Array = NDArray[np.float64]
Wrenches = Mapping[str, Any]


@dataclass(frozen=True, eq=False)
class Robot:
  """A rigid-body tree, made from a URDF by `Robot.from_urdf`.

  Its algorithms (`rnea`, `aba`, `crba`, `frame_placement`, `frame_jacobian`, `center_of_mass`, ...) run on Tensors
  inside any traced function, where they become straight-line C++ with the robot's constants folded in and are
  differentiated by `anvil.ad`; on numpy arrays they build and call a NumericalFunction. Conventions are Pinocchio's:
  q has `nq` entries (a free flyer's position and quaternion x, y, z, w; a continuous joint's cos and sin), v and
  accelerations `nv`; spatial vectors are (linear, angular).

  Attributes:
    name: the URDF robot's name.
    joints: the movable joints in topological order (a free flyer first, named "root_joint").
    frames: every named frame: the world ("universe"), joints, fixed joints and links (bodies).
    gravity: the gravity vector in the world (Pinocchio's default (0, 0, -9.81)).
    friction_velocity: the velocity (rad/s or m/s) over which `forward_dynamics` smooths Coulomb friction
      (friction · tanh(v / friction_velocity)).

  Example:
    >>> robot = Robot.from_urdf("panda.urdf", locked_joints=["panda_finger_joint1", "panda_finger_joint2"])
    >>> ddq = robot.aba(robot.neutral(), np.zeros(robot.nv), np.zeros(robot.nv))   # numpy in, numpy out
    >>> F = av.mpc.rk4("panda_F", robot.ode, 0.01, nx=robot.nx, nu=robot.nu)          # Tensors in a traced model
  """

  name: str
  joints: tuple[Joint, ...]
  frames: tuple[Frame, ...]
  gravity: Array = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
  friction_velocity: float = 1e-2
  _built: dict[Any, NumericalFunction[..., Any]] = field(default_factory=dict, repr=False)
  _graphs: dict[Any, StoredGraph] = field(default_factory=dict, repr=False)

  @staticmethod
  def from_urdf(
    path_or_xml: UrdfSource, *, floating_base: bool = False, package_dirs: Sequence[str | Path] | None = None,
    locked_joints: LockedJoints | None = None,
  ) -> Robot:  # fmt: skip
    """The robot a URDF describes.

    Args:
      path_or_xml: a URDF file's path, or its XML text.
      floating_base: give the root link a free-flyer joint (q: position and quaternion x, y, z, w; v: linear and
        angular velocity in the base's frame), else it is welded to the world.
      package_dirs: folders `package://` URIs resolve against; checked to exist. Only meshes use them, and meshes are
        never loaded.
      locked_joints: joints frozen into fixed ones: names (locked at 0) or {name: position}.

    Raises:
      ValueError (URDFError): a file that is not URDF, an unsupported joint (floating, planar, mimic), a link whose
        inertia is not positive semi-definite, a locked joint that does not exist.
    """
    tree = load_urdf(path_or_xml, floating_base=floating_base, package_dirs=package_dirs, locked_joints=locked_joints)
    return Robot(tree.name, tree.joints, tree.frames)

  # --- sizes, names, limits ---------------------------------------------------------------------------------------

  @cached_property
  def nq(self) -> int:
    """The configuration's size."""
    return sum(j.nq for j in self.joints)

  @cached_property
  def nv(self) -> int:
    """The velocity's size."""
    return sum(j.nv for j in self.joints)

  @property
  def nx(self) -> int:
    """The state's size: x = (q, v)."""
    return self.nq + self.nv

  @cached_property
  def nu(self) -> int:
    """The number of actuated velocity coordinates (all but a free flyer's)."""
    return len(self.actuated)

  @cached_property
  def actuated(self) -> tuple[int, ...]:
    """The velocity coordinates torques act on (a free flyer's are not)."""
    return tuple(j.idx_v + k for j in self.joints if j.type is not JointType.FREE_FLYER for k in range(j.nv))

  @cached_property
  def identifier(self) -> str:
    """The robot's name made a C++ identifier (the prefix of the functions it builds)."""
    return _identifier(self.name)

  @property
  def joint_names(self) -> tuple[str, ...]:
    """The movable joints' names, in the order of q and v."""
    return tuple(j.name for j in self.joints)

  @property
  def frame_names(self) -> tuple[str, ...]:
    """Every frame's name."""
    return tuple(f.name for f in self.frames)

  @property
  def mass(self) -> float:
    """The total mass."""
    return float(sum(j.inertia.mass for j in self.joints))

  def frame(self, frame: str | int) -> Frame:
    """The frame of a name (a link's body frame first, then a joint's) or an index into `frames`."""
    if isinstance(frame, (int, np.integer)) and not isinstance(frame, bool):
      if not 0 <= frame < len(self.frames):
        raise ValueError(f"frame: index {frame} is not in [0, {len(self.frames)})")
      return self.frames[frame]
    if not isinstance(frame, str):
      raise TypeError(f"frame: expected a frame name or index, got {type(frame).__name__}")
    found = [f for f in self.frames if f.name == frame]
    if not found:
      close = difflib.get_close_matches(frame, self.frame_names, n=5, cutoff=0.3) or list(self.frame_names[:10])
      raise ValueError(f"frame: {self.name} has no frame named {frame!r} (did you mean one of {close}?)")
    return next((f for f in found if f.type is FrameType.BODY), found[0])

  def neutral(self) -> Array:
    """The neutral configuration: zeros, identity quaternions, continuous joints at angle 0."""
    return cfg.neutral(self.joints)

  def random_configuration(self, rng: np.random.Generator | int | None = None) -> Array:
    """A configuration drawn uniformly within the position limits (a free flyer's position in [-1, 1]³ and a
    uniformly random orientation; unbounded joints in [-π, π])."""
    return cfg.random(self.joints, np.random.default_rng(rng))

  def bounds(self) -> dict[str, tuple[Array, Array]]:
    """The URDF's limits as an MPCFunction's bounds: {"x_bounds": (lower, upper) of x = (q, v), "u_bounds": (lower,
    upper) of the actuated torques}, ±inf where the URDF gives none: `MPCFunction(..., **robot.bounds())`."""
    lower_q = np.concatenate([j.lower for j in self.joints]) if self.joints else np.zeros(0)
    upper_q = np.concatenate([j.upper for j in self.joints]) if self.joints else np.zeros(0)
    velocity = np.concatenate([j.velocity for j in self.joints]) if self.joints else np.zeros(0)
    effort = np.concatenate([j.effort for j in self.joints])[list(self.actuated)] if self.joints else np.zeros(0)
    return {"x_bounds": (np.concatenate([lower_q, -velocity]), np.concatenate([upper_q, velocity])),
            "u_bounds": (-effort, effort)}  # fmt: skip

  # --- algorithms ---------------------------------------------------------------------------------------------------

  def rnea(self, q: Any, v: Any, a: Any, fext: Wrenches | None = None, reference: Reference = "local") -> Any:
    """Inverse dynamics: τ = M(q) a + C(q, v) v + g(q) - Σ Jᵀ fext (Pinocchio's rnea).

    Args:
      q: the configuration (nq).
      v: the velocity (nv).
      a: the acceleration (nv).
      fext: external wrenches {frame name: (force, torque) (6,)} acting on each frame's body, in `reference`
        coordinates: "local" (the frame's axes, the torque about its origin), "local_world_aligned" (the world's
        axes, the torque about the frame's origin) or "world" (the world's axes, the torque about its origin).
    """
    return self._run("rnea", (q, v, a), fext, reference, lambda q_, v_, a_, w: self._rnea(q_, v_, a_, w))

  def _rnea(self, q: Tensor, v: Tensor | None, a: Tensor | None, fext: rb.Wrenches | None) -> Tensor:
    return _stack(rb.rnea(self.joints, self.gravity, q, v, a, fext), like=q)

  def nonlinear_effects(self, q: Any, v: Any) -> Any:
    """C(q, v) v + g(q) (Pinocchio's nonLinearEffects)."""
    return self._run("nonlinear_effects", (q, v), None, "local", lambda q_, v_, _: self._rnea(q_, v_, None, None))

  def generalized_gravity(self, q: Any) -> Any:
    """g(q) (Pinocchio's computeGeneralizedGravity)."""
    return self._run("generalized_gravity", (q,), None, "local", lambda q_, _: self._rnea(q_, None, None, None))

  def crba(self, q: Any) -> Any:
    """The joint-space inertia matrix M(q), both triangles (Pinocchio's crba fills the upper one)."""

    def body(q_: Tensor, _: object) -> Tensor:
      rows = rb.crba(self.joints, q_)
      return _stack([x for row in rows for x in row], like=q_).reshape(self.nv, self.nv)

    return self._run("crba", (q,), None, "local", body)

  def aba(self, q: Any, v: Any, tau: Any, fext: Wrenches | None = None, reference: Reference = "local") -> Any:
    """Forward dynamics: the acceleration M(q)⁻¹ (τ - C(q, v) v - g(q) + Σ Jᵀ fext), by the articulated-body
    algorithm (Pinocchio's aba; no joint damping or friction: see `forward_dynamics`). fext as for `rnea`."""

    def body(q_: Tensor, v_: Tensor, tau_: Tensor, w: rb.Wrenches | None) -> Tensor:
      tau = [tau_[k] for k in range(self.nv)]
      return _stack(rb.forward_dynamics(self.joints, self.gravity, q_, v_, tau, w), like=q_)

    return self._run("aba", (q, v, tau), fext, reference, body)

  def forward_dynamics(self, x: Any, u: Any, fext: Wrenches | None = None, reference: Reference = "local") -> Any:
    """The acceleration of the robot at state x = (q, v) under actuated torques u (nu: every joint but a free
    flyer's), with the URDF's joint damping (-damping · v) and Coulomb friction (-friction · tanh(v /
    friction_velocity)); fext as for `rnea` (contact forces at named frames make a kinodynamic model)."""

    def body(x_: Tensor, u_: Tensor, w: rb.Wrenches | None) -> Tensor:
      q_, v_ = x_[: self.nq], x_[self.nq :]
      return _stack(rb.forward_dynamics(self.joints, self.gravity, q_, v_, self._torques(u_, v_), w), like=x_)

    return self._run("forward_dynamics", (x, u), fext, reference, body)

  def ode(self, x: Any, u: Any, fext: Wrenches | None = None, reference: Reference = "local") -> Any:
    """ẋ = (q̇, v̇) at x = (q, v) under torques u: q̇ is v mapped to the configuration's coordinates (a quaternion's
    derivative ½ quat ⊗ ω, a continuous joint's (-sin, cos) ω), v̇ is `forward_dynamics`. The model an MPC's
    integrator takes: `rk4("F", robot.ode, dt, nx=robot.nx, nu=robot.nu)`."""

    def body(x_: Tensor, u_: Tensor, w: rb.Wrenches | None) -> Tensor:
      q_, v_ = x_[: self.nq], x_[self.nq :]
      vdot = _stack(rb.forward_dynamics(self.joints, self.gravity, q_, v_, self._torques(u_, v_), w), like=x_)
      return self.configuration_rate(q_, v_).cat(vdot)

    return self._run("ode", (x, u), fext, reference, body)

  def _torques(self, u: Tensor, v: Tensor) -> list[V]:
    """The generalized forces of actuated torques u, less damping and smoothed Coulomb friction."""
    tau: list[V] = [np.zeros(()) for _ in range(self.nv)]
    for k, index in enumerate(self.actuated):
      tau[index] = u[k]
    for j in self.joints:
      for k in range(j.nv):
        index, damping, friction = j.idx_v + k, float(j.damping[k]), float(j.friction[k])
        if damping:
          tau[index] = sub(tau[index], scale(damping, v[index]))
        if friction:
          tau[index] = sub(tau[index], scale(friction, (v[index] * (1.0 / self.friction_velocity)).tanh()))
    return tau

  def frame_placement(self, q: Any, frame: str | int) -> tuple[Any, Any]:
    """The frame's placement in the world: (rotation (3, 3), translation (3,))."""
    f = self.frame(frame)

    def body(q_: Tensor, _: object) -> tuple[Tensor, Tensor]:
      x = self._frame_transform(q_, f)
      return _tensor(x.rotation, q_), _tensor(x.translation, q_)

    return self._run(f"placement_{self.frames.index(f)}", (q,), None, "local", body)

  def frame_placement_error(self, q: Any, frame: str | int, rotation: Any, translation: Any) -> Any:
    """The frame's placement error to a target (rotation (3, 3), translation (3,) in the world): the twist (linear,
    angular) log6(target⁻¹ · placement), crocoddyl's `ResidualModelFramePlacement` (SE(3)'s logarithm, exact: not a
    position error beside an orientation approximation). The target may be Tensors (a per-stage reference)."""
    f = self.frame(frame)
    flat = rotation.reshape(9) if isinstance(rotation, Tensor) else np.asarray(rotation, dtype=np.float64).reshape(-1)

    def body(q_: Tensor, r: Tensor, p: Tensor, _: object) -> Tensor:
      x = self._frame_transform(q_, f)
      target = r.reshape(3, 3)
      relative = (target.reshape(3, 3, 1) * _tensor(x.rotation, q_).reshape(3, 1, 3)).sum(0)  # targetᵀ R
      offset = ((_tensor(x.translation, q_) - p).reshape(3, 1) * target).sum(0)  # targetᵀ (p - p_target)
      return cfg.log6(relative, offset)

    return self._run(f"error_{self.frames.index(f)}", (q, flat, translation), None, "local", body)

  def _frame_transform(self, q: Tensor, f: Frame) -> Transform:
    return _placed(rb.placements(self.joints, q), f)

  def frame_jacobian(self, q: Any, frame: str | int, reference: Reference = "local") -> Any:
    """The frame's Jacobian (6, nv): its spatial velocity (linear, angular) is J v. `reference` as Pinocchio's:
    "local" (the frame's own axes, Pinocchio's default), "local_world_aligned" (the frame origin's velocity in the
    world's axes) or "world" (the velocity of the point at the world's origin)."""
    f, ref = self.frame(frame), _reference(reference)

    def body(q_: Tensor, _: object) -> Tensor:
      xs = rb.placements(self.joints, q_)
      columns = rb.world_columns(self.joints, xs)
      placed = _placed(xs, f)
      moving = set(rb.support(self.joints, f.joint)) if f.joint >= 0 else set()
      zero = Motion(np.zeros(3), np.zeros(3))
      cols = [_expressed(c, placed, ref) if k in moving else zero for k, c in enumerate(columns)]
      rows = [sp.scalars(c.linear) + sp.scalars(c.angular) for c in cols]
      return _stack([row[k] for k in range(6) for row in rows], like=q_).reshape(6, self.nv)

    return self._run(f"jacobian_{self.frames.index(f)}_{ref}", (q,), None, "local", body)

  def frame_velocity(self, q: Any, v: Any, frame: str | int, reference: Reference = "local") -> Any:
    """The frame's spatial velocity (linear, angular) (6,) in `reference` coordinates (as `frame_jacobian`)."""
    f, ref = self.frame(frame), _reference(reference)

    def body(q_: Tensor, v_: Tensor, _: object) -> Tensor:
      if f.joint < 0:
        return _tensor(np.zeros(6), q_)
      local = rb.local_transforms(self.joints, q_)
      xs = rb.placements(self.joints, q_, local)
      moving, _ = rb.velocities(self.joints, local, v_)
      world = moving[f.joint].to_parent(xs[f.joint])
      motion = _expressed(world, _placed(xs, f), ref)
      return _tensor(motion.linear, q_).cat(_tensor(motion.angular, q_))

    return self._run(f"velocity_{self.frames.index(f)}_{ref}", (q, v), None, "local", body)

  def center_of_mass(self, q: Any) -> Any:
    """The centre of mass in the world (3,)."""
    return self._run("center_of_mass", (q,), None, "local",
                     lambda q_, _: _tensor(rb.center_of_mass(self.joints, q_)[0], q_))  # fmt: skip

  def center_of_mass_jacobian(self, q: Any) -> Any:
    """The Jacobian (3, nv) of the centre of mass in the world."""

    def body(q_: Tensor, _: object) -> Tensor:
      return _stack([x for row in rb.com_jacobian(self.joints, q_) for x in row], like=q_).reshape(3, self.nv)

    return self._run("com_jacobian", (q,), None, "local", body)

  def kinetic_energy(self, q: Any, v: Any) -> Any:
    """½ vᵀ M(q) v."""
    return self._run("kinetic_energy", (q, v), None, "local",
                     lambda q_, v_, _: _tensor(rb.kinetic_energy(self.joints, q_, v_), q_))  # fmt: skip

  def potential_energy(self, q: Any) -> Any:
    """-m gᵀ c(q): the potential energy of gravity, zero with the centre of mass at the world's origin."""
    return self._run("potential_energy", (q,), None, "local",
                     lambda q_, _: _tensor(rb.potential_energy(self.joints, self.gravity, q_), q_))  # fmt: skip

  def integrate(self, q: Any, v: Any, dt: float = 1.0) -> Any:
    """The configuration reached from q moving at velocity v for dt, on the configuration manifold (Pinocchio's
    integrate(q, v·dt): a free flyer moves along the screw of its local twist)."""
    dt = _finite(dt, "dt")
    return self._run(f"integrate_{dt!r}", (q, v), None, "local",
                     lambda q_, v_, _: cfg.integrate(self.joints, q_, v_ * dt))  # fmt: skip

  def configuration_rate(self, q: Any, v: Any) -> Any:
    """q̇ (nq) of the configuration q moving at velocity v: a free flyer's position rate R v_lin and its quaternion's
    ½ quat ⊗ ω, a continuous joint's (-sin, cos) ω, v itself elsewhere. `ode` starts with it; at v + h a it makes
    crocoddyl's semi-implicit Euler step with `anvil.mpc.euler`."""
    return self._run("configuration_rate", (q, v), None, "local",
                     lambda q_, v_, _: cfg.velocity_in_configuration(self.joints, q_, v_))  # fmt: skip

  def difference(self, q0: Any, q1: Any) -> Any:
    """The velocity v (nv) with integrate(q0, v) = q1 (Pinocchio's difference)."""
    return self._run("difference", (q0, q1), None, "local", lambda a, b, _: cfg.difference(self.joints, a, b))

  # --- Tensors in, Tensors out; numpy in, a built function's numpy out ---------------------------------------------

  def _run(self, what: str, args: tuple[Any, ...], fext: Wrenches | None, reference: Reference,
           body: Callable[..., Any]) -> Any:  # fmt: skip
    """The algorithm `what` on args: on Tensors, its graph (traced once per robot, then replayed with the arguments
    substituted: a model that calls it many times, in its rate, costs and their derivatives, runs its Python once);
    on arrays, its built function's values."""
    shapes = [self._size(s) for s in _SIZES[what.split("_")[0]]]
    ref = _reference(reference)
    names = tuple(fext) if fext else ()
    function = self._function(what, names, ref, shapes, body)
    if any(isinstance(a, Tensor) for a in args) or any(isinstance(w, Tensor) for w in (fext or {}).values()):
      ts = [_as_tensor(a, n, f"{self.name}.{what}") for a, n in zip(args, shapes, strict=True)]
      ts += [_as_tensor(fext[n], 6, f"fext[{n!r}]") for n in names]  # type: ignore[index]
      return self._replayed(function, (what, names, ref), ts)
    values = [_as_array(a, n, f"{self.name}.{what}", name) for a, n, name in
              zip(args, shapes, _ARG_NAMES.get(what.split("_")[0], ("q", "v", "a")), strict=False)]  # fmt: skip
    values += [_as_array(fext[n], 6, f"{self.name}.{what}", f"fext[{n!r}]") for n in names]  # type: ignore[index]
    return function(*values)

  def _replayed(self, function: NumericalFunction[..., Any], key: tuple[Any, ...], ts: list[Tensor]) -> Any:
    """`function` (this robot's algorithm `key`) on Tensors: its graph, stored in anvil's cache (traced on first
    use), with the arguments substituted; its Python run where the graph does not apply (another default float)."""
    if key not in self._graphs:
      self._graphs[key] = stored_graph(function, self._fingerprint, repr(key))
    replayed = replay(self._graphs[key], ts, default_float(function.inputs))
    return replayed if replayed is not None else function.fn(*ts)

  @cached_property
  def _fingerprint(self) -> str:
    return robot_fingerprint(self)

  def _function(self, what: str, names: tuple[str, ...], ref: Reference, shapes: list[int],
                body: Callable[..., Any]) -> NumericalFunction:  # fmt: skip
    """The NumericalFunction of algorithm `what` with wrenches at the frames `names` (built once, kept on the robot)."""
    key = (what, names, ref)
    if key not in self._built:
      frames = [self.frame(n) for n in names]
      inputs = tuple(Arg(n) for n in shapes) + tuple(Arg(6) for _ in names)
      k = len(shapes)
      self._built[key] = NumericalFunction(
        _identifier(f"{self.identifier}_{what}" + (f"_fext{len(self._built)}" if names else "")),
        lambda *ts: body(*ts[:k], self._wrenches(ts[0], frames, list(ts[k:]), ref)), inputs)  # fmt: skip
    return self._built[key]

  def _size(self, s: str) -> int:
    return {"nq": self.nq, "nv": self.nv, "nx": self.nx, "nu": self.nu, "rotation": 9, "translation": 3}[s]

  def _wrenches(self, q: Tensor, frames: list[Frame], values: list[Tensor], ref: str) -> rb.Wrenches | None:
    """{joint index: the wrench in that joint's frame} of wrenches at frames' origins."""
    if not frames:
      return None
    q = q[: self.nq] if q.shape[0] != self.nq else q
    xs = rb.placements(self.joints, q) if ref != "local" else None
    out: dict[int, Force] = {}
    for f, w in zip(frames, values, strict=True):
      if f.joint < 0:
        continue  # NOTE: a wrench on the world moves nothing
      wrench = Force(w[:3], w[3:])
      if ref != "local":  # in the world's axes, about the frame's origin or ("world") the world's: the frame's axes
        placed = _placed(xs, f)  # type: ignore[arg-type]
        wrench = wrench.to_child(placed if ref == "world" else Transform(placed.rotation, np.zeros(3)))
      at_joint = wrench.to_parent(Transform.of(f.placement))
      out[f.joint] = out[f.joint] + at_joint if f.joint in out else at_joint
    return out


#: Each algorithm's argument sizes, and names for errors.
_SIZES = {
  "rnea": ("nq", "nv", "nv"), "nonlinear": ("nq", "nv"), "generalized": ("nq",), "crba": ("nq",),
  "aba": ("nq", "nv", "nv"), "forward": ("nx", "nu"), "ode": ("nx", "nu"), "placement": ("nq",),
  "jacobian": ("nq",), "velocity": ("nq", "nv"), "center": ("nq",), "com": ("nq",), "kinetic": ("nq", "nv"),
  "potential": ("nq",), "integrate": ("nq", "nv"), "difference": ("nq", "nq"), "configuration": ("nq", "nv"),
  "error": ("nq", "rotation", "translation"),
}  # fmt: skip
_ARG_NAMES = {"aba": ("q", "v", "tau"), "forward": ("x", "u"), "ode": ("x", "u"), "difference": ("q0", "q1"),
              "error": ("q", "rotation (flattened)", "translation")}  # fmt: skip


def _reference(reference: object) -> Reference:
  if reference not in REFERENCES:
    raise ValueError(f"reference: expected one of {REFERENCES}, got {reference!r}")
  return reference  # type: ignore[return-value]


def _finite(x: object, what: str) -> float:
  value = float(x)  # type: ignore[arg-type]
  if not np.isfinite(value):
    raise ValueError(f"{what}: expected a finite number, got {x!r}")
  return value


def _identifier(name: str) -> str:
  name = re.sub(r"[^0-9a-zA-Z_]", "_", name)
  name = re.sub(r"_+", "_", name).strip("_")
  return name if name and not name[0].isdigit() else f"robot_{name}"


def _as_tensor(x: Any, n: int, what: str) -> Tensor:
  if isinstance(x, Tensor):
    if x.shape != (n,):
      raise ValueError(f"{what}: expected a Tensor of shape ({n},), got {x.shape}")
    return x
  return Tensor(_as_array(x, n, what, "argument"))


def _as_array(x: Any, n: int, what: str, name: str) -> Array:
  a = np.asarray(x, dtype=np.float64) if not isinstance(x, np.ndarray) or x.dtype != np.float64 else x
  if a.shape != (n,):
    raise ValueError(f"{what}: {name} must have shape ({n},), got {a.shape}")
  if not np.isfinite(a).all():
    raise ValueError(f"{what}: {name} holds NaN or inf")
  return np.ascontiguousarray(a)


def _tensor(x: V, like: Tensor) -> Tensor:
  """x as a Tensor (a constant broadcast into the graph of `like`)."""
  if isinstance(x, Tensor):
    return x
  return _stack([float(e) for e in np.asarray(x).reshape(-1)], like=like).reshape(np.shape(x))


def _placed(xs: Sequence[Transform], f: Frame) -> Transform:
  """Frame f in the world, from its joints' world placements `xs`."""
  return xs[f.joint] * Transform.of(f.placement) if f.joint >= 0 else Transform.of(f.placement)


def _stack(xs: Sequence[V], like: Tensor) -> Tensor:
  """One Tensor of scalars, Tensors or constants."""
  if not xs:
    return like.reshape(-1)[:0] * 1.0
  return Tensor.stack(*[x if isinstance(x, Tensor) else sp.constant(x, like) for x in xs])


def _expressed(m: Motion, placed: Transform, ref: str) -> Motion:
  """A world motion (at the world's origin) in a frame's `ref` coordinates."""
  if ref == "world":
    return m
  linear = sub(m.linear, sp.cross(placed.translation, m.angular))  # the velocity of the frame's origin
  if ref == "local_world_aligned":
    return Motion(linear, m.angular)
  rt = placed.rotation.T
  return Motion(sp.mv(rt, linear), sp.mv(rt, m.angular))
