"""The Riccati backend: QPs whose variables and rows sit in the stages of an optimal control problem, solved by the
stage-structured interior point (`RiccatiQP`) behind the QP contract (the C++ is anvil/riccati_backend.hpp).

A `StageLayout` says where each variable and constraint row of the QP goes; `RiccatiBackend` turns it into index
tables between the QP's patterns (P's upper triangle, A = [rows of g; identity rows of the bounds]) and the stage
QP's Data and Solution, viewed as flat arrays of doubles. Every stage's variables get box rows (the bounds), first
among its rows (the stage QP's `boxes`: their unit coefficients are implied, not stored); inputs no variable maps to
(the padding of stages with fewer inputs) keep box rows with lower = upper = 0, so they stay 0. The layout's soft
slacks are no stage inputs: each relaxes its rows, which become the interior point's elastic rows (`_eliminated_slacks`,
anvil/riccati_backend.hpp's price_soft_rows and gather_soft).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from anvil.codegen.precision import cpp_real
from anvil.qp.backend import QPBackend, QPProblem
from anvil.qp.cost_model import WARM_ITERATIONS
from anvil.qp.options import RiccatiOptions
from anvil.qp.riccati import RiccatiQP, condensing_for_rows, flat_offsets
from anvil.qp.stages import StageLayout, stored_entries

SCALES = ("A_scale", "l_scale", "dual_scale", "initial_scale", "jac_scale")


@dataclass(frozen=True)
class _RiccatiBackendContext:
  """What the Riccati backend's templates need."""

  name: str
  solver: str
  n: int
  m: int
  nnz_P: int
  nnz_A: int
  nx: int
  data_size: int
  options: RiccatiOptions
  n_elastic: int
  n_soft: int
  n_hess: int
  n_jac: int
  n_unloaded: int
  loads_derivatives: bool
  tables: tuple[tuple[str, tuple[float, ...]], ...]
  scales: tuple[tuple[str, tuple[float, ...]], ...]
  real: str


class RiccatiBackend(QPBackend[RiccatiOptions]):
  """QPs with the stage layout of an optimal control problem, solved by the Riccati interior point behind the QP
  contract: index tables (module docstring) scatter P, A, q, l and u into the stage QP and gather the solution back.

  Args:
    name: a C++ identifier: the namespace of the generated code.
    problem: the QP's patterns and its `StageLayout` (A's rows: the constraint rows, then one identity row per
      variable).
    options: RiccatiOptions.

  Raises:
    ValueError: the problem has no stage layout, or P or A couple stages the layout keeps apart.
  """

  template = "riccati_backend"
  source_runtime = ("riccati_backend",)
  scalars = ("float64", "float32")

  def __init__(self, name: str, problem: QPProblem, options: RiccatiOptions) -> None:
    super().__init__(name, problem, options)
    if problem.stages is None:
      raise ValueError(f"{self.name}: the Riccati QP solver needs the QP's stage layout (QPProblem.stages)")
    self.stages = problem.stages
    n_rows = len(self.stages.rows)
    if len(self.stages.variables) != problem.n or problem.m != n_rows + problem.n:
      raise ValueError(
        f"{self.name}: the layout has {len(self.stages.variables)} variables and {n_rows} rows, the QP {problem.n} "
        f"variables and {problem.m} rows (constraint rows, then one per variable)"
      )
    ng, ngN = self.stages.general_rows
    nud = self.stages.dynamic_inputs(problem.a_pattern)
    self.soft, nu, nuN = _eliminated_slacks(self.stages, problem, nud)
    nz, nzN = self.stages.nx + nu, self.stages.nx + nuN
    condensing = options.condensing
    if self.stages.parents:
      condensing = 1
    elif condensing == "auto":  # an SQP step's QPs start warm
      condensing = condensing_for_rows(
        self.stages.nx, nu, self.stages.N, nz + ng, boxes=True, nud=nud, iterations=WARM_ITERATIONS
      )
    self.solver = RiccatiQP(f"{self.name}_ipm", self.stages.nx, nu, self.stages.N, ng=nz + ng, ngN=nzN + ngN,
                            max_iter=options.max_iter, nuN=nuN, nud=nud, scalar=problem.scalar, boxes=True,
                            quadratic_prices=bool(self.soft), parents=self.stages.parents,
                            condensing=condensing)  # fmt: skip
    _ = self.tables  # NOTE: a layout the patterns do not fit raises here, when the backend is made

  def dependencies(self) -> tuple[RiccatiQP]:
    """The stage QP's solver."""
    return (self.solver,)

  @cached_property
  def tables(self) -> dict[str, tuple[float, ...]]:
    """The tables of anvil/riccati_backend.hpp: offsets into Data and Solution as flat arrays, and the SCALES."""
    return _StageTables(self.name, self.problem, self.solver, self.soft).tables

  @cached_property
  def context(self) -> _RiccatiBackendContext:
    """Sizes, options and every table."""
    problem = self.problem
    return _RiccatiBackendContext(
      name=self.name, solver=self.solver.name, n=problem.n, m=problem.m, nnz_P=problem.p_pattern.nnz,
      nnz_A=problem.a_pattern.nnz, nx=self.stages.nx, data_size=flat_offsets(self.solver.shapes)[1],
      options=self.options, n_elastic=len(self.tables["elastic_to_data"]), n_soft=len(self.soft),
      n_hess=len(self.tables.get("hess_to_data", ())), n_jac=len(self.tables.get("jac_from", ())),
      n_unloaded=len(self.tables.get("unloaded_to_data", ())),
      loads_derivatives=problem.sources is not None,
      tables=tuple((k, v) for k, v in self.tables.items() if k not in SCALES),
      scales=tuple((k, v) for k, v in self.tables.items() if k in SCALES), real=cpp_real(problem.scalar),
    )  # fmt: skip


