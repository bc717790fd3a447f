"""Rigid-body algorithms on Tensors, in each joint's local frame as Pinocchio runs them (Featherstone's RNEA, CRBA and
ABA; frame kinematics and Jacobians; centre of mass; energies).

Each takes the joints of a tree (anvil.robots.model, topological order) and Tensors q, v, ... and returns Tensors:
traced inside a NumericalFunction they become straight-line C++ whose constants (placements, axes, inertias) are
folded in, and `anvil.ad` differentiates them like any other Tensor math. External wrenches are {joint index: Force in
that joint's frame}.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from tinygrad import Tensor

from anvil.robots import spatial as sp
from anvil.robots.model import Joint, JointType
from anvil.robots.spatial import (
  AnyTransform,
  Factored,
  Force,
  Motion,
  SpatialInertia,
  Transform,
  V,
  add,
  combine,
  dot,
  inverse,
  is_const,
  scale,
  skew,
  sub,
  transpose,
)

Joints = Sequence[Joint]
Wrenches = Mapping[int, Force]
_ZERO = np.zeros(3)
_ZERO_MOTION = Motion(_ZERO, _ZERO)


def _rotation_basis(axis: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(C, S, K) with c C + s S + K the rotation by the angle of cosine c and sine s about a unit axis (Rodrigues)."""
  aligned = np.flatnonzero(axis)
  if aligned.size == 1:  # NOTE: about ±e_k the (k, k) entry is exactly 1 and the others of row and column k are 0
    e = np.zeros((3, 3))
    e[aligned[0], aligned[0]] = 1.0
    return np.eye(3) - e, skew(axis), e
  outer = np.outer(axis, axis)
  return np.eye(3) - outer, skew(axis), outer


def _turn(axis: np.ndarray, c: Tensor, s: Tensor) -> Transform:
  """The rotation by the angle of cosine c and sine s about a unit axis. Its fixed part K has row and column k equal
  to e_k only for an axis ±e_k, where C and S vanish on them: K's planar axes are the rotation's."""
  cosine, sine, fixed = _rotation_basis(axis)
  return Transform(combine([(c, cosine), (s, sine), (1.0, fixed)], (3, 3)), _ZERO, sp.planar_axes(fixed))


def _multiplications(cosine: np.ndarray, sine: np.ndarray, fixed: np.ndarray) -> int:
  """The multiplications of a rotation c C + s S + K times a vector: one per entry that varies with the angle or is a
  constant other than 0 and ±1."""
  varies = (cosine != 0) | (sine != 0)
  return int(np.count_nonzero(varies | ~np.isin(fixed, (0.0, 1.0, -1.0))))


def quaternion_matrix(x: Tensor, y: Tensor, z: Tensor, w: Tensor) -> Tensor:
  """The rotation matrix of the unit quaternion (x, y, z, w)."""
  xx, yy, zz, xy, xz, yz, wx, wy, wz = x * x, y * y, z * z, x * y, x * z, y * z, w * x, w * y, w * z
  return Tensor.stack(1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy), 2 * (xy + wz), 1 - 2 * (xx + zz),
                      2 * (yz - wx), 2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)).reshape(3, 3)  # fmt: skip


def joint_motion(joint: Joint, q: Tensor) -> Transform:
  """The transform the joint makes at configuration q (its child frame in its frame at q = 0)."""
  i = joint.idx_q
  match joint.type:
    case JointType.REVOLUTE:
      return _turn(joint.axis, q[i].cos(), q[i].sin())
    case JointType.CONTINUOUS:  # NOTE: (cos, sin) normalized, as a free flyer's quaternion below
      inv_norm = 1.0 / (q[i] * q[i] + q[i + 1] * q[i + 1]).sqrt()
      return _turn(joint.axis, q[i] * inv_norm, q[i + 1] * inv_norm)
    case JointType.PRISMATIC:
      return Transform(np.eye(3), scale(q[i], joint.axis), 0b111)
    case JointType.FREE_FLYER:
      # NOTE: the quaternion is normalized first: an integrator's states drift off the unit sphere, and the rotation
      # (and the derivatives in the quaternion's direction, zero) must not follow them
      x, y, z, w = (q[i + 3 + k] for k in range(4))
      inv_norm = 1.0 / (x * x + y * y + z * z + w * w).sqrt()
      return Transform(quaternion_matrix(x * inv_norm, y * inv_norm, z * inv_norm, w * inv_norm), q[i : i + 3])
  raise AssertionError(joint.type)


