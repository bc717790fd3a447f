"""The P2 swing-up as a hand-written multiple-shooting NLP: defects g(w, x_init) and the Lagrangian, batched over
the N stages.

w = [x0, u0, x1, u1, ..., x_{N-1}, u_{N-1}, x_N]; g(w) = [x0 - x_init; x_{k+1} - F(x_k, u_k) for k = 0..N-1].
"""

from __future__ import annotations

import numpy as np
from tinygrad import Tensor

from anvil.problems import cartpole

NX, NU = cartpole.NX, cartpole.NU
STAGE = NX + NU
Q_DIAG = np.diag(cartpole.Q).copy()


def size(n: int) -> int:
  """Number of decision variables for a horizon of n stages."""
  return STAGE * n + NX


def defects(w: Tensor, x_init: Tensor, n: int) -> Tensor:
  """g(w) of size NX * (n + 1); the dynamics of all stages are one batched evaluation."""
  stages = w[: STAGE * n].reshape(n, STAGE)
  xs, us = stages[:, :NX], stages[:, NX:]
  following = w[NX + NU :].pad((0, NU)).reshape(n, STAGE)[:, :NX]  # x_1 .. x_N
  predicted = cartpole.step(xs.T, us.T).T
  return w[:NX].sub(x_init).cat((following - predicted).flatten())


def stage_cost(w: Tensor, n: int) -> Tensor:
  """Σ_k x_kᵀ Q x_k + R u_k² (no terminal cost)."""
  stages = w[: STAGE * n].reshape(n, STAGE)
  xs, us = stages[:, :NX], stages[:, NX:]
  return (xs * xs * Tensor(Q_DIAG)).sum() + cartpole.R * (us * us).sum()


def lagrangian(w: Tensor, x_init: Tensor, lam: Tensor, n: int) -> Tensor:
  """Σ stage costs + λᵀ g(w)."""
  return stage_cost(w, n) + (defects(w, x_init, n) * lam).sum()


def swing_up(n: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """The swing-up NLP's data: x_init = [0, pi, 0, 0], bounds |u| <= 20, |xc| <= 2, x_N = 0 (as bounds on w), and an
  initial guess interpolating linearly from x_init to 0. Returns (x_init, lbx, ubx, w0)."""
  x_init = np.array([0.0, np.pi, 0.0, 0.0])
  lbx, ubx = np.full(size(n), -np.inf), np.full(size(n), np.inf)
  lbx[NX : STAGE * n : STAGE], ubx[NX : STAGE * n : STAGE] = -20.0, 20.0
  lbx[0 : STAGE * n : STAGE], ubx[0 : STAGE * n : STAGE] = -2.0, 2.0
  lbx[STAGE * n :], ubx[STAGE * n :] = 0.0, 0.0
  w0 = np.zeros(size(n))
  for k in range(n + 1):
    w0[STAGE * k : STAGE * k + NX] = x_init * (1 - k / n)
  return x_init, lbx, ubx, w0


def defects_numpy(w: np.ndarray, x_init: np.ndarray, n: int) -> np.ndarray:
  """g(w) evaluated with numpy, stage by stage."""
  stages = w[: STAGE * n].reshape(n, STAGE)
  nxt = np.concatenate([stages[1:, :NX], w[STAGE * n :].reshape(1, NX)])
  pieces = [w[:NX] - x_init] + [nxt[k] - cartpole.step_numpy(stages[k, :NX], stages[k, NX:]) for k in range(n)]
  return np.concatenate(pieces)
