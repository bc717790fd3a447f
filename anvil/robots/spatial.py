"""Spatial algebra on small Tensors, with numpy arrays standing for constants.

Rigid-body algorithms mix the robot's constants (joint placements, axes, inertias) with the variables a traced function
computes. Every helper here takes either: numpy operands give numpy results (folded in Python, no graph at all),
a constant matrix times a Tensor becomes one sum per row over its nonzero entries (no zero or unit factor ever enters
the graph), and Tensors combine with tinygrad's ops. The scalar lowering of straight-line C++ folds what remains.

Vectors are (3,) and matrices (3, 3); a spatial motion is (linear, angular), a force (force, torque), a spatial inertia
the blocks (A, B, C) of [[A, B], [Bᵀ, C]] mapping a motion to a force, all in one frame. A transform (R, p) places a
child frame in its parent (x_parent = R x_child + p).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from tinygrad import Tensor

from anvil.robots.model import Inertia, Placement

#: A value of the algorithms: a Tensor, or a numpy array or float standing for a constant. (Any: numpy's and tinygrad's
#: operator stubs cannot type their mixture, which the helpers here sort out at run time.)
V = Any


class Transform(NamedTuple):
  """A placement whose rotation and translation may be Tensors; `planar`: the coordinate axes k the rotation turns
  about (row and column k are e_k), as a bit set."""

  rotation: V
  translation: V
  planar: int = 0

  @staticmethod
  def of(p: Placement) -> Transform:
    """The constant transform of a placement."""
    return Transform(p.rotation, p.translation, planar_axes(p.rotation))

  def __mul__(self, other: Transform) -> Transform:  # type: ignore[override]
    """The composition self * other."""
    translation = add(mv(self.rotation, other.translation), self.translation)
    return Transform(mm(self.rotation, other.rotation), translation, self.planar & other.planar)

  def point(self, x: V) -> V:
    """A point of the child frame in the parent's."""
    return add(mv(self.rotation, x), self.translation)


class Factored(NamedTuple):
  """A transform outer * inner kept as its two factors, which motions, forces and inertias cross one after the other:
  a joint's constant placement (often a signed permutation) and its motion (a rotation about one axis) each cost a
  few multiplications, their product may be a dense rotation (anvil.robots.algorithms.local_transforms chooses)."""

  outer: Transform
  inner: Transform

  def composed(self) -> Transform:
    """The single transform outer * inner."""
    return self.outer * self.inner


#: A transform, whole or factored.
AnyTransform = Transform | Factored
_Crossing = Callable[[Any, Transform], Any]


def _factorwise(inward: bool) -> Callable[[_Crossing], Callable[[Any, AnyTransform], Any]]:
  """A change of frame across a Transform made to cross a Factored one factor by factor: outer first when going
  `inward` (to the child), inner first otherwise."""

  def wrap(method: _Crossing) -> Callable[[Any, AnyTransform], Any]:
    def across(self: Any, x: AnyTransform) -> Any:
      if isinstance(x, Factored):
        first, second = (x.outer, x.inner) if inward else (x.inner, x.outer)
        return method(method(self, first), second)
      return method(self, x)

    across.__doc__ = method.__doc__
    return across

  return wrap


class Motion(NamedTuple):
  """A spatial motion (linear, angular)."""

  linear: V
  angular: V

  def __add__(self, other: Motion) -> Motion:  # type: ignore[override]
    return Motion(add(self.linear, other.linear), add(self.angular, other.angular))

  def cross(self, m: Motion) -> Motion:
    """self x m (the motion cross product)."""
    return Motion(add(cross(self.angular, m.linear), cross(self.linear, m.angular)), cross(self.angular, m.angular))

  def cross_force(self, f: Force) -> Force:
    """self x* f (the force cross product)."""
    return Force(cross(self.angular, f.force), add(cross(self.angular, f.torque), cross(self.linear, f.force)))

  @_factorwise(inward=True)
  def to_child(self, x: Transform) -> Motion:
    """This motion, given in x's parent frame, in its child's."""
    rt = transpose(x.rotation)
    return Motion(mv(rt, sub(self.linear, cross(x.translation, self.angular))), mv(rt, self.angular))

  @_factorwise(inward=False)
  def to_parent(self, x: Transform) -> Motion:
    """This motion, given in x's child frame, in its parent's."""
    angular = mv(x.rotation, self.angular)
    return Motion(add(mv(x.rotation, self.linear), cross(x.translation, angular)), angular)

  def dot(self, f: Force) -> V:
    """The power of force f along this motion."""
    return add(dot(self.linear, f.force), dot(self.angular, f.torque))


