"""P1, the quadrotor: 12 states (position, ZYX Euler angles, world velocity, body rates), 4 rotor thrusts, one RK4
step of h = 0.02 s."""

from __future__ import annotations

from typing import Any

import numpy as np

from anvil.problems.backend import NUMPY, TINYGRAD, Backend, rk4

M, G, L, KAPPA = 0.5, 9.81, 0.175, 0.016
JX, JY, JZ = 2.3e-3, 2.3e-3, 4.0e-3
H = 0.02
NX, NU = 12, 4
HOVER = np.full(NU, M * G / 4)
TEST_X = np.array([0.1, -0.2, 1.0, 0.1, -0.05, 0.3, 0.5, -0.3, 0.2, 0.4, -0.6, 0.2])
TEST_U = np.array([1.3, 1.1, 1.25, 1.2])


def ode(x: Any, u: Any, b: Backend) -> Any:
  """Continuous dynamics x' = f(x, u): ZYX Euler angles, world velocity, body rates."""
  phi, theta, psi = x[3], x[4], x[5]
  p, q, r = x[9], x[10], x[11]
  f1, f2, f3, f4 = u[0], u[1], u[2], u[3]
  thrust = f1 + f2 + f3 + f4
  tau_x, tau_y, tau_z = L * (f2 - f4), L * (f3 - f1), KAPPA * (f1 - f2 + f3 - f4)
  sphi, cphi, sth, cth, spsi, cpsi = b.sin(phi), b.cos(phi), b.sin(theta), b.cos(theta), b.sin(psi), b.cos(psi)
  qr = q * sphi + r * cphi
  a = thrust / M
  return b.stack(
    x[6], x[7], x[8],
    p + qr * sth / cth, q * cphi - r * sphi, qr / cth,
    a * (cpsi * sth * cphi + spsi * sphi), a * (spsi * sth * cphi - cpsi * sphi), a * (cth * cphi) - G,
    (tau_x - (q * JZ * r - r * JY * q)) / JX,
    (tau_y - (r * JX * p - p * JZ * r)) / JY,
    (tau_z - (p * JY * q - q * JX * p)) / JZ,
  )  # fmt: skip


def step(x: Any, u: Any, b: Backend = TINYGRAD) -> Any:
  """F(x, u): one RK4 step of h = 0.02 s."""
  return rk4(lambda x_, u_: ode(x_, u_, b), x, u, H)


def step_numpy(x: np.ndarray, u: np.ndarray) -> np.ndarray:
  """F(x, u) evaluated with numpy."""
  return step(x, u, NUMPY)
