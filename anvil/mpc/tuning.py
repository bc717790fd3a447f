"""Run-time tuning of an MPC: the weights of its LeastSquares costs and the penalties of its softened bounds, given at
call time (no rebuild) and passed to the generated code in the NLP parameter (`Transcription.tuning_layout`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from anvil.mpc.costs import checked_weight
from anvil.mpc.soft import Soft
from anvil.mpc.transcription import Transcription

#: The costs whose weights a call may replace, and where each sits in the tuning vector.
WEIGHT_SLOTS = {"stage_cost": "stage_weight", "terminal_cost": "terminal_weight"}


def tuning_vector(
  name: str, ocp: Transcription, weights: Mapping[str, Any] | None, soft_penalties: Mapping[str, Any] | None
) -> NDArray[np.float64]:
  """The tuning vector of one call: the build-time weights and penalties with those given replaced.

  Args:
    name: the controller's name (for messages).
    ocp: its transcription.
    weights: {"stage_cost": W, "terminal_cost": W_N} (either key optional): new weights of LeastSquares costs, each
      nr x nr symmetric positive semidefinite (or a length-nr diagonal).
    soft_penalties: {group: (l1, l2) or Soft(l1=..., l2=...)} for groups softened at build time (which components
      are soft is fixed then: a Soft's indices must be None or the same); "x" covers x_N too where the build's did.
  """
  tuning = ocp.default_tuning.copy()
  layout = ocp.tuning_layout
  for key, value in _mapping(name, "weights", weights).items():
    slot = WEIGHT_SLOTS.get(key)
    if slot is None:
      raise ValueError(f"{name}: weights: expected the keys {tuple(WEIGHT_SLOTS)}, got {key!r}")
    if slot not in layout:
      raise ValueError(f"{name}: weights[{key!r}]: the {key} is not a LeastSquares, so it has no weight to change")
    at, shape, size = layout[slot]
    weight = checked_weight(f"{name}: weights[{key!r}]", value, shape[0])
    pattern = getattr(ocp, key).pattern
    if np.any((weight != 0) & ~pattern):
      i, j = np.argwhere((weight != 0) & ~pattern)[0]
      raise ValueError(f"{name}: weights[{key!r}] has nonzeros outside the pattern the controller was built with "
                       "(the build-time weight's nonzeros and diagonal, or LeastSquares(pattern=)), e.g. at "
                       f"({i}, {j})")  # fmt: skip
    tuning[at : at + size] = weight.ravel()
  for group, value in _mapping(name, "soft_penalties", soft_penalties).items():
    # NOTE: x_N softened with the other states (soft={"x": ...} alone at build time) follows "x" here too
    follows = group == "x" and "x_terminal" in ocp.soft and ocp.soft["x_terminal"] is ocp.soft["x"]
    groups = (group, "x_terminal") if follows else (group,)
    entries = [e for e, entry in enumerate(ocp.soft_entries) if entry.group in groups]
    if not entries:
      raise ValueError(f"{name}: soft_penalties[{group!r}]: {group!r} has no softened bound (soft= at build time)")
    l1, l2 = _penalties(name, group, value, ocp.soft[group])
    for key, penalty in (("l1", l1), ("l2", l2)):
      at = layout[key][0]
      tuning[[at + e for e in entries]] = penalty
  return tuning


def _mapping(name: str, what: str, value: Mapping[str, Any] | None) -> Mapping[str, Any]:
  if value is None:
    return {}
  if not isinstance(value, Mapping):
    raise TypeError(f"{name}: {what} must be a dict, got {type(value).__name__}")
  return value


def _penalties(name: str, group: str, value: Any, built: Soft) -> tuple[float, float]:
  """(l1, l2) of a Soft or a pair, checked as Soft checks them; a Soft's indices must be the built ones."""
  if isinstance(value, Soft):
    if value.indices is not None and value.indices != built.indices:
      raise ValueError(f"{name}: soft_penalties[{group!r}]: the softened components are fixed at build time "
                       f"({built.indices}), got indices {value.indices}")  # fmt: skip
    return value.l1, value.l2
  pair = list(np.ravel(value).tolist()) if isinstance(value, (tuple, list, np.ndarray)) else []  # numpy: plain numbers
  if len(pair) != 2:
    raise TypeError(f"{name}: soft_penalties[{group!r}] must be (l1, l2) or a Soft, got {value!r}")
  try:
    spec = Soft(l1=pair[0], l2=pair[1])
  except ValueError as e:
    raise ValueError(f"{name}: soft_penalties[{group!r}]: {e}") from e
  return spec.l1, spec.l2
