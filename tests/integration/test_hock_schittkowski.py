"""SQPFunction on the Hock-Schittkowski problems (anvil.problems.hock_schittkowski): each solved from its published
starting point to its published optimum, feasible; IPOPT (CasADi) reaches the same optima, checking the data."""

from __future__ import annotations

import numpy as np
import pytest

from anvil.problems.hock_schittkowski import (
  BY_NAME,
  NUMPY,
  PROBLEMS,
  NLPProblem,
  ipopt_reference,
  sqp_function,
  violation,
)

#: Problems where anvil ends elsewhere than the published optimum, and why (both are local-method outcomes: another
#: local minimizer, and a first-order KKT point at a saddle that only second-order information would leave).
ANVIL_FAILURES = {
  "hs016": (
    "x0 = (-2, 1) is outside the bound x1 >= -0.5 and is moved onto it: from (-0.5, 1) the SQP converges in 5 "
    "iterations to the local minimizer (-0.5, 1/sqrt 2), f = 23.1447 (the bound and constraint 1 active, a strict "
    "local minimum), not to the published global one, f = 0.25, which IPOPT reaches from its interior start"
  ),
  "hs033": (
    "x0 has x2 = 0, a symmetry plane the iterates never leave: 'converged' to the saddle point (0, 0, 2), f = -4 "
    "(the optimum is (0, sqrt 2, sqrt 2))"
  ),
}


def anvil_cases() -> list[object]:
  """The problems, with the known failures marked xfail."""
  return [pytest.param(p, id=p.name, marks=[pytest.mark.xfail(strict=False, reason=ANVIL_FAILURES[p.name])]
                       if p.name in ANVIL_FAILURES else []) for p in PROBLEMS]  # fmt: skip


@pytest.mark.parametrize("problem", anvil_cases())
def test_anvil_reaches_the_published_optimum(problem: NLPProblem) -> None:
  res = sqp_function(problem)(problem.x0, np.zeros(0), problem.lbx, problem.ubx, problem.lbg, problem.ubg)
  assert res.status in ("converged", "acceptable"), res.stats["message"]
  assert res.f == pytest.approx(problem.f_opt, rel=1e-6, abs=1e-8)
  assert violation(problem, res.x) <= 1e-6


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.name for p in PROBLEMS])
def test_ipopt_reaches_the_published_optimum(problem: NLPProblem) -> None:
  pytest.importorskip("casadi")
  f, _, status = ipopt_reference(problem)
  assert status in ("Solve_Succeeded", "Solved_To_Acceptable_Level")
  assert f == pytest.approx(problem.f_opt, rel=1e-6, abs=1e-8)


def test_the_set() -> None:
  """At least 22 problems, uniquely named, with consistent sizes; the numpy form agrees with the bounds' sizes."""
  assert len(PROBLEMS) >= 22 and len({p.name for p in PROBLEMS}) == len(PROBLEMS)
  for p in PROBLEMS:
    assert p.x0.shape == p.lbx.shape == p.ubx.shape == (p.n,) and p.lbg.shape == p.ubg.shape == (p.m,)
    assert (p.constraints is None) == (p.m == 0)
    assert p.m == 0 or np.shape(p.constraints(p.x0, None, NUMPY)) == (p.m,)
    assert np.isfinite(violation(p, p.x0))


@pytest.mark.parametrize("name", ["hs026", "hs046"])
def test_degenerate_problems_end_acceptable(name: str) -> None:
  """hs026 and hs046 have a singular Hessian at the solution: convergence there is linear and the KKT error stalls
  above tol = 1e-8 but within acceptable_tol = 1e-6, so the solve ends "acceptable" (a success) at the optimum."""
  problem = BY_NAME[name]
  res = sqp_function(problem)(problem.x0, np.zeros(0), problem.lbx, problem.ubx, problem.lbg, problem.ubg)
  assert res.status == "acceptable" and res.success, res.stats["message"]
  assert res.f == pytest.approx(problem.f_opt, abs=1e-8) and violation(problem, res.x) <= 1e-6
  assert res.stats["dual_infeasibility"][-1] > 1e-8 or res.stats["primal_infeasibility"][-1] > 1e-8
