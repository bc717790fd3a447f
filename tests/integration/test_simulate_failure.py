"""`simulate` keeps the run when the plant fails: the trajectory up to the failing step, the step and the reason, and
the summary saying so. The controller is test_mpc's stabilizing cart-pole (its compiled library is shared)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from anvil.mpc import MPCFunction, simulate
from anvil.problems import cartpole
from anvil.problems import cartpole_mpc as cm
from tests.conftest import stabilizing_cartpole

FAILING_STEP = 3


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  """The shared stabilizing cart-pole controller."""
  return stabilizing_cartpole()


def failing_plant(fail: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray, np.ndarray], Any]:
  """The cart-pole, which at step FAILING_STEP returns fail(x_next) instead."""
  steps = [0]

  def plant(x: np.ndarray, u: np.ndarray) -> Any:
    x_next, steps[0] = cartpole.step_numpy(x, u), steps[0] + 1
    return fail(x_next) if steps[0] == FAILING_STEP + 1 else x_next

  return plant


def raise_error(x: np.ndarray) -> Any:
  raise RuntimeError("the plant's solver diverged")


FAILURES: dict[str, tuple[Callable[[np.ndarray], Any], str]] = {
  "nan": (lambda x: x * np.nan, r"the plant returned x_next contains NaN or inf \(x_next\[0\] = nan\)"),
  "inf": (lambda x: np.array([x[0], np.inf, x[2], x[3]]), r"x_next contains NaN or inf \(x_next\[1\] = inf\)"),
  "raises": (raise_error, "the plant raised RuntimeError: the plant's solver diverged"),
  "wrong shape": (lambda x: x[:3], r"the plant returned x_next of shape \(3,\), expected 4 values"),
  "not numbers": (lambda x: "diverged", "the plant returned x_next: cannot cast dtype <U8"),
}


@pytest.mark.parametrize(("fail", "reason"), FAILURES.values(), ids=FAILURES.keys())
def test_a_failing_plant_returns_the_run_up_to_the_failure(
  mpc: MPCFunction, fail: Callable[[np.ndarray], Any], reason: str
) -> None:
  healthy = simulate(mpc, cartpole.step_numpy, cm.X0_STABILIZE, FAILING_STEP)
  cl = simulate(mpc, failing_plant(fail), cm.X0_STABILIZE, 10)
  assert cl.failed_step == FAILING_STEP and cl.failure is not None
  assert healthy.failure is None and healthy.failed_step is None
  assert cl.x.shape == (FAILING_STEP + 1, 4) and cl.u.shape == (FAILING_STEP, 1)
  assert len(cl.statuses) == cl.stage_costs.size == cl.solve_times.size == cl.violations.size == FAILING_STEP
  np.testing.assert_array_equal(cl.x, healthy.x)
  np.testing.assert_array_equal(cl.u, healthy.u)
  assert cl.metrics["steps"] == FAILING_STEP
  assert re.search(reason, cl.failure) and f"stopped at step {FAILING_STEP}: {cl.failure}" in cl.summary()
  assert "stopped" not in healthy.summary()
