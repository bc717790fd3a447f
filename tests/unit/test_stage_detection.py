"""anvil.qp.detect_stages: the stage structure of multiple-shooting NLPs found in their patterns, whatever the order
of variables and rows, and no structure where there is none."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp

from anvil.qp import StageReport, StageSearch, detect_stages, search_stages

VARYING = np.nan


@dataclass
class Shooting:
  """The patterns of a multiple-shooting NLP built stage by stage: `entries` maps each row to {variable: constant
  value or VARYING}; `stage` and `state` say where each variable truly sits (the reference)."""

  N: int
  nx: int
  nu: int
  rows: list[dict[int, float]] = field(default_factory=list)
  kinds: list[tuple[str, int]] = field(default_factory=list)
  hessian: set[tuple[int, int]] = field(default_factory=set)

  @property
  def n(self) -> int:
    return (self.nx + self.nu) * self.N + self.nx

  def x(self, k: int, i: int) -> int:
    return (self.nx + self.nu) * k + i

  def u(self, k: int, j: int) -> int:
    return (self.nx + self.nu) * k + self.nx + j

  def truth(self, c: int) -> tuple[int, bool]:
    """(stage, is a state) of variable c."""
    k, i = divmod(c, self.nx + self.nu)
    return k, i < self.nx

  def patterns(self, variables: np.ndarray, rows: np.ndarray) -> tuple[sp.csc_array, np.ndarray, sp.csc_array]:
    """The patterns with variable c stored at column variables[c] and row r at row rows[r]."""
    return patterns(self.rows, self.n, self.hessian, variables, rows)


def patterns(
  rows: list[dict[int, float]], n: int, hessian: set[tuple[int, int]], variables: np.ndarray, order: np.ndarray
) -> tuple[sp.csc_array, np.ndarray, sp.csc_array]:
  """(∂g/∂x pattern, its constants, Hessian pattern) of rows of n variables, variable c at column variables[c], row r
  at row order[r]."""
  dense, values = np.zeros((len(rows), n)), np.full((len(rows), n), np.nan)
  for r, entries in enumerate(rows):
    for c, v in entries.items():
      dense[order[r], variables[c]], values[order[r], variables[c]] = 1.0, v
  jac = sp.csc_array(dense)
  jac.sort_indices()
  cols = np.repeat(np.arange(n), np.diff(jac.indptr))
  hess = np.eye(n)
  for a, b in hessian:
    hess[variables[a], variables[b]] = hess[variables[b], variables[a]] = 1.0
  return jac, values[jac.indices, cols], sp.csc_array(np.triu(hess))


def nonlinear_ocp(N: int = 6, nx: int = 3, nu: int = 2, sign: float = 1.0, path: bool = True) -> Shooting:
  """x_{k+1} = F(x_k, u_k) (every entry varying; written sign·(x_{k+1} - F)), x_0 = x0, a path constraint on each
  stage k < N, a terminal constraint on x_N, and a Hessian coupling each stage's variables."""
  ocp = Shooting(N, nx, nu)
  for i in range(nx):
    ocp.rows.append({ocp.x(0, i): 1.0})
    ocp.kinds.append(("initial", 0))
  for k in range(N):
    stage = [ocp.x(k, i) for i in range(nx)] + [ocp.u(k, j) for j in range(nu)]
    for i in range(nx):
      ocp.rows.append({ocp.x(k + 1, i): sign, **dict.fromkeys(stage, VARYING)})
      ocp.kinds.append(("dynamics", k))
    if path:
      ocp.rows.append({ocp.x(k, 0): VARYING, ocp.u(k, 0): VARYING})
      ocp.kinds.append(("stage", k))
    ocp.hessian |= {(a, b) for a in stage for b in stage if a < b}
  ocp.rows.append({ocp.x(N, i): VARYING for i in range(nx)})
  ocp.kinds.append(("stage", N))
  return ocp


def linear_ocp(N: int = 5) -> Shooting:
  """A double integrator: p' = p + h v, v' = v + h u (every entry a constant), diagonal Hessian: the input enters
  one row only, next to the state it drives, so only the rows of the next stage tell them apart."""
  ocp = Shooting(N, 2, 1)
  for i in range(2):
    ocp.rows.append({ocp.x(0, i): 1.0})
    ocp.kinds.append(("initial", 0))
  for k in range(N):
    ocp.rows.append({ocp.x(k + 1, 0): 1.0, ocp.x(k, 0): -1.0, ocp.x(k, 1): -0.1})
    ocp.rows.append({ocp.x(k + 1, 1): 1.0, ocp.x(k, 1): -1.0, ocp.u(k, 0): -0.1})
    ocp.kinds += [("dynamics", k), ("dynamics", k)]
  return ocp


