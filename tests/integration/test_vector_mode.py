"""Vector forward mode (`anvil.ad.vector_mode`): Jacobians whose tangents are wide are computed as loops over their
columns, and equal the column-by-column scalar derivation and finite differences, dense and sparse."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tinygrad import Tensor, dtypes

import anvil as av
import anvil.ad.vector_mode as vector_mode
from anvil.ad import jacobian, spjacobian
from anvil.ad.scalar import scalar_route
from anvil.codegen import straight_line

N = 40
SWEEPS = 6


def mixing(x: Tensor) -> Tensor:
  """Sweeps of a recurrence over N elements (every output depends on every input: wide tangents), then outputs of
  every kind: wide rows, rows of two inputs, a row of none (a constant), a row scaled from a wide one."""
  y = [x[k] for k in range(N)]
  for s in range(SWEEPS):
    for k in range(N):
      y[k] = y[k] + (0.3 + 0.01 * s) * y[k - 1] * x[(k + s) % N].cos() - 0.2 * y[(k + 7) % N]
  # NOTE: the last row computed is a narrow one
  extra = [x[0] * x[1], x[0] * 0 + 2.0, -3.0 * y[5], y[3] / (2.0 + y[4] * y[4]), x[2] * x[3]]
  return Tensor.stack(*y[::3], *extra)


def mixing_np(x: np.ndarray) -> np.ndarray:
  y = list(x)
  for s in range(SWEEPS):
    for k in range(N):
      y[k] = y[k] + (0.3 + 0.01 * s) * y[k - 1] * np.cos(x[(k + s) % N]) - 0.2 * y[(k + 7) % N]
  return np.array([*y[::3], x[0] * x[1], 2.0, -3.0 * y[5], y[3] / (2.0 + y[4] * y[4]), x[2] * x[3]])


def central_differences(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:  # type: ignore[no-untyped-def]
  return np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)], axis=1)


def derivatives(name: str, dtype: object = dtypes.float64) -> tuple[np.ndarray, np.ndarray, str]:
  """The dense and sparse Jacobians of `mixing` at a point, and the dense one's source."""
  fn = av.NumericalFunction(name, mixing, av.Arg(N, dtype=dtype))
  assert scalar_route(fn)
  x = np.random.default_rng(1).uniform(-0.5, 0.5, N).astype(np.float64 if dtype == dtypes.float64 else np.float32)
  dense = jacobian(fn)
  sparse = spjacobian(fn)(x)
  return dense(x), sparse.toarray(), dense.source_code


def test_vector_mode_equals_scalar_mode_and_finite_differences(fresh_cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
  x = np.random.default_rng(1).uniform(-0.5, 0.5, N)
  dense, sparse, source = derivatives("mixing")
  assert "for (int c = " in source  # NOTE: the wide rows were computed as loops over columns
  np.testing.assert_allclose(dense, central_differences(mixing_np, x), rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(sparse, dense)
  monkeypatch.setattr(vector_mode, "MIN_WORK", 10**12)
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(fresh_cache / "scalar"))
  scalar_dense, scalar_sparse, scalar_source = derivatives("mixing")
  assert "for (int c = " not in scalar_source
  np.testing.assert_allclose(dense, scalar_dense, rtol=1e-13, atol=1e-13)
  np.testing.assert_allclose(sparse, scalar_sparse, rtol=1e-13, atol=1e-13)


def test_vector_mode_pattern_holds_the_structure(fresh_cache: Path) -> None:
  fn = av.NumericalFunction("mixing_pattern", mixing, av.Arg(N))
  sparse = spjacobian(fn)
  pattern = sp.csc_array((np.ones(sparse.nnz), sparse.indices, sparse.indptr), shape=sparse.shape).tocsr()
  rows = len(range(0, N, 3))
  assert pattern[:rows].nnz == rows * N  # wide rows: every column
  assert sorted(pattern[[rows]].indices.tolist()) == [0, 1]  # x0 x1: the narrow row keeps its two entries
  assert pattern[[rows + 1]].nnz == 0  # a constant
  assert pattern[[rows + 2]].nnz == N


def test_vector_mode_in_float32(fresh_cache: Path) -> None:
  x = np.random.default_rng(1).uniform(-0.5, 0.5, N)
  dense, sparse, source = derivatives("mixing32", dtypes.float32)
  assert "for (int c = " in source and "float* ANVIL_RESTRICT t" in source
  assert dense.dtype == np.float32
  np.testing.assert_allclose(dense, central_differences(mixing_np, x), rtol=2e-4, atol=2e-4)
  np.testing.assert_array_equal(sparse, dense)


def test_small_jacobians_keep_scalar_code(fresh_cache: Path) -> None:
  few = lambda x: Tensor.stack(*[(x[k] * x[(k + 1) % 8] * (1 + 0.01 * j)).sin() for k in range(8) for j in range(30)])
  fn = av.NumericalFunction("few_columns", few, av.Arg(8))
  assert scalar_route(fn)
  assert "for (int c = " not in jacobian(fn).source_code


def test_column_loops_compile_side_by_side(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """A large program's loops over columns are spread over translation units compiled in parallel, as its
  straight-line chunks are."""
  monkeypatch.setattr(straight_line, "CHARS_PER_UNIT", 20_000)
  monkeypatch.setattr(os, "cpu_count", lambda: 4)
  x = np.random.default_rng(1).uniform(-0.5, 0.5, N)
  fn = av.NumericalFunction("mixing_split", mixing, av.Arg(N))
  np.testing.assert_allclose(jacobian(fn)(x), central_differences(mixing_np, x), rtol=1e-6, atol=1e-7)
  parts = [f.read_text() for f in sorted(fresh_cache.glob("src/*/anvil_jit_mixing_split_jac_part*.cpp"))]
  assert len(parts) == 3
  assert all("ANVIL_COLUMN_LOOPS_PART void w" in part for part in parts)


def test_columns_held_together_sit_together() -> None:
  """A tree's tangents hold joint k's q, v and τ columns together, which the inputs' order puts in three far blocks:
  the slots' order interleaves them, so each tangent of a subtree is one interval instead of three."""
  joints = 32
  subtrees = [range(k, min(joints, k + 1 + k % 5)) for k in range(joints)]
  masks = [sum(1 << (block * joints + j) for j in tree for block in range(3)) for tree in subtrees]
  position = vector_mode._column_order(masks, 3 * joints)
  assert sorted(position) == list(range(3 * joints))
  intervals = lambda mask: len(vector_mode._intervals(mask))
  assert sum(intervals(m) for m in masks) >= 2.5 * len(masks)  # the inputs' order
  moved = [vector_mode._moved(m, position) for m in masks]
  assert sum(intervals(m) for m in moved) <= 1.25 * len(masks)
