"""`LeastSquares`: a cost given as a weighted residual, ‖r‖²_W = rᵀ W r, which admits a Gauss-Newton Hessian."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from tinygrad import Tensor

from anvil.codegen import NumericalFunction
from anvil.validation import float_array


@dataclass(frozen=True, eq=False)
class LeastSquares:
  """A stage or terminal cost rᵀ W r with residual r = `residual(x, u[, p])` (stage) or `residual(x[, p])`.

  With `MPCOptions(hessian="gauss_newton")` the cost's Hessian is approximated by 2 Jᵀ W J (J = ∂r/∂(x, u)) and the
  constraints' curvature is dropped, as acados does for its NONLINEAR_LS costs.

  Args:
    residual: a NumericalFunction returning a vector r of length nr.
    weight: an nr x nr symmetric positive semidefinite matrix (or a length-nr vector: its diagonal).
    pattern: the entries of W a call may set at run time (`weights=`), an nr x nr boolean matrix; default the
      weight's nonzeros and its diagonal. The generated cost reads W only there, so the NLP's Hessian keeps the
      structure of the residual's (a diagonal W does not couple the residual's components: fewer Hessian entries,
      fewer colors to compute them); a run-time weight with nonzeros elsewhere is refused.

  Example:
    >>> r = NumericalFunction("r", lambda x, u: x.cat(u), (Arg(4), Arg(1)))
    >>> LeastSquares(r, np.array([1.0, 1.0, 0.1, 0.1, 0.01]))     # the P2 stage cost
  """

  residual: NumericalFunction[..., Any]
  weight: NDArray[np.float64] = field(repr=False)
  pattern: NDArray[np.bool_] = field(repr=False)

  def __init__(
    self, residual: NumericalFunction[..., Any], weight: ArrayLike, pattern: ArrayLike | None = None
  ) -> None:
    if not isinstance(residual, NumericalFunction) or len(residual.outputs) != 1:
      raise TypeError("LeastSquares: residual must be a NumericalFunction returning one vector")
    if len(residual.outputs[0].shape) != 1:
      raise ValueError(f"LeastSquares({residual.name}): the residual must be a vector, got {residual.outputs[0].shape}")
    object.__setattr__(self, "residual", residual)
    nr = residual.outputs[0].size
    w = checked_weight(f"LeastSquares({residual.name})", weight, nr)
    object.__setattr__(self, "weight", w)
    mask = (w != 0) | np.eye(nr, dtype=bool)
    if pattern is not None:
      given = np.asarray(pattern)
      if given.shape != (nr, nr) or given.dtype != np.bool_ or not np.array_equal(given, given.T):
        raise ValueError(f"LeastSquares({residual.name}): pattern must be a symmetric {nr}x{nr} boolean matrix")
      if np.any(mask & ~given & ~np.eye(nr, dtype=bool)):
        raise ValueError(f"LeastSquares({residual.name}): pattern must hold the weight's nonzeros")
      mask = given | np.eye(nr, dtype=bool)
    object.__setattr__(self, "pattern", mask)

  @property
  def inputs(self) -> tuple[Any, ...]:
    """The residual's inputs."""
    return self.residual.inputs

  @property
  def name(self) -> str:
    """The residual's name."""
    return self.residual.name


def checked_weight(owner: str, weight: ArrayLike, nr: int) -> NDArray[np.float64]:
  """`weight` as the nr x nr symmetric matrix of a least-squares cost (a length-nr vector is its diagonal); a
  ValueError naming `owner` unless it is finite, symmetric and positive semidefinite."""
  w = float_array(owner, "weight", weight, None, finite=True)
  w = np.diag(w) if w.ndim == 1 else w
  if w.shape != (nr, nr):
    raise ValueError(f"{owner}: weight must be {nr}x{nr} (or a length-{nr} diagonal), got shape {w.shape}")
  if not np.allclose(w, w.T) or np.linalg.eigvalsh((w + w.T) / 2).min() < -1e-12:
    raise ValueError(f"{owner}: weight must be finite, symmetric and positive semidefinite")
  return (w + w.T) / 2


#: The most runs of selected rows constant_congruence moves S's blocks for (runs² blocks, each a masked load of every
#: entry of the result); past it, the product.
MOVED_RUNS = 4


def constant_congruence(J: NDArray[np.float64], S: Tensor) -> Tensor:
  """Jᵀ S J for a constant J (m x n) and a traced S (m x m): the Gauss-Newton block of a residual affine in (x, u).
  Where every column of J has at most one nonzero (a residual that selects and scales coordinates, as x - x_ref and u
  do), by moving S's entries: each pair of runs of columns whose nonzeros sit on consecutive rows is a block of S,
  shrunk out of it and padded into place, then scaled by the columns' nonzeros (no product: a product's kernel runs
  m n (m + n) multiply-adds, on J's zeros too, every time the block is evaluated); else, or with more than MOVED_RUNS
  runs, as the product."""
  n = J.shape[1]
  nonzero = J != 0
  runs: list[list[int]] = []  # [first column, its row, length]
  for j in map(int, np.flatnonzero(nonzero.any(axis=0))):
    row = int(np.argmax(nonzero[:, j]))
    if runs and runs[-1][0] + runs[-1][2] == j and runs[-1][1] + runs[-1][2] == row:
      runs[-1][2] += 1
    else:
      runs.append([j, row, 1])
  if (nonzero.sum(axis=0) > 1).any() or not 0 < len(runs) <= MOVED_RUNS:
    Jt = Tensor(J)
    return Jt.T @ (S @ Jt)
  moved = None
  for ja, ra, la in runs:
    for jb, rb, lb in runs:
      block = S[ra : ra + la, rb : rb + lb].pad(((ja, n - ja - la), (jb, n - jb - lb)))
      moved = block if moved is None else moved + block
  assert moved is not None
  scale = J.sum(axis=0)  # each column's nonzero
  return moved if (scale[nonzero.any(axis=0)] == 1).all() else moved * Tensor(np.outer(scale, scale))
