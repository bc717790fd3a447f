"""`Soft`: which bounds of an MPC may be violated, and the L1/L2 penalties on the violation."""

from __future__ import annotations

from dataclasses import dataclass

#: The bound groups an MPC can soften.
SOFT_GROUPS = ("x", "u", "constraints", "x_terminal", "terminal_constraints")
#: Which bounds of a component a Soft softens (the others stay hard), as the C++ controller numbers them.
SOFT_SIDES = {"both": 0, "lower": 1, "upper": 2}


@dataclass(frozen=True)
class Soft:
  """Soften the bounds of some components: each gets a slack s ≥ 0 (lb - s ≤ v ≤ ub + s) costing l1·s + l2·s².

  The transcription adds the slacks (one per softened component and stage); an exact L1 penalty (l1 larger than the
  constraint's multiplier) keeps the solution of a feasible problem unchanged while an infeasible one stays
  solvable.

  Args:
    indices: the components to soften (None: all of the group).
    l1: linear penalty weight, ≥ 0.
    l2: quadratic penalty weight, ≥ 0 (l1 + l2 > 0).
    side: "both" bounds soft, or only the "lower" (lb - s ≤ v ≤ ub) or the "upper" (lb ≤ v ≤ ub + s) one, the
      other kept hard (do-mpc's and acados's one-sided soft constraints).

  Example:
    >>> MPCFunction(..., x_bounds=(lbx, ubx), soft={"x": Soft(indices=(0,), l1=1e3, l2=1e2)})
    >>> MPCFunction(..., constraints=h, constraint_bounds=(lo, hi), soft={"constraints": Soft(side="upper")})
  """

  indices: tuple[int, ...] | None = None
  l1: float = 1e3
  l2: float = 0.0
  side: str = "both"

  def __post_init__(self) -> None:
    for what in ("l1", "l2"):
      value = getattr(self, what)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"Soft.{what}: expected a finite number >= 0, got {value!r}")
    if self.side not in SOFT_SIDES:
      raise ValueError(f"Soft.side: expected one of {tuple(SOFT_SIDES)}, got {self.side!r}")
    if self.l1 + self.l2 <= 0:
      raise ValueError("Soft: l1 + l2 must be positive (a free slack would make the bound meaningless)")
    if self.indices is not None:
      object.__setattr__(self, "indices", tuple(self.indices))
      if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in self.indices):
        raise ValueError(f"Soft.indices: expected non-negative ints, got {self.indices!r}")
      if len(set(self.indices)) != len(self.indices):
        raise ValueError(f"Soft.indices: repeated index in {self.indices!r}")

  def components(self, size: int, group: str) -> tuple[int, ...]:
    """The softened components of a group of `size` bounds (`group` names it in the error)."""
    chosen = tuple(range(size)) if self.indices is None else self.indices
    if any(i >= size for i in chosen):
      raise ValueError(f"{group}: Soft.indices {chosen} out of range: the group has {size} bounds (0 .. {size - 1})")
    return chosen