def check(ocp: Shooting, variables: np.ndarray, rows: np.ndarray) -> None:
  """The layout found puts every variable in its stage, states as states, and every row in its kind and stage."""
  layout = detect_stages(*ocp.patterns(variables, rows))
  assert layout is not None
  assert (layout.N, layout.nx) == (ocp.N, ocp.nx)
  for c in range(ocp.n):
    k, i = layout.variables[variables[c]]
    assert (k, i < layout.nx) == ocp.truth(c), f"variable {c}"
  for r, (kind, k) in enumerate(ocp.kinds):
    assert layout.rows[rows[r]][:2] == (kind, k), f"row {r}"
  for r, entries in enumerate(ocp.rows):
    kind, k, i = layout.rows[rows[r]]
    if kind != "stage":  # the coefficient of the row's state: the constant the row holds there
      state = next(c for c, (kk, ii) in enumerate(layout.variables) if (kk, ii) == (k + (kind == "dynamics"), i))
      column = int(np.flatnonzero(variables == state)[0])
      assert layout.coefficient(rows[r]) == entries[column]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_interleaved_stages_in_order(sign: float) -> None:
  """w = [x_0, u_0, x_1, ..., x_N], rows stage by stage; defects written x_{k+1} - F or F - x_{k+1}."""
  ocp = nonlinear_ocp(sign=sign)
  check(ocp, np.arange(ocp.n), np.arange(len(ocp.rows)))


def test_states_then_inputs_and_the_initial_rows_last() -> None:
  """Opti's order: w = [X; U] (all states, then all inputs), x_0 = x0 written after the loop."""
  ocp = nonlinear_ocp(N=8, nx=4, nu=1)
  states = [ocp.x(k, i) for k in range(ocp.N + 1) for i in range(ocp.nx)]
  inputs = [ocp.u(k, j) for k in range(ocp.N) for j in range(ocp.nu)]
  variables = np.argsort(np.array(states + inputs))
  rows = np.roll(np.arange(len(ocp.rows)), -ocp.nx)
  check(ocp, variables, rows)


@pytest.mark.parametrize("seed", range(4))
def test_any_order_of_variables_and_rows(seed: int) -> None:
  rng = np.random.default_rng(seed)
  for ocp in (nonlinear_ocp(), linear_ocp()):
    check(ocp, rng.permutation(ocp.n), rng.permutation(len(ocp.rows)))


def test_linear_dynamics() -> None:
  ocp = linear_ocp()
  check(ocp, np.arange(ocp.n), np.arange(len(ocp.rows)))


def no_layout(rows: list[dict[int, float]], n: int, hessian: set[tuple[int, int]] | None = None) -> bool:
  return detect_stages(*patterns(rows, n, hessian or set(), np.arange(n), np.arange(len(rows)))) is None


def test_no_structure_no_layout() -> None:
  """A tridiagonal boundary-value problem (Bratu), a free final time entering every stage, a row or a Hessian entry
  coupling stages far apart (what it couples would be one stage holding most variables): no layout."""
  n = 8
  bratu = [{c: VARYING if c == i else 1.0 for c in (i - 1, i, i + 1) if 0 <= c < n} for i in range(n)]
  assert no_layout(bratu, n)
  ocp = nonlinear_ocp(N=4, nx=2, nu=1, path=False)
  final_time = ocp.n
  timed = [
    {**r, final_time: VARYING} if kind == "dynamics" else r for r, (kind, _) in zip(ocp.rows, ocp.kinds, strict=True)
  ]
  assert no_layout(timed, ocp.n + 1)
  assert no_layout([*ocp.rows, {ocp.x(1, 0): VARYING, ocp.x(3, 0): VARYING}], ocp.n, ocp.hessian)
  assert no_layout(ocp.rows, ocp.n, ocp.hessian | {(ocp.u(0, 0), ocp.u(3, 0))})
  assert not no_layout(ocp.rows, ocp.n, ocp.hessian)  # the same OCP as it is has one


