"""The sparse interior-point backend: general sparse QPs of one fixed pattern solved by a primal-dual interior point
whose Newton systems are the QP's KKT matrix with barrier weights, factored by QDLDL (from OSQP's sources) with the
fill-reducing order and the symbolic factorization computed here, at code generation (`ActiveSetKKT`); the C++ is
anvil/sparse_ipm.hpp, behind the QP contract."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from anvil.qp.backend import QPBackend
from anvil.qp.options import SparseIPMOptions
from anvil.qp.qdldl import UsesQDLDL


@dataclass(frozen=True)
class _SparseIPMContext:
  """What the sparse interior point's templates need."""

  name: str
  n: int
  m: int
  nnz_P: int
  nnz_A: int
  options: SparseIPMOptions
  buffers: tuple[tuple[str, str, int], ...]
  tables: tuple[tuple[str, tuple[int, ...]], ...]


class SparseIPMBackend(UsesQDLDL, QPBackend[SparseIPMOptions]):
  """QPs of one pattern solved by the sparse interior point behind the QP contract (anvil/sparse_ipm.hpp).

  Args:
    name: a C++ identifier: the namespace of the generated code.
    problem: the patterns of P (upper triangle; a diagonal it lacks is added to the KKT pattern) and A.
    options: SparseIPMOptions.
  """

  template = "sparse_ipm_backend"
  header_runtime = ("interior_point",)
  source_runtime = ("sparse_ipm",)

  @cached_property
  def context(self) -> _SparseIPMContext:
    """Sizes, options, the KKT system's buffers and tables, and P's pattern."""
    problem = self.problem
    p = problem.p_pattern
    tables = {**self.kkt.tables, "P_p": tuple(int(v) for v in p.indptr), "P_i": tuple(int(v) for v in p.indices)}
    n, m = problem.n, problem.m
    doubles = [("x", n), ("dx", n), ("r", n), ("z", m), ("y", m), ("magnitude", m), ("A_scaled", problem.a_pattern.nnz),
               ("row_scale", m), ("l_scaled", m), ("u_scaled", m), ("y_out", m)]  # fmt: skip
    buffers = (*self.kkt.buffers, *(("double", name, size) for name, size in doubles),
               ("anvil::qp::ipm::Row<double>", "rows", m), ("int", "live", m))  # fmt: skip
    return _SparseIPMContext(
      name=self.name, n=n, m=m, nnz_P=p.nnz, nnz_A=problem.a_pattern.nnz, options=self.options, buffers=buffers,
      tables=tuple(tables.items()),
    )  # fmt: skip
