"""detach() is a stop-gradient on the scalar route too, and `y.detach() + J (x - x.detach())` carries a custom
derivative: y's value (the correction folds away in the emitted code), J's derivative, at every order."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.ad import gradient, hessian, jacobian, sphessian, spjacobian
from anvil.ad.scalar import scalar_route

N = 3


def smooth(x: Tensor) -> Tensor:
  """Many small tensor ops (a loop of element-wise updates): the scalar route."""
  y = [x[k] for k in range(N)]
  for _ in range(40):
    y = [y[k] * 0.99 + (y[(k + 1) % N] * y[k]).sin() * 0.01 for k in range(N)]
  return Tensor.stack(*y)


def smooth_np(x: np.ndarray) -> np.ndarray:
  y = x.copy()
  for _ in range(40):
    y = y * 0.99 + np.sin(np.roll(y, -1) * y) * 0.01
  return y


def custom(x: Tensor) -> Tensor:
  """smooth's value with the derivative diag(1, 2, 3) (and no second derivative)."""
  return smooth(x).detach() + (x - x.detach()) * Tensor([1.0, 2.0, 3.0])


def test_custom_derivative_on_the_scalar_route() -> None:
  fn = av.NumericalFunction("custom_derivative", custom, av.Arg(N))
  assert scalar_route(fn)
  x = np.array([0.3, -0.7, 1.1])
  np.testing.assert_allclose(fn(x), smooth_np(x), rtol=0, atol=1e-15)
  np.testing.assert_array_equal(jacobian(fn)(x), np.diag([1.0, 2.0, 3.0]))
  np.testing.assert_array_equal(spjacobian(fn)(x).toarray(), np.diag([1.0, 2.0, 3.0]))
  # the correction folds away: the value's code is no longer than smooth's own
  plain = av.NumericalFunction("plain_smooth", smooth, av.Arg(N))
  assert fn.source_code.count("=") <= plain.source_code.count("=")


@pytest.mark.parametrize("route", ["dense", "sparse"])
def test_detach_stops_derivatives(route: str) -> None:
  # f = Σ smooth(x)_k sg(x_k): ∇f = J_smoothᵀ sg(x), and the Hessian differentiates only smooth
  fn = av.NumericalFunction(f"stopped_{route}", lambda x: (smooth(x) * x.detach()).sum(), av.Arg(N))
  ref = av.NumericalFunction(f"free_{route}", lambda x, c: (smooth(x) * c).sum(), (av.Arg(N), av.Arg(N)))
  assert scalar_route(fn)
  x = np.array([0.5, 0.2, -0.4])
  np.testing.assert_allclose(gradient(fn)(x), gradient(ref)(x, x), rtol=1e-13)
  h = hessian(fn)(x) if route == "dense" else sphessian(fn)(x).toarray()
  want = hessian(ref)(x, x) if route == "dense" else sphessian(ref)(x, x).toarray()
  np.testing.assert_allclose(h, want, rtol=1e-13, atol=1e-15)
