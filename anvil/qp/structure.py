"""Finding the stage structure of an optimal control problem in the patterns of an NLP (multiple shooting written the
natural way, as a loop over the stages or in any order of variables and rows), so that its QPs can be solved by the
Riccati interior point.

The structure is read from the pattern of ∂g/∂x, the entries of it that are constants, and the pattern of the
Lagrangian Hessian. Starting from the initial rows (rows with one entry, a constant: x_0[i] = x0[i]), each stage is
grown from its states: the variables sharing a row with them that are not the next stage's states are its inputs
(those in two of its rows, with a varying coefficient or coupled to it in the Hessian, then whatever else the rows
touching them reach); each remaining row reaching one variable outside the stage, with a constant coefficient, is a
dynamics row and that variable a state of the next stage (the one used by later rows where a row has several). The
stage without dynamics rows is the last. The result is checked again where it is used: a layout the patterns do not
fit (the Hessian or a row coupling two stages) is refused by the Riccati backend.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from anvil.qp.stages import StageLayout


def detect_stages(jacobian: sp.csc_array, constants: NDArray[np.float64], hessian: sp.csc_array) -> StageLayout | None:
  """The stage layout of an NLP whose constraints have the multiple-shooting structure, or None.

  Args:
    jacobian: the pattern of ∂g/∂x (m x n, CSC).
    constants: each stored entry of `jacobian` (CSC order): its value where it is the same at every point, else NaN.
    hessian: the pattern of the Lagrangian Hessian (n x n; one triangle or both).

  Example:
    >>> layout = detect_stages(sp.csc_array(J), np.full(J.nnz, np.nan), sp.csc_array(H))
  """
  return _Sweep(jacobian, constants, hessian).layout()


@dataclass
class _Stage:
  """One stage as the sweep finds it."""

  states: list[int]
  inputs: list[int] = field(default_factory=list)
  rows: list[int] = field(default_factory=list)
  dynamics: list[tuple[int, int]] = field(default_factory=list)  # (row, the next stage's state)


class _Sweep:
  """The stage-by-stage sweep of detect_stages over the rows and columns of the patterns."""

  def __init__(self, jacobian: sp.csc_array, constants: NDArray[np.float64], hessian: sp.csc_array) -> None:
    self.m, self.n = jacobian.shape
    cols = np.repeat(np.arange(self.n), np.diff(jacobian.indptr))
    self.cols_of: list[list[int]] = [[] for _ in range(self.m)]
    self.rows_of: list[list[int]] = [[] for _ in range(self.n)]
    self.value: dict[tuple[int, int], float] = {}
    for r, c, v in zip(jacobian.indices.tolist(), cols.tolist(), np.asarray(constants, dtype=np.float64).tolist(),
                       strict=True):  # fmt: skip
      self.cols_of[r].append(c)
      self.rows_of[c].append(r)
      self.value[(r, c)] = v
    hess = sp.coo_array(hessian)
    self.coupled: list[set[int]] = [set() for _ in range(self.n)]
    for i, j in zip(hess.row.tolist(), hess.col.tolist(), strict=True):
      if i != j:
        self.coupled[i].add(j)
        self.coupled[j].add(i)
    self.stage_of: dict[int, int] = {}  # variable -> stage
    self.row_kind: dict[int, str] = {}
    self.initial_rows: list[int] = []

  def constant(self, r: int, c: int) -> bool:
    """Whether entry (r, c) is a nonzero constant."""
    v = self.value[(r, c)]
    return math.isfinite(v) and v != 0.0

  def initial(self) -> _Stage | None:
    """Stage 0's states: the columns of the rows with one entry, a constant (one row per column)."""
    states: list[int] = []
    for r in range(self.m):
      if len(self.cols_of[r]) == 1 and self.constant(r, c := self.cols_of[r][0]) and c not in self.stage_of:
        states.append(c)
        self.initial_rows.append(r)
        self.stage_of[c], self.row_kind[r] = 0, "initial"
    return _Stage(states) if states else None

  def layout(self) -> StageLayout | None:
    """The layout of the stages swept from the initial rows, or None."""
    stage = self.initial()
    if stage is None:
      return None
    stages = [stage]
    while True:
      if not self.grow(stage, len(stages) - 1):
        return None
      if not stage.dynamics:
        break
      stage = _Stage([c for _, c in stage.dynamics])
      for c in stage.states:
        self.stage_of[c] = len(stages)
      stages.append(stage)
    return self.assemble(stages)

  def grow(self, stage: _Stage, k: int) -> bool:
    """Adds stage k's inputs, stage rows and dynamics rows; False where its rows do not fit the structure."""
    members = set(stage.states)
    while True:
      pending = sorted({r for v in members for r in self.rows_of[v] if r not in self.row_kind})
      outside = {r: [c for c in self.cols_of[r] if c not in members] for r in pending}
      count = Counter(c for cs in outside.values() for c in cs)
      inputs = {c for r, cs in outside.items() for c in cs if count[c] > 1 or not self.constant(r, c)}
      inputs |= {c for v in members for c in self.coupled[v]} - members
      if not inputs:
        found = self.split(outside, pending, len(stage.states), stage)
        if found is None:
          return False
        inputs = found
      if inputs & self.stage_of.keys():
        return False  # a row of this stage reaches a variable of another
      if not inputs:
        break
      members |= inputs
      stage.inputs.extend(sorted(inputs))
    dynamics = {r for r, _ in stage.dynamics}
    for r in pending:
      self.row_kind[r] = "dynamics" if r in dynamics else "stage"
    stage.rows = [r for r in pending if r not in dynamics]
    for c in stage.inputs:
      self.stage_of[c] = k
    return True

  def split(self, outside: dict[int, list[int]], pending: list[int], nx: int, stage: _Stage) -> set[int] | None:
    """Splits the variables the stage's rows reach outside it (each once, with a constant coefficient) into the next
    stage's states, one per dynamics row (recorded in `stage`), and inputs (returned); None where they fit neither.

    The next states are the variables later rows use, one in each of nx rows; where fewer are used later (the last
    states) and exactly nx rows reach out, each of those rows is a dynamics row; where no row reaches a variable used
    later, the stage is the last and what its rows reach are its inputs (e.g. the slacks of terminal constraints)."""
    reaching = [r for r in pending if outside[r]]
    if any(c in self.stage_of for r in reaching for c in outside[r]):
      return None
    current = set(pending)
    used = {r: [c for c in outside[r] if self.coupled[c] or any(q not in current for q in self.rows_of[c])]
            for r in reaching}  # fmt: skip
    linked = [r for r in reaching if used[r]]
    if any(len(used[r]) > 1 for r in linked):
      return None  # a dynamics row reaches one state of the next stage
    if len(linked) == nx:
      stage.dynamics = [(r, used[r][0]) for r in linked]
    elif len(reaching) == nx:
      stage.dynamics = [(r, used[r][0] if used[r] else self.pivot(r, outside[r])) for r in reaching]
    elif not linked:
      stage.dynamics = []
    else:
      return None
    states = {c for _, c in stage.dynamics}
    return {c for r in reaching for c in outside[r] if c not in states}

  def pivot(self, r: int, candidates: list[int]) -> int:
    """The next stage's state among a row's candidates that no later row uses: a unit coefficient first, then the
    last variable."""
    return min(candidates, key=lambda c: (abs(abs(self.value[(r, c)]) - 1.0), -c))

  def assemble(self, stages: list[_Stage]) -> StageLayout | None:
    """The StageLayout of the stages found: variables reached from no stage (in no row, coupled to none) are inputs of
    the last stage, rows reaching no variable are rows of stage 0; None where something else is left over, or where
    one stage holds more than half of the variables (a variable entering every stage, such as a free final time,
    pulls the others into its stage: a Riccati recursion over that is no better than the sparse solver)."""
    N, nx = len(stages) - 1, len(stages[0].states)
    free = [c for c in range(self.n) if c not in self.stage_of]
    left = [r for r in range(self.m) if r not in self.row_kind]
    if N < 1 or any(self.rows_of[c] or self.coupled[c] for c in free) or any(self.cols_of[r] for r in left):
      return None
    stages[-1].inputs.extend(free)
    stages[0].rows.extend(left)
    variables: list[tuple[int, int]] = [(0, 0)] * self.n
    rows: list[tuple[str, int, int]] = [("stage", 0, 0)] * self.m
    coefficients = [1.0] * self.m
    for i, (r, c) in enumerate(zip(self.initial_rows, stages[0].states, strict=True)):
      rows[r], coefficients[r] = ("initial", 0, i), self.value[(r, c)]
    for k, stage in enumerate(stages):
      for i, c in enumerate(stage.states + stage.inputs):
        variables[c] = (k, i)
      for j, r in enumerate(sorted(stage.rows)):
        rows[r] = ("stage", k, j)
      for i, (r, c) in enumerate(stage.dynamics):
        rows[r], coefficients[r] = ("dynamics", k, i), self.value[(r, c)]
    nu, nuN = max(len(s.inputs) for s in stages[:N]), len(stages[N].inputs)
    if 2 * (nx + max(nu, nuN)) > self.n:
      return None  # NOTE: one stage holds most variables (a variable of every stage pulled them in): no gain
    try:
      return StageLayout(N=N, nx=nx, nu=nu, nuN=nuN, variables=tuple(variables), rows=tuple(rows),
                         coefficients=tuple(coefficients))  # fmt: skip
    except ValueError:
      return None  # e.g. stages without inputs
