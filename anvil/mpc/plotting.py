"""`plot_closed_loop`: states, inputs with their bounds, and solve times of a closed-loop run, saved as a PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anvil.mpc.simulation import ClosedLoop


def plot_closed_loop(
  cl: ClosedLoop, path: str | Path, dt: float | None = None, state_names: tuple[str, ...] | None = None
) -> Path:
  """Plot `cl` (states, inputs with bounds, per-step solve time in ms) into the PNG `path`; returns the path.

  Args:
    cl: the result of `simulate`.
    path: where to write the figure.
    dt: the sampling time, for a time axis in seconds (default: steps).
    state_names: labels of the states.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  if not isinstance(cl, ClosedLoop):
    raise TypeError(f"plot_closed_loop: expected a ClosedLoop from simulate, got {type(cl).__name__}")
  steps = cl.u.shape[0]
  scale, unit = (dt, "time [s]") if dt else (1.0, "step")
  t_x, t_u = np.arange(steps + 1) * scale, np.arange(steps) * scale
  fig, (ax_x, ax_u, ax_t) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
  names = state_names or tuple(f"x[{i}]" for i in range(cl.x.shape[1]))
  for i in range(cl.x.shape[1]):
    ax_x.plot(t_x, cl.x[:, i], label=names[i])
  ax_x.set_ylabel("states")
  ax_x.legend(loc="upper right", fontsize="small", ncol=min(4, cl.x.shape[1]))
  for i in range(cl.u.shape[1]):
    (line,) = ax_u.step(t_u, cl.u[:, i], where="post", label=f"u[{i}]")
    for bound in (cl.u_bounds[0][i], cl.u_bounds[1][i]):
      if np.isfinite(bound):
        ax_u.axhline(bound, color=line.get_color(), linestyle="--", linewidth=0.8)
  ax_u.set_ylabel("inputs (dashed: bounds)")
  ax_u.legend(loc="upper right", fontsize="small")
  ax_t.plot(t_u, cl.solve_times * 1e3, ".", markersize=3)
  ax_t.set_yscale("log")
  ax_t.set_ylabel("solve time [ms]")
  ax_t.set_xlabel(unit)
  m = cl.metrics
  fig.suptitle(f"closed-loop cost {m['cost']:.6g}, median solve {m['solve_ms_median']:.3f} ms, {m['status_counts']}")
  fig.tight_layout()
  out = Path(path)
  fig.savefig(out, dpi=110)
  plt.close(fig)
  return out
