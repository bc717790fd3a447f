"""A tiny math backend so each model is written once and evaluated with numpy, traced with tinygrad, or built with
CasADi symbols (for the IPOPT references)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Tensor


@dataclass(frozen=True)
class Backend:
  """The few operations the models use: elementwise sin, cos, sqrt and exp, stacking scalars into a vector,
  concatenating vectors, and the sum of a vector's entries."""

  sin: Callable[[Any], Any]
  cos: Callable[[Any], Any]
  stack: Callable[..., Any]
  sqrt: Callable[[Any], Any]
  cat: Callable[..., Any]
  sum: Callable[[Any], Any]
  exp: Callable[[Any], Any]


NUMPY = Backend(
  sin=np.sin, cos=np.cos, stack=lambda *xs: np.array(xs, dtype=np.float64), sqrt=np.sqrt,
  cat=lambda *vs: np.concatenate(vs), sum=np.sum, exp=np.exp,
)  # fmt: skip
TINYGRAD = Backend(
  sin=Tensor.sin, cos=Tensor.cos, stack=lambda *xs: Tensor.stack(*xs), sqrt=Tensor.sqrt,
  cat=lambda *vs: Tensor.cat(*vs), sum=Tensor.sum, exp=Tensor.exp,
)  # fmt: skip


def casadi_backend(ca: Any) -> Backend:
  """The backend on CasADi symbols (SX or MX); `ca` is the casadi module (a development dependency, imported by the
  caller)."""
  return Backend(sin=ca.sin, cos=ca.cos, stack=ca.vertcat, sqrt=ca.sqrt, cat=ca.vertcat, sum=ca.sum1, exp=ca.exp)


def rk4(ode: Callable[[Any, Any], Any], x: Any, u: Any, h: float) -> Any:
  """One classical RK4 step with the input held constant over the step."""
  k1 = ode(x, u)
  k2 = ode(x + h / 2 * k1, u)
  k3 = ode(x + h / 2 * k2, u)
  k4 = ode(x + h * k3, u)
  return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def radau_step(rate: Callable[[Any], Any], x: Any, dt: float, tol: float = 1e-10) -> Any:
  """x after dt of x' = rate(x) by scipy's Radau (rtol = atol = tol): a plant for the stiff models' examples."""
  from scipy.integrate import solve_ivp

  sol = solve_ivp(lambda t, z: rate(z), (0.0, dt), x, method="Radau", rtol=tol, atol=tol)
  return np.asarray(sol.y[:, -1], dtype=np.float64)