def test_stages_coupled_by_the_hessian_are_merged() -> None:
  """A cost term coupling u_1 and u_2 makes stages 1 and 2 one stage (x_1, u_1, and x_2, u_2 as its inputs)."""
  ocp = nonlinear_ocp(N=4, nx=2, nu=1, path=False)
  coupled = ocp.hessian | {(ocp.u(1, 0), ocp.u(2, 0))}
  layout = detect_stages(*patterns(ocp.rows, ocp.n, coupled, np.arange(ocp.n), np.arange(len(ocp.rows))))
  assert layout is not None and (layout.N, layout.nx, layout.nu) == (3, 2, 4)
  assert [layout.variables[c][0] for c in (ocp.u(1, 0), ocp.x(2, 0), ocp.u(2, 0), ocp.x(3, 0))] == [1, 1, 1, 2]


def with_rows(ocp: Shooting, rows: list[tuple[dict[int, float], tuple[str, int]]], first: bool = False) -> Shooting:
  """`ocp` with more rows (entries and (kind, stage)), after its rows or (first) before them."""
  more = Shooting(ocp.N, ocp.nx, ocp.nu, hessian=ocp.hessian)
  added = [entries for entries, _ in rows], [kind for _, kind in rows]
  more.rows = added[0] + ocp.rows if first else ocp.rows + added[0]
  more.kinds = added[1] + ocp.kinds if first else ocp.kinds + added[1]
  return more


def terminal_state(ocp: Shooting) -> list[tuple[dict[int, float], tuple[str, int]]]:
  """x_N = 0 as rows: one entry each, a constant, as x_0 = x0's rows are."""
  return [({ocp.x(ocp.N, i): 1.0}, ("stage", ocp.N)) for i in range(ocp.nx)]


def initial_last(ocp: Shooting) -> np.ndarray:
  """The row order putting x_0 = x0's rows (the first nx) last."""
  return np.roll(np.arange(len(ocp.rows)), -ocp.nx)


@pytest.mark.parametrize("last", [False, True])
def test_a_terminal_state_written_as_rows_is_no_initial_state(last: bool) -> None:
  """x_N = 0 written as rows like x_0 = x0's (one constant entry each): the stages still start at x_0, with x_0's rows
  first, or last right after x_N's (one run of such rows: told apart by the rows their variables share)."""
  for ocp in (nonlinear_ocp(path=False), nonlinear_ocp(), linear_ocp()):
    ocp = with_rows(ocp, terminal_state(ocp))
    rows = initial_last(ocp) if last else np.arange(len(ocp.rows))
    check(ocp, np.arange(ocp.n), rows)


@pytest.mark.parametrize("first", [False, True])
def test_path_rows_on_one_variable_in_a_loop_of_their_own(first: bool) -> None:
  """u_k and x_k[0] bounded by rows of their own (one constant entry each), written in a loop before or after the
  dynamics, with a terminal state: each row is a row of its stage."""
  ocp = nonlinear_ocp(N=5, nx=3, nu=2, path=False)
  path = [({ocp.u(k, 1): 1.0}, ("stage", k)) for k in range(ocp.N)]
  path += [({ocp.x(k, 0): 2.0}, ("stage", k)) for k in range(1, ocp.N)]
  ocp = with_rows(with_rows(ocp, path, first=first), terminal_state(ocp))
  check(ocp, np.arange(ocp.n), np.arange(len(ocp.rows)))
  if not first:  # NOTE: before x_0's rows, rows on single variables in a shuffled order are not told apart from them
    check(ocp, np.random.default_rng(3).permutation(ocp.n), np.arange(len(ocp.rows)))


def search(ocp_rows: list[dict[int, float]], n: int, hessian: set[tuple[int, int]]) -> StageSearch:
  return search_stages(*patterns(ocp_rows, n, hessian, np.arange(n), np.arange(len(ocp_rows))))


