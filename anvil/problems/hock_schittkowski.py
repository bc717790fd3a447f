"""Standard NLP test problems with published optima, from the Hock-Schittkowski collection: smooth objectives and
constraints; bounds, equalities and inequalities; convex and nonconvex; a few degenerate (hs026, hs046, hs049: the
Hessian is singular at the solution, so convergence there is slow); each with its published starting point and optimal
objective value.

Source: W. Hock, K. Schittkowski, "Test Examples for Nonlinear Programming Codes", Lecture Notes in Economics and
Mathematical Systems 187, Springer, 1981 ("HS" below). Each problem is written once over a small math namespace
(`Ops`): traced with tinygrad for anvil, evaluated with numpy for checks, built with CasADi for IPOPT.

Constraints are stated as in HS: g(x) >= 0 (an "i" row) or g(x) = 0 (an "e" row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.sqp import SQPFunction, SQPOptions

INF = math.inf
SQRT2 = math.sqrt(2.0)
#: A problem's function as written: fn(x, ops).
Fn = Callable[[Any, "Ops"], Any]


@dataclass(frozen=True)
class Ops:
  """The math the problems use beyond arithmetic and `**`: elementwise functions and stacking scalars to a vector."""

  exp: Callable[[Any], Any]
  log: Callable[[Any], Any]
  sin: Callable[[Any], Any]
  cos: Callable[[Any], Any]
  sqrt: Callable[[Any], Any]
  stack: Callable[..., Any]


TINYGRAD = Ops(Tensor.exp, Tensor.log, Tensor.sin, Tensor.cos, Tensor.sqrt, lambda *xs: Tensor.stack(*xs))
NUMPY = Ops(np.exp, np.log, np.sin, np.cos, np.sqrt, lambda *xs: np.array(xs, dtype=np.float64))


def casadi_ops(ca: Any) -> Ops:
  """The problems' math on CasADi symbols (SX or MX)."""
  return Ops(ca.exp, ca.log, ca.sin, ca.cos, ca.sqrt, lambda *xs: ca.vertcat(*xs))


@dataclass(frozen=True)
class NLPProblem:
  """minimize cost(x) subject to lbg <= constraints(x) <= ubg, lbx <= x <= ubx, with its published optimum.

  `cost(x, p, ops=TINYGRAD)` returns a scalar and `constraints(x, p, ops=TINYGRAD)` a vector of length m (None when
  m = 0): called with tinygrad Tensors as (x, p) they are what `NumericalFunction` traces; with `ops=NUMPY` they take
  numpy arrays, with `casadi_ops(ca)` CasADi symbols. p is unused (the problems have no parameters).
  """

  name: str
  """The name: "hs071" for HS problem 71."""
  n: int
  """Number of variables."""
  m: int
  """Number of constraints (rows of g)."""
  cost: Callable[..., Any]
  """f(x, p, ops=TINYGRAD): the objective."""
  constraints: Callable[..., Any] | None
  """g(x, p, ops=TINYGRAD): the constraint vector, or None."""
  x0: np.ndarray
  """The published starting point (not always within the bounds)."""
  lbx: np.ndarray
  """Lower bounds on x (-inf for none)."""
  ubx: np.ndarray
  """Upper bounds on x (inf for none)."""
  lbg: np.ndarray
  """Lower bounds on g."""
  ubg: np.ndarray
  """Upper bounds on g (inf for none)."""
  f_opt: float
  """The published optimal objective value (IPOPT reaches it from x0: tests/integration/test_hock_schittkowski.py)."""
  source: str
  """Where the problem and f_opt are published."""

  @property
  def kinds(self) -> str:
    """What constrains the problem: "bounds", "ineq", "eq" joined by "+", or "none"."""
    bounded = bool(np.isfinite(self.lbx).any() or np.isfinite(self.ubx).any())
    on = {"bounds": bounded, "ineq": bool(np.any(self.lbg < self.ubg)), "eq": bool(np.any(self.lbg == self.ubg))}
    return "+".join(k for k, v in on.items() if v) or "none"


def _traced(fn: Fn) -> Callable[..., Any]:
  """fn(x, ops) as the (x, p, ops=TINYGRAD) NumericalFunction traces."""
  return lambda x, p, ops=TINYGRAD: fn(x, ops)


