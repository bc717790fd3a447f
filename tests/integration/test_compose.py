"""A NumericalFunction called on Tensors inside another traced function is a composition: its graph is inlined, so the
outer function computes (in Python and in its generated C++) what the two compute one after the other."""

from __future__ import annotations

import numpy as np
import pytest

import anvil as av
from anvil import Arg, Tensor
from anvil.ad import jacobian, spjacobian
from anvil.mpc import rk4

W = np.array([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]])
X = np.array([0.3, -1.2, 0.7])


def _inner() -> av.NumericalFunction:
  weights = Tensor(W)  # a captured constant of the inner function
  return av.NumericalFunction("comp_inner", lambda x: ((weights @ x).sin(), (x * x).sum()), (Arg(3),))


def test_a_function_inside_another_is_inlined() -> None:
  inner = _inner()
  outer = av.NumericalFunction("comp_outer", lambda x: (inner(x)[0] * 2.0).sum() + inner(x * 3.0)[1], (Arg(3),))
  assert outer(X) == pytest.approx(2.0 * np.sin(W @ X).sum() + np.sum((3.0 * X) ** 2), rel=1e-14)
  # called outside a trace on data it still evaluates: arrays in, arrays out
  values, norm = inner(Tensor(X))
  np.testing.assert_allclose(values, np.sin(W @ X), rtol=1e-14)
  assert isinstance(values, np.ndarray) and norm == pytest.approx(np.sum(X * X), rel=1e-14)


def test_derivatives_compose_dense_and_sparse() -> None:
  f = av.NumericalFunction("comp_f", lambda x: Tensor.stack(x[0] * x[1], x[1].sin() + x[2] ** 2), (Arg(3),))
  dense, sparse = jacobian(f), spjacobian(f)  # the sparse one is evaluated compressed (a gather) in C++
  both = av.NumericalFunction("comp_jacs", lambda x: (dense(x).sum(), sparse(x).sum()), (Arg(3),))
  total_dense, total_sparse = both(X)
  expected = np.array([[X[1], X[0], 0.0], [0.0, np.cos(X[1]), 2 * X[2]]])
  assert total_dense == pytest.approx(expected.sum(), rel=1e-14)
  assert total_sparse == pytest.approx(sparse(X).data.sum(), rel=1e-14) == pytest.approx(expected.sum(), rel=1e-14)


def test_dynamics_inside_a_cost() -> None:
  F = rk4("comp_F", lambda x, u: Tensor.stack(x[1], u[0] - x[0]), 0.1, nx=2, nu=1)
  cost = av.NumericalFunction("comp_cost", lambda x, u: (F(x, u) ** 2).sum(), (Arg(2), Arg(1)))
  x, u = np.array([0.4, -0.2]), np.array([0.5])
  assert cost(x, u) == pytest.approx(np.sum(F(x, u) ** 2), rel=1e-14)


def test_a_composition_checks_its_inputs() -> None:
  inner = _inner()
  with pytest.raises(ValueError, match=r"comp_inner: input 0 \(x\): expected shape \(3,\), got \(2,\)"):
    _ = av.NumericalFunction("comp_bad_shape", lambda x: inner(x[:2])[1], (Arg(3),)).traced
  with pytest.raises(TypeError, match=r"comp_inner: takes 1 inputs, got 2"):
    _ = av.NumericalFunction("comp_bad_count", lambda x: inner(x, x)[1], (Arg(3),)).traced
  counted = av.NumericalFunction("comp_index", lambda k: k * 2, (Arg(3, av.dtypes.int32),))
  with pytest.raises(TypeError, match=r"comp_index: input 0 \(k\): expected int, got double"):
    _ = av.NumericalFunction("comp_bad_dtype", lambda x: counted(x), (Arg(3),)).traced


def test_replay_runs_the_python_once_and_builds_the_same_graph(monkeypatch: pytest.MonkeyPatch) -> None:
  """`replay` (an integrator applying its rate at every Runge-Kutta stage) substitutes the inputs of the rate's trace:
  the rate's Python runs once for the four stages, the step's graph (its cache key) is the one that running the rate
  four times builds, and a call the trace does not fit (float32 inputs) runs the Python."""
  runs = []

  def ode(x: Tensor, u: Tensor) -> Tensor:
    runs.append(x.shape)
    return Tensor.stack(x[1], -x[0].sin() + u[0] - 0.1 * x[1] * x[1].detach())

  F = rk4("replay_F", ode, 0.1, nx=2, nu=1)
  replayed = F.key
  assert runs == [(2,)]  # traced once, for the rate's own graph; the four stages replayed it
  x, u = np.array([0.4, -0.2]), np.array([0.3])
  f = lambda x_: np.array([x_[1], -np.sin(x_[0]) + u[0] - 0.1 * x_[1] ** 2])
  k1 = f(x)
  k2 = f(x + 0.05 * k1)
  k3 = f(x + 0.05 * k2)
  k4 = f(x + 0.1 * k3)
  np.testing.assert_allclose(F(x, u), x + 0.1 / 6 * (k1 + 2 * k2 + 2 * k3 + k4), rtol=1e-14)
  monkeypatch.setattr(av.NumericalFunction, "replay", lambda self, *args: self.fn(*args))
  assert rk4("replay_F", ode, 0.1, nx=2, nu=1).key == replayed and len(runs) == 5
  monkeypatch.undo()
  single = av.NumericalFunction(
    "replay_f32", lambda x_, u_: F.rate.replay(x_, u_), (Arg(2, "float32"), Arg(1, "float32"))
  )
  np.testing.assert_allclose(single(x, u), f(x), rtol=1e-6)
  assert len(runs) == 6  # float32 tensors: not the trace's float64 ones
