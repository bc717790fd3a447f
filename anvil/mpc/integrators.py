"""`rk4`: a discrete-time model from a continuous one, by classical Runge-Kutta steps.

The function it returns is an `ExplicitIntegrator`: a NumericalFunction that also knows its ODE and its method, so an
MPC can take the derivatives of the step from derivatives of the ODE alone (anvil/explicit_rk.hpp) instead of
differentiating the unrolled steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tinygrad import Tensor

from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.base import check_identifier
from anvil.codegen.names import DERIVED_ROOM


def rk4(
  name: str, ode: Callable[..., Tensor], dt: float, nx: int, nu: int, np: int = 0, *, steps: int = 1
) -> NumericalFunction:
  """x_next = F(x, u[, p]): `steps` classical RK4 steps of dt / steps with the input held constant.

  Args:
    name: a C++ identifier for the new function.
    ode: the continuous dynamics, `ode(x, u) -> xdot` (or `ode(x, u, p)` when np > 0), written with Tensor ops.
    dt: the sampling time (seconds), > 0.
    nx: the state size.
    nu: the input size.
    np: the parameter size (0: the function takes no parameter).
    steps: integration steps per sampling interval.

  Example:
    >>> F = rk4("cartpole_F", ode, 0.05, nx=4, nu=1)      # F(x, u) -> x_next
  """
  h, rate = _checked_rate_function(f"rk4({name})", name, ode, dt, nx, nu, np, steps)

  def step(x: Tensor, u: Tensor, *p: Tensor) -> Tensor:
    f = lambda x_: rate.replay(x_, u, *p)
    for _ in range(steps):
      k1 = f(x)
      k2 = f(x + h / 2 * k1)
      k3 = f(x + h / 2 * k2)
      k4 = f(x + h * k3)
      x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x

  return ExplicitIntegrator(name, step, rate, h, steps, RK4_A, RK4_B)


def euler(
  name: str, ode: Callable[..., Tensor], dt: float, nx: int, nu: int, np: int = 0, *, steps: int = 1
) -> NumericalFunction:
  """x_next = F(x, u[, p]): `steps` explicit Euler steps x += h ode(x, u[, p]) of h = dt / steps, the input held
  constant; an MPC differentiates it stage by stage as it does `rk4` (anvil/explicit_rk.hpp). A rate that reads h
  makes other one-step methods: crocoddyl's semi-implicit Euler of a mechanical system x = (q, v) is this on
  (v + h a, a).

  Example:
    >>> F = euler("arm_F", lambda x, u: (x[7:] + h * a(x, u)).cat(a(x, u)), h, nx=14, nu=7)
  """
  h, rate = _checked_rate_function(f"euler({name})", name, ode, dt, nx, nu, np, steps)

  def step(x: Tensor, u: Tensor, *p: Tensor) -> Tensor:
    for _ in range(steps):
      x = x + h * rate.replay(x, u, *p)
    return x

  return ExplicitIntegrator(name, step, rate, h, steps, ((0.0,),), (1.0,))


def _checked_rate_function(
  where: str, name: str, ode: Callable[..., Tensor], dt: float, nx: int, nu: int, np: int, steps: int
) -> tuple[float, NumericalFunction]:
  """An explicit integrator's step length and its ODE as the NumericalFunction `<name>_ode` (arguments checked)."""
  check_model(where, name, ode, "(x, u[, p]) -> xdot", dt, nx=(nx, 1), nu=(nu, 0), np=(np, 0), steps=(steps, 1))
  rate = NumericalFunction(f"{name}_ode", lambda x, u, *p: checked_rate(ode, where, nx, x, u, *p),
                           model_inputs(nx, nu, np))  # fmt: skip
  return float(dt) / steps, rate


#: The classical Runge-Kutta method's Butcher tableau (a strictly lower, b).
RK4_A = ((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0))
RK4_B = (1 / 6, 1 / 3, 1 / 3, 1 / 6)


