"""A solve's max_time reaches into its QPs: an interior point stops after the iteration under way and OSQP after a
chunk of ADMM iterations once the deadline passes, and the SQP then ends time_limit (no line search, no retries). The
clock is made deterministic: the generated code is built with ANVIL_NOW() reading a counter that advances 0.1 ms per
reading, in a subprocess with its own cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TICK = 1e-4
FAKE_CLOCK = f"inline double anvil_fake_now() {{ static double t = 0.0; return t += {TICK}; }}\n"

SCRIPT = """
import json, sys
import numpy as np
import anvil as av
from anvil import Arg, Tensor
from anvil.qp import OSQPOptions, SparseIPMOptions
from anvil.sqp import SQPFunction, SQPOptions

n, m = 12, 40
rng = np.random.default_rng(3)
A, target = rng.standard_normal((m, n)), 3.0 * rng.standard_normal(n)
# NOTE: the nearest point to `target` in a polytope, with a little nonlinearity: its first QP needs many iterations
f = av.NumericalFunction("tl_f", lambda x, p: ((x - Tensor(target)) ** 2).sum() + 0.01 * (x ** 4).sum(),
                         (Arg(n), Arg(0)))
g = av.NumericalFunction("tl_g", lambda x, p: Tensor(A) @ x, (Arg(n), Arg(0)))
out = {}
# NOTE: OSQP unpolished: its ADMM alone runs to the final tolerances, chunk after chunk
for name, qp in (("sparse_ipm", SparseIPMOptions()), ("osqp", OSQPOptions(polish=False))):
  solver = SQPFunction(f"tl_{name}", f, g, SQPOptions(qp=qp))
  args = (np.zeros(n), np.zeros(0), np.full(n, -np.inf), np.full(n, np.inf), np.full(m, -np.inf), np.ones(m))
  full = solver(*args)
  cut = solver(*args, max_time=float(sys.argv[1]))
  out[name] = {"full": [str(full.status), full.stats["qp_iterations"].tolist()],
               "cut": [str(cut.status), cut.stats["qp_iterations"].tolist(), list(map(str, cut.stats["qp_status"]))]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list]]:
  tmp = tmp_path_factory.mktemp("clock")
  (tmp / "fake_clock.hpp").write_text(FAKE_CLOCK)
  flags = f"-include {tmp / 'fake_clock.hpp'} -DANVIL_NOW()=anvil_fake_now()"
  env = {**os.environ, "ANVIL_CACHE_DIR": str(tmp / "cache"), "ANVIL_CXXFLAGS": flags}
  # NOTE: 8 readings of the clock end inside the first QP (its interior point's 7 iterations, OSQP's 290)
  run = subprocess.run([sys.executable, "-c", SCRIPT, str(8 * TICK)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
  assert run.returncode == 0, run.stderr[-3000:]
  return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("qp", ["sparse_ipm", "osqp"])
def test_a_qp_stops_at_the_solve_deadline(outcomes: dict[str, dict[str, list]], qp: str) -> None:
  (full_status, full_iterations), (status, iterations, qp_statuses) = outcomes[qp]["full"], outcomes[qp]["cut"]
  assert full_status == "converged"
  assert status == "time_limit"
  # NOTE: the QP under way when the time ran out stopped there (max_iterations), with fewer iterations than the same
  # QP took without a limit; the solve ended on it (no retry with more regularization, no restoration)
  stopped = len(iterations) - 1
  assert qp_statuses[stopped] == "max_iterations"
  assert 0 < iterations[stopped] < full_iterations[stopped]
