"""Multi-stage robust MPC's uncertainty (`Scenarios`) and the tree of stages it spans (`ScenarioTree`).

The uncertain components of the model's parameter p take one of S values. Over the first `robust_horizon` stages the
tree splits S ways at every stage (every combination of the values, in turn); after that each branch keeps its last
value to the end of the horizon. Every node of the tree has its own states and inputs: a node's input is decided
knowing the values met on the way to it and no later one (non-anticipativity by construction: the branches share the
nodes before they split, so the first input is one, whatever the values turn out to be). The cost is the weighted
sum of the branches' costs (a node's weight is the sum of the weights of the branches through it), as do-mpc's.

The nodes are numbered depth first, branch by branch: each node's parent comes before it and the last node is a leaf
(`anvil.qp.StageLayout.parents`, the Riccati recursion over the tree). A chain (`ScenarioTree.chain`) is the tree of
nominal MPC: node k at depth k, weight 1, one leaf.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray

from anvil.validation import float_array

F64 = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Scenarios:
  """The values the uncertain components of the model's parameter p may take (multi-stage robust MPC).

  Args:
    values: (S, n) the S values of the n uncertain components (`Scenarios.grid` makes every combination of values
      given per component, as do-mpc's `set_uncertainty_values`).
    indices: the components of p they replace (default: all of p, n = np).
    weights: (S,) each value's probability (positive; normalized to sum 1), default equal.
    robust_horizon: the stages over which the tree splits (do-mpc's n_robust; S^robust_horizon branches).

  Example:
    >>> Scenarios.grid([950.0, 1235.0, 665.0], [7.0, 9.1, 4.9], indices=(0, 1))  # 9 scenarios, as do-mpc's
  """

  values: ArrayLike
  indices: tuple[int, ...] | None = None
  weights: ArrayLike | None = None
  robust_horizon: int = 1

  def __post_init__(self) -> None:
    values = float_array("Scenarios", "values", self.values, None, finite=True)
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 1:
      raise ValueError(f"Scenarios: values must have shape (S, n): S values of n uncertain components, got "
                       f"{values.shape}")  # fmt: skip
    object.__setattr__(self, "values", values)
    if self.indices is not None:
      indices = tuple(self.indices)
      if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in indices) or len(set(indices)) != len(
        indices
      ):
        raise ValueError(f"Scenarios: indices must be distinct ints >= 0 (components of p), got {self.indices!r}")
      if len(indices) != values.shape[1]:
        raise ValueError(f"Scenarios: {len(indices)} indices for values of {values.shape[1]} components")
      object.__setattr__(self, "indices", indices)
    weights = np.full(values.shape[0], 1.0) if self.weights is None else self.weights
    weights = float_array("Scenarios", "weights", weights, (values.shape[0],), finite=True)
    if np.any(weights <= 0):
      raise ValueError("Scenarios: weights must be positive")
    object.__setattr__(self, "weights", weights / weights.sum())
    r = self.robust_horizon
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
      raise ValueError(f"Scenarios: robust_horizon must be an int >= 1, got {r!r}")

  @staticmethod
  def grid(*component_values: ArrayLike, indices: tuple[int, ...] | None = None, robust_horizon: int = 1) -> Scenarios:
    """Every combination of the values given per uncertain component (the first varying slowest), equally likely."""
    lists = [float_array("Scenarios.grid", f"values of component {i}", v, None).ravel()
             for i, v in enumerate(component_values)]  # fmt: skip
    return Scenarios(np.array(list(itertools.product(*lists)), dtype=np.float64), indices, None, robust_horizon)

  @property
  def count(self) -> int:
    """S, the values of the uncertain components."""
    return int(np.shape(self.values)[0])

  def components(self, np_: int, where: str) -> tuple[int, ...]:
    """The components of a p of np_ entries the values replace, checked."""
    indices = tuple(range(np_)) if self.indices is None else self.indices
    width = int(np.shape(self.values)[1])
    if np_ == 0 or len(indices) != width or max(indices) >= np_:
      raise ValueError(f"{where}: scenarios give {width} values per scenario, for the components {list(indices)} of "
                       f"p, but the model's p has {np_} entries (indices= names the uncertain ones)")  # fmt: skip
    return indices


@dataclass(frozen=True)
class ScenarioTree:
  """The nodes of an MPC's horizon: a chain (nominal MPC), or the scenario tree of `Scenarios`.

  Attributes:
    horizon: the stages of every branch (the MPC's N).
    parents: each node's parent (-1 at the root), numbered depth first (StageLayout.parents).
    depth: each node's stage.
    realization: each node's scenario (the row of Scenarios.values its incoming transition takes; -1: the root,
      and every node of a chain).
    weight: each node's weight in the cost (the sum of the weights of the branches through it).
  """

  horizon: int
  parents: tuple[int, ...]
  depth: tuple[int, ...]
  realization: tuple[int, ...]
  weight: tuple[float, ...]

  @staticmethod
  def chain(horizon: int) -> ScenarioTree:
    """The stages of nominal MPC: node k at stage k, each of weight 1."""
    nodes = range(horizon + 1)
    return ScenarioTree(horizon, tuple(k - 1 for k in nodes), tuple(nodes), (-1,) * (horizon + 1),
                        (1.0,) * (horizon + 1))  # fmt: skip

  @staticmethod
  def of(scenarios: Scenarios, horizon: int) -> ScenarioTree:
    """The tree over `horizon` stages that `scenarios` span (module docstring)."""
    weights = np.asarray(scenarios.weights, dtype=np.float64)
    parents, depth, realization, leaf_weight = [-1], [0], [-1], []
    paths: list[list[int]] = []

    def grow(node: int, level: int, scenario: int, weight: float, path: list[int]) -> None:
      if level == horizon:
        leaf_weight.append(weight)
        paths.append(path)
        return
      splits = range(scenarios.count) if level < scenarios.robust_horizon else (scenario,)
      for s in splits:
        parents.append(node)
        depth.append(level + 1)
        realization.append(s)
        child = len(parents) - 1
        share = float(weights[s]) if level < scenarios.robust_horizon else 1.0
        grow(child, level + 1, s, weight * share, [*path, child])

    grow(0, 0, -1, 1.0, [0])
    weight = [0.0] * len(parents)
    for path, w in zip(paths, leaf_weight, strict=True):
      for node in path:
        weight[node] += w
    return ScenarioTree(horizon, tuple(parents), tuple(depth), tuple(realization), tuple(weight))

  @property
  def N(self) -> int:
    """The last node (the nodes are 0..N)."""
    return len(self.parents) - 1

  @property
  def branched(self) -> bool:
    """Whether the tree splits (else a chain)."""
    return self.horizon != len(self.parents) - 1

  @cached_property
  def leaves(self) -> tuple[int, ...]:
    """The nodes without children, in order (the last is N)."""
    has_child = set(self.parents)
    return tuple(k for k in range(self.N + 1) if k not in has_child)

  @cached_property
  def paths(self) -> tuple[tuple[int, ...], ...]:
    """Each branch's nodes from the root to its leaf (horizon + 1 of them), branch by branch."""
    paths = []
    for leaf in self.leaves:
      path, node = [leaf], leaf
      while self.parents[node] >= 0:
        node = self.parents[node]
        path.append(node)
      paths.append(tuple(reversed(path)))
    return tuple(paths)

  @cached_property
  def first_child(self) -> tuple[int, ...]:
    """Each node's first child (-1: a leaf), whose values a shifted warm start moves into it."""
    first = [-1] * (self.N + 1)
    for node in range(self.N, 0, -1):
      first[self.parents[node]] = node
    return tuple(first)

  def node_values(self, per_stage: F64) -> F64:
    """Per-stage values (horizon + 1 rows) as per-node values (N + 1 rows: each node's stage's)."""
    return np.ascontiguousarray(per_stage[np.asarray(self.depth)])
