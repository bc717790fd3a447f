"""`SQPFunction`: a nonlinear program solved by generated C++ (an SQP loop) calling embedded OSQP for its QPs."""

from __future__ import annotations

import ctypes
import hashlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray
from tinygrad import Tensor

from anvil.ad import gradient, sphessian, spjacobian
from anvil.codegen import Arg, FunctionBase, NumericalFunction, SparseNumericalFunction
from anvil.codegen.base import check_identifier, render_template
from anvil.codegen.build import stage
from anvil.codegen.jit import cached_library, codegen_fingerprint, compile_library, library_key, load_library
from anvil.codegen.module import module_code
from anvil.sqp.options import STATUSES, SQPOptions
from anvil.sqp.osqp_code import RHO, EmbeddedOSQP
from anvil.sqp.polish import PolishKKT
from anvil.sqp.result import SQPResult

Fn = NumericalFunction[..., Any]
TEMPLATES = Path(__file__).parent / "templates"
HISTORY_NAMES = ("objective", "primal_infeasibility", "dual_infeasibility", "step", "regularization", "complementarity")
TIME_NAMES = ("time_evaluation", "time_qp_update", "time_qp_solve", "time_line_search")
FUNCTION_NAMES = ("cost", "cost_gradient", "constraints", "constraint_jacobian", "lagrangian_hessian")


@dataclass(frozen=True)
class _SolverContext:
  """What the SQP templates need."""

  name: str
  n: int
  m: int
  np: int
  f: str
  grad: str
  g: str
  jac: str
  hess: str
  jac_nnz: int
  hess_nnz: int
  p_nnz: int
  a_nnz: int
  prefix: str
  rho: float
  elastic_prefix: str
  ae_nnz: int
  options: SQPOptions
  tables: tuple[tuple[str, tuple[int, ...]], ...]
  dependencies: tuple[str, ...]
  vectors: tuple[tuple[str, int], ...]
  int_vectors: tuple[tuple[str, int], ...]
  k_size: int
  ocp: Any


def _xp_args(fn: Fn, what: str) -> tuple[int, int]:
  if not isinstance(fn, NumericalFunction) or len(fn.inputs) != 2 or len(fn.inputs[0].shape) != 1:
    raise TypeError(f"SQPFunction: {what} must be a NumericalFunction of (x, p) with x a vector")
  n, p = fn.inputs[0], fn.inputs[1]
  if len(p.shape) != 1:
    raise TypeError(f"SQPFunction: the parameter of {what} {fn.name} must be a vector (Arg(0) for none)")
  return n.shape[0], p.shape[0]