def subspace(joint: Joint) -> list[Motion]:
  """The joint's motion subspace S, one constant motion per velocity coordinate, in its child frame."""
  if joint.type is JointType.FREE_FLYER:
    eye = np.eye(3)
    return [Motion(eye[k], _ZERO) for k in range(3)] + [Motion(_ZERO, eye[k]) for k in range(3)]
  return [Motion(joint.axis, _ZERO)] if joint.type is JointType.PRISMATIC else [Motion(_ZERO, joint.axis)]


def _apply(columns: list[Motion], coefficients: Sequence[V]) -> Motion:
  """Σ_k columns_k coefficients_k."""
  out = _ZERO_MOTION
  for col, c in zip(columns, coefficients, strict=True):
    out = out + Motion(scale(c, col.linear), scale(c, col.angular))
  return out


def _project(columns: list[Motion], f: Force) -> list[V]:
  """Sᵀ f, one scalar per column."""
  return [col.dot(f) for col in columns]


def _coordinates(joint: Joint, x: Tensor | Sequence[V] | None) -> list[V]:
  """The joint's velocity coordinates in x, a Tensor or a sequence of scalars (zeros for None)."""
  return [np.zeros(()) if x is None else x[joint.idx_v + k] for k in range(joint.nv)]


def local_transforms(joints: Joints, q: Tensor) -> list[AnyTransform]:
  """Each joint's frame in its parent joint's frame at q: its placement times its motion, kept `Factored` where the
  two rotations cost fewer multiplications than their product. A placement that is a signed permutation up to
  rounding (URDFs write π/2 as 1.5707963, leaving 5e-12 where 0 belongs) makes a rotation about one axis dense:
  crossed one after the other, its rounding costs two multiplications, not four more variable entries."""
  return [_local_transform(j, q) for j in joints]


def _local_transform(joint: Joint, q: Tensor) -> AnyTransform:
  placement, motion = Transform.of(joint.placement), joint_motion(joint, q)
  if joint.type in (JointType.REVOLUTE, JointType.CONTINUOUS):
    r, basis = joint.placement.rotation, _rotation_basis(joint.axis)
    none = np.zeros((3, 3))
    apart = _multiplications(none, none, r) + _multiplications(*basis)
    if apart < _multiplications(*(r @ b for b in basis)):
      return Factored(placement, motion)
  return placement * motion


def placements(joints: Joints, q: Tensor, local: Sequence[AnyTransform] | None = None) -> list[Transform]:
  """Each joint's frame in the world at q (forward kinematics), from its `local_transforms` when given."""
  out: list[Transform] = []
  for j, x in zip(joints, local if local is not None else local_transforms(joints, q), strict=True):
    x = x.composed() if isinstance(x, Factored) else x
    out.append(out[j.parent] * x if j.parent >= 0 else x)
  return out


def _gravity_motion(gravity: np.ndarray) -> Motion:
  """The world's acceleration that stands for gravity (the base accelerating upwards)."""
  return Motion(-np.asarray(gravity, dtype=np.float64), _ZERO)


def velocities(joints: Joints, xs: Sequence[AnyTransform], v: Tensor | None) -> tuple[list[Motion], list[Motion]]:
  """Each body's spatial velocity and each joint's velocity vJ, in local frames."""
  vel: list[Motion] = []
  vj: list[Motion] = []
  for j, x in zip(joints, xs, strict=True):
    vj.append(_apply(subspace(j), _coordinates(j, v)))
    parent = vel[j.parent].to_child(x) if j.parent >= 0 else _ZERO_MOTION
    vel.append(parent + vj[-1])
  return vel, vj


