"""`OCPLabels`: the items of an MPC's multiple-shooting NLP named as the user declared them: stages, states, inputs,
the dynamics and constraint functions, the bound groups (x_bounds, u_bounds, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from anvil.sqp.labels import NLPLabels

if TYPE_CHECKING:
  from anvil.mpc.controller import MPCFunction
  from anvil.sqp.nlp import NLP


class OCPLabels(NLPLabels):
  """Names rows and variables of an `MPCFunction`'s NLP (layout: anvil.mpc.transcription) by stage and function."""

  def __init__(self, mpc: MPCFunction) -> None:  # NOTE: not NLPLabels': its SQP solver is built on first use
    self.mpc, self.ocp = mpc, mpc.ocp

  @property
  def nlp(self) -> NLP:  # type: ignore[override]
    """The controller's NLP (its SQP solver built here where a message needs its derivatives' patterns)."""
    return self.mpc.sqp.nlp

  @property
  def m(self) -> int:
    """The number of constraint rows of the NLP."""
    return self.ocp.ng

  def _row_place(self, i: int) -> tuple[str, str, int, int]:
    """(group, function name, stage, index in the function's output) of NLP row i."""
    ocp = self.ocp
    N, nx, nh, nhN = ocp.N, ocp.nx, ocp.nh, ocp.nhN
    if i < nx:
      return "initial state", "x0", 0, i
    i -= nx
    if i < N * nx:
      if i % nx >= ocp.nx_model:  # NOTE: an input rate's previous inputs, v_{k+1} = u_k
        return "previous input", "u", i // nx + 1, i % nx - ocp.nx_model
      return "dynamics", ocp.dynamics.name, i // nx + 1, i % nx
    i -= N * nx
    if i < N * nh:
      if i % nh >= ocp.nh_model:
        return "u_rate_bounds", "u - u_prev", i // nh, i % nh - ocp.nh_model
      assert ocp.constraints is not None
      return "constraints", ocp.constraints.name, i // nh, i % nh
    i -= N * nh
    leaves = ocp.tree.leaves
    if i < len(leaves) * nhN:
      assert ocp.terminal_constraints is not None
      return "terminal_constraints", ocp.terminal_constraints.name, leaves[i // nhN], i % nhN
    entry = ocp.soft_entries[(i - len(leaves) * nhN) % ocp.ns]
    return f"soft {entry.group}", entry.group, entry.stage, entry.component

  def row(self, i: int) -> tuple[str, str]:
    """(group, row) of NLP row i: ("constraints", "row 0 of h at stage 3"); a defect is x_{k+1} - F(x_k, u_k), named
    at stage k + 1."""
    group, name, stage, index = self._row_place(i)
    at = self._at(stage)
    if group == "initial state":
      return group, f"x[{index}]" if index < self.ocp.nx_model else f"u_prev[{index - self.ocp.nx_model}]"
    if group == "u_rate_bounds":
      return group, f"u[{index}] - u_prev[{index}] at {at}"
    before = self._at(self.ocp.tree.parents[stage]) if stage > 0 else ""
    if group == "previous input":
      return group, f"u_prev[{index}] at {at} - u[{index}] of {before}"
    if group == "dynamics":
      return group, f"x[{index}] at {at} - {name} of {before}"
    return group, f"row {index} of {name} at {at}"

  def row_function(self, i: int) -> tuple[str, str]:
    """(function, place) of NLP row i: ("dynamics F", "stage 12, output 2") (F's evaluation at stage 12)."""
    group, name, stage, index = self._row_place(i)
    if group == "dynamics":
      place = f"{self._at(self.ocp.tree.parents[stage])}, output {index}"
      if getattr(self.ocp.dynamics, "implicit", False):
        place += " (an implicit step is NaN where Newton's method fails on it: more steps or newton_iter may help)"
      return f"dynamics {name}", place
    return f"{group} {name}", f"{self._at(stage)}, row {index}"

  def _variable_place(self, j: int) -> tuple[str, str, int, int]:
    """(group, symbol, stage, index) of NLP variable j."""
    ocp = self.ocp
    N, nx, nz = ocp.N, ocp.nx, ocp.nz
    k, i = divmod(j, nz)
    if k <= N and i < nx and i >= ocp.nx_model:  # NOTE: an input rate's previous inputs, unbounded
      return "previous input", "u_prev", k, i - ocp.nx_model
    if k < N:
      return ("x_bounds", "x", k, i) if i < nx else ("u_bounds", "u", k, i - nx)
    if j < N * nz + nx:
      return "x_bounds", "x", N, j - N * nz
    entry = ocp.soft_entries[j - N * nz - nx]
    return "slack", f"slack of soft {entry.group}", entry.stage, entry.component

  def variable(self, j: int) -> tuple[str, str]:
    """(bound group, variable) of NLP variable j: ("x_bounds", "x[0] at stage 7")."""
    group, symbol, stage, index = self._variable_place(j)
    return group, f"{symbol}[{index}] at {self._at(stage)}"

  def bound(self, j: int, value: float, bounds: Any) -> tuple[str, float]:
    """The violated bound of variable j from the call's per-stage bounds (a dict: lbx, ubx, lbu, ubu, ...)."""
    group, _, stage, index = self._variable_place(j)
    if group == "slack":
      return "lower", 0.0
    if group == "previous input":
      return "lower", -np.inf
    key, row = "x" if group == "x_bounds" else "u", self.ocp.tree.depth[stage]  # NOTE: a tree's node: its stage's
    if row >= len(bounds[f"lb{key}"]):  # a leaf's inputs: fixed at 0
      return ("upper" if value > 0 else "lower"), 0.0
    lo, hi = float(bounds[f"lb{key}"][row][index]), float(bounds[f"ub{key}"][row][index])
    return ("upper", hi) if value > hi else ("lower", lo)

  def violation(self, index: int, amount: float, value: float, bounds: Any) -> str:
    """NLPLabels' sentence, in the model's units where the NLP is scaled (the SQP reports its own)."""
    ocp = self.ocp
    if ocp.scaled:
      factor = float(ocp.g_scale[index] if index < self.m else ocp.w_scale[index - self.m])
      amount, value = amount * factor, value * factor
    return super().violation(index, amount, value, bounds)

  def _at(self, stage: int) -> str:
    """Where a stage is: "stage k", or over a scenario tree "node k (stage d)"."""
    tree = self.ocp.tree
    return f"node {stage} (stage {tree.depth[stage]})" if tree.branched else f"stage {stage}"
