"""Hypothesis-driven inputs on the Python call paths: whatever is passed, a call returns the right answer or raises
TypeError/ValueError naming the input; it never crashes, and never computes on a silently converted value."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import anvil as av
from anvil import Arg, dtypes
from anvil.sqp import SQPFunction, SQPStatus
from tests.conftest import SHARED_CARTPOLE, stabilizing_cartpole

SETTINGS = settings(max_examples=150, deadline=None)
SHAPES = [(), (1,), (2,), (3,), (6,), (2, 3), (3, 2), (2, 3, 1), (0,)]
DTYPES = [np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_, np.complex128, np.dtype("U3")]

FN = av.NumericalFunction(
  "hostile_fn", lambda x, k: (x * 2.0 + k.cast(dtypes.float64)).sum(0), (Arg((2, 3)), Arg((3,), dtypes.int32))
)


def arrays() -> st.SearchStrategy[Any]:
  """numpy arrays of any dtype and shape above, their nested lists, scalars, strings and None."""
  array = st.sampled_from(DTYPES).flatmap(lambda dt: hnp.arrays(dt, st.sampled_from(SHAPES)))
  return st.one_of(
    array,
    array.map(lambda a: a.tolist()),
    array.map(lambda a: np.asfortranarray(a) if a.ndim == 2 else a[::-1] if a.ndim else a),
    st.floats(),
    st.text(max_size=3),
    st.none(),
  )


def _acceptable(value: Any, shape: tuple[int, ...], dtype: type) -> np.ndarray | None:
  """`value` as the input it may be taken for (same shape, a dtype cast within its kind, or floats holding whole
  numbers in an integer dtype's range), or None."""
  try:
    arr = np.asarray(value)
  except (TypeError, ValueError):
    return None
  if arr.shape != shape or arr.dtype.kind in "OUSVcMm":
    return None
  if arr.dtype.kind == "f" and np.dtype(dtype).kind == "i":
    info = np.iinfo(dtype)
    whole = all(np.isfinite(v) and v == int(v) and info.min <= v <= info.max for v in arr.ravel().tolist())
    return arr.astype(dtype) if whole else None
  if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
    return None
  return arr.astype(dtype)


@SETTINGS
@given(x=arrays(), k=arrays())
def test_a_function_call_returns_the_answer_or_raises_naming_the_input(x: Any, k: Any) -> None:
  ax, ak = _acceptable(x, (2, 3), np.float64), _acceptable(k, (3,), np.int32)
  try:
    out = FN(x, k)
  except (TypeError, ValueError) as e:
    assert ax is None or ak is None, f"valid inputs rejected: {e}"
    assert "hostile_fn: input" in str(e) and ("(x)" in str(e) or "(k)" in str(e)), str(e)
    return
  assert ax is not None and ak is not None, "an invalid input was accepted"
  np.testing.assert_array_equal(out, (ax * 2.0 + ak).sum(0))


SOLVER = SQPFunction(
  "sqp_par",
  av.NumericalFunction("sqp_par_f", lambda x, p: ((x - p[:2]) ** 2).sum(), (Arg(2), Arg(3))),
  av.NumericalFunction("sqp_par_g", lambda x, p: (x.sum() - p[2]).reshape(1), (Arg(2), Arg(3))),
)
MPC = stabilizing_cartpole()


def numbers(shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
  """Arrays (or lists) that may be taken for float64 values of `shape`, NaN and inf included, or anything else."""
  floats = hnp.arrays(np.float64, shape, elements=st.floats(-1e3, 1e3) | st.sampled_from([np.nan, np.inf, -np.inf]))
  return st.one_of(floats, floats.map(lambda a: a.tolist()), arrays())


def _vector_of_one(value: Any) -> np.ndarray | None:
  """`value` as a float64 vector of one (a scalar is taken for it), or None."""
  scalar = _acceptable(value, (), np.float64)
  return scalar.reshape(1) if scalar is not None else _acceptable(value, (1,), np.float64)


#: Inputs up to this magnitude are well scaled for the SQP's tolerances (1e-8): the solve must converge. Beyond it (x0
#: at 6.7e153, p at 5e8 with an O(1) bound, a bound at 5e6 away from x0 and p at 1e3) the solver has no objective and
#: constraint scaling yet and may end with another status: it must still return one, never crash or lie.
WELL_SCALED = 1e4


@pytest.mark.parametrize(("p", "lbg"), [(np.zeros(3), 6421229.0), (np.array([-455574573.0, -455574573.0, 0.0]), 0.0)])
def test_an_sqp_converges_on_large_data(p: np.ndarray, lbg: float) -> None:
  # NOTE: a feasible QP the interior point called infeasible (a bound 6.4e6 away), and |f| = 4e17 at the solution,
  # whose QPs were asked for a stationarity of 1e-6 against a gradient of 9e8, below its rounding (now their
  # tolerance is at least that rounding)
  res = SOLVER(np.zeros(2), p, np.full(2, -np.inf), np.full(2, np.inf), [lbg], [np.inf])
  assert res.status == "converged" and res.x.sum() - p[2] >= lbg - 1e-6 * max(1.0, abs(lbg))


@SETTINGS
@given(x0=numbers((2,)), p=numbers((3,)), lbg=numbers((1,)))
def test_an_sqp_call_returns_a_status_or_raises_naming_the_argument(x0: Any, p: Any, lbg: Any) -> None:
  try:
    res = SOLVER(x0, p, np.full(2, -np.inf), np.full(2, np.inf), lbg, [np.inf])
  except (TypeError, ValueError) as e:
    assert str(e).startswith("sqp_par: ") and any(w in str(e) for w in ("x0", "p", "lbg")), str(e)
    return
  x, par, lower = _acceptable(x0, (2,), np.float64), _acceptable(p, (3,), np.float64), _vector_of_one(lbg)
  assert x is not None and par is not None and lower is not None, "an invalid input was accepted"
  assert np.isfinite(x).all() and np.isfinite(par).all() and not np.isnan(lower[0]) and lower[0] < np.inf
  if max(np.abs(x).max(), np.abs(par).max(), abs(lower[0])) > WELL_SCALED:
    assert res.status in set(SQPStatus) and (res.status != "converged" or np.isfinite(res.x).all())
    return
  assert res.status == "converged"
  assert res.x.sum() - par[2] >= lower[0] - 1e-6 * max(1.0, abs(lower[0]))


@settings(max_examples=60, deadline=None)
@given(x0=numbers((4,)), u_lower=numbers((1,)))
def test_an_mpc_call_returns_a_usable_input_or_raises_naming_the_argument(x0: Any, u_lower: Any) -> None:
  try:
    sol = MPC(x0, u_bounds=(u_lower, [20.0]))
  except (TypeError, ValueError) as e:
    assert str(e).startswith(SHARED_CARTPOLE) and ("x0" in str(e) or "u_bounds" in str(e)), str(e)
    return
  x, lo = _acceptable(x0, (4,), np.float64), _vector_of_one(u_lower)
  assert x is not None and lo is not None, "an invalid input was accepted"
  assert np.isfinite(x).all() and not np.isnan(lo[0]) and lo[0] <= 20.0
  np.testing.assert_array_equal(sol.x[0], x)
  assert np.isfinite(sol.u0).all() and lo[0] - 1e-6 <= sol.u0[0] <= 20.0 + 1e-6