def _hs(number: int, x0: Sequence[float], f_opt: float, f: Fn, g: Fn | None = None, rows: str = "", lbx: Any = -INF,
        ubx: Any = INF) -> NLPProblem:  # fmt: skip
  """HS problem `number`; `rows` says for each row of g whether it is g >= 0 ("i") or g = 0 ("e")."""
  n, box = len(x0), lambda b: np.broadcast_to(np.asarray(b, dtype=np.float64), (len(x0),)).copy()
  return NLPProblem(f"hs{number:03d}", n, len(rows), _traced(f), None if g is None else _traced(g),
                    np.array(x0, dtype=np.float64), box(lbx), box(ubx), np.zeros(len(rows)),
                    np.array([INF if r == "i" else 0.0 for r in rows]), f_opt,
                    f"Hock & Schittkowski (1981), problem {number}")  # fmt: skip


def _rosen(x: Any, o: Ops) -> Any:
  return 100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2


def _hs078_g(x: Any, o: Ops) -> Any:
  return o.stack(sum(x[i] ** 2 for i in range(5)) - 10.0, x[1] * x[2] - 5.0 * x[3] * x[4], x[0] ** 3 + x[1] ** 3 + 1.0)


def _hs104_f(x: Any, o: Ops) -> Any:
  return 0.4 * x[0] ** 0.67 * x[6] ** -0.67 + 0.4 * x[1] ** 0.67 * x[7] ** -0.67 + 10.0 - x[0] - x[1]


def _hs104_g(x: Any, o: Ops) -> Any:
  return o.stack(
    1.0 - 0.0588 * x[4] * x[6] - 0.1 * x[0],
    1.0 - 0.0588 * x[5] * x[7] - 0.1 * x[0] - 0.1 * x[1],
    1.0 - 4.0 * x[2] / x[4] - 2.0 * x[2] ** -0.71 / x[4] - 0.0588 * x[2] ** -1.3 * x[6],
    1.0 - 4.0 * x[3] / x[5] - 2.0 * x[3] ** -0.71 / x[5] - 0.0588 * x[3] ** -1.3 * x[7],
    _hs104_f(x, o) - 1.0,
    4.2 - _hs104_f(x, o),
  )


def _hs113_f(x: Any, o: Ops) -> Any:
  return (x[0] ** 2 + x[1] ** 2 + x[0] * x[1] - 14.0 * x[0] - 16.0 * x[1] + (x[2] - 10.0) ** 2 + 4.0 * (x[3] - 5.0) ** 2
          + (x[4] - 3.0) ** 2 + 2.0 * (x[5] - 1.0) ** 2 + 5.0 * x[6] ** 2 + 7.0 * (x[7] - 11.0) ** 2
          + 2.0 * (x[8] - 10.0) ** 2 + (x[9] - 7.0) ** 2 + 45.0)  # fmt: skip


def _hs113_g(x: Any, o: Ops) -> Any:
  return o.stack(
    105.0 - 4.0 * x[0] - 5.0 * x[1] + 3.0 * x[6] - 9.0 * x[7],
    -10.0 * x[0] + 8.0 * x[1] + 17.0 * x[6] - 2.0 * x[7],
    8.0 * x[0] - 2.0 * x[1] - 5.0 * x[8] + 2.0 * x[9] + 12.0,
    -3.0 * (x[0] - 2.0) ** 2 - 4.0 * (x[1] - 3.0) ** 2 - 2.0 * x[2] ** 2 + 7.0 * x[3] + 120.0,
    -5.0 * x[0] ** 2 - 8.0 * x[1] - (x[2] - 6.0) ** 2 + 2.0 * x[3] + 40.0,
    -0.5 * (x[0] - 8.0) ** 2 - 2.0 * (x[1] - 4.0) ** 2 - 3.0 * x[4] ** 2 + x[5] + 30.0,
    -(x[0] ** 2) - 2.0 * (x[1] - 2.0) ** 2 + 2.0 * x[0] * x[1] - 14.0 * x[4] + 6.0 * x[5],
    3.0 * x[0] - 6.0 * x[1] - 12.0 * (x[8] - 8.0) ** 2 + 7.0 * x[9],
  )