def test_where_the_structure_breaks_is_named() -> None:
  """No layout, and the reason names the row or variable that broke it: a row joining stages 1 and 3 (the row and
  the variable of stage 3), a Hessian entry doing the same (the variable), no initial rows."""
  ocp = nonlinear_ocp(N=5, nx=2, nu=1, path=False)
  far = {ocp.x(1, 0): VARYING, ocp.x(3, 1): VARYING}
  found = search([*ocp.rows, far], ocp.n, ocp.hessian)
  assert found.layout is None and (found.row, found.variable) == (len(ocp.rows), ocp.x(3, 1))
  sentence = found.explain(lambda r: f"row {r} of g", lambda j: f"x[{j}]")
  assert sentence.startswith(f"row {len(ocp.rows)} of g joins stage 1's variables to x[{ocp.x(3, 1)}], a variable of "
                             "stage 3")  # fmt: skip
  found = search(ocp.rows, ocp.n, ocp.hessian | {(ocp.u(0, 0), ocp.u(4, 0))})
  assert found.layout is None and found.variable in (ocp.u(0, 0), ocp.u(4, 0)) and "Hessian" in found.reason
  n = 8
  bratu = [{c: VARYING if c == i else 1.0 for c in (i - 1, i, i + 1) if 0 <= c < n} for i in range(n)]
  found = search(bratu, n, set())
  assert found.layout is None and found.stages < 2 and "the stages start from x_0" in found.reason
  assert search(ocp.rows, ocp.n, ocp.hessian).reason == ""


def test_the_report_of_a_layout() -> None:
  """StageReport: the rows of each kind, the inputs per stage, and a line saying it."""
  ocp = nonlinear_ocp(N=4, nx=2, nu=1)
  layout = detect_stages(*ocp.patterns(np.arange(ocp.n), np.arange(len(ocp.rows))))
  report = StageReport(layout, "found", "riccati")
  kinds = [kind for kind, _ in ocp.kinds]
  assert report.initial_rows == tuple(r for r, kind in enumerate(kinds) if kind == "initial")
  assert report.dynamics_rows == tuple(r for r, kind in enumerate(kinds) if kind == "dynamics")
  assert report.path_rows == tuple(r for r, (kind, k) in enumerate(ocp.kinds) if kind == "stage" and k < ocp.N)
  assert report.terminal_rows == (len(ocp.rows) - 1,)
  assert report.inputs == (1, 1, 1, 1, 0)
  assert str(report) == ("4 stages (found): nx = 2, nu = 1 (0 at stage N); rows: 2 initial, 8 dynamics, 4 path, "
                         "1 terminal; QPs: riccati")  # fmt: skip
  none = StageReport(None, "not found", "sparse_ipm", "why")
  assert str(none) == "no stage structure (not found: why); QPs: sparse_ipm"


def without_initial_rows(ocp: Shooting) -> Shooting:
  """`ocp` with x_0 fixed by its bounds instead of its rows (as a CasADi user writes lbw = ubw = x0)."""
  kept = [r for r, (kind, _) in enumerate(ocp.kinds) if kind != "initial"]
  out = Shooting(ocp.N, ocp.nx, ocp.nu, hessian=ocp.hessian)
  out.rows, out.kinds = [ocp.rows[r] for r in kept], [ocp.kinds[r] for r in kept]
  return out


@pytest.mark.parametrize("order", ["interleaved", "states first"])
def test_x0_fixed_by_its_bounds_comes_first_in_x(order: str) -> None:
  """No rows fix x_0: x's first variables are x_0 (interleaved stages, or all states then all inputs), fixed by their
  bounds (the layout says so); with a terminal state and rows in any order. (The double integrator's x_N = 0 rows
  start a sweep backwards in time, a valid layout too: it goes without them.)"""
  nonlinear = (nonlinear_ocp(), nonlinear_ocp(N=7, nx=4, nu=1, path=False))
  for ocp in (*(without_initial_rows(with_rows(o, terminal_state(o))) for o in nonlinear),
              without_initial_rows(linear_ocp())):  # fmt: skip
    if order == "interleaved":
      variables = np.arange(ocp.n)
    else:
      states = [ocp.x(k, i) for k in range(ocp.N + 1) for i in range(ocp.nx)]
      variables = np.argsort(np.array(states + [ocp.u(k, j) for k in range(ocp.N) for j in range(ocp.nu)]))
    for rows in (np.arange(len(ocp.rows)), np.random.default_rng(1).permutation(len(ocp.rows))):
      check(ocp, variables, rows)
      layout = detect_stages(*ocp.patterns(variables, rows))
      assert layout is not None and layout.initial_bounds
      assert sorted(c for c, (k, i) in enumerate(layout.variables) if k == 0 and i < layout.nx) == list(range(ocp.nx))