def rnea(
  joints: Joints,
  gravity: np.ndarray,
  q: Tensor,
  v: Tensor | None,
  a: Tensor | Sequence[V] | None,
  fext: Wrenches | None = None,
) -> list[V]:
  """τ = M(q) a + C(q, v) v + g(q) - Σ Jᵀ fext, one scalar per velocity coordinate (None: zero v or a)."""
  xs = local_transforms(joints, q)
  vel, vj = velocities(joints, xs, v)
  acc: list[Motion] = []
  forces: list[Force] = []
  for i, (j, x) in enumerate(zip(joints, xs, strict=True)):
    parent = acc[j.parent] if j.parent >= 0 else _gravity_motion(gravity)
    acc.append(parent.to_child(x) + _apply(subspace(j), _coordinates(j, a)) + vel[i].cross(vj[i]))
    inertia = SpatialInertia.of(j.inertia)
    f = inertia * acc[i] + vel[i].cross_force(inertia * vel[i])
    forces.append(f - fext[i] if fext and i in fext else f)
  tau: list[list[V]] = [[] for _ in joints]
  for i in reversed(range(len(joints))):
    j = joints[i]
    tau[i] = _project(subspace(j), forces[i])
    if j.parent >= 0:
      forces[j.parent] = forces[j.parent] + forces[i].to_parent(xs[i])
  return [t for ts in tau for t in ts]


def crba(joints: Joints, q: Tensor) -> list[list[V]]:
  """The joint-space inertia matrix M(q) (symmetric, both triangles), as rows of scalars."""
  xs = local_transforms(joints, q)
  nv = sum(j.nv for j in joints)
  m: list[list[V]] = [[np.zeros(()) for _ in range(nv)] for _ in range(nv)]
  composite = [SpatialInertia.of(j.inertia) for j in joints]
  for i in reversed(range(len(joints))):
    j = joints[i]
    columns = [composite[i] * s for s in subspace(j)]
    k = i
    while k >= 0:
      rows = subspace(joints[k])
      for c, f in enumerate(columns):
        for r, s in enumerate(rows):
          value = s.dot(f)
          m[joints[k].idx_v + r][j.idx_v + c] = value
          m[j.idx_v + c][joints[k].idx_v + r] = value
      if joints[k].parent >= 0:
        columns = [f.to_parent(xs[k]) for f in columns]
      k = joints[k].parent
    if j.parent >= 0:
      composite[j.parent] = composite[j.parent] + composite[i].to_parent(xs[i])
  return m


def aba(
  joints: Joints, gravity: np.ndarray, q: Tensor, v: Tensor | None, tau: list[V], fext: Wrenches | None = None
) -> list[V]:
  """The joint accelerations of forward dynamics (Featherstone's articulated-body algorithm), one scalar each."""
  xs = local_transforms(joints, q)
  vel, vj = velocities(joints, xs, v)
  bias = [vel[i].cross(vj[i]) for i in range(len(joints))]
  ia = [SpatialInertia.of(j.inertia) for j in joints]
  pa: list[Force] = []
  for i in range(len(joints)):
    f = vel[i].cross_force(ia[i] * vel[i])
    pa.append(f - fext[i] if fext and i in fext else f)
  solves: list[tuple[list[Force], list[V]]] = [([], [])] * len(joints)
  for i in reversed(range(len(joints))):
    j, s = joints[i], subspace(joints[i])
    u_cols = [ia[i] * c for c in s]
    u = [sub(tau[j.idx_v + k], t) for k, t in enumerate(_project(s, pa[i]))]
    if j.type is JointType.FREE_FLYER:
      assert j.parent < 0, "a free flyer is the root"
      solves[i] = (u_cols, u)
      continue
    d_inv = 1.0 / s[0].dot(u_cols[0])
    scaled = Force(scale(d_inv, u_cols[0].force), scale(d_inv, u_cols[0].torque))  # U / D
    solves[i] = ([scaled], [scale(d_inv, u[0])])
    if j.parent >= 0:
      articulated = ia[i].minus_outer(u_cols[0], scaled)
      if np.count_nonzero(column := np.concatenate(s[0])) == 1:  # NOTE: Ia S = 0: S's row and column are zero
        articulated = articulated.without(int(np.flatnonzero(column)[0]))
      pa_i = pa[i] + articulated * bias[i] + Force(scale(u[0], scaled.force), scale(u[0], scaled.torque))
      ia[j.parent] = ia[j.parent] + articulated.to_parent(xs[i])
      pa[j.parent] = pa[j.parent] + pa_i.to_parent(xs[i])
  qdd: list[V] = []
  acc: list[Motion] = []
  for i, j in enumerate(joints):
    parent = acc[j.parent] if j.parent >= 0 else _gravity_motion(gravity)
    a_i = parent.to_child(xs[i]) + bias[i]
    columns, values = solves[i]
    if j.type is JointType.FREE_FLYER:
      # NOTE: U = Ia, so q̈ = Ia⁻¹ u - a and the body's acceleration is Ia⁻¹ u (Ia dense: LTDL along a chain)
      chain = list(range(-1, 5))
      body = ltdl_solve(*ltdl(_inertia_matrix(ia[i]), chain), chain, values)
      qdd.extend(sub(body[k], c) for k, c in enumerate((*sp.scalars(a_i.linear), *sp.scalars(a_i.angular))))
      acc.append(Motion(sp.stack(body[:3]), sp.stack(body[3:])))
      continue
    step = sub(values[0], a_i.dot(columns[0]))  # D⁻¹ (u - Uᵀ a)
    qdd.append(step)
    acc.append(a_i + _apply(subspace(j), [step]))
  return qdd