_A56, _B56 = math.asin(math.sqrt(1 / 4.2)), math.asin(math.sqrt(5 / 7.2))

# NOTE: the anvil SQP solver (default SQPOptions) does not solve hs016 (x0 outside the bounds: "numerical_error" after
# the first iteration) nor hs033 (x0 on the symmetry plane x2 = 0, which it never leaves: it converges to the saddle
# point (0, 0, 2), f = -4). They are xfail in tests/integration/test_hock_schittkowski.py and stay here: the solver is
# to solve them.
# fmt: off
#: Every problem, in HS order. Published optima in closed form where HS gives one.
PROBLEMS: tuple[NLPProblem, ...] = (
  _hs(1, [-2.0, 1.0], 0.0, _rosen, lbx=[-INF, -1.5]),
  _hs(5, [0.0, 0.0], -math.sqrt(3) / 2 - math.pi / 3,
      lambda x, o: o.sin(x[0] + x[1]) + (x[0] - x[1]) ** 2 - 1.5 * x[0] + 2.5 * x[1] + 1.0,
      lbx=[-1.5, -3.0], ubx=[4.0, 3.0]),
  _hs(6, [-1.2, 1.0], 0.0, lambda x, o: (1.0 - x[0]) ** 2, lambda x, o: o.stack(10.0 * (x[1] - x[0] ** 2)), "e"),
  _hs(7, [2.0, 2.0], -math.sqrt(3), lambda x, o: o.log(1.0 + x[0] ** 2) - x[1],
      lambda x, o: o.stack((1.0 + x[0] ** 2) ** 2 + x[1] ** 2 - 4.0), "e"),
  _hs(9, [0.0, 0.0], -0.5, lambda x, o: o.sin(math.pi / 12 * x[0]) * o.cos(math.pi / 16 * x[1]),
      lambda x, o: o.stack(4.0 * x[0] - 3.0 * x[1]), "e"),
  _hs(10, [-10.0, 10.0], -1.0, lambda x, o: x[0] - x[1],
      lambda x, o: o.stack(-3.0 * x[0] ** 2 + 2.0 * x[0] * x[1] - x[1] ** 2 + 1.0), "i"),
  _hs(11, [4.9, 0.1], -8.498464223, lambda x, o: (x[0] - 5.0) ** 2 + x[1] ** 2 - 25.0,
      lambda x, o: o.stack(x[1] - x[0] ** 2), "i"),
  _hs(15, [-2.0, 1.0], 306.5, _rosen, lambda x, o: o.stack(x[0] * x[1] - 1.0, x[0] + x[1] ** 2), "ii",
      ubx=[0.5, INF]),
  _hs(16, [-2.0, 1.0], 0.25, _rosen, lambda x, o: o.stack(x[0] + x[1] ** 2, x[0] ** 2 + x[1]), "ii",
      lbx=[-0.5, -INF], ubx=[0.5, 1.0]),
  _hs(18, [2.0, 2.0], 5.0, lambda x, o: 0.01 * x[0] ** 2 + x[1] ** 2,
      lambda x, o: o.stack(x[0] * x[1] - 25.0, x[0] ** 2 + x[1] ** 2 - 25.0), "ii", lbx=[2.0, 0.0], ubx=50.0),
  _hs(23, [3.0, 1.0], 2.0, lambda x, o: x[0] ** 2 + x[1] ** 2,
      lambda x, o: o.stack(x[0] + x[1] - 1.0, x[0] ** 2 + x[1] ** 2 - 1.0, 9.0 * x[0] ** 2 + x[1] ** 2 - 9.0,
                           x[0] ** 2 - x[1], x[1] ** 2 - x[0]), "iiiii", lbx=-50.0, ubx=50.0),
  _hs(26, [-2.6, 2.0, 2.0], 0.0, lambda x, o: (x[0] - x[1]) ** 2 + (x[1] - x[2]) ** 4,
      lambda x, o: o.stack((1.0 + x[1] ** 2) * x[0] + x[2] ** 4 - 3.0), "e"),
  _hs(27, [2.0, 2.0, 2.0], 0.04, lambda x, o: 0.01 * (x[0] - 1.0) ** 2 + (x[1] - x[0] ** 2) ** 2,
      lambda x, o: o.stack(x[0] + x[2] ** 2 + 1.0), "e"),
  _hs(29, [1.0, 1.0, 1.0], -16 * SQRT2, lambda x, o: -x[0] * x[1] * x[2],
      lambda x, o: o.stack(48.0 - x[0] ** 2 - 2.0 * x[1] ** 2 - 4.0 * x[2] ** 2), "i"),
  _hs(32, [0.1, 0.7, 0.2], 1.0, lambda x, o: (x[0] + 3.0 * x[1] + x[2]) ** 2 + 4.0 * (x[0] - x[1]) ** 2,
      lambda x, o: o.stack(6.0 * x[1] + 4.0 * x[2] - x[0] ** 3 - 3.0, 1.0 - x[0] - x[1] - x[2]), "ie", lbx=0.0),
  _hs(33, [0.0, 0.0, 3.0], SQRT2 - 6, lambda x, o: (x[0] - 1.0) * (x[0] - 2.0) * (x[0] - 3.0) + x[2],
      lambda x, o: o.stack(x[2] ** 2 - x[0] ** 2 - x[1] ** 2, x[0] ** 2 + x[1] ** 2 + x[2] ** 2 - 4.0), "ii",
      lbx=0.0, ubx=[INF, INF, 5.0]),
  _hs(34, [0.0, 1.05, 2.9], -math.log(math.log(10)), lambda x, o: -x[0],
      lambda x, o: o.stack(x[1] - o.exp(x[0]), x[2] - o.exp(x[1])), "ii", lbx=0.0, ubx=[100.0, 100.0, 10.0]),
  _hs(37, [10.0, 10.0, 10.0], -3456.0, lambda x, o: -x[0] * x[1] * x[2],
      lambda x, o: o.stack(72.0 - x[0] - 2.0 * x[1] - 2.0 * x[2], x[0] + 2.0 * x[1] + 2.0 * x[2]), "ii",
      lbx=0.0, ubx=42.0),
  _hs(38, [-3.0, -1.0, -3.0, -1.0], 0.0,
      lambda x, o: (100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2 + 90.0 * (x[3] - x[2] ** 2) ** 2
                    + (1.0 - x[2]) ** 2 + 10.1 * ((x[1] - 1.0) ** 2 + (x[3] - 1.0) ** 2)
                    + 19.8 * (x[1] - 1.0) * (x[3] - 1.0)), lbx=-10.0, ubx=10.0),
  _hs(39, [2.0] * 4, -1.0, lambda x, o: -x[0],
      lambda x, o: o.stack(x[1] - x[0] ** 3 - x[2] ** 2, x[0] ** 2 - x[1] - x[3] ** 2), "ee"),
  _hs(40, [0.8] * 4, -0.25, lambda x, o: -x[0] * x[1] * x[2] * x[3],
      lambda x, o: o.stack(x[0] ** 3 + x[1] ** 2 - 1.0, x[0] ** 2 * x[3] - x[2], x[3] ** 2 - x[1]), "eee"),
  _hs(43, [0.0] * 4, -44.0,
      lambda x, o: (x[0] ** 2 + x[1] ** 2 + 2.0 * x[2] ** 2 + x[3] ** 2 - 5.0 * x[0] - 5.0 * x[1] - 21.0 * x[2]
                    + 7.0 * x[3]),
      lambda x, o: o.stack(8.0 - x[0] ** 2 - x[1] ** 2 - x[2] ** 2 - x[3] ** 2 - x[0] + x[1] - x[2] + x[3],
                           10.0 - x[0] ** 2 - 2.0 * x[1] ** 2 - x[2] ** 2 - 2.0 * x[3] ** 2 + x[0] + x[3],
                           5.0 - 2.0 * x[0] ** 2 - x[1] ** 2 - x[2] ** 2 - 2.0 * x[0] + x[1] + x[3]),
      "iii"),
  _hs(46, [SQRT2 / 2, 1.75, 0.5, 2.0, 2.0], 0.0,
      lambda x, o: (x[0] - x[1]) ** 2 + (x[2] - 1.0) ** 2 + (x[3] - 1.0) ** 4 + (x[4] - 1.0) ** 6,
      lambda x, o: o.stack(x[0] ** 2 * x[3] + o.sin(x[3] - x[4]) - 1.0, x[1] + x[2] ** 4 * x[3] ** 2 - 2.0), "ee"),
  _hs(47, [2.0, SQRT2, -1.0, 2.0 - SQRT2, 0.5], 0.0,
      lambda x, o: (x[0] - x[1]) ** 2 + (x[1] - x[2]) ** 3 + (x[2] - x[3]) ** 4 + (x[3] - x[4]) ** 4,
      lambda x, o: o.stack(x[0] + x[1] ** 2 + x[2] ** 3 - 3.0, x[1] - x[2] ** 2 + x[3] - 1.0, x[0] * x[4] - 1.0),
      "eee"),
  _hs(49, [10.0, 7.0, 2.0, -3.0, 0.8], 0.0,
      lambda x, o: (x[0] - x[1]) ** 2 + (x[2] - 1.0) ** 2 + (x[3] - 1.0) ** 4 + (x[4] - 1.0) ** 6,
      lambda x, o: o.stack(x[0] + x[1] + x[2] + 4.0 * x[3] - 7.0, x[2] + 5.0 * x[4] - 6.0), "ee"),
  _hs(56, [1.0, 1.0, 1.0, _A56, _A56, _A56, _B56], -3.456, lambda x, o: -x[0] * x[1] * x[2],
      lambda x, o: o.stack(*(x[i] - 4.2 * o.sin(x[i + 3]) ** 2 for i in range(3)),
                           x[0] + 2.0 * x[1] + 2.0 * x[2] - 7.2 * o.sin(x[6]) ** 2), "eeee"),
  _hs(63, [2.0] * 3, 961.7151721,
      lambda x, o: 1000.0 - x[0] ** 2 - 2.0 * x[1] ** 2 - x[2] ** 2 - x[0] * x[1] - x[0] * x[2],
      lambda x, o: o.stack(8.0 * x[0] + 14.0 * x[1] + 7.0 * x[2] - 56.0, x[0] ** 2 + x[1] ** 2 + x[2] ** 2 - 25.0),
      "ee", lbx=0.0),
  _hs(65, [-5.0, 5.0, 0.0], 0.9535288567,
      lambda x, o: (x[0] - x[1]) ** 2 + (x[0] + x[1] - 10.0) ** 2 / 9.0 + (x[2] - 5.0) ** 2,
      lambda x, o: o.stack(48.0 - x[0] ** 2 - x[1] ** 2 - x[2] ** 2), "i", lbx=[-4.5, -4.5, -5.0], ubx=[4.5, 4.5, 5.0]),
  _hs(71, [1.0, 5.0, 5.0, 1.0], 17.0140173, lambda x, o: x[0] * x[3] * (x[0] + x[1] + x[2]) + x[2],
      lambda x, o: o.stack(x[0] * x[1] * x[2] * x[3] - 25.0, x[0] ** 2 + x[1] ** 2 + x[2] ** 2 + x[3] ** 2 - 40.0),
      "ie", lbx=1.0, ubx=5.0),
  _hs(78, [-2.0, 1.5, 2.0, -1.0, -1.0], -2.91970041, lambda x, o: x[0] * x[1] * x[2] * x[3] * x[4], _hs078_g, "eee"),
  _hs(80, [-2.0, 2.0, 2.0, -1.0, -1.0], 0.0539498478, lambda x, o: o.exp(x[0] * x[1] * x[2] * x[3] * x[4]), _hs078_g,
      "eee", lbx=[-2.3, -2.3, -3.2, -3.2, -3.2], ubx=[2.3, 2.3, 3.2, 3.2, 3.2]),
  _hs(100, [1.0, 2.0, 0.0, 4.0, 0.0, 1.0, 1.0], 680.6300573,
      lambda x, o: ((x[0] - 10.0) ** 2 + 5.0 * (x[1] - 12.0) ** 2 + x[2] ** 4 + 3.0 * (x[3] - 11.0) ** 2
                    + 10.0 * x[4] ** 6 + 7.0 * x[5] ** 2 + x[6] ** 4 - 4.0 * x[5] * x[6] - 10.0 * x[5] - 8.0 * x[6]),
      lambda x, o: o.stack(127.0 - 2.0 * x[0] ** 2 - 3.0 * x[1] ** 4 - x[2] - 4.0 * x[3] ** 2 - 5.0 * x[4],
                           282.0 - 7.0 * x[0] - 3.0 * x[1] - 10.0 * x[2] ** 2 - x[3] + x[4],
                           196.0 - 23.0 * x[0] - x[1] ** 2 - 6.0 * x[5] ** 2 + 8.0 * x[6],
                           -4.0 * x[0] ** 2 - x[1] ** 2 + 3.0 * x[0] * x[1] - 2.0 * x[2] ** 2 - 5.0 * x[5]
                           + 11.0 * x[6]),
      "iiii"),
  _hs(104, [6.0, 3.0, 0.4, 0.2, 6.0, 6.0, 1.0, 0.5], 3.9511634396, _hs104_f, _hs104_g, "iiiiii", lbx=0.1, ubx=10.0),
  _hs(113, [2.0, 3.0, 5.0, 5.0, 1.0, 2.0, 7.0, 3.0, 6.0, 10.0], 24.3062091, _hs113_f, _hs113_g, "i" * 8),
)
# fmt: on

