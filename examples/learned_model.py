"""A learned model as MPC dynamics: fit an MLP to cart-pole data with numpy/scipy, then control the true cart-pole.

The model is a residual network x_next = x + MLP(x, u) (5 -> 32 -> 32 -> 4, tanh), fitted by L-BFGS-B on samples of
the P2 RK4 step around the upright. Its weights become constants of a tinygrad function, so the MPC (the P2
stabilizing one, with the learned model in place of the RK4 step) differentiates and compiles it like any model.

Run: `python examples/learned_model.py [--out DIR] [--steps K]`. Prints the fit error on held-out data, the
closed-loop metrics on the true plant and the cost compared with the true-model MPC's, and plots the run.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the fit's small matrix products are fastest on one thread

import numpy as np
from scipy.optimize import minimize
from tinygrad import Tensor

from anvil import Arg, NumericalFunction
from anvil.mpc import MPCFunction, plot_closed_loop, simulate
from anvil.problems import cartpole

from cartpole_stabilize import COST, NAMES, STEPS, X0, bounds, stage_cost, terminal_cost
from cli import example_arguments

ROOT = Path(__file__).resolve().parent.parent

#: The sampling box around the upright: half-widths of xc, theta, xc_dot, theta_dot and the force u.
BOX = np.array([1.0, 0.8, 2.5, 4.0, 20.0])
SIZES = (5, 32, 32, 4)


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """n uniform samples z = (x, u) in BOX and their targets x_next - x from the true RK4 step."""
  z = rng.uniform(-BOX, BOX, size=(n, 5))
  dx = np.array([cartpole.step_numpy(zi[:4], zi[4:]) - zi[:4] for zi in z])
  return z, dx


def unpack(theta: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
  """The (W, b) of each layer from the flat parameter vector."""
  layers, i = [], 0
  for n_in, n_out in itertools.pairwise(SIZES):
    W = theta[i : i + n_out * n_in].reshape(n_out, n_in)
    b = theta[i + n_out * n_in : i + n_out * (n_in + 1)]
    layers.append((W, b))
    i += n_out * (n_in + 1)
  return layers


def loss_and_gradient(theta: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
  """Mean squared error of the MLP on (z, y), all normalized, and its gradient (backpropagation)."""
  (W1, b1), (W2, b2), (W3, b3) = unpack(theta)
  h1 = np.tanh(z @ W1.T + b1)
  h2 = np.tanh(h1 @ W2.T + b2)
  r = h2 @ W3.T + b3 - y
  g3 = 2 * r / r.size
  g2 = (g3 @ W3) * (1 - h2**2)
  g1 = (g2 @ W2) * (1 - h1**2)
  grads = [g1.T @ z, g1.sum(0), g2.T @ h1, g2.sum(0), g3.T @ h2, g3.sum(0)]
  return float((r**2).mean()), np.concatenate([g.ravel() for g in grads])


def fit(z: np.ndarray, dx: np.ndarray, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
  """Fit the MLP to dx = MLP(z); returns its layers with the input and output normalization folded in."""
  scale = dx.std(0)
  zn, yn = z / BOX, dx / scale
  theta0 = np.concatenate([np.append(rng.normal(0, i**-0.5, o * i), np.zeros(o)) for i, o in itertools.pairwise(SIZES)])
  res = minimize(loss_and_gradient, theta0, args=(zn, yn), jac=True, method="L-BFGS-B", options={"maxiter": 2000})
  (W1, b1), (W2, b2), (W3, b3) = unpack(res.x)
  return [(W1 / BOX, b1), (W2, b2), (scale[:, None] * W3, scale * b3)]


def mlp(layers: list[tuple[np.ndarray, np.ndarray]], z: np.ndarray) -> np.ndarray:
  """The MLP, in numpy, on the rows of z."""
  for W, b in layers[:-1]:
    z = np.tanh(z @ W.T + b)
  W, b = layers[-1]
  return z @ W.T + b


def main() -> None:
  """Fit the model, build the MPC on it, run `--steps` steps of 0.05 s on the true cart-pole, report and plot."""
  args = example_arguments(__doc__, STEPS)

  rng = np.random.default_rng(0)
  start = time.perf_counter()
  z, dx = make_data(4000, rng)
  layers = fit(z, dx, rng)
  print(f"fitted {sum(W.size + b.size for W, b in layers)} weights in {time.perf_counter() - start:.1f} s")
  z_test, dx_test = make_data(5000, rng)
  err = mlp(layers, z_test) - dx_test
  rms = ", ".join(f"{n} {e:.1e}" for n, e in zip(NAMES, np.sqrt((err**2).mean(0)), strict=True))
  print(f"held-out error of x_next: RMS {rms}; max {np.abs(err).max():.1e}")

  (W1, b1), (W2, b2), (W3, b3) = [(Tensor(W), Tensor(b)) for W, b in layers]

  def learned_step(x: Tensor, u: Tensor) -> Tensor:
    """x_next = x + MLP(x, u), the fitted weights as constants."""
    h = (W1 @ x.cat(u) + b1).tanh()
    h = (W2 @ h + b2).tanh()
    return x + W3 @ h + b3

  x_bounds, u_bounds = bounds()
  mpc = MPCFunction(
    "cartpole_learned",
    dynamics=NumericalFunction("cartpole_learned_F", learned_step, (Arg(4), Arg(1))),
    stage_cost=stage_cost("cartpole_learned_l"),
    terminal_cost=terminal_cost("cartpole_learned_lN"),
    horizon=30,
    x_bounds=x_bounds,
    u_bounds=u_bounds,
  )
  start = time.perf_counter()
  mpc.reset()  # the first use builds the controller (trace, generate, compile) or loads it from the cache
  print(f"build: {time.perf_counter() - start:.1f} s")
  cl = simulate(mpc, cartpole.step_numpy, X0, args.steps)
  print(cl.summary())
  error = cl.cost - COST
  print(f"closed-loop cost on the true plant {cl.cost:.6f}; the true-model MPC's {COST:.6f} "
        f"({STEPS} steps): relative difference {error / COST:+.2%}")  # fmt: skip
  print(f"plot: {plot_closed_loop(cl, args.out / 'learned_model.png', cartpole.H, NAMES)}")


if __name__ == "__main__":
  main()
