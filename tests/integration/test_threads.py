"""Every callable is safe to call from several threads: 4 threads x 100 calls with distinct inputs, the GIL switching
every microsecond, each result equal to the single-threaded result for the same input. The functions are those of
test_errors, test_sparse, test_sqp and test_mpc (same names and graphs: their compiled libraries are shared)."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av
import anvil.codegen.caller
from anvil.problems import cartpole_mpc as cm
from anvil.sqp import SQPFunction
from tests.conftest import stabilizing_cartpole

THREADS, CALLS = 4, 100
INF = np.inf
DENSE = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 3.0, 0.0], [4.0, 0.0, 0.0, 5.0]])


@contextmanager
def fast_switching() -> Iterator[None]:
  """The GIL handed between threads every microsecond (restored after)."""
  old = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)
  try:
    yield
  finally:
    sys.setswitchinterval(old)


def in_threads(call: Callable[..., Any], inputs: Sequence[tuple[Any, ...]]) -> list[Any]:
  """call(*inputs[i]) for every i, spread over THREADS threads started together; the results in input order."""
  results: list[Any] = [None] * len(inputs)
  start = threading.Barrier(THREADS)

  def work(t: int) -> None:
    start.wait()
    for i in range(t, len(inputs), THREADS):
      results[i] = call(*inputs[i])

  with fast_switching(), ThreadPoolExecutor(THREADS) as pool:
    for future in [pool.submit(work, t) for t in range(THREADS)]:
      future.result()
  return results


def distinct(shape: tuple[int, ...], seed: int, calls: int = CALLS) -> list[np.ndarray]:
  """THREADS * calls distinct random arrays."""
  rng = np.random.default_rng(seed)
  return [rng.standard_normal(shape) for _ in range(THREADS * calls)]


def axpy() -> av.NumericalFunction:
  """test_errors' err_axpy."""
  return av.NumericalFunction("err_axpy", lambda a, x, y: a * x + y, (av.Arg(()), av.Arg(3), av.Arg((3,))))


@pytest.mark.parametrize("path", ["call_arrays", "pointer_array"])
def test_numerical_function(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
  calls = CALLS
  if path == "pointer_array":  # the fallback entry point, taking an array of data pointers
    monkeypatch.setattr(anvil.codegen.caller, "array_data_offset", lambda: None)
    calls = 25 * CALLS  # NOTE: a race between filling a shared pointer array and the call hit ~1 call in 1000
  f = axpy()
  inputs = [(float(a[0]), a[1:4], a[4:]) for a in distinct((7,), 0, calls)]
  expected = [f(*args) for args in inputs]
  for got, want, args in zip(in_threads(f, inputs), expected, inputs, strict=True):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, args[0] * args[1] + args[2])


def test_sparse_numerical_function() -> None:
  pattern = sp.csc_array(DENSE)
  f = av.SparseNumericalFunction("sp_tuple", lambda x: x, av.Arg(5), (pattern.shape, pattern.indices, pattern.indptr))
  inputs = [(v,) for v in distinct((5,), 1)]
  for got, (v,) in zip(in_threads(f, inputs), inputs, strict=True):
    np.testing.assert_array_equal(got.toarray(), sp.csc_array((v, pattern.indices, pattern.indptr)).toarray())


def test_sqp_function() -> None:
  f = av.NumericalFunction("sqp_par_f", lambda x, p: ((x - p[:2]) ** 2).sum(), (av.Arg(2), av.Arg(3)))
  g = av.NumericalFunction("sqp_par_g", lambda x, p: (x.sum() - p[2]).reshape(1), (av.Arg(2), av.Arg(3)))
  solver = SQPFunction("sqp_par", f, g)
  # the target p[:2] in the box [0, 1]^2 with x0 + x1 <= p[2]: every solution differs
  inputs = [(np.zeros(2), p, np.zeros(2), np.ones(2), [-INF], [0.5 + abs(p[2])]) for p in distinct((3,), 2)]
  expected = [solver(*args) for args in inputs]
  for got, want in zip(in_threads(solver, inputs), expected, strict=True):
    assert got.status == want.status == "converged"
    np.testing.assert_allclose(got.x, want.x, atol=1e-9)
    np.testing.assert_allclose(got.lam_g, want.lam_g, atol=1e-7)


def test_mpc_function() -> None:
  mpc = stabilizing_cartpole()
  x0s = [(cm.X0_STABILIZE * (0.2 + 0.0005 * i),) for i in range(THREADS * CALLS)]  # inputs off their bounds
  mpc.reset()
  expected = [mpc(*x0) for x0 in x0s]
  # NOTE: each call warm-starts from whichever call ran before it: the iterates differ, the solutions agree
  for got, want, (x0,) in zip(in_threads(mpc, x0s), expected, x0s, strict=True):
    assert got.status == want.status == "converged"
    np.testing.assert_array_equal(got.x[0], x0)
    np.testing.assert_allclose(got.x, want.x, atol=1e-6)
    np.testing.assert_allclose(got.u, want.u, atol=1e-6)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_calls_while_a_parent_thread_held_the_lock() -> None:
  """`multiprocessing` with the fork start method while another thread is inside a call (holding the controller's,
  the solver's and the JIT's locks): each child gets them back unlocked, and its first call gives the parent's
  result."""
  import multiprocessing

  from anvil.codegen import build, jit

  mpc = stabilizing_cartpole()
  x0 = cm.X0_STABILIZE * 0.3
  mpc.reset()
  want = mpc(x0).u0
  mpc.reset()
  held, release = threading.Event(), threading.Event()

  def inside_a_call() -> None:
    with mpc._lock, jit._LOADING, build._BUILD_LOCK:
      held.set()
      release.wait(60.0)

  thread = threading.Thread(target=inside_a_call)
  thread.start()
  held.wait(10.0)
  try:
    _FORKED[:] = [mpc]  # NOTE: the forked children inherit it (a controller does not pickle)
    with warnings.catch_warnings():  # NOTE: Python 3.12 warns that forking a threaded process may deadlock: the case
      warnings.simplefilter("ignore", DeprecationWarning)
      with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map_async(_first_call, [x0] * 4).get(timeout=120.0)
  finally:
    release.set()
    thread.join()
  for u0 in got:
    np.testing.assert_allclose(u0, want, atol=1e-9)


_FORKED: list[Any] = []


def _first_call(x0: np.ndarray) -> np.ndarray:
  return _FORKED[0](x0).u0
