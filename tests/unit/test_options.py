"""The QP layer's options and stage layouts: validation, the former option names as aliases, and layouts the Riccati
backend refuses (all checked without compiling)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from anvil.codegen import Arg, NumericalFunction
from anvil.mpc import MPCOptions, shooting_layout
from anvil.qp import OSQPOptions, QPProblem, RiccatiOptions, SparseIPMOptions, StageLayout
from anvil.qp.cost_model import WARM_ITERATIONS
from anvil.qp.riccati import auto_condensing
from anvil.qp.riccati_backend import RiccatiBackend
from anvil.sqp import SQPFunction, SQPOptions


def test_qp_options_are_checked_field_by_field() -> None:
  with pytest.raises(ValueError, match=r"OSQPOptions\.eps_abs"):
    OSQPOptions(eps_abs=0.0)
  with pytest.raises(ValueError, match=r"OSQPOptions\.max_iter"):
    OSQPOptions(max_iter=2.5)  # type: ignore[arg-type]
  with pytest.raises(TypeError, match=r"OSQPOptions\.polish"):
    OSQPOptions(polish=1)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"RiccatiOptions\.tol_min"):
    RiccatiOptions(tol_min=1e-3)
  with pytest.raises(ValueError, match=r"RiccatiOptions\.max_iter"):
    RiccatiOptions(max_iter=0)
  for blocks in (0, "some", 2.0):
    with pytest.raises(ValueError, match=r"RiccatiOptions\.condensing"):
      RiccatiOptions(condensing=blocks)  # type: ignore[arg-type]
  assert RiccatiOptions().condensing == 1 and RiccatiOptions(condensing="auto").condensing == "auto"
  with pytest.raises(ValueError, match=r"SparseIPMOptions\.tol_min"):
    SparseIPMOptions(tol_min=0.0)
  with pytest.raises(ValueError, match=r"SparseIPMOptions\.max_iter"):
    SparseIPMOptions(max_iter=True)  # type: ignore[arg-type]


def test_sqp_options_take_the_qp_solver() -> None:
  assert SQPOptions().qp is None, "the default: automatic (SQPFunction.qp_options)"
  options = SQPOptions(qp=OSQPOptions(eps_rel=1e-7))
  assert options.osqp == OSQPOptions(eps_rel=1e-7) and dataclasses.replace(options, max_iter=3).qp == options.qp
  with pytest.raises(TypeError, match=r"SQPOptions\.qp"):
    SQPOptions(qp="osqp")  # type: ignore[arg-type]
  with pytest.raises(TypeError, match="qp_eps_abs"):
    SQPOptions(qp_eps_abs=1e-6)  # type: ignore[call-arg]  # the former aliases are gone: qp=OSQPOptions(...)
  riccati = SQPOptions(qp=OSQPOptions(eps_abs=1e-6)).with_qp(RiccatiOptions())
  assert riccati.qp == RiccatiOptions() and riccati.osqp == OSQPOptions()
  assert SQPOptions(qp=SparseIPMOptions(max_iter=50)).qp == SparseIPMOptions(max_iter=50)


def test_mpc_options_take_the_qp_solver() -> None:
  assert MPCOptions().qp == RiccatiOptions()
  osqp = MPCOptions(qp=OSQPOptions(eps_abs=1e-7))
  assert osqp.sqp_options.qp == osqp.qp == OSQPOptions(eps_abs=1e-7)
  given = MPCOptions(qp=RiccatiOptions(max_iter=30))
  assert dataclasses.replace(given, mode="rti").sqp_options.max_iter == 1
  assert given.sqp_options.qp == RiccatiOptions(max_iter=30)
  with pytest.raises(TypeError, match=r"MPCOptions\.qp"):
    MPCOptions(qp=SQPOptions())  # type: ignore[arg-type]
  with pytest.raises(TypeError, match="riccati_max_iter"):
    MPCOptions(riccati_max_iter=40)  # type: ignore[call-arg]  # the former aliases are gone: qp=RiccatiOptions(...)
  with pytest.raises(ValueError, match=r"scalar='float32' needs the Riccati QP solver"):
    MPCOptions(scalar="float32", qp=OSQPOptions())


def test_the_riccati_qp_solver_needs_a_stage_layout() -> None:
  f = NumericalFunction("opt_f", lambda x, p: (x * x).sum(), (Arg(2), Arg(0)))
  with pytest.raises(ValueError, match="RiccatiOptions solves QPs with a stage layout"):
    SQPFunction("opt_nlp", f, None, SQPOptions(qp=RiccatiOptions()))
  with pytest.raises(TypeError, match="stages must be a StageLayout"):
    SQPFunction("opt_nlp", f, None, stages=((0, 0),))  # type: ignore[arg-type]


def test_stage_layouts_are_checked() -> None:
  layout = shooting_layout(3, 2, 1, nh=1, nhN=2, slack_stages=(1, 1, 3))
  assert (layout.nu, layout.nuN) == (1 + 2, 1), "the most slacks of a stage k < N become inputs, stage N's terminal"
  assert layout.general_rows == (1 + 2 * 2, 2 + 2)
  assert layout.variables[-3:] == ((1, 3), (1, 4), (3, 2))
  # slack e (variable 3 * 3 + 2 + e) relaxes rows v + s (after the 2 + 3 * 2 + 3 + 2 others) and v - s
  assert layout.soft == ((11, 13, 16), (12, 14, 17), (13, 15, 18))
  good = {"N": 1, "nx": 1, "nu": 1, "nuN": 0, "variables": ((0, 0), (0, 1), (1, 0)),
          "rows": (("initial", 0, 0), ("dynamics", 0, 0))}  # fmt: skip
  StageLayout(**good)  # type: ignore[arg-type]
  bad = {
    "outside the stages": {"variables": ((0, 0), (0, 2), (1, 0))},
    "two variables at one place": {"variables": ((0, 0), (0, 0), (1, 0))},
    "no variable is the state": {"variables": ((0, 0), (0, 1))},
    "exactly one row": {"rows": (("initial", 0, 0),)},
    "kinds are": {"rows": (("initial", 0, 0), ("dynamics", 0, 0), ("path", 0, 0))},
    "N: expected an int >= 1": {"N": 0},
    "needs an input variable": {"soft": ((0, -1, -1),)},
  }
  for message, change in bad.items():
    with pytest.raises(ValueError, match=message):
      StageLayout(**{**good, **change})  # type: ignore[arg-type]


def test_the_riccati_backend_eliminates_soft_slacks_only_where_they_are_plain() -> None:
  """x1 = x0 + u0 and a slack s (input 1 of stage 0) softening u0 + s >= lo and u0 - s <= hi: eliminated (the stage
  QP keeps one input) where s has P's diagonal alone; kept as an input where P couples it with u0."""
  layout = StageLayout(N=1, nx=1, nu=2, nuN=0, variables=((0, 0), (0, 1), (0, 2), (1, 0)),
                       rows=(("initial", 0, 0), ("dynamics", 0, 0), ("stage", 0, 0), ("stage", 0, 1)),
                       soft=((2, 2, 3),))  # fmt: skip
  rows = np.array([[1.0, 0, 0, 0], [-1.0, -1.0, 0, 1.0], [0, 1.0, 1.0, 0], [0, 1.0, -1.0, 0]])
  a = sp.csc_array(np.vstack([rows, np.eye(4)]))
  plain = RiccatiBackend("soft_plain", QPProblem(sp.csc_array(np.eye(4)), a, layout), RiccatiOptions())
  assert plain.soft == layout.soft and plain.solver.nu == 1 and plain.solver.quadratic_prices
  coupled = np.eye(4)
  coupled[1, 2] = 0.5  # u0 s
  coupled = sp.csc_array(coupled)
  kept = RiccatiBackend("soft_coupled", QPProblem(coupled, a, layout), RiccatiOptions())
  assert kept.soft == () and kept.solver.nu == 2 and not kept.solver.quadratic_prices


