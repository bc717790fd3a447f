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

import copy
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from anvil.qp.stages import StageLayout


def detect_stages(jacobian: sp.csc_array, constants: NDArray[np.float64], hessian: sp.csc_array) -> StageLayout | None:
  """The stage layout of an NLP whose constraints have the multiple-shooting structure, or None (`search_stages`
  says why).

  Args:
    jacobian: the pattern of ∂g/∂x (m x n, CSC).
    constants: each stored entry of `jacobian` (CSC order): its value where it is the same at every point, else NaN.
    hessian: the pattern of the Lagrangian Hessian (n x n; one triangle or both).

  Example:
    >>> layout = detect_stages(sp.csc_array(J), np.full(J.nnz, np.nan), sp.csc_array(H))
  """
  return search_stages(jacobian, constants, hessian).layout


@dataclass(frozen=True)
class StageSearch:
  """What the search for a stage layout found: the layout, or where the multiple-shooting structure broke.

  Attributes:
    layout: the layout found, or None.
    reason: why there is none ("" when found): a sentence in which "{row}" and "{variable}" stand for `row` and
      `variable`, named by `explain`.
    row: the constraint row the reason is about (-1: none).
    variable: the variable the reason is about (-1: none).
    stages: the most stages a sweep found before it broke (2 or more: the NLP looked like an optimal control
      problem).
  """

  layout: StageLayout | None
  reason: str = ""
  row: int = -1
  variable: int = -1
  stages: int = 0

  def explain(self, row_name: Callable[[int], str], variable_name: Callable[[int], str]) -> str:
    """The reason with its row and variable named by `row_name` and `variable_name` (e.g. "row 3 of g", "x[7]")."""
    return self.reason.format(row=row_name(self.row) if self.row >= 0 else "",
                              variable=variable_name(self.variable) if self.variable >= 0 else "")  # fmt: skip


@dataclass(frozen=True)
class StageReport:
  """An NLP's stage structure as its solver uses it (`SQPFunction.structure`); `str()` says it in a line.

  Attributes:
    layout: the stage layout the QPs are solved with, or None.
    origin: "given" (a layout passed as stages=), "found" (in the patterns), "not found", or "not searched" (a general
      QP solver was asked for, which takes no layout; or the NLP has no constraints).
    qp_solver: the solver of the QPs ("riccati", "sparse_ipm" or "osqp").
    reason: where no layout was found, why, naming the row or variable where the structure broke as the solver's
      messages name them; else "".
  """

  layout: StageLayout | None
  origin: str
  qp_solver: str
  reason: str = ""

  def _rows(self, kind: str, last: bool | None = None) -> tuple[int, ...]:
    if (layout := self.layout) is None:
      return ()
    rows = enumerate(layout.rows)
    return tuple(r for r, (kd, k, _) in rows if kd == kind and (last is None or (k == layout.N) == last))

  @property
  def initial_rows(self) -> tuple[int, ...]:
    """The rows fixing x_0 (x_0 = x0)."""
    return self._rows("initial")

  @property
  def dynamics_rows(self) -> tuple[int, ...]:
    """The rows defining x_{k+1} from stage k."""
    return self._rows("dynamics")

  @property
  def path_rows(self) -> tuple[int, ...]:
    """The other rows of stages k < N (path constraints on x_k, u_k)."""
    return self._rows("stage", last=False)

  @property
  def terminal_rows(self) -> tuple[int, ...]:
    """The other rows of stage N (terminal constraints on x_N)."""
    return self._rows("stage", last=True)

  @property
  def inputs(self) -> tuple[int, ...]:
    """The number of inputs of each stage 0..N (variables that are no states: u_k, slacks)."""
    if (layout := self.layout) is None:
      return ()
    counts = Counter(k for k, i in layout.variables if i >= layout.nx)
    return tuple(counts[k] for k in range(layout.N + 1))

  def __str__(self) -> str:
    if (layout := self.layout) is None:
      return f"no stage structure ({self.origin}{': ' + self.reason if self.reason else ''}); QPs: {self.qp_solver}"
    rows = (len(self.initial_rows), len(self.dynamics_rows), len(self.path_rows), len(self.terminal_rows))
    initial = "x_0 fixed by its bounds" if layout.initial_bounds else f"{rows[0]} initial"
    return (
      f"{layout.N} stages ({self.origin}): nx = {layout.nx}, nu = {layout.nu} ({layout.nuN} at stage N); rows: "
      f"{initial}, {rows[1]} dynamics, {rows[2]} path, {rows[3]} terminal; QPs: {self.qp_solver}"
    )


