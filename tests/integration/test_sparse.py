"""SparseNumericalFunction: CSC values in, scipy csc_array out; the pattern is validated and exposed."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av

DENSE = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 3.0, 0.0], [4.0, 0.0, 0.0, 5.0]])


def test_sparse_call_returns_csc_with_the_pattern() -> None:
  pattern = sp.csc_array(DENSE)

  @av.sparse_numerical_function("sp_vals", pattern, 3)
  def vals(x: av.Tensor) -> av.Tensor:
    return av.Tensor.stack(x[0], x[1] * x[2], x[0].sin(), x[1].exp(), x[2] ** 2)

  x = np.array([0.3, -0.7, 1.5])
  m = vals(x)
  assert isinstance(m, sp.csc_array) and m.shape == (3, 4) and vals.shape == (3, 4) and vals.nnz == 5
  np.testing.assert_array_equal(vals.indices, [0, 2, 0, 1, 2])
  np.testing.assert_array_equal(vals.indptr, [0, 2, 2, 4, 5])
  expected = np.zeros((3, 4))
  expected[0, 0], expected[2, 0], expected[0, 2], expected[1, 2], expected[2, 3] = (
    x[0], x[1] * x[2], np.sin(x[0]), np.exp(x[1]), x[2] ** 2)  # fmt: skip
  np.testing.assert_allclose(m.toarray(), expected, rtol=1e-14, atol=0)
  m.indices[0] = 2  # results own their index arrays
  np.testing.assert_array_equal(vals.indices, [0, 2, 0, 1, 2])


def test_pattern_forms_agree() -> None:
  pattern = sp.csc_array(DENSE)
  f = av.SparseNumericalFunction("sp_tuple", lambda x: x, av.Arg(5), (pattern.shape, pattern.indices, pattern.indptr))
  g = av.SparseNumericalFunction("sp_coo", lambda x: x, av.Arg(5), sp.coo_matrix(DENSE))
  v = pattern.data  # the values in CSC order rebuild the matrix
  np.testing.assert_array_equal(f(v).toarray(), g(v).toarray())
  np.testing.assert_array_equal(f(v).toarray(), DENSE)


def test_empty_pattern_and_empty_columns() -> None:
  f = av.SparseNumericalFunction("sp_empty", lambda x: x[:0] * 1, av.Arg(2), ((3, 2), [], [0, 0, 0]))
  m = f(np.ones(2))
  assert m.nnz == 0 and m.shape == (3, 2)
  assert "static constexpr int nnz = 0;" in f.header_code


def test_bad_patterns_and_outputs() -> None:
  with pytest.raises(ValueError, match=r"indptr"):
    av.SparseNumericalFunction("sp_bad1", lambda x: x, av.Arg(2), ((2, 2), [0, 1], [0, 1]))
  with pytest.raises(ValueError, match=r"indices"):
    av.SparseNumericalFunction("sp_bad2", lambda x: x, av.Arg(2), ((2, 2), [0, 5], [0, 1, 2]))
  with pytest.raises(ValueError, match=r"strictly increasing"):
    av.SparseNumericalFunction("sp_bad3", lambda x: x, av.Arg(2), ((2, 1), [1, 0], [0, 2]))
  with pytest.raises(TypeError, match=r"pattern must be"):
    av.SparseNumericalFunction("sp_bad4", lambda x: x, av.Arg(2), DENSE)
  f = av.SparseNumericalFunction("sp_bad5", lambda x: x, av.Arg(3), sp.csc_array(np.eye(2)))
  with pytest.raises(ValueError, match=r"sp_bad5: a sparse function must return one vector of the nnz = 2 values"):
    f(np.ones(3))
  eye = sp.csc_array(np.eye(2))
  with pytest.raises(ValueError, match=r"sp_bad6: gather_shift must hold one finite value per nonzero \(2\)"):
    av.SparseNumericalFunction("sp_bad6", lambda x: x, av.Arg(2), eye, gather=[0, 1], gather_shift=[1.0, np.nan])
  with pytest.raises(ValueError, match=r"sp_bad7: gather_shift .* with gather"):
    av.SparseNumericalFunction("sp_bad7", lambda x: x, av.Arg(2), eye, gather_shift=[1.0, 2.0])
  shifted = av.SparseNumericalFunction("sp_shift", lambda x: x * 2, av.Arg(2), eye, gather=[1, 0],
                                       gather_shift=[0.5, -1])  # fmt: skip
  np.testing.assert_array_equal(shifted(np.array([1.0, 3.0])).toarray(), np.diag([6.5, 1.0]))
