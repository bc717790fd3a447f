"""RiccatiQP: random OCP-structured QPs against OSQP at high accuracy, KKT residuals recomputed in numpy, statuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import osqp
import pytest

from anvil.problems.ocp_qp import osqp_solution, random_qp, scenario_tree, sparse_form
from anvil.qp import RiccatiQP
from anvil.qp.cost_model import COLD_ITERATIONS, RiccatiCostModel


def osqp_infeasible(d: dict[str, Any]) -> bool:
  """Whether OSQP (eps 1e-9) finds the QP primal infeasible."""
  solver = osqp.OSQP()
  solver.setup(*sparse_form(d), eps_abs=1e-9, eps_rel=1e-9, verbose=False, max_iter=200000)
  return solver.solve(raise_error=False).info.status == "primal infeasible"


def kkt_residuals(d: dict[str, Any], sol: Any) -> tuple[float, float]:
  """Stationarity and dynamics residuals recomputed in numpy from the returned primal and dual values (transition k
  leads into stage k + 1 from its parent, d["parents"][k + 1]; stage k in a chain)."""
  N, nx = d["B"].shape[0], d["B"].shape[1]
  parent = lambda node: d["parents"][node] if "parents" in d else node - 1
  stat = 0.0
  for k in range(N):
    z = np.concatenate([sol.x[k], sol.u[k]])
    r = d["H"][k] @ z + d["g"][k] + d["G"][k].T @ sol.lam[k]
    for e in (e for e in range(N) if parent(e + 1) == k):
      r += np.concatenate([d["A"][e].T, d["B"][e].T]) @ sol.pi[e]
    if k > 0:
      r[:nx] -= sol.pi[k - 1]
    stat = max(stat, np.abs(r if k else r[nx:]).max())
  zN = np.concatenate([sol.x[N], sol.uN])
  rN = d["HN"] @ zN + d["gN"] + d["GN"].T @ sol.lamN
  rN[:nx] -= sol.pi[N - 1]
  z = lambda k: (sol.x[parent(k + 1)], sol.u[parent(k + 1)])
  dyn = max(np.abs(d["A"][k] @ z(k)[0] + d["B"][k] @ z(k)[1] + d["c"][k] - sol.x[k + 1]).max() for k in range(N))
  return max(stat, np.abs(rN).max()), dyn


@pytest.mark.parametrize("branches,depth,nx,nu", [((3,), 4, 4, 2), ((2, 2), 5, 3, 1), ((4,), 1, 2, 2)])
def test_scenario_trees_match_osqp(branches: tuple[int, ...], depth: int, nx: int, nu: int) -> None:
  parents = scenario_tree(branches, depth)
  N, ng = len(parents) - 1, nx + nu + 1
  rng = np.random.default_rng(N)
  qp = RiccatiQP(f"riccati_tree_{N}_{nx}", nx, nu, N, ng=ng, ngN=1, parents=parents)
  assert qp.condensing == 1  # a tree is not condensed
  for pull in (0.1, 3.0):
    d = {**random_qp(rng, nx, nu, N, ng, 1, pull), "parents": parents}
    sol = qp(1e-10, **d)
    assert sol.status == "solved"
    x_ref, u_ref, _ = osqp_solution(d)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
    stat, dyn = kkt_residuals(d, sol)
    assert stat < 1e-8 and dyn < 1e-8
    as_chain = osqp_solution({k: v for k, v in d.items() if k != "parents"})[0]  # the data read as a chain
    assert np.abs(as_chain - sol.x).max() > 1e-3


def test_trees_are_checked() -> None:
  for parents in ((-1, 1, 0), (0, 0, 1), (-1, 0), (-1, 0, 2)):
    with pytest.raises(ValueError, match="parents must hold stage k's parent"):
      RiccatiQP("riccati_bad_tree", 2, 1, 2, parents=parents)
  with pytest.raises(ValueError, match=r"a tree of stages \(parents\) is not condensed"):
    RiccatiQP("riccati_bad_tree", 2, 1, 2, parents=(-1, 0, 1), condensing=2)


#: (nx, nu, N, extra rows): 9 inputs keep V in place of K (riccati::keeps_v: the rollout solves with L')
@pytest.mark.parametrize(
  "nx,nu,N,extra", [(4, 1, 30, 1), (2, 2, 10, 0), (6, 3, 20, 2), (3, 1, 50, 1), (12, 4, 8, 1), (5, 9, 10, 1)]
)
def test_random_qps_match_osqp(nx: int, nu: int, N: int, extra: int) -> None:
  rng = np.random.default_rng(nx * 100 + N)
  ng = nx + nu + extra
  qp = RiccatiQP(f"riccati_t_{nx}_{nu}_{N}", nx, nu, N, ng=ng, ngN=1)
  for pull in (0.1, 3.0):  # few and many active bounds
    d = random_qp(rng, nx, nu, N, ng, 1, pull)
    sol = qp(1e-10, **d)
    assert sol.status == "solved" and sol.iterations < 40
    x_ref, u_ref, _ = osqp_solution(d)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
    stat, dyn = kkt_residuals(d, sol)
    assert stat < 1e-8 and dyn < 1e-8
    z = np.concatenate([sol.x[:N], sol.u], axis=1)
    values = np.einsum("kmz,kz->km", d["G"], z)
    assert np.all(values >= d["lo"] - 1e-8) and np.all(values <= d["hi"] + 1e-8)
    # complementarity and signs: a multiplier is nonzero only at its bound, positive at an upper one
    assert np.all(np.where(sol.lam > 1e-7, np.abs(values - d["hi"]), 0.0) < 1e-6)
    assert np.all(np.where(sol.lam < -1e-7, np.abs(values - d["lo"]), 0.0) < 1e-6)
    if pull > 1:
      assert np.sum(np.abs(sol.lam) > 1e-6) >= 3, "the strong pull makes bounds active"


def test_rows_that_never_block_take_the_full_step() -> None:
  """An LQ problem (every row without bounds) is solved by its first Newton step: one iteration, equal to the KKT
  system's solution in numpy (the step is not cut short of 1 when no row stops it)."""
  rng = np.random.default_rng(7)
  nx, nu, N = 3, 2, 12
  qp = RiccatiQP("riccati_t_lq", nx, nu, N, ng=nx + nu + 1, ngN=1)
  d = random_qp(rng, nx, nu, N, nx + nu + 1, 1, 1.0)
  for key in ("lo", "loN"):
    d[key] = np.full_like(d[key], -np.inf)
  for key in ("hi", "hiN"):
    d[key] = np.full_like(d[key], np.inf)
  for scale in (1.0, 1e5):  # large data: the residuals are rounding's after one step
    scaled = {**d, "H": scale * d["H"], "g": scale * d["g"], "HN": scale * d["HN"], "gN": scale * d["gN"]}
    sol = qp(1e-8, **scaled)
    assert sol.status == "solved" and sol.iterations == 1
    x_ref, u_ref, _ = osqp_solution(scaled)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
    stat, dyn = kkt_residuals(scaled, sol)
    assert stat < 1e-8 * scale and dyn < 1e-10