def _inertia_matrix(ia: SpatialInertia) -> list[list[V]]:
  """The 6x6 matrix of a spatial inertia, as rows of scalars."""
  entry = lambda m, r, c: float(np.asarray(m)[r, c]) if is_const(m) else m[r, c]
  bt = transpose(ia.b)
  top = [[entry(ia.a, r, c) for c in range(3)] + [entry(ia.b, r, c) for c in range(3)] for r in range(3)]
  bottom = [[entry(bt, r, c) for c in range(3)] + [entry(ia.c, r, c) for c in range(3)] for r in range(3)]
  return top + bottom


def center_of_mass(joints: Joints, q: Tensor) -> tuple[V, float]:
  """The centre of mass in the world at q, and the total mass."""
  total = sum(j.inertia.mass for j in joints)
  weighted: V = _ZERO
  for j, x in zip(joints, placements(joints, q), strict=True):
    if j.inertia.mass:
      weighted = add(weighted, scale(j.inertia.mass, x.point(j.inertia.com)))
  return scale(1.0 / total, weighted), total


def world_columns(joints: Joints, xs: list[Transform]) -> list[Motion]:
  """Each velocity coordinate's motion subspace column in the world frame (at the world's origin)."""
  return [s.to_parent(x) for j, x in zip(joints, xs, strict=True) for s in subspace(j)]


def support(joints: Joints, i: int) -> list[int]:
  """The velocity coordinates that move joint i (its own and its ancestors')."""
  out: list[int] = []
  while i >= 0:
    out.extend(range(joints[i].idx_v, joints[i].idx_v + joints[i].nv))
    i = joints[i].parent
  return sorted(out)


def kinetic_energy(joints: Joints, q: Tensor, v: Tensor) -> V:
  """½ vᵀ M(q) v."""
  vel, _ = velocities(joints, local_transforms(joints, q), v)
  energy: V = np.zeros(())
  for j, m in zip(joints, vel, strict=True):
    energy = add(energy, m.dot(SpatialInertia.of(j.inertia) * m))
  return scale(0.5, energy)


def potential_energy(joints: Joints, gravity: np.ndarray, q: Tensor) -> V:
  """-Σ m_i gᵀ c_i (zero at the world's origin)."""
  com, mass = center_of_mass(joints, q)
  return scale(-mass, dot(gravity, com))


