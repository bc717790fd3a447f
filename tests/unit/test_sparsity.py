"""Structural Jacobian/Hessian sparsity from traced graphs: exact counts, numeric cross-checks, masks and errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse
import tinygrad
from tinygrad import Tensor, dtypes

import anvil  # noqa: F401  (sets tinygrad's NULL tracing device and float64 default)
from anvil.ad.sparsity import SparsityError, constant_derivatives, hessian_sparsity, jacobian_sparsity
from anvil.problems import cartpole, quadrotor

Array = np.ndarray


def vec(*shape: int) -> Tensor:
  return Tensor.empty(*shape, dtype=dtypes.float64)


def dense(a: scipy.sparse.csc_array) -> Array:
  return a.toarray().astype(bool)


def fd_jacobian(f: Callable[[Array], Array], x: Array, h: float = 1e-6) -> Array:
  return np.stack([(np.ravel(f(x + h * e)) - np.ravel(f(x - h * e))) / (2 * h) for e in np.eye(len(x))], axis=1)


def fd_hessian(f: Callable[[Array], float], x: Array, h: float = 1e-4) -> Array:
  """Upper triangle of the Hessian of a scalar function by central second differences."""
  n, e = len(x), np.eye(len(x)) * h
  hess = np.zeros((n, n))
  for i in range(n):
    for j in range(i, n):
      hess[i, j] = (f(x + e[i] + e[j]) - f(x + e[i] - e[j]) - f(x - e[i] + e[j]) + f(x - e[i] - e[j])) / (4 * h * h)
  return hess


# ---- P2 cart-pole multiple shooting: w = [x0, u0, x1, u1, ..., x_{N-1}, u_{N-1}, x_N] ----


def defects_unrolled(w: Tensor, x_init: Tensor, n: int) -> Tensor:
  xs = [w[5 * k : 5 * k + 4] for k in range(n + 1)]
  return Tensor.cat(xs[0] - x_init, *[xs[k + 1] - cartpole.step(xs[k], w[5 * k + 4 : 5 * k + 5]) for k in range(n)])


def defects_batched(w: Tensor, x_init: Tensor, n: int) -> Tensor:
  stages = w[: 5 * n].reshape(n, 5)
  x, u = stages[:, :4], stages[:, 4:]
  x_next = Tensor.cat(x[1:], w[5 * n :].reshape(1, 4))
  # NOTE: the model indexes x[1]; on (4, N) columns that is the row of all stages, so one trace covers every stage
  return Tensor.cat(x[0] - x_init, (x_next - cartpole.step(x.T, u.T).T).reshape(-1))


def cost_unrolled(w: Tensor, n: int) -> Tensor:
  q = Tensor(np.diag(cartpole.Q).copy())
  return Tensor.stack(*[(w[5 * k : 5 * k + 4] ** 2 * q).sum() + cartpole.R * w[5 * k + 4] ** 2 for k in range(n)]).sum()


def cost_batched(w: Tensor, n: int) -> Tensor:
  stages = w[: 5 * n].reshape(n, 5)
  return (stages[:, :4] ** 2 * Tensor(np.diag(cartpole.Q).copy())).sum() + cartpole.R * (stages[:, 4] ** 2).sum()


FORMS = {"unrolled": (defects_unrolled, cost_unrolled), "batched": (defects_batched, cost_batched)}


def cartpole_patterns(form: str, n: int) -> tuple[scipy.sparse.csc_array, scipy.sparse.csc_array]:
  defects, cost = FORMS[form]
  w, x_init, lam = vec(5 * n + 4), vec(4), vec(4 * n + 4)
  jac = jacobian_sparsity([defects(w, x_init, n).uop], [w.uop, x_init.uop], 0)
  lagrangian = cost(w, n) + (lam * defects(w, x_init, n)).sum()
  return jac, hessian_sparsity(lagrangian.uop, [w.uop, x_init.uop, lam.uop], 0)


def defects_numpy(w: Array, x_init: Array, n: int) -> Array:
  xs = [w[5 * k : 5 * k + 4] for k in range(n + 1)]
  steps = [xs[k + 1] - cartpole.step_numpy(xs[k], w[5 * k + 4 : 5 * k + 5]) for k in range(n)]
  return np.concatenate([xs[0] - x_init, *steps])


def lagrangian_numpy(w: Array, x_init: Array, lam: Array, n: int) -> float:
  stages = w[: 5 * n].reshape(n, 5)
  cost = np.sum(stages[:, :4] ** 2 * np.diag(cartpole.Q)) + cartpole.R * np.sum(stages[:, 4] ** 2)
  return float(cost + lam @ defects_numpy(w, x_init, n))


@pytest.mark.parametrize("n", [5, 20])
@pytest.mark.parametrize("form", ["unrolled", "batched"])
def test_cartpole_exact_counts(form: str, n: int) -> None:
  jac, hess = cartpole_patterns(form, n)
  assert jac.shape == (4 * n + 4, 5 * n + 4) and jac.nnz == 19 * n + 4
  assert hess.shape == (5 * n + 4, 5 * n + 4) and hess.nnz == 8 * n


@pytest.mark.parametrize("n", [5, 20])
def test_cartpole_unrolled_equals_batched(n: int) -> None:
  (ju, hu), (jb, hb) = cartpole_patterns("unrolled", n), cartpole_patterns("batched", n)
  assert (ju != jb).nnz == 0 and (hu != hb).nnz == 0


def test_cartpole_n50_batched() -> None:
  jac, hess = cartpole_patterns("batched", 50)
  assert (jac.nnz, hess.nnz) == (19 * 50 + 4, 8 * 50)


def test_cartpole_matches_finite_differences() -> None:
  n, rng = 3, np.random.default_rng(0)
  jac, hess = cartpole_patterns("batched", n)
  w, x_init, lam = rng.standard_normal(5 * n + 4), rng.standard_normal(4), 10 * rng.standard_normal(4 * n + 4)
  numeric_jac = np.abs(fd_jacobian(lambda v: defects_numpy(v, x_init, n), w)) > 1e-7
  numeric_hess = np.abs(fd_hessian(lambda v: lagrangian_numpy(v, x_init, lam, n), w)) > 1e-5
  assert np.array_equal(dense(jac), numeric_jac)
  assert np.array_equal(dense(hess), numeric_hess)


def test_cartpole_gradient_in_graph() -> None:
  """The Jacobian of tinygrad's gradient of the Lagrangian is exactly the (full, symmetric) Hessian pattern."""
  n = 5
  for form in ("unrolled", "batched"):
    defects, cost = FORMS[form]
    w, x_init, lam = vec(5 * n + 4), vec(4), vec(4 * n + 4)
    grad = (cost(w, n) + (lam * defects(w, x_init, n)).sum()).gradient(w)[0]
    jac = jacobian_sparsity([grad.uop], [w.uop, x_init.uop, lam.uop], 0)
    _, hess = cartpole_patterns(form, n)
    assert (jac != (hess + hess.T).astype(bool)).nnz == 0


