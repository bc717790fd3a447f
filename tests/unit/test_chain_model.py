"""The chain of masses (anvil.problems.chain, P4): its model against an independent vectorized numpy formulation, its
rest state, its sizes, and the traced model against the numpy plant."""

from __future__ import annotations

import numpy as np
import pytest

from anvil.mpc import rk4
from anvil.problems import chain
from anvil.problems.backend import NUMPY, TINYGRAD


def reference_ode(x: np.ndarray, u: np.ndarray, n_mass: int) -> np.ndarray:
  """x' written with (M + 1, 3) arrays: spring i between mass i - 1 (the origin for i = 0) and mass i."""
  M = n_mass - 2
  positions = x[: 3 * (M + 1)].reshape(M + 1, 3)
  d = positions - np.vstack([np.zeros(3), positions[:-1]])
  forces = chain.SPRING * (1 - chain.REST_LENGTH / np.linalg.norm(d, axis=1, keepdims=True)) * d
  accelerations = (forces[1:] - forces[:-1]) / chain.MASS - np.array([0.0, 0.0, chain.GRAVITY])
  return np.concatenate([x[3 * (M + 1) :], u, accelerations.reshape(-1)])


@pytest.mark.parametrize("n_mass", [3, 5, 8])
def test_the_model_matches_a_vectorized_formulation(n_mass: int) -> None:
  rng = np.random.default_rng(n_mass)
  x, u = chain.initial_state(n_mass) + 0.1 * rng.standard_normal(chain.state_size(n_mass)), rng.standard_normal(3)
  np.testing.assert_allclose(chain.ode(x, u, n_mass, NUMPY), reference_ode(x, u, n_mass), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("n_mass", [3, 4, 5, 6, 8])
def test_the_rest_state_is_an_equilibrium_with_the_last_mass_placed(n_mass: int) -> None:
  M, x_rest = n_mass - 2, chain.rest_state(n_mass)
  assert x_rest.shape == (3 * (2 * M + 1),) == (chain.state_size(n_mass),)
  np.testing.assert_allclose(x_rest[3 * M : 3 * M + 3], [chain.REST_LENGTH * (M + 1) * 6, 0.0, 0.0])
  np.testing.assert_allclose(reference_ode(x_rest, np.zeros(3), n_mass), 0.0, atol=1e-12)
  assert np.all(x_rest[2 : 3 * M : 3] < 0), "the intermediate masses hang below the line between the ends"


def test_sizes_and_bad_sizes() -> None:
  assert [chain.state_size(n) for n in chain.SIZES] == [9, 15, 21, 27, 39]
  with pytest.raises(ValueError, match="n_mass"):
    chain.state_size(2)


def test_the_traced_model_is_the_numpy_plant() -> None:
  """F as anvil builds it (RK4 of the ODE traced with tinygrad) against the numpy plant the closed loops use."""
  n_mass, nx = 3, chain.state_size(3)
  F = rk4("test_chain_F", lambda x, u: chain.ode(x, u, n_mass, TINYGRAD), chain.TS, nx=nx, nu=3, steps=chain.RK4_STEPS)
  x, u = chain.initial_state(n_mass), np.array([0.3, -0.2, 0.1])
  np.testing.assert_allclose(F(x, u), chain.step_numpy(n_mass)(x, u), rtol=1e-13, atol=1e-13)
