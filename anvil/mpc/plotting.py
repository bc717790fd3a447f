"""`plot_closed_loop`: the states (a subplot each, or in groups), an optional XY view, the inputs with their bounds
and the solve times of a closed-loop run, saved as a PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anvil.mpc.simulation import ClosedLoop


def plot_closed_loop(
  cl: ClosedLoop,
  path: str | Path,
  dt: float | None = None,
  state_names: tuple[str, ...] | None = None,
  *,
  groups: Sequence[Sequence[int | str]] | None = None,
  xy: tuple[int | str, int | str] | None = None,
) -> Path:
  """Plot `cl` into the PNG `path`; returns the path.

  Args:
    cl: the result of `simulate`.
    path: where to write the figure.
    dt: the sampling time, for a time axis in seconds (default: steps).
    state_names: labels of the states.
    groups: states sharing a subplot (indices or names), e.g. grouped by unit: [("x", "y"), ("vx", "vy")]; by
      default each state has its own.
    xy: two states (indices or names) drawn against each other as well: the path of a planar system.

  The title gives the closed-loop cost, the median solve time and the controller calls that did not succeed (for a
  real-time-iteration controller one iteration per call is its normal outcome, not a failure).
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  if not isinstance(cl, ClosedLoop):
    raise TypeError(f"plot_closed_loop: expected a ClosedLoop from simulate, got {type(cl).__name__}")
  names = state_names or tuple(f"x[{i}]" for i in range(cl.x.shape[1]))
  panels = [[_state(names, s, "groups") for s in g] for g in groups] if groups else [[i] for i in range(len(names))]
  pair = None if xy is None else tuple(_state(names, s, "xy") for s in xy)
  rows = len(panels) + 2 + (pair is not None)
  fig, axes = plt.subplots(rows, 1, figsize=(9, 2.0 * rows + 1), squeeze=False)
  axes = axes[:, 0]
  steps = cl.u.shape[0]
  scale, unit = (dt, "time [s]") if dt else (1.0, "step")
  t_x, t_u = np.arange(steps + 1) * scale, np.arange(steps) * scale
  for ax, panel in zip(axes, panels, strict=False):
    _states(ax, t_x, cl, panel, names)
  _inputs(axes[len(panels)], t_u, cl)
  ax_t = axes[len(panels) + 1]
  ax_t.plot(t_u, cl.solve_times * 1e3, ".", markersize=3)
  ax_t.set_yscale("log")
  ax_t.set_ylabel("solve time [ms]")
  for ax in axes[: len(panels) + 2]:
    ax.set_xlabel(unit)
  if pair is not None:
    _plane(axes[-1], cl, pair, names)
  fig.suptitle(_title(cl))
  fig.tight_layout()
  out = Path(path)
  fig.savefig(out, dpi=110)
  plt.close(fig)
  return out


def _state(names: Sequence[str], which: int | str, what: str) -> int:
  """The index of a state given by index or name."""
  if isinstance(which, str) and which in names:
    return list(names).index(which)
  if isinstance(which, int) and not isinstance(which, bool) and 0 <= which < len(names):
    return which
  raise ValueError(f"plot_closed_loop: {what} names a state {which!r}: expected an index below {len(names)} or one "
                   f"of {list(names)}")  # fmt: skip


def _states(ax: Any, t: Any, cl: ClosedLoop, panel: list[int], names: Sequence[str]) -> None:
  for i in panel:
    (line,) = ax.plot(t, cl.x[:, i], label=names[i])
    for bound in (cl.x_bounds[0][i], cl.x_bounds[1][i]):
      if np.isfinite(bound):
        ax.axhline(bound, color=line.get_color(), linestyle="--", linewidth=0.8)
  ax.set_ylabel(", ".join(names[i] for i in panel))
  if len(panel) > 1:
    ax.legend(loc="upper right", fontsize="small", ncol=min(4, len(panel)))


def _inputs(ax: Any, t: Any, cl: ClosedLoop) -> None:
  for i in range(cl.u.shape[1]):
    (line,) = ax.step(t, cl.u[:, i], where="post", label=f"u[{i}]")
    for bound in (cl.u_bounds[0][i], cl.u_bounds[1][i]):
      if np.isfinite(bound):
        ax.axhline(bound, color=line.get_color(), linestyle="--", linewidth=0.8)
  ax.set_ylabel("inputs (dashed: bounds)")
  ax.legend(loc="upper right", fontsize="small")


def _plane(ax: Any, cl: ClosedLoop, pair: tuple[int, ...], names: Sequence[str]) -> None:
  i, j = pair
  ax.plot(cl.x[:, i], cl.x[:, j], "-", linewidth=1.2)
  ax.plot(cl.x[0, i], cl.x[0, j], "o", label="start")
  ax.plot(cl.x[-1, i], cl.x[-1, j], "s", label="end")
  ax.set_xlabel(names[i])
  ax.set_ylabel(names[j])
  ax.set_aspect("equal", adjustable="datalim")
  ax.legend(loc="upper right", fontsize="small")


def _title(cl: ClosedLoop) -> str:
  m = cl.metrics
  mode = "real-time iteration, " if cl.real_time_iteration else ""
  calls = f"{cl.failures} of {len(cl.statuses)} controller calls failed"
  stopped = f"; stopped at step {cl.failed_step}" if cl.failure is not None else ""
  return f"closed-loop cost {m['cost']:.6g}, median solve {m['solve_ms_median']:.3f} ms ({mode}{calls}{stopped})"