def test_batched_n200_is_fast() -> None:
  n = 200
  w, x_init, lam = vec(5 * n + 4), vec(4), vec(4 * n + 4)
  g = defects_batched(w, x_init, n)
  lagrangian = cost_batched(w, n) + (lam * defects_batched(w, x_init, n)).sum()
  start = time.perf_counter()
  jac = jacobian_sparsity([g.uop], [w.uop, x_init.uop], 0)
  hess = hessian_sparsity(lagrangian.uop, [w.uop, x_init.uop, lam.uop], 0)
  assert time.perf_counter() - start < 1.0
  assert (jac.nnz, hess.nnz) == (19 * n + 4, 8 * n)


# ---- P1 quadrotor ----


def quadrotor_patterns() -> tuple[scipy.sparse.csc_array, scipy.sparse.csc_array]:
  z, lam = vec(16), vec(12)
  y = quadrotor.step(z[:12], z[12:])
  return jacobian_sparsity([y.uop], [z.uop], 0), hessian_sparsity((y * lam).sum().uop, [z.uop, lam.uop], 0)


@pytest.mark.parametrize("h", [quadrotor.H, 0.3])
def test_quadrotor_contains_finite_differences(h: float, monkeypatch: pytest.MonkeyPatch) -> None:
  # NOTE: with h = 0.02 some couplings are O(h^3) and drown in finite-difference noise; a long step makes them visible
  monkeypatch.setattr(quadrotor, "H", h)
  jac, hess = quadrotor_patterns()
  rng = np.random.default_rng(1)
  z, lam = np.concatenate([quadrotor.TEST_X, quadrotor.TEST_U]) + 0.1 * rng.standard_normal(16), rng.standard_normal(12)
  step = lambda v: quadrotor.step_numpy(v[:12], v[12:])
  numeric_jac = np.abs(fd_jacobian(step, z)) > 1e-8
  numeric_hess = np.abs(fd_hessian(lambda v: float(lam @ step(v)), z)) > 1e-5
  assert not (numeric_jac & ~dense(jac)).any() and not (numeric_hess & ~dense(hess)).any()
  assert (jac.nnz, hess.nnz) == (116, 55)  # of 192 and 136 dense
  if h == 0.3:
    # r' = (tau_z - (p*JY*q - q*JX*p)) / JZ cancels exactly because JX == JY: the only structural-only entries
    assert np.argwhere(dense(jac) & ~numeric_jac).tolist() == [[11, 9], [11, 10]]
    assert np.array_equal(dense(hess), numeric_hess)


