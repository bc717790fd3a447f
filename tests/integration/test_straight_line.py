"""Straight-line code for graphs of many small tensors (a Python loop over stages): values and derivatives equal numpy,
finite differences and tinygrad's kernels; long programs split into chunks that pass values through the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import Ops

import anvil as av
from anvil.ad import gradient, sphessian, spjacobian
from anvil.ad import scalar as ad_scalar
from anvil.ad.sparsity import jacobian_sparsity
from anvil.ad.transforms import placeholders
from anvil.codegen import rolling, straight_line
from anvil.codegen.scalar import ScalarGraph, Unsupported
from anvil.codegen.straight_line import suits_straight_line

STAGES = 60
ARGS = (av.Arg(2 * STAGES), av.Arg(3))


def stages(x: Tensor, p: Tensor, count: int = STAGES) -> Tensor:
  """One small expression per stage, written as a loop: sin, cos, exp, log, sqrt, max, where, reductions, pads."""
  out = []
  for k in range(count):
    a, b = x[2 * k], x[2 * k + 1]
    pair = x[2 * k : 2 * k + 2]
    value = a.sin() * b.cos() + (a * p[0]).exp() / (1 + b * b) + (b * b + 1).sqrt() * (a * a + 1).log()
    value = value + (a - b).maximum(p[1]) + (a > p[2]).where(a * b, -b) + pair.pad((1, 1)).flip(0)[1] * pair.max()
    value = value + (a * a + 1) ** 1.5 - b**3 / 4 + (b * b + 1) ** p[0]
    out.append(value.reshape(1))
  return Tensor.cat(*out)


def stages_numpy(x: np.ndarray, p: np.ndarray) -> np.ndarray:
  a, b = x[0::2], x[1::2]
  value = np.sin(a) * np.cos(b) + np.exp(a * p[0]) / (1 + b * b) + np.sqrt(b * b + 1) * np.log(a * a + 1)
  value = value + np.maximum(a - b, p[1]) + np.where(a > p[2], a * b, -b) + b * np.maximum(a, b)
  return value + (a * a + 1) ** 1.5 - b**3 / 4 + (b * b + 1) ** p[0]


def cost(x: Tensor, p: Tensor, count: int = STAGES) -> Tensor:
  return (stages(x, p, count) * stages(x, p, count)).sum() * 0.5


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
  """A cache of its own: which path builds a function is not part of the cached code's key."""
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(tmp_path))
  return tmp_path


