"""P2 multiple shooting (problems.md): defects g(w, x_init) and the Lagrangian, batched over the N stages.

w = [x0, u0, x1, u1, ..., x_{N-1}, u_{N-1}, x_N]; g(w) = [x0 - x_init; x_{k+1} - F(x_k, u_k) for k = 0..N-1].
"""

from __future__ import annotations

import numpy as np
from tinygrad import Tensor

from examples.models import cartpole

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


def defects_numpy(w: np.ndarray, x_init: np.ndarray, n: int) -> np.ndarray:
  """g(w) evaluated with numpy, stage by stage."""
  stages = w[: STAGE * n].reshape(n, STAGE)
  nxt = np.concatenate([stages[1:, :NX], w[STAGE * n :].reshape(1, NX)])
  pieces = [w[:NX] - x_init] + [nxt[k] - cartpole.step_numpy(stages[k, :NX], stages[k, NX:]) for k in range(n)]
  return np.concatenate(pieces)