def test_quadrotor_separate_inputs() -> None:
  x, u = vec(12), vec(4)
  y = quadrotor.step(x, u)
  jx, ju = (jacobian_sparsity([y.uop], [x.uop, u.uop], wrt) for wrt in (0, 1))
  combined, _ = quadrotor_patterns()
  assert (scipy.sparse.hstack([jx, ju]) != combined).nnz == 0


# ---- masks and constant folding ----


def outer(x: Tensor) -> Tensor:
  return x[:, None] * x[None, :]


@pytest.mark.parametrize(
  ("fn", "jac_nnz", "hess_nnz"),
  [
    (lambda x: Tensor.eye(4) * outer(x), 4, 4),
    (lambda x: outer(x).triu(), 16, 10),
    (lambda x: (Tensor.arange(4) < 2).where(x, x * x), 4, 2),
    (lambda x: x.flip(0) * x, 8, 2),
  ],
  ids=["eye", "triu", "where_arange", "flip"],
)
def test_masks(fn: Callable[[Tensor], Tensor], jac_nnz: int, hess_nnz: int) -> None:
  x = vec(4)
  y = fn(x)
  assert jacobian_sparsity([y.uop], [x.uop], 0).nnz == jac_nnz
  assert hessian_sparsity(y.uop, [x.uop], 0).nnz == hess_nnz


def test_captured_matrix_zeros_are_exact() -> None:
  a = np.random.default_rng(2).standard_normal((5, 4)) * (np.arange(20).reshape(5, 4) % 3 != 0)
  x = vec(4)
  y = Tensor(a) @ x
  assert np.array_equal(dense(jacobian_sparsity([y.uop], [x.uop], 0)), a != 0)
  rows = [np.flatnonzero(r) for r in a]
  expected = np.zeros((4, 4), bool)
  for r in rows:
    expected[np.ix_(r, r)] = True
  assert np.array_equal(dense(hessian_sparsity((y * y).sum().uop, [x.uop], 0)), np.triu(expected))


def test_dense_function_gives_full_pattern() -> None:
  x = vec(4)
  y = (Tensor(np.random.default_rng(3).standard_normal((3, 4))) @ x).sin()
  assert jacobian_sparsity([y.uop], [x.uop], 0).nnz == 12
  assert hessian_sparsity(y.sum().uop, [x.uop], 0).nnz == 10