def _point(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return rng.uniform(-1, 1, 2 * STAGES), np.array([0.7, -0.2, 0.1])


def spjacobian_pattern(g: av.NumericalFunction) -> sp.csc_array:
  """The tensor-level structural pattern of ∂g/∂x, as ones."""
  probe = placeholders(g.inputs)
  pattern = jacobian_sparsity([g.fn(*probe).uop], [t.uop for t in probe], 0)
  return sp.csc_array((np.ones(pattern.nnz), pattern.indices, pattern.indptr), shape=pattern.shape)


def _is_straight_line(fn: av.NumericalFunction) -> bool:
  """Built as straight-line code (chunks and loops over stages), not through tinygrad's kernels."""
  kernels = fn.program.kernels
  return all(k.source.startswith("ANVIL_STRAIGHT_LINE ") for k in kernels) and "const double v" in kernels[0].source


def _loops(fn: av.NumericalFunction) -> list[int]:
  """The iteration counts of the loops over stages in fn's code."""
  return [int(k.source.split("s < ")[1].split(";")[0]) for k in fn.program.kernels if "for (int s = 0;" in k.source]


def test_loop_function_is_straight_line_and_matches_numpy(cache: Path) -> None:
  f = av.NumericalFunction("sl_stages", stages, ARGS)
  assert suits_straight_line(f.traced)
  assert _is_straight_line(f)
  x, p = _point()
  np.testing.assert_allclose(f(x, p), stages_numpy(x, p), rtol=1e-14, atol=1e-14)


def test_derivatives_match_finite_differences(cache: Path) -> None:
  g = av.NumericalFunction("sl_g", stages, ARGS)
  f = av.NumericalFunction("sl_f", cost, ARGS)
  derivatives = [spjacobian(g), sphessian(f), gradient(f)]
  assert all(_is_straight_line(d) for d in derivatives)
  x, p = _point(1)
  jac, hess, grad = (d(x, p) for d in derivatives)
  h, eye = 1e-6, np.eye(x.size)
  columns = [(stages_numpy(x + h * e, p) - stages_numpy(x - h * e, p)) / (2 * h) for e in eye]
  np.testing.assert_allclose(jac.toarray(), np.array(columns).T, atol=1e-7)
  np.testing.assert_allclose(grad, stages_numpy(x, p) @ jac.toarray(), rtol=1e-12, atol=1e-12)
  second = np.array([(derivatives[2](x + h * e, p) - derivatives[2](x - h * e, p)) / (2 * h) for e in eye])
  np.testing.assert_allclose(hess.toarray(), np.triu(second), atol=1e-6)
  # derived on the scalar expressions of g and f: tinygrad's derivative graphs are never traced; the patterns are the
  # structural ones (the tensor-level analysis finds the same)
  assert all("traced" not in d.__dict__ for d in derivatives)
  assert (sp.csc_array((np.ones(jac.nnz), jac.indices, jac.indptr), shape=jac.shape) != spjacobian_pattern(g)).nnz == 0


def test_derivatives_equal_tinygrads_kernels(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """A few stages, so that tinygrad's kernels build quickly; every size is straight-line code here."""
  args = (av.Arg(6), av.Arg(3))
  g = av.NumericalFunction("sl_short_g", lambda x, p: stages(x, p, 3), args)
  f = av.NumericalFunction("sl_short_f", lambda x, p: cost(x, p, 3), args)
  x, p = _point(4)
  monkeypatch.setattr(straight_line, "MIN_OPS", 0)
  lines = [spjacobian(g), sphessian(f)]
  assert all(_is_straight_line(d) for d in lines)
  monkeypatch.setattr(straight_line, "MIN_OPS", 10**9)
  kernels = [spjacobian(g, name="sl_short_g_kernels"), sphessian(f, name="sl_short_f_kernels")]
  assert not any(_is_straight_line(d) for d in kernels)
  for line, kernel in zip(lines, kernels, strict=True):
    np.testing.assert_allclose(line(x[:6], p).toarray(), kernel(x[:6], p).toarray(), rtol=1e-13, atol=1e-13)


def test_chunks_pass_values_through_the_workspace(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(straight_line, "CHUNK_STATEMENTS", 7)
  monkeypatch.setattr(rolling, "MIN_MEMBERS", 10**9)  # NOTE: no loops: every stage in chunks
  g = av.NumericalFunction("sl_chunked", lambda x, p: (stages(x, p), x[:3], stages(x, p), p.float() * 2), ARGS)
  assert len(g.program.kernels) > 100 and g.program.ws_size > 0
  x, p = _point(2)
  values, head, again, scaled = g(x, p)
  np.testing.assert_allclose(values, stages_numpy(x, p), rtol=1e-14, atol=1e-14)
  np.testing.assert_array_equal(again, values)
  np.testing.assert_array_equal(head, x[:3])
  assert scaled.dtype == np.float32
  np.testing.assert_array_equal(scaled, p.astype(np.float32) * 2)


def test_chunks_compile_side_by_side(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """A large program's chunks are spread over translation units compiled in parallel, with the same results."""
  monkeypatch.setattr(straight_line, "CHUNK_STATEMENTS", 40)
  monkeypatch.setattr(straight_line, "CHARS_PER_UNIT", 4000)
  monkeypatch.setattr(rolling, "MIN_MEMBERS", 10**9)
  monkeypatch.setattr(os, "cpu_count", lambda: 3)
  g = av.NumericalFunction("sl_split", stages, ARGS)
  x, p = _point(4)
  np.testing.assert_allclose(g(x, p), stages_numpy(x, p), rtol=1e-14, atol=1e-14)
  parts = sorted(cache.glob("src/*/anvil_jit_sl_split_part*.cpp"))
  assert [f.name[-9:] for f in parts] == ["part1.cpp", "part2.cpp"]
  assert all("ANVIL_STRAIGHT_LINE_PART void k" in f.read_text() for f in parts)


def test_stages_are_rolled_into_loops(cache: Path) -> None:
  """The stages of the loop function and of its derivatives are one loop each: a stage's code is emitted once."""
  g = av.NumericalFunction("sl_rolled_g", stages, ARGS)
  f = av.NumericalFunction("sl_rolled_f", cost, ARGS)
  derivatives = [spjacobian(g), sphessian(f), gradient(f)]
  for fn in (g, *derivatives):
    assert _loops(fn) == [STAGES], fn.name
    assert sum(k.source.count("\n") for k in fn.program.kernels) < 400, "one stage's code, not 60"
  x, p = _point(6)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(rolling, "MIN_MEMBERS", 10**9)
    g2 = av.NumericalFunction("sl_unrolled_g", stages, ARGS)
    f2 = av.NumericalFunction("sl_unrolled_f", cost, ARGS)
    unrolled = [g2, spjacobian(g2), sphessian(f2), gradient(f2)]
    assert not any(_loops(fn) for fn in unrolled)
    want = [fn(x, p) for fn in unrolled]
  for fn, expected in zip((g, *derivatives), want, strict=True):
    got, expected = (v.toarray() if sp.issparse(v) else v for v in (fn(x, p), expected))
    np.testing.assert_array_equal(got, expected)


def irregular(x: Tensor, p: Tensor) -> Tensor:
  """Stages read in reverse (a negative stride), a run broken by one stage of another shape, stages sharing p."""
  out = []
  for k in range(40):
    a, b = x[2 * (39 - k)], x[2 * (39 - k) + 1]
    value = (a * b).sin() + p[0] * b if k != 17 else (a + b).exp()
    out.append(value.reshape(1))
  return Tensor.cat(*out)


def test_irregular_stages_loop_where_they_can(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(straight_line, "MIN_OPS", 0)
  f = av.NumericalFunction("sl_irregular", irregular, (av.Arg(80), av.Arg(3)))
  assert sorted(_loops(f)) == [17, 22]
  x, p = _point(7)
  k = np.arange(40)
  a, b = x[2 * (39 - k)], x[2 * (39 - k) + 1]
  want = np.where(k == 17, np.exp(a + b), np.sin(a * b) + p[0] * b)
  np.testing.assert_allclose(f(x[:80], p), want, rtol=1e-15)


def test_a_rebuild_takes_the_derived_pattern_from_the_cache(cache: Path) -> None:
  """The second build of the same derivative (new objects, same cache) neither derives nor compiles again; a corrupted
  record is derived again."""
  x, p = _point(8)
  first = sphessian(av.NumericalFunction("sl_cached_f", cost, ARGS))
  expected = first(x, p).toarray()
  records = list((cache / "derived").glob("*.json"))
  assert len(records) == 1

  def no_derivation(*args: object) -> None:
    raise AssertionError("derived again")

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(ad_scalar, "_derive", no_derivation)
    again = sphessian(av.NumericalFunction("sl_cached_f", cost, ARGS))
    np.testing.assert_array_equal(again(x, p).toarray(), expected)
  records[0].write_text("{not json")
  rebuilt = sphessian(av.NumericalFunction("sl_cached_f", cost, ARGS))
  np.testing.assert_array_equal(rebuilt(x, p).toarray(), expected)


def test_float32_loop_function(cache: Path) -> None:
  f = av.NumericalFunction(
    "sl_f32", lambda x, p: stages(x, p), (av.Arg(2 * STAGES, dtypes.float32), av.Arg(3, dtypes.float32))
  )
  assert suits_straight_line(f.traced) and "const float v" in f.program.kernels[0].source
  x, p = _point(3)
  got = f(x.astype(np.float32), p.astype(np.float32))
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, stages_numpy(x, p), rtol=2e-5, atol=2e-5)


def test_unsupported_ops_fall_back_to_kernels(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(straight_line, "MIN_OPS", 0)
  f = av.NumericalFunction("sl_bitcast", lambda x: (x * 2).bitcast(dtypes.int64), av.Arg(4))
  assert not _is_straight_line(f)
  x = np.arange(4.0)
  np.testing.assert_array_equal(f(x), (x * 2).view(np.int64))


def test_derivatives_fall_back_to_kernels(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """Where the scalar lowering cannot derive a function's derivative, tinygrad's derivative graph is built instead."""

  def unsupported(traced: object) -> None:
    raise Unsupported("test")

  monkeypatch.setattr(ad_scalar, "lower", unsupported)
  monkeypatch.setattr(straight_line, "MIN_OPS", 0)
  g = av.NumericalFunction("sl_fallback", lambda x, p: stages(x, p, 3), (av.Arg(6), av.Arg(3)))
  jac = spjacobian(g)
  assert jac.derived is None  # NOTE: built from tinygrad's derivative graph
  x, p = _point(5)
  x, h = x[:6], 1e-6
  columns = [(stages_numpy(x + h * e, p) - stages_numpy(x - h * e, p)) / (2 * h) for e in np.eye(x.size)]
  np.testing.assert_allclose(jac(x, p).toarray(), np.array(columns).T, atol=1e-7)


def test_scalar_graph_folds_and_shares_expressions() -> None:
  g = ScalarGraph()
  x, y = g.load(0, 0, dtypes.float64), g.load(0, 1, dtypes.float64)
  zero, one = g.const(0.0, dtypes.float64), g.const(1.0, dtypes.float64)
  assert g.alu(Ops.MUL, dtypes.float64, x, y) == g.alu(Ops.MUL, dtypes.float64, y, x)
  assert g.alu(Ops.ADD, dtypes.float64, x, zero) == x and g.alu(Ops.MUL, dtypes.float64, one, x) == x
  assert g.alu(Ops.MUL, dtypes.float64, x, zero) == zero
  assert g.args[g.alu(Ops.ADD, dtypes.float64, one, g.const(2, dtypes.weakint))] == 3.0
  condition = g.alu(Ops.CMPLT, dtypes.bool, one, zero)
  assert g.alu(Ops.WHERE, dtypes.float64, condition, x, y) == y
  # -0.0 + x is not x for x = -0.0 (and is kept); 0.0 + x is
  assert g.alu(Ops.ADD, dtypes.float64, g.const(-0.0, dtypes.float64), x) != x
  # constant exponents are products, square roots and reciprocals (as tinygrad simplifies them)
  cube = g.alu(Ops.POW, dtypes.float64, x, g.const(3, dtypes.weakint))
  assert g.ops[cube] is Ops.MUL and g.alu(Ops.POW, dtypes.float64, x, g.const(1.0, dtypes.float64)) == x
  assert g.ops[g.alu(Ops.POW, dtypes.float64, x, g.const(0.3, dtypes.float64))] is Ops.POW
