"""Multiple shooting: an optimal control problem over N stages as one nonlinear program, batched over the stages.

Decision vector w = [x_0, u_0, x_1, u_1, ..., x_{N-1}, u_{N-1}, x_N, s] (s: the slacks of softened bounds).
Constraints g(w, p) = [x_0 - x_init; x_{k+1} - F(x_k, u_k, p_k) (k < N); h(x_k, u_k, p_k) (k < N); h_N(x_N, p_N);
v_e + s_e (e: softened bound); v_e - s_e]. The NLP parameter is [x_init; p_0 ... p_N]. Every stage function is
evaluated once for all stages through `vmap`, so the graph, the kernel count and the build time do not grow with N.

Over a scenario tree (multi-stage robust MPC, `anvil.mpc.scenarios`) the stages are the tree's nodes 0..N: node
k + 1's defect is x_{k+1} - F(x_j, u_j, pt_k) with j its parent and pt_k the parameter of its transition (its
scenario's values; the parameter holds [x_init; p_0 ... p_N; pt_0 ... pt_{N-1}]); each node's stage cost is weighted
by the node's weight, a leaf's (every node without children: its inputs are fixed at 0 by their bounds, its path rows
free) is the terminal cost, and every leaf has the terminal constraints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.ad import constant_jacobian, sphessian, spjacobian, vmap
from anvil.ad.transforms import jacobian_graph
from anvil.codegen import Arg, NumericalFunction, SparseNumericalFunction
from anvil.codegen.precision import SCALARS, in_scalar
from anvil.mpc.costs import LeastSquares, constant_congruence
from anvil.mpc.implicit import ImplicitIntegrator
from anvil.mpc.integrators import ExplicitIntegrator
from anvil.mpc.ode import OdeDerivatives
from anvil.mpc.rate import InputRate
from anvil.mpc.scaling import Linearization
from anvil.mpc.scenarios import Scenarios, ScenarioTree
from anvil.mpc.soft import SOFT_GROUPS, Soft
from anvil.mpc.stage_cost import Block, Part, StageCostGradient, StageCostHessian, StagePart, StagePlace
from anvil.mpc.stagewise import StageConstraints, StageDerivative
from anvil.qp import StageLayout
from anvil.validation import require_cpu_float64, require_type

Fn = NumericalFunction[..., Any]
Cost = Fn | LeastSquares


@dataclass(frozen=True)
class SoftEntry:
  """One softened bound: its group, stage, component, and where its bound lives (in w's bounds or g's)."""

  group: str
  stage: int
  component: int
  in_g: bool
  index: int
  l1: float
  l2: float
  side: str = "both"


def _check_function(name: str, what: str, fn: object, outputs: bool) -> None:
  """TypeError unless `fn` is a NumericalFunction (or, for a cost, a LeastSquares) of float64 inputs (and with
  `outputs`, float64 outputs: this traces it)."""
  where = f"MPCFunction({name})"
  if what.endswith("cost"):
    require_type(where, what, fn, (NumericalFunction, LeastSquares), "a NumericalFunction or LeastSquares")
  elif what == "dynamics":
    require_type(where, what, fn, (NumericalFunction, ImplicitIntegrator), "a NumericalFunction (or made by irk)")
  else:
    require_type(where, what, fn, (NumericalFunction,), "a NumericalFunction")
  require_cpu_float64(where, what, fn.residual if isinstance(fn, LeastSquares) else fn, outputs=outputs)


def _stage_inputs(fn: Cost | ImplicitIntegrator, what: str, sizes: tuple[int, ...], np_: int) -> bool:
  """Check `fn` takes inputs of `sizes` (plus p of np_ when np_ > 0, optionally); True when it takes p."""
  shapes = tuple(a.shape for a in fn.inputs)
  plain = tuple((s,) for s in sizes)
  if shapes == plain:
    return False
  if np_ and shapes == (*plain, (np_,)):
    return True
  expected = " or ".join(str(s) for s in ([plain, (*plain, (np_,))] if np_ else [plain]))
  raise ValueError(f"MPCFunction: {what} {fn.name} must take inputs shaped {expected}, got {shapes}")


def _output_size(fn: Cost, what: str, scalar: bool) -> int:
  if isinstance(fn, LeastSquares):
    return 1
  outs = fn.outputs
  if len(outs) != 1 or (scalar and outs[0].size != 1) or (not scalar and len(outs[0].shape) != 1):
    raise ValueError(f"MPCFunction: {what} {fn.name} must return {'a scalar' if scalar else 'one vector'}")
  return outs[0].size


class Transcription:
  """The multiple-shooting NLP of an OCP: sizes, the layout of w and g, and the NLP's cost and constraints."""

  def __init__(
    self,
    name: str,
    dynamics: Fn | ImplicitIntegrator,
    stage_cost: Cost,
    terminal_cost: Cost | None,
    horizon: int,
    constraints: Fn | None,
    terminal_constraints: Fn | None,
    soft: Mapping[str, Soft] | None,
    scalar: str = "float64",
    u_rate: tuple[Any, Any] = (None, None),
    scenarios: Scenarios | None = None,
  ) -> None:
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
      raise ValueError(f"MPCFunction({name}): horizon must be an int >= 1, got {horizon!r}")
    if scenarios is not None and not isinstance(scenarios, Scenarios):
      raise TypeError(f"MPCFunction({name}): scenarios must be a Scenarios, got {type(scenarios).__name__}")
    self.scenarios = scenarios
    self.tree = ScenarioTree.chain(horizon) if scenarios is None else ScenarioTree.of(scenarios, horizon)
    functions = {"dynamics": dynamics, "stage_cost": stage_cost, "terminal_cost": terminal_cost,
                 "constraints": constraints, "terminal_constraints": terminal_constraints}  # fmt: skip
    for what, fn in functions.items():
      if fn is not None or what in ("dynamics", "stage_cost"):
        _check_function(name, what, fn, outputs=False)
    if len(dynamics.inputs) not in (2, 3):
      raise TypeError(f"MPCFunction({name}): dynamics must be a NumericalFunction of (x, u) or (x, u, p)")
    self.name, self.N, self.horizon = name, self.tree.N, horizon
    self.scalar = scalar  # NOTE: the type its functions compute in (anvil.codegen.precision)
    self.nx, self.nu = dynamics.inputs[0].size, dynamics.inputs[1].size
    self.np = dynamics.inputs[2].size if len(dynamics.inputs) == 3 else 0
    with_p = ((dynamics, 2), (stage_cost, 2), (terminal_cost, 1), (constraints, 2), (terminal_constraints, 1))
    sizes = {f.inputs[k].size for f, k in with_p if f is not None and len(f.inputs) > k}
    if len(sizes) > 1:
      raise ValueError(f"MPCFunction({name}): the functions' parameter inputs differ in size: {sorted(sizes)}")
    self.np = sizes.pop() if sizes else 0
    stage, final = (self.nx, self.nu), (self.nx,)
    self.dynamics, self.stage_cost, self.terminal_cost = dynamics, stage_cost, terminal_cost
    self.constraints, self.terminal_constraints = constraints, terminal_constraints
    self.takes_p = {
      "dynamics": _stage_inputs(dynamics, "dynamics", stage, self.np),
      "stage_cost": _stage_inputs(stage_cost, "stage_cost", stage, self.np),
      "terminal_cost": terminal_cost is not None and _stage_inputs(terminal_cost, "terminal_cost", final, self.np),
      "constraints": constraints is not None and _stage_inputs(constraints, "constraints", stage, self.np),
      "terminal_constraints": terminal_constraints is not None
      and _stage_inputs(terminal_constraints, "terminal_constraints", final, self.np),
    }
    if dynamics.outputs[0].shape != (self.nx,) or len(dynamics.outputs) != 1:
      raise ValueError(f"MPCFunction({name}): dynamics {dynamics.name} must return x_next of shape ({self.nx},)")
    _output_size(stage_cost, "stage_cost", True)
    if terminal_cost is not None:
      _output_size(terminal_cost, "terminal_cost", True)
    self.nh_model = 0 if constraints is None else _output_size(constraints, "constraints", False)
    # NOTE: input-rate terms carry the previous input as extra states (anvil.mpc.rate); nx and nh are the NLP's
    self.rate, self.nx_model = InputRate.of(f"MPCFunction({name})", self.nu, *u_rate), self.nx
    self.nx += self.nu if self.rate is not None else 0
    self.nh = self.nh_model + (self.nu if self.rate is not None and self.rate.bounded else 0)
    self.nhN = 0 if terminal_constraints is None else _output_size(terminal_constraints, "terminal_constraints", False)
    for what, fn in functions.items():
      if fn is not None:
        _check_function(name, what, fn, outputs=True)
    if scenarios is not None:
      self.uncertain = scenarios.components(self.np, f"MPCFunction({name})")
    self.scales: dict[str, NDArray[np.float64]] | None = None  # NOTE: the controller's Scaling, set before any NLP
    self.soft = dict(soft or {})
    for group, spec in self.soft.items():
      if group not in SOFT_GROUPS:
        raise ValueError(f"MPCFunction({name}): soft groups are {SOFT_GROUPS}, got {group!r}")
      if not isinstance(spec, Soft):
        raise TypeError(f"MPCFunction({name}): soft[{group!r}] must be a Soft, got {type(spec).__name__}")

  # *** layout ***

  @property
  def nz(self) -> int:
    """Variables per stage, [x_k; u_k]."""
    return self.nx + self.nu

  @property
  def cost_by_stage(self) -> bool:
    """Whether the cost's stage-wise derivatives (anvil.mpc.stage_cost) serve: a chain's in the model's units (not a
    tree's weighted cost, nor a scaled NLP's)."""
    return not (self.tree.branched or self.scaled)

  @property
  def scaled(self) -> bool:
    """Whether the NLP is scaled (`anvil.mpc.scaling`: some factor is not 1)."""
    return self.scales is not None and any(bool(np.any(v != 1.0)) for v in self.scales.values())

  @cached_property
  def w_scale(self) -> NDArray[np.float64]:
    """Each NLP variable's scale factor: its state's, its input's; a slack's, what it relaxes'."""
    assert self.scales is not None
    sx, su = self._state_scale, self.scales["u"]
    stage = np.concatenate([sx, su])
    return np.concatenate([np.tile(stage, self.N), sx, [self._entry_scale(e) for e in self.soft_entries]])

  @cached_property
  def g_scale(self) -> NDArray[np.float64]:
    """Each constraint row's scale factor: a state's defect (and x_0's row) its state's, a path or terminal row its
    constraint's (an input rate's bound its input's), a slack's two rows what it relaxes'."""
    assert self.scales is not None
    path = np.concatenate([self.scales["constraints"], self.scales["u"] if self.rate is not None and
                           self.rate.bounded else []])  # fmt: skip
    slacks = [self._entry_scale(e) for e in self.soft_entries]
    terminal = np.tile(self.scales["terminal_constraints"], len(self.tree.leaves))
    return np.concatenate([np.tile(self._state_scale, self.N + 1), np.tile(path, self.N), terminal, slacks, slacks])

  @property
  def _state_scale(self) -> NDArray[np.float64]:
    """The NLP's states' factors: the model's, then an input rate's previous inputs' (its inputs')."""
    assert self.scales is not None
    return np.concatenate([self.scales["x"], self.scales["u"] if self.rate is not None else []])

  def _entry_scale(self, entry: SoftEntry) -> float:
    """The factor of a softened bound's slack: the one of what it relaxes."""
    assert self.scales is not None
    group = {"x_terminal": "x"}.get(entry.group, entry.group)
    return float(self.scales[group][entry.component])

  @cached_property
  def inner(self) -> tuple[int, ...]:
    """The stages with inputs that enter the dynamics: every stage k < N of a chain, every node with children of a
    tree (their stage costs, inputs and path constraints are the OCP's; a leaf's are not)."""
    leaves = set(self.tree.leaves)
    return tuple(k for k in range(self.N) if k not in leaves)

  @cached_property
  def soft_entries(self) -> tuple[SoftEntry, ...]:
    """Every softened bound, group by group, stage-major; entry e owns slack w[n_states_inputs + e]."""
    N, nx, nu, nz, nh, nhN = self.N, self.nx, self.nu, self.nz, self.nh, self.nhN
    heads = {"h": nx * (N + 1), "hN": nx * (N + 1) + N * nh}
    leaves, rank = self.tree.leaves, {leaf: r for r, leaf in enumerate(self.tree.leaves)}
    groups = {
      "x": (self.nx_model, self.inner[1:], False, lambda k, c: k * nz + c),
      "u": (nu, self.inner, False, lambda k, c: k * nz + nx + c),
      "constraints": (self.nh_model, self.inner, True, lambda k, c: heads["h"] + k * nh + c),
      "x_terminal": (self.nx_model, leaves, False, lambda k, c: k * nz + c),
      "terminal_constraints": (self.nhN, leaves, True, lambda k, c: heads["hN"] + rank[k] * nhN + c),
    }
    entries = []
    for group in SOFT_GROUPS:
      if (spec := self.soft.get(group)) is None:
        continue
      size, stages, in_g, index = groups[group]
      comps = spec.components(size, f"{self.name}: soft[{group!r}]")
      entries += [SoftEntry(group, k, c, in_g, index(k, c), spec.l1, spec.l2, spec.side) for k in stages for c in comps]
    return tuple(entries)

  def check_soft(self) -> None:
    """Raise now for what the softened bounds would fail on at the first call (indices out of range)."""
    _ = self.soft_entries

  @property
  def ns(self) -> int:
    """Number of slack variables."""
    return len(self.soft_entries)

  @property
  def nw(self) -> int:
    """Number of NLP variables."""
    return self.N * self.nz + self.nx + self.ns

  @property
  def ng(self) -> int:
    """Number of NLP constraints."""
    return self.nx * (self.N + 1) + self.N * self.nh + len(self.tree.leaves) * self.nhN + 2 * self.ns

  @property
  def n_params(self) -> int:
    """Length of the NLP parameter [x_init; p_0 ... p_N; (a tree's) pt_0 ... pt_{N-1}; tuning] (`tuning_layout`)."""
    return self._tuning_start + sum(size for _, _, size in self.tuning_layout.values())

  @property
  def param_rows(self) -> int:
    """The rows of np entries in the NLP parameter after x_init: the stages' p (N + 1), and a tree's transitions'."""
    return self.N + 1 + (self.N if self.tree.branched else 0)

  @property
  def _tuning_start(self) -> int:
    """Where the tuning block begins in the NLP parameter: after x_init and the param_rows."""
    return self.nx + self.param_rows * self.np

  @cached_property
  def tuning_layout(self) -> dict[str, tuple[int, tuple[int, ...], int]]:
    """The run-time weights and penalties in the NLP parameter, by name: (offset in the tuning vector, shape, size).
    "stage_weight" and "terminal_weight": the W of a LeastSquares stage or terminal cost (nr x nr, row-major); "l1"
    and "l2": each softened bound's penalties (soft_entries order). Absent where there is none."""
    shapes: dict[str, tuple[int, ...]] = {}
    for key, fn in (("stage_weight", self.stage_cost), ("terminal_weight", self.terminal_cost)):
      if isinstance(fn, LeastSquares):
        shapes[key] = fn.weight.shape
    if self.ns:
      shapes |= {"l1": (self.ns,), "l2": (self.ns,)}
    layout, at = {}, 0
    for key, shape in shapes.items():
      size = int(np.prod(shape))
      layout[key] = (at, shape, size)
      at += size
    return layout

  @cached_property
  def default_tuning(self) -> np.ndarray:
    """The tuning vector of the build-time weights and penalties (`tuning_layout`)."""
    values = {"stage_weight": getattr(self.stage_cost, "weight", None),
              "terminal_weight": getattr(self.terminal_cost, "weight", None),
              "l1": [e.l1 for e in self.soft_entries], "l2": [e.l2 for e in self.soft_entries]}  # fmt: skip
    parts = [np.asarray(values[key], dtype=np.float64).ravel() for key in self.tuning_layout]
    return np.concatenate(parts) if parts else np.zeros(0)

  def parameter(self, x_init: np.ndarray, p: np.ndarray | None = None, tuning: np.ndarray | None = None) -> np.ndarray:
    """The NLP parameter [x_init; p rows; tuning] (p: (param_rows, np), `node_parameters`; tuning: the build-time one
    when None)."""
    p = np.zeros((self.param_rows, self.np)) if p is None else p
    tuning = self.default_tuning if tuning is None else tuning
    return np.concatenate([np.ravel(x_init), np.ravel(p), np.ravel(tuning)]).astype(np.float64)

  def node_parameters(self, p: np.ndarray) -> np.ndarray:
    """The NLP's parameter rows (param_rows, np) from per-stage p (horizon + 1, np): a chain's as they are; a tree's
    nodes take their stage's, its transitions the stage they leave from, each with its scenario's values in the
    uncertain components (a node's own: its incoming transition's scenario; the root's: the first)."""
    if self.scenarios is None:
      return p
    tree, values = self.tree, np.asarray(self.scenarios.values)
    if not tree.branched:  # NOTE: one scenario: a chain, its values everywhere
      p = p.copy()
      p[:, self.uncertain] = values[0]
      return p
    nodes = tree.node_values(p).copy()
    nodes[:, self.uncertain] = values[np.maximum(np.asarray(tree.realization), 0)]
    moves = p[np.asarray(tree.depth[1:]) - 1].copy()
    moves[:, self.uncertain] = values[np.asarray(tree.realization[1:])]
    return np.concatenate([nodes, moves])

  def stage_layout(self) -> StageLayout:
    """Where w's entries and g's rows sit in the stages (for the Riccati QP solver), see `shooting_layout`."""
    stages = tuple(e.stage for e in self.soft_entries)
    parents = self.tree.parents if self.tree.branched else ()
    return shooting_layout(self.N, self.nx, self.nu, self.nh, self.nhN, stages, parents, self.tree.leaves)

  # *** the NLP, traced ***

  def split(self, w: Tensor, params: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """X (N, nx), U (N, nu), x_N, slacks, x_init and P (N + 1, np) from the NLP's variables and parameter."""
    N, nx, nz, n_p = self.N, self.nx, self.nz, (self.N + 1) * self.np
    if self.scaled:  # NOTE: the SQP's variables are scaled: the model's, here
      w = w * Tensor(self.w_scale, dtype=SCALARS[self.scalar])
    stages = w[: N * nz].reshape(N, nz)
    P = params[nx : nx + n_p].reshape(N + 1, self.np) if self.np else params[:0].reshape(N + 1, 0)
    return stages[:, :nx], stages[:, nx:], w[N * nz : N * nz + nx], w[N * nz + nx :], params[:nx], P

  @property
  def _moves_start(self) -> int:
    """Where a tree's transitions' parameters pt_0 ... pt_{N-1} begin in the NLP parameter (after the stages' p)."""
    return self.nx + (self.N + 1) * self.np

  def moves(self, params: Tensor, P: Tensor) -> Tensor:
    """Each transition's parameter (N, np): a tree's pt_k, a chain's p_k (of P, the stages')."""
    if not self.tree.branched:
      return P[: self.N]
    return params[self._moves_start : self._moves_start + self.N * self.np].reshape(self.N, self.np)

  def rows(self, T: Tensor, stages: tuple[int, ...] | range) -> Tensor:
    """T's rows at `stages` (increasing; as few slices as runs of consecutive stages)."""
    runs, start = [], 0
    for i in range(1, len(stages) + 1):
      if i == len(stages) or stages[i] != stages[i - 1] + 1:
        runs.append(T[stages[start] : stages[i - 1] + 1])
        start = i
    return runs[0].cat(*runs[1:]) if len(runs) > 1 else runs[0]

  def from_parents(self, T: Tensor) -> Tensor:
    """For each transition k (into stage k + 1), the row of T (one per stage k < N) of the stage it leaves: T itself
    in a chain, the parents' rows in a tree."""
    return self.rows(T, self.tree.parents[1:]) if self.tree.branched else T

  def tuning(self, params: Tensor, key: str) -> Tensor:
    """A run-time weight or penalty (`tuning_layout`) from the NLP parameter."""
    at, shape, size = self.tuning_layout[key]
    start = self._tuning_start + at
    return params[start : start + size].reshape(*shape)

  def _weighted(self, R: Tensor, params: Tensor, key: str, cost: LeastSquares) -> Tensor:
    """Σ_k r_kᵀ W r_k over the rows r_k of R, W the run-time weight `key` read on the cost's pattern alone: the cost's
    Hessian then couples only the residual components W couples (a full W: one product)."""
    W = self.tuning(params, key)
    if cost.pattern.all():
      return (R * (R @ W)).sum()
    rows, cols = np.nonzero(np.triu(cost.pattern))
    pairs = zip(rows.tolist(), cols.tolist(), strict=True)
    terms = [(R[:, i] * R[:, j]).sum() * (W[i, j] if i == j else W[i, j] + W[j, i]) for i, j in pairs]
    return sum(terms[1:], terms[0])

  def _stage(self, fn: Fn, key: str, X: Tensor, U: Tensor, P: Tensor) -> Tensor:
    """fn at every row of X and U (the stages k < N, by default) and as many first rows of P, on the model's states
    (without the previous inputs an input rate adds)."""
    rows = int(X.shape[0])
    X = X[:, : self.nx_model] if self.rate is not None else X
    args = (X, U, P[:rows]) if self.takes_p[key] else (X, U)
    return vmap(fn, size=rows).fn(*args)

  def _final(self, fn: Fn, key: str, xN: Tensor, P: Tensor) -> Tensor:
    """fn at x_N (its model states) and p_N."""
    xN = xN[: self.nx_model] if self.rate is not None else xN
    args = (xN, P[self.N]) if self.takes_p[key] else (xN,)
    return fn.fn(*args)

  def _at_leaves(self, fn: Fn, key: str, X: Tensor, xN: Tensor, P: Tensor) -> Tensor:
    """fn at every leaf of a tree (its model states, its p): one row per leaf."""
    leaves = self.tree.leaves
    XL = self.rows(X.cat(xN.reshape(1, self.nx)), leaves)[:, : self.nx_model]
    args = (XL, self.rows(P, leaves)) if self.takes_p[key] else (XL,)
    return vmap(fn, size=len(leaves)).fn(*args)

  def _node_weights(self, stages: tuple[int, ...] | range) -> Tensor:
    """The tree's weights of `stages` (a column), in the scalar type."""
    return Tensor(np.array([self.tree.weight[k] for k in stages]), dtype=SCALARS[self.scalar]).reshape(-1, 1)

  def cost(self, w: Tensor, params: Tensor) -> Tensor:
    """Σ_k l(x_k, u_k, p_k) + l_N(x_N, p_N) + Σ_e l1_e s_e + l2_e s_e², the weights and penalties from params."""
    if self.tree.branched:
      return self._tree_cost(w, params)
    X, U, xN, S, _, P = self.split(w, params)
    stage, final = self.stage_cost, self.terminal_cost
    if isinstance(stage, LeastSquares):  # NOTE: Σ_k r_kᵀ W r_k with W symmetric, the run-time one
      total = self._weighted(self._stage(stage.residual, "stage_cost", X, U, P), params, "stage_weight", stage)
    else:
      total = self._stage(stage, "stage_cost", X, U, P).sum()
    if isinstance(final, LeastSquares):
      rN = self._final(final.residual, "terminal_cost", xN, P)
      total = total + self._weighted(rN.reshape(1, -1), params, "terminal_weight", final)
    elif final is not None:
      total = total + self._final(final, "terminal_cost", xN, P).reshape(())
    return self._with_penalties(total, S, X, U, params)

  def _with_penalties(self, total: Tensor, S: Tensor, X: Tensor, U: Tensor, params: Tensor,
                      root: Tensor | None = None) -> Tensor:  # fmt: skip
    """`total` plus the slacks' l1 s + l2 s² and the input rate's (u - v)' W (u - v) over the rows of X and U (each
    row's rate times `root`², a column of the square roots of its node's weight, where given)."""
    if self.ns:
      l1, l2 = self.tuning(params, "l1"), self.tuning(params, "l2")
      total = total + (S * l1 + S * S * l2).sum()
    if self.rate is not None and self.rate.weighted:
      rates = U - X[:, self.nx_model :]
      rates = rates if root is None else rates * root
      total = total + (rates * (rates @ Tensor(self.rate.weight))).sum()
    return total

  def _tree_cost(self, w: Tensor, params: Tensor) -> Tensor:
    """The cost over a tree: each inner node's stage cost and input rate's, each leaf's terminal cost, times the
    node's weight (a least-squares residual times its square root), and the slacks' penalties."""
    X, U, xN, S, _, P = self.split(w, params)
    inner, leaves = self.inner, self.tree.leaves
    Xi, Ui, Pi = (self.rows(T, inner) for T in (X, U, P))
    stage, final, root = self.stage_cost, self.terminal_cost, self._node_weights(inner).sqrt()
    if isinstance(stage, LeastSquares):
      R = self._stage(stage.residual, "stage_cost", Xi, Ui, Pi)
      total = self._weighted(R * root, params, "stage_weight", stage)
    else:
      total = (self._stage(stage, "stage_cost", Xi, Ui, Pi).reshape(-1, 1) * root * root).sum()
    if final is not None:
      leaf_root = self._node_weights(leaves).sqrt()
      if isinstance(final, LeastSquares):
        rN = self._at_leaves(final.residual, "terminal_cost", X, xN, P).reshape(len(leaves), -1)
        total = total + self._weighted(rN * leaf_root, params, "terminal_weight", final)
      else:
        values = self._at_leaves(final, "terminal_cost", X, xN, P).reshape(-1, 1)
        total = total + (values * leaf_root * leaf_root).sum()
    return self._with_penalties(total, S, Xi, Ui, params, root)

  def constraint_values(self, w: Tensor, params: Tensor, dynamics: bool = True) -> Tensor:
    """g(w, p), see the module docstring; without `dynamics`, the defects are x_{k+1} alone (F left out: the part of
    g that `StageDerivative` takes from the NLP, whose dynamics' derivatives it computes stage by stage)."""
    X, U, xN, S, x_init, P = self.split(w, params)
    following = X[1:].cat(xN.reshape(1, self.nx)) if self.N > 1 else xN.reshape(1, self.nx)
    nxm = self.nx_model
    defects = following[:, :nxm]
    if dynamics:
      if isinstance(self.dynamics, ImplicitIntegrator):
        raise TypeError(f"MPCFunction({self.name}): dynamics made by irk are stepped at run time, never traced")
      # NOTE: each transition from the stage it leaves, with its parameter (a chain's: X, U and P themselves)
      defects = defects - self._stage(self.dynamics, "dynamics", self.from_parents(X), self.from_parents(U),
                                      self.moves(params, P))  # fmt: skip
    if self.rate is not None:  # NOTE: the previous inputs' dynamics, v_{k+1} = u_k
      defects = defects.cat(following[:, nxm:] - self.from_parents(U), dim=1)
    parts = [X[0] - x_init, defects.flatten()]
    tables = {"x": X[1:, :nxm], "u": U, "x_terminal": xN[:nxm].reshape(1, nxm)}
    if self.tree.branched:  # NOTE: the soft groups' rows at their stages (soft_entries)
      tables = {"x": self.rows(X, self.inner[1:])[:, :nxm], "u": self.rows(U, self.inner),
                "x_terminal": self.rows(X.cat(xN.reshape(1, self.nx)), self.tree.leaves)[:, :nxm]}  # fmt: skip
    path = []
    if self.constraints is not None:
      h = self._stage(self.constraints, "constraints", X, U, P).reshape(self.N, self.nh_model)
      tables["constraints"] = self.rows(h, self.inner) if self.tree.branched else h
      path.append(h)
    if self.rate is not None and self.rate.bounded:
      path.append(U - X[:, nxm:])
    if path:
      parts.append(path[0].cat(*path[1:], dim=1).flatten())
    if self.terminal_constraints is not None:
      if self.tree.branched:
        hN = self._at_leaves(self.terminal_constraints, "terminal_constraints", X, xN, P).reshape(-1, self.nhN)
      else:
        hN = self._final(self.terminal_constraints, "terminal_constraints", xN, P).reshape(1, self.nhN)
      parts.append(hN.flatten())
      tables["terminal_constraints"] = hN
    if self.ns:
      values = self._softened(tables)
      parts += [values + S, values - S]
    g = parts[0].cat(*parts[1:])
    return g / Tensor(self.g_scale, dtype=SCALARS[self.scalar]) if self.scaled else g

  def _softened(self, tables: dict[str, Tensor]) -> Tensor:
    """The value each softened bound constrains, in soft_entries order (stage-major per group; basic slices only)."""
    pieces = []
    for group in SOFT_GROUPS:
      spec, table = self.soft.get(group), tables.get(group)
      if spec is None or table is None or table.shape[0] == 0:
        continue
      comps = spec.components(int(table.shape[1]), f"{self.name}: soft[{group!r}]")
      pieces.append(Tensor.stack(*[table[:, c] for c in comps], dim=1).flatten())
    return pieces[0].cat(*pieces[1:])

  # *** NLP functions ***

  def _args(self, *sizes: tuple[int, str]) -> tuple[Arg, ...]:
    """Args of the given (size, name), in the scalar type."""
    return tuple(Arg(size, dtype=SCALARS[self.scalar], name=name) for size, name in sizes)

  def _function(self, name: str, fn: Callable[..., Tensor], args: tuple[Arg, ...]) -> Fn:
    """A NumericalFunction of the NLP, computing in the scalar type whatever the user's math captured."""
    return NumericalFunction(name, in_scalar(fn, self.scalar), args)

  def linearization(self, x: NDArray[np.float64], u: NDArray[np.float64], p: NDArray[np.float64]) -> Linearization:
    """The model's Jacobians at one point (x, u, p) (`anvil.mpc.scaling.AutoScaling`): a traced function of them is
    compiled and called once; dynamics made by irk give theirs from the converged step."""
    dynamics = self.dynamics
    functions: dict[str, Fn | None] = {
      "constraints": self.constraints,
      "terminal_constraints": self.terminal_constraints,
    }
    if not isinstance(dynamics, ImplicitIntegrator):
      functions["dynamics"] = dynamics
    traced = [(key, fn) for key, fn in functions.items() if fn is not None]
    point = (x, u, p) if self.np else (x, u)

    def jacobians(*xs: Tensor) -> tuple[Tensor, ...]:
      out = []
      for key, fn in traced:
        variables = xs[:1] if key == "terminal_constraints" else xs[:2]
        args = (*variables, xs[2]) if self.takes_p[key] else variables
        out.append(Tensor.cat(*(jacobian_graph(fn, args, wrt) for wrt in range(len(variables))), dim=1))
      return tuple(out)

    values: dict[str, Any] = {}
    if traced:
      inputs = tuple(Arg(v.size, name=name) for v, name in zip(point, ("x", "u", "p"), strict=False))
      evaluated = NumericalFunction(f"{self.name}_linearization", jacobians, inputs)(*point)
      evaluated = evaluated if isinstance(evaluated, tuple) else (evaluated,)
      values = {key: value for (key, _), value in zip(traced, evaluated, strict=True)}
    if isinstance(dynamics, ImplicitIntegrator):
      values["dynamics"] = dynamics.jacobian(*(point if self.takes_p["dynamics"] else point[:2]))[1]
    nx, nz = self.nx_model, self.nx_model + self.nu
    empty = {"constraints": (0, nz), "terminal_constraints": (0, nx)}
    return Linearization(
      *(np.asarray(values[key]) if key in values else np.zeros(empty[key]) for key in Linearization._fields)
    )

  def functions(self) -> tuple[Fn, Fn]:
    """The NLP's cost and constraints as NumericalFunctions of (w, params)."""
    args = self._args((self.nw, "w"), (self.n_params, "params"))
    cost = self._function(f"{self.name}_nlp_cost", self.cost, args)
    return cost, self._function(f"{self.name}_nlp_constraints", self.constraint_values, args)

  def stagewise(
    self, name: str, hessian: bool, keep_steps: bool = False
  ) -> tuple[StageConstraints, StageDerivative, StageDerivative | None] | None:
    """The NLP's constraints, constraint Jacobian and (with `hessian`) Lagrangian Hessian with the dynamics' part
    computed stage by stage from their ODE (anvil.mpc.stagewise), when the dynamics are made by `rk4` or `irk`; else
    None. `name` prefixes the functions' names (the SQP solver's). `keep_steps`: the constraints take the steps the
    Jacobian's evaluation kept where a stage's inputs are the same (a real-time iteration's feedback evaluates g at
    the point of its preparation's Jacobian; a full SQP's line search never does: no memory spent)."""
    F = self.dynamics
    if not isinstance(F, (ExplicitIntegrator, ImplicitIntegrator)) or self.nu == 0:
      return None
    args = self._args((self.nw, "w"), (self.n_params, "params"))
    rest = self._function(f"{name}_constraints_without_dynamics",
                          lambda w, params: self.constraint_values(w, params, dynamics=False), args)  # fmt: skip
    ode = OdeDerivatives.of(F, hessian, self.scalar)
    place: dict[str, Any] = dict(N=self.N, stride=self.nz, p_offset=self.nx, lam_offset=self.nx, states=self.nx)
    if self.tree.branched:  # NOTE: transition k leaves its stage's parent, with its own parameter (`moves`)
      place |= dict(sources=self.tree.parents[1:], p_offset=self._moves_start)
    if self.scaled:  # NOTE: the stages' model states and inputs, and the defect rows of the model's states
      assert self.scales is not None
      place |= dict(scales=(np.concatenate([self.scales["x"], self.scales["u"]]), self.scales["x"]))
    constraints = StageConstraints(f"{name}_constraints", rest, ode, **place, keep_steps=keep_steps)
    # NOTE: the rest's derivatives on the scalar expressions too (each entry once, the stages' shared terms shared):
    # tinygrad's colours re-evaluated a robot's foot kinematics per colour, a third of a quadruped MPC's step
    jacobian = StageDerivative(f"{name}_constraint_jacobian", "jacobian",
                               spjacobian(rest, 0, name=f"{name}_rest_jacobian", scalar=True), ode, **place,
                               keep_steps=keep_steps)  # fmt: skip
    if not hessian:
      return constraints, jacobian, None
    # NOTE: the cost's Hessian stage by stage, a term of its own: for least-squares costs with affine residuals their
    # Gauss-Newton blocks (exact: the products of constant Jacobians), else the exact blocks of each stage's cost; a
    # tree's weighted cost (or a scaled NLP's cost) in the rest instead, derived with it
    by_stage = self.cost_by_stage
    terms = (self.stage_cost_hessian("gauss_newton" if self._affine_least_squares() else "exact"),) if by_stage else ()

    def lagrangian(w: Tensor, params: Tensor, sigma: Tensor, lam: Tensor) -> Tensor:
      rest = (self.constraint_values(w, params, dynamics=False) * lam).sum()
      return rest if by_stage else rest + sigma[0] * self.cost(w, params)

    lag_args = (*args, *self._args((1, "sigma"), (self.ng, "lam")))
    rest_hessian = sphessian(self._function(f"{name}_lagrangian_without_dynamics", lagrangian, lag_args), 0,
                             name=f"{name}_rest_hessian", scalar=True)  # fmt: skip
    hessian_fn = StageDerivative(f"{name}_lagrangian_hessian", "hessian", rest_hessian, ode, **place, terms=terms)
    return constraints, jacobian, hessian_fn

  def gauss_newton_hessian(self) -> SparseNumericalFunction | StageCostHessian:
    """Upper triangle of sigma·(blockdiag(J_kᵀ (W + Wᵀ) J_k, J_Nᵀ (W_N + W_Nᵀ) J_N) + diag(2 l2)): the Gauss-Newton
    Hessian (2 JᵀWJ for the symmetric weights of every real use). Residuals affine in (x, u) have one constant
    block for every stage (a traced function); others are derived stage by stage (`stage_cost_hessian`)."""
    if not self._least_squares():
      raise ValueError(f"MPCFunction({self.name}): hessian='gauss_newton' needs costs given as LeastSquares")
    constant = self._constant_jacobians
    if constant is None:
      return self.stage_cost_hessian("gauss_newton")
    N, nx, nz, rate = self.N, self.nx, self.nz, self._rate_hessian()
    stage_used, final_used = self._gauss_newton_coordinates(constant, rate)
    blocks = [(stage_used, k * nz, 0) for k in range(N)]  # NOTE: (used, start, where the traced values hold it)
    blocks += [(final_used, N * nz, nz * nz)] if self.terminal_cost is not None else []
    rows: list[int] = []
    cols: list[int] = []
    gather: list[int] = []
    for used, start, offset in blocks:
      for j in map(int, np.flatnonzero(used)):
        for i in map(int, np.flatnonzero(used[: j + 1])):
          rows.append(start + i)
          cols.append(start + j)
          gather.append(offset + i * used.size + j)
    slacks = N * nz + nx + np.arange(self.ns)
    offset = nz * nz + (nx * nx if self.terminal_cost is not None else 0)  # the slacks' l2 after the blocks
    rows, cols, gather = rows + slacks.tolist(), cols + slacks.tolist(), gather + list(range(offset, offset + self.ns))
    pattern = sp.csc_array((np.ones(len(rows)), (rows, cols)), shape=(self.nw, self.nw))
    pattern.sort_indices()
    args = self._args((self.nw, "w"), (self.n_params, "params"), (1, "sigma"), (self.ng, "lam"))
    stage_ls, final_ls = self.stage_cost, self.terminal_cost
    assert isinstance(stage_ls, LeastSquares) and (final_ls is None or isinstance(final_ls, LeastSquares))
    nxm, extra = self.nx_model, self.nx - self.nx_model  # NOTE: the previous inputs of an input rate: no residual

    def values(w: Tensor, params: Tensor, sigma: Tensor, lam: Tensor) -> Tensor:
      # NOTE: W + Wᵀ, the Hessian of rᵀWr whatever W holds (the weights are run-time parameters), on their patterns;
      # the Jacobians are the same at every point: one block for all stages
      stage_weight = self.tuning(params, "stage_weight") * Tensor(stage_ls.pattern.astype(np.float64))
      J = np.insert(constant[0], [nxm] * extra, 0.0, axis=1)
      block = constant_congruence(J, stage_weight + stage_weight.T)
      pieces = [(block + (Tensor(rate) if rate is not None else 0)).flatten()]
      if isinstance(final_ls, LeastSquares):
        assert constant[1] is not None
        JN = np.hstack([constant[1], np.zeros((constant[1].shape[0], extra))])
        WN = self.tuning(params, "terminal_weight") * Tensor(final_ls.pattern.astype(np.float64))
        pieces.append(constant_congruence(JN, WN + WN.T).flatten())
      if self.ns:
        pieces.append(self.tuning(params, "l2") * 2)
      return pieces[0].cat(*pieces[1:]) * sigma[0]

    order = np.lexsort((rows, cols))
    return SparseNumericalFunction(f"{self.name}_gauss_newton", in_scalar(values, self.scalar), args, pattern,
                                   gather=np.asarray(gather)[order])  # fmt: skip

  def stage_cost_hessian(self, kind: str) -> StageCostHessian:
    """The cost's Hessian (the upper triangle of sigma times it) stage by stage (anvil.mpc.stage_cost): for `kind`
    "gauss_newton" the Gauss-Newton blocks of LeastSquares costs, for "exact" the exact Hessian of any cost."""
    stage, final = self._stage_parts(lambda cost, label, takes_p, size: Block.of(
      cost, kind, f"{self.name}_{label}_{kind}", takes_p, self.nx_model, size, self.scalar))  # fmt: skip
    args = self._args((self.nw, "w"), (self.n_params, "params"), (1, "sigma"), (self.ng, "lam"))
    suffix = "gauss_newton" if kind == "gauss_newton" else "cost_hessian"
    slacks = self.N * self.nz + self.nx + np.arange(self.ns)
    return StageCostHessian(f"{self.name}_{suffix}", args, stage, final, self._stage_place, self._rate_hessian(),
                            self._weight_offsets, slacks, self.scalar)  # fmt: skip

  def stage_cost_gradient(self) -> StageCostGradient:
    """The cost's gradient stage by stage (anvil.mpc.stage_cost): each stage cost's gradient in its [x; u] from one
    generated function of the stage, the input rate's, the terminal cost's and the slacks'."""
    stage, final = self._stage_parts(lambda cost, label, takes_p, size: StagePart.gradient_of(
      cost, f"{self.name}_{label}_cost", takes_p, self.nx_model, size, self.scalar))  # fmt: skip
    rate = self.rate.weight if self.rate is not None and self.rate.weighted else None
    args = self._args((self.nw, "w"), (self.n_params, "params"))
    return StageCostGradient(f"{self.name}_cost_gradient", args, stage, final, self._stage_place, rate,
                             self._weight_offsets, (self.N * self.nz + self.nx, self.ns), self.scalar)  # fmt: skip

  def _stage_parts(self, make: Callable[[Cost, str, bool, int], Part]) -> tuple[Part, Part | None]:
    """`make(cost, label, takes_p, size)` for the stage cost on [x; u] and the terminal cost on x_N (None without)."""
    stage = make(self.stage_cost, "stage", self.takes_p["stage_cost"], self.nx_model + self.nu)
    final = self.terminal_cost
    return stage, None if final is None else make(final, "terminal", self.takes_p.get("terminal_cost", False),
                                                   self.nx_model)  # fmt: skip

  @cached_property
  def _stage_place(self) -> StagePlace:
    """Where the stages sit in w and the parameter, for the stage-wise cost derivatives."""
    return StagePlace(N=self.N, stride=self.nz, states=self.nx, nx=self.nx_model, nu=self.nu, np=self.np,
                      p_offset=self.nx)  # fmt: skip

  @cached_property
  def _weight_offsets(self) -> dict[str, int]:
    """Where each run-time weight and penalty starts in the NLP parameter (`tuning_layout`)."""
    return {key: self._tuning_start + at for key, (at, _, _) in self.tuning_layout.items()}

  def _gauss_newton_coordinates(
    self, constant: tuple[np.ndarray, np.ndarray | None], rate: np.ndarray | None
  ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """The coordinates of a stage's [x; u] and of x_N that the Gauss-Newton blocks of affine residuals (`constant`
    Jacobians) can be nonzero on: the columns their Jacobians use (and the input rate's; every one of x_N without a
    terminal residual), so the blocks hold no structural zeros (for OSQP, entries of P it factorizes)."""
    final = np.ones(self.nx, bool)
    extra = self.nx - self.nx_model
    stage = np.insert(constant[0] != 0, [self.nx_model] * extra, False, axis=1).any(axis=0)
    if rate is not None:
      stage |= (rate != 0).any(axis=0)
    if constant[1] is not None:
      final = np.concatenate([(constant[1] != 0).any(axis=0), np.zeros(extra, bool)])
    return stage, final

  def _rate_hessian(self) -> np.ndarray | None:
    """The Hessian of an input rate's cost (u - v)' W_r (u - v) in a stage's [x; v; u]: 2 D' W_r D, D = [0 -I I]; None
    without a rate weight."""
    if self.rate is None or not self.rate.weighted:
      return None
    D = np.zeros((self.nu, self.nz))
    D[:, self.nx_model : self.nx] -= np.eye(self.nu)
    D[:, self.nx :] += np.eye(self.nu)
    return 2 * D.T @ self.rate.weight @ D

  def _least_squares(self) -> bool:
    """Whether every cost is a LeastSquares (the terminal one may be absent)."""
    return all(isinstance(c, LeastSquares) for c in (self.stage_cost, self.terminal_cost) if c is not None)

  def _affine_least_squares(self) -> bool:
    """Whether every cost is a LeastSquares of residuals affine in the states and inputs: the Gauss-Newton Hessian is
    then the cost's exact Hessian."""
    return self._least_squares() and self._constant_jacobians is not None

  @cached_property
  def _constant_jacobians(self) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The residuals' Jacobians d r/d[x; u] and d r_N/d x (None without a terminal LeastSquares) when every residual
    is affine in the states and inputs (the same Jacobian at every point); else None."""
    stage_ls, final_ls = self.stage_cost, self.terminal_cost
    assert isinstance(stage_ls, LeastSquares)
    Jx, Ju = constant_jacobian(stage_ls.residual, 0), constant_jacobian(stage_ls.residual, 1)
    if Jx is None or Ju is None:
      return None
    JN = None
    if isinstance(final_ls, LeastSquares) and (JN := constant_jacobian(final_ls.residual, 0)) is None:
      return None
    return np.hstack([Jx, Ju]), JN


def shooting_layout(
  N: int, nx: int, nu: int, nh: int = 0, nhN: int = 0, slack_stages: tuple[int, ...] = (),
  parents: tuple[int, ...] = (), leaves: tuple[int, ...] = (),
) -> StageLayout:  # fmt: skip
  """The stage layout of the multiple-shooting NLP (module docstring) with nh path and nhN terminal constraints and
  slacks at `slack_stages` (one entry per slack, in w's order); over a tree of stages (`parents`, with its `leaves`,
  each of which has the terminal constraints), that tree's.

  x_k and u_k sit at stage k and x_N at stage N; each slack is an extra input of its stage (a terminal input at stage
  N), entering no dynamics. g's rows: x_0 - x_init (initial rows), the defects (dynamics rows), then stage k's path
  constraints, the terminal constraints and two rows per slack (v + s, v - s), as general rows of their stage; the
  layout's `soft` names them (the Riccati backend eliminates the slacks). Stages with fewer slacks than the most any
  stage has are padded with inputs the QP fixes at 0.
  """
  leaves = leaves or (N,)
  counts, slot = [0] * (N + 1), []  # slack e is the slot[e]-th slack of its stage
  for k in slack_stages:
    slot.append(counts[k])
    counts[k] += 1
  nz = nx + nu
  variables = [(k, i) for k in range(N) for i in range(nz)] + [(N, i) for i in range(nx)]
  variables += [(k, (nz if k < N else nx) + slot[e]) for e, k in enumerate(slack_stages)]
  rows = [("initial", 0, i) for i in range(nx)] + [("dynamics", k, i) for k in range(N) for i in range(nx)]
  path = lambda k: nh if k < N else 0  # NOTE: every stage k < N has the path rows (a leaf's free), then a leaf's nhN
  rows += [("stage", k, j) for k in range(N) for j in range(nh)]
  rows += [("stage", leaf, path(leaf) + j) for leaf in leaves for j in range(nhN)]
  first = len(rows)  # the rows v + s of every slack, then their rows v - s
  base = lambda k: path(k) + (nhN if k in leaves else 0)
  for minus in (0, 1):
    rows += [("stage", k, base(k) + 2 * slot[e] + minus) for e, k in enumerate(slack_stages)]
  ns, slack0 = len(slack_stages), N * nz + nx
  soft = tuple((slack0 + e, first + e, first + ns + e) for e in range(ns))
  return StageLayout(N=N, nx=nx, nu=nu + max(counts[:N]), nuN=counts[N], variables=tuple(variables),
                     rows=tuple(rows), soft=soft, parents=parents)  # fmt: skip
