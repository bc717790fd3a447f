"""`RiccatiQP`: a generated interior-point solver for QPs with the stage structure of an optimal control problem.

minimize Σ_k ½ z_kᵀH_k z_k + g_kᵀz_k + ½ z_NᵀH_N z_N + g_Nᵀz_N over z_k = [x_k; u_k] and z_N = [x_N; u_N], subject
to x_0 = x0, x_{k+1} = A_k x_k + B_k u_k + c_k, lo_k ≤ G_k z_k ≤ hi_k (k < N) and loN ≤ G_N z_N ≤ hiN. A row with
lo = hi is a true equality (a free multiplier, no slacks). u_N (nuN inputs, none by default) enter no dynamics: the
slacks of soft terminal constraints. Only the first nud inputs (all by default) enter the dynamics: B's columns
after them must be zero, and the recursion skips them. A row with a price z > 0 (data fields z, zN; 0 by default) is
elastic: it may be violated at the cost z per unit (an L1 penalty, the elastic variables eliminated row by row); with
`quadratic_prices`, a price w (fields w, wN) adds w s²/2 for a violation s (an L2 penalty: HPIPM's soft constraints),
and w > 0 alone makes a row elastic too.
Mehrotra's predictor-corrector interior point; each Newton system is an LQ problem solved by a Riccati recursion over
the stages (factored once per iteration, O(N (nx + nu)³)), sizes fixed at code generation. The C++ is
anvil/riccati.hpp, templated on those sizes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from anvil.codegen.base import check_identifier
from anvil.codegen.boundary import BoundaryCode, Field, Struct, boundary_code
from anvil.codegen.precision import check_scalar, cpp_real
from anvil.codegen.runtime import runtime_include
from anvil.codegen.templated import TemplatedFunction
from anvil.qp.cost_model import COLD_ITERATIONS, RiccatiCostModel
from anvil.qp.options import RiccatiOptions
from anvil.qp.result import OCPQPSolution, QPStatus

#: The arrays of a solve's solution the JIT writes, in order (each flattened; RiccatiQP.solution_shapes' sizes).
SOLUTION_ARRAYS = ("x", "u", "pi", "lam", "lamN", "uN")
#: What a JIT solve writes beside them (the C++ Solution's members of these names).
QP_SCALARS = Struct("QPScalars", "What a QP solve writes beside its solution's arrays (anvil/qp/riccati.py).", (
  Field("status", "int"), Field("iterations", "int"),
  *(Field(name, "double") for name in ("residual_stationarity", "residual_equality", "residual_inequality",
                                        "complementarity", "solve_time")),
))  # fmt: skip


@dataclass(frozen=True)
class _RiccatiContext:
  """What the RiccatiQP templates need."""

  name: str
  nx: int
  nu: int
  N: int
  ng: int
  ngN: int
  nuN: int
  nud: int
  max_iter: int
  uN_offset: int
  pi_offset: int
  real: str
  boxes: bool
  quadratic_prices: bool
  condensing: int
  parents: tuple[int, ...]

  solution_arrays: tuple[str, ...] = SOLUTION_ARRAYS  # the Solution's arrays the JIT's solve writes, in order
  scalar_names: tuple[str, ...] = QP_SCALARS.names  # the Solution's members the JIT's QPScalars copies

  @property
  def boundary(self) -> BoundaryCode:
    """The JIT's anvil::jit::QPScalars and its layout check (anvil.codegen.boundary)."""
    return boundary_code(((QP_SCALARS, "anvil::jit::QPScalars"),))

  @property
  def transitions(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A tree's transitions out of each stage as (first, edges): edges[first[k]:first[k + 1]] lead out of stage k."""
    sources = self.parents[1:]
    edges = sorted(range(self.N), key=lambda e: (sources[e], e))
    counts = np.bincount(sources, minlength=self.N + 1)
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(counts)])), tuple(edges)