def test_inputs_outside_the_dynamics_and_rows_without_bounds() -> None:
  """Inputs that enter no dynamics (nud < nu: the slacks of soft constraints) and rows with no bound at all (skipped by
  the iterations) give OSQP's solution; B's columns from nud on must be zero."""
  rng = np.random.default_rng(11)
  nx, nu, N, ng = 4, 3, 20, 9
  qp = RiccatiQP("riccati_t_nud", nx, nu, N, ng=ng, ngN=1, nud=1)
  for pull in (0.1, 3.0):
    d = random_qp(rng, nx, nu, N, ng, 1, pull)
    d["B"][:, :, 1:] = 0.0
    d["lo"][:, 1:nx], d["hi"][:, 1:nx] = -np.inf, np.inf  # rows without a bound, at every stage
    d["hi"][:, nz_row := nx + nu] = np.inf  # a general row with only its lower side
    sol = qp(1e-10, **d)
    assert sol.status == "solved"
    x_ref, u_ref, _ = osqp_solution(d)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
    assert np.all(sol.lam[:, 1:nx] == 0.0) and max(kkt_residuals(d, sol)) < 1e-8
    assert np.all(
      np.einsum("kz,kz->k", d["G"][:, nz_row], np.concatenate([sol.x[:N], sol.u], 1)) >= d["lo"][:, nz_row] - 1e-8
    )
  d["B"][3, 2, 2] = 1.0
  with pytest.raises(ValueError, match="B's columns from nud = 1 on must be zero"):
    qp(1e-10, **d)
  with pytest.raises(ValueError, match="nud must be an int in"):
    RiccatiQP("riccati_t_nud_bad", nx, nu, N, nud=4)


def test_a_warm_start_lifts_its_point_only_as_far_as_the_qp_changed() -> None:
  """A warm start floors the previous slacks and multipliers at the new QP's KKT residual there (within [tol, 1e-2]):
  after a tiny change of the gradient the solve takes one or two iterations (a fixed 1e-2 floor took 4), after a
  large one it still ends at OSQP's solution."""
  rng = np.random.default_rng(5)
  qp = RiccatiQP("riccati_t_warm_floor", 4, 1, 30, ng=6, ngN=1)
  d = random_qp(rng, 4, 1, 30, 6, 1, 3.0)
  for scale, most in ((1e-9, 2), (1e-6, 3), (1.0, 40)):
    changed = {**d, "g": d["g"] + scale * rng.normal(size=d["g"].shape)}
    assert qp(1e-10, **d).status == "solved"
    sol = qp(1e-10, warm_start=True, **changed)
    assert sol.status == "solved" and sol.iterations <= most, (scale, sol.iterations)
    x_ref, u_ref, _ = osqp_solution(changed)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)


