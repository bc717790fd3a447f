"""The command line every MPC example shares: `--out DIR` (where the plot goes) and `--steps K`."""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def example_arguments(description: str | None, steps: int) -> argparse.Namespace:
  """Parse `--out` (default build/examples, created) and `--steps` (default `steps`)."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--out", type=Path, default=ROOT / "build" / "examples", help="folder for the plot")
  parser.add_argument("--steps", type=int, default=steps, help="closed-loop steps")
  args = parser.parse_args()
  args.out.mkdir(parents=True, exist_ok=True)
  return args