class RiccatiQP(TemplatedFunction):
  """An OCP-structured QP solver generated as C++ for fixed sizes (nx, nu, N, ng rows per stage, ngN at the end).

  Args:
    name: a C++ identifier.
    nx: states per stage.
    nu: inputs per stage.
    N: the horizon (stages).
    ng: general rows per stage (a row is an equality where its bounds are equal).
    ngN: rows at the last stage.
    max_iter: interior-point iteration limit (default: RiccatiOptions().max_iter).
    nuN: inputs at the last stage (they enter no dynamics; the slacks of soft terminal constraints).
    nud: the inputs that enter the dynamics (the first nud; default nu): the columns of B after them must be zero
      (e.g. the slacks of soft constraints, which are inputs of their stage), and the recursion skips them.
    scalar: "float64" or "float32", the type it computes in.
    boxes: the first nx + nu rows of each stage k < N (nx + nuN at stage N) bound its variables one by one (row j of
      z_k = [x_k; u_k]): G and GN then hold only the rows after them (ng and ngN count all rows).
    quadratic_prices: the data fields w and wN (rows' prices of their squared violation) exist (else every w is 0).
    condensing: stages per block of partial condensing (HPIPM's; 1: none), or "auto": the block size
      `auto_condensing`'s cost model predicts fastest for cold solves (`best_condensing(COLD_ITERATIONS)`). The
      interior point solves the QP of ceil(N / condensing) stages of nx states and condensing * nu inputs, the states
      inside each block eliminated through the dynamics (anvil/condensing.hpp), and its solution is expanded to every
      stage (the status and residual norms are the condensed QP's). Fewer, larger stages: worth it where nx is large
      against nu and solves take many iterations (`python -m benchmarks.bench_riccati --condensing`).
    parents: the stages as a tree (multi-stage robust MPC's scenario tree): stage k's parent for k = 0..N (-1 at
      stage 0, below k elsewhere, so stage N is a leaf); transition k (A[k], B[k], c[k]) leads into stage k + 1 from its
      parent. Empty (the default): a chain, stage k + 1 following stage k. A tree is not condensed.

  Example:
    >>> qp = RiccatiQP("qp", nx=4, nu=1, N=30, ng=5, ngN=4)
    >>> sol = qp(H=H, g=g, HN=HN, gN=gN, A=A, B=B, c=c, x0=x0, G=G, lo=lo, hi=hi, GN=GN, loN=loN, hiN=hiN)
  """

  FIELDS = ("H", "g", "HN", "gN", "A", "B", "c", "x0", "G", "lo", "hi", "GN", "loN", "hiN", "z", "zN", "w", "wN")
  #: Fields that default to zeros: the rows' prices (every row hard).
  PRICES = ("z", "zN", "w", "wN")
  template = "riccati"

  def __init__(
    self,
    name: str,
    nx: int,
    nu: int,
    N: int,
    ng: int = 0,
    ngN: int = 0,
    max_iter: int = RiccatiOptions().max_iter,
    nuN: int = 0,
    nud: int | None = None,
    scalar: str = "float64",
    boxes: bool = False,
    quadratic_prices: bool = False,
    condensing: int | str = "auto",
    parents: tuple[int, ...] = (),
  ) -> None:
    self.name = check_identifier(name, "RiccatiQP name")
    self.scalar = check_scalar(f"RiccatiQP({name})", scalar)
    for what, value, least in (("nx", nx, 1), ("nu", nu, 1), ("N", N, 1), ("ng", ng, 0), ("ngN", ngN, 0),
                               ("max_iter", max_iter, 1), ("nuN", nuN, 0)):  # fmt: skip
      if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"RiccatiQP({name}): {what} must be an int >= {least}, got {value!r}")
    self.nx, self.nu, self.N, self.ng, self.ngN, self.max_iter, self.nuN = nx, nu, N, ng, ngN, max_iter, nuN
    self.parents = check_parents(f"RiccatiQP({name})", parents, N)
    self.nud = nu if nud is None else nud
    if isinstance(self.nud, bool) or not isinstance(self.nud, int) or not 0 <= self.nud <= nu:
      raise ValueError(f"RiccatiQP({name}): nud must be an int in [0, nu = {nu}], got {nud!r}")
    for what, flag in (("boxes", boxes), ("quadratic_prices", quadratic_prices)):
      if not isinstance(flag, bool):
        raise TypeError(f"RiccatiQP({name}): {what} must be a bool, got {flag!r}")
    self.boxes, self.quadratic_prices = boxes, quadratic_prices
    if boxes and (ng < nx + nu or ngN < nx + nuN):
      raise ValueError(f"RiccatiQP({name}): boxes=True needs ng >= nx + nu and ngN >= nx + nuN (the box rows)")
    if condensing == "auto":
      condensing = 1 if self.parents else self.best_condensing(COLD_ITERATIONS)
    if self.parents and condensing != 1:
      raise ValueError(
        f'RiccatiQP({name}): a tree of stages (parents) is not condensed: condensing must be 1 or "auto"'
      )
    if isinstance(condensing, bool) or not isinstance(condensing, int) or not 1 <= condensing <= N:
      raise ValueError(f"RiccatiQP({name}): condensing must be \"auto\" or an int in [1, N = {N}] (stages per block), "
                       f"got {condensing!r}")  # fmt: skip
    self.condensing: int = condensing

  def best_condensing(self, iterations: float) -> int:
    """`condensing_for_rows` for this QP's sizes and rows, and solves of `iterations` interior-point iterations."""
    return condensing_for_rows(self.nx, self.nu, self.N, self.ng, boxes=self.boxes, nud=self.nud, iterations=iterations)

  @property
  def header_includes(self) -> tuple[str, ...]:
    """The runtime headers of the declarations: the solver's, with condensing the condensing layer's (which
    includes it)."""
    return (runtime_include("condensing" if self.condensing > 1 else "riccati"),)

  @property
  def shapes(self) -> dict[str, tuple[int, ...]]:
    """The shape of each data field (rows at least 1, as stored; with boxes, G and GN without the box rows; without
    quadratic_prices, w and wN one unused entry each)."""
    nx, nu, N, nz, nzN = self.nx, self.nu, self.N, self.nx + self.nu, self.nx + self.nuN
    mg, mgN = max(self.ng, 1), max(self.ngN, 1)
    rows, rowsN = (max(self.ng - nz, 1), max(self.ngN - nzN, 1)) if self.boxes else (mg, mgN)
    squared = self.quadratic_prices
    return {"H": (N, nz, nz), "g": (N, nz), "HN": (nzN, nzN), "gN": (nzN,), "A": (N, nx, nx), "B": (N, nx, nu),
            "c": (N, nx), "x0": (nx,), "G": (N, rows, nz), "lo": (N, mg), "hi": (N, mg), "GN": (rowsN, nzN),
            "loN": (mgN,), "hiN": (mgN,), "z": (N, mg), "zN": (mgN,), "w": (N, mg) if squared else (1, 1),
            "wN": (mgN,) if squared else (1,)}  # fmt: skip

  @property
  def solution_shapes(self) -> dict[str, tuple[int, ...]]:
    """The leading arrays of the C++ `Solution`, flattened, in order (rows at least 1, as stored)."""
    nx, N = self.nx, self.N
    return {"x": ((N + 1) * nx,), "u": (N * self.nu,), "pi": (N * nx,), "lam": (N * max(self.ng, 1),),
            "lamN": (max(self.ngN, 1),), "uN": (max(self.nuN, 1),)}  # fmt: skip

  @property
  def iterate_shapes(self) -> dict[str, tuple[int, ...]]:
    """The leading arrays of the C++ `Workspace` (the iterate, where `solve_in_place` leaves the solution), flattened,
    in order."""
    nx, N = self.nx, self.N
    return {"x": ((N + 1) * nx,), "u": (N * self.nu,), "uN": (max(self.nuN, 1),), "pi": (N * nx,)}

  @cached_property
  def context(self) -> _RiccatiContext:
    """Sizes, the iteration limit and the offset of Solution::uN (checked by a static_assert)."""
    return _RiccatiContext(
      name=self.name, nx=self.nx, nu=self.nu, N=self.N, ng=self.ng, ngN=self.ngN, nuN=self.nuN, nud=self.nud,
      max_iter=self.max_iter, uN_offset=flat_offsets(self.solution_shapes)[0]["uN"],
      pi_offset=flat_offsets(self.iterate_shapes)[0]["pi"], real=cpp_real(self.scalar), boxes=self.boxes,
      quadratic_prices=self.quadratic_prices, condensing=self.condensing, parents=self.parents,
    )  # fmt: skip

  @cached_property
  def _solve(self) -> Any:
    return self.handle.entry("solve", ctypes.c_int, ctypes.c_void_p, ctypes.c_double, ctypes.c_int, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)  # fmt: skip

  def __call__(self, tol: float = 1e-8, warm_start: bool = False, **data: ArrayLike) -> OCPQPSolution:
    """Solve to `tol`; `data` holds every field of FIELDS (G/lo/hi and GN/loN/hiN may be omitted or empty when ng or
    ngN is 0; z/zN and w/wN, the prices of elastic rows, default to 0: every row hard); ±inf bounds mean none.
    warm_start starts from the previous call's solution (if it was solved)."""
    shapes = self.shapes
    parts = []
    for key in self.FIELDS:
      absent = key not in data or np.size(data[key]) == 0
      if absent and (key in self.PRICES or (key in ("G", "lo", "hi") and self.ng == 0)
                     or (key in ("GN", "loN", "hiN") and self.ngN == 0)):  # fmt: skip
        value: Any = np.zeros(shapes[key]) if key in ("G", "GN", *self.PRICES) else np.full(shapes[key], np.inf)
      elif key in ("w", "wN") and not self.quadratic_prices:
        raise ValueError(f"{self.name}: {key} (prices of squared violations) needs RiccatiQP(quadratic_prices=True)")
      elif key not in data:
        raise TypeError(f"{self.name}: missing data field {key!r}")
      else:
        value = np.asarray(data[key], dtype=np.float64)
      if value.shape != shapes[key]:
        raise ValueError(f"{self.name}: {key} must have shape {shapes[key]}, got {value.shape}")
      if np.any(np.isnan(value)):
        raise ValueError(f"{self.name}: {key} contains NaN")
      if key in self.PRICES and np.any(value < 0):
        raise ValueError(f"{self.name}: {key} holds prices of violations: every entry must be >= 0")
      if key == "B" and np.any(value[:, :, self.nud :] != 0):
        raise ValueError(
          f"{self.name}: B's columns from nud = {self.nud} on must be zero (those inputs enter no dynamics)"
        )
      if key in ("H", "HN"):  # only the symmetric part enters ½ zᵀHz
        value = 0.5 * (value + np.swapaxes(value, -1, -2))
      parts.append(np.clip(value, -1e30, 1e30).reshape(-1))
    flat = np.ascontiguousarray(np.concatenate(parts))
    nx, nu, N = self.nx, self.nu, self.N
    sizes = [self.solution_shapes[name][0] for name in SOLUTION_ARRAYS]
    out, scalars = np.zeros(sum(sizes)), QP_SCALARS.mirror()
    self._solve(flat.ctypes.data, float(tol), int(bool(warm_start)), out.ctypes.data, ctypes.addressof(scalars),
                self.handle.pointer)  # fmt: skip
    x, u, pi, lam, lamN, uN = np.split(out, np.cumsum(sizes)[:-1])
    residuals = (float(scalars.residual_stationarity), float(scalars.residual_equality),
                 float(scalars.residual_inequality), float(scalars.complementarity))  # fmt: skip
    lam = lam.reshape(N, -1)[:, : self.ng]
    status = QPStatus.from_code(int(scalars.status))
    return OCPQPSolution(x.reshape(N + 1, nx), u.reshape(N, nu), pi.reshape(N, nx), lam, lamN[: self.ngN], status,
                         int(scalars.iterations), residuals, float(scalars.solve_time), uN[: self.nuN])  # fmt: skip


