"""An NLP shaped as a scenario tree (multi-stage robust MPC: a root, then branches that share it, each with its own
model parameter) given to SQPFunction with a StageLayout of parents: its QPs solved by the Riccati recursion over the
tree equal the general sparse solvers' (OSQP's, which ignores the structure); layouts that break the tree say so."""

from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor

import anvil as av
from anvil.problems.ocp_qp import scenario_tree
from anvil.qp import OSQPOptions, RiccatiOptions, StageLayout
from anvil.sqp import SQPFunction, SQPOptions

NX, NU, H = 2, 1, 0.1
MASSES = (1.0, 1.5, 0.7)  # one per branch: the uncertain parameter's values
DEPTH = 6


def tree_nlp(branches: tuple[int, ...]) -> tuple[av.NumericalFunction, av.NumericalFunction, StageLayout, dict]:
  """A pendulum driven by a force of unknown gain, over a scenario tree: every stage k < N holds [x_k; u_k] and the
  last stage x_N; the cost weighs each stage by the share of the scenarios through it; a leaf's input is fixed at 0
  by its bounds (it enters no dynamics)."""
  parents = scenario_tree(branches, DEPTH)
  N, nz = len(parents) - 1, NX + NU
  leaves = {k for k in range(N + 1) if k not in parents}
  branch = [0] * (N + 1)  # the scenario (a leaf's rank) each stage's own transition belongs to
  for rank, leaf in enumerate(sorted(leaves)):
    node = leaf
    while node > 0:
      branch[node] = rank
      node = parents[node]
  share = np.zeros(N + 1)
  for leaf in leaves:
    node = leaf
    while node >= 0:
      share[node] += 1 / len(leaves)
      node = parents[node]
  x = lambda w, k: w[k * nz : k * nz + NX]
  u = lambda w, k: w[k * nz + NX : k * nz + nz]

  def step(x: Tensor, u: Tensor, gain: float) -> Tensor:
    return Tensor.stack(x[0] + H * x[1], x[1] + H * (-2.0 * x[0].sin() + gain * u[0]))

  def cost(w: Tensor, x_init: Tensor) -> Tensor:
    terms = [float(share[k]) * (x(w, k) * x(w, k)).sum() for k in range(N + 1)]
    terms += [float(share[k]) * 0.1 * (u(w, k) * u(w, k)).sum() for k in range(N) if k not in leaves]
    return sum(terms[1:], terms[0])

  def constraints(w: Tensor, x_init: Tensor) -> Tensor:
    rows = [x(w, 0) - x_init]
    rows += [x(w, c) - step(x(w, parents[c]), u(w, parents[c]), MASSES[branch[c] % 3]) for c in range(1, N + 1)]
    return rows[0].cat(*rows[1:])

  args = (av.Arg(N * nz + NX), av.Arg(NX))
  tag = "_".join(map(str, branches))
  f = av.NumericalFunction(f"tree_nlp_f_{tag}", cost, args)
  g = av.NumericalFunction(f"tree_nlp_g_{tag}", constraints, args)
  variables = tuple((k, i) for k in range(N) for i in range(nz)) + tuple((N, i) for i in range(NX))
  rows = tuple(("initial", 0, i) for i in range(NX)) + tuple(("dynamics", c - 1, i) for c in range(1, N + 1)
                                                              for i in range(NX))  # fmt: skip
  layout = StageLayout(N=N, nx=NX, nu=NU, nuN=0, variables=variables, rows=rows, parents=parents)
  lbx, ubx = np.full(N * nz + NX, -np.inf), np.full(N * nz + NX, np.inf)
  for k in range(N):
    lbx[k * nz + NX], ubx[k * nz + NX] = (0.0, 0.0) if k in leaves else (-1.0, 1.0)
  problem = dict(lbx=lbx, ubx=ubx, lbg=np.zeros(NX * (N + 1)), ubg=np.zeros(NX * (N + 1)), parents=parents,
                 leaves=leaves, nz=nz)  # fmt: skip
  return f, g, layout, problem


@pytest.mark.parametrize("branches", [(3,), (2, 2)])
def test_the_tree_riccati_solves_a_scenario_tree_nlp_as_osqp_does(branches: tuple[int, ...]) -> None:
  f, g, layout, nlp = tree_nlp(branches)
  tag = "_".join(map(str, branches))
  tree = SQPFunction(f"tree_nlp_riccati_{tag}", f, g, SQPOptions(tol=1e-10, qp=RiccatiOptions()), stages=layout)
  reference = SQPFunction(f"tree_nlp_osqp_{tag}", f, g, SQPOptions(tol=1e-10, qp=OSQPOptions()))
  x_init = np.array([1.0, 0.0])
  bounds = (nlp["lbx"], nlp["ubx"], nlp["lbg"], nlp["ubg"])
  solved, expected = (
    tree(np.zeros(f.inputs[0].size), x_init, *bounds),
    reference(np.zeros(f.inputs[0].size), x_init, *bounds),
  )
  assert solved.success and expected.success and solved.stats["qp_solver"] == "riccati"
  np.testing.assert_allclose(solved.x, expected.x, atol=1e-7)
  np.testing.assert_allclose(solved.lam_g, expected.lam_g, atol=1e-6)
  nz, parents = nlp["nz"], nlp["parents"]
  first_inputs = [solved.x[c * nz + NX] for c in range(1, len(parents)) if parents[c] == 0]
  assert np.ptp(first_inputs) > 1e-3, "the branches' next inputs differ: each branch has its own"
  assert abs(solved.x[NX]) > 1e-3  # the root's input, shared by every branch, is one number


def test_a_layout_whose_dynamics_read_another_stage_than_the_parent_is_refused() -> None:
  f, g, layout, _ = tree_nlp((3,))
  wrong = list(layout.parents)
  wrong[1 + DEPTH] = DEPTH  # the second branch's first stage hung below the first branch's last
  bad = StageLayout(N=layout.N, nx=NX, nu=NU, nuN=0, variables=layout.variables, rows=layout.rows,
                    parents=tuple(wrong))  # fmt: skip
  with pytest.raises(ValueError, match=r"the dynamics row \d+ into stage 7 depends on stage 0"):
    SQPFunction("tree_nlp_bad", f, g, SQPOptions(qp=RiccatiOptions()), stages=bad).qp  # noqa: B018
  with pytest.raises(ValueError, match="StageLayout: parents must hold stage k's parent"):
    StageLayout(N=layout.N, nx=NX, nu=NU, nuN=0, variables=layout.variables, rows=layout.rows, parents=(-1, 0))
