"""`RiccatiQP`: a generated interior-point solver for QPs with the stage structure of an optimal control problem.

minimize Σ_k ½ z_kᵀH_k z_k + g_kᵀz_k + ½ z_NᵀH_N z_N + g_Nᵀz_N over z_k = [x_k; u_k] and z_N = [x_N; u_N], subject
to x_0 = x0, x_{k+1} = A_k x_k + B_k u_k + c_k, lo_k ≤ G_k z_k ≤ hi_k (k < N) and loN ≤ G_N z_N ≤ hiN. A row with
lo = hi is a true equality (a free multiplier, no slacks). u_N (nuN inputs, none by default) enter no dynamics: the
slacks of soft terminal constraints. Mehrotra's predictor-corrector interior point; each Newton system is an LQ
problem solved by a Riccati recursion over the stages (factored once per iteration, O(N (nx + nu)³)), sizes fixed at
code generation (riccati-notes.md).
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from anvil.codegen import FunctionBase
from anvil.codegen.base import check_identifier, render_template
from anvil.codegen.jit import load_library
from anvil.sqp.solver import solver_library

TEMPLATES = Path(__file__).parent / "templates"
QP_STATUSES = ("solved", "max_iterations", "infeasible", "nonconvex", "numerical_error")
F64 = NDArray[np.float64]


@dataclass(frozen=True)
class _QPContext:
  name: str
  nx: int
  nu: int
  N: int
  ng: int
  ngN: int
  nuN: int
  max_iter: int


@dataclass(frozen=True)
class OCPQPSolution:
  """What `RiccatiQP` returns: x (N + 1, nx), u (N, nu), pi (N, nx) (multipliers of the dynamics), lam (N, ng) and
  lamN (ngN,) (row multipliers, positive at an active upper bound; an equality row's free multiplier), status,
  iterations, the final residuals (stationarity, equality, inequality, complementarity), the solve time in seconds
  (measured in the C++) and uN (nuN,), the terminal inputs."""

  x: F64
  u: F64
  pi: F64
  lam: F64
  lamN: F64
  status: str
  iterations: int
  residuals: tuple[float, float, float, float]
  solve_time: float
  uN: F64 = field(default_factory=lambda: np.zeros(0))


class RiccatiQP(FunctionBase):
  """An OCP-structured QP solver generated as C++ for fixed sizes (nx, nu, N, ng rows per stage, ngN at the end).

  Args:
    name: a C++ identifier.
    nx, nu, N, ng, ngN: state, input, horizon and row counts (a row is an equality where its bounds are equal).
    max_iter: interior-point iteration limit.
    nuN: inputs at the last stage (they enter no dynamics; the slacks of soft terminal constraints).

  Example:
    >>> qp = RiccatiQP("qp", nx=4, nu=1, N=30, ng=5, ngN=4)
    >>> sol = qp(H=H, g=g, HN=HN, gN=gN, A=A, B=B, c=c, x0=x0, G=G, lo=lo, hi=hi, GN=GN, loN=loN, hiN=hiN)
  """

  FIELDS = ("H", "g", "HN", "gN", "A", "B", "c", "x0", "G", "lo", "hi", "GN", "loN", "hiN")

  def __init__(
    self, name: str, nx: int, nu: int, N: int, ng: int = 0, ngN: int = 0, max_iter: int = 50, nuN: int = 0
  ) -> None:
    self.name = check_identifier(name, "RiccatiQP name")
    for what, value, least in (("nx", nx, 1), ("nu", nu, 1), ("N", N, 1), ("ng", ng, 0), ("ngN", ngN, 0),
                               ("max_iter", max_iter, 1), ("nuN", nuN, 0)):  # fmt: skip
      if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"RiccatiQP({name}): {what} must be an int >= {least}, got {value!r}")
    self.nx, self.nu, self.N, self.ng, self.ngN, self.max_iter, self.nuN = nx, nu, N, ng, ngN, max_iter, nuN

  @property
  def shapes(self) -> dict[str, tuple[int, ...]]:
    """The shape of each data field (rows of G/GN at least 1, as stored)."""
    nx, nu, N, nz, nzN = self.nx, self.nu, self.N, self.nx + self.nu, self.nx + self.nuN
    mg, mgN = max(self.ng, 1), max(self.ngN, 1)
    return {"H": (N, nz, nz), "g": (N, nz), "HN": (nzN, nzN), "gN": (nzN,), "A": (N, nx, nx), "B": (N, nx, nu),
            "c": (N, nx), "x0": (nx,), "G": (N, mg, nz), "lo": (N, mg), "hi": (N, mg), "GN": (mgN, nzN),
            "loN": (mgN,), "hiN": (mgN,)}  # fmt: skip

  @property
  def solution_shapes(self) -> dict[str, tuple[int, ...]]:
    """The leading arrays of the C++ `Solution`, flattened, in order (rows at least 1, as stored)."""
    nx, N = self.nx, self.N
    return {"x": ((N + 1) * nx,), "u": (N * self.nu,), "pi": (N * nx,), "lam": (N * max(self.ng, 1),),
            "lamN": (max(self.ngN, 1),), "uN": (max(self.nuN, 1),)}  # fmt: skip

  @cached_property
  def _context(self) -> _QPContext:
    return _QPContext(self.name, self.nx, self.nu, self.N, self.ng, self.ngN, self.nuN, self.max_iter)

  @property
  def header_code(self) -> str:
    """Sizes, Data, Solution, Workspace, init_ws() and solve()."""
    return render_template("riccati.hpp.j2", folder=TEMPLATES, q=self._context)

  @property
  def source_code(self) -> str:
    """The interior-point method and the Riccati recursion."""
    return render_template("riccati.cpp.j2", folder=TEMPLATES, q=self._context)

  @property
  def source_includes(self) -> tuple[str, ...]:
    """`<chrono>` for the solve time."""
    return ("<chrono>",)

  @cached_property
  def library(self) -> str:
    """Path of the compiled solver."""
    module = f"anvil_jit_{self.name}"
    wrapper = render_template("riccati_jit.cpp.j2", folder=TEMPLATES, q=self._context, module=module)
    return solver_library(self, module, wrapper, ())

  @cached_property
  def _entry(self) -> tuple[Any, ctypes.c_void_p]:
    lib = load_library(self.library)
    new, free, solve = (lib[f"anvil_{self.name}_{f}"] for f in ("ws_new", "ws_free", "solve"))
    new.restype, new.argtypes = ctypes.c_void_p, []
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    solve.restype = ctypes.c_int
    solve.argtypes = [ctypes.c_void_p, ctypes.c_double, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    ws = ctypes.c_void_p(new())
    weakref.finalize(self, free, ws.value)
    return solve, ws

  def __call__(self, tol: float = 1e-8, warm_start: bool = False, **data: ArrayLike) -> OCPQPSolution:
    """Solve to `tol`; `data` holds every field of FIELDS (G/lo/hi and GN/loN/hiN may be omitted or empty when ng or
    ngN is 0); ±inf bounds mean none. warm_start starts from the previous call's solution (if it was solved)."""
    shapes = self.shapes
    parts = []
    for key in self.FIELDS:
      absent = key not in data or np.size(data[key]) == 0
      if absent and ((key in ("G", "lo", "hi") and self.ng == 0) or (key in ("GN", "loN", "hiN") and self.ngN == 0)):
        value: Any = np.zeros(shapes[key]) if key in ("G", "GN") else np.full(shapes[key], np.inf)
      elif key not in data:
        raise TypeError(f"{self.name}: missing data field {key!r}")
      else:
        value = np.asarray(data[key], dtype=np.float64)
      if value.shape != shapes[key]:
        raise ValueError(f"{self.name}: {key} must have shape {shapes[key]}, got {value.shape}")
      if np.any(np.isnan(value)):
        raise ValueError(f"{self.name}: {key} contains NaN")
      if key in ("H", "HN"):  # only the symmetric part enters ½ zᵀHz
        value = 0.5 * (value + np.swapaxes(value, -1, -2))
      parts.append(np.clip(value, -1e30, 1e30).reshape(-1))
    flat = np.ascontiguousarray(np.concatenate(parts))
    nx, nu, N = self.nx, self.nu, self.N
    sizes = (*(shape[0] for shape in self.solution_shapes.values()), 5)  # then the residuals and the solve time
    out, info = np.zeros(sum(sizes)), np.zeros(2, dtype=np.int32)
    solve, ws = self._entry
    solve(flat.ctypes.data, float(tol), int(bool(warm_start)), out.ctypes.data, info.ctypes.data, ws)
    x, u, pi, lam, lamN, uN, res = np.split(out, np.cumsum(sizes)[:-1])
    residuals = (float(res[0]), float(res[1]), float(res[2]), float(res[3]))
    lam = lam.reshape(N, -1)[:, : self.ng]
    status = QP_STATUSES[int(info[0])]
    return OCPQPSolution(x.reshape(N + 1, nx), u.reshape(N, nu), pi.reshape(N, nx), lam, lamN[: self.ngN], status,
                         int(info[1]), residuals, float(res[4]), uN[: self.nuN])  # fmt: skip


class OCPStructure:
  """How the multiple-shooting NLP's QP maps onto `RiccatiQP`'s stage blocks: index tables (into `Data` and `Solution`
  viewed as flat double arrays) for every Hessian, Jacobian, gradient and bound entry the SQP loop produces, so its C++
  fills the structured QP by table lookups and maps the solution (steps and multipliers) back.

  Layout (anvil.mpc.transcription): w = [x_0, u_0, ..., x_{N-1}, u_{N-1}, x_N, s]; g = [x_0 - x_init (nx); defects
  x_{k+1} - F_k (N nx); h_k (N nh); h_N (nhN); v_e + s_e (ns); v_e - s_e (ns)]. Slack e belongs to stage
  slack_stages[e]: in the QP it is an extra input of its stage (entering no dynamics) or, at stage N, a terminal input.
  Stage k's rows are its box rows (x_k, u_k, its slacks), its nh path constraints, then two rows per slack (v + s, v -
  s); stage N's likewise with x_N, its slacks and the nhN terminal constraints. Stages with fewer slacks than the most
  any stage has are padded with slacks fixed at 0 (box rows with lower = upper = 0, never written by the tables).
  Each QP is solved to 1e-2 of the SQP's KKT error, within [tol_min, 1e-6], in at most max_iter iterations.
  """

  def __init__(
    self,
    name: str,
    N: int,
    nx: int,
    nu: int,
    nh: int,
    nhN: int,
    hessian: Any,
    jacobian: Any,
    slack_stages: tuple[int, ...] = (),
    max_iter: int = 60,
    tol_min: float = 1e-10,
  ) -> None:
    self.N, self.nx, self.nu, self.nh, self.nhN = N, nx, nu, nh, nhN
    self.tol_min = float(tol_min)
    self.nz = nx + nu
    self.slack_stages = tuple(slack_stages)
    counts = [0] * (N + 1)  # slacks per stage so far: slack e is the slot[e]-th of its stage
    self.slot = []
    for k in self.slack_stages:
      self.slot.append(counts[k])
      counts[k] += 1
    self.ns_stage, self.nsN = max(counts[:N]), counts[N]
    self.nw = N * self.nz + nx + len(self.slack_stages)
    nu_qp, self.nzN = nu + self.ns_stage, nx + self.nsN
    self.nz_qp = nx + nu_qp
    ng, ngN = self.nz_qp + nh + 2 * self.ns_stage, self.nzN + nhN + 2 * self.nsN
    self.solver = RiccatiQP(f"{name}_ocp_qp", nx, nu_qp, N, ng=ng, ngN=ngN, max_iter=max_iter, nuN=self.nsN)
    self.offsets, self.data_size = _flat_offsets(self.solver.shapes)
    self.solution_offsets = _flat_offsets(self.solver.solution_shapes)[0]
    self.tables = self._tables(hessian, jacobian)

  def _block(self, var: int) -> tuple[int, int]:
    """(stage, index within the stage's QP variables) of w[var]; stage N holds x_N and its slacks."""
    N, nz, nx = self.N, self.nz, self.nx
    if var < N * nz:
      return var // nz, var % nz
    if var < N * nz + nx:
      return N, var - N * nz
    e = var - N * nz - nx
    k = self.slack_stages[e]
    return k, (nz if k < N else nx) + self.slot[e]

  def _row(self, r: int) -> tuple[int, int] | None:
    """(stage, row within the stage's rows) of row r of g, or None for x_0 = x_init and the defects."""
    N, nx, nh, nhN = self.N, self.nx, self.nh, self.nhN
    ns = len(self.slack_stages)
    r -= nx * (N + 1)
    if r < 0:
      return None
    if r < N * nh:
      return r // nh, self.nz_qp + r % nh
    r -= N * nh
    if r < nhN:
      return N, self.nzN + r
    r -= nhN
    e, minus = r % ns, r // ns
    k = self.slack_stages[e]
    return k, (self.nz_qp + nh if k < N else self.nzN + nhN) + 2 * self.slot[e] + minus

  def _tables(self, hessian: Any, jacobian: Any) -> dict[str, tuple[int, ...]]:
    o, N, nx, nu = self.offsets, self.N, self.nx, self.nu
    nzq, nzN, mg = self.nz_qp, self.nzN, self.solver.shapes["G"][1]

    def h_at(k: int, i: int, j: int) -> int:
      return o["H"] + (k * nzq + i) * nzq + j if k < N else o["HN"] + i * nzN + j

    def g_at(k: int, m: int, j: int) -> int:
      return o["G"] + (k * mg + m) * nzq + j if k < N else o["GN"] + m * nzN + j

    def lo_at(k: int, m: int) -> int:
      return o["lo"] + k * mg + m if k < N else o["loN"] + m

    hess, mirror = [], []
    for r, c in _entries(hessian):
      (kr, ir), (kc, ic) = self._block(r), self._block(c)
      if kr != kc:
        raise ValueError("qp_solver='riccati': the Lagrangian Hessian couples two stages")
      hess.append(h_at(kr, ir, ic))
      mirror.append(h_at(kr, ic, ir) if ir != ic else -1)
    jac, sign = [], []
    for r, c in _entries(jacobian):
      k, j = self._block(c)
      offset, factor = -1, 0  # x_0 = x_init and the x_{k+1} of a defect: identity, implicit in the QP
      if nx <= r < nx * (N + 1) and k != (r - nx) // nx + 1:
        kd, i = (r - nx) // nx, (r - nx) % nx
        if k != kd or j >= nx + nu:
          raise ValueError("qp_solver='riccati': a defect depends on another stage than its own")
        offset, factor = o["A"] + (k * nx + i) * nx + j if j < nx else o["B"] + (k * nx + i) * (nzq - nx) + j - nx, -1
      elif (row := self._row(r)) is not None:
        if k != row[0]:
          raise ValueError(f"qp_solver='riccati': constraint row {r} depends on another stage than its own")
        offset, factor = g_at(row[0], row[1], j), 1
      jac.append(offset)
      sign.append(factor)
    blocks = [self._block(v) for v in range(self.nw)]
    diag = [h_at(k, i, i) for k, i in blocks]
    grad = [o["g"] + k * nzq + i if k < N else o["gN"] + i for k, i in blocks]
    so = self.solution_offsets
    primal = [so["x"] + k * nx + i if i < nx else (so["u"] + k * (nzq - nx) if k < N else so["uN"]) + i - nx
              for k, i in blocks]  # fmt: skip
    # rows of the QP [g rows; bounds on w]: where their lower bound goes (-1: not an inequality of the OCP QP)
    n_g = nx * (N + 1) + N * self.nh + self.nhN + 2 * len(self.slack_stages)
    lo = [-1 if (row := self._row(r)) is None else lo_at(*row) for r in range(n_g)]
    lo += [lo_at(k, i) for k, i in blocks]
    box = [g_at(k, i, i) for k in range(N) for i in range(nzq)] + [g_at(N, i, i) for i in range(nzN)]
    hi_shift = (o["hi"] - o["lo"], o["hiN"] - o["loN"])
    tables = {"ocp_hess": hess, "ocp_hess_mirror": mirror, "ocp_jac": jac, "ocp_jac_sign": sign, "ocp_diag": diag,
              "ocp_grad": grad, "ocp_lo": lo, "ocp_box": box, "ocp_hi_shift": list(hi_shift),
              "ocp_primal": primal}  # fmt: skip
    return {k: tuple(v) for k, v in tables.items()}


def _flat_offsets(shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, int], int]:
  """Offsets of consecutive fields of the given shapes in one flat array, and its size."""
  offsets, at = {}, 0
  for key, shape in shapes.items():
    offsets[key] = at
    at += int(np.prod(shape))
  return offsets, at


def _entries(matrix: Any) -> list[tuple[int, int]]:
  """(row, column) of every stored entry of a CSC matrix, in storage order."""
  cols = np.repeat(np.arange(matrix.shape[1]), np.diff(matrix.indptr))
  return [(int(r), int(c)) for r, c in zip(matrix.indices, cols, strict=True)]