def test_the_riccati_backend_condenses_auto_for_warm_started_qps() -> None:
  """RiccatiOptions(condensing="auto"): the block size the cost model predicts fastest for an SQP step's QPs, which
  start warm (WARM_ITERATIONS), smaller than a cold-started RiccatiQP's choice for the same sizes."""
  nx, nu, N = 27, 1, 40
  variables = tuple((k, i) for k in range(N) for i in range(nx + nu)) + tuple((N, i) for i in range(nx))
  rows = tuple(("initial", 0, i) for i in range(nx)) + tuple(("dynamics", k, i) for k in range(N) for i in range(nx))
  layout = StageLayout(N=N, nx=nx, nu=nu, nuN=0, variables=variables, rows=rows)
  n, rng = len(variables), np.random.default_rng(0)
  jac = np.zeros((len(rows), n))
  jac[:nx, :nx] = np.eye(nx)
  for k in range(N):  # x_{k+1} - A x_k - B u_k
    row, col = nx * (k + 1), (nx + nu) * k
    jac[row : row + nx, col : col + nx + nu] = -rng.standard_normal((nx, nx + nu))
    jac[row : row + nx, col + nx + nu : col + 2 * nx + nu] = np.eye(nx)
  problem = QPProblem(sp.csc_array(np.eye(n)), sp.csc_array(np.vstack([jac, np.eye(n)])), layout)
  blocks = lambda condensing: RiccatiBackend("auto_blocks", problem, RiccatiOptions(condensing=condensing)).solver
  warm = auto_condensing(nx, nu, N, iterations=WARM_ITERATIONS)
  assert blocks("auto").condensing == warm and 1 < warm < auto_condensing(nx, nu, N)
  assert blocks(1).condensing == 1 and blocks(5).condensing == 5