def test_other_inputs_are_unknown_not_constant() -> None:
  x, y = vec(4), vec(4)
  picked = (y > 0).where(x, x * x)
  assert jacobian_sparsity([picked.uop], [x.uop, y.uop], 0).nnz == 4
  assert hessian_sparsity(picked.sum().uop, [x.uop, y.uop], 0).nnz == 4  # both branches, unlike arange < 2
  scaled = (x * y).sum()
  assert hessian_sparsity(scaled.uop, [x.uop, y.uop], 0).nnz == 0
  assert dense(hessian_sparsity(scaled.uop, [x.uop, y.uop], 1)).sum() == 0
  assert np.array_equal(dense(jacobian_sparsity([(x * y).uop], [x.uop, y.uop], 1)), np.eye(4, dtype=bool))


def test_independent_outputs_and_absent_inputs() -> None:
  x, y, z = vec(3), vec(2), vec(5)
  outs = [(x * 2).sin(), y.exp()]
  jac = dense(jacobian_sparsity([o.uop for o in outs], [x.uop, y.uop, z.uop], 1))
  assert jac.shape == (5, 2) and not jac[:3].any() and np.array_equal(jac[3:], np.eye(2, dtype=bool))
  absent = jacobian_sparsity([o.uop for o in outs], [x.uop, y.uop, z.uop], 2)
  assert absent.shape == (5, 5) and absent.nnz == 0
  assert hessian_sparsity(outs[0].sum().uop, [x.uop, y.uop, z.uop], 2).nnz == 0


def test_nd_input_and_format() -> None:
  x = vec(3, 2)
  y = x.T.reshape(-1) * Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
  jac = jacobian_sparsity([y.uop, x.sum().uop], [x.uop], 0)
  assert isinstance(jac, scipy.sparse.csc_array) and jac.dtype == bool and jac.has_sorted_indices
  expected = np.zeros((7, 6), bool)
  expected[np.arange(6), np.arange(6).reshape(3, 2).T.reshape(-1)] = True
  expected[6] = True
  assert np.array_equal(dense(jac), expected)
  hess = hessian_sparsity((x.reshape(-1) * x.reshape(-1)[::-1]).sum().uop, [x.uop], 0)
  assert isinstance(hess, scipy.sparse.csc_array) and hess.has_sorted_indices
  assert np.array_equal(dense(hess), np.triu(np.eye(6, dtype=bool)[::-1]))


def test_creation_ops_and_detach() -> None:
  x = vec(4)
  y = x * Tensor.full((4,), 2.0) + Tensor.ones(4) - Tensor.zeros(4)
  assert np.array_equal(dense(jacobian_sparsity([y.uop], [x.uop], 0)), np.eye(4, dtype=bool))
  # NOTE: DETACH cuts dependencies, as tinygrad's gradient does
  d = x * x.detach()
  assert jacobian_sparsity([d.uop], [x.uop], 0).nnz == 4 and hessian_sparsity(d.sum().uop, [x.uop], 0).nnz == 0


def test_casts_keep_dependencies_like_tinygrads_gradient() -> None:
  """tinygrad's reverse mode passes gradients straight through casts (even to ints); comparisons give zero."""
  x = vec(3)
  truncated = x.cast(dtypes.int32).cast(dtypes.float64) * x
  assert hessian_sparsity(truncated.sum().uop, [x.uop], 0).nnz == 3
  masked = (x > 0).cast(dtypes.float64) * x
  assert jacobian_sparsity([masked.uop], [x.uop], 0).nnz == 3
  assert hessian_sparsity(masked.sum().uop, [x.uop], 0).nnz == 0


def test_product_reduction() -> None:
  x = vec(4)
  assert jacobian_sparsity([x.prod().uop], [x.uop], 0).nnz == 4
  assert np.array_equal(dense(hessian_sparsity(x.prod().uop, [x.uop], 0)), np.triu(np.ones((4, 4), bool), 1))
  pairs = x.reshape(2, 2).prod(0)  # x0*x2, x1*x3
  expected = np.zeros((4, 4), bool)
  expected[0, 2] = expected[1, 3] = True
  assert np.array_equal(dense(hessian_sparsity(pairs.uop, [x.uop], 0)), expected)


# ---- small random functions against finite differences of numpy twins ----