class Force(NamedTuple):
  """A spatial force (force, torque)."""

  force: V
  torque: V

  def __add__(self, other: Force) -> Force:  # type: ignore[override]
    return Force(add(self.force, other.force), add(self.torque, other.torque))

  def __sub__(self, other: Force) -> Force:
    return Force(sub(self.force, other.force), sub(self.torque, other.torque))

  @_factorwise(inward=False)
  def to_parent(self, x: Transform) -> Force:
    """This force, given in x's child frame, in its parent's."""
    force = mv(x.rotation, self.force)
    return Force(force, add(mv(x.rotation, self.torque), cross(x.translation, force)))

  @_factorwise(inward=True)
  def to_child(self, x: Transform) -> Force:
    """This force, given in x's parent frame, in its child's."""
    rt = transpose(x.rotation)
    return Force(mv(rt, self.force), mv(rt, sub(self.torque, cross(x.translation, self.force))))


class SpatialInertia(NamedTuple):
  """The blocks of a symmetric spatial inertia [[A, B], [Bᵀ, C]] (articulated or rigid)."""

  a: V
  b: V
  c: V

  @staticmethod
  def of(inertia: Inertia) -> SpatialInertia:
    """The constant blocks of a rigid body's inertia."""
    m, h = inertia.mass, skew(inertia.com)
    return SpatialInertia(m * np.eye(3), -m * h, inertia.rotational - m * h @ h)

  def __add__(self, other: SpatialInertia) -> SpatialInertia:  # type: ignore[override]
    return SpatialInertia(add(self.a, other.a), add(self.b, other.b), add(self.c, other.c))

  def __mul__(self, m: Motion) -> Force:  # type: ignore[override]
    """The force of this inertia moving with m."""
    return Force(add(mv(self.a, m.linear), mv(self.b, m.angular)),
                 add(mv(transpose(self.b), m.linear), mv(self.c, m.angular)))  # fmt: skip

  def minus_outer(self, u: Force, w: Force) -> SpatialInertia:
    """self - u wᵀ for w a multiple of u (u, w as 6-vectors: forces), which keeps it symmetric."""
    return SpatialInertia(symmetric(sub(self.a, outer(u.force, w.force))), sub(self.b, outer(u.force, w.torque)),
                          symmetric(sub(self.c, outer(u.torque, w.torque))))  # fmt: skip

  def without(self, k: int) -> SpatialInertia:
    """This inertia with row and column k of its 6x6 matrix exactly zero (an articulated inertia's along its joint's
    axis: zero up to rounding, and every product with them folds away)."""
    keep = np.ones(6)
    keep[k] = 0.0
    kept = np.outer(keep, keep)
    masked = lambda m, block: m * (block if is_const(m) else constant(block, m))
    return SpatialInertia(masked(self.a, kept[:3, :3]), masked(self.b, kept[:3, 3:]), masked(self.c, kept[3:, 3:]))

  @_factorwise(inward=False)
  def to_parent(self, x: Transform) -> SpatialInertia:
    """This inertia, given in x's child frame, in its parent's: X* I X⁻¹."""
    r, rt = x.rotation, transpose(x.rotation)
    if x.planar and not is_const(r):
      k = (x.planar & -x.planar).bit_length() - 1
      a, b, c = _turned(self.a, r, k, True), _turned(self.b, r, k, False), _turned(self.c, r, k, True)
    else:  # NOTE: A and C are symmetric: only their upper triangles are computed (the rest mirrored, its code dead)
      a, b, c = symmetric(mm(mm(r, self.a), rt)), mm(mm(r, self.b), rt), symmetric(mm(mm(r, self.c), rt))
    h = skew(x.translation)
    hb, ah = mm(h, b), mm(a, h)
    return SpatialInertia(a, sub(b, ah), symmetric(sub(add(add(c, hb), transpose(hb)), mm(h, ah))))


def planar_axes(r: np.ndarray) -> int:
  """The coordinate axes k a constant rotation turns about (its row and column k are e_k), as a bit set."""
  eye = np.eye(3)
  return sum(1 << k for k in range(3) if np.array_equal(r[k], eye[k]) and np.array_equal(r[:, k], eye[k]))