def check_parents(where: str, parents: tuple[int, ...], N: int) -> tuple[int, ...]:
  """`parents` checked as a tree of the stages 0..N (empty: a chain): stage 0 the root (-1), each other stage's parent
  before it (so stage N is a leaf)."""
  if not isinstance(parents, tuple) or any(isinstance(v, bool) or not isinstance(v, int) for v in parents):
    raise TypeError(f"{where}: parents must be a tuple of ints (empty: a chain), got {parents!r}")
  if parents and (len(parents) != N + 1 or parents[0] != -1 or any(not 0 <= parents[k] < k for k in range(1, N + 1))):
    raise ValueError(
      f"{where}: parents must hold stage k's parent for k = 0..N = {N}: -1 at stage 0, then a stage "
      f"before k; got {parents!r}"
    )
  return parents


def auto_condensing(
  nx: int,
  nu: int,
  N: int,
  *,
  nud: int | None = None,
  state_rows: int = 0,
  rows: int | None = None,
  iterations: float = COLD_ITERATIONS,
) -> int:
  """The stages per block a RiccatiQP of these sizes solves fastest, as `anvil.qp.cost_model.RiccatiCostModel`
  predicts it (`RiccatiCostModel.best`): the block sizes' modeled times per solve (the factorization's products, the
  vector passes, the rows and the condensing, counted from the sizes) over `iterations` interior-point iterations,
  the smallest block within 5% of the fastest. Condensing pays where nx is large against nu and a solve takes many
  iterations: it turns the O(N (nx + nu)^3) recursion into O(N / M (nx + M nu)^3), for a condensing done once per
  solve (measured and modeled: `python -m benchmarks.bench_riccati --condensing`).

  Args:
    nx: states per stage.
    nu: inputs per stage.
    N: the horizon (stages).
    nud: the inputs that enter the dynamics (default nu).
    state_rows: rows with bounds per stage that involve the states (each a dense row of its block once condensed).
    rows: rows with bounds per stage in all (default state_rows + nu).
    iterations: interior-point iterations per solve: COLD_ITERATIONS by default, fewer for warm-started QPs.
  """
  model = RiccatiCostModel(nx=nx, nu=nu, N=N, nud=nu if nud is None else nud, state_rows=state_rows, rows=rows,
                           iterations=iterations)  # fmt: skip
  return model.best()


def condensing_for_rows(nx: int, nu: int, N: int, ng: int, *, boxes: bool, nud: int, iterations: float) -> int:
  """`auto_condensing` for a RiccatiQP's rows (ng per stage, `boxes` as RiccatiQP's), whose bounds are data unknown
  here: with boxes, the rows after the box rows are taken to involve the states, and the inputs to be bounded and
  the states not; without boxes, every row is taken to involve the states."""
  general = ng - (nx + nu) if boxes else ng
  return auto_condensing(nx, nu, N, nud=nud, state_rows=general, rows=None if boxes else ng, iterations=iterations)


def flat_offsets(shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, int], int]:
  """Offsets of consecutive fields of the given shapes in one flat array, and its size."""
  offsets, at = {}, 0
  for key, shape in shapes.items():
    offsets[key] = at
    at += int(np.prod(shape))
  return offsets, at