SPARSE_A = np.array([[1.0, 0, 2, 0, 0, 0], [0, 0, 0, 3, 0, 1], [0, 4, 0, 0, 0, 0]])
EXACT: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Array], Array]]] = {
  "sin_products": (lambda x: (x[:3] * x[3:]).sin(), lambda x: np.sin(x[:3] * x[3:])),
  "stack_math": (
    lambda x: Tensor.stack(x[0] * x[1], (x[2] / x[3]).exp(), x[4].sqrt(), x[5].log() * x[0], x[1].cos()),
    lambda x: np.array([x[0] * x[1], np.exp(x[2] / x[3]), np.sqrt(x[4]), np.log(x[5]) * x[0], np.cos(x[1])]),
  ),
  "sparse_matvec": (
    lambda x: (Tensor(SPARSE_A) @ x).tanh() * x[::-2],
    lambda x: np.tanh(SPARSE_A @ x) * x[::-2],
  ),
  "cat_pow": (
    lambda x: Tensor.cat(x[:2].exp(), x[2:4] ** 3, x[4:].maximum(0.2) * x[0], x[1:3].sigmoid()),
    lambda x: np.concatenate([np.exp(x[:2]), x[2:4] ** 3, np.maximum(x[4:], 0.2) * x[0], 1 / (1 + np.exp(-x[1:3]))]),
  ),
  "transpose_matmul": (lambda x: x.reshape(2, 3).T @ x[:2], lambda x: x.reshape(2, 3).T @ x[:2]),
  "pad_shift": (
    lambda x: x.pad((1, 1)) * x.pad((2, 0)),
    lambda x: np.pad(x, (1, 1)) * np.pad(x, (2, 0)),
  ),
  "cumsum_sigmoid": (lambda x: x.sigmoid().cumsum(0), lambda x: np.cumsum(1 / (1 + np.exp(-x)))),
  "steps_negative": (
    lambda x: (x[::2] - x[1::2]) ** 2 + x[-1:] * x[::-3].sum(),
    lambda x: (x[::2] - x[1::2]) ** 2 + x[-1:] * x[::-3].sum(),
  ),
  "antidiagonal_eye": (
    lambda x: (Tensor.eye(6).flip(0) * outer(x)).sum(1),
    lambda x: (np.eye(6)[::-1] * np.outer(x, x)).sum(1),
  ),
  "where_arange": (
    lambda x: (Tensor.arange(6) < 3).where(x.sin(), x * x[0]),
    lambda x: np.where(np.arange(6) < 3, np.sin(x), x * x[0]),
  ),
  "expand_permute": (
    lambda x: x.reshape(2, 1, 3).expand(2, 2, 3).permute(2, 1, 0).reshape(-1)[3:9] * x.abs(),
    lambda x: np.broadcast_to(x.reshape(2, 1, 3), (2, 2, 3)).transpose(2, 1, 0).reshape(-1)[3:9] * np.abs(x),
  ),
  "softmax_pow_mean": (
    lambda x: Tensor.cat(x[:3].softmax(), x[3:5].pow(x[5:6]), x.mean().reshape(1) * x[1]),
    lambda x: np.concatenate([np.exp(x[:3]) / np.exp(x[:3]).sum(), x[3:5] ** x[5], [x.mean() * x[1]]]),
  ),
  "floor_mod": (
    lambda x: x.floor() * x + (x % 0.7) * x[0],
    lambda x: np.floor(x) * x + np.mod(x, 0.7) * x[0],
  ),
  "gradient_in_graph": (
    lambda x: (x[:3] * x[3:] * x[::-1][:3]).sin().sum().gradient(x)[0],
    lambda x: _gradient_numpy(x),
  ),
}


def _gradient_numpy(x: Array) -> Array:
  """d/dx of sum(sin(x[:3] * x[3:] * x[::-1][:3])): term i is sin(x_i * x_{i+3} * x_{5-i})."""
  grad = np.zeros(6)
  for i in range(3):
    idx = [i, i + 3, 5 - i]
    c = np.cos(np.prod(x[idx]))
    for k in idx:
      grad[k] += c * np.prod(x[idx]) / x[k]
  return grad


