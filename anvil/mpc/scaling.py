"""`Scaling`: the factors by which an MPC's NLP is scaled, invisible in its results (do-mpc's `mpc.scaling[...]`).

The SQP then works on x / s_x, u / s_u, h / s_h and h_N / s_hN: states, inputs and constraint rows of comparable size,
so that its absolute tolerances, its line search and its QPs' pivots mean the same for each. The dynamics' defect
rows of a state are scaled as the state, a softened bound's slack as what it relaxes. Bounds, x0, guesses and
results stay in the model's units: the generated controller scales them on the way in and back on the way out.

`AutoScaling` chooses the factors from the bounds and from a first linearization of the model at one point (x, u, p):
a state without finite bounds takes its magnitude there, raised to what one step of the linearized dynamics moves it
by when the inputs and the states already scaled move by their factors; a constraint row its bounds' magnitude (where
it has none, its gradient's in the scaled variables), raised until no scaled gradient exceeds `max_gradient` (IPOPT's
gradient-based rule, nlp_scaling_max_gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from anvil.validation import float_array

F64 = NDArray[np.float64]
#: The groups a Scaling names, with the size each takes (states, inputs, path and terminal constraint rows).
GROUPS = ("x", "u", "constraints", "terminal_constraints")


@dataclass(frozen=True, eq=False)
class Scaling:
  """Scale factors of an MPC's states, inputs and constraint rows (positive, finite; None: 1 for every component).

  Args:
    x: (nx,): the SQP works on x / x.
    u: (nu,): on u / u.
    constraints: (nh,): on h / constraints.
    terminal_constraints: (nhN,): on h_N / terminal_constraints.

  `Scaling.from_bounds` gives each component the largest finite magnitude of its bounds; `AutoScaling` (or
  `MPCFunction(..., scaling="auto")`) chooses them from the bounds and a first linearization.

  Example:
    >>> Scaling(x=[1e4, 1e3, 1e4, 365.0], u=[100.0])
  """

  x: ArrayLike | None = None
  u: ArrayLike | None = None
  constraints: ArrayLike | None = None
  terminal_constraints: ArrayLike | None = None

  def factors(self, where: str, sizes: dict[str, int]) -> dict[str, F64]:
    """Each group's factors, checked against its size (`sizes`: nx, nu, nh, nhN by group)."""
    out = {}
    for group in GROUPS:
      given, size = getattr(self, group), sizes[group]
      values = np.ones(size) if given is None else float_array(where, f"scaling.{group}", given, (size,), finite=True)
      if np.any(values <= 0):
        raise ValueError(f"{where}: scaling.{group} must be positive, got {values}")
      out[group] = values
    return out

  @staticmethod
  def from_bounds(bounds: dict[str, F64]) -> Scaling:
    """Each component's largest finite bound magnitude (1 where it has none) from per-stage bounds (lbx, ubx, lbu,
    ubu, lbh, ubh, lbhN, ubhN, as MPCFunction.defaults holds them)."""

    return Scaling(*(_unit(bound_magnitude(bounds, group)) for group in GROUPS))


#: Each group's bounds in MPCFunction.defaults (the states' from stage 1: x_0's are the initial state's).
BOUNDS = {
  "x": ("lbx", "ubx"),
  "u": ("lbu", "ubu"),
  "constraints": ("lbh", "ubh"),
  "terminal_constraints": ("lbhN", "ubhN"),
}


def bound_magnitude(bounds: dict[str, F64], group: str) -> F64:
  """Each component's largest finite bound magnitude over the stages (0 where it has none)."""
  lo, hi = (np.atleast_2d(bounds[key])[1:] if group == "x" else np.atleast_2d(bounds[key]) for key in BOUNDS[group])
  both = np.abs(np.concatenate([lo, hi]))
  return np.where(np.isfinite(both), both, 0.0).max(axis=0, initial=0.0)


class Linearization(NamedTuple):
  """The model's Jacobians at one point: the dynamics' dx_next/d[x; u] (nx, nx + nu), the path constraints'
  dh/d[x; u] (nh, nx + nu) and the terminal constraints' dh_N/dx (nhN, nx)."""

  dynamics: F64
  constraints: F64
  terminal_constraints: F64