def _turned(m: V, r: V, k: int, is_symmetric: bool) -> V:
  """R m Rᵀ for a rotation R about coordinate axis k: row and column k by the angle, the plane's 2x2 block by the
  double angle (its antisymmetric part does not turn; its symmetric part [[p, t], [t, q]] turns by 2θ, its trace
  unchanged): 15 multiplications for a general m, 9 for a symmetric one, against 30 and 18 as matrix products."""
  i, j = (k + 1) % 3, (k + 2) % 3
  c, s = r[i, i], r[j, i]
  c2, cs = c * c - s * s, c * s
  e = [[float(np.asarray(m)[p, q]) if is_const(m) else m[p, q] for q in range(3)] for p in range(3)]
  out: list[list[V]] = [[e[p][q] for q in range(3)] for p in range(3)]
  out[i][k], out[j][k] = sub(scale(c, e[i][k]), scale(s, e[j][k])), add(scale(s, e[i][k]), scale(c, e[j][k]))
  out[k][i], out[k][j] = (
    (out[i][k], out[j][k]) if is_symmetric
    else (sub(scale(c, e[k][i]), scale(s, e[k][j])), add(scale(s, e[k][i]), scale(c, e[k][j])))
  )  # fmt: skip
  total, diff = add(e[i][i], e[j][j]), sub(e[i][i], e[j][j])
  t = e[i][j] if is_symmetric else scale(0.5, add(e[i][j], e[j][i]))
  out[i][i] = sub(add(scale(0.5, total), scale(0.5 * c2, diff)), scale(2.0 * cs, t))
  out[j][j] = sub(total, out[i][i])
  turned = add(scale(cs, diff), scale(c2, t))
  w = np.zeros(()) if is_symmetric else scale(0.5, sub(e[i][j], e[j][i]))
  out[i][j], out[j][i] = add(turned, w), sub(turned, w)
  return stack([stack(row) for row in out])


def constant(x: V, like: Tensor) -> Tensor:
  """The constant array x as a Tensor of like's dtype (a constant of the graph: folded by the scalar lowering)."""
  a = np.asarray(x, dtype=np.float64)
  if a.size == 0:
    return Tensor.zeros(*a.shape, dtype=like.dtype)
  one = lambda e: like.reshape(-1)[0].const_like(e) if like.numel() else Tensor(e, dtype=like.dtype)
  return one(float(a)) if a.ndim == 0 else Tensor.stack(*[one(float(e)) for e in a.reshape(-1)]).reshape(a.shape)


def is_const(x: object) -> bool:
  """Whether x is a constant (a numpy array or a Python number)."""
  return not isinstance(x, Tensor)


def _zero(x: V) -> bool:
  return is_const(x) and not np.any(x)


def _lift(a: V, b: V) -> tuple[V, V]:
  """a and b, a constant among them made a Tensor when the other is one (numpy would otherwise broadcast over the
  Tensor as an object array)."""
  if isinstance(a, Tensor) and is_const(b):
    return a, constant(b, a)
  if isinstance(b, Tensor) and is_const(a):
    return constant(a, b), b
  return a, b


def add(a: V, b: V) -> V:
  """a + b."""
  if _zero(a):
    return b
  if _zero(b):
    return a
  a, b = _lift(a, b)
  return a + b


def sub(a: V, b: V) -> V:
  """a - b."""
  if _zero(b):
    return a
  if _zero(a):
    return -b
  a, b = _lift(a, b)
  return a - b


def scale(s: V, a: V) -> V:
  """s a for a scalar s."""
  if is_const(s) and is_const(a):
    return float(s) * a
  if _zero(a) or (is_const(s) and s == 0):
    return np.zeros(np.shape(a))
  if is_const(a):
    return combine([(s, np.asarray(a))], np.shape(a))
  return a * (float(s) if is_const(s) else s)


def inverse(s: V) -> V:
  """1 / s for a scalar."""
  return 1.0 / float(s) if is_const(s) else 1.0 / s


def transpose(m: V) -> V:
  """mᵀ."""
  return m.T


def combine(terms: list[tuple[V, np.ndarray]], shape: tuple[int, ...]) -> V:
  """Σ s_k C_k for scalars s_k and constant arrays C_k: each element a sum over its nonzero coefficients only."""
  flat = [(s, np.asarray(c).reshape(-1)) for s, c in terms]
  elements = [weighted([c[e] for _, c in flat], [s for s, _ in flat], 0.0) for e in range(math.prod(shape))]
  if all(is_const(e) for e in elements):
    return np.array(elements, dtype=np.float64).reshape(shape)
  like = next(e for e in elements if isinstance(e, Tensor))
  return Tensor.stack(*[e if isinstance(e, Tensor) else like.const_like(e) for e in elements]).reshape(shape)


