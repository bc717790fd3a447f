"""Reference QPs of the QP layer: random OCP-structured QPs in `RiccatiQP`'s data layout, and the same QP in the
general sparse form an off-the-shelf solver takes (and OSQP's solution of it), to check solvers against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import osqp
import scipy.sparse as sp


def random_qp(rng: np.random.Generator, nx: int, nu: int, N: int, ng: int, ngN: int, pull: float) -> dict[str, Any]:
  """Stable-ish random dynamics, PD stage costs, a linear term `pull` driving states into box rows, general rows."""
  nz = nx + nu
  A = np.eye(nx) + 0.1 * rng.normal(size=(N, nx, nx))
  B = 0.1 * rng.normal(size=(N, nx, nu))
  c = 0.01 * rng.normal(size=(N, nx))
  M = rng.normal(size=(N, nz, nz))
  H = np.einsum("kij,klj->kil", M, M) / nz + 0.1 * np.eye(nz)
  g = pull * rng.normal(size=(N, nz))
  MN = rng.normal(size=(nx, nx))
  HN, gN = MN @ MN.T / nx + np.eye(nx), pull * rng.normal(size=nx)
  G = np.concatenate([np.eye(nz)[None].repeat(N, 0), rng.normal(size=(N, ng - nz, nz))], axis=1)
  lo, hi = -np.ones((N, ng)), np.ones((N, ng))
  lo[0, :nx], hi[0, :nx] = -np.inf, np.inf  # x_0 is fixed: no bounds on it
  lo[:, nz:], hi[:, nz:] = -1.5, 1.5
  GN = rng.normal(size=(ngN, nx))
  loN, hiN = -np.ones(ngN), np.full(ngN, np.inf)
  x0 = 0.5 * rng.uniform(-1, 1, size=nx)
  return dict(H=H, g=g, HN=HN, gN=gN, A=A, B=B, c=c, x0=x0, G=G, lo=lo, hi=hi, GN=GN, loN=loN, hiN=hiN)


def scenario_tree(branches: tuple[int, ...], depth: int) -> tuple[int, ...]:
  """The parents of a scenario tree: the root splits into branches[0] stages, each of those into branches[1], ...
  (robust horizon len(branches)), then every branch runs on alone to `depth` stages below the root; numbered branch
  by branch (depth first), so each parent comes before its stages and the last stage is a leaf."""
  parents = [-1]

  def grow(node: int, level: int) -> None:
    for _ in range(branches[level] if level < len(branches) else 1):
      parents.append(node)
      if level + 1 < depth:
        grow(len(parents) - 1, level + 1)

  grow(0, 0)
  return tuple(parents)


def sparse_form(d: Mapping[str, Any]) -> tuple[sp.csc_matrix, np.ndarray, sp.csc_matrix, np.ndarray, np.ndarray]:
  """The same QP in w = [x_0 .. x_N, u_0 .. u_{N-1}, u_N] in the general sparse form OSQP takes: (triu P, q, A, l, u),
  bounds clipped to ±1e30. With d["parents"] (RiccatiQP's), the stages form that tree."""
  N, nx, nu = d["B"].shape[0], d["B"].shape[1], d["B"].shape[2]
  nuN = d["HN"].shape[0] - nx
  nw = (N + 1) * nx + N * nu + nuN
  xi = lambda k: np.arange(k * nx, (k + 1) * nx)
  ui = lambda k: (N + 1) * nx + np.arange(k * nu, (k + 1) * nu)
  zN = np.concatenate([xi(N), (N + 1) * nx + N * nu + np.arange(nuN)])
  P, q = np.zeros((nw, nw)), np.zeros(nw)
  rows, lo, hi = [], [], []

  def row(entries: list[tuple[np.ndarray, np.ndarray]], low: float, high: float) -> None:
    r = np.zeros(nw)
    for idx, vals in entries:
      r[idx] += vals
    rows.append(r)
    lo.append(low)
    hi.append(high)

  for i in range(nx):
    row([(xi(0)[i : i + 1], np.ones(1))], d["x0"][i], d["x0"][i])
  for k in range(N):
    z = np.concatenate([xi(k), ui(k)])
    P[np.ix_(z, z)] += d["H"][k]
    q[z] += d["g"][k]
    src = d["parents"][k + 1] if len(d.get("parents", ())) else k  # transition k leads out of stage src
    for i in range(nx):
      row(
        [(xi(src), d["A"][k][i]), (ui(src), d["B"][k][i]), (xi(k + 1)[i : i + 1], -np.ones(1))],
        -d["c"][k][i],
        -d["c"][k][i],
      )
    for m in range(d["G"].shape[1]):
      row([(z, d["G"][k][m])], d["lo"][k][m], d["hi"][k][m])
  P[np.ix_(zN, zN)] += d["HN"]
  q[zN] += d["gN"]
  for m in range(d["GN"].shape[0]):
    row([(zN, d["GN"][m])], d["loN"][m], d["hiN"][m])
  return sp.csc_matrix(np.triu(P)), q, sp.csc_matrix(np.array(rows)), np.clip(lo, -1e30, 1e30), np.clip(hi, -1e30, 1e30)


def elastic_form(d: Mapping[str, Any]) -> tuple[sp.csc_matrix, np.ndarray, sp.csc_matrix, np.ndarray, np.ndarray]:
  """`sparse_form` with the elastic rows made explicit: each row of G (GN) with a price z > 0 (zN), or a price w > 0
  (wN) of its squared violation, gets two variables s_lo, s_hi >= 0 appended to the variables (row + s_lo - s_hi
  within its bounds, cost z (s_lo + s_hi) + w (s_lo² + s_hi²) / 2): an L1 and an L2 penalty on its violation."""
  P, q, A, lo, hi = sparse_form(d)
  N, nx, mg = d["B"].shape[0], d["B"].shape[1], d["G"].shape[1]
  per_row = lambda stage, final: np.concatenate(
    [np.zeros(nx)] + [np.concatenate([np.zeros(nx), stage[k]]) for k in range(N)] + [final]
  )
  prices = per_row(d["z"], d["zN"])
  squared = per_row(d["w"], d["wN"]) if "w" in d else np.zeros_like(prices)
  elastic = np.flatnonzero((prices > 0) | (squared > 0))
  n, e = A.shape[1], len(elastic)
  slack = sp.csc_matrix((np.concatenate([np.ones(e), -np.ones(e)]), (np.tile(elastic, 2), np.arange(2 * e))),
                        shape=(A.shape[0], 2 * e))  # fmt: skip
  A = sp.vstack([sp.hstack([A, slack]), sp.hstack([sp.csc_matrix((2 * e, n)), sp.eye(2 * e)])], format="csc")
  P = sp.block_diag([P, sp.diags(np.tile(squared[elastic], 2))], format="csc")
  q = np.concatenate([q, np.tile(prices[elastic], 2)])
  assert mg * N + nx * (N + 1) + len(d["zN"]) == len(prices)
  return P, q, A, np.concatenate([lo, np.zeros(2 * e)]), np.concatenate([hi, np.full(2 * e, 1e30)])


def osqp_solution(d: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The QP (in its `elastic_form` when d has prices z of elastic rows) solved by OSQP (its Python interface, eps
  1e-10, polished): (x, u, u_N).

  Raises:
    RuntimeError: OSQP did not solve and polish it.
  """
  N, nx, nu = d["B"].shape[0], d["B"].shape[1], d["B"].shape[2]
  solver = osqp.OSQP()
  solver.setup(
    *(elastic_form(d) if "z" in d else sparse_form(d)),
    eps_abs=1e-10,
    eps_rel=1e-10,
    polishing=True,
    verbose=False,
    max_iter=500000,
  )
  res = solver.solve(raise_error=False)
  if res.info.status != "solved" or res.info.status_polish != 1:
    raise RuntimeError(f"OSQP: {res.info.status}, polish status {res.info.status_polish}")
  nxs, nus = (N + 1) * nx, N * nu
  nuN = d["HN"].shape[0] - nx
  return res.x[:nxs].reshape(N + 1, nx), res.x[nxs : nxs + nus].reshape(N, nu), res.x[nxs + nus : nxs + nus + nuN]