class SQPFunction(FunctionBase):
  """minimize f(x, p) subject to lbg ≤ g(x, p) ≤ ubg and lbx ≤ x ≤ ubx, solved by generated C++.

  The solver's C++ evaluates f, ∇f, g, the sparse ∂g/∂x and the sparse Lagrangian Hessian (its dependencies, emitted
  in the same module), regularizes the Hessian only when a QP is nonconvex, solves each QP with OSQP's own C code
  (embedded, the pattern fixed at code generation so each iteration only updates values and warm-starts), and takes
  steps by a backtracking filter line search (objective vs L1 violation, Wächter and Biegler); inconsistent linearized
  constraints fall back to an elastic QP.

  Args:
    name: a C++ identifier.
    cost: a NumericalFunction of (x, p) returning a scalar.
    constraints: a NumericalFunction of (x, p) returning a vector, or None.
    options: SQPOptions.
    hessian: optional Hessian approximation replacing the exact Lagrangian Hessian (e.g. Gauss-Newton): a
      SparseNumericalFunction of (x, p, sigma, λ) returning the upper triangle of an n x n matrix.
    structured_qp: optional factory (hessian, jacobian) -> a stage structure (anvil.mpc.riccati.OCPStructure) whose
      generated interior-point solver then solves the QPs instead of OSQP (which stays for the elastic fallback).

  Example:
    >>> f = NumericalFunction("f", lambda x, p: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2, (Arg(2), Arg(0)))
    >>> res = SQPFunction("rosen", f)(np.zeros(2), np.zeros(0), -np.inf * np.ones(2), np.inf * np.ones(2), [], [])
  """

  def __init__(
    self,
    name: str,
    cost: Fn,
    constraints: Fn | None = None,
    options: SQPOptions | None = None,
    *,
    hessian: SparseNumericalFunction | None = None,
    structured_qp: Callable[[SparseNumericalFunction, SparseNumericalFunction | None], Any] | None = None,
  ) -> None:
    self.name = check_identifier(name, "SQPFunction name")
    self.n, self.np = _xp_args(cost, "cost")
    if constraints is not None and _xp_args(constraints, "constraints") != (self.n, self.np):
      raise ValueError(f"{name}: cost and constraints must take the same x ({self.n}) and p ({self.np})")
    if options is not None and not isinstance(options, SQPOptions):
      raise TypeError(f"{name}: options must be SQPOptions, got {type(options).__name__}")
    self.options = options or SQPOptions()
    self.cost, self.constraints = cost, constraints
    self.gradient = gradient(cost, 0, name=f"{name}_cost_gradient")
    self._hessian = None if hessian is None else self._check_hessian(hessian)
    self._structured_qp = structured_qp

  def _check_hessian(self, hessian: SparseNumericalFunction) -> SparseNumericalFunction:
    expected = ((self.n,), (self.np,), (1,), (self.m,))
    if not isinstance(hessian, SparseNumericalFunction) or tuple(a.shape for a in hessian.inputs) != expected:
      raise TypeError(f"{self.name}: hessian must be a SparseNumericalFunction of (x, p, sigma, lam) shaped {expected}")
    rows = hessian.indices
    cols = np.repeat(np.arange(hessian.shape[1]), np.diff(hessian.indptr))
    if hessian.shape != (self.n, self.n) or np.any(rows > cols):
      raise ValueError(f"{self.name}: hessian must return the upper triangle of an {self.n}x{self.n} matrix")
    return hessian

  @cached_property
  def m(self) -> int:
    """Number of constraints."""
    return 0 if self.constraints is None else self.constraints.outputs[0].size

  @cached_property
  def jacobian(self) -> SparseNumericalFunction | None:
    """The sparse ∂g/∂x, or None without constraints."""
    return (
      None if self.constraints is None else spjacobian(self.constraints, 0, name=f"{self.name}_constraint_jacobian")
    )

  @cached_property
  def hessian(self) -> SparseNumericalFunction:
    """The upper triangle of the Hessian of sigma·f + λᵀg in x (or the approximation given), a function of
    (x, p, sigma, λ)."""
    if self._hessian is not None:
      return self._hessian
    cost, constraints = self.cost.fn, None if self.constraints is None else self.constraints.fn

    def lagrangian(x: Tensor, p: Tensor, sigma: Tensor, lam: Tensor) -> Tensor:
      value = sigma[0] * cost(x, p)
      return value if constraints is None else value + (constraints(x, p) * lam).sum()

    args = (Arg(self.n), Arg(self.np), Arg(1), Arg(self.m))
    return sphessian(
      NumericalFunction(f"{self.name}_lagrangian", lagrangian, args), 0, name=f"{self.name}_lagrangian_hessian"
    )

  @cached_property
  def ocp(self) -> Any:
    """The stage structure of the QPs when a structured QP solver is used, else None."""
    return None if self._structured_qp is None else self._structured_qp(self.hessian, self.jacobian)

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """f, ∇f, g, ∂g/∂x, the Lagrangian Hessian (and the structured QP solver)."""
    deps: list[FunctionBase] = [self.cost, self.gradient, self.hessian]
    if self.constraints is not None and self.jacobian is not None:
      deps[2:2] = [self.constraints, self.jacobian]
    if self.ocp is not None:
      deps.append(self.ocp.solver)
    return tuple(deps)

  @cached_property
  def _qp(self) -> tuple[EmbeddedOSQP, EmbeddedOSQP, dict[str, tuple[int, ...]]]:
    """The OSQP solvers for the fixed QP patterns, and the maps from derivative values into their matrices.

    P is the upper triangle of the Lagrangian Hessian plus the full diagonal (for regularization); A stacks ∂g/∂x on
    the identity (bounds on x are QP constraints). The elastic QP adds slacks v, w ≥ 0 to every constraint row
    (J d + v - w), so it is always feasible; its P and A extend the same patterns.
    """
    n, m = self.n, self.m
    hess = _pattern(self.hessian, (n, n))
    jac = sp.csc_array((m, n)) if self.jacobian is None else _pattern(self.jacobian, (m, n))
    eye, eye_m = sp.csc_array(sp.eye_array(n, format="csc")), sp.csc_array(sp.eye_array(m, format="csc"))
    zeros = lambda r, c: sp.csc_array((r, c))
    p_pattern = _sorted(sp.triu(hess + eye))
    a_pattern = _sorted(sp.vstack([jac, eye]))
    pe_pattern = _sorted(sp.block_diag([p_pattern, zeros(2 * m, 2 * m)]))
    slack = sp.csc_array(sp.vstack([sp.hstack([eye_m, -eye_m]), zeros(n, 2 * m), sp.eye_array(2 * m)]))
    ae_pattern = _sorted(sp.hstack([sp.vstack([jac, eye, zeros(2 * m, n)]), slack]))
    no_slack = zeros(3 * m + n, 2 * m)
    tables = {
      "hess_to_P": _positions(p_pattern, hess),
      "diag_P": _positions(p_pattern, eye),
      "jac_to_A": _positions(a_pattern, sp.vstack([jac, zeros(n, n)])),
      "eye_to_A": _positions(a_pattern, sp.vstack([zeros(m, n), eye])),
      "jac_to_Ae": _positions(ae_pattern, sp.hstack([sp.vstack([jac, zeros(n + 2 * m, n)]), no_slack])),
      "eye_to_Ae": _positions(ae_pattern, sp.hstack([sp.vstack([zeros(m, n), eye, zeros(2 * m, n)]), no_slack])),
      "slack_to_Ae": _positions(ae_pattern, sp.hstack([zeros(3 * m + n, n), slack])),
    }
    normal = EmbeddedOSQP(f"{self.name}_qp_", p_pattern, a_pattern, self.options)
    return normal, EmbeddedOSQP(f"{self.name}_elastic_", pe_pattern, ae_pattern, self.options), tables

  @cached_property
  def _context(self) -> _SolverContext:
    osqp, elastic, tables = self._qp
    kkt = PolishKKT(osqp.p_pattern, osqp.a_pattern)
    a = osqp.a_pattern
    tables = {**tables, **kkt.tables, "A_i": tuple(int(i) for i in a.indices), "A_p": tuple(int(i) for i in a.indptr)}
    if self.ocp is not None:  # the structured solver replaces the polish (which alone reads these two tables)
      tables = {k: v for k, v in tables.items() if k not in ("K_perm", "A_p")} | dict(self.ocp.tables)
    jac = self.jacobian
    n, m = self.n, self.m
    size, l_nnz = kkt.size, max(kkt.l_nnz, 1)
    polish_vectors = (("Kx", kkt.nnz), ("Lx", l_nnz), ("D", size), ("Dinv", size), ("fwork", size),
                      ("ksol", size), ("krhs", size), ("kres", size), ("polish_d", n), ("polish_y", m + n))  # fmt: skip
    int_vectors = (("Li", l_nnz), ("Lp", size + 1), ("Lnz", size), ("etree", size), ("iwork", 3 * size),
                   ("bwork", size), ("active", m + n), ("previous_active", m + n))  # fmt: skip
    vectors = (("grad", n), ("g", m), ("trial", n), ("g_trial", m), ("d", n), ("jac", 0 if jac is None else jac.nnz),
               ("hess", self.hessian.nnz), ("Px", osqp.p_pattern.nnz), ("Ax", osqp.a_pattern.nnz), ("l", m + n),
               ("u", m + n), ("lam_all", m + n), ("slack_values", 2 * m), ("Axe", elastic.a_pattern.nnz),
               ("qe", n + 2 * m), ("le", n + 3 * m), ("ue", n + 3 * m), ("filter_theta", self.options.max_iter + 1),
               ("filter_phi", self.options.max_iter + 1), ("rti_prepared", 1), ("rti_failure", 2), ("rti_times", 2),
               ("rti_regularization", 1), *polish_vectors)  # fmt: skip
    return _SolverContext(
      self.name, self.n, self.m, self.np, self.cost.name, self.gradient.name,
      "" if self.constraints is None else self.constraints.name, "" if jac is None else jac.name, self.hessian.name,
      0 if jac is None else jac.nnz, self.hessian.nnz, osqp.p_pattern.nnz, osqp.a_pattern.nnz, osqp.prefix, RHO,
      elastic.prefix, elastic.a_pattern.nnz,
      self.options, tuple((k, v) for k, v in tables.items()), tuple(d.name for d in self.dependencies()), vectors,
      int_vectors, size, self.ocp,
    )  # fmt: skip

  @property
  def header_code(self) -> str:
    """The solver's declarations: sizes, Stats, Workspace, init_ws() and call()."""
    return render_template("sqp.hpp.j2", folder=TEMPLATES, s=self._context)

  @property
  def source_code(self) -> str:
    """The SQP loop."""
    return render_template("sqp.cpp.j2", folder=TEMPLATES, s=self._context)

  @property
  def source_includes(self) -> tuple[str, ...]:
    """OSQP's public header and the generated OSQP workspace."""
    return (
      "<algorithm>",
      "<chrono>",
      "<cstddef>",
      "<cstdio>",
      '"osqp.h"',
      '"qdldl.h"',
      *(f'"{qp.prefix}workspace.h"' for qp in self._qp[:2]),
    )

  def extra_files(self) -> dict[str, str]:
    """OSQP's C sources and the generated workspace, written beside the module (compile the `.c` files as C with
    `-I` for `osqp`, `osqp/inc/public` and `osqp/inc/private`)."""
    return {**self._qp[0].files, **self._qp[1].files}

  # *** JIT ***

  def jit_wrapper(self, module: str, include_module: bool = True) -> str:
    """The JIT entry points (`anvil_<name>_ws_new/_ws_free/_call`) and the stats export a wrapper of this solver
    reuses; `include_module` adds the `#include` of the module source and the export macro."""
    return render_template(
      "sqp_jit.cpp.j2", folder=TEMPLATES, s=self._context, module=module, include_module=include_module
    )

  @property
  def qp_solvers(self) -> tuple[EmbeddedOSQP, ...]:
    """The embedded OSQP solvers (normal and elastic) whose C sources the module needs."""
    return self._qp[:2]

  @cached_property
  def library(self) -> str:
    """Path of the compiled solver library."""
    module = f"anvil_jit_{self.name}"
    return solver_library(self, module, self.jit_wrapper(module), self.qp_solvers)

  @cached_property
  def _entry(self) -> tuple[Any, ctypes.c_void_p]:
    lib = load_library(self.library)
    new, free, call = (
      lib[f"anvil_{self.name}_ws_new"],
      lib[f"anvil_{self.name}_ws_free"],
      lib[f"anvil_{self.name}_call"],
    )
    new.restype, new.argtypes = ctypes.c_void_p, []
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    call.restype = ctypes.c_int
    call.argtypes = [ctypes.c_void_p] * 7
    ws = ctypes.c_void_p(new())
    weakref.finalize(self, free, ws.value)
    return call, ws

  def __call__(
    self,
    x0: ArrayLike,
    p: ArrayLike,
    lbx: ArrayLike,
    ubx: ArrayLike,
    lbg: ArrayLike = (),
    ubg: ArrayLike = (),
    lam_g0: ArrayLike | None = None,
    lam_x0: ArrayLike | None = None,
  ) -> SQPResult:
    """Solve from x0 (optionally warm-starting the multipliers); ±inf bounds mean none."""
    n, m = self.n, self.m
    inputs = [self._vector("x0", x0, n, finite=True), self._vector("p", p, self.np, finite=True),
              self._vector("lbx", lbx, n), self._vector("ubx", ubx, n), self._vector("lbg", lbg, m),
              self._vector("ubg", ubg, m),
              np.zeros(m) if lam_g0 is None else self._vector("lam_g0", lam_g0, m, finite=True),
              np.zeros(n) if lam_x0 is None else self._vector("lam_x0", lam_x0, n, finite=True)]  # fmt: skip
    for lo, hi, what in ((inputs[2], inputs[3], "x"), (inputs[4], inputs[5], "g")):
      if np.any(lo > hi):
        i = int(np.argmax(lo > hi))
        raise ValueError(f"{self.name}: lb{what}[{i}] = {lo[i]} > ub{what}[{i}] = {hi[i]}")
    outs = [np.empty(n), np.empty(1), np.empty(m), np.empty(n)]
    (history, ihistory, info), scalars = self.stats_buffers(), np.zeros(5)
    call, ws = self._entry
    in_ptrs = (ctypes.c_void_p * 8)(*(a.ctypes.data for a in inputs))
    out_ptrs = (ctypes.c_void_p * 4)(*(a.ctypes.data for a in outs))
    call(in_ptrs, out_ptrs, history.ctypes.data, ihistory.ctypes.data, info.ctypes.data, scalars.ctypes.data, ws)
    return self._result(outs, history, ihistory, info, scalars[0], scalars[1:])

  def _vector(self, what: str, value: ArrayLike, size: int, finite: bool = False) -> NDArray[np.float64]:
    try:
      arr = np.ascontiguousarray(value, dtype=np.float64).reshape(-1) if np.size(value) else np.zeros(0)
    except (TypeError, ValueError) as e:
      raise TypeError(f"{self.name}: {what} must be a float vector: {e}") from None
    if arr.shape != (size,):
      raise ValueError(f"{self.name}: {what} must have length {size}, got {arr.size}")
    if np.any(np.isnan(arr)) or (finite and not np.all(np.isfinite(arr))):
      raise ValueError(f"{self.name}: {what} contains NaN{'' if not finite else ' or inf'}")
    return arr

  def _result(
    self,
    outs: list[NDArray[np.float64]],
    history: NDArray[np.float64],
    ihistory: NDArray[np.int32],
    info: NDArray[np.int32],
    worst_violation: float,
    times: NDArray[np.float64],
  ) -> SQPResult:
    iterations, status, stats = self.unpack_stats(history, ihistory, info, worst_violation, times)
    return SQPResult(outs[0], float(outs[1][0]), outs[2], outs[3], status, iterations, stats)

  def stats_buffers(self) -> tuple[NDArray[np.float64], NDArray[np.int32], NDArray[np.int32]]:
    """Fresh arrays the JIT export of Stats fills: history, ihistory and info."""
    rows = self.options.max_iter + 1
    return np.zeros((rows, 6)), np.zeros((rows, 2), dtype=np.int32), np.zeros(5, dtype=np.int32)

  def unpack_stats(
    self,
    history: NDArray[np.float64],
    ihistory: NDArray[np.int32],
    info: NDArray[np.int32],
    worst_violation: float,
    times: NDArray[np.float64],
  ) -> tuple[int, str, dict[str, Any]]:
    """(iterations, status, stats dict) from the arrays the JIT export of Stats filled (times: seconds spent in
    evaluations, QP updates, QP solves and the line search)."""
    iterations, status = int(info[0]), STATUSES[int(info[1])]
    rows = slice(0, iterations + 1)
    stats: dict[str, Any] = {name: history[rows, c].copy() for c, name in enumerate(HISTORY_NAMES)}
    stats["qp_iterations"], stats["qp_status"] = ihistory[rows, 0].copy(), ihistory[rows, 1].copy()
    for name, seconds in zip(TIME_NAMES, times, strict=True):
      stats[name] = float(seconds)
    if info[2] >= 0:
      stats["failed_function"] = self._function_name(int(info[2]))
      stats["failed_index"] = int(info[3])
      stats["message"] = f"{stats['failed_function']} returned NaN/inf at output {int(info[3])}"
    elif info[4] >= 0 and status != "converged":
      kind = "g" if info[4] < self.m else "x"
      index = int(info[4]) if info[4] < self.m else int(info[4]) - self.m
      stats["most_violated"] = (kind, index, worst_violation)
      stats["message"] = f"{status}: most violated constraint {kind}[{index}] by {worst_violation:.3e}"
    else:
      stats["message"] = status
    return iterations, status, stats

  def _function_name(self, which: int) -> str:
    return {0: self.cost.name, 1: self.gradient.name, 2: getattr(self.constraints, "name", ""),
            3: getattr(self.jacobian, "name", ""), 4: self.hessian.name}[which]  # fmt: skip