class _Broken(Exception):
  """The structure broke: the StageSearch saying where."""

  def __init__(self, reason: str, row: int = -1, variable: int = -1, merged: int = -1) -> None:
    super().__init__(reason)
    self.reason, self.row, self.variable = reason, row, variable
    self.merged = merged  # the stage that took most variables (-1: another break)


def search_stages(jacobian: sp.csc_array, constants: NDArray[np.float64], hessian: sp.csc_array) -> StageSearch:
  """`detect_stages`, with the reason where no layout is found.

  The stages start from x_0's initial rows: rows with one entry, a constant (x_0 = x0). Other rows alike (a terminal
  condition x_N = 0, a bound written as a row) are no initial rows: where the sweep from all of them breaks, it starts
  again from smaller sets of them (`_Patterns.initial_candidates`); where none works, from x's first 1, 2, ...
  variables as x_0, fixed by their bounds (BOUNDED_STATES at most). The search reports the first layout found, else
  the sweep that found the most stages before it broke, naming what broke it."""
  patterns = _Patterns(jacobian, constants, hessian)
  best = StageSearch(None, "no row fixes a variable alone and no stages follow from x's first variables: the stages "
                           "start from x_0, fixed by rows x_0 = x0 (one entry each with a constant coefficient) or by "
                           "its bounds (lbx = ubx; then x_0 comes first in x)")  # fmt: skip
  starts: list[tuple[list[int], list[int] | None]] = [(rows, None) for rows in patterns.initial_candidates()]
  starts += [([], list(range(nx))) for nx in range(1, min(BOUNDED_STATES, patterns.n // 2) + 1)]
  for rows, states in starts:
    sweep = _Sweep(patterns, rows, states)
    try:
      return StageSearch(sweep.layout(), stages=len(sweep.stages))
    except _Broken as broken:
      if (best.stages == 0 and states is None) or len(sweep.stages) > max(best.stages, 1):
        found = _culprit(sweep, broken) if broken.merged >= 0 else broken
        best = StageSearch(None, found.reason, found.row, found.variable, max(len(sweep.stages), 1))
      if states is not None and broken.merged == 0:
        break  # NOTE: x's first variables pull in most of the others: more of them as x_0 pull in no fewer
  return best


#: The most sets of rows tried as x_0's initial rows (`_Patterns.initial_candidates`).
INITIAL_SETS = 256

#: The most states x_0 may have where no row fixes it: its bounds then do (lbx = ubx), and x's first variables are
#: tried as x_0, one count after the other.
BOUNDED_STATES = 64

#: How many of the rows and Hessian entries that pulled variables into a stage holding most of them are tried
#: without, to name the one coupling stages far apart.
SUSPECTS = 32


def _culprit(sweep: _Sweep, broken: _Broken) -> _Broken:
  """Where a stage took most variables: the row (or Hessian entry) that pulled them in, found as the first of those
  that pulled variables into the stage without which the sweep finds the stages; else `broken` as it is."""
  k = broken.merged
  for row, member, c in [pull[1:] for pull in sweep.pulls if pull[0] == k][:SUSPECTS]:
    without = sweep.p.without(row, member, c)
    trial = _Sweep(without, sweep.candidates, sweep.bounded)
    try:
      trial.layout()
    except _Broken:
      continue
    other = trial.stage_of[c]
    if row >= 0:
      return _Broken(f"{{row}} joins stage {k}'s variables to {{variable}}, a variable of stage {other}: a constraint "
                     "over several stages", row, c)  # fmt: skip
    return _Broken(f"the Hessian couples {{variable}} (stage {other}) to a variable of stage {k}: a cost term over "
                   "several stages", variable=c)  # fmt: skip
  return broken


@dataclass
class _Stage:
  """One stage as the sweep finds it."""

  states: list[int]
  inputs: list[int] = field(default_factory=list)
  rows: list[int] = field(default_factory=list)
  dynamics: list[tuple[int, int]] = field(default_factory=list)  # (row, the next stage's state)


class _Patterns:
  """The patterns of ∂g/∂x and the Hessian, indexed for the sweeps."""

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

  def constant(self, r: int, c: int) -> bool:
    """Whether entry (r, c) is a nonzero constant."""
    v = self.value[(r, c)]
    return math.isfinite(v) and v != 0.0

  def without(self, row: int, a: int, b: int) -> _Patterns:
    """These patterns without row `row` and the Hessian entries between its variables (its term of the Lagrangian),
    or (row -1) without the Hessian entry (a, b)."""
    other = copy.copy(self)
    linked = set(self.cols_of[row]) if row >= 0 else {a, b}
    if row >= 0:
      other.cols_of = [[] if r == row else cs for r, cs in enumerate(self.cols_of)]
      other.rows_of = [[r for r in rs if r != row] if c in linked else rs for c, rs in enumerate(self.rows_of)]
    other.coupled = [cs - linked if c in linked else cs for c, cs in enumerate(self.coupled)]
    return other

  def initial_candidates(self) -> list[list[int]]:
    """The sets of rows a sweep may start from as x_0's initial rows (`search_stages`): all rows with one entry, a
    constant; then each run of consecutive ones; then, within each run, each group whose variables share a row of g
    or a Hessian entry (x_0 = x0 written next to x_N = 0), and each piece whose variables are consecutive too (x_0 =
    x0 written next to rows on single variables of other stages); sets of one row last, INITIAL_SETS at most."""
    single = [r for r in range(self.m) if len(self.cols_of[r]) == 1 and self.constant(r, self.cols_of[r][0])]
    runs = _consecutive(single, lambda r: r)
    pieces = [_consecutive(run, lambda r: self.cols_of[r][0]) for run in runs]
    sets = [single, *runs, *(group for run in runs for group in self.groups(run)),
            *(piece for split in pieces if len(split) > 1 for piece in split)]  # fmt: skip
    unique = {tuple(rows): rows for rows in sets if rows}
    # NOTE: sets of several rows first (x_0 = x0 is a vector), the single rows of many stages' bounds after them
    return sorted(unique.values(), key=lambda rows: len(rows) == 1)[:INITIAL_SETS]

  def groups(self, rows: list[int]) -> list[list[int]]:
    """`rows` (each with one entry) split into groups whose variables are linked by sharing a row or a Hessian
    entry, directly or through one another."""
    column = {r: self.cols_of[r][0] for r in rows}
    group = {r: r for r in rows}

    def root(r: int) -> int:
      while group[r] != r:
        r = group[r]
      return r

    owner = {c: r for r, c in column.items()}
    for r, c in column.items():
      linked = {q for row in self.rows_of[c] if len(self.cols_of[row]) > 1 for q in self.cols_of[row]} | self.coupled[c]
      for q in linked & owner.keys():
        group[root(owner[q])] = root(r)
    found: dict[int, list[int]] = {}
    for r in rows:
      found.setdefault(root(r), []).append(r)
    return list(found.values()) if len(found) > 1 else []


def _merged(k: int, held: str, n: int) -> _Broken:
  """The break of a stage k that holds `held` of the n variables (a Riccati recursion over it would gain nothing)."""
  return _Broken(f"stage {k} holds {held} of the {n} variables: a variable entering every stage (such as a free final "
                 "time) pulls them into one stage", merged=k)  # fmt: skip


def _consecutive(items: list[int], key: Callable[[int], int]) -> list[list[int]]:
  """`items` split into runs whose keys go up by one from each item to the next."""
  runs: list[list[int]] = []
  for item in items:
    if runs and key(item) == key(runs[-1][-1]) + 1:
      runs[-1].append(item)
    else:
      runs.append([item])
  return runs


class _Sweep:
  """One stage-by-stage sweep over the patterns, from a set of initial rows or (`states`) from x_0's variables, which
  their bounds fix (StageLayout.initial_bounds)."""

  def __init__(self, patterns: _Patterns, initial_rows: list[int], states: list[int] | None = None) -> None:
    self.p = patterns
    self.candidates, self.bounded = initial_rows, states
    self.stage_of: dict[int, int] = {}  # variable -> stage
    self.row_kind: dict[int, str] = {}
    self.initial_rows: list[int] = []
    self.stages: list[_Stage] = []
    self.pulls: list[tuple[int, int, int, int]] = []  # (stage, row or -1, member of a Hessian entry or -1, variable)

  def initial(self) -> _Stage:
    """Stage 0's states: the columns of the candidate initial rows (one row per column), or the bounded states."""
    if self.bounded is not None:
      self.stage_of.update(dict.fromkeys(self.bounded, 0))
      return _Stage(list(self.bounded))
    states: list[int] = []
    for r in self.candidates:
      if (c := self.p.cols_of[r][0]) not in self.stage_of:
        states.append(c)
        self.initial_rows.append(r)
        self.stage_of[c], self.row_kind[r] = 0, "initial"
    return _Stage(states)

  def layout(self) -> StageLayout:
    """The layout of the stages swept from the initial rows; _Broken where the structure breaks."""
    stage = self.initial()
    self.stages.append(stage)
    while True:
      self.grow(stage, len(self.stages) - 1)
      if not stage.dynamics:
        break
      stage = _Stage([c for _, c in stage.dynamics])
      for c in stage.states:
        self.stage_of[c] = len(self.stages)
      self.stages.append(stage)
    return self.assemble(self.stages)

  def grow(self, stage: _Stage, k: int) -> None:
    """Adds stage k's inputs, stage rows and dynamics rows; _Broken where its rows do not fit the structure, or as
    soon as the stage holds more than half of the variables (`assemble` refuses that). Incremental: each pass reads
    the rows and Hessian entries of the variables the last one added (a stage pulling in everything, as a
    non-OCP's sweep does, costs its size, not its size squared)."""
    p, members, fresh = self.p, set(stage.states), list(stage.states)
    pending: set[int] = set()  # the rows touching the stage's variables, not yet another stage's
    count: Counter[int] = Counter()  # how many pending rows reach each variable outside the stage
    while True:
      pulled: dict[int, tuple[int, int]] = {}  # a new input: (the row pulling it in or -1, the Hessian's member)
      for v in fresh:
        for r in p.rows_of[v]:
          if r in self.row_kind or r in pending:
            continue
          pending.add(r)
          for c in p.cols_of[r]:
            if c not in members:
              count[c] += 1
              if count[c] > 1 or not p.constant(r, c):
                pulled.setdefault(c, (r, -1))
      for v in fresh:
        pulled |= {c: (-1, v) for c in p.coupled[v] if c not in members and c not in pulled}
      rows = sorted(pending)
      if not pulled:
        outside = {r: [c for c in p.cols_of[r] if c not in members] for r in rows}
        found = self.split(outside, rows, len(stage.states), stage, k)
        pulled = {c: next((r, -1) for r, cs in outside.items() if c in cs) for c in found}
      if taken := pulled.keys() & self.stage_of.keys():
        self.joined(k, min(taken), rows)
      if not pulled:
        break
      if 2 * (len(members) + len(pulled)) > p.n:
        raise _merged(k, "more than half", p.n)
      self.pulls += [(k, r, v, c) for c, (r, v) in sorted(pulled.items())]
      fresh = sorted(pulled)
      members.update(fresh)
      stage.inputs.extend(fresh)
    dynamics = {r for r, _ in stage.dynamics}
    for r in rows:
      self.row_kind[r] = "dynamics" if r in dynamics else "stage"
    stage.rows = [r for r in rows if r not in dynamics]
    for c in stage.inputs:
      self.stage_of[c] = k

  def joined(self, k: int, c: int, pending: list[int]) -> None:
    """_Broken: stage k reaches variable c of another stage (stage 0's, unless c is an earlier stage's): through
    one of its rows, or a Hessian entry."""
    other = self.stage_of[c]
    row = next((r for r in pending if c in self.p.cols_of[r]), -1)
    if row >= 0:
      raise _Broken(f"{{row}} joins stage {k}'s variables to {{variable}}, a variable of stage {other}: a constraint "
                    "over several stages", row, c)  # fmt: skip
    raise _Broken(f"the Hessian couples {{variable}} (stage {other}) to stage {k}'s variables: a cost or constraint "
                  "term over several stages", variable=c)  # fmt: skip

  def split(self, outside: dict[int, list[int]], pending: list[int], nx: int, stage: _Stage, k: int) -> set[int]:
    """Splits the variables the stage's rows reach outside it (each once, with a constant coefficient) into the next
    stage's states, one per dynamics row (recorded in `stage`), and inputs (returned); _Broken where they fit neither.

    The next states are the variables later rows use, one in each of nx rows; where fewer are used later (the last
    states) and exactly nx rows reach out, each of those rows is a dynamics row; where no row reaches a variable used
    later, the stage is the last and what its rows reach are its inputs (e.g. the slacks of terminal constraints)."""
    p = self.p
    reaching = [r for r in pending if outside[r]]
    for r in reaching:
      if taken := [c for c in outside[r] if c in self.stage_of]:
        self.joined(k, taken[0], [r])
    current = set(pending)
    used = {r: [c for c in outside[r] if p.coupled[c] or any(q not in current for q in p.rows_of[c])]
            for r in reaching}  # fmt: skip
    linked = [r for r in reaching if used[r]]
    if several := [r for r in linked if len(used[r]) > 1]:
      raise _Broken(f"{{row}} of stage {k} reaches {len(used[several[0]])} variables that later rows use: a dynamics "
                    "row defines one state of the next stage", several[0])  # fmt: skip
    if len(linked) == nx:
      stage.dynamics = [(r, used[r][0]) for r in linked]
    elif len(reaching) == nx:
      stage.dynamics = [(r, used[r][0] if used[r] else self.pivot(r, outside[r])) for r in reaching]
    elif linked:
      raise _Broken(f"stage {k} has {nx} states but {len(linked)} of its rows (the first: {{row}}) define variables "
                    "of the next stage: the stages' states differ in number", linked[0])  # fmt: skip
    else:
      stage.dynamics = []
    states = {c for _, c in stage.dynamics}
    return {c for r in reaching for c in outside[r] if c not in states}

  def pivot(self, r: int, candidates: list[int]) -> int:
    """The next stage's state among a row's candidates that no later row uses: a unit coefficient first, then the
    last variable."""
    return min(candidates, key=lambda c: (abs(abs(self.p.value[(r, c)]) - 1.0), -c))

  def assemble(self, stages: list[_Stage]) -> StageLayout:
    """The StageLayout of the stages found: variables reached from no stage (in no row, coupled to none) are inputs of
    the last stage, rows reaching no variable are rows of stage 0; _Broken where something else is left over, or
    where one stage holds more than half of the variables (a variable entering every stage, such as a free final
    time, pulls the others into its stage: a Riccati recursion over that is no better than the sparse solver)."""
    p = self.p
    N, nx = len(stages) - 1, len(stages[0].states)
    if N < 1:
      start = "x's first variables taken as x_0" if self.bounded is not None else "the rows taken as x_0's initial rows"
      raise _Broken(
        f"no dynamics rows follow {start}{' ({row} the first)' if self.initial_rows else ''}: one stage, no horizon "
        "(x_0 is fixed by rows x_0 = x0, one constant entry each, or by its bounds lbx = ubx with its variables "
        "first in x)",
        self.initial_rows[0] if self.initial_rows else -1,
      )
    free = [c for c in range(p.n) if c not in self.stage_of]
    if reached := [c for c in free if p.rows_of[c] or p.coupled[c]]:
      raise _Broken("{variable} is in no stage: its rows are reached from none", variable=reached[0])
    if left := [r for r in range(p.m) if r not in self.row_kind and p.cols_of[r]]:
      raise _Broken("{row} is in no stage: the stages swept from x_0 never reach it", left[0])
    stages[-1].inputs.extend(free)
    stages[0].rows.extend(r for r in range(p.m) if r not in self.row_kind)
    variables: list[tuple[int, int]] = [(0, 0)] * p.n
    rows: list[tuple[str, int, int]] = [("stage", 0, 0)] * p.m
    coefficients = [1.0] * p.m
    for i, r in enumerate(self.initial_rows):  # NOTE: none where x_0's bounds fix it
      rows[r], coefficients[r] = ("initial", 0, i), p.value[(r, stages[0].states[i])]
    for k, stage in enumerate(stages):
      for i, c in enumerate(stage.states + stage.inputs):
        variables[c] = (k, i)
      for j, r in enumerate(sorted(stage.rows)):
        rows[r] = ("stage", k, j)
      for i, (r, c) in enumerate(stage.dynamics):
        rows[r], coefficients[r] = ("dynamics", k, i), p.value[(r, c)]
    nu, nuN = max(len(s.inputs) for s in stages[:N]), len(stages[N].inputs)
    if 2 * (nx + max(nu, nuN)) > p.n:
      k = max(range(N + 1), key=lambda k: len(stages[k].inputs))
      raise _merged(k, str(nx + len(stages[k].inputs)), p.n)
    try:
      return StageLayout(N=N, nx=nx, nu=nu, nuN=nuN, variables=tuple(variables), rows=tuple(rows),
                         coefficients=tuple(coefficients), initial_bounds=self.bounded is not None)  # fmt: skip
    except ValueError as error:  # e.g. stages without inputs
      raise _Broken(f"the stages found are no stage layout: {error}") from None
