"""`campaign_report`: the figures and the table a campaign's DataFrame deserves: solve-time distributions per
controller, closed-loop cost per scenario, a failure map over the scenarios' initial states, and a markdown summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: The summary table's columns: (header, how a controller's rows give it).
SUMMARY: tuple[tuple[str, Any], ...] = (
  ("runs", lambda g: len(g)),
  ("failed runs", lambda g: int(g["failed"].sum())),
  ("failed calls", lambda g: int(g["failures"].sum())),
  ("cost median", lambda g: g["cost"].median()),
  ("cost max", lambda g: g["cost"].max()),
  ("max violation", lambda g: g["max_violation"].max()),
  ("solve median [ms]", lambda g: g["solve_ms_median"].median()),
  ("solve p95 [ms]", lambda g: g["solve_ms_p95"].median()),
  ("solve max [ms]", lambda g: g["solve_ms_max"].max()),
  ("SQP its", lambda g: g["iterations_mean"].mean()),
)


def campaign_report(df: Any, out_dir: str | Path) -> dict[str, Path]:
  """Write the report of a `campaign` DataFrame into out_dir: solve_times.png (per-run median and p95 solve times per
  controller, box plots on a log scale), cost.png (closed-loop cost per scenario, one line per controller),
  failures.png (each scenario at its initial state, in the two entries of x0 that vary most, marked by whether the
  run failed or how many controller calls did not succeed, a panel per controller) and report.md (a table per
  controller). Returns {name: path}."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  missing = {"controller", "scenario", "cost", "failed", "failures", "solve_ms_median", "solve_ms_p95"} - set(
    df.columns
  )
  if missing:
    raise ValueError(f"campaign_report: df must be a campaign() DataFrame; it lacks the columns {sorted(missing)}")
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  names = list(dict.fromkeys(df["controller"]))
  paths = {"solve_times": out / "solve_times.png", "cost": out / "cost.png", "failures": out / "failures.png",
           "report": out / "report.md"}  # fmt: skip
  for name, draw in (("solve_times", _solve_times), ("cost", _cost), ("failures", _failure_map)):
    fig = draw(plt, df, names)
    fig.tight_layout()
    fig.savefig(paths[name], dpi=110)
    plt.close(fig)
  paths["report"].write_text(_markdown(df, names))
  return paths


def _solve_times(plt: Any, df: Any, names: list[str]) -> Any:
  fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(names) + 2), 4.5))
  data, labels = [], []
  for name in names:
    rows = df[(df["controller"] == name) & ~df["failed"]]
    data += [rows["solve_ms_median"].to_numpy(), rows["solve_ms_p95"].to_numpy()]
    labels += [f"{name}\nmedian", f"{name}\np95"]
  ax.boxplot(data, tick_labels=labels, showfliers=True)
  ax.set_yscale("log")
  ax.set_ylabel("solve time per run [ms]")
  ax.set_title("solve time per controller (runs that completed)")
  return fig


def _cost(plt: Any, df: Any, names: list[str]) -> Any:
  fig, ax = plt.subplots(figsize=(9, 4.5))
  for name in names:
    rows = df[df["controller"] == name]
    ax.plot(rows["scenario"], rows["cost"], ".-", label=name, linewidth=0.8)
  positive = df["cost"].to_numpy(dtype=float)
  if np.all(positive[np.isfinite(positive)] > 0):
    ax.set_yscale("log")
  ax.set_xlabel("scenario")
  ax.set_ylabel("closed-loop cost")
  ax.legend()
  ax.set_title("closed-loop cost per scenario (gaps: failed runs)")
  return fig


def _failure_map(plt: Any, df: Any, names: list[str]) -> Any:
  columns = [c for c in df.columns if c.startswith("x0_")]
  spread = sorted(columns, key=lambda c: -float(np.nanstd(df[c].to_numpy(dtype=float))))[:2]
  fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4.2), squeeze=False)
  for ax, name in zip(axes[0], names, strict=True):
    rows = df[df["controller"] == name]
    x = rows[spread[0]] if spread else rows["scenario"]
    y = rows[spread[1]] if len(spread) > 1 else np.zeros(len(rows))
    ok = ~rows["failed"].to_numpy(dtype=bool)
    points = ax.scatter(x[ok], y[ok], c=rows["failures"][ok], cmap="viridis_r", s=25, vmin=0)
    ax.scatter(x[~ok], y[~ok], marker="x", color="red", s=40, label="run failed")
    fig.colorbar(points, ax=ax, label="controller calls that failed")
    ax.set_xlabel(spread[0] if spread else "scenario")
    ax.set_ylabel(spread[1] if len(spread) > 1 else "")
    ax.set_title(name)
    if not ok.all():
      ax.legend(loc="upper right", fontsize="small")
  return fig


def _markdown(df: Any, names: list[str]) -> str:
  """The summary table, a row per controller, and the failed runs' reasons."""
  header = "| controller | " + " | ".join(h for h, _ in SUMMARY) + " |"
  lines = ["# Campaign report", "", f"{len(df)} runs of {len(names)} controllers.", "", header,
           "|" + "---|" * (len(SUMMARY) + 1)]  # fmt: skip
  for name in names:
    rows = df[df["controller"] == name]
    lines.append(f"| {name} | " + " | ".join(_cell(value(rows)) for _, value in SUMMARY) + " |")
  failed = df[df["failed"]]
  if len(failed):
    lines += ["", "## Failed runs", "", "| controller | scenario | why |", "|---|---|---|"]
    lines += [f"| {r.controller} | {r.scenario} | {str(r.failure).replace('|', '/')} |" for r in failed.itertuples()]
  return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
  if isinstance(value, (int, np.integer)):
    return str(int(value))
  return "-" if not np.isfinite(value) else f"{float(value):.4g}"