def weighted(coefficients: Sequence[float] | np.ndarray, items: Sequence[V], zero: V) -> V:
  """Σ c_k x_k over the nonzero constant coefficients c_k (±1 as sums and differences), `zero` where every c_k is 0."""
  out = zero
  for c, x in zip(coefficients, items, strict=True):
    if c != 0:
      out = add(out, x if c == 1 else -x if c == -1 else scale(float(c), x))
  return out


def _elements(t: Tensor, n: int) -> list[Tensor]:
  return [t[i] for i in range(n)]


def mv(m: V, v: V) -> V:
  """m @ v for a (3, 3) matrix and a (3,) vector."""
  if _zero(v) or _zero(m):
    return np.zeros(3)
  if is_const(m) and is_const(v):
    return np.asarray(m) @ np.asarray(v)
  if is_const(m):
    if np.array_equal(m, np.eye(3)):
      return v
    vs = _elements(v, 3)
    return combine([(vs[j], np.asarray(m)[:, j]) for j in range(3)], (3,))
  if is_const(v):
    return weighted(np.asarray(v), [m[:, j] for j in range(3)], np.zeros(3))
  vs = _elements(v, 3)
  return m[:, 0] * vs[0] + m[:, 1] * vs[1] + m[:, 2] * vs[2]


def mm(a: V, b: V) -> V:
  """a @ b for (3, 3) matrices."""
  if _zero(a) or _zero(b):
    return np.zeros((3, 3))
  if is_const(a) and is_const(b):
    return np.asarray(a) @ np.asarray(b)
  if is_const(a) and np.array_equal(a, np.eye(3)):
    return b
  if is_const(b) and np.array_equal(b, np.eye(3)):
    return a
  if is_const(a):
    rows = _elements(b, 3)
    return stack([weighted(np.asarray(a)[i], rows, np.zeros(3)) for i in range(3)])
  if is_const(b):
    return transpose(mm(transpose(b), transpose(a)))
  rows = _elements(b, 3)
  return Tensor.stack(*[a[i, 0] * rows[0] + a[i, 1] * rows[1] + a[i, 2] * rows[2] for i in range(3)])


def stack(rows: Sequence[V]) -> V:
  """Scalars or vectors, Tensors or constants, stacked (a constant where all are)."""
  if all(is_const(r) for r in rows):
    return np.stack([np.asarray(r) for r in rows])
  like = next(r for r in rows if isinstance(r, Tensor))
  return Tensor.stack(*[r if isinstance(r, Tensor) else constant(r, like) for r in rows])


def cross(a: V, b: V) -> V:
  """a x b."""
  if _zero(a) or _zero(b):
    return np.zeros(3)
  if is_const(a) and is_const(b):
    return np.cross(a, b)
  if is_const(a):
    return mv(skew(np.asarray(a)), b)
  if is_const(b):
    return mv(-skew(np.asarray(b)), a)
  x, y = _elements(a, 3), _elements(b, 3)
  return Tensor.stack(x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0])


def dot(a: V, b: V) -> V:
  """a · b."""
  if _zero(a) or _zero(b):
    return np.zeros(())
  if is_const(a) and is_const(b):
    return np.dot(a, b)
  if is_const(a):
    a, b = b, a
  if is_const(b):
    return weighted(np.asarray(b), _elements(a, 3), np.zeros(()))
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def outer(u: V, w: V) -> V:
  """u wᵀ."""
  if _zero(u) or _zero(w):
    return np.zeros((3, 3))
  if is_const(u) and is_const(w):
    return np.outer(u, w)
  if is_const(u):
    return stack([scale(w_i, u) for w_i in scalars(w)]).T
  if is_const(w):
    return stack([scale(u_i, w) for u_i in scalars(u)])
  return Tensor.stack(*[w * u_i for u_i in _elements(u, 3)])


def scalars(v: V) -> list[V]:
  """A vector's elements: floats of a constant, scalar Tensors of a Tensor."""
  return [float(x) for x in np.asarray(v)] if is_const(v) else _elements(v, 3)


def symmetric(m: V) -> V:
  """A symmetric matrix from the upper triangle of m (for a Tensor: its lower entries are never read)."""
  if is_const(m):
    return m
  e = [[m[i, j] for j in range(3)] for i in range(3)]
  return Tensor.stack(*[e[min(i, j)][max(i, j)] for i in range(3) for j in range(3)]).reshape(3, 3)


def skew(v: V) -> V:
  """The matrix [v]x with [v]x w = v x w."""
  if is_const(v):
    x, y, z = np.asarray(v, dtype=np.float64)
    return np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
  x, y, z = _elements(v, 3)
  zero = x.const_like(0.0)
  return Tensor.stack(zero, -z, y, z, zero, -x, -y, x, zero).reshape(3, 3)