class _StageTables:
  """The index tables of one QP's patterns into its stage QP (see RiccatiBackend)."""

  def __init__(self, name: str, problem: QPProblem, solver: RiccatiQP, soft: tuple[tuple[int, int, int], ...]) -> None:
    assert problem.stages is not None
    self.name, self.problem, self.stages, self.solver = name, problem, problem.stages, solver
    self.soft = {v: (lo, hi) for v, lo, hi in soft}  # the eliminated slacks: their rows
    self.data, _ = flat_offsets(solver.shapes)
    self.iterate, _ = flat_offsets(solver.iterate_shapes)
    self.nz, self.nzN = solver.nx + solver.nu, solver.nx + solver.nuN
    self.mg, self.mgN = solver.shapes["lo"][1], solver.shapes["loN"][0]

  def h_at(self, k: int, i: int, j: int) -> int:
    """Offset of H_k[i][j] (H_N at k = N)."""
    o, N = self.data, self.stages.N
    return o["H"] + (k * self.nz + i) * self.nz + j if k < N else o["HN"] + i * self.nzN + j

  def g_at(self, k: int, general: int, j: int) -> int:
    """Offset of the coefficient j of stage k's general row `general` (G and GN store the rows after the boxes)."""
    o, N, rows = self.data, self.stages.N, self.solver.shapes["G"][1]
    return o["G"] + (k * rows + general) * self.nz + j if k < N else o["GN"] + general * self.nzN + j

  def bound_at(self, k: int, row: int, side: str) -> int:
    """Offset of the lower ("lo") or upper ("hi") bound of stage k's row, or of its prices when elastic ("z", "w")."""
    return self.data[side] + k * self.mg + row if k < self.stages.N else self.data[f"{side}N"] + row

  def row_at(self, k: int, row: int) -> int:
    """Index of stage k's row among the interior point's rows (those of stage N after the others)."""
    return k * self.mg + row

  def general(self, k: int, j: int) -> int:
    """Stage k's row index of its j-th general row (after the box rows)."""
    return (self.nz if k < self.stages.N else self.nzN) + j

  @cached_property
  def tables(self) -> dict[str, tuple[float, ...]]:
    """Every table of anvil/riccati_backend.hpp (the SCALES hold doubles, the others ints)."""
    return {**self.matrices, **self._vectors(), **self._derivatives()}

  @cached_property
  def matrices(self) -> dict[str, tuple[float, ...]]:
    """P's and A's tables: where each stored entry goes in Data (A's scaled; -1 where the stage QP implies it)."""
    variables, rows, nx = self.stages.variables, self.stages.rows, self.stages.nx
    hess, mirror = [], []
    for r, c in stored_entries(self.problem.p_pattern):
      (kr, ir), (kc, ic) = variables[r], variables[c]
      if c in self.soft:  # an eliminated slack's curvature: the price w of its rows (_eliminated_slacks: r == c)
        prices = [self.soft_row(row, "w") for row in self.soft[c] if row >= 0]
        hess.append(prices[0])
        mirror.append(prices[1] if len(prices) > 1 else -1)
        continue
      if kr != kc:
        raise ValueError(f"{self.name}: P couples stages {kr} and {kc} (variables {r} and {c})")
      hess.append(self.h_at(kr, ir, ic))
      mirror.append(self.h_at(kr, ic, ir) if ir != ic else -1)
    offsets, scales = [], []
    for r, c in stored_entries(self.problem.a_pattern):
      k, j = variables[c]
      offset, scale = -1, 0.0  # the identities the stage QP implies: x_0 in its row, x_{k+1} in its dynamics, the boxes
      if r < len(rows) and c not in self.soft:  # (an eliminated slack's coefficients, +1 and -1, are implied too)
        kind, kr, i = rows[r]
        if kind == "dynamics" and (k, j) != (kr + 1, i):
          if k != self.stages.parent(kr + 1):
            raise ValueError(f"{self.name}: the dynamics row {r} into stage {kr + 1} depends on stage {k}")
          o = self.data  # NOTE: transition kr's blocks (from stage kr in a chain, its parent's in a tree)
          offset = o["A"] + (kr * nx + i) * nx + j if j < nx else o["B"] + (kr * nx + i) * (self.nz - nx) + j - nx
          scale = -1.0 / self.stages.coefficient(r)
        elif kind == "stage":
          if k != kr:
            raise ValueError(f"{self.name}: constraint row {r} of stage {kr} depends on stage {k}")
          offset, scale = self.g_at(k, i, j), 1.0
        elif kind == "initial" and (k, j) != (0, i):
          raise ValueError(f"{self.name}: the initial row {r} of x_0[{i}] depends on another variable ({c})")
      offsets.append(offset)
      scales.append(scale)
    return {"P_to_data": tuple(hess), "P_mirror": tuple(mirror), "A_to_data": tuple(offsets), "A_scale": tuple(scales)}

  def _derivatives(self) -> dict[str, tuple[float, ...]]:
    """With the problem's DerivativeSources, P's and A's tables composed with them (load_derivatives): H's entries,
    the diagonal, and the entries of J that enter the stage QP (those of the identities it implies do not)."""
    if (sources := self.problem.sources) is None:
      return {}
    matrices = self.matrices
    into = lambda table, positions: tuple(matrices[table][e] for e in positions)
    jac = [e for e, a in enumerate(sources.jac_to_A) if matrices["A_to_data"][a] >= 0]
    loaded = set(sources.hess_to_P)
    unloaded = [e for e in range(len(matrices["P_to_data"])) if e not in loaded]  # a diagonal entry H lacks
    places = (*into("P_to_data", unloaded), *into("P_mirror", unloaded))
    return {"hess_to_data": into("P_to_data", sources.hess_to_P), "hess_mirror": into("P_mirror", sources.hess_to_P),
            "unloaded_to_data": tuple(at for at in places if at >= 0),
            "diag_to_data": into("P_to_data", sources.diag_P), "diag_mirror": into("P_mirror", sources.diag_P),
            "jac_from": tuple(jac),
            "jac_to_data": into("A_to_data", (sources.jac_to_A[e] for e in jac)),
            "jac_scale": into("A_scale", (sources.jac_to_A[e] for e in jac))}  # fmt: skip

  def _vectors(self) -> dict[str, tuple[float, ...]]:
    o, s, N, nx = self.data, self.iterate, self.stages.N, self.stages.nx
    lower, upper, dual, dual_row, dual_scale, lower_scale = [], [], [], [], [], []
    initial, initial_scale = [0] * nx, [1.0] * nx
    for r, (kind, k, i) in enumerate(self.stages.rows):
      # NOTE: an initial or dynamics row is the multiple `coefficient` of the stage QP's: its bound is divided by it
      # (its bounds are equal) and its multiplier is the stage QP's divided by it
      scale = 1.0 / self.stages.coefficient(r)
      lower_scale.append(scale)
      if kind == "initial":  # NOTE: x0 is read from its row's lower bound through initial_rows (x0_to_data)
        initial[i], initial_scale[i] = r, scale
        lower.append(-1)
        upper.append(-1)
        dual.append(-1)
        dual_row.append(-1)
        dual_scale.append(0.0)
      elif kind == "dynamics":
        lower.append(o["c"] + k * nx + i)
        upper.append(-1)
        dual.append(s["pi"] + k * nx + i)  # the row is -(A x + B u + c - x_{k+1}): its multiplier is -pi_k
        dual_row.append(-1)
        dual_scale.append(-scale)
      else:
        row = self.general(k, i)
        lower.append(self.bound_at(k, row, "lo"))
        upper.append(self.bound_at(k, row, "hi"))
        dual.append(-1)
        dual_row.append(self.row_at(k, row))
        dual_scale.append(1.0)
    if self.stages.initial_bounds:  # x_0's bound rows: box rows of stage 0 (lo = hi = x0) and its initial rows
      for v, (k, i) in enumerate(self.stages.variables):
        if k == 0 and i < nx:
          initial[i] = len(self.stages.rows) + v
    primal, gradient = [], []
    # NOTE: the elastic rows (set_elastic): the general rows and the state boxes; input boxes and dynamics stay hard
    elastic = [self.bound_at(k, self.general(k, i), "z") for kind, k, i in self.stages.rows if kind == "stage"]
    elastic += [self.bound_at(k, i, "z") for k, i in self.stages.variables if i < nx]
    for v, (k, i) in enumerate(self.stages.variables):
      eliminated = v in self.soft  # its bound, gradient, step and multiplier: the soft tables
      lower.append(-1 if eliminated else self.bound_at(k, i, "lo"))
      upper.append(-1 if eliminated else self.bound_at(k, i, "hi"))
      dual.append(-1)
      dual_row.append(-1 if eliminated else self.row_at(k, i))
      dual_scale.append(1.0)
      lower_scale.append(1.0)
      gradient.append(-1 if eliminated else o["g"] + k * self.nz + i if k < N else o["gN"] + i)
      inputs = s["u"] + k * (self.nz - nx) if k < N else s["uN"]
      primal.append(-1 if eliminated else s["x"] + k * nx + i if i < nx else inputs + i - nx)
    return {"q_to_data": tuple(gradient), "l_to_data": tuple(lower), "u_to_data": tuple(upper),
            "primal_from": tuple(primal), "dual_from": tuple(dual), "dual_row": tuple(dual_row),
            "initial_rows": tuple(initial), "x0_to_data": tuple(o["x0"] + i for i in range(nx)),
            "elastic_to_data": tuple(elastic), "l_scale": tuple(lower_scale), "dual_scale": tuple(dual_scale),
            "initial_scale": tuple(initial_scale), **self._soft()}  # fmt: skip

  def soft_row(self, row: int, field: str) -> int:
    """Offset of a softened row's `field` ("lo", "hi", "z", "w") in Data."""
    _, k, i = self.stages.rows[row]
    return self.bound_at(k, self.general(k, i), field)

  def _soft(self) -> dict[str, tuple[float, ...]]:
    """Per eliminated slack: its variable and bound row, then per side (its lower row, its upper row; -1: none) the
    row among the interior point's and the QP's, and the offsets of the bound it relaxes and of its prices."""
    n_rows = len(self.stages.rows)
    at = lambda row, what: -1 if row < 0 else what(row)
    where = lambda row: self.row_at(self.stages.rows[row][1], self.general(*self.stages.rows[row][1:]))
    sides = [(side, row) for lo, hi in self.soft.values() for side, row in (("lo", lo), ("hi", hi))]
    return {"soft_var": tuple(self.soft), "soft_box": tuple(n_rows + v for v in self.soft),
            "soft_row": tuple(at(row, where) for _, row in sides), "soft_qrow": tuple(row for _, row in sides),
            "soft_bound": tuple(at(row, lambda r, side=side: self.soft_row(r, side)) for side, row in sides),
            "soft_z": tuple(at(row, lambda r: self.soft_row(r, "z")) for _, row in sides),
            "soft_w": tuple(at(row, lambda r: self.soft_row(r, "w")) for _, row in sides)}  # fmt: skip


