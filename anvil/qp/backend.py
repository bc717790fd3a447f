"""The QP layer's one contract: `QPProblem`, the fixed structure of the QPs a solver is generated for, and
`QPBackend`, the base of every solver generated for one (OSQP, the Riccati interior point, the sparse interior point).

Every backend emits, in a C++ namespace of its name, `WS_t`/`init_ws()` in the module header and, in the source, a
type `Backend` meeting the C++ QP contract of anvil/qp.hpp: `reset`, `load(P, A, l, u, screen)`, `solve(q, l, u,
tol, warm)`, `primal`, `dual` and `iterations`, for min ½dᵀPd + qᵀd s.t. l ≤ Ad ≤ u with P's and A's patterns fixed.
The SQP loop calls only that contract (the C++ checks it at compile time), so any backend can serve any SQP.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
import scipy.sparse as sp

from anvil.codegen.base import check_identifier
from anvil.codegen.templated import TemplatedFunction
from anvil.qp.kkt import ActiveSetKKT
from anvil.qp.options import OSQPOptions, RiccatiOptions, SparseIPMOptions

if TYPE_CHECKING:
  from anvil.qp.stages import StageLayout

Options = TypeVar("Options", OSQPOptions, RiccatiOptions, SparseIPMOptions)


@dataclass(frozen=True)
class DerivativeSources:
  """Where an SQP's QP matrices come from: P = triu(H) + reg·I and A = [J; I], H (upper triangle) and J its Lagrangian
  Hessian and constraint Jacobian. A backend given them can load the QP from H, reg and J themselves (the Riccati
  backend's `load_derivatives`), so the SQP keeps no copy of P and A.

  Attributes:
    hess_to_P: for each stored entry of H, its position among P's stored entries.
    diag_P: for each variable, the position of its diagonal entry among P's.
    jac_to_A: for each stored entry of J, its position among A's stored entries.
  """

  hess_to_P: tuple[int, ...]
  diag_P: tuple[int, ...]
  jac_to_A: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class QPProblem:
  """The fixed structure of a family of QPs min ½dᵀPd + qᵀd s.t. l ≤ Ad ≤ u.

  Attributes:
    p_pattern: CSC pattern of P's upper triangle (with its full diagonal for a backend that polishes or screens).
    a_pattern: CSC pattern of A.
    stages: how the variables and rows sit in the stages of an optimal control problem (needed by the Riccati
      backend), or None.
    scalar: the type the QPs' data and solution are in, "float64" or "float32" (the Riccati backend only).
    sources: where P and A come from when they are an SQP's (`DerivativeSources`), or None.
  """

  p_pattern: sp.csc_array
  a_pattern: sp.csc_array
  stages: StageLayout | None = None
  scalar: str = "float64"
  sources: DerivativeSources | None = None

  def __post_init__(self) -> None:
    n = self.p_pattern.shape[0]
    if self.p_pattern.shape != (n, n) or self.a_pattern.shape[1] != n:
      raise ValueError(f"QPProblem: P is {self.p_pattern.shape} and A {self.a_pattern.shape}: expected n x n and m x n")
    cols = np.repeat(np.arange(n), np.diff(self.p_pattern.indptr))
    if np.any(self.p_pattern.indices > cols):
      raise ValueError("QPProblem: P's pattern must be an upper triangle")

  @property
  def n(self) -> int:
    """Variables."""
    return int(self.p_pattern.shape[0])

  @property
  def m(self) -> int:
    """Rows of A."""
    return int(self.a_pattern.shape[0])


class QPBackend(TemplatedFunction, Generic[Options]):
  """A QP solver generated as C++ for the patterns of one `QPProblem`, meeting the QP contract (module docstring).

  Args:
    name: a C++ identifier: the namespace of the generated code.
    problem: the patterns (and layout) of the QPs it solves.
    options: its solver's settings.
  """

  #: The scalar types the backend computes in (QPProblem.scalar).
  scalars: tuple[str, ...] = ("float64",)

  def __init__(self, name: str, problem: QPProblem, options: Options) -> None:
    self.name = check_identifier(name, f"{type(self).__name__} name")
    if problem.scalar not in self.scalars:
      raise ValueError(f"{self.name}: {type(self).__name__} solves QPs in {', '.join(self.scalars)}, not "
                       f"{problem.scalar!r}")  # fmt: skip
    self.problem: QPProblem = problem
    self.options: Options = options

  @cached_property
  def kkt(self) -> ActiveSetKKT:
    """The active-set KKT system of the problem's patterns (polish and convexity screening)."""
    return ActiveSetKKT(self.problem.p_pattern, self.problem.a_pattern)
