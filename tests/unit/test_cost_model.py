"""anvil.qp.cost_model: the multiply-adds it counts, and the block sizes it chooses."""

from __future__ import annotations

import itertools

import pytest

from anvil.qp.cost_model import RiccatiCostModel, _lower_product


def lower_product_by_blocks(rows: int, n: int) -> int:
  """anvil::dense::add_lower_product's multiply-adds, walked block by block: rows [first, first + 4) computed up to
  the block's last column, rows products each."""
  return sum(rows * (min(first + 4, n) - first) * min(first + 4, n) for first in range(0, n, 4))


@pytest.mark.parametrize("rows, n", [(1, 1), (3, 4), (5, 7), (21, 24), (45, 69)])
def test_counts_the_lower_products_block_by_block(rows: int, n: int) -> None:
  assert _lower_product(rows, n) == lower_product_by_blocks(rows, n)


def test_counts_one_stage_by_hand() -> None:
  """nx 2, nu 1 (entering the dynamics), one soft row on the states: per stage P [A B] 2 x 2 x 3, [A B]'(P [A B])
  on 2 rows of 3 entries each (one block of 3 rows: 3 x 3 entries), the input elimination 1 x 1 x 2 plus its update
  (one block of 2 rows by 2 columns), the soft row's Gram 3 x 3 / 2."""
  model = RiccatiCostModel(nx=2, nu=1, N=5, nud=1, state_rows=1)
  assert model.products(1) == 5 * (12 + 18 + 2 + 4 + 4.5)
  assert model.scalar(1) == 5 * (1 / 6 + 2)
  assert model.condensing(1) == (0.0, 0.0, 0)
  products, vectors, entries = model.condensing(5)  # one block: stages 1-4 inner
  assert products == sum(2 * 4 * (2 + j) + 2 * (2 + j) + _lower_product(2, 2 + j) + 2 * (2 + 5) for j in range(1, 5))
  assert vectors == 4 * 3 * 4
  assert entries == 7 * 7 + (7 + 5 + 4 * 2) * 7 + 2 * 7


def test_time_grows_with_the_horizon() -> None:
  short, long = (RiccatiCostModel(nx=12, nu=2, N=N, nud=2, state_rows=1) for N in (20, 40))
  for M in (1, 2, 4, 5):
    assert long.seconds(M) == pytest.approx(2 * short.seconds(M))


SIZES = list(itertools.product((2, 6, 15, 30, 48), (1, 3, 8), (0, 1, 4), (6, 40)))


def test_condenses_only_where_the_states_outnumber_the_inputs() -> None:
  for nx, nu, state_rows, N in SIZES:
    if nu >= nx:
      assert RiccatiCostModel(nx=nx, nu=nu, N=N, nud=nu, state_rows=state_rows).best() == 1
  assert RiccatiCostModel(nx=39, nu=3, N=40, nud=3, state_rows=1).best() >= 4
  assert RiccatiCostModel(nx=39, nu=3, N=40, nud=3, state_rows=1, iterations=1).best() < 4


def test_more_iterations_never_choose_smaller_blocks() -> None:
  """The condensing is paid once per solve, its savings every iteration."""
  for nx, nu, state_rows, N in SIZES:
    blocks = [RiccatiCostModel(nx=nx, nu=nu, N=N, nud=nu, state_rows=state_rows, iterations=its).best()
              for its in (1, 3, 10, 30)]  # fmt: skip
    assert blocks == sorted(blocks), (nx, nu, state_rows, N)


def test_the_search_stops_where_the_costs_grow() -> None:
  """best() tries block sizes from 1 up until the modeled time doubles: the same choice as every block size tried,
  and a horizon of 10^5 stages is searched in a few blocks."""
  for nx, nu, state_rows, N in SIZES:
    for its in (1, 10, 100):
      model = RiccatiCostModel(nx=nx, nu=nu, N=N, nud=nu, state_rows=state_rows, iterations=its)
      times = {M: model.seconds(M) for M in range(1, N + 1)}
      assert model.best() == min(M for M, t in times.items() if t <= min(times.values()) * 1.05)
  long = RiccatiCostModel(nx=10, nu=1, N=100_000, nud=1)
  assert long.best() == RiccatiCostModel(nx=10, nu=1, N=4000, nud=1).best() > 1


def test_dense_rows_shrink_blocks_and_inputs_outside_the_dynamics_grow_them() -> None:
  """Rows on the states turn dense once condensed (a Gram product per row, per block); inputs outside the dynamics
  (slacks) add no columns to a block's [A B], whose products grow with M the slower."""
  base = dict(nx=30, nu=6, N=40)
  assert RiccatiCostModel(**base, nud=6, state_rows=30).best() < RiccatiCostModel(**base, nud=6).best()
  assert RiccatiCostModel(**base, nud=2).best() > RiccatiCostModel(**base, nud=6).best()


@pytest.mark.parametrize(
  "kw, match",
  [
    (dict(nx=0), "nx must be an int >= 1"),
    (dict(nud=4), "nud must be at most nu = 3"),
    (dict(state_rows=-1), "state_rows must be an int >= 0"),
    (dict(rows=1.5), "rows must be an int >= 0"),
    (dict(iterations=float("nan")), "iterations must be a finite number > 0"),
    (dict(iterations=0), "iterations must be a finite number > 0"),
    (dict(iterations=True), "iterations must be a finite number > 0"),
  ],
)
def test_checks_its_arguments(kw: dict, match: str) -> None:
  with pytest.raises(ValueError, match=match):
    RiccatiCostModel(**{**dict(nx=4, nu=3, N=10, nud=3), **kw})
  with pytest.raises(ValueError, match=r"M must be an int in \[1, N = 10\]"):
    RiccatiCostModel(nx=4, nu=3, N=10, nud=3).seconds(11)
