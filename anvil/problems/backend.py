"""A tiny math backend so each model is written once and evaluated with numpy or traced with tinygrad."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Tensor


@dataclass(frozen=True)
class Backend:
  """The few operations the models use: elementwise sin/cos and stacking scalars into a vector."""

  sin: Callable[[Any], Any]
  cos: Callable[[Any], Any]
  stack: Callable[..., Any]


NUMPY = Backend(sin=np.sin, cos=np.cos, stack=lambda *xs: np.array(xs, dtype=np.float64))
TINYGRAD = Backend(sin=Tensor.sin, cos=Tensor.cos, stack=lambda *xs: Tensor.stack(*xs))


def rk4(ode: Callable[[Any, Any], Any], x: Any, u: Any, h: float) -> Any:
  """One classical RK4 step with the input held constant over the step."""
  k1 = ode(x, u)
  k2 = ode(x + h / 2 * k1, u)
  k3 = ode(x + h / 2 * k2, u)
  k4 = ode(x + h * k3, u)
  return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