def test_convex_qps_solved_to_1e_10_never_look_nonconvex() -> None:
  """Near the solution the slacks of active rows shrink and their weights l / t grow; without a floor on the
  complementarity target (1e-18 slacks, 1e20 weights) the Riccati recursion lost P to rounding and reported
  "nonconvex" for 12 of 240 of these convex QPs. They must all be solved."""
  rng = np.random.default_rng(7)
  qp = RiccatiQP("riccati_t_sweep", 4, 1, 30, ng=6, ngN=1)
  statuses = [qp(1e-10, **random_qp(rng, 4, 1, 30, 6, 1, 3.0 if i % 2 else 0.1)).status for i in range(30)]
  assert statuses == ["solved"] * 30


def test_statuses_nonconvex_and_infeasible() -> None:
  rng = np.random.default_rng(7)
  qp = RiccatiQP("riccati_t_status", 2, 1, 5, ng=3, ngN=0)
  d = random_qp(rng, 2, 1, 5, 3, 0, 0.1)
  d["H"] = d["H"].copy()
  d["H"][:, 2, 2] = -10.0  # negative curvature in u: the reduced Hessian is indefinite
  assert qp(1e-8, **d).status == "nonconvex"
  d = random_qp(rng, 2, 1, 5, 3, 0, 0.1)
  d["lo"], d["hi"] = d["lo"].copy(), d["hi"].copy()
  d["lo"][1:, 0], d["hi"][1:, 0] = 50.0, 60.0  # x_1[0] >= 50 cannot be reached from |x0| <= 0.5 with |u| <= 1
  assert qp(1e-8, **d).status == "infeasible"


def test_infeasible_equalities_end_with_a_status() -> None:
  """x_N = (5, 5) as true equalities: out of reach from |x_{N-1}| <= 1 with |u| <= 1 (OSQP agrees: primal
  infeasible), the interior point stops with "infeasible" after a few iterations; with wide bounds it is solved."""
  rng = np.random.default_rng(8)
  qp = RiccatiQP("riccati_t_status_eq", 2, 1, 5, ng=3, ngN=2)
  d = random_qp(rng, 2, 1, 5, 3, 2, 0.1)
  d["GN"], d["loN"], d["hiN"] = np.eye(2), np.full(2, 5.0), np.full(2, 5.0)
  assert osqp_infeasible(d)
  sol = qp(1e-8, **d)
  assert sol.status == "infeasible" and sol.iterations < 30 and sol.residuals[1] > 1e-3
  wide = qp(1e-8, **{**d, "lo": 100 * d["lo"], "hi": 100 * d["hi"]})
  assert wide.status == "solved" and np.abs(wide.x[-1] - 5.0).max() < 1e-8


def test_bad_data_raise() -> None:
  qp = RiccatiQP("riccati_t_bad", 2, 1, 3, ng=0, ngN=0)
  d = {k: np.zeros(v) for k, v in qp.shapes.items() if k not in ("G", "lo", "hi", "GN", "loN", "hiN")}
  with pytest.raises(ValueError, match="H must have shape"):
    qp(**{**d, "H": np.zeros((3, 2, 2))})
  with pytest.raises(TypeError, match="missing data field 'A'"):
    qp(**{k: v for k, v in d.items() if k != "A"})
  with pytest.raises(ValueError, match="nu must be"):
    RiccatiQP("riccati_t_bad2", 2, 0, 3)


