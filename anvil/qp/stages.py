"""`StageLayout`: where each variable and constraint row of a QP sits in the stages of an optimal control problem
(given by an MPC's transcription, or found by `anvil.qp.search_stages`), for the Riccati backend
(anvil/qp/riccati_backend.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from anvil.codegen.sparse import stored_coordinates
from anvil.qp.riccati import check_parents

ROW_KINDS = ("initial", "dynamics", "stage")


@dataclass(frozen=True)
class StageLayout:
  """Where the variables and constraint rows of an NLP's QPs sit in the stages of an optimal control problem.

  Attributes:
    N: stages with dynamics (the horizon); stage N holds the last states.
    nx: states per stage.
    nu: inputs per stage k < N (every variable of the stage after its states).
    nuN: inputs at stage N (they enter no dynamics, e.g. slacks of terminal constraints).
    variables: for each variable, (stage, index): index < nx is the state x_k[index], else input index - nx.
    rows: for each constraint row, ("initial", 0, i): x_0[i] equals its bound; ("dynamics", k, i): x_{k+1}[i] minus
      terms of stage k's variables equals its bound; ("stage", k, j): the j-th row of stage k, between its bounds.
    coefficients: for each constraint row, the coefficient of its state in an initial or dynamics row (a nonzero
      constant: the row is that multiple of the forms above; 1.0 on stage rows); empty (the default): all 1.0.
    parents: the stages as a tree (a scenario tree of multi-stage robust MPC): stage k's parent for k = 0..N (-1 at
      stage 0, a stage before k elsewhere); the dynamics row ("dynamics", k, i) then gives x_{k+1}[i] from the
      variables of stage k + 1's parent (stage k in a chain). A stage k < N without children is a leaf: its inputs,
      if it has any, enter no dynamics. Empty (the default): a chain.
    initial_bounds: x_0 has no initial rows: its bounds fix it (lbx = ubx on x_0 at every call, as a CasADi user
      writes lbw = ubw = x0), and their identity rows of the QP are its initial rows. False (the default): rows do.
    soft: the slacks of soft constraints, as (variable, lower row, upper row): an input of its stage, bounded below
      only, entering no row but the two stage rows of its stage it relaxes, row + s >= lo (lower row, no upper bound)
      and row - s <= hi (upper row, no lower bound; either row -1: none), with a Hessian entry on its diagonal alone.
      The Riccati backend eliminates them: their rows become the interior point's elastic rows (priced by the
      slack's cost), so they are no inputs of the stage QP. Empty (the default): none.

  Example:
    >>> StageLayout(N=1, nx=1, nu=1, nuN=0, variables=((0, 0), (0, 1), (1, 0)),
    ...             rows=(("initial", 0, 0), ("dynamics", 0, 0)))
  """

  N: int
  nx: int
  nu: int
  nuN: int
  variables: tuple[tuple[int, int], ...]
  rows: tuple[tuple[str, int, int], ...]
  coefficients: tuple[float, ...] = ()
  soft: tuple[tuple[int, int, int], ...] = ()
  initial_bounds: bool = False
  parents: tuple[int, ...] = ()

  def __post_init__(self) -> None:
    check_parents("StageLayout", self.parents, self.N)
    for what, value, least in (("N", self.N, 1), ("nx", self.nx, 1), ("nu", self.nu, 1), ("nuN", self.nuN, 0)):
      if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"StageLayout.{what}: expected an int >= {least}, got {value!r}")
    size = lambda k: self.nx + (self.nu if k < self.N else self.nuN)
    for v, (k, i) in enumerate(self.variables):
      if not (0 <= k <= self.N and 0 <= i < size(k)):
        raise ValueError(f"StageLayout: variable {v} at ({k}, {i}) is outside the stages")
    if len(set(self.variables)) != len(self.variables):
      raise ValueError("StageLayout: two variables at one place of a stage")
    if missing := {(k, i) for k in range(self.N + 1) for i in range(self.nx)} - set(self.variables):
      raise ValueError(f"StageLayout: no variable is the state at (stage, index) {min(missing)}")
    for r, (kind, k, i) in enumerate(self.rows):
      limit = self.nx if kind != "stage" else None
      if kind not in ROW_KINDS or not 0 <= k <= (0 if kind == "initial" else self.N - (kind == "dynamics")):
        raise ValueError(f"StageLayout: row {r} is {(kind, k, i)}; kinds are {ROW_KINDS} at stages in range")
      if i < 0 or (limit is not None and i >= limit):
        raise ValueError(f"StageLayout: row {r} ({kind} at stage {k}) has index {i} out of range")
    counts = Counter((kind, k, i) for kind, k, i in self.rows if kind != "stage")
    initial = set() if self.initial_bounds else {("initial", 0, i) for i in range(self.nx)}
    expected = initial | {("dynamics", k, i) for k in range(self.N) for i in range(self.nx)}
    if set(counts) != expected or max(counts.values()) > 1:
      x0 = "fixed by its bounds (initial_bounds), none" if self.initial_bounds else "its initial row"
      raise ValueError(f"StageLayout: every state needs exactly one row: x_0 {x0}, x_{{k+1}} its dynamics row")
    scales = self.coefficients
    stage_rows = [r for r, (kind, _, _) in enumerate(self.rows) if kind == "stage"]
    if scales and (len(scales) != len(self.rows) or not all(np.isfinite(scales)) or 0.0 in scales
                   or any(scales[r] != 1.0 for r in stage_rows)):  # fmt: skip
      raise ValueError("StageLayout.coefficients: one finite nonzero number per row, 1.0 on stage rows")
    used = [r for _, lo, hi in self.soft for r in (lo, hi) if r >= 0]
    for v, lo, hi in self.soft:
      k, i = self.variables[v] if 0 <= v < len(self.variables) else (-1, -1)
      rows_ok = all(r == -1 or (0 <= r < len(self.rows) and self.rows[r][:2] == ("stage", k)) for r in (lo, hi))
      if i < self.nx or not rows_ok or lo == hi:
        raise ValueError(f"StageLayout.soft: {(v, lo, hi)} needs an input variable and stage rows of its stage")
    if len(set(used)) != len(used) or len({v for v, _, _ in self.soft}) != len(self.soft):
      raise ValueError("StageLayout.soft: a slack or a row softened twice")

  def parent(self, stage: int) -> int:
    """The stage whose variables stage `stage`'s states follow from (stage - 1 in a chain; stage >= 1)."""
    return self.parents[stage] if self.parents else stage - 1

  def coefficient(self, row: int) -> float:
    """The coefficient of row `row`'s state (1.0 on stage rows)."""
    return float(self.coefficients[row]) if self.coefficients else 1.0

  @property
  def general_rows(self) -> tuple[int, int]:
    """Rows besides the box rows per stage k < N (the most any stage has) and at stage N."""
    stage = [j + 1 for kind, k, j in self.rows if kind == "stage" and k < self.N]
    final = [j + 1 for kind, k, j in self.rows if kind == "stage" and k == self.N]
    return max(stage, default=0), max(final, default=0)

  def dynamic_inputs(self, a_pattern: sp.csc_array) -> int:
    """The inputs per stage that enter the dynamics in the constraint pattern `a_pattern` (rows as `rows`): one more
    than the last input index any dynamics row has an entry at, so the Riccati recursion can skip the rest (the
    slacks of soft constraints, which are inputs of their stage)."""
    last = -1
    for r, c in stored_entries(a_pattern):
      if r < len(self.rows) and self.rows[r][0] == "dynamics" and (i := self.variables[c][1] - self.nx) >= 0:
        last = max(last, i)
    return last + 1


def stored_entries(matrix: sp.csc_array) -> list[tuple[int, int]]:
  """(row, column) of every stored entry of a CSC matrix, in storage order."""
  rows, cols = stored_coordinates(matrix)
  return list(zip(rows.tolist(), cols.tolist(), strict=True))