def com_jacobian(joints: Joints, q: Tensor) -> list[list[V]]:
  """The Jacobian (3, nv) of the centre of mass in the world, as rows of scalars: column k is the velocity the
  subtree that coordinate k moves gives the centre of mass, (m_sub v_k + ω_k x Σ m_i c_i) / m."""
  xs = placements(joints, q)
  total = sum(j.inertia.mass for j in joints)
  mass = [j.inertia.mass for j in joints]
  moment: list[V] = [scale(j.inertia.mass, x.point(j.inertia.com)) for j, x in zip(joints, xs, strict=True)]
  for i in reversed(range(len(joints))):
    if (p := joints[i].parent) >= 0:
      mass[p] += mass[i]
      moment[p] = add(moment[p], moment[i])
  columns: list[V] = []
  for i, (j, x) in enumerate(zip(joints, xs, strict=True)):
    for s in subspace(j):
      c = s.to_parent(x)
      columns.append(scale(1.0 / total, add(scale(mass[i], c.linear), sp.cross(c.angular, moment[i]))))
  return [[sp.scalars(c)[r] for c in columns] for r in range(3)]


def dof_parents(joints: Joints) -> list[int]:
  """Each velocity coordinate's parent coordinate in the tree (-1 at the root): the one before it within a joint,
  else the last of its parent joint."""
  parents: list[int] = []
  for j in joints:
    above = joints[j.parent].idx_v + joints[j.parent].nv - 1 if j.parent >= 0 else -1
    parents += [above, *range(j.idx_v, j.idx_v + j.nv - 1)]
  return parents


def ltdl(m: list[list[V]], parents: Sequence[int]) -> tuple[list[list[V]], list[V]]:
  """The factors of M = Lᵀ D L with L unit lower triangular and as sparse as the tree (Featherstone's LTDL: L's
  row k is nonzero at k's ancestors only): (L's entries, rows of scalars; D's diagonal)."""
  h = [row[:] for row in m]
  for k in reversed(range(len(h))):
    i = parents[k]
    while i >= 0:
      a = scale(inverse(h[k][k]), h[k][i])
      j = i
      while j >= 0:
        h[i][j] = sub(h[i][j], scale(a, h[k][j]))
        j = parents[j]
      h[k][i] = a
      i = parents[i]
  return h, [h[k][k] for k in range(len(h))]


def ltdl_solve(lower: list[list[V]], diagonal: Sequence[V], parents: Sequence[int], b: Sequence[V]) -> list[V]:
  """M⁻¹ b from M's LTDL factors (two sparse triangular solves along the tree)."""
  x = list(b)
  for i in reversed(range(len(x))):
    j = parents[i]
    while j >= 0:
      x[j] = sub(x[j], scale(lower[i][j], x[i]))
      j = parents[j]
  x = [scale(inverse(d), xi) for xi, d in zip(x, diagonal, strict=True)]
  for i in range(len(x)):
    j = parents[i]
    while j >= 0:
      x[i] = sub(x[i], scale(lower[i][j], x[j]))
      j = parents[j]
  return x


def tangent(x: V) -> V:
  """x - detach(x): zero, with x's derivatives (a constant has none)."""
  return x - x.detach() if isinstance(x, Tensor) else np.zeros(())


def forward_dynamics(
  joints: Joints, gravity: np.ndarray, q: Tensor, v: Tensor | None, tau: list[V], fext: Wrenches | None = None
) -> list[V]:
  """ABA's accelerations, carrying their derivatives in the analytical form: with a = ABA(q, v, τ) held constant,
  a + M(q)⁻¹ (r - detach(r)) for r = τ - RNEA(q, v, a) has a's value and, since RNEA is linear in a, the derivatives
  of M(q)⁻¹ (τ - b(q, v)) = ABA at every order (Carpentier and Mansard's ∂ABA = M⁻¹ (∂τ - ∂RNEA), for which
  the derivative passes differentiate RNEA instead of ABA's articulated inertias). The correction's value is zero and
  folds away in emitted code, so the value costs ABA alone."""
  fixed = [x.detach() if isinstance(x, Tensor) else x for x in aba(joints, gravity, q, v, tau, fext)]
  residual = [tangent(sub(t, r)) for t, r in zip(tau, rnea(joints, gravity, q, v, fixed, fext), strict=True)]
  parents = dof_parents(joints)
  lower, diagonal = ltdl(crba(joints, q), parents)
  return [add(f, x) for f, x in zip(fixed, ltdl_solve(lower, diagonal, parents, residual), strict=True)]
