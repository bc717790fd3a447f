"""The configuration space of a joint tree: neutral and random configurations, and, on Tensors, `integrate`,
`difference` and the map from velocities to configuration rates, per joint as Pinocchio's Lie groups define them.

A revolute or prismatic joint is a line (q + v). A continuous joint is the circle, configured by (cos θ, sin θ). A free
flyer is SE(3): position and unit quaternion (x, y, z, w), moved by its local twist (v, ω) through the exponential map;
`difference` is the logarithm of the relative placement. Near a zero angle the exponential's and logarithm's
coefficients switch to their Taylor series, so neither they nor their derivatives divide by zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.robots.algorithms import quaternion_matrix
from anvil.robots.model import Joint, JointType
from anvil.robots.spatial import cross

Joints = Sequence[Joint]
#: Below this squared angle, the exponential's and logarithm's coefficients are their Taylor series (errors ~θ⁴/120).
SMALL_ANGLE2 = 1e-6
#: Below this θ², SE(3)'s logarithm takes β (its V⁻¹'s coefficient) from four terms of its series (error < 1e-16).
BETA_SERIES = 1e-2


def neutral(joints: Joints) -> NDArray[np.float64]:
  """Zeros, identity quaternions, continuous joints at angle 0."""
  parts = [np.array([0, 0, 0, 0, 0, 0, 1.0]) if j.type is JointType.FREE_FLYER else np.array([1.0, 0.0])
           if j.type is JointType.CONTINUOUS else np.zeros(1) for j in joints]  # fmt: skip
  return np.concatenate(parts) if parts else np.zeros(0)


def random(joints: Joints, rng: np.random.Generator) -> NDArray[np.float64]:
  """A configuration uniform within the position limits ([-π, π] for an unbounded angle, [-1, 1] for an unbounded
  translation; a uniformly random orientation for a free flyer)."""
  parts = []
  for j in joints:
    if j.type is JointType.FREE_FLYER:
      quat = rng.standard_normal(4)
      position = rng.uniform(_finite(j.lower[:3], -1.0), _finite(j.upper[:3], 1.0))
      parts.append(np.concatenate([position, quat / np.linalg.norm(quat)]))
    elif j.type is JointType.CONTINUOUS:
      angle = rng.uniform(-math.pi, math.pi)
      parts.append(np.array([math.cos(angle), math.sin(angle)]))
    else:
      bound = math.pi if j.type is JointType.REVOLUTE else 1.0
      parts.append(rng.uniform(_finite(j.lower, -bound), _finite(j.upper, bound)))
  return np.concatenate(parts) if parts else np.zeros(0)


def _finite(x: NDArray[np.float64], default: float) -> NDArray[np.float64]:
  return np.where(np.isfinite(x), x, default)


def _vector(*xs: Tensor) -> Tensor:
  return Tensor.stack(*xs)


def _quat_mul(a: Sequence[Tensor], b: Sequence[Tensor]) -> list[Tensor]:
  """The quaternion product a ⊗ b, both (x, y, z, w)."""
  ax, ay, az, aw = a
  bx, by, bz, bw = b
  return [aw * bx + bw * ax + ay * bz - az * by, aw * by + bw * ay + az * bx - ax * bz,
          aw * bz + bw * az + ax * by - ay * bx, aw * bw - ax * bx - ay * by - az * bz]  # fmt: skip


def _small(theta2: Tensor) -> Tensor:
  return theta2 < SMALL_ANGLE2


def _safe_angle(theta2: Tensor) -> Tensor:
  """θ where it is not small, 1 where it is (so no branch of a `where` divides by zero)."""
  return _small(theta2).where(1.0, theta2).sqrt()


def integrate(joints: Joints, q: Tensor, v: Tensor) -> Tensor:
  """The configuration reached from q along the velocity v for a unit time."""
  parts: list[Tensor] = []
  for j in joints:
    iq, iv = j.idx_q, j.idx_v
    if j.type is JointType.FREE_FLYER:
      parts.append(_integrate_free_flyer(q[iq : iq + 7], v[iv : iv + 6]))
    elif j.type is JointType.CONTINUOUS:
      c, s, w = q[iq], q[iq + 1], v[iv]
      cw, sw = w.cos(), w.sin()
      out_c, out_s = c * cw - s * sw, s * cw + c * sw
      norm = (3.0 - (out_c * out_c + out_s * out_s)) * 0.5  # NOTE: Pinocchio's first-order renormalization
      parts.append(_vector(out_c * norm, out_s * norm))
    else:
      parts.append((q[iq] + v[iv]).reshape(1))
  return Tensor.cat(*parts) if parts else q * 1.0


def _integrate_free_flyer(q: Tensor, v: Tensor) -> Tensor:
  x, y, z, w = (q[3 + k] for k in range(4))
  omega = [v[3 + k] for k in range(3)]
  nu = v[:3]
  theta2 = omega[0] * omega[0] + omega[1] * omega[1] + omega[2] * omega[2]
  small, theta = _small(theta2), _safe_angle(theta2)
  sin, cos = theta.sin(), theta.cos()
  half_sin = small.where(0.5 - theta2 / 48.0, (theta * 0.5).sin() / theta)
  half_cos = small.where(1.0 - theta2 / 8.0, (theta * 0.5).cos())
  b = small.where(0.5 - theta2 / 24.0, (1.0 - cos) / theta2.maximum(SMALL_ANGLE2))
  c = small.where(1.0 / 6.0 - theta2 / 120.0, (theta - sin) / (theta * theta2.maximum(SMALL_ANGLE2)))
  om = _vector(*omega)
  k_nu = cross(om, nu)
  p_exp = nu + b * k_nu + c * cross(om, k_nu)  # V nu with V = I + b K + c K²
  rotation = quaternion_matrix(x, y, z, w)
  position = q[:3] + (rotation * p_exp.reshape(1, 3)).sum(1)
  quat = _quat_mul([x, y, z, w], [half_sin * o for o in omega] + [half_cos])
  norm2 = quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3]
  scale = (3.0 - norm2) * 0.5  # NOTE: Pinocchio's first-order renormalization
  return position.cat(_vector(*[e * scale for e in quat]))


def atan2(y: Tensor, x: Tensor) -> Tensor:
  """The angle of (x, y) in (-π, π], to double precision: tinygrad's arctangent (a polynomial good to ~1e-8) as a
  first guess, then one Newton step on the angle (its error goes from δ to ~δ³)."""
  ax, ay = x.abs(), y.abs()
  swap = ay > ax
  num, den = swap.where(ax, ay), swap.where(ay, ax)
  t = (num / (den == 0).where(1.0, den)).atan()
  guess = swap.where(math.pi / 2 - t, t)
  guess = (x < 0).where(math.pi - guess, guess)
  guess = (y < 0).where(-guess, guess)
  c, s = guess.cos(), guess.sin()
  along = x * c + y * s
  return guess + (y * c - x * s) / (along == 0).where(1.0, along)


def difference(joints: Joints, q0: Tensor, q1: Tensor) -> Tensor:
  """The velocity v with integrate(q0, v) = q1."""
  parts: list[Tensor] = []
  for j in joints:
    iq = j.idx_q
    if j.type is JointType.FREE_FLYER:
      parts.append(_difference_free_flyer(q0[iq : iq + 7], q1[iq : iq + 7]))
    elif j.type is JointType.CONTINUOUS:
      c0, s0, c1, s1 = q0[iq], q0[iq + 1], q1[iq], q1[iq + 1]
      parts.append(atan2(c0 * s1 - s0 * c1, c0 * c1 + s0 * s1).reshape(1))
    else:
      parts.append((q1[iq] - q0[iq]).reshape(1))
  return Tensor.cat(*parts) if parts else q0[:0] * 1.0


def _difference_free_flyer(q0: Tensor, q1: Tensor) -> Tensor:
  quat0 = [q0[3 + k] for k in range(4)]
  quat1 = [q1[3 + k] for k in range(4)]
  conj0 = [-quat0[0], -quat0[1], -quat0[2], quat0[3]]
  rel = _quat_mul(conj0, quat1)
  sign = (rel[3] < 0).where(-1.0, 1.0)  # NOTE: q and -q are one rotation: take the one of angle in [0, π]
  vx, vy, vz, w = (e * sign for e in rel)
  s2 = vx * vx + vy * vy + vz * vz
  small, s = _small(s2), _safe_angle(s2)
  half = atan2(s, w)  # θ/2 in [0, π/2]
  theta = half * 2.0
  ratio = small.where(2.0 / w, theta / s)  # θ / sin(θ/2)
  omega = _vector(vx * ratio, vy * ratio, vz * ratio)
  rotation0 = quaternion_matrix(*quat0)
  p = ((q1[:3] - q0[:3]).reshape(3, 1) * rotation0).sum(0)  # R0ᵀ (p1 - p0)
  return _log_translation(omega, theta, p).cat(omega)


def _log_translation(omega: Tensor, theta: Tensor, p: Tensor) -> Tensor:
  """The linear part of SE(3)'s logarithm: V⁻¹ p = p - ½ K p + β K² p (K = [ω]: the cross product by ω), with
  β = (1 - θ sin θ / (2 (1 - cos θ))) / θ², by its series in θ² = |ω|² below BETA_SERIES (the closed form cancels
  there: 1e-11 relative error at θ = 0.01)."""
  theta2 = (omega * omega).sum()
  series = theta2 < BETA_SERIES
  t = series.where(1.0, theta)  # NOTE: an angle the closed form is finite at, where the series is taken
  closed = (1.0 - t * t.sin() / (2.0 * (1.0 - t.cos()))) / (t * t)
  beta = series.where(1.0 / 12.0 + theta2 * (1.0 / 720.0 + theta2 * (1.0 / 30240.0 + theta2 / 1209600.0)), closed)
  k_p = cross(omega, p)
  return p - 0.5 * k_p + beta * cross(omega, k_p)


def log6(rotation: Tensor, translation: Tensor) -> Tensor:
  """SE(3)'s logarithm (Pinocchio's log6) of the placement (rotation (3, 3), translation (3,)): the twist (linear,
  angular) whose exponential it is. The rotation's angle θ = atan2(|a|, (tr R - 1) / 2), where a = sin θ u is the
  vector of ½ (R - Rᵀ); θ / sin θ by its series where sin θ is small. Near θ = π the axis is ill-conditioned in R's
  antisymmetric part: the result stays finite but loses accuracy there (a tracking error of half a turn)."""
  r = rotation
  a = _vector(r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]) * 0.5
  s2 = (a * a).sum()
  c = (r[0, 0] + r[1, 1] + r[2, 2] - 1.0) * 0.5
  small = _small(s2) & (c > 0)
  theta = atan2(_safe_angle(s2), c)
  ratio = small.where(1.0 + s2 / 6.0 + 3.0 * s2 * s2 / 40.0, theta / _safe_angle(s2))  # θ / sin θ
  omega = a * ratio
  return _log_translation(omega, theta, translation).cat(omega)


def velocity_in_configuration(joints: Joints, q: Tensor, v: Tensor) -> Tensor:
  """q̇ for velocity v at q: v itself on lines, (-sin, cos) ω on a circle, (R nu, ½ quat ⊗ (ω, 0)) for a free flyer."""
  parts: list[Tensor] = []
  for j in joints:
    iq, iv = j.idx_q, j.idx_v
    if j.type is JointType.FREE_FLYER:
      quat = [q[iq + 3 + k] for k in range(4)]
      rotation = quaternion_matrix(*quat)
      linear = (rotation * v[iv : iv + 3].reshape(1, 3)).sum(1)
      rate = _quat_mul(quat, [v[iv + 3], v[iv + 4], v[iv + 5], v[iv] * 0.0])
      parts.append(linear.cat(_vector(*[0.5 * r for r in rate])))
    elif j.type is JointType.CONTINUOUS:
      parts.append(_vector(-q[iq + 1] * v[iv], q[iq] * v[iv]))
    else:
      parts.append(v[iv].reshape(1))
  return Tensor.cat(*parts) if parts else v * 1.0
