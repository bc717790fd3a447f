"""The settings of each QP solver: `OSQPOptions`, `RiccatiOptions` and `SparseIPMOptions`, frozen and checked field
by field: plain data (`anvil.qp.registry` builds each solver's backend from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
  pass


def check_positive(owner: str, field: str, value: object, at_most: float | None = None) -> None:
  """Raise ValueError unless value is a positive number (not above at_most)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
    raise ValueError(f"{owner}.{field}: expected a positive number, got {value!r}")
  if at_most is not None and not value <= at_most:
    raise ValueError(f"{owner}.{field}: expected a number in (0, {at_most:g}], got {value!r}")


def check_int(owner: str, field: str, value: object, least: int = 1) -> None:
  """Raise ValueError unless value is an int >= least (bools are not ints here)."""
  if isinstance(value, bool) or not isinstance(value, int) or value < least:
    raise ValueError(f"{owner}.{field}: expected an int >= {least}, got {value!r}")


def check_bool(owner: str, field: str, value: object) -> None:
  """Raise TypeError unless value is a bool."""
  if not isinstance(value, bool):
    raise TypeError(f"{owner}.{field}: expected a bool, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class OSQPOptions:
  """OSQP's own C code, embedded for the QP's fixed pattern: ADMM, then (with polish) an exact active-set solve.

  A QP solver of `SQPFunction` (`SQPOptions(qp=OSQPOptions())`); also the solver of its elastic QPs unless it uses
  an interior point.

  Example:
    >>> SQPOptions(qp=OSQPOptions(eps_abs=1e-8, eps_rel=1e-8))
  """

  solver: ClassVar[str] = "osqp"
  """The solver's name, as `SQPResult.stats["qp_solver"]` reports it."""
  eps_abs: float = 1e-10
  """Absolute tolerance ADMM runs to at the end (each QP first goes only as far as the SQP's progress asks)."""
  eps_rel: float = 1e-10
  """Relative tolerance ADMM runs to at the end."""
  max_iter: int = 20000
  """ADMM iteration limit per QP."""
  polish: bool = True
  """Guess the active set from the ADMM iterate and solve its KKT system directly (QDLDL), which makes the solution
  exact long before ADMM would be; also screens each QP's convexity (an inertia test) before ADMM starts."""

  def __post_init__(self) -> None:
    check_positive("OSQPOptions", "eps_abs", self.eps_abs)
    check_positive("OSQPOptions", "eps_rel", self.eps_rel)
    check_int("OSQPOptions", "max_iter", self.max_iter)
    check_bool("OSQPOptions", "polish", self.polish)


@dataclass(frozen=True, kw_only=True)
class InteriorPointOptions:
  """What every interior-point QP solver of anvil takes (the base of RiccatiOptions and SparseIPMOptions)."""

  max_iter: int = 60
  """Interior-point iteration limit per QP."""
  tol_min: float = 1e-12
  """The tightest tolerance a QP is solved to (each asks for e min(1e-2, e) of the SQP's KKT error e, at least a tenth
  of the SQP's tolerance, kept within [tol_min, 1e-6])."""

  def __post_init__(self) -> None:
    check_int(type(self).__name__, "max_iter", self.max_iter)
    check_positive(type(self).__name__, "tol_min", self.tol_min, at_most=1e-6)


@dataclass(frozen=True, kw_only=True)
class RiccatiOptions(InteriorPointOptions):
  """The stage-structured interior point (Mehrotra predictor-corrector, a Riccati recursion per Newton system) for
  QPs with the layout of an optimal control problem: the default QP solver of `MPCFunction`.

  Example:
    >>> MPCOptions(qp=RiccatiOptions(max_iter=40))
    >>> MPCOptions(qp=RiccatiOptions(condensing=4))  # blocks of 4 stages
  """

  solver: ClassVar[str] = "riccati"
  """The solver's name, as `SQPResult.stats["qp_solver"]` reports it."""
  condensing: int | str = 1
  """Partial condensing of the stage QPs: stages per block, or "auto": the block size that
  `anvil.qp.riccati.auto_condensing`'s cost model predicts fastest for warm-started QPs (WARM_ITERATIONS interior-point
  iterations a solve). 1 (none) by default: an MPC's QPs start warm and take few iterations, which repay the
  condensing only where nx is large against nu (blocks then cost fewer operations per iteration than the stages they
  replace); cold solves of many iterations gain more."""

  def __post_init__(self) -> None:
    super().__post_init__()
    if self.condensing != "auto":
      check_int("RiccatiOptions", "condensing", self.condensing)


@dataclass(frozen=True, kw_only=True)
class SparseIPMOptions(InteriorPointOptions):
  """A primal-dual interior point (Mehrotra predictor-corrector) for general sparse QPs: each Newton system is the
  QP's KKT matrix with barrier weights, factored by QDLDL with the fill-reducing order and the symbolic factorization
  fixed when the code is generated. The default QP solver of `SQPFunction`, also of its elastic QPs.

  Example:
    >>> SQPOptions(qp=SparseIPMOptions(max_iter=80))
  """

  solver: ClassVar[str] = "sparse_ipm"
  """The solver's name, as `SQPResult.stats["qp_solver"]` reports it."""
  max_iter: int = 100
  """Interior-point iteration limit per QP."""


#: The settings of any QP solver.
QPOptions = OSQPOptions | RiccatiOptions | SparseIPMOptions
