"""`RiccatiQP`: a generated interior-point solver for QPs with the stage structure of an optimal control problem.

minimize Σ_k ½ z_kᵀH_k z_k + g_kᵀz_k + ½ x_NᵀH_N x_N + g_Nᵀx_N over z_k = [x_k; u_k], subject to x_0 = x0,
x_{k+1} = A_k x_k + B_k u_k + c_k, lo_k ≤ G_k z_k ≤ hi_k (k < N) and loN ≤ G_N x_N ≤ hiN. Mehrotra's predictor-
corrector interior point; each Newton system is an LQ problem solved by a Riccati recursion over the stages (factored
once per iteration, O(N (nx + nu)³)), sizes fixed at code generation (riccati-notes.md).
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
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
  max_iter: int


@dataclass(frozen=True)
class OCPQPSolution:
  """What `RiccatiQP` returns: x (N + 1, nx), u (N, nu), pi (N, nx) (multipliers of the dynamics), lam (N, ng) and
  lamN (ngN,) (inequality multipliers, positive at an active upper bound), status, iterations, the final residuals
  (stationarity, equality, inequality, complementarity) and the solve time in seconds (measured in the C++)."""

  x: F64
  u: F64
  pi: F64
  lam: F64
  lamN: F64
  status: str
  iterations: int
  residuals: tuple[float, float, float, float]
  solve_time: float


class RiccatiQP(FunctionBase):
  """An OCP-structured QP solver generated as C++ for fixed sizes (nx, nu, N, ng rows per stage, ngN at the end).

  Args:
    name: a C++ identifier.
    nx, nu, N, ng, ngN: state, input, horizon and inequality-row counts.
    max_iter: interior-point iteration limit.

  Example:
    >>> qp = RiccatiQP("qp", nx=4, nu=1, N=30, ng=5, ngN=4)
    >>> sol = qp(H=H, g=g, HN=HN, gN=gN, A=A, B=B, c=c, x0=x0, G=G, lo=lo, hi=hi, GN=GN, loN=loN, hiN=hiN)
  """

  FIELDS = ("H", "g", "HN", "gN", "A", "B", "c", "x0", "G", "lo", "hi", "GN", "loN", "hiN")

  def __init__(self, name: str, nx: int, nu: int, N: int, ng: int = 0, ngN: int = 0, max_iter: int = 50) -> None:
    self.name = check_identifier(name, "RiccatiQP name")
    for what, value, least in (("nx", nx, 1), ("nu", nu, 1), ("N", N, 1), ("ng", ng, 0), ("ngN", ngN, 0),
                               ("max_iter", max_iter, 1)):  # fmt: skip
      if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"RiccatiQP({name}): {what} must be an int >= {least}, got {value!r}")
    self.nx, self.nu, self.N, self.ng, self.ngN, self.max_iter = nx, nu, N, ng, ngN, max_iter

  @property
  def shapes(self) -> dict[str, tuple[int, ...]]:
    """The shape of each data field (rows of G/GN at least 1, as stored)."""
    nx, nu, N, nz = self.nx, self.nu, self.N, self.nx + self.nu
    mg, mgN = max(self.ng, 1), max(self.ngN, 1)
    return {"H": (N, nz, nz), "g": (N, nz), "HN": (nx, nx), "gN": (nx,), "A": (N, nx, nx), "B": (N, nx, nu),
            "c": (N, nx), "x0": (nx,), "G": (N, mg, nz), "lo": (N, mg), "hi": (N, mg), "GN": (mgN, nx),
            "loN": (mgN,), "hiN": (mgN,)}  # fmt: skip

  @cached_property
  def _context(self) -> _QPContext:
    return _QPContext(self.name, self.nx, self.nu, self.N, self.ng, self.ngN, self.max_iter)

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
    for field in self.FIELDS:
      absent = field not in data or np.size(data[field]) == 0
      if absent and (
        (field in ("G", "lo", "hi") and self.ng == 0) or (field in ("GN", "loN", "hiN") and self.ngN == 0)
      ):
        value: Any = np.zeros(shapes[field]) if field in ("G", "GN") else np.full(shapes[field], np.inf)
      elif field not in data:
        raise TypeError(f"{self.name}: missing data field {field!r}")
      else:
        value = np.asarray(data[field], dtype=np.float64)
      if value.shape != shapes[field]:
        raise ValueError(f"{self.name}: {field} must have shape {shapes[field]}, got {value.shape}")
      if np.any(np.isnan(value)):
        raise ValueError(f"{self.name}: {field} contains NaN")
      if field in ("H", "HN"):  # only the symmetric part enters ½ zᵀHz
        value = 0.5 * (value + np.swapaxes(value, -1, -2))
      parts.append(np.clip(value, -1e30, 1e30).reshape(-1))
    flat = np.ascontiguousarray(np.concatenate(parts))
    nx, nu, N = self.nx, self.nu, self.N
    sizes = ((N + 1) * nx, N * nu, N * nx, N * max(self.ng, 1), max(self.ngN, 1), 5)
    out, info = np.zeros(sum(sizes)), np.zeros(2, dtype=np.int32)
    solve, ws = self._entry
    solve(flat.ctypes.data, float(tol), int(bool(warm_start)), out.ctypes.data, info.ctypes.data, ws)
    x, u, pi, lam, lamN, res = np.split(out, np.cumsum(sizes)[:-1])
    residuals = (float(res[0]), float(res[1]), float(res[2]), float(res[3]))
    lam = lam.reshape(N, -1)[:, : self.ng]
    status = QP_STATUSES[int(info[0])]
    return OCPQPSolution(x.reshape(N + 1, nx), u.reshape(N, nu), pi.reshape(N, nx), lam, lamN[: self.ngN], status,
                         int(info[1]), residuals, float(res[4]))  # fmt: skip


class OCPStructure:
  """How the multiple-shooting NLP's QP maps onto `RiccatiQP`'s stage blocks: index tables (into `Data` viewed as one
  flat double array) for every Hessian, Jacobian, gradient and bound entry the SQP loop produces, so its C++ fills
  the structured QP by table lookups and maps the solution (steps and multipliers) back.

  Layout (anvil.mpc.transcription): w = [x_0, u_0, ..., x_{N-1}, u_{N-1}, x_N]; g = [x_0 - x_init (nx); defects
  x_{k+1} - F_k (N nx); h_k (N nh); h_N (nhN)]. Stage k's inequality rows are its nz box rows then its nh path
  constraints; stage N's are nx box rows then nhN terminal constraints. Soft constraints (slacks) are not stage-local
  in this layout and are not supported here.
  """

  def __init__(self, name: str, N: int, nx: int, nu: int, nh: int, nhN: int, hessian: Any, jacobian: Any) -> None:
    self.N, self.nx, self.nu, self.nh, self.nhN = N, nx, nu, nh, nhN
    self.nz = nz = nx + nu
    self.nw, self.ng = N * nz + nx, nx * (N + 1) + N * nh + nhN
    self.solver = RiccatiQP(f"{name}_ocp_qp", nx, nu, N, ng=nz + nh, ngN=nx + nhN, max_iter=60)
    shapes = self.solver.shapes
    offsets, at = {}, 0
    for field in RiccatiQP.FIELDS:
      offsets[field] = at
      at += int(np.prod(shapes[field]))
    self.offsets, self.data_size = offsets, at
    self.tables = self._tables(hessian, jacobian, shapes)

  def _block(self, var: int) -> tuple[int, int]:
    """(stage, index within the stage's z) of variable var; stage N is x_N."""
    return (var // self.nz, var % self.nz) if var < self.N * self.nz else (self.N, var - self.N * self.nz)

  def _tables(self, hessian: Any, jacobian: Any, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    o, N, nx, nz, nh, nhN = self.offsets, self.N, self.nx, self.nz, self.nh, self.nhN
    mg = shapes["G"][1]

    def h_at(k: int, i: int, j: int) -> int:
      return o["H"] + (k * nz + i) * nz + j if k < N else o["HN"] + i * nx + j

    hess, mirror = [], []
    cols = np.repeat(np.arange(hessian.shape[1]), np.diff(hessian.indptr))
    for r, c in zip(hessian.indices, cols, strict=True):
      (kr, ir), (kc, ic) = self._block(int(r)), self._block(int(c))
      if kr != kc:
        raise ValueError("qp_solver='riccati': the Lagrangian Hessian couples two stages")
      hess.append(h_at(kr, ir, ic))
      mirror.append(h_at(kr, ic, ir) if ir != ic else -1)
    jac, sign = [], []
    cols = np.repeat(np.arange(jacobian.shape[1]), np.diff(jacobian.indptr))
    for r, c in zip(jacobian.indices, cols, strict=True):
      k, j = self._block(int(c))
      r = int(r)
      if r < nx or (r < nx * (N + 1) and k == (r - nx) // nx + 1):
        offset, factor = -1, 0  # x_0 = x_init and the x_{k+1} of a defect: identity, implicit in the QP
      elif r < nx * (N + 1):
        kd, i = (r - nx) // nx, (r - nx) % nx
        if k != kd:
          raise ValueError("qp_solver='riccati': a defect depends on another stage than its own")
        offset, factor = o["A"] + (k * nx + i) * nx + j if j < nx else o["B"] + (k * nx + i) * self.nu + j - nx, -1
      elif r < nx * (N + 1) + N * nh:
        kh, m = (r - nx * (N + 1)) // nh, (r - nx * (N + 1)) % nh
        if k != kh:
          raise ValueError("qp_solver='riccati': a path constraint depends on another stage than its own")
        offset, factor = o["G"] + (k * mg + nz + m) * nz + j, 1
      else:
        m = r - nx * (N + 1) - N * nh
        if k != N:
          raise ValueError("qp_solver='riccati': a terminal constraint depends on more than x_N")
        offset, factor = o["GN"] + (nx + m) * nx + j, 1
      jac.append(offset)
      sign.append(factor)
    diag = [h_at(*self._block(v), self._block(v)[1]) for v in range(self.nw)]
    grad = [o["g"] + k * nz + i if k < N else o["gN"] + i for k, i in map(self._block, range(self.nw))]
    # bound rows of the QP [g rows; bounds on w]: where their lower bound goes (-1: not an inequality of the OCP QP)
    lo = [-1] * (nx * (N + 1))
    lo += [o["lo"] + k * mg + nz + m for k in range(N) for m in range(nh)]
    lo += [o["loN"] + nx + m for m in range(nhN)]
    lo += [o["lo"] + k * mg + i if k < N else o["loN"] + i for k, i in map(self._block, range(self.nw))]
    box = [o["G"] + (k * mg + i) * nz + i for k in range(N) for i in range(nz)]
    box += [o["GN"] + i * nx + i for i in range(nx)]
    hi_shift = (o["hi"] - o["lo"], o["hiN"] - o["loN"])
    tables = {"ocp_hess": hess, "ocp_hess_mirror": mirror, "ocp_jac": jac, "ocp_jac_sign": sign, "ocp_diag": diag,
              "ocp_grad": grad, "ocp_lo": lo, "ocp_box": box, "ocp_hi_shift": list(hi_shift)}  # fmt: skip
    return {k: tuple(v) for k, v in tables.items()}
