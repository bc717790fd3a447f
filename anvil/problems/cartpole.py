"""P2, the cart-pole: 4 states (cart position, pole angle from upright, their rates), 1 input (the horizontal force
on the cart), one RK4 step of h = 0.05 s."""

from __future__ import annotations

from typing import Any

import numpy as np

from anvil.problems.backend import NUMPY, TINYGRAD, Backend, rk4

MC, MP, LP, G = 1.0, 0.3, 0.5, 9.81
H = 0.05
NX, NU = 4, 1
TEST_X = np.array([0.2, 0.4, -0.3, 0.5])
TEST_U = np.array([3.0])
Q = np.diag([1.0, 1.0, 0.1, 0.1])
R = 0.01


def ode(x: Any, u: Any, b: Backend) -> Any:
  """Continuous dynamics: x = [xc, theta, xc_dot, theta_dot], theta = 0 upright."""
  theta, xd, thd, force = x[1], x[2], x[3], u[0]
  s, c = b.sin(theta), b.cos(theta)
  d = MC + MP * s * s
  xdd = (force - MP * LP * s * thd * thd + MP * G * s * c) / d
  thdd = (force * c - MP * LP * s * c * thd * thd + (MC + MP) * G * s) / (LP * d)
  return b.stack(xd, thd, xdd, thdd)


def step(x: Any, u: Any, b: Backend = TINYGRAD) -> Any:
  """F(x, u): one RK4 step of h = 0.05 s."""
  return rk4(lambda x_, u_: ode(x_, u_, b), x, u, H)


def step_numpy(x: np.ndarray, u: np.ndarray) -> np.ndarray:
  """F(x, u) evaluated with numpy."""
  return step(x, u, NUMPY)
