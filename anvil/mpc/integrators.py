"""`rk4`: a discrete-time model from a continuous one, by classical Runge-Kutta steps."""

from __future__ import annotations

from collections.abc import Callable

from tinygrad import Tensor

from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.base import check_identifier


def rk4(
  name: str, ode: Callable[..., Tensor], dt: float, nx: int, nu: int, np: int = 0, *, steps: int = 1
) -> NumericalFunction:
  """x_next = F(x, u[, p]): `steps` classical RK4 steps of dt / steps with the input held constant.

  Args:
    name: a C++ identifier for the new function.
    ode: the continuous dynamics, `ode(x, u) -> xdot` (or `ode(x, u, p)` when np > 0), written with Tensor ops.
    dt: the sampling time (seconds), > 0.
    nx, nu: state and input sizes; np: parameter size (0: the function takes no parameter).
    steps: integration steps per sampling interval.

  Example:
    >>> F = rk4("cartpole_F", ode, 0.05, nx=4, nu=1)      # F(x, u) -> x_next
  """
  check_identifier(name, "rk4: name")
  if not callable(ode):
    raise TypeError(f"rk4({name}): ode must be callable (x, u[, p]) -> xdot, got {type(ode).__name__}")
  if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not dt > 0:
    raise ValueError(f"rk4({name}): dt must be a positive number, got {dt!r}")
  for what, value, least in (("nx", nx, 1), ("nu", nu, 0), ("np", np, 0), ("steps", steps, 1)):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
      raise ValueError(f"rk4({name}): {what} must be an int >= {least}, got {value!r}")
  h = float(dt) / steps

  def step(x: Tensor, u: Tensor, *p: Tensor) -> Tensor:
    f = lambda x_: _rate(ode, name, nx, x_, u, *p)
    for _ in range(steps):
      k1 = f(x)
      k2 = f(x + h / 2 * k1)
      k3 = f(x + h / 2 * k2)
      k4 = f(x + h * k3)
      x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x

  inputs = (Arg(nx, name="x"), Arg(nu, name="u")) + ((Arg(np, name="p"),) if np else ())
  return NumericalFunction(name, step, inputs)


def _rate(ode: Callable[..., Tensor], name: str, nx: int, x: Tensor, u: Tensor, *p: Tensor) -> Tensor:
  xdot = ode(x, u, *p)
  if not isinstance(xdot, Tensor) or xdot.shape != (nx,):
    got = getattr(xdot, "shape", type(xdot).__name__)
    raise ValueError(f"rk4({name}): ode must return a Tensor of shape ({nx},), got {got}")
  return xdot