@pytest.mark.parametrize("name", list(EXACT))
def test_random_functions_match_finite_differences(name: str) -> None:
  fn, fn_np = EXACT[name]
  x = vec(6)
  y = fn(x)
  weights = np.random.default_rng(4).uniform(0.5, 1.5, int(np.prod(y.shape)))
  jac = jacobian_sparsity([y.uop], [x.uop], 0)
  hess = hessian_sparsity((y.reshape(-1) * Tensor(weights)).sum().uop, [x.uop], 0)
  for seed in range(3):
    point = np.random.default_rng(seed).uniform(0.5, 1.5, 6)
    numeric_jac = np.abs(fd_jacobian(fn_np, point)) > 1e-7
    numeric_hess = np.abs(fd_hessian(lambda v: float(weights @ np.ravel(fn_np(v))), point)) > 1e-5
    assert np.array_equal(dense(jac), numeric_jac), name
    assert np.array_equal(dense(hess), numeric_hess), name


def test_piecewise_linear_ops_are_conservative() -> None:
  """max/min/relu count as linear in every argument: the pattern contains every active piece."""
  x = vec(6)
  y = Tensor.cat(x.reshape(3, 2).max(1), x[:2].minimum(x[4:]), (x[2:4] - 1).relu() * x[0])
  jac = dense(jacobian_sparsity([y.uop], [x.uop], 0))

  def fn_np(v: Array) -> Array:
    return np.concatenate([v.reshape(3, 2).max(1), np.minimum(v[:2], v[4:]), np.maximum(v[2:4] - 1, 0) * v[0]])

  for seed in range(3):
    point = np.random.default_rng(seed).uniform(0.5, 1.5, 6)
    assert not ((np.abs(fd_jacobian(fn_np, point)) > 1e-7) & ~jac).any()
  assert jac.sum() == 6 + 4 + 4


# ---- errors ----


def test_unsupported_ops_raise_naming_the_op() -> None:
  x = vec(4)
  with pytest.raises(SparsityError, match="BITCAST"):
    jacobian_sparsity([x.bitcast(dtypes.int64).bitcast(dtypes.float64).uop], [x.uop], 0)
  with pytest.raises(SparsityError, match="GETTUPLE"):
    jacobian_sparsity([tinygrad.function(lambda a: a * 2)(x).uop], [x.uop], 0)
  buf = vec(4).uop
  partial = buf.after(buf.shrink(((1, 3),)).store(x.uop.shrink(((0, 2),)) * 2))
  with pytest.raises(SparsityError, match="AFTER"):
    hessian_sparsity(partial, [x.uop], 0)


@pytest.mark.parametrize("wrt", [-1, 2, True, 1.0])
def test_bad_wrt(wrt: Any) -> None:
  x, y = vec(2), vec(2)
  with pytest.raises(ValueError, match="wrt"):
    jacobian_sparsity([(x * y).uop], [x.uop, y.uop], wrt)


def test_constant_derivatives_are_found_and_curved_ones_are_not() -> None:
  x, p = Tensor.empty(3, dtype=dtypes.float64), Tensor.empty(2, dtype=dtypes.float64)
  rows = [
    x[1] - 2 * x[0],  # affine
    x[0] * x[1],  # curved in both
    x[2].sin() + 3 * x[1],  # curved in x2, affine in x1
    p[0] * x[0],  # the coefficient is another input
    (x * Tensor([1.0, 2.0, 0.0])).sum(),  # a known zero coefficient
    x[2:3].cat(x[0:2])[1] * 4,  # movements
    x[0] / 2,
    (x[1] > 0).where(x[0], x[1]),  # a branch on the point
  ]
  got = constant_derivatives([Tensor.stack(*rows).uop], [x.uop, p.uop], 0, np.eye(3))
  nan = np.nan
  expected = [[-2, 1, 0], [nan, nan, 0], [0, 3, nan], [nan, 0, 0], [1, 2, 0], [4, 0, 0], [0.5, 0, 0], [nan, nan, 0]]
  np.testing.assert_array_equal(got, np.array(expected, dtype=np.float64))