@pytest.mark.parametrize("compiler", ["g++", "clang++"])
def test_module_compiles_warning_free(tmp_path: Any, compiler: str) -> None:
  import shutil
  import subprocess

  import anvil as av

  if shutil.which(compiler) is None:
    pytest.skip(f"{compiler} not installed")
  plain, terminal_inputs = (
    RiccatiQP("riccati_t_module", 4, 1, 10, ng=5, ngN=1),
    RiccatiQP("riccati_t_mod2", 3, 2, 4, nuN=2),
  )
  _, source = av.generate_module("riccati_module", [plain, terminal_inputs], out_dir=tmp_path)
  flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-c", str(source), "-o", str(tmp_path / "m.o")]
  proc = subprocess.run([compiler, *flags], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("nx,nu,N,extra", [(4, 1, 30, 1), (6, 3, 20, 2), (12, 4, 8, 1)])
def test_a_warm_start_whose_active_set_holds_takes_one_factorization(nx: int, nu: int, N: int, extra: int) -> None:
  """The next QP of a receding horizon (gradient and start nudged) keeps the last one's active set: the warm start
  pins those rows, drops the others and solves in one factorization (an active-set hot start), to OSQP's solution with
  exact complementarity; a change that moves the active set still ends there, by the interior point."""
  rng = np.random.default_rng(nx + N)
  qp = RiccatiQP(f"riccati_t_active_{nx}_{nu}_{N}", nx, nu, N, ng=nx + nu + extra, ngN=1)
  d = random_qp(rng, nx, nu, N, nx + nu + extra, 1, 3.0)
  for scale, one_step in ((1e-7, True), (0.3, False)):
    assert qp(1e-10, **d).status == "solved"
    nudged = {**d, "g": d["g"] * (1 + scale), "x0": d["x0"] * (1 + scale)}
    sol = qp(1e-10, warm_start=True, **nudged)
    assert sol.status == "solved" and (sol.iterations == 1) == one_step, (scale, sol.iterations)
    x_ref, u_ref, _ = osqp_solution(nudged)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
    stat, dyn = kkt_residuals(nudged, sol)
    assert stat < 1e-9 and dyn < 1e-9
    values = np.einsum("kmz,kz->km", nudged["G"], np.concatenate([sol.x[:N], sol.u], axis=1))
    # hard bounds hold exactly, not only up to the tolerance (an active one ends a margin inside, as an interior
    # point's solution does)
    assert np.all(values >= nudged["lo"]) and np.all(values <= nudged["hi"])
    assert np.sum(np.abs(sol.lam) > 1e-6) >= 3, "bounds are active"
    # complementarity: a multiplier times its row's distance to the bound it prices
    hi_gap = np.where(np.isfinite(nudged["hi"]), nudged["hi"] - values, 0.0)
    lo_gap = np.where(np.isfinite(nudged["lo"]), values - nudged["lo"], 0.0)
    assert np.all(np.abs(np.maximum(sol.lam, 0.0) * hi_gap) < 1e-9)
    assert np.all(np.abs(np.minimum(sol.lam, 0.0) * lo_gap) < 1e-9)


def test_warm_start_from_the_previous_solution() -> None:
  rng = np.random.default_rng(3)
  qp = RiccatiQP("riccati_t_warm", 4, 1, 30, ng=6, ngN=1)
  d = random_qp(rng, 4, 1, 30, 6, 1, 3.0)
  cold = qp(1e-10, **d)
  nudged = {**d, "g": d["g"] * 1.01, "x0": d["x0"] * 1.01}  # the next QP of an SQP or MPC: close to the last one
  warm = qp(1e-10, warm_start=True, **nudged)  # starts from the solution of d
  again_cold = qp(1e-10, **nudged)
  assert cold.status == again_cold.status == warm.status == "solved"
  np.testing.assert_allclose(warm.u, again_cold.u, atol=1e-7)
  np.testing.assert_allclose(warm.x, osqp_solution(nudged)[0], atol=1e-6)
  assert warm.iterations <= again_cold.iterations


def soft_terminal_qp(rng: np.random.Generator, nx: int, N: int) -> dict[str, Any]:
  """One input u and one slack s per stage (s enters no dynamics: B's column is 0), |u| <= 1, a path row a'z <= 0.2
  softened by s (a'z - s <= 0.2, s >= 0, cost 10 s + 50 s^2), x_N = 0 as true equalities (lo = hi), and a terminal
  row c'x_N >= 0.1 softened by the terminal input u_N (c'x_N + u_N >= 0.1, u_N >= 0, cost 5 u_N + 20 u_N^2)."""
  d = random_qp(rng, nx, 2, N, nx + 3, 1, 1.0)
  d["B"] = d["B"].copy()
  d["B"][:, :, 1] = 0.0
  d["H"], d["g"] = d["H"].copy(), d["g"].copy()
  d["H"][:, nx + 1, :], d["H"][:, :, nx + 1] = 0.0, 0.0
  d["H"][:, nx + 1, nx + 1], d["g"][:, nx + 1] = 100.0, 10.0
  d["G"] = d["G"].copy()
  d["G"][:, nx + 2, nx + 1] = -1.0
  d["lo"], d["hi"] = d["lo"].copy(), d["hi"].copy()
  d["lo"][:, nx + 1], d["hi"][:, nx + 1] = 0.0, np.inf  # s >= 0
  d["lo"][:, nx + 2], d["hi"][:, nx + 2] = -np.inf, 0.2
  d["lo"][:, :nx], d["hi"][:, :nx] = -np.inf, np.inf
  d["HN"] = np.block([[d["HN"], np.zeros((nx, 1))], [np.zeros((1, nx)), np.full((1, 1), 40.0)]])
  d["gN"] = np.append(d["gN"], 5.0)
  c = rng.normal(size=nx)
  d["GN"] = np.vstack([np.hstack([np.eye(nx), np.zeros((nx, 1))]), np.append(c, 1.0), np.append(np.zeros(nx), 1.0)])
  d["loN"], d["hiN"] = np.append(np.zeros(nx), [0.1, 0.0]), np.append(np.zeros(nx), [np.inf, np.inf])
  return d


def test_many_terminal_inputs_match_osqp() -> None:
  """Eight terminal inputs u_N (a stage of 8 inputs keeps V in place of K: its inputs' step solves with L') in the
  terminal cost with x_N and in a terminal row: OSQP's solution, u_N's included."""
  rng = np.random.default_rng(5)
  nx, nu, N, nuN = 3, 2, 6, 8
  qp = RiccatiQP("riccati_t_terminal_inputs", nx, nu, N, ng=nx + nu + 1, ngN=1, nuN=nuN)
  d = random_qp(rng, nx, nu, N, nx + nu + 1, 1, 3.0)
  MN = rng.normal(size=(nx + nuN, nx + nuN))
  d["HN"], d["gN"] = MN @ MN.T / (nx + nuN) + np.eye(nx + nuN), 3.0 * rng.normal(size=nx + nuN)
  d["GN"] = rng.normal(size=(1, nx + nuN))
  sol = qp(1e-10, **d)
  assert sol.status == "solved"
  x_ref, u_ref, uN_ref = osqp_solution(d)
  np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
  np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
  np.testing.assert_allclose(sol.uN, uN_ref, atol=1e-6)
  assert abs(float(d["GN"][0] @ np.concatenate([sol.x[N], sol.uN])) - d["loN"][0]) < 1e-6, "the terminal row is active"


@pytest.mark.parametrize("nx,N", [(4, 30), (2, 10), (6, 20)])
def test_true_equalities_and_soft_rows_match_osqp(nx: int, N: int) -> None:
  """Terminal x_N = 0 as lo = hi rows (true equalities: free multipliers, no slacks) and soft rows whose slacks are
  stage inputs (and a terminal input) agree with OSQP, at tol 1e-10, where lo = hi as two bounds stalls; instances
  OSQP finds infeasible (x_N = 0 out of reach) end with "infeasible"."""
  rng = np.random.default_rng(11)
  qp = RiccatiQP(f"riccati_t_soft_eq_{nx}_{N}", nx, 2, N, ng=nx + 3, ngN=nx + 2, nuN=1)
  solved, slack_used = 0, 0.0
  for _ in range(4):
    d = soft_terminal_qp(rng, nx, N)
    sol = qp(1e-10, **d)
    if osqp_infeasible(d):
      assert sol.status == "infeasible"
      continue
    assert sol.status == "solved" and sol.iterations < 40, (sol.status, sol.iterations)
    x_ref, u_ref, uN_ref = osqp_solution(d)
    np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
    np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
    np.testing.assert_allclose(sol.uN, uN_ref, atol=1e-6)
    assert np.abs(sol.x[N]).max() < 1e-10, "the terminal equality holds to the tolerance"
    stat, dyn = kkt_residuals(d, sol)
    assert stat < 1e-8 and dyn < 1e-8
    assert np.all(sol.u[:, 1] >= -1e-9) and sol.uN[0] >= -1e-9
    solved, slack_used = solved + 1, max(slack_used, sol.u[:, 1].max())
  assert solved >= 2 and slack_used > 1e-3, "most instances are feasible and some path row needs its slack"
  warm = qp(1e-10, warm_start=True, **{**d, "g": d["g"] * 1.01})
  assert warm.status == "solved"
  np.testing.assert_allclose(warm.u, osqp_solution({**d, "g": d["g"] * 1.01})[1], atol=1e-6)


@pytest.mark.parametrize("nx,nu,N", [(4, 1, 30), (3, 2, 12)])
def test_elastic_rows_match_the_explicit_l1_penalty(nx: int, nu: int, N: int) -> None:
  """Rows with a price z > 0 may be violated at z per unit: the same as slack variables v, w >= 0 on those rows with
  cost z (v + w), solved by OSQP. State boxes pushed out of reach (inconsistent, hard) become elastic and are
  violated as little as the price makes worth it; hard input boxes stay satisfied."""
  rng = np.random.default_rng(nx * 10 + nu)
  ng = nx + nu + 2
  qp = RiccatiQP(f"riccati_t_elastic_{nx}_{nu}", nx, nu, N, ng=ng, ngN=1)
  for price in (0.5, 50.0):
    d = random_qp(rng, nx, nu, N, ng, 1, 3.0)
    d["lo"][1:, 0], d["hi"][1:, 0] = d["x0"][0] + 5.0, d["x0"][0] + 6.0  # x[0] out of reach: a hard QP is infeasible
    assert qp(1e-10, **d).status == "infeasible"
    z = np.zeros((N, ng))
    z[:, :nx], z[:, nx + nu :] = price, price
    d["z"], d["zN"] = z, np.full(1, price)
    sol = solved_like_osqp(qp, d)
    assert np.all(np.abs(sol.lam[:, :nx]) <= price + 1e-8), "an elastic row's multiplier is at most its price"


def solved_like_osqp(qp: RiccatiQP, d: dict[str, Any]) -> Any:
  """qp's solution of d at tol 1e-10: solved, x and u as OSQP's (the elastic rows as explicit slacks), the input boxes
  hard; warm started for d with g nudged, OSQP's again; and nudged once more by 1e-7, whose active set (the violated
  sides included) holds, in one iteration."""
  sol = qp(1e-10, **d)
  assert sol.status == "solved" and sol.iterations < 60, (sol.status, sol.iterations)
  x_ref, u_ref, _ = osqp_solution(d)
  np.testing.assert_allclose(sol.x, x_ref, atol=1e-6)
  np.testing.assert_allclose(sol.u, u_ref, atol=1e-6)
  assert np.all(np.abs(sol.u) <= 1 + 1e-9), "the input boxes stay hard"
  nudged = {**d, "g": d["g"] * 1.01}
  warm = qp(1e-10, warm_start=True, **nudged)
  assert warm.status == "solved"
  np.testing.assert_allclose(warm.u, osqp_solution(nudged)[1], atol=1e-6)
  tiny = {**nudged, "g": nudged["g"] * (1 + 1e-7)}
  hot = qp(1e-10, warm_start=True, **tiny)
  assert hot.status == "solved" and hot.iterations == 1, (hot.status, hot.iterations)
  np.testing.assert_allclose(hot.x, osqp_solution(tiny)[0], atol=1e-6)
  np.testing.assert_allclose(hot.u, osqp_solution(tiny)[1], atol=1e-6)
  return sol


@pytest.mark.parametrize("z,w", [(0.5, 2.0), (50.0, 0.5), (0.0, 5.0)], ids=["l1+l2", "l1>>l2", "l2"])
def test_quadratic_prices_match_the_explicit_l1_l2_penalty(z: float, w: float) -> None:
  """quadratic_prices: a row's violation s costs z s + w s²/2 (HPIPM's soft constraints, the violation eliminated
  row by row: the stage sizes stay), the same as slack variables with those costs solved by OSQP; with w alone too.
  Out-of-reach state boxes and general rows are violated as the prices make worth it, input boxes stay hard."""
  nx, nu, N = 3, 2, 12
  rng = np.random.default_rng(5)
  ng = nx + nu + 2
  qp = RiccatiQP("riccati_t_quadratic", nx, nu, N, ng=ng, ngN=1, quadratic_prices=True)
  d = random_qp(rng, nx, nu, N, ng, 1, 3.0)
  d["lo"][1:, 0], d["hi"][1:, 0] = d["x0"][0] + 5.0, d["x0"][0] + 6.0  # x[0] out of reach: a hard QP is infeasible
  elastic = np.zeros((N, ng), dtype=bool)
  elastic[:, :nx], elastic[:, nx + nu :] = True, True
  d["z"], d["w"] = np.where(elastic, z, 0.0), np.where(elastic, w, 0.0)
  d["zN"], d["wN"] = np.full(1, z), np.full(1, w)
  sol = solved_like_osqp(qp, d)
  violation = np.maximum(d["lo"][1:, 0] - sol.x[1:N, 0], 0.0)
  assert violation.min() > 0.1, "every out-of-reach bound is violated"
  # an elastic side's multiplier prices its violation at the margin: z + w s
  np.testing.assert_allclose(np.abs(sol.lam[1:, 0]), z + w * violation, rtol=1e-6, atol=1e-8)


def test_prices_are_checked() -> None:
  qp = RiccatiQP("riccati_t_price_checks", 2, 1, 3, ng=3, ngN=1)
  d = random_qp(np.random.default_rng(0), 2, 1, 3, 3, 1, 1.0)
  with pytest.raises(ValueError, match=r"w \(prices of squared violations\) needs RiccatiQP\(quadratic_prices=True\)"):
    qp(**d, w=np.ones((3, 3)))
  with pytest.raises(ValueError, match="zN holds prices of violations: every entry must be >= 0"):
    qp(**d, zN=-np.ones(1))


def test_box_rows_implied_equal_the_stored_unit_rows() -> None:
  """boxes=True: the first nz rows of each stage (nzN at the last) bound the variables one by one and G, GN store
  only the rows after them. Same QPs (hard, then elastic), same solutions and multipliers as with the unit rows
  stored, and as OSQP's."""
  nx, nu, N, extra = 4, 2, 15, 2
  rng = np.random.default_rng(7)
  ng, ngN = nx + nu + extra, nx + 1
  stored = RiccatiQP("riccati_t_rows_stored", nx, nu, N, ng=ng, ngN=ngN)
  implied = RiccatiQP("riccati_t_rows_implied", nx, nu, N, ng=ng, ngN=ngN, boxes=True)
  assert implied.shapes["G"] == (N, extra, nx + nu) and implied.shapes["GN"] == (1, nx)
  for price in (0.0, 20.0):
    d = random_qp(rng, nx, nu, N, ng, 1, 3.0)
    d["GN"] = np.concatenate([np.eye(nx), d["GN"]])
    d["loN"], d["hiN"] = np.concatenate([np.full(nx, -0.8), d["loN"]]), np.concatenate([np.full(nx, 0.8), d["hiN"]])
    d["z"], d["zN"] = np.full((N, ng), price), np.full(ngN, price)
    reference = stored(1e-10, **d)
    sol = implied(1e-10, **{**d, "G": d["G"][:, nx + nu :], "GN": d["GN"][nx:]})
    assert reference.status == sol.status == "solved"
    assert np.sum(np.abs(sol.lam[:, : nx + nu]) > 1e-6) >= 3, "box rows are active"
    for field in ("x", "u", "pi", "lam", "lamN"):
      np.testing.assert_allclose(getattr(sol, field), getattr(reference, field), atol=1e-8, err_msg=field)
    if price == 0.0:
      np.testing.assert_allclose(sol.u, osqp_solution(d)[1], atol=1e-6)
  with pytest.raises(ValueError, match="boxes=True needs"):
    RiccatiQP("riccati_t_rows_few", nx, nu, N, ng=nx, boxes=True)


def same_solution(a: Any, b: Any, atol: float) -> None:
  """a and b agree: status, primal, dynamics and row multipliers, terminal inputs."""
  assert a.status == b.status == "solved"
  for field in ("x", "u", "uN", "pi", "lam", "lamN"):
    np.testing.assert_allclose(getattr(a, field), getattr(b, field), atol=atol, err_msg=field)


@pytest.mark.parametrize("M", [2, 3, 5])
def test_partial_condensing_solves_the_same_qp(M: int) -> None:
  """condensing=M (blocks of M stages; N = 13, so the last block is padded where M does not divide it) gives the
  stage solver's solution and multipliers, the inner states' dynamics multipliers recovered by stationarity (KKT
  residuals recomputed in numpy): soft rows whose slacks are inputs outside the dynamics, a terminal input and true
  equalities; implied box rows with elastic rows priced L1 + L2; warm starts; an inconsistent QP's status."""
  rng = np.random.default_rng(M)
  nx, N = 4, 13
  kw: dict[str, Any] = dict(ng=nx + 3, ngN=nx + 2, nuN=1, nud=1)
  stages = RiccatiQP("riccati_t_cond_soft", nx, 2, N, **kw)
  blocks = RiccatiQP(f"riccati_t_cond_soft_{M}", nx, 2, N, condensing=M, **kw)
  solved = 0
  while solved < 2:  # instances where x_N = 0 is out of reach end infeasible, in both
    d = soft_terminal_qp(rng, nx, N)
    reference, sol = stages(1e-10, **d), blocks(1e-10, **d)
    assert sol.status == reference.status
    if sol.status == "solved":
      same_solution(sol, reference, 1e-6)
      stat, dyn = kkt_residuals(d, sol)
      assert stat < 1e-8 and dyn < 1e-8
      solved += 1
  nudged = {**d, "g": d["g"] * 1.01, "x0": d["x0"] * 0.99}
  same_solution(blocks(1e-10, warm_start=True, **nudged), stages(1e-10, **nudged), 1e-6)

  nu, ng = 2, nx + 2 + 2
  kw = dict(ng=ng, ngN=nx + 1, boxes=True, quadratic_prices=True)
  stages = RiccatiQP("riccati_t_cond_boxes", nx, nu, N, **kw)
  blocks = RiccatiQP(f"riccati_t_cond_boxes_{M}", nx, nu, N, condensing=M, **kw)
  d = random_qp(rng, nx, nu, N, ng, 1, 3.0)
  d["lo"][1:, 0], d["hi"][1:, 0] = d["x0"][0] + 5.0, d["x0"][0] + 6.0  # out of reach: hard, the QP is infeasible
  d["G"] = d["G"][:, nx + nu :]
  d["loN"], d["hiN"] = np.append(np.full(nx, -2.0), d["loN"]), np.append(np.full(nx, 2.0), d["hiN"])
  assert blocks(1e-10, **d).status == stages(1e-10, **d).status == "infeasible"
  d["z"], d["w"] = np.full((N, ng), 1.0), np.full((N, ng), 2.0)
  d["z"][:, nx : nx + nu] = d["w"][:, nx : nx + nu] = 0.0  # the input boxes stay hard
  reference, sol = stages(1e-10, **d), blocks(1e-10, **d)
  assert reference.status == "solved" and np.abs(sol.lam[:, 0]).max() > 1e-3, "an elastic row is violated"
  same_solution(sol, reference, 1e-6)


def test_partial_condensing_reads_no_row_of_an_earlier_qp() -> None:
  """A condensed block's rows are written where they have a bound and never read where they have none (the inner
  states' box rows of an OCP whose states are free: most of a block's rows), so nothing an earlier QP left in them
  counts: a condensed solver that solved QPs with other rows bounded (every state at every stage, then no state, then
  one state at a few stages; inputs outside the dynamics) gives each time the stage solver's solution and the bits of
  a solver with a fresh workspace."""
  rng = np.random.default_rng(7)
  nx, nu, nud, N, M = 4, 3, 2, 11, 3
  ng = nx + nu + 2
  kw: dict[str, Any] = dict(ng=ng, ngN=nx + 1, boxes=True, nud=nud)
  stages = RiccatiQP("riccati_t_cond_rows", nx, nu, N, **kw)
  used = RiccatiQP(f"riccati_t_cond_rows_{M}", nx, nu, N, condensing=M, **kw)
  bounded = random_qp(rng, nx, nu, N, ng, 1, 3.0)
  bounded["G"] = bounded["G"][:, nx + nu :]
  bounded["loN"], bounded["hiN"] = (
    np.append(np.full(nx, -2.0), bounded["loN"]),
    np.append(np.full(nx, 2.0), bounded["hiN"]),
  )
  bounded["B"][:, :, nud:] = 0.0
  free = {**bounded, "lo": bounded["lo"].copy(), "hi": bounded["hi"].copy()}
  free["lo"][:, :nx], free["hi"][:, :nx] = -np.inf, np.inf
  some = {**free, "lo": free["lo"].copy(), "hi": free["hi"].copy()}
  some["lo"][2::4, 0] = stages(1e-10, **free).x[2:N:4, 0] + 0.02  # a state pushed up from where it goes when free
  for d in (bounded, free, some, bounded):
    sol = used(1e-10, **d)
    same_solution(sol, stages(1e-10, **d), 1e-6)
    fresh = RiccatiQP(f"riccati_t_cond_rows_{M}", nx, nu, N, condensing=M, **kw)(1e-10, **d)
    assert sol.iterations == fresh.iterations
    for field in ("x", "u", "pi", "lam", "lamN"):
      np.testing.assert_array_equal(getattr(sol, field), getattr(fresh, field), err_msg=field)
  assert np.abs(used(1e-10, **some).lam[2::4, 0]).max() > 1e-3, "a bound on an inner state is active"


@pytest.mark.parametrize("M", [2, 4])
def test_partial_condensing_of_weighted_squares(M: int) -> None:
  """Stage costs of weighted squares (a diagonal Hessian), others with a dense state block but no input-state cross
  terms, others dense, mixed along the horizon: the condensing's shortcuts for the zero blocks give the stage
  solver's solution (KKT residuals recomputed in numpy), and the same bits as the full products: 1e-300 off the
  diagonal of Q or in S takes the full products, whose terms in 1e-300 vanish in every sum."""
  rng = np.random.default_rng(10 + M)
  nx, nu, N, ng = 5, 2, 11, 9
  kw: dict[str, Any] = dict(ng=ng, ngN=1)
  stages = RiccatiQP("riccati_t_cond_squares", nx, nu, N, **kw)
  blocks = RiccatiQP(f"riccati_t_cond_squares_{M}", nx, nu, N, condensing=M, **kw)
  d = random_qp(rng, nx, nu, N, ng, 1, 2.0)
  for k in range(N):
    if k % 3 == 0:
      d["H"][k] = np.diag(rng.uniform(0.5, 2.0, nx + nu))
    elif k % 3 == 1:
      d["H"][k][nx:, :nx] = d["H"][k][:nx, nx:] = 0.0
  reference, sol = stages(1e-10, **d), blocks(1e-10, **d)
  same_solution(sol, reference, 1e-6)
  stat, dyn = kkt_residuals(d, sol)
  assert stat < 1e-8 and dyn < 1e-8
  d["H"] = np.array([np.diag(rng.uniform(0.5, 2.0, nx + nu)) for _ in range(N)])
  squares = blocks(1e-10, **d)
  off_q, in_s = np.zeros((nx + nu, nx + nu)), np.zeros((nx + nu, nx + nu))
  off_q[:nx, :nx] = 1.0 - np.eye(nx)
  in_s[nx:, :nx], in_s[:nx, nx:] = 1.0, 1.0
  for tiny in (off_q, in_s):
    products = blocks(1e-10, **{**d, "H": d["H"] + 1e-300 * tiny})
    assert squares.iterations == products.iterations
    for field in ("x", "u", "pi", "lam", "lamN"):
      np.testing.assert_array_equal(getattr(squares, field), getattr(products, field), err_msg=field)


def test_partial_condensing_is_checked_and_chosen_by_the_cost_model() -> None:
  """condensing="auto": the block size RiccatiCostModel predicts fastest for cold solves, given the QP's rows (with
  boxes, the rows after them are taken to be on the states; without, every row); a tree is never condensed."""
  for bad in (11, 0, "some", 2.0):
    with pytest.raises(ValueError, match='condensing must be "auto" or an int in'):
      RiccatiQP("riccati_t_cond_bad", 2, 1, 10, condensing=bad)  # type: ignore[arg-type]
  auto = lambda nx, nu, N, **kw: RiccatiQP("riccati_t_cond_auto", nx, nu, N, **kw).condensing
  model = lambda nx, nu, N, **kw: RiccatiCostModel(nx=nx, nu=nu, N=N, iterations=COLD_ITERATIONS, **kw).best()
  boxed = lambda nx, nu, general: dict(ng=nx + nu + general, ngN=nx, boxes=True)
  for nx, nu, N in ((9, 3, 40), (21, 3, 40), (39, 3, 40), (39, 3, 4), (30, 6, 30), (16, 2, 50)):
    assert auto(nx, nu, N, **boxed(nx, nu, 1)) == model(nx, nu, N, nud=nu, state_rows=1)
    assert auto(nx, nu, N, **boxed(nx, nu, 1), nud=1) == model(nx, nu, N, nud=1, state_rows=1)
    assert auto(nx, nu, N, ng=nx + nu) == model(nx, nu, N, nud=nu, state_rows=nx + nu, rows=nx + nu)
  assert auto(9, 3, 40, **boxed(9, 3, 1)) == 1 < auto(39, 3, 40, **boxed(39, 3, 1)) <= 40
  assert auto(39, 3, 4, **boxed(39, 3, 1)) <= 4
  assert auto(39, 3, 40, ng=42) < auto(39, 3, 40, **boxed(39, 3, 0)), "rows on the states: smaller blocks"
  assert auto(39, 3, 40, ng=1, ngN=1, parents=(-1, *range(40))) == 1
