"""anvil.ad transforms agree with central finite differences and with analytic derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import anvil as av
from anvil import Arg, Tensor
from anvil.ad import VmapError, gradient, hessian, jacobian, jvp, vjp, vmap
from anvil.problems import cartpole, quadrotor

A = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])
A_T = Tensor(A)


def fd_jacobian(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
  """Central differences of f (array -> array) at x: shape (f(x).size, x.size)."""
  cols = []
  for j in range(x.size):
    e = np.zeros(x.size)
    e[j] = h
    plus, minus = f(x + e.reshape(x.shape)), f(x - e.reshape(x.shape))
    cols.append((np.ravel(plus) - np.ravel(minus)) / (2 * h))
  return np.stack(cols, axis=-1)


def mixed(x: Tensor, p: Tensor) -> Tensor:
  """Elementwise math, reductions, matmul, slicing, cat/stack, where and maximum away from kinks."""
  y = A_T @ x.sin() + p[0] * x[:2].exp()
  z = Tensor.stack(x[0] * x[1], (x[2] + 2.0).log(), (x * x + 1.0).sqrt().sum(), x.tanh().prod())
  w = (x > 0.0).where(x * 3.0, x.cos()) + x.maximum(x * 0.5 + 5.0) + (x**2.5 + 1.0).reciprocal() * p[1]
  return y.cat(
    z, w.abs() / (1.0 + p[0] ** 2), x.reshape(3, 1).expand(3, 2).permute(1, 0).flip(0).pad(((1, 0), (0, 0))).flatten()
  )


def mixed_numpy(x: np.ndarray, p: np.ndarray) -> np.ndarray:
  y = A @ np.sin(x) + p[0] * np.exp(x[:2])
  z = np.array([x[0] * x[1], np.log(x[2] + 2.0), np.sqrt(x * x + 1.0).sum(), np.prod(np.tanh(x))])
  w = np.where(x > 0, x * 3.0, np.cos(x)) + np.maximum(x, x * 0.5 + 5.0) + p[1] / (x**2.5 + 1.0)
  moved = np.pad(np.flip(np.tile(x.reshape(3, 1), (1, 2)).T, 0), ((1, 0), (0, 0))).ravel()
  return np.concatenate([y, z, np.abs(w) / (1.0 + p[0] ** 2), moved])


MIXED = av.NumericalFunction("ad_mixed", mixed, (Arg(3), Arg(2)))
X0, P0 = np.array([0.3, 0.7, 1.1]), np.array([0.5, -1.5])


def test_mixed_function_matches_numpy() -> None:
  np.testing.assert_allclose(MIXED(X0, P0), mixed_numpy(X0, P0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("wrt", [0, 1])
def test_jacobian_jvp_vjp_of_mixed_function(wrt: int) -> None:
  args = [X0, P0]
  ref = fd_jacobian(lambda z: mixed_numpy(*[z if i == wrt else a for i, a in enumerate(args)]), args[wrt])
  jac = jacobian(MIXED, wrt)(X0, P0)
  assert jac.shape == (ref.shape[0], args[wrt].size)
  np.testing.assert_allclose(jac, ref, rtol=1e-6, atol=1e-7)
  v = np.linspace(-1.0, 1.0, args[wrt].size)
  np.testing.assert_allclose(jvp(MIXED, wrt)(X0, P0, v), jac @ v, rtol=1e-12, atol=1e-12)
  ct = np.cos(np.arange(ref.shape[0]))
  np.testing.assert_allclose(vjp(MIXED, wrt)(X0, P0, ct), jac.T @ ct, rtol=1e-12, atol=1e-12)


def test_p1_quadrotor_jacobians() -> None:
  f = av.NumericalFunction("ad_quad", quadrotor.step, (Arg(12), Arg(4)))
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  jx, ju = jacobian(f, 0), jacobian(f, 1)
  np.testing.assert_allclose(jx(x, u), fd_jacobian(lambda z: quadrotor.step_numpy(z, u), x), rtol=1e-6, atol=1e-8)
  np.testing.assert_allclose(ju(x, u), fd_jacobian(lambda z: quadrotor.step_numpy(x, z), u), rtol=1e-6, atol=1e-8)
  assert len(jx.program.kernels) <= 2, "a dense Jacobian is one batched pass, not one pass per row"


def test_p2_cartpole_jacobian_jvp_vjp() -> None:
  f = av.NumericalFunction("ad_cart", cartpole.step, (Arg(4), Arg(1)))
  x, u = cartpole.TEST_X, cartpole.TEST_U
  ref = fd_jacobian(lambda z: cartpole.step_numpy(z, u), x)
  np.testing.assert_allclose(jacobian(f)(x, u), ref, rtol=1e-6, atol=1e-8)
  np.testing.assert_allclose(jvp(f)(x, u, np.ones(4)), ref @ np.ones(4), rtol=1e-6, atol=1e-8)
  ref_u = fd_jacobian(lambda z: cartpole.step_numpy(x, z), u)
  np.testing.assert_allclose(vjp(f, 1)(x, u, np.ones(4)), ref_u.T @ np.ones(4),
                             rtol=1e-6, atol=1e-8)  # fmt: skip


def _energy(x: Tensor, p: Tensor) -> Tensor:
  return (quadrotor.step(x, p) ** 2).sum() + (x[3:6].sin() * x[9:12]).sum() * 0.5


def _energy_numpy(x: np.ndarray, p: np.ndarray) -> float:
  return float((quadrotor.step_numpy(x, p) ** 2).sum() + (np.sin(x[3:6]) * x[9:12]).sum() * 0.5)


ENERGY = av.NumericalFunction("ad_energy", _energy, (Arg(12), Arg(4)))
GRAD = gradient(ENERGY)
HESS = hessian(ENERGY)


def test_gradient_and_hessian_of_a_scalar() -> None:
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  g = GRAD(x, u)
  assert g.shape == (12,)
  np.testing.assert_allclose(g, fd_jacobian(lambda z: np.array(_energy_numpy(z, u)), x)[0], rtol=1e-6, atol=1e-8)
  h = HESS(x, u)
  np.testing.assert_allclose(h, h.T, rtol=0, atol=1e-12)
  np.testing.assert_allclose(h, fd_jacobian(lambda z: GRAD(z, u), x), rtol=1e-6, atol=1e-7)


def test_analytic_derivatives() -> None:
  quad = av.NumericalFunction("ad_quadform", lambda x, m: (x * (m @ x)).sum(), (Arg(3), Arg((3, 3))))
  m = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, -1.0], [0.0, 0.5, 4.0]])
  x = np.array([0.5, -1.0, 2.0])
  np.testing.assert_allclose(gradient(quad)(x, m), (m + m.T) @ x, rtol=1e-14)
  np.testing.assert_allclose(hessian(quad)(x, m), m + m.T, rtol=1e-14)
  np.testing.assert_allclose(gradient(quad, 1)(x, m), np.outer(x, x), rtol=1e-14)  # matrix input: shaped like it
  lin = av.NumericalFunction("ad_linear", lambda x: A_T @ x, Arg(3))
  np.testing.assert_allclose(jacobian(lin)(x), A, rtol=1e-15)


@settings(max_examples=15, deadline=None)
@given(hnp.arrays(np.float64, 3, elements=st.floats(0.1, 1.5)), hnp.arrays(np.float64, 2, elements=st.floats(-2, 2)))
def test_jacobian_on_random_inputs(x: np.ndarray, p: np.ndarray) -> None:
  ref = fd_jacobian(lambda z: mixed_numpy(z, p), x)
  np.testing.assert_allclose(jacobian(MIXED, 0, name="ad_mixed_jac_h")(x, p), ref, rtol=1e-5, atol=1e-6)


def test_derivatives_compose() -> None:
  f = av.NumericalFunction("ad_compose", lambda x: (x.sin() * x[0]).sum(), Arg(2))
  third = jacobian(hessian(f), name="ad_third")  # (4, 2): d vec(H) / dx
  x = np.array([0.4, -0.3])
  hess = hessian(f)
  np.testing.assert_allclose(third(x), fd_jacobian(lambda z: hess(z), x), rtol=1e-6, atol=1e-8)
  grad = gradient(f)
  composed = av.NumericalFunction("ad_use", lambda x: grad.fn(x) * x.sum(), Arg(2))  # a derivative inside other math
  np.testing.assert_allclose(composed(x), grad(x) * x.sum(), rtol=1e-15)
  np.testing.assert_allclose(grad(x), [np.cos(x[0]) * x[0] + np.sin(x).sum(), np.cos(x[1]) * x[0]], rtol=1e-14)


def test_vmap_one_kernel_matches_loop() -> None:
  f = av.NumericalFunction("ad_cart_step", cartpole.step, (Arg(4), Arg(1)))
  rng = np.random.default_rng(0)
  for size in (3, 40):
    fv = vmap(f, size=size)
    xs, us = rng.uniform(-1, 1, (size, 4)), rng.uniform(-5, 5, (size, 1))
    np.testing.assert_allclose(fv(xs, us), np.stack([cartpole.step_numpy(a, b) for a, b in zip(xs, us, strict=True)]),
                               rtol=1e-13, atol=1e-14)  # fmt: skip
    assert len(fv.program.kernels) == 1
  shared = vmap(f, (0, None), size=5)
  xs = rng.uniform(-1, 1, (5, 4))
  np.testing.assert_allclose(
    shared(xs, np.array([2.0])), [cartpole.step_numpy(a, np.array([2.0])) for a in xs], rtol=1e-13
  )


def test_vmap_of_quadrotor_and_of_derivatives() -> None:
  f = av.NumericalFunction("ad_quad_step", quadrotor.step, (Arg(12), Arg(4)))
  rng = np.random.default_rng(1)
  xs, us = rng.uniform(-0.5, 0.5, (6, 12)), rng.uniform(1, 2, (6, 4))
  np.testing.assert_allclose(vmap(f, size=6)(xs, us), [quadrotor.step_numpy(a, b) for a, b in zip(xs, us, strict=True)],
                             rtol=1e-13, atol=1e-14)  # fmt: skip
  jac = jacobian(f)
  batched = vmap(jac, size=6)
  np.testing.assert_allclose(
    batched(xs, us), np.stack([jac(a, b) for a, b in zip(xs, us, strict=True)]), rtol=1e-12, atol=1e-12
  )


def test_vmap_multiple_outputs_and_unbatched_outputs() -> None:
  f = av.NumericalFunction("ad_multi", lambda x, c: (x * c, c.sum(), A_T @ x, c * 2), (Arg(3), Arg(3)))
  fv = vmap(f, (0, None), size=4)
  xs, c = np.arange(12.0).reshape(4, 3), np.array([1.0, -1.0, 2.0])
  a, s, m, c2 = fv(xs, c)
  np.testing.assert_allclose(a, xs * c)
  np.testing.assert_allclose(s, np.full(4, 2.0))
  np.testing.assert_allclose(c2, np.tile(c * 2, (4, 1)))
  np.testing.assert_allclose(m, xs @ A.T)


def test_errors() -> None:
  vec = av.NumericalFunction("ad_vec", lambda x: x * 2, Arg(3))
  with pytest.raises(ValueError, match=r"gradient\(ad_vec\): the output has shape \(3,\); gradient needs a scalar"):
    gradient(vec)(np.ones(3))
  with pytest.raises(ValueError, match=r"jacobian\(ad_vec\): wrt=2 is not an input index in \[0, 1\)"):
    jacobian(vec, 2)
  ints = av.NumericalFunction("ad_int", lambda i: i.cast(av.dtypes.float64) * 2, Arg(3, av.dtypes.int32))
  with pytest.raises(TypeError, match=r"input 0 \(i\) is int; derivatives need a float input"):
    jacobian(ints)
  two = av.NumericalFunction("ad_two", lambda x: (x, x), Arg(3))
  with pytest.raises(ValueError, match="must return exactly one Tensor"):
    jacobian(two)(np.ones(3))
  with pytest.raises(ValueError, match=r"only 0 .* or None"):
    vmap(vec, 1, size=2)
  with pytest.raises(ValueError, match="size must be a positive int"):
    vmap(vec, size=0)
  with pytest.raises(TypeError, match=r"pass the batch size, e.g. vmap\(fn, size=50\)"):
    vmap(vec, (0,))
  np.testing.assert_array_equal(vmap(vec, axis_size=2, name="ad_vec_axis")(np.ones((2, 3))), np.full((2, 3), 2.0))
  assign = av.NumericalFunction("ad_assign", lambda x: x.contiguous().assign(x * 2), Arg(3))
  with pytest.raises(VmapError, match="cannot batch"):
    vmap(assign, size=2)(np.ones((2, 3)))


def more_ops(x: Tensor) -> Tensor:
  """Reductions (max away from ties, mean), sigmoid, minimum, clip inside its range, exp2/log2, integer powers."""
  r = Tensor.stack(x.max(), x.mean(), (x * x).min(), x.sigmoid().sum(), x.minimum(x * 0.5 + 2.0).sum())
  s = (x.clip(-10.0, 10.0) * 0.5).exp2() + (x * x + 1.0).log2() + x**3 - (x * 2.0).cos() / (x.abs() + 1.0)
  return r.cat(s, (x.reshape(2, 2) @ x.reshape(2, 2).T).flatten(), x[::-1] * x[1:].pad((0, 1)))


def more_ops_numpy(x: np.ndarray) -> np.ndarray:
  r = np.array([x.max(), x.mean(), (x * x).min(), (1 / (1 + np.exp(-x))).sum(), np.minimum(x, x * 0.5 + 2.0).sum()])
  s = np.exp2(np.clip(x, -10, 10) * 0.5) + np.log2(x * x + 1.0) + x**3 - np.cos(2 * x) / (np.abs(x) + 1.0)
  m = x.reshape(2, 2)
  return np.concatenate([r, s, (m @ m.T).ravel(), x[::-1] * np.pad(x[1:], (0, 1))])


@settings(max_examples=10, deadline=None)
@given(hnp.arrays(np.float64, 4, elements=st.floats(-2, 2), unique=True))
def test_more_ops_jacobian_and_hessian(x: np.ndarray) -> None:
  f = MORE
  np.testing.assert_allclose(f(x), more_ops_numpy(x), rtol=1e-12, atol=1e-12)
  ties = lambda v: np.min(np.abs(np.subtract.outer(v, v)) + np.eye(4)) < 1e-3
  if np.min(np.abs(x)) < 1e-3 or ties(x) or ties(x * x):
    return  # keep away from the kinks of abs, max and min (of x, and of x * x: x = 1 and -1 tie there)
  np.testing.assert_allclose(MORE_JAC(x), fd_jacobian(more_ops_numpy, x), rtol=1e-5, atol=1e-6)
  total = lambda y: more_ops_numpy(y).sum()
  reference = fd_jacobian(lambda z: fd_jacobian(total, z)[0], x, h=1e-4)
  np.testing.assert_allclose(MORE_HESS(x), reference, rtol=1e-3, atol=1e-3)


MORE = av.NumericalFunction("ad_more", more_ops, Arg(4))
MORE_JAC = jacobian(MORE)
MORE_HESS = hessian(av.NumericalFunction("ad_more_sum", lambda x: more_ops(x).sum(), Arg(4)))
