"""`Scaling`: the factors by which an MPC's NLP is scaled, invisible in its results (do-mpc's `mpc.scaling[...]`).

The SQP then works on x / s_x, u / s_u, h / s_h and h_N / s_hN: states, inputs and constraint rows of comparable size,
so that its absolute tolerances, its line search and its QPs' pivots mean the same for each. The dynamics' defect
rows of a state are scaled as the state, a softened bound's slack as what it relaxes. Bounds, x0, guesses and
results stay in the model's units: the generated controller scales them on the way in and back on the way out.
"""

from __future__ import annotations

from dataclasses import dataclass

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

  `Scaling.from_bounds` gives each component the largest finite magnitude of its bounds; `MPCFunction(...,
  scaling="auto")` takes it from the controller's default bounds.

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

    def largest(lo: F64, hi: F64) -> F64:
      both = np.abs(np.concatenate([np.atleast_2d(lo), np.atleast_2d(hi)]))
      magnitude = np.where(np.isfinite(both), both, 0.0).max(axis=0, initial=0.0)
      return np.where(magnitude > 0, magnitude, 1.0)

    return Scaling(largest(bounds["lbx"][1:], bounds["ubx"][1:]), largest(bounds["lbu"], bounds["ubu"]),
                   largest(bounds["lbh"], bounds["ubh"]), largest(bounds["lbhN"], bounds["ubhN"]))  # fmt: skip
