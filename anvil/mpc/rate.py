"""`InputRate`: an MPC's input-rate terms, a weight on du_k = u_k - u_{k-1} and bounds lo <= du_k <= hi, with u_{-1}
the input applied before the call.

A rate couples consecutive stages' inputs, which the stage-wise QP (the Riccati recursion) cannot hold, so the
transcription carries the previous input as extra states of each stage: x~_k = [x_k; v_k] with v_{k+1} = u_k and
v_0 = u_{-1}; the rate is u_k - v_k, a stage-local term. The user, the plant and the generated call() see x alone:
the controller maps x0, u_{-1}, the bounds and the predicted states to and from the augmented ones
(anvil/input_rate.hpp).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from anvil.mpc.costs import checked_weight
from anvil.validation import check_bounds, float_array

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class InputRate:
  """The rate terms: `weight` (nu x nu, symmetric PSD; zero when only bounds are given) and the bounds `lower`,
  `upper` (nu,) on u_k - u_{k-1} (±inf: none)."""

  weight: F64
  lower: F64
  upper: F64

  @staticmethod
  def of(name: str, nu: int, bounds: tuple[ArrayLike, ArrayLike] | None, weight: ArrayLike | None) -> InputRate | None:
    """The terms from MPCFunction's u_rate_bounds and u_rate_weight (None when neither is given), checked."""
    if bounds is None and weight is None:
      return None
    owner = f"{name}: u_rate_weight"
    w = np.zeros((nu, nu)) if weight is None else checked_weight(owner, weight, nu)
    lower, upper = np.full(nu, -np.inf), np.full(nu, np.inf)
    if bounds is not None:
      if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise TypeError(f"{name}: u_rate_bounds must be a pair (lower, upper)")
      lower, upper = (np.broadcast_to(float_array(name, f"u_rate_bounds {side}", v, None), (nu,)).astype(np.float64)
                      for side, v in zip(("lower", "upper"), bounds, strict=True))  # fmt: skip
      check_bounds(name, "u_rate_bounds", lower, upper, lambda i: f"input {i[0]}")
      if np.any(lower > 0) or np.any(upper < 0):
        raise ValueError(f"{name}: u_rate_bounds must allow a zero rate (lower <= 0 <= upper): holding the input")
    return InputRate(w, lower, upper)

  @property
  def weighted(self) -> bool:
    """Whether the rates have a cost (a nonzero weight)."""
    return bool(np.any(self.weight))

  @property
  def bounded(self) -> bool:
    """Whether any rate bound is finite (the rate rows of g exist)."""
    return bool(np.isfinite(self.lower).any() or np.isfinite(self.upper).any())