def _eliminated_slacks(
  stages: StageLayout, problem: QPProblem, nud: int
) -> tuple[tuple[tuple[int, int, int], ...], int, int]:
  """The layout's soft slacks the backend eliminates, and the inputs per stage (k < N, and N) left without them: all
  or none, where each slack's column of P is its diagonal alone, its column of A its bound and its two rows, and the
  slacks are the last inputs of their stages (else every slack stays an input, as before)."""
  keep = stages.nu, stages.nuN
  soft = {v for v, _, _ in stages.soft}
  if not soft:
    return (), *keep
  p_entries = stored_entries(problem.p_pattern)
  p_rows, p_cols = Counter(r for r, _ in p_entries), Counter(c for _, c in p_entries)
  a_cols = dict[int, set[int]]()
  for r, c in stored_entries(problem.a_pattern):
    a_cols.setdefault(c, set()).add(r)
  n_rows, last = len(stages.rows), [-1, -1]
  for v, (k, i) in enumerate(stages.variables):
    if v not in soft and i >= stages.nx:
      last[k == stages.N] = max(last[k == stages.N], i - stages.nx)
  nu, nuN = max(last[0] + 1, nud, 1), last[1] + 1
  for v, lo, hi in stages.soft:
    k, i = stages.variables[v]
    allowed = {n_rows + v, lo, hi} - {-1}
    # NOTE: P is upper triangular: a slack's diagonal entry alone is one entry in its row and one in its column
    coupled = p_rows[v] > 1 or p_cols[v] > 1
    if coupled or not a_cols.get(v, set()) <= allowed or i - stages.nx < (nu if k < stages.N else nuN):
      return (), *keep
  return stages.soft, nu, nuN
