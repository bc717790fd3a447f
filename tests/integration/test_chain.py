"""The chain-of-masses MPC (P4, anvil.problems.chain) at nx = 21: its plan equals IPOPT's on the same NLP, and along
the closed loop its exact-Hessian SQP converges at Newton's rate, each QP solved as accurately as its iteration
needs (the interior point's residuals, its complementarity above all, become the next iterate's)."""

from __future__ import annotations

import numpy as np
import pytest

from anvil.mpc import MPCFunction
from anvil.problems import chain

N_MASS = 5


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  return chain.chain_mpc("test_chain5", N_MASS)


def test_the_plan_equals_ipopts(mpc: MPCFunction) -> None:
  pytest.importorskip("casadi")
  x0 = chain.initial_state(N_MASS)
  mpc.reset()
  sol = mpc(x0)
  nlp = chain.CasadiChain(N_MASS)
  ref = nlp.solve(nlp.ipopt(), x0)
  assert sol.status == "converged" and ref.success
  assert sol.cost == pytest.approx(ref.cost, rel=1e-8)
  # NOTE: the inputs of the stages where the chain swings most move by 1e-6 within a KKT tolerance of 1e-8
  np.testing.assert_allclose(sol.u, ref.u, atol=1e-5)
  np.testing.assert_allclose(sol.x, ref.x, atol=1e-6)


def test_a_warm_start_near_the_solution_converges_in_one_iteration(mpc: MPCFunction) -> None:
  """Steps whose shifted guess is within 5e-4 of the KKT conditions take one SQP iteration: the QP asks for e min(1e-2,
  e) of the KKT error e. With a fixed 1e-2 e every such step took two (the QP's complementarity, about 1e-8, left the
  iterate just short of the tolerance)."""
  plant, x = chain.step_numpy(N_MASS), chain.initial_state(N_MASS)
  mpc.reset()
  near = []
  for _ in range(chain.CLOSED_LOOP_STEPS):
    sol = mpc(x)
    assert sol.status == "converged"
    first = max(sol.stats["primal_infeasibility"][0], sol.stats["dual_infeasibility"][0])
    if first <= 5e-4:
      near.append(sol.iterations)
    x = plant(x, sol.u0)
  assert len(near) >= 8 and max(near) <= 1, near
