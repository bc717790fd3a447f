"""The command line every MPC example shares: `--out DIR` (where the plot goes) and `--steps K`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def example_arguments(
  description: str | None, steps: int, flags: Mapping[str, str] | None = None
) -> argparse.Namespace:
  """Parse `--out` (default build/examples, created), `--steps` (default `steps`) and the example's own on/off `flags`
  ({name: help})."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--out", type=Path, default=ROOT / "build" / "examples", help="folder for the plot")
  parser.add_argument("--steps", type=int, default=steps, help="closed-loop steps")
  for name, help_text in (flags or {}).items():
    parser.add_argument(f"--{name}", action="store_true", help=help_text)
  args = parser.parse_args()
  args.out.mkdir(parents=True, exist_ok=True)
  return args