def test_the_riccati_backend_refuses_qps_its_layout_does_not_fit() -> None:
  """One stage of dynamics x1 = x0 + u0 (variables x0, u0, x1); a P or A entry joining stages the layout keeps apart
  is an error when the backend is made, naming what couples them."""
  layout = StageLayout(N=1, nx=1, nu=1, nuN=0, variables=((0, 0), (0, 1), (1, 0)),
                       rows=(("initial", 0, 0), ("dynamics", 0, 0)))  # fmt: skip
  jac = np.array([[1.0, 0.0, 0.0], [-1.0, -1.0, 1.0]])
  a = sp.csc_array(np.vstack([jac, np.eye(3)]))
  diagonal = sp.csc_array(np.eye(3))
  backend = RiccatiBackend("layout_ok", QPProblem(diagonal, a, layout), RiccatiOptions())
  assert backend.solver.nu == 1 and backend.solver.ng == 2, "a box row per stage variable"
  assert backend.solver.nud == 1, "u0 enters the dynamics"
  # a second input the dynamics row does not touch (a slack, say): the recursion may skip it
  wide = StageLayout(N=1, nx=1, nu=2, nuN=0, variables=((0, 0), (0, 1), (0, 2), (1, 0)),
                     rows=(("initial", 0, 0), ("dynamics", 0, 0)))  # fmt: skip
  a_wide = sp.csc_array(np.vstack([[[1.0, 0.0, 0.0, 0.0], [-1.0, -1.0, 0.0, 1.0]], np.eye(4)]))
  assert (
    RiccatiBackend("layout_wide", QPProblem(sp.csc_array(np.eye(4)), a_wide, wide), RiccatiOptions()).solver.nud == 1
  )
  coupled = sp.csc_array(np.triu(np.ones((3, 3))))
  with pytest.raises(ValueError, match="P couples stages 0 and 1"):
    RiccatiBackend("layout_p", QPProblem(coupled, a, layout), RiccatiOptions())
  initial = sp.csc_array(np.vstack([[[1.0, 1.0, 0.0]], jac[1:], np.eye(3)]))
  with pytest.raises(ValueError, match="initial row 0 of x_0"):
    RiccatiBackend("layout_a", QPProblem(diagonal, initial, layout), RiccatiOptions())
  with pytest.raises(ValueError, match="needs the QP's stage layout"):
    RiccatiBackend("layout_none", QPProblem(diagonal, a), RiccatiOptions())
