"""The sparse interior point (anvil/sparse_ipm.hpp) behind the QP contract, generated for fixed patterns and driven
from a small C++ program: solutions and multipliers equal OSQP's at 1e-10 and satisfy the KKT conditions checked in
numpy; warm starts take fewer iterations to the same solution; infeasible and nonconvex QPs say so; and SQPFunction
solves NLPs with it (statuses, the elastic QPs of its restoration phase)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import osqp
import pytest
import scipy.sparse as sp

from anvil.problems.hock_schittkowski import BY_NAME, sqp_function, violation
from anvil.qp import QPProblem, QPStatus, SparseIPMOptions
from anvil.qp.registry import qp_backend
from tests.integration.test_runtime_headers import READ_NUMBERS, build, includes, run

DRIVER = (
  """#include <cstdio>
#include "anvil/support.hpp"
#include "anvil/sparse_ipm.hpp"
#include "backend.hpp"
using B = ipm_test::Backend;
static_assert(anvil::qp::implements_contract<B>(), "the QP contract");
constexpr int n = ipm_test::Layout::n, m = ipm_test::Layout::m;
double P[ipm_test::Layout::nnz_P], A[ipm_test::Layout::nnz_A], q[n], l[m], u[m], flags[2];
"""
  + READ_NUMBERS
  + """int main() {
  static ipm_test::WS_t ws;
  if (!read(P) || !read(A)) return 2;
  B::reset(ws);
  // each solve: q, l, u, then (warm, screen)
  while (read(q) && read(l) && read(u) && read(flags)) {
    int status = B::load(P, A, l, u, flags[1] != 0.0, ws);
    if (status == anvil::qp::solved) status = B::solve(q, l, u, 1e-10, flags[0] != 0.0, ws);
    std::printf("%d %d\\n", status, B::iterations(ws));
    for (int j = 0; j < n; ++j) std::printf("%.17g\\n", B::primal(ws)[j]);
    for (int i = 0; i < m; ++i) std::printf("%.17g\\n", B::dual(ws)[i]);
  }
}
"""
)


class Driver:
  """The backend generated for the patterns of P (upper triangle) and A, compiled into a driver program."""

  def __init__(self, P: sp.csc_array, A: sp.csc_array, cxx: str, tmp: Path, osqp_root: Path, sanitize: bool) -> None:
    self.P, self.A = sp.csc_array(P), sp.csc_array(A)
    backend = qp_backend(SparseIPMOptions(), "ipm_test", QPProblem(self.P, self.A))
    (tmp / "backend.hpp").write_text(backend.header_code + backend.source_code)
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"] if sanitize else []
    self.exe = build(cxx, tmp, DRIVER, [*includes(osqp_root), f"-I{tmp}", *flags], [osqp_root / "osqp/src/qdldl.c"])

  def solve(
    self, *solves: tuple[np.ndarray, np.ndarray, np.ndarray, bool, bool]
  ) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(status, iterations, x, y) of each (q, l, u, warm, screen), in one run (so warm starts carry over)."""
    n, m = self.A.shape[1], self.A.shape[0]
    numbers = [self.P.data, self.A.data]
    for q, lo, hi, warm, screen in solves:
      numbers += [q, np.clip(lo, -1e30, 1e30), np.clip(hi, -1e30, 1e30), [float(warm), float(screen)]]
    out = run(self.exe, np.concatenate(numbers))
    results, step = [], 2 + n + m
    for k in range(len(solves)):
      block = out[k * step : (k + 1) * step]
      results.append((int(block[0]), int(block[1]), np.array(block[2 : 2 + n]), np.array(block[2 + n :])))
    return results


