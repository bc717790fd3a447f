"""Numerical agreement of generated C++ with numpy.

Every compiled function here is checked against independent numpy math: 1e-12 (relative and absolute) for float64,
1e-5 for float32. Several ops share one compiled function with many outputs, and the functions are built once at
module level (anvil compiles lazily, on the first call), so hypothesis only generates input values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import anvil as av
from anvil import Arg, Tensor, dtypes
from anvil.ad import gradient
from anvil.problems import cartpole, quadrotor

F64: dict[str, Any] = {"rtol": 1e-12, "atol": 1e-12}
F32: dict[str, Any] = {"rtol": 1e-5, "atol": 1e-5}
SETTINGS = settings(max_examples=25, deadline=None)
RNG = np.random.default_rng(20240611)


def floats64(lo: float, hi: float, shape: int | tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
  """float64 arrays of `shape` with finite elements in [lo, hi]."""
  elements = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
  return hnp.arrays(np.float64, shape, elements=elements)


def floats32(lo: float, hi: float, shape: int | tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
  """float32 arrays of `shape` with finite elements in [lo, hi]."""
  elements = st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=32)
  return hnp.arrays(np.float32, shape, elements=elements)


def check_outputs(
  outs: tuple[np.ndarray, ...], expected: list[tuple[str, Any]], tol: dict[str, Any], dtype: type
) -> None:
  """Each output has the expected dtype and shape and matches its numpy reference within `tol`."""
  assert isinstance(outs, tuple)
  assert len(outs) == len(expected)
  for out, (name, ref) in zip(outs, expected, strict=True):
    ref = np.asarray(ref)
    assert isinstance(out, np.ndarray), name
    assert out.dtype == dtype, f"{name}: dtype {out.dtype}, expected {np.dtype(dtype)}"
    assert out.shape == ref.shape, f"{name}: shape {out.shape}, expected {ref.shape}"
    np.testing.assert_allclose(out, ref, **tol, err_msg=name)


# *** elementwise math ***

# NOTE: (name, tinygrad op, numpy op) on (x, y, p): x and y anywhere in [-10, 10], p positive.
Op = tuple[str, Callable[..., Any], Callable[..., Any]]
ELEMENTWISE: list[Op] = [
  ("sin", lambda x, y, p: x.sin(), lambda x, y, p: np.sin(x)),
  ("cos", lambda x, y, p: x.cos(), lambda x, y, p: np.cos(x)),
  ("sin_cos_same_arg", lambda x, y, p: x.sin() * x.cos(), lambda x, y, p: np.sin(x) * np.cos(x)),
  ("exp", lambda x, y, p: x.exp(), lambda x, y, p: np.exp(x)),
  ("log", lambda x, y, p: p.log(), lambda x, y, p: np.log(p)),
  ("sqrt", lambda x, y, p: p.sqrt(), lambda x, y, p: np.sqrt(p)),
  ("rsqrt", lambda x, y, p: p.rsqrt(), lambda x, y, p: 1 / np.sqrt(p)),
  ("exp2", lambda x, y, p: x.exp2(), lambda x, y, p: np.exp2(x)),
  ("log2", lambda x, y, p: p.log2(), lambda x, y, p: np.log2(p)),
  ("pow_tensor", lambda x, y, p: p**y, lambda x, y, p: np.power(p, y)),
  ("pow_2_5", lambda x, y, p: p**2.5, lambda x, y, p: np.power(p, 2.5)),
  ("pow_neg_half", lambda x, y, p: p**-0.5, lambda x, y, p: np.power(p, -0.5)),
  ("pow_int_2", lambda x, y, p: x**2, lambda x, y, p: x * x),
  ("pow_int_3", lambda x, y, p: x**3, lambda x, y, p: x * x * x),
  ("square", lambda x, y, p: x.square(), lambda x, y, p: x * x),
  ("tanh", lambda x, y, p: x.tanh(), lambda x, y, p: np.tanh(x)),
  ("sigmoid", lambda x, y, p: x.sigmoid(), lambda x, y, p: 1 / (1 + np.exp(-x))),
  ("abs", lambda x, y, p: x.abs(), lambda x, y, p: np.abs(x)),
  ("sign", lambda x, y, p: x.sign(), lambda x, y, p: np.sign(x)),
  ("relu", lambda x, y, p: x.relu(), lambda x, y, p: np.maximum(x, 0)),
  ("maximum", lambda x, y, p: x.maximum(y), lambda x, y, p: np.maximum(x, y)),
  ("minimum", lambda x, y, p: x.minimum(y), lambda x, y, p: np.minimum(x, y)),
  ("maximum_const", lambda x, y, p: x.maximum(0.5), lambda x, y, p: np.maximum(x, 0.5)),
  ("where", lambda x, y, p: (x > y).where(x, y * 2), lambda x, y, p: np.where(x > y, x, y * 2)),
  ("where_const", lambda x, y, p: (x < 0).where(1.5, p), lambda x, y, p: np.where(x < 0, 1.5, p)),
  ("neg", lambda x, y, p: -x, lambda x, y, p: -x),
  ("add", lambda x, y, p: x + y, lambda x, y, p: x + y),
  ("sub", lambda x, y, p: x - y, lambda x, y, p: x - y),
  ("mul", lambda x, y, p: x * y, lambda x, y, p: x * y),
  ("reciprocal", lambda x, y, p: p.reciprocal(), lambda x, y, p: 1 / p),
  ("div", lambda x, y, p: x / p, lambda x, y, p: x / p),
  ("rdiv", lambda x, y, p: 3.0 / p, lambda x, y, p: 3.0 / p),
  ("clip", lambda x, y, p: x.clip(-0.5, 2.0), lambda x, y, p: np.clip(x, -0.5, 2.0)),
  ("clamp_min", lambda x, y, p: x.clamp(min_=1.0), lambda x, y, p: np.maximum(x, 1.0)),
  ("clamp_max", lambda x, y, p: x.clamp(max_=-1.0), lambda x, y, p: np.minimum(x, -1.0)),
  ("floor", lambda x, y, p: x.floor(), lambda x, y, p: np.floor(x)),
  ("ceil", lambda x, y, p: x.ceil(), lambda x, y, p: np.ceil(x)),
  ("trunc", lambda x, y, p: x.trunc(), lambda x, y, p: np.trunc(x)),
  (
    "composite",
    lambda x, y, p: (x * y).sin() + p.sqrt() * x.exp() / (1 + y * y),
    lambda x, y, p: np.sin(x * y) + np.sqrt(p) * np.exp(x) / (1 + y * y),
  ),
]
N_EW = 7

ew64 = av.NumericalFunction(
  "num_elementwise_f64",
  lambda x, y, p: tuple(op(x, y, p) for _, op, _ in ELEMENTWISE),
  (Arg(N_EW), Arg(N_EW), Arg(N_EW)),
)
ew32 = av.NumericalFunction(
  "num_elementwise_f32",
  lambda x, y, p: tuple(op(x, y, p) for _, op, _ in ELEMENTWISE),
  (Arg(N_EW, dtypes.float32), Arg(N_EW, dtypes.float32), Arg(N_EW, dtypes.float32)),
)


def expected_elementwise(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> list[tuple[str, Any]]:
  x, y, p = (a.astype(np.float64) for a in (x, y, p))
  return [(name, ref(x, y, p)) for name, _, ref in ELEMENTWISE]


def test_elementwise_float64_fixed_values() -> None:
  x = np.array([-3.7, -1.0, -0.25, 0.0, 0.5, 2.0, 9.5])
  y = np.array([2.0, -1.0, 0.75, -2.5, 0.5, 3.25, -9.0])
  p = np.array([0.1, 0.5, 1.0, 1.5, 2.0, 4.0, 10.0])
  check_outputs(ew64(x, y, p), expected_elementwise(x, y, p), F64, np.float64)


@SETTINGS
@given(x=floats64(-10, 10, N_EW), y=floats64(-10, 10, N_EW), p=floats64(0.1, 10, N_EW))
def test_elementwise_float64(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> None:
  check_outputs(ew64(x, y, p), expected_elementwise(x, y, p), F64, np.float64)


@SETTINGS
@given(x=floats32(-10, 10, N_EW), y=floats32(-4, 4, N_EW), p=floats32(0.125, 10, N_EW))
def test_elementwise_float32(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> None:
  check_outputs(ew32(x, y, p), expected_elementwise(x, y, p), F32, np.float32)


# *** reductions ***

REDUCTIONS: list[Op] = [
  ("sum", lambda a, t: a.sum(), lambda a, t: a.sum()),
  ("sum_axis0", lambda a, t: a.sum(0), lambda a, t: a.sum(0)),
  ("sum_axis1", lambda a, t: a.sum(axis=1), lambda a, t: a.sum(1)),
  ("sum_axis_neg1_keepdim", lambda a, t: a.sum(-1, keepdim=True), lambda a, t: a.sum(-1, keepdims=True)),
  ("sum_keepdim_all", lambda a, t: a.sum(keepdim=True), lambda a, t: a.sum(keepdims=True)),
  ("max", lambda a, t: a.max(), lambda a, t: a.max()),
  ("max_axis0", lambda a, t: a.max(0), lambda a, t: a.max(0)),
  ("max_axis1_keepdim", lambda a, t: a.max(1, keepdim=True), lambda a, t: a.max(1, keepdims=True)),
  ("min", lambda a, t: a.min(), lambda a, t: a.min()),
  ("min_axis1", lambda a, t: a.min(1), lambda a, t: a.min(1)),
  ("min_axis0_keepdim", lambda a, t: a.min(0, keepdim=True), lambda a, t: a.min(0, keepdims=True)),
  ("mean", lambda a, t: a.mean(), lambda a, t: a.mean()),
  ("mean_axis0", lambda a, t: a.mean(0), lambda a, t: a.mean(0)),
  ("mean_axis1_keepdim", lambda a, t: a.mean(1, keepdim=True), lambda a, t: a.mean(1, keepdims=True)),
  ("sum_3d_axes02", lambda a, t: t.sum((0, 2)), lambda a, t: t.sum((0, 2))),
  ("max_3d_last", lambda a, t: t.max(axis=-1), lambda a, t: t.max(-1)),
  ("min_3d_axis1", lambda a, t: t.min(axis=1), lambda a, t: t.min(1)),
  ("mean_3d_keepdim", lambda a, t: t.mean(axis=(1, 2), keepdim=True), lambda a, t: t.mean((1, 2), keepdims=True)),
  ("prod_axis1", lambda a, t: a.prod(1), lambda a, t: a.prod(1)),
  ("var", lambda a, t: a.var(), lambda a, t: a.var(ddof=1)),
  ("std_axis1", lambda a, t: a.std(1), lambda a, t: a.std(1, ddof=1)),
  ("cumsum_axis1", lambda a, t: a.cumsum(1), lambda a, t: a.cumsum(1)),
  (
    "logsumexp_axis1",
    lambda a, t: a.logsumexp(1),
    lambda a, t: np.log(np.exp(a).sum(1)),
  ),
  (
    "softmax_axis1",
    lambda a, t: a.softmax(1),
    lambda a, t: np.exp(a) / np.exp(a).sum(1, keepdims=True),
  ),
  ("sum_of_squares", lambda a, t: (a * a).sum(0), lambda a, t: (a * a).sum(0)),
]
A_SHAPE, T_SHAPE = (3, 4), (2, 3, 4)

red64 = av.NumericalFunction(
  "num_reductions_f64",
  lambda a, t: tuple(op(a, t) for _, op, _ in REDUCTIONS),
  (Arg(A_SHAPE), Arg(T_SHAPE)),
)
red32 = av.NumericalFunction(
  "num_reductions_f32",
  lambda a, t: tuple(op(a, t) for _, op, _ in REDUCTIONS),
  (Arg(A_SHAPE, dtypes.float32), Arg(T_SHAPE, dtypes.float32)),
)


def expected_reductions(a: np.ndarray, t: np.ndarray) -> list[tuple[str, Any]]:
  a, t = a.astype(np.float64), t.astype(np.float64)
  return [(name, ref(a, t)) for name, _, ref in REDUCTIONS]


def test_reductions_float64_fixed_values() -> None:
  a = np.arange(12.0).reshape(A_SHAPE) * 0.37 - 2.0
  t = np.cos(np.arange(24.0)).reshape(T_SHAPE) * 3
  check_outputs(red64(a, t), expected_reductions(a, t), F64, np.float64)


@SETTINGS
@given(a=floats64(-5, 5, A_SHAPE), t=floats64(-5, 5, T_SHAPE))
def test_reductions_float64(a: np.ndarray, t: np.ndarray) -> None:
  check_outputs(red64(a, t), expected_reductions(a, t), F64, np.float64)


@SETTINGS
@given(a=floats32(-1, 1, A_SHAPE), t=floats32(-1, 1, T_SHAPE))
def test_reductions_float32(a: np.ndarray, t: np.ndarray) -> None:
  check_outputs(red32(a, t), expected_reductions(a, t), F32, np.float32)


# *** matmul and dot ***

MATMUL: list[Op] = [
  ("matrix_vector", lambda a, b, x, y, t: a @ x, lambda a, b, x, y, t: a @ x),
  ("matrix_matrix", lambda a, b, x, y, t: a @ b, lambda a, b, x, y, t: a @ b),
  ("vector_matrix", lambda a, b, x, y, t: y @ a, lambda a, b, x, y, t: y @ a),
  ("transposed_matrix_vector", lambda a, b, x, y, t: a.T @ y, lambda a, b, x, y, t: a.T @ y),
  ("gram", lambda a, b, x, y, t: a @ a.T, lambda a, b, x, y, t: a @ a.T),
  ("gram_t", lambda a, b, x, y, t: a.T @ a, lambda a, b, x, y, t: a.T @ a),
  ("product_transposed", lambda a, b, x, y, t: (a @ b).T, lambda a, b, x, y, t: (a @ b).T),
  ("dot_vectors", lambda a, b, x, y, t: x.dot(x), lambda a, b, x, y, t: np.dot(x, x)),
  ("dot_matrix", lambda a, b, x, y, t: a.dot(b), lambda a, b, x, y, t: np.dot(a, b)),
  ("batched", lambda a, b, x, y, t: t @ b, lambda a, b, x, y, t: t @ b),
  ("chain", lambda a, b, x, y, t: y @ (a @ b), lambda a, b, x, y, t: y @ (a @ b)),
  ("matmul_method", lambda a, b, x, y, t: a.matmul(x), lambda a, b, x, y, t: a @ x),
]
MM_ARGS = ((3, 4), (4, 2), (4,), (3,), (2, 3, 4))

mm64 = av.NumericalFunction(
  "num_matmul_f64",
  lambda a, b, x, y, t: tuple(op(a, b, x, y, t) for _, op, _ in MATMUL),
  tuple(Arg(s) for s in MM_ARGS),
)
mm32 = av.NumericalFunction(
  "num_matmul_f32",
  lambda a, b, x, y, t: tuple(op(a, b, x, y, t) for _, op, _ in MATMUL),
  tuple(Arg(s, dtypes.float32) for s in MM_ARGS),
)


def expected_matmul(*args: np.ndarray) -> list[tuple[str, Any]]:
  args64 = tuple(a.astype(np.float64) for a in args)
  return [(name, ref(*args64)) for name, _, ref in MATMUL]


@SETTINGS
@given(st.tuples(*(floats64(-5, 5, s) for s in MM_ARGS)))
def test_matmul_float64(args: tuple[np.ndarray, ...]) -> None:
  check_outputs(mm64(*args), expected_matmul(*args), F64, np.float64)


@SETTINGS
@given(st.tuples(*(floats32(-1, 1, s) for s in MM_ARGS)))
def test_matmul_float32(args: tuple[np.ndarray, ...]) -> None:
  check_outputs(mm32(*args), expected_matmul(*args), F32, np.float32)


def test_matmul_identity_and_known_values() -> None:
  a = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]])
  b = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])
  x, y = np.array([1.0, -1.0, 2.0, 0.5]), np.array([0.5, 0.25, -1.0])
  t = np.stack([a, -a])
  outs = mm64(a, b, x, y, t)
  np.testing.assert_allclose(outs[0], [7.0, 17.0, 27.0], **F64)
  np.testing.assert_allclose(outs[1], [[12.0, 1.0], [28.0, 5.0], [44.0, 9.0]], **F64)
  np.testing.assert_allclose(outs[7], 6.25, **F64)
  check_outputs(outs, expected_matmul(a, b, x, y, t), F64, np.float64)


def larger(a, b, x, v):
  matrices = (a @ b, a @ x, a.T @ a, a.sum(0), a.max(1), a.min(0), a.softmax(1))
  return (*matrices, v.sum(), v.max(), (v * v).mean(), v.reshape(8, 25).sum(0))


LARGE_SHAPES = ((20, 33), (33, 17), (33,), (200,))
large64 = av.NumericalFunction("num_larger_f64", larger, tuple(Arg(s) for s in LARGE_SHAPES))
large32 = av.NumericalFunction("num_larger_f32", larger, tuple(Arg(s, dtypes.float32) for s in LARGE_SHAPES))


@pytest.mark.parametrize(
  ("f", "dtype", "tol"), [(large64, np.float64, F64), (large32, np.float32, F32)], ids=["f64", "f32"]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_larger_shapes(f: Any, dtype: type, tol: dict[str, Any], seed: int) -> None:
  rng = np.random.default_rng(seed)
  args: list[np.ndarray] = [rng.uniform(-1, 1, s).astype(dtype) for s in LARGE_SHAPES]
  a, b, x, v = (t.astype(np.float64) for t in args)
  e = np.exp(a)
  expected = [
    ("matrix_matrix", a @ b),
    ("matrix_vector", a @ x),
    ("gram", a.T @ a),
    ("sum_axis0", a.sum(0)),
    ("max_axis1", a.max(1)),
    ("min_axis0", a.min(0)),
    ("softmax", e / e.sum(1, keepdims=True)),
    ("sum", v.sum()),
    ("max", v.max()),
    ("mean_of_squares", (v * v).mean()),
    ("reshaped_sum", v.reshape(8, 25).sum(0)),
  ]
  check_outputs(f(*args), expected, tol, dtype)


# *** movement: slicing, cat/stack, pad, reshape/permute/transpose/flip/expand ***

MOVEMENT: list[Op] = [
  ("slice", lambda x, a: x[1:4], lambda x, a: x[1:4]),
  ("slice_step", lambda x, a: x[::2], lambda x, a: x[::2]),
  ("slice_offset_step", lambda x, a: x[1::3], lambda x, a: x[1::3]),
  ("reverse", lambda x, a: x[::-1], lambda x, a: x[::-1]),
  ("negative_start", lambda x, a: x[-3:], lambda x, a: x[-3:]),
  ("negative_stop", lambda x, a: x[1:-1], lambda x, a: x[1:-1]),
  ("negative_step_range", lambda x, a: x[5:1:-2], lambda x, a: x[5:1:-2]),
  ("index_last", lambda x, a: x[-1], lambda x, a: x[-1]),
  ("index_row", lambda x, a: a[-1], lambda x, a: a[-1]),
  ("index_column", lambda x, a: a[:, 1], lambda x, a: a[:, 1]),
  ("index_element", lambda x, a: a[1, -2], lambda x, a: a[1, -2]),
  ("slice_2d", lambda x, a: a[1:, ::-2], lambda x, a: a[1:, ::-2]),
  ("slice_2d_b", lambda x, a: a[::-1, 1:3], lambda x, a: a[::-1, 1:3]),
  ("cat", lambda x, a: Tensor.cat(x, x[:2] * 2), lambda x, a: np.concatenate([x, x[:2] * 2])),
  ("cat_method", lambda x, a: x.cat(x, x), lambda x, a: np.concatenate([x, x, x])),
  ("cat_dim1", lambda x, a: a.cat(a[:, :1], dim=1), lambda x, a: np.concatenate([a, a[:, :1]], axis=1)),
  ("stack", lambda x, a: Tensor.stack(x, x * 2), lambda x, a: np.stack([x, x * 2])),
  ("stack_dim1", lambda x, a: x.stack(-x, dim=1), lambda x, a: np.stack([x, -x], axis=1)),
  ("stack_rows", lambda x, a: Tensor.stack(a[0], a[2]), lambda x, a: np.stack([a[0], a[2]])),
  ("pad", lambda x, a: x.pad(((1, 2),)), lambda x, a: np.pad(x, (1, 2))),
  (
    "pad_2d_value",
    lambda x, a: a.pad(((1, 0), (0, 2)), value=1.5),
    lambda x, a: np.pad(a, ((1, 0), (0, 2)), constant_values=1.5),
  ),
  ("pad_flat", lambda x, a: a.pad((1, 1, 2, 0)), lambda x, a: np.pad(a, ((2, 0), (1, 1)))),
  ("reshape", lambda x, a: a.reshape(2, 6), lambda x, a: a.reshape(2, 6)),
  ("reshape_flat", lambda x, a: a.reshape(-1), lambda x, a: a.reshape(-1)),
  ("flatten_then_slice", lambda x, a: a.flatten()[3:9], lambda x, a: a.flatten()[3:9]),
  ("permute", lambda x, a: a.permute(1, 0), lambda x, a: a.transpose(1, 0)),
  ("transpose", lambda x, a: a.transpose(), lambda x, a: a.T),
  ("T", lambda x, a: a.T * 1.0, lambda x, a: a.T),
  ("flip0", lambda x, a: a.flip(0), lambda x, a: a[::-1]),
  ("flip_both", lambda x, a: a.flip((0, 1)), lambda x, a: a[::-1, ::-1]),
  ("expand", lambda x, a: x.reshape(6, 1).expand(6, 3), lambda x, a: np.broadcast_to(x.reshape(6, 1), (6, 3))),
  ("expand_3d", lambda x, a: a.reshape(3, 1, 4).expand(3, 2, 4), lambda x, a: np.broadcast_to(a[:, None], (3, 2, 4))),
  ("unsqueeze", lambda x, a: x.unsqueeze(0), lambda x, a: x[None]),
  ("repeat", lambda x, a: x[:2].repeat(3), lambda x, a: np.tile(x[:2], 3)),
  ("permute_reshape_slice", lambda x, a: a.T.reshape(2, 6)[:, ::2], lambda x, a: a.T.reshape(2, 6)[:, ::2]),
]

mv64 = av.NumericalFunction(
  "num_movement_f64",
  lambda x, a: tuple(op(x, a) for _, op, _ in MOVEMENT),
  (Arg(6), Arg((3, 4))),
)


@SETTINGS
@given(x=floats64(-100, 100, 6), a=floats64(-100, 100, (3, 4)))
def test_movement(x: np.ndarray, a: np.ndarray) -> None:
  check_outputs(mv64(x, a), [(name, ref(x, a)) for name, _, ref in MOVEMENT], F64, np.float64)


def test_movement_exact_on_distinct_values() -> None:
  x, a = np.arange(6.0) + 0.5, np.arange(12.0).reshape(3, 4) * 10 + 1
  for out, (name, _, ref) in zip(mv64(x, a), MOVEMENT, strict=True):
    np.testing.assert_array_equal(out, ref(x, a), err_msg=name)


# *** broadcasting ***


@av.numerical_function("num_broadcast", (3, 1), (1, 4), (2, 3), 3, (), (2, 1, 3), (4, 1))
def broadcast(col, row, m, v, s, t, u):
  return col + row, m * v, s + v, t * u, (col * row) / (1 + s * s), v - m, m.maximum(v[:1])


@SETTINGS
@given(
  st.tuples(*(floats64(-10, 10, s) for s in ((3, 1), (1, 4), (2, 3), 3, (), (2, 1, 3), (4, 1)))),
)
def test_broadcasting(args: tuple[np.ndarray, ...]) -> None:
  col, row, m, v, s, t, u = args
  expected = [
    ("col_plus_row", col + row),
    ("matrix_times_vector", m * v),
    ("scalar_plus_vector", s + v),
    ("3d_times_2d", t * u),
    ("outer_over_scalar", (col * row) / (1 + s * s)),
    ("vector_minus_matrix", v - m),
    ("maximum_broadcast", np.maximum(m, v[:1])),
  ]
  check_outputs(broadcast(*args), expected, F64, np.float64)


# *** outputs: several, views of inputs, identical, constant ***


@av.numerical_function("num_view_outputs", 4)
def view_outputs(x):
  return x[1:3], x, x.reshape(2, 2).T, x[::-1], x.reshape(2, 2)


def test_outputs_that_are_views_of_inputs() -> None:
  x = np.array([1.5, -2.0, 3.25, 4.0])
  outs = view_outputs(x)
  expected = [("slice", x[1:3]), ("identity", x), ("transpose", x.reshape(2, 2).T), ("reverse", x[::-1])]
  expected.append(("reshape", x.reshape(2, 2)))
  check_outputs(outs, expected, F64, np.float64)
  for out in outs:
    assert not np.shares_memory(out, x)
  assert outs[2].flags.c_contiguous


def test_single_output_returning_input() -> None:
  f = av.NumericalFunction("num_identity", lambda x: x, Arg((2, 3)))
  x = np.arange(6.0).reshape(2, 3) - 2.5
  out = f(x)
  assert isinstance(out, np.ndarray) and out.shape == (2, 3)
  np.testing.assert_array_equal(out, x)
  assert not np.shares_memory(out, x)


def test_identical_outputs() -> None:
  def fn(x):
    a = x * 2
    return a, a, x, x, a.sin()

  f = av.NumericalFunction("num_identical_outputs", fn, Arg(3))
  x = np.array([0.5, -1.0, 2.0])
  outs = f(x)
  expected = [("a", 2 * x), ("a_again", 2 * x), ("x", x), ("x_again", x), ("sin_a", np.sin(2 * x))]
  check_outputs(outs, expected, F64, np.float64)
  for i in range(len(outs)):
    for j in range(i):
      assert not np.shares_memory(outs[i], outs[j])
  outs[0][:] = 0.0
  np.testing.assert_allclose(outs[1], 2 * x, **F64)


def test_constant_outputs() -> None:
  def fn(x):
    return (
      Tensor.ones(3),
      Tensor.zeros(2, 2),
      Tensor.full((2,), 3.5),
      x + Tensor([1.0, 2.0, 3.0]),
      Tensor.eye(3) @ x,
      Tensor.ones(3) * 2 - x,
      x + Tensor.arange(3),
    )

  f = av.NumericalFunction("num_constant_outputs", fn, Arg(3))
  x = np.array([0.25, -4.0, 8.0])
  outs = f(x)
  expected = [("ones", np.ones(3)), ("zeros", np.zeros((2, 2))), ("full", np.full(2, 3.5))]
  expected += [
    ("plus_list", x + np.array([1.0, 2.0, 3.0])),
    ("eye", x),
    ("two_minus_x", 2 - x),
    ("plus_arange", x + np.arange(3)),
  ]
  check_outputs(outs, expected, F64, np.float64)


def test_constant_outputs_without_device() -> None:
  # NOTE: Tensor.arange, Tensor.eye and Tensor.linspace build device-less graphs in tinygrad 0.14.
  def fn(x):
    return Tensor.arange(4), Tensor.eye(2), Tensor.arange(3).cast(dtypes.float64) * 0.5, x * 2

  f = av.NumericalFunction("num_deviceless_outputs", fn, Arg(3))
  x = np.array([1.0, -2.0, 0.5])
  outs = f(x)
  assert [o.dtype for o in outs] == [np.int32, np.float64, np.float64, np.float64]
  np.testing.assert_array_equal(outs[0], np.arange(4))
  np.testing.assert_array_equal(outs[1], np.eye(2))
  np.testing.assert_allclose(outs[2], [0.0, 0.5, 1.0], **F64)
  np.testing.assert_allclose(outs[3], 2 * x, **F64)


def test_constant_only_output_ignores_input() -> None:
  f = av.NumericalFunction("num_constant_only", lambda x: Tensor.ones(3) * 0.5, Arg(2))
  out = f(np.array([7.0, 8.0]))
  assert out.dtype == np.float64
  np.testing.assert_array_equal(out, [0.5, 0.5, 0.5])


def test_repeated_calls_return_fresh_results() -> None:
  x1 = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
  x2 = -2 * x1[::-1].copy()
  p = np.full(N_EW, 2.0)
  r1 = ew64(x1, x1, p)
  r2 = ew64(x2, x2, p)
  check_outputs(r1, expected_elementwise(x1, x1, p), F64, np.float64)
  check_outputs(r2, expected_elementwise(x2, x2, p), F64, np.float64)


# *** dtypes ***


def test_float32_and_float64_inputs_mixed() -> None:
  def fn(x32, y64, n):
    return (
      x32 * 2.5,
      x32.cast(dtypes.float64) + y64,
      y64.cast(dtypes.float32).sin(),
      x32.sum(),
      n * 3 + 1,
      n.sum(),
      x32 > 0,
      y64.cast(dtypes.int32),
      n.cast(dtypes.float64) * y64[:2],
    )

  f = av.NumericalFunction(
    "num_mixed_dtypes", fn, (Arg(3, dtypes.float32), Arg(3, dtypes.float64), Arg((2, 2), dtypes.int32))
  )
  x32 = np.array([0.1, -2.5, 3.75], dtype=np.float32)
  y64 = np.array([1e-3, 2.0, -7.125])
  n = np.array([[1, -2], [30, 4]], dtype=np.int32)
  outs = f(x32, y64, n)
  dts = [np.float32, np.float64, np.float32, np.float32, np.int32, np.int32, np.bool_, np.int32, np.float64]
  assert [o.dtype for o in outs] == dts
  x = x32.astype(np.float64)
  np.testing.assert_allclose(outs[0], x * 2.5, **F32)
  np.testing.assert_allclose(outs[1], x + y64, **F64)
  np.testing.assert_allclose(outs[2], np.sin(y64), **F32)
  np.testing.assert_allclose(outs[3], x.sum(), **F32)
  np.testing.assert_array_equal(outs[4], n * 3 + 1)
  np.testing.assert_array_equal(outs[5], n.sum())
  np.testing.assert_array_equal(outs[6], x32 > 0)
  np.testing.assert_array_equal(outs[7], [0, 2, -7])
  np.testing.assert_allclose(outs[8], n * y64[:2], **F64)


def test_float32_input_converted_from_float64_array() -> None:
  x = np.array([0.5, 1.5, -2.0, 0.25, 3.0, -1.0, 0.125])
  y, p = np.linspace(-1, 1, N_EW), np.linspace(0.5, 3, N_EW)
  outs = ew32(x, y, p)  # float64 arrays, converted to float32 by the call
  x32, y32, p32 = (a.astype(np.float32) for a in (x, y, p))
  check_outputs(outs, expected_elementwise(x32, y32, p32), F32, np.float32)


# *** multi-dimensional inputs and outputs, C order ***


@av.numerical_function("num_multidim", (2, 3, 4), (4, 3))
def multidim(t, m):
  return t.permute(2, 0, 1) * 1.0, t.reshape(4, 6), t.sum(1), t @ m, m.T.reshape(3, 2, 2), t[:, 1:, ::2] + 0.5


def expected_multidim(t: np.ndarray, m: np.ndarray) -> list[tuple[str, Any]]:
  return [
    ("permute", t.transpose(2, 0, 1)),
    ("reshape", t.reshape(4, 6)),
    ("sum", t.sum(1)),
    ("matmul", t @ m),
    ("transpose_reshape", m.T.reshape(3, 2, 2)),
    ("slice", t[:, 1:, ::2] + 0.5),
  ]


def test_multidimensional_c_order() -> None:
  t = np.arange(24.0).reshape(2, 3, 4) * 1.25 - 7
  m = np.arange(12.0).reshape(4, 3) * 0.5 + 1
  outs = multidim(t, m)
  for out in outs:
    assert out.flags.c_contiguous
  check_outputs(outs, expected_multidim(t, m), F64, np.float64)


def test_multidimensional_non_contiguous_inputs() -> None:
  base = RNG.standard_normal((4, 3, 2))
  t = base.transpose(2, 1, 0)  # a (2, 3, 4) view, not C-contiguous
  m = np.asfortranarray(RNG.standard_normal((4, 3)))
  wide = RNG.standard_normal((4, 6))
  m2 = wide[:, ::2]  # strided view
  check_outputs(multidim(t, m), expected_multidim(t, m), F64, np.float64)
  check_outputs(multidim(t, m2), expected_multidim(t, m2), F64, np.float64)
  check_outputs(multidim(t.tolist(), m.tolist()), expected_multidim(t, m), F64, np.float64)


# *** captured numpy constants ***

C_MAT = np.array([[1.5, -0.25, 3.0], [0.125, 2.0, -1.0], [4.0, 0.5, -0.75]])
C_VEC = np.array([0.1, -0.2, 0.3])
C = Tensor(C_MAT)
CV = Tensor(C_VEC)


def affine(x):
  return C @ x + CV


def scaled(x):
  return (C * x).sum(1), C.T @ x - CV.sin()


def test_captured_constants_shared_and_traced_twice(fresh_cache: Any, tmp_path: Any, monkeypatch: Any) -> None:
  x = np.array([0.7, -1.3, 2.1])
  f1 = av.NumericalFunction("num_const_affine", affine, Arg(3))
  f2 = av.NumericalFunction("num_const_scaled", scaled, Arg(3))
  np.testing.assert_allclose(f1(x), C_MAT @ x + C_VEC, **F64)
  expected = [("row_sums", (C_MAT * x).sum(1)), ("transposed", C_MAT.T @ x - np.sin(C_VEC))]
  check_outputs(f2(x), expected, F64, np.float64)
  # NOTE: a new cache directory forces the second trace of `affine` through schedule, render and compile again.
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(tmp_path / "second-cache"))
  f3 = av.NumericalFunction("num_const_affine", affine, Arg(3))
  np.testing.assert_allclose(f3(x), C_MAT @ x + C_VEC, **F64)
  f4 = av.NumericalFunction("num_const_scaled_again", scaled, Arg(3))
  expected = [("row_sums", (C_MAT * 2 * x).sum(1)), ("transposed", C_MAT.T @ (2 * x) - np.sin(C_VEC))]
  check_outputs(f4(2 * x), expected, F64, np.float64)
  # the first functions still work after the constants were traced again
  np.testing.assert_allclose(f1(-x), C_MAT @ -x + C_VEC, **F64)


def test_captured_constants_default_cache() -> None:
  f = av.NumericalFunction("num_const_affine_default", affine, Arg(3))
  g = av.NumericalFunction("num_const_scaled_default", scaled, Arg(3))
  x = np.array([-0.5, 0.25, 4.0])
  np.testing.assert_allclose(f(x), C_MAT @ x + C_VEC, **F64)
  np.testing.assert_allclose(g(x)[0], (C_MAT * x).sum(1), **F64)


def test_captured_constant_returned_as_output() -> None:
  f = av.NumericalFunction("num_const_as_output", lambda x: (C @ x, CV, CV * x), Arg(3))
  x = np.array([-0.5, 0.25, 4.0])
  expected = [("matmul", C_MAT @ x), ("constant", C_VEC), ("scaled_constant", C_VEC * x)]
  check_outputs(f(x), expected, F64, np.float64)
  # NOTE: the constant as the only output: no kernel and no workspace besides the copy.
  g = av.NumericalFunction("num_const_only_output", lambda x: CV, Arg(3))
  out = g(x)
  assert out.dtype == np.float64
  np.testing.assert_array_equal(out, C_VEC)


# *** empty and scalar inputs ***


def test_empty_inputs() -> None:
  def fn(e, x, z):
    return e * 2 + 1, e.sum() + x.sum(), x.cat(e) * 3, z @ e, z.sum(1) + x

  f = av.NumericalFunction("num_empty_inputs", fn, (Arg(0), Arg(3), Arg((3, 0))))
  x = np.array([1.0, 2.5, -4.0])
  empties: tuple[Any, ...] = (np.zeros(0), [])
  for e in empties:
    outs = f(e, x, np.zeros((3, 0)))
    expected = [("e", np.zeros(0)), ("sum", x.sum()), ("cat", 3 * x), ("matmul", np.zeros(3)), ("rowsum", x)]
    check_outputs(outs, expected, F64, np.float64)


@av.numerical_function("num_scalars", (), 3)
def scalars(s, x):
  return s * 2, s * x, x.sum(), s.sin() + x[0], x.dot(x) / s, s


@SETTINGS
@given(s=st.floats(0.1, 10), x=floats64(-10, 10, 3))
def test_scalar_inputs_and_outputs(s: float, x: np.ndarray) -> None:
  for s_in in (s, np.float64(s), np.array(s)):
    outs = scalars(s_in, x)
    expected = [
      ("twice", np.array(2 * s)),
      ("scaled", s * x),
      ("sum", x.sum()),
      ("sin_plus", np.sin(s) + x[0]),
      ("dot_over", x @ x / s),
      ("identity", np.array(s)),
    ]
    check_outputs(outs, expected, F64, np.float64)
    assert all(outs[i].ndim == 0 for i in (0, 2, 3, 4, 5))


def test_scalar_single_output() -> None:
  f = av.NumericalFunction("num_scalar_single", lambda x: (x * x).sum().sqrt(), Arg(4))
  out = f(np.array([1.0, 2.0, 2.0, 4.0]))
  assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float64
  np.testing.assert_allclose(out, 5.0, **F64)


# *** the decorator's shape forms ***


@av.numerical_function("num_deco_shapes", 3, (2, 2))
def deco_shapes(x, a):
  return a @ x[:2] + x[2], (a * x[1:]).sum()


@av.numerical_function("num_deco_tuple", ((3,), (2,)))
def deco_tuple(x, y):
  return x.sum() * y, x.exp()


def test_decorator_shape_forms() -> None:
  x, a, y = np.array([1.0, -2.0, 0.5]), np.array([[1.0, 2.0], [3.0, -4.0]]), np.array([0.25, 3.0])
  check_outputs(deco_shapes(x, a), [("mv", a @ x[:2] + x[2]), ("sum", (a * x[1:]).sum())], F64, np.float64)
  check_outputs(deco_tuple(x, y), [("scaled", x.sum() * y), ("exp", np.exp(x))], F64, np.float64)


# *** reference problems P1 and P2 ***

quad_step = av.NumericalFunction("num_quadrotor_step", quadrotor.step, (Arg(quadrotor.NX), Arg(quadrotor.NU)))
cart_step = av.NumericalFunction("num_cartpole_step", cartpole.step, (Arg(cartpole.NX), Arg(cartpole.NU)))


@pytest.mark.parametrize(
  ("f", "model"), [(quad_step, quadrotor), (cart_step, cartpole)], ids=["P1_quadrotor", "P2_cartpole"]
)
def test_reference_step_at_check_value(f: Any, model: Any) -> None:
  out = f(model.TEST_X, model.TEST_U)
  assert out.shape == (model.NX,) and out.dtype == np.float64
  np.testing.assert_allclose(out, model.step_numpy(model.TEST_X, model.TEST_U), **F64)


def test_quadrotor_hover_is_equilibrium() -> None:
  out = quad_step(np.zeros(quadrotor.NX), quadrotor.HOVER)
  np.testing.assert_allclose(out, np.zeros(quadrotor.NX), **F64)


@SETTINGS
@given(dx=floats64(-0.5, 0.5, quadrotor.NX), u=floats64(0.0, 3.0, quadrotor.NU))
def test_quadrotor_step_random(dx: np.ndarray, u: np.ndarray) -> None:
  x = quadrotor.TEST_X + dx
  np.testing.assert_allclose(quad_step(x, u), quadrotor.step_numpy(x, u), **F64)


@SETTINGS
@given(x=floats64(-3, 3, cartpole.NX), u=floats64(-20, 20, cartpole.NU))
def test_cartpole_step_random(x: np.ndarray, u: np.ndarray) -> None:
  np.testing.assert_allclose(cart_step(x, u), cartpole.step_numpy(x, u), **F64)


def test_empty_captured_constants() -> None:
  empty, empty_rows = Tensor(np.zeros(0)), Tensor(np.zeros((2, 0)))
  f = av.NumericalFunction("num_empty_consts", lambda x: (x.cat(empty) * 2, empty, empty_rows.sum(1) + x[:2]), Arg(3))
  doubled, none, plus_zero = f(np.array([1.0, 2.0, 3.0]))
  np.testing.assert_array_equal(doubled, [2.0, 4.0, 6.0])
  assert none.shape == (0,)
  np.testing.assert_array_equal(plus_zero, [1.0, 2.0])


def test_workspace_regions_reused_across_a_chain_of_kernels() -> None:
  # NOTE: every normalization is a reduction, so tinygrad schedules one kernel (one intermediate buffer) per link; the
  # captured constant is read from its constexpr table, untouched by every reuse of the workspace's regions.
  links, weights = 12, np.linspace(0.5, 1.5, 64)

  def chain(x):
    y, w = x, Tensor(weights)
    for _ in range(links):
      y = (y * w).sin() / (y * y).sum().sqrt()
    return y, (x * w).sum()

  f = av.NumericalFunction("num_workspace_reuse", chain, Arg(64))
  for seed in range(3):
    x = np.random.default_rng(seed).normal(size=64)
    y = x
    for _ in range(links):
      y = np.sin(y * weights) / np.sqrt(np.sum(y * y))
    outs = f(x)
    check_outputs(outs, [("chain", y), ("weighted", np.sum(x * weights))], F64, np.float64)
  intermediates = sum(1 for step in f.program.steps if any(r.kind == "ws" for r in step.args))
  # without reuse: 12 intermediates of 64 doubles; with it: two alternating regions (the constant is not in it)
  assert intermediates > 10 and f.program.ws_size <= 2 * 64 * 8


def test_slices_made_contiguous_read_their_buffer_at_an_offset() -> None:
  """tinygrad passes a slice a kernel reads as one range (`x[a:b].contiguous()`, of an input or an intermediate) as a
  view of its buffer; the generated call points into that buffer (these functions used to be refused at build:
  "reads a tensor ... neither an input nor a captured constant"), and so does their gradient."""
  x = np.arange(1.0, 7.0)
  cases = {
    "input": (lambda v: v[2:5].contiguous() + 1.0, x[2:5] + 1.0),
    "cat": (lambda v: Tensor.cat(v[3:5].contiguous(), v[0:2].contiguous()), np.r_[x[3:5], x[0:2]]),
    "row": (lambda v: v.reshape(2, 3)[1:2, :].contiguous() * 2.0, x[3:] * 2.0),
    "intermediate": (lambda v: (v * 3.0)[1:4].contiguous() + v[0:3], (x * 3.0)[1:4] + x[0:3]),
  }
  for name, (fn, expected) in cases.items():
    f = av.NumericalFunction(f"num_view_{name}", fn, Arg(6))
    np.testing.assert_allclose(np.ravel(f(x)), expected, **F64)
  g = av.NumericalFunction("num_view_sin", lambda v: (v[1:4].contiguous().sin() * v[0:3]).sum(), Arg(6))
  grad = np.zeros(6)
  grad[1:4] += np.cos(x[1:4]) * x[0:3]
  grad[0:3] += np.sin(x[1:4])
  np.testing.assert_allclose(gradient(g)(x), grad, **F64)