#: The problems by name.
BY_NAME = {p.name: p for p in PROBLEMS}


def sqp_function(problem: NLPProblem, name_prefix: str = "hs", **options: Any) -> SQPFunction:
  """The anvil solver of `problem`, named f"{name_prefix}_{problem.name}"; `options` are SQPOptions fields.

  Example:
    >>> p = BY_NAME["hs071"]
    >>> res = sqp_function(p)(p.x0, np.zeros(0), p.lbx, p.ubx, p.lbg, p.ubg)  # res.f == 17.0140173...
  """
  name, args = f"{name_prefix}_{problem.name}", (Arg(problem.n), Arg(0))
  f = NumericalFunction(f"{name}_f", problem.cost, args)
  g = None if problem.constraints is None else NumericalFunction(f"{name}_g", problem.constraints, args)
  return SQPFunction(name, f, g, SQPOptions(**options))


def violation(problem: NLPProblem, x: np.ndarray) -> float:
  """The largest violation of a bound or constraint at x, evaluated in numpy (0 when feasible)."""
  worst = max(0.0, float(np.max(problem.lbx - x)), float(np.max(x - problem.ubx)))
  if problem.constraints is None:
    return worst
  g = problem.constraints(np.asarray(x, dtype=np.float64), None, NUMPY)
  return max(worst, float(np.max(problem.lbg - g)), float(np.max(g - problem.ubg)))


