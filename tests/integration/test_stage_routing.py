"""SQPFunction finds the multiple-shooting structure of NLPs written without a stage layout (batched, or as a Python
loop in Opti's order: all states, then all inputs, defects F(x_k, u_k) - x_{k+1}, the initial rows last) and solves
their QPs with the Riccati interior point: the same solution as the general sparse interior point, which ignores the
structure."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil import Arg
from anvil.problems import cartpole, shooting
from anvil.qp import RiccatiOptions, SparseIPMOptions
from anvil.sqp import SQPFunction, SQPOptions

N, NX = 12, shooting.NX
X_INIT = np.array([0.3, 0.4, 0.0, 0.0])
PATH_LOW, PATH_HIGH = -0.2, 0.5  # on xc + 0.1 sin(theta) at every stage: the lower bound is active near the end


def states_first(w: Tensor) -> tuple[list[Tensor], list[Tensor]]:
  """x_0..x_N and u_0..u_{N-1} of w = [X; U]."""
  xs = [w[NX * k : NX * (k + 1)] for k in range(N + 1)]
  us = [w[NX * (N + 1) + k : NX * (N + 1) + k + 1] for k in range(N)]
  return xs, us


def loop_cost(w: Tensor, x_init: Tensor) -> Tensor:
  xs, us = states_first(w)
  total = Tensor(0.0)
  for k in range(N):
    total = total + (xs[k] * xs[k] * Tensor(shooting.Q_DIAG)).sum() + cartpole.R * (us[k] * us[k]).sum()
  return total + 10.0 * (xs[N] * xs[N] * Tensor(shooting.Q_DIAG)).sum()


def loop_constraints(w: Tensor, x_init: Tensor) -> Tensor:
  """Per stage: the defect F(x_k, u_k) - x_{k+1}, then the path constraint; x_0 - x_init last."""
  xs, us = states_first(w)
  rows = []
  for k in range(N):
    rows += [cartpole.step(xs[k], us[k]) - xs[k + 1], (xs[k][0] + 0.1 * xs[k][1].sin()).reshape(1)]
  return Tensor.cat(*rows, xs[0] - x_init)


def loop_bounds() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  n, m = NX * (N + 1) + N, (NX + 1) * N + NX
  lbx, ubx = np.full(n, -np.inf), np.full(n, np.inf)
  lbx[NX * (N + 1) :], ubx[NX * (N + 1) :] = -20.0, 20.0
  lbg, ubg = np.zeros(m), np.zeros(m)
  path = np.arange(N) * (NX + 1) + NX
  lbg[path], ubg[path] = PATH_LOW, PATH_HIGH
  return lbx, ubx, lbg, ubg


def to_interleaved(w: np.ndarray) -> np.ndarray:
  """[X; U] as [x_0, u_0, x_1, ..., x_N]."""
  xs, us = w[: NX * (N + 1)].reshape(N + 1, NX), w[NX * (N + 1) :].reshape(N, 1)
  return np.concatenate([np.hstack([xs[:N], us]).ravel(), xs[N]])


@pytest.fixture(scope="module")
def loop_solutions() -> dict[str, tuple[SQPFunction, object]]:
  n = NX * (N + 1) + N
  f = av.NumericalFunction("route_loop_f", loop_cost, (Arg(n), Arg(NX)))
  g = av.NumericalFunction("route_loop_g", loop_constraints, (Arg(n), Arg(NX)))
  lbx, ubx, lbg, ubg = loop_bounds()
  w0 = np.zeros(n)
  out = {}
  for name, options in (("auto", SQPOptions()), ("general", SQPOptions(qp=SparseIPMOptions()))):
    solver = SQPFunction(f"route_loop_{name}", f, g, options)
    out[name] = (solver, solver(w0, X_INIT, lbx, ubx, lbg, ubg))
  return out


@pytest.mark.slow
def test_a_loop_in_opti_order_is_routed_to_the_riccati_solver(loop_solutions: dict) -> None:
  (auto, res), (general, ref) = loop_solutions["auto"], loop_solutions["general"]
  layout = auto.layout
  assert layout is not None and (layout.N, layout.nx, layout.nu, layout.nuN) == (N, NX, 1, 0)
  assert general.layout is None, "the general solver was asked for: no structure used"
  assert res.stats["qp_solver"] == "riccati" and ref.stats["qp_solver"] == "sparse_ipm"
  assert res.success and ref.success
  np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
  np.testing.assert_allclose(res.lam_g, ref.lam_g, atol=1e-5)  # the multipliers of the rescaled rows too
  assert res.f == pytest.approx(ref.f, rel=1e-8)
  xs, us = res.x[: NX * (N + 1)].reshape(N + 1, NX), res.x[NX * (N + 1) :]
  defects = [cartpole.step_numpy(xs[k], us[k : k + 1]) - xs[k + 1] for k in range(N)]
  assert np.abs(defects).max() < 1e-8 and np.abs(xs[0] - X_INIT).max() < 1e-10
  path = xs[:N, 0] + 0.1 * np.sin(xs[:N, 1])
  assert path.min() >= PATH_LOW - 1e-8 and path.min() == pytest.approx(PATH_LOW, abs=1e-6), "active"


@pytest.mark.slow
def test_the_batched_form_finds_the_same_structure(loop_solutions: dict) -> None:
  """shooting.defects (interleaved, x_{k+1} - F, derived by tinygrad): detected too, the same optimum."""
  size = shooting.size(N)

  def cost(w: Tensor, x_init: Tensor) -> Tensor:
    return shooting.stage_cost(w, N) + 10.0 * (w[-NX:] * w[-NX:] * Tensor(shooting.Q_DIAG)).sum()

  def constraints(w: Tensor, x_init: Tensor) -> Tensor:
    stages = w[: shooting.STAGE * N].reshape(N, shooting.STAGE)
    path = stages[:, 0] + 0.1 * stages[:, 1].sin()
    return shooting.defects(w, x_init, N).cat(path)

  f = av.NumericalFunction("route_batched_f", cost, (Arg(size), Arg(NX)))
  g = av.NumericalFunction("route_batched_g", constraints, (Arg(size), Arg(NX)))
  solver = SQPFunction("route_batched", f, g, SQPOptions(qp=RiccatiOptions(max_iter=60)))
  m = NX * (N + 1)
  lbx, ubx = np.full(size, -np.inf), np.full(size, np.inf)
  lbx[NX : shooting.STAGE * N : shooting.STAGE], ubx[NX : shooting.STAGE * N : shooting.STAGE] = -20.0, 20.0
  lbg = np.concatenate([np.zeros(m), np.full(N, PATH_LOW)])
  ubg = np.concatenate([np.zeros(m), np.full(N, PATH_HIGH)])
  res = solver(np.zeros(size), X_INIT, lbx, ubx, lbg, ubg)
  assert solver.layout is not None and res.stats["qp_solver"] == "riccati" and res.success
  np.testing.assert_allclose(res.x, to_interleaved(loop_solutions["general"][1].x), atol=1e-6)


@pytest.mark.slow
def test_the_rows_a_layout_keeps_equal_must_be_given_equal_bounds(loop_solutions: dict) -> None:
  auto = loop_solutions["auto"][0]
  lbx, ubx, lbg, ubg = loop_bounds()
  assert auto.equality_rows == tuple(r for r in range(len(lbg)) if lbg[r] == ubg[r])
  assert f"equality_rows[{len(auto.equality_rows)}]" in auto.header_code, "C++ callers are told"
  lbg[1] = -1.0
  with pytest.raises(ValueError, match=r"lbg and ubg must be equal at row 1 of route_loop_g: it is the dynamics"):
    auto(np.zeros(len(lbx)), X_INIT, lbx, ubx, lbg, ubg)
  general = loop_solutions["general"][0]
  assert general(np.zeros(len(lbx)), X_INIT, lbx, ubx, lbg, ubg).success, "the general solver takes any bounds"


def test_riccati_without_a_structure_says_so() -> None:
  f = av.NumericalFunction("route_none_f", lambda x, p: (x * x).sum(), (Arg(3), Arg(0)))
  g = av.NumericalFunction("route_none_g", lambda x, p: (x[:2] * x[1:]).exp(), (Arg(3), Arg(0)))
  with pytest.raises(ValueError, match="RiccatiOptions solves QPs with a stage layout: none was found"):
    _ = SQPFunction("route_none", f, g, SQPOptions(qp=RiccatiOptions())).layout
  assert SQPFunction("route_none_auto", f, g).qp_options == SparseIPMOptions()


@pytest.mark.slow
def test_terminal_rows_and_rows_on_single_variables_keep_the_structure() -> None:
  """The loop in Opti's order with the inputs bounded by rows of their own (a loop before the dynamics) and x_N's
  angle and cart velocity brought to 0 by rows (one constant entry each, like x_0's): the structure is found, its report
  names each kind of row, and the Riccati solver reaches the general solver's optimum."""
  n, m_loop = NX * (N + 1) + N, (NX + 1) * N + NX

  def constraints(w: Tensor, x_init: Tensor) -> Tensor:
    xs, us = states_first(w)
    return Tensor.cat(*us, loop_constraints(w, x_init), xs[N][1:3])

  f = av.NumericalFunction("route_terminal_f", loop_cost, (Arg(n), Arg(NX)))
  g = av.NumericalFunction("route_terminal_g", constraints, (Arg(n), Arg(NX)))
  lbx, ubx, lbg, ubg = loop_bounds()
  lbx[:], ubx[:] = -np.inf, np.inf
  lbg = np.concatenate([np.full(N, -15.0), lbg, np.zeros(2)])
  ubg = np.concatenate([np.full(N, 15.0), ubg, np.zeros(2)])
  auto = SQPFunction("route_terminal", f, g)
  general = SQPFunction("route_terminal_general", f, g, SQPOptions(qp=SparseIPMOptions()))
  report = auto.structure
  assert report.origin == "found" and report.qp_solver == "riccati" and report.layout is not None
  assert report.terminal_rows == (N + m_loop, N + m_loop + 1)
  assert report.initial_rows == tuple(range(N + m_loop - NX, N + m_loop))
  assert set(report.path_rows) == set(range(N)) | {N + k * (NX + 1) + NX for k in range(N)}
  assert len(report.dynamics_rows) == NX * N and report.inputs == (1,) * N + (0,)
  assert str(report).startswith(f"{N} stages (found): nx = {NX}, nu = 1")
  assert general.structure.origin == "not searched" and general.structure.layout is None
  res, ref = (s(np.zeros(n), X_INIT, lbx, ubx, lbg, ubg) for s in (auto, general))
  assert res.success and ref.success and res.stats["qp_solver"] == "riccati"
  np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
  np.testing.assert_allclose(res.lam_g, ref.lam_g, atol=1e-5)
  assert np.abs(res.x[NX * N + 1 : NX * N + 3]).max() < 1e-9, "x_N's angle and cart velocity at 0"
  assert np.abs(res.x[NX * (N + 1) :]).max() == pytest.approx(15.0, abs=1e-6), "the input rows active"


def test_an_ocp_whose_structure_breaks_says_where(caplog: pytest.LogCaptureFixture) -> None:
  """A row joining stages 1 and 10 of the loop: no layout; the report and a warning at build time name that row in
  the NLP's terms (its row of g, the variable of the far stage)."""
  n, m_loop = NX * (N + 1) + N, (NX + 1) * N + NX

  def constraints(w: Tensor, x_init: Tensor) -> Tensor:
    xs, _ = states_first(w)
    return loop_constraints(w, x_init).cat((xs[1][0] * xs[10][1]).reshape(1))

  f = av.NumericalFunction("route_broken_f", loop_cost, (Arg(n), Arg(NX)))
  g = av.NumericalFunction("route_broken_g", constraints, (Arg(n), Arg(NX)))
  with caplog.at_level("WARNING", logger="anvil"):
    report = SQPFunction("route_broken", f, g).structure
  expected = f"row {m_loop} of route_broken_g joins stage 1's variables to x[{NX * 10 + 1}], a variable of stage 10"
  assert report.layout is None and report.qp_solver == "sparse_ipm" and report.reason.startswith(expected)
  assert expected in caplog.text


@pytest.mark.slow
def test_x0_fixed_by_its_bounds_alone() -> None:
  """The loop in Opti's order without the rows x_0 - x_init: x_0 fixed by lbx = ubx, as a CasADi user writes lbw = ubw
  = x0. The structure is found with x_0 as x's first variables, the Riccati solver reaches the general solver's
  optimum and multipliers (x_0's on its bounds), and a call not fixing x_0 is told why."""
  n = NX * (N + 1) + N

  def constraints(w: Tensor, x_init: Tensor) -> Tensor:
    return loop_constraints(w, x_init)[:-NX]

  f = av.NumericalFunction("route_bounded_f", loop_cost, (Arg(n), Arg(NX)))
  g = av.NumericalFunction("route_bounded_g", constraints, (Arg(n), Arg(NX)))
  lbx, ubx, lbg, ubg = loop_bounds()
  lbx[:NX] = ubx[:NX] = X_INIT
  lbg, ubg = lbg[:-NX], ubg[:-NX]
  auto = SQPFunction("route_bounded", f, g)
  general = SQPFunction("route_bounded_general", f, g, SQPOptions(qp=SparseIPMOptions()))
  assert auto.layout is not None and auto.layout.initial_bounds and auto.fixed_variables == tuple(range(NX))
  assert str(auto.structure).startswith(f"{N} stages (found): nx = {NX}, nu = 1 (0 at stage N); rows: x_0 fixed by")
  assert f"fixed_variables[{NX}]" in auto.header_code, "C++ callers are told"
  res, ref = (s(np.zeros(n), X_INIT, lbx, ubx, lbg, ubg) for s in (auto, general))
  assert res.success and ref.success and res.stats["qp_solver"] == "riccati"
  np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
  np.testing.assert_allclose(res.lam_g, ref.lam_g, atol=1e-5)
  np.testing.assert_allclose(res.lam_x, ref.lam_x, atol=1e-5)
  assert np.abs(res.lam_x[:NX]).max() > 1e-3, "x_0's bounds carry the initial rows' multipliers"
  ubx[1] += 0.1
  with pytest.raises(ValueError, match=r"lbx and ubx must be equal and finite at x\[1\]: it is x_0\[1\]"):
    auto(np.zeros(n), X_INIT, lbx, ubx, lbg, ubg)