@dataclass(frozen=True, eq=False)
class AutoScaling:
  """Scale factors chosen from the controller's default bounds and a first linearization of the model at (x, u, p).

  Args:
    x: (nx,) the point's states (default: 0 clipped into the state bounds).
    u: (nu,) its inputs (default: 0 clipped into the input bounds).
    p: (np,) its parameters (default: 0; over a scenario tree, the first scenario's values where they apply).
    max_gradient: the largest gradient a scaled constraint row may have in the scaled variables (IPOPT's 100).

  A state or an input with finite bounds takes their largest magnitude. One without takes its magnitude at the
  point; a state is then raised to the largest change one linearized step makes in it when an input, or a state
  already scaled, moves by its factor (in waves: a state scaled in one wave scales the states it drives in the next).
  A constraint row takes its bounds' largest magnitude, or where it has none the largest magnitude of its gradient in
  the scaled variables, and is raised until that gradient is at most `max_gradient`. Whatever gets no magnitude
  takes 1. The point is only where the model is linearized: the factors are fixed when the controller is built.

  Example:
    >>> AutoScaling(x=[1e4, 1e3, 1e4, 365.0], u=[100.0])  # the reactor at its initial state
  """

  x: ArrayLike | None = None
  u: ArrayLike | None = None
  p: ArrayLike | None = None
  max_gradient: float = 100.0

  def point(self, where: str, bounds: dict[str, F64], sizes: tuple[int, int, int], nominal: F64) -> tuple[F64, ...]:
    """The linearization point (x, u, p), checked (`nominal`: the default p)."""
    nx, nu, np_ = sizes
    given = lambda what, value, size: float_array(where, f"scaling.{what}", value, (size,), finite=True)
    x = _inside(bounds["lbx"][1], bounds["ubx"][1]) if self.x is None else given("x", self.x, nx)
    u = _inside(bounds["lbu"][0], bounds["ubu"][0]) if self.u is None else given("u", self.u, nu)
    p = nominal if self.p is None else given("p", self.p, np_)
    gradient = self.max_gradient
    if isinstance(gradient, bool) or not isinstance(gradient, (int, float)) or not 0 < gradient < np.inf:
      raise ValueError(f"{where}: scaling.max_gradient must be a positive finite number, got {gradient!r}")
    return x, u, p

  def factors_at(self, where: str, bounds: dict[str, F64], point: tuple[F64, ...], model: Linearization) -> Scaling:
    """The factors from the bounds and the model's Jacobians at `point`."""
    x, u, _ = point
    for what, jacobian in model._asdict().items():
      if not np.all(np.isfinite(jacobian)):
        raise ValueError(f"{where}: the {what}' Jacobian is not finite at the linearization point x = {x}, u = {u}; "
                         "give AutoScaling(x=..., u=..., p=...) a point where the model is defined")  # fmt: skip
    nx = x.size
    bounded_u = bound_magnitude(bounds, "u")
    su = _unit(np.where(bounded_u > 0, bounded_u, np.abs(u)))
    sx = _state_factors(
      bound_magnitude(bounds, "x"), np.abs(x), model.dynamics[:, :nx] - np.eye(nx), model.dynamics[:, nx:], su
    )
    groups = (("constraints", model.constraints, np.concatenate([sx, su])),
              ("terminal_constraints", model.terminal_constraints, sx))  # fmt: skip
    rows = [self._rows(bounds, group, jacobian, variables) for group, jacobian, variables in groups]
    return Scaling(sx, su, *rows)

  def _rows(self, bounds: dict[str, F64], group: str, jacobian: F64, variables: F64) -> F64:
    """A group of constraint rows' factors: bounds, else gradient; at most `max_gradient` in scaled variables."""
    gradient = np.abs(jacobian * variables).max(axis=1, initial=0.0)
    magnitude = bound_magnitude(bounds, group)
    return _unit(np.maximum(np.where(magnitude > 0, magnitude, gradient), gradient / self.max_gradient))


def _inside(lo: F64, hi: F64) -> F64:
  """0 clipped into [lo, hi]."""
  return np.clip(np.zeros_like(lo), lo, hi)


def _unit(magnitude: F64) -> F64:
  """1 where a magnitude is 0."""
  return np.where(magnitude > 0, magnitude, 1.0)


def _state_factors(bounded: F64, at_point: F64, step: F64, drive: F64, su: F64) -> F64:
  """The states' factors: bounds; else the point's magnitude raised to one step's change (`step`: dx_next/dx - I,
  `drive`: dx_next/du) from the inputs and, wave by wave, from the states already scaled (once nothing drives the
  rest, those with a magnitude at the point are scaled by it, and drive the next waves)."""
  scaled = bounded > 0
  factors = np.where(scaled, bounded, 0.0)
  moved = np.abs(drive * su).max(axis=1, initial=0.0)
  while True:
    reach = np.maximum(moved, np.abs(step[:, scaled] * factors[scaled]).max(axis=1, initial=0.0))
    fresh = ~scaled & (reach > 0)
    if not fresh.any():
      fresh = ~scaled & (at_point > 0)
      if not fresh.any():
        return _unit(factors)
    factors = np.where(fresh, np.maximum(at_point, reach), factors)
    scaled = scaled | fresh
