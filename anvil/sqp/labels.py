"""`NLPLabels`: the items of a nonlinear program named as the user declared them, for the messages of a solve.

A solve reports its diagnostics by index: the function that returned NaN/inf and the output entry, the most violated
constraint (a row of g, or a bound on x) and its value. Labels turn them into sentences in the user's terms; an
`MPCFunction` names the same indices by stage, state, input and model function (anvil.mpc.labels). Index maps are
built once, in Python, and only a failed or inexact solve pays for a message.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
  from anvil.sqp.nlp import NLP


class NLPLabels:
  """Names the functions, constraint rows and variables of an `SQPFunction`'s NLP.

  Subclasses rename rows (`row`, `row_function`) and variables (`variable`); the sentences are built here.
  """

  def __init__(self, nlp: NLP) -> None:
    self.nlp = nlp

  @property
  def m(self) -> int:
    """The number of constraint rows."""
    return self.nlp.m

  def row(self, i: int) -> tuple[str, str]:
    """(the group, the row) of constraint row i, for a violation: ("constraints", "row 3 of g")."""
    return "constraints", f"row {i} of {getattr(self.nlp.constraints, 'name', 'g')}"

  def row_function(self, i: int) -> tuple[str, str]:
    """(the function, where in its output) of constraint row i, for a NaN/inf: ("constraints g", "row 3")."""
    return f"constraints {getattr(self.nlp.constraints, 'name', 'g')}", f"row {i}"

  def variable(self, j: int) -> tuple[str, str]:
    """(the bounds' name, the variable) of x[j]: ("lbx/ubx", "x[3]")."""
    return "lbx/ubx", f"x[{j}]"

  @cached_property
  def _jacobian_entries(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(row, column) of each stored entry of ∂g/∂x."""
    jac = self.nlp.jacobian
    if jac is None:
      return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.asarray(jac.indices), np.repeat(np.arange(jac.shape[1]), np.diff(jac.indptr))

  @cached_property
  def _hessian_entries(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    hess = self.nlp.hessian
    return np.asarray(hess.indices), np.repeat(np.arange(hess.shape[1]), np.diff(hess.indptr))

  def failure(self, which: int, index: int) -> str:
    """The sentence for a NaN/inf from function `which` (anvil::sqp::Evaluated) at output entry `index`."""
    cost = self.nlp.cost.name
    if which == 0:
      return f"the cost {cost} returned NaN/inf"
    if which == 1:
      return f"the gradient of the cost {cost} returned NaN/inf in {self.variable(index)[1]}"
    if which == 2:
      what, where = self.row_function(index)
      return f"{what} returned NaN/inf at {where}"
    rows, cols = self._jacobian_entries if which == 3 else self._hessian_entries
    r, c = int(rows[index]), int(cols[index])
    if which == 3:
      what, where = self.row_function(r)
      return f"the derivative of {what} returned NaN/inf at {where}, in {self.variable(c)[1]}"
    return f"the Hessian of the Lagrangian returned NaN/inf in ({self.variable(r)[1]}, {self.variable(c)[1]})"

  def bound(self, j: int, value: float, bounds: Any) -> tuple[str, float]:
    """The side ("lower" or "upper") and value of the bound on x[j] that `value` violates; `bounds` as passed to
    `violation`: here (lbx, ubx, lbg, ubg)."""
    lbx, ubx = bounds[0], bounds[1]
    return ("upper", float(ubx[j])) if value > ubx[j] else ("lower", float(lbx[j]))

  def violation(self, index: int, amount: float, value: float, bounds: Any) -> str:
    """The sentence for the most violated constraint: row `index` of g (index < m), else the bound on x[index - m];
    `value` is g's row or x's entry there; `bounds` are the call's (see `bound`)."""
    m = self.m
    if index < m:
      group, where = self.row(index)
      return f"{group}: {where} violated by {amount:.3g}"
    group, name = self.variable(index - m)
    side, bound = self.bound(index - m, value, bounds)
    return f"{group}: {name} is {value:.6g}, {side} bound {bound:.6g}"
