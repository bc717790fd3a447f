"""`StatsReader`: what reading one call of a generated SQP solver needs (its limits checked, its Stats arrays
unpacked into a status and a stats dict), from the options and sizes alone: an `MPCFunction` loaded from the cache
reads its calls without building its NLP's derivatives."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from anvil.qp import QPOptions, QPStatus, RiccatiOptions, SparseIPMOptions
from anvil.sqp.boundary import HISTORY_COLUMNS, IHISTORY_COLUMNS
from anvil.sqp.options import SQPOptions
from anvil.sqp.result import SUCCESS, SQPStatus

if TYPE_CHECKING:
  from anvil.sqp.labels import NLPLabels

TIME_NAMES = ("time_evaluation", "time_qp_update", "time_qp_solve", "time_line_search")
PRIMAL, DUAL = HISTORY_COLUMNS.index("primal_infeasibility"), HISTORY_COLUMNS.index("dual_infeasibility")
# NOTE: unpacking runs on every MPC call from Python: statuses by their C++ codes, looked up once
SQP_CODES, QP_CODES = SQPStatus.codes(), QPStatus.codes()


def qp_options(options: SQPOptions, staged: bool) -> QPOptions:
  """The options of the QP solver an SQP solver uses: `options.qp`, else RiccatiOptions() with a stage layout
  (`staged`) and SparseIPMOptions() without."""
  return options.qp or (RiccatiOptions() if staged else SparseIPMOptions())


def elastic_options(options: SQPOptions, staged: bool) -> QPOptions | None:
  """The options of the solver of the elastic QPs, or None where the QP solver solves them itself: with a stage
  layout the Riccati interior point; without one the sparse interior point where it solves the QPs, else OSQP,
  unpolished (polishing needs P's full diagonal in its pattern, which the slacks' columns do not have)."""
  qp = qp_options(options, staged)
  if staged:
    return None if isinstance(qp, RiccatiOptions) else RiccatiOptions()
  return qp if isinstance(qp, SparseIPMOptions) else dataclasses.replace(options.osqp, polish=False)


class Limits(NamedTuple):
  """One call's limits, as the boundary structs' first fields (anvil/sqp/boundary.py LIMITS) name them."""

  max_iter: int
  tol: float
  max_time: float


@dataclass(frozen=True)
class StatsReader:
  """Checks a call's limits and unpacks the arrays its Stats filled, for the SQP solver `name`.

  Attributes:
    name: the solver's name, for messages.
    options: its options.
    m: its number of constraint rows (a violation's index past them is a bound's).
    staged: whether its QPs have a stage layout (which QP solvers it reports).
    function_name: the name of the function of code `which` (anvil::sqp::Evaluated) that returned NaN/inf.
  """

  name: str
  options: SQPOptions
  m: int
  staged: bool
  function_name: Callable[[int], str]

  @cached_property
  def qp_solvers(self) -> tuple[str, str]:
    """The names of the solvers of its QPs and of its elastic QPs, as stats["qp_solver"] and ["elastic_qp_solver"]
    report them (found once: every MPC call reports them)."""
    qp = qp_options(self.options, self.staged)
    return qp.solver, (elastic_options(self.options, self.staged) or qp).solver

  def buffers(self) -> tuple[NDArray[np.float64], NDArray[np.int32]]:
    """Fresh arrays the JIT export of Stats fills: the history's double columns and its int ones, row by row."""
    rows = self.options.max_iter + 1
    return np.zeros((rows, len(HISTORY_COLUMNS))), np.zeros((rows, len(IHISTORY_COLUMNS)), dtype=np.int32)

  def limits(self, max_iter: int | None, tol: float | None, max_time: float | None) -> Limits:
    """The limits of one call: the options' where None, checked."""
    options = self.options
    if max_iter is not None and (isinstance(max_iter, bool) or not isinstance(max_iter, int)
                                 or not 0 <= max_iter <= options.max_iter):  # fmt: skip
      raise ValueError(f"{self.name}: max_iter must be an int in [0, {options.max_iter}] (the options' max_iter, "
                       f"the size of the history), got {max_iter!r}")  # fmt: skip
    for what, value in (("tol", tol), ("max_time", max_time)):
      if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"{self.name}: {what} must be a positive number, got {value!r}")
    return Limits(options.max_iter if max_iter is None else max_iter, float(options.tol if tol is None else tol),
                  float(options.max_time if max_time is None else max_time))  # fmt: skip

  def unpack(self, history: NDArray[np.float64], ihistory: NDArray[np.int32], scalars: Any, bounds: Any,
             labels: NLPLabels) -> tuple[int, SQPStatus, dict[str, Any]]:  # fmt: skip
    """(iterations, status, stats dict) from what the JIT export of Stats filled: the history's columns
    (anvil.sqp.boundary's HISTORY_COLUMNS, IHISTORY_COLUMNS) and the SQPScalars `scalars`; `labels` word the message,
    with the call's `bounds` (for an NLP: lbx, ubx, lbg, ubg)."""
    iterations, status = int(scalars.iterations), SQP_CODES[int(scalars.status)]
    # NOTE: one copy of each history, its columns rows of it (an MPC call unpacks them every sample)
    stats: dict[str, Any] = dict(zip(HISTORY_COLUMNS, history[: iterations + 1].T.copy(), strict=True))
    qp_iterations, qp_codes, restoration = ihistory[: iterations + 1].T.copy()
    stats["qp_iterations"] = qp_iterations
    stats["qp_status"] = tuple([QP_CODES[code] for code in qp_codes.tolist()])
    stats["restoration"] = restoration.astype(bool)
    stats["qp_solver"], stats["elastic_qp_solver"] = self.qp_solvers
    stats.update((name, float(getattr(scalars, name))) for name in TIME_NAMES)
    if (failed := int(scalars.failed_function)) >= 0:
      stats["failed_function"] = self.function_name(failed)
      stats["failed_index"] = int(scalars.failed_index)
      stats["message"] = f"{status}: {labels.failure(failed, int(scalars.failed_index))}"
    elif status not in SUCCESS:
      stats["message"] = self._diagnosis(status, iterations, history, scalars, bounds, labels, stats)
    else:
      stats["message"] = str(status)
    return iterations, status, stats

  def _diagnosis(self, status: SQPStatus, iterations: int, history: NDArray[np.float64], scalars: Any, bounds: Any,
                 labels: NLPLabels, stats: dict[str, Any]) -> str:  # fmt: skip
    """The message of an unsuccessful call: the most violated constraint (stats["most_violated"]), or the KKT
    residuals where none is violated beyond the tolerance (rounding is no diagnosis)."""
    residuals = (f"primal infeasibility {history[iterations, PRIMAL]:.3g}, dual infeasibility "
                 f"{history[iterations, DUAL]:.3g}")  # fmt: skip
    worst, violation = int(scalars.worst_constraint), float(scalars.worst_violation)
    if worst < 0 or violation <= self.options.tol:
      return f"{status}: {residuals}"
    kind, index = ("g", worst) if worst < self.m else ("x", worst - self.m)
    stats["most_violated"] = (kind, index, violation)
    sentence = labels.violation(worst, violation, float(scalars.worst_value), bounds)
    return f"{status}: {sentence}" + ("" if status == SQPStatus.infeasible else f" ({residuals})")