def random_qp(seed: int, n: int = 30) -> tuple[sp.csc_array, sp.csc_array, np.ndarray, np.ndarray, np.ndarray]:
  """A sparse convex QP with every kind of row: equalities, two-sided, lower-only, upper-only and free rows, then a
  box on every variable (some sides infinite); P singular on some variables (its pattern lacks their diagonal)."""
  rng = np.random.default_rng(seed)
  M = sp.random(n, n, density=0.08, random_state=rng) + sp.diags(rng.uniform(0.5, 1.5, n))
  full = (M @ M.T).toarray()
  full[:, : n // 5] = full[: n // 5, :] = 0.0  # these variables enter the cost only linearly
  P = sp.csc_array(sp.triu(sp.csc_array(full)))
  kinds = ["eq"] * 4 + ["both"] * 6 + ["lower"] * 4 + ["upper"] * 4 + ["free"] * 2
  G = sp.random(len(kinds), n, density=0.15, random_state=rng).toarray() + np.eye(len(kinds), n)
  A = sp.csc_array(np.vstack([G, np.eye(n)]))
  x_feasible = rng.uniform(-0.5, 0.5, n)
  g = G @ x_feasible
  lo, hi = np.full(len(kinds) + n, -np.inf), np.full(len(kinds) + n, np.inf)
  for i, kind in enumerate(kinds):
    if kind == "eq":
      lo[i] = hi[i] = g[i]
    if kind in ("both", "lower"):
      lo[i] = g[i] - rng.uniform(0.0, 0.3)
    if kind in ("both", "upper"):
      hi[i] = g[i] + rng.uniform(0.0, 0.3)
  lo[len(kinds) :], hi[len(kinds) :] = -1.0, 1.0
  hi[len(kinds) : len(kinds) + 3] = np.inf
  q = 3.0 * rng.normal(size=n)
  return P, A, q, lo, hi


def osqp_reference(P: sp.csc_array, A: sp.csc_array, q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple:
  solver = osqp.OSQP()
  solver.setup(sp.csc_matrix(P), q, sp.csc_matrix(A), lo, hi, eps_abs=1e-10, eps_rel=1e-10, polishing=True,
               verbose=False, max_iter=200000)  # fmt: skip
  res = solver.solve(raise_error=False)
  assert res.info.status == "solved"
  return res.x, res.y


def assert_kkt(P: sp.csc_array, A: sp.csc_array, q: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray,
               y: np.ndarray, tol: float = 1e-7) -> None:  # fmt: skip
  """The KKT conditions, in numpy: stationarity, feasibility, multipliers' signs and complementarity."""
  full = P.toarray() + np.triu(P.toarray(), 1).T
  z = A @ x
  assert np.abs(full @ x + q + A.T @ y).max() < tol
  assert np.all(z >= lo - tol) and np.all(z <= hi + tol)
  assert np.all(y[np.isinf(hi)] <= tol) and np.all(y[np.isinf(lo)] >= -tol)
  assert np.all(np.abs(np.minimum(y, 0) * np.where(np.isfinite(lo), z - lo, 1.0)) < tol)
  assert np.all(np.abs(np.maximum(y, 0) * np.where(np.isfinite(hi), hi - z, 1.0)) < tol)


@pytest.fixture(scope="module")
def osqp_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
  from tests.conftest import write_osqp_sources

  return write_osqp_sources(tmp_path_factory.mktemp("osqp_sources"), "ipm_")


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_solves_sparse_qps_like_osqp_and_warm_starts(
  cxx: str, tmp_path: Path, osqp_sources: Path, sanitize: bool
) -> None:
  P, A, q, lo, hi = random_qp(1)
  driver = Driver(P, A, cxx, tmp_path, osqp_sources, sanitize)
  q2 = q + 1e-3 * np.random.default_rng(2).normal(size=q.size)
  q4 = q2 + 1e-8 * np.random.default_rng(3).normal(size=q.size)  # the active set holds: one factorization
  (s1, _it1, x1, y1), (s2, it2, x2, y2), (s3, it3, x3, y3), (s4, it4, x4, y4) = driver.solve(
    (q, lo, hi, False, False), (q2, lo, hi, True, True), (q2, lo, hi, False, False), (q4, lo, hi, True, True)
  )
  assert [QPStatus.from_code(s) for s in (s1, s2, s3, s4)] == ["solved"] * 4
  assert it4 == 1
  assert_kkt(P, A, q4, lo, hi, x4, y4, 1e-8)
  x_ref, y_ref = osqp_reference(P, A, q, lo, hi)
  np.testing.assert_allclose(x1, x_ref, atol=1e-7)
  np.testing.assert_allclose(y1, y_ref, atol=1e-6)
  assert_kkt(P, A, q, lo, hi, x1, y1)
  assert np.count_nonzero(np.abs(y_ref) > 1e-6) > 8, "many rows active"
  # a warm start from the previous solution: the same answer as a cold start, in fewer iterations
  np.testing.assert_allclose(x2, x3, atol=1e-7)
  np.testing.assert_allclose(y2, y3, atol=1e-6)
  assert it2 < it3


def test_reports_infeasible_and_nonconvex_qps(cxx: str, tmp_path: Path, osqp_sources: Path) -> None:
  P, A, q, lo, hi = random_qp(4, n=12)
  driver = Driver(P, A, cxx, tmp_path, osqp_sources, sanitize=False)
  # rows 4 (two-sided) and the box of x_0: contradictory bounds, x_0 in [-1, 1] and row 0 of G pinned far away
  lo_bad, hi_bad = lo.copy(), hi.copy()
  lo_bad[0] = hi_bad[0] = 1e3
  ((status, _, _, _),) = driver.solve((q, lo_bad, hi_bad, False, False))
  assert QPStatus.from_code(status) == "infeasible"
  # P negative definite on a variable only its box bounds: nonconvex however its multipliers go
  P_bad = P.copy()
  P_bad.data[P_bad.indices == np.repeat(np.arange(12), np.diff(P_bad.indptr))] -= 100.0
  driver.P = sp.csc_array(P_bad)
  ((status, _, _, _),) = driver.solve((q, lo, hi, False, False))
  assert QPStatus.from_code(status) == "nonconvex"


@pytest.mark.parametrize("name", ["hs071", "hs104", "hs113", "hs023"])
def test_sqp_solves_hock_schittkowski_problems_with_it(name: str) -> None:
  problem = BY_NAME[name]
  solver = sqp_function(problem, "hs_ipm", qp=SparseIPMOptions())
  res = solver(problem.x0, np.zeros(0), problem.lbx, problem.ubx, problem.lbg, problem.ubg)
  assert res.status in ("converged", "acceptable"), res.stats["message"]
  assert res.f == pytest.approx(problem.f_opt, rel=1e-6, abs=1e-8)
  assert violation(problem, res.x) <= 1e-6
  assert res.stats["qp_solver"] == res.stats["elastic_qp_solver"] == "sparse_ipm"


def test_the_restoration_phase_solves_its_elastic_qps_with_it() -> None:
  """hs015 from its published start: the second QP is inconsistent (its linearized constraints ask x1 >= 2 and
  x1 <= 0.5), so a restoration phase of elastic QPs (slacks priced at ~1e5, far from the interior point's naive
  start) leads back to the optimum."""
  problem = BY_NAME["hs015"]
  res = sqp_function(problem, "hs_ipm", qp=SparseIPMOptions())(problem.x0, np.zeros(0), problem.lbx, problem.ubx,
                                                                problem.lbg, problem.ubg)  # fmt: skip
  assert res.success and res.f == pytest.approx(problem.f_opt, rel=1e-6)
  assert res.stats["restoration"].any()