class ExplicitIntegrator(NumericalFunction[..., Any]):
  """x_next = F(x, u[, p]) = `step`: `steps` steps of length h of an explicit Runge-Kutta method (Butcher tableau a,
  strictly lower, and b) on the ODE `rate`, a NumericalFunction of (x, u[, p]) -> xdot, with the input held constant.
  Made by `rk4`; traced as the unrolled steps, and differentiated stage by stage by an MPC (anvil/explicit_rk.hpp)."""

  #: No algebraic states (an ODE); not implicit (anvil.mpc.ode.Integrator).
  algebraic, implicit = 0, False

  def __init__(
    self,
    name: str,
    step: Callable[..., Tensor],
    rate: NumericalFunction[..., Any],
    h: float,
    steps: int,
    a: tuple[tuple[float, ...], ...],
    b: tuple[float, ...],
  ) -> None:
    super().__init__(name, step, rate.inputs)
    self.rate, self.h, self.steps, self.a, self.b = rate, h, steps, a, b

  def _steps(self, x: np.ndarray, args: tuple[Any, ...], h: float, steps: int) -> np.ndarray:
    """`steps` steps of h of the method from x, in numpy on the compiled rate (args: u[, p])."""
    for _ in range(steps):
      k: list[np.ndarray] = []
      for row in self.a:
        k.append(
          np.asarray(self.rate(x + h * sum((c * kj for c, kj in zip(row, k, strict=False)), np.zeros_like(x)), *args))
        )
      x = x + h * sum(bi * ki for bi, ki in zip(self.b, k, strict=True))
    return x

  def step_error(self, x: Any, u: Any, p: Any = None) -> float:
    """How far this step from x is from the same method's twice as many steps of half the length, relative to
    1 + |x| (max norms; inf where either is not finite): the discretization error's order of magnitude, large where
    the step is too long for the model (a stiff one: its steps diverge where the ODE decays)."""
    x = np.asarray(x, dtype=np.float64)
    args = (u,) if p is None else (u, p)
    with np.errstate(all="ignore"):
      whole, halves = self._steps(x, args, self.h, self.steps), self._steps(x, args, self.h / 2, 2 * self.steps)
      error = float(np.max(np.abs(whole - halves)) / (1.0 + np.max(np.abs(x))))
    return error if np.isfinite(error) else float("inf")

  def unstable_hint(self, x: Any, u: Any, p: Any = None) -> str:
    """Why the discrete model is not to be trusted from (x, u[, p]) and what to do, or "" where a step from there
    agrees with two of half its length to 1%."""
    if (error := self.step_error(x, u, p)) <= 1e-2:
      return ""
    return (
      f"{self.name}: a step from x0 differs from two of half its length by {error:.3g} relative to |x0|: "
      f"its steps of {self.h:g} s are too long for the model (stiff?); take more (steps=) or use irk"
    )


def check_model(where: str, name: str, ode: object, signature: str, dt: object, **sizes: tuple[object, int]) -> None:
  """The checks of an integrator's arguments: a C++ identifier, a callable ODE, dt > 0, each size an int >= its
  least."""
  check_identifier(name, f"{where}: name", DERIVED_ROOM)
  if not callable(ode):
    raise TypeError(f"{where}: ode must be callable {signature}, got {type(ode).__name__}")
  if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not dt > 0:
    raise ValueError(f"{where}: dt must be a positive number, got {dt!r}")
  for what, (value, least) in sizes.items():
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
      raise ValueError(f"{where}: {what} must be an int >= {least}, got {value!r}")


def model_inputs(nx: int, nu: int, np: int) -> tuple[Arg, ...]:
  """The inputs of a discrete-time model: x, u and (np > 0) p."""
  return (Arg(nx, name="x"), Arg(nu, name="u")) + ((Arg(np, name="p"),) if np else ())


def checked_rate(ode: Callable[..., Tensor], where: str, nx: int, *args: Tensor) -> Tensor:
  """ode(*args), checked to be a Tensor of shape (nx,)."""
  xdot = ode(*args)
  if not isinstance(xdot, Tensor) or xdot.shape != (nx,):
    got = getattr(xdot, "shape", type(xdot).__name__)
    raise ValueError(f"{where}: ode must return a Tensor of shape ({nx},), got {got}")
  return xdot