def solver_library(fn: FunctionBase, module: str, wrapper: str, qps: tuple[EmbeddedOSQP, ...]) -> str:
  """Compile (or find in the cache) the JIT library of a solver module: `fn` and its dependencies, the `wrapper`
  holding its entry points (it includes `<module>.cpp`), and the C sources of the embedded QP solvers `qps`."""
  code = module_code(module, [fn])
  sources = {f"{module}.hpp": code.header, f"{module}.cpp": code.source, "jit.cpp": wrapper}
  for qp in qps:
    sources.update(qp.files)
  digest = hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in sorted(sources.items())).encode()).hexdigest()
  key = library_key(f"solver|{codegen_fingerprint()}|{digest}")
  if (path := cached_library(key)) is not None:
    return str(path)
  with stage(fn.name, "compile"):
    c_sources = sorted({c for qp in qps for c in qp.c_sources})
    return str(compile_library(key, sources, "jit.cpp", fn.name, c_sources, qps[0].include_dirs if qps else []))


def _pattern(fn: SparseNumericalFunction, shape: tuple[int, int]) -> sp.csc_array:
  return sp.csc_array((np.ones(fn.nnz), fn.indices, fn.indptr), shape=shape)


def _sorted(m: Any) -> sp.csc_array:
  m = sp.csc_array(m)
  m.sum_duplicates()
  m.sort_indices()
  return m


def _positions(pattern: sp.csc_array, part: Any) -> tuple[int, ...]:
  """For each stored entry of `part` (CSC order), its position among the stored entries of `pattern`."""
  index = {}
  for c in range(pattern.shape[1]):
    for k in range(pattern.indptr[c], pattern.indptr[c + 1]):
      index[(int(pattern.indices[k]), c)] = k
  part = sp.csc_array(part)
  cols = np.repeat(np.arange(part.shape[1]), np.diff(part.indptr))
  return tuple(index[(int(r), int(c))] for r, c in zip(part.indices, cols, strict=True))