def ipopt_solver(problem: NLPProblem) -> Callable[[], tuple[float, int, str]]:
  """CasADi's IPOPT (a dev dependency, imported here) built for `problem`: a callable that solves it from x0 and
  returns (f, iterations, return status)."""
  import casadi as ca

  x, ops = ca.SX.sym("x", problem.n), casadi_ops(ca)
  nlp = {"x": x, "f": problem.cost(x, None, ops)}
  if problem.constraints is not None:
    nlp["g"] = problem.constraints(x, None, ops)
  # IPOPT relaxes the bounds by 1e-8 (relative) unless told not to: its f would be off the bounded optima by ~1e-8 rel
  ipopt = {"print_level": 0, "tol": 1e-10, "sb": "yes", "bound_relax_factor": 0.0}
  opts: dict[str, Any] = {"print_time": False, "ipopt": ipopt}
  solver = ca.nlpsol(f"ipopt_{problem.name}", "ipopt", nlp, opts)
  bounds = {"lbx": problem.lbx, "ubx": problem.ubx}
  if problem.m:
    bounds |= {"lbg": problem.lbg, "ubg": problem.ubg}

  def solve() -> tuple[float, int, str]:
    sol = solver(x0=problem.x0, **bounds)
    stats = solver.stats()
    return float(sol["f"]), int(stats["iter_count"]), str(stats["return_status"])

  return solve


def ipopt_reference(problem: NLPProblem) -> tuple[float, int, str]:
  """Solve `problem` from x0 with CasADi's IPOPT: (f, iterations, return status)."""
  return ipopt_solver(problem)()
