"""House style: ruff lint and format are clean on everything we ship."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["anvil", "tests", "examples", "benchmarks"]


def test_ruff_check() -> None:
  proc = subprocess.run([sys.executable, "-m", "ruff", "check", *PATHS], capture_output=True, text=True, cwd=ROOT)
  assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
  proc = subprocess.run(
    [sys.executable, "-m", "ruff", "format", "--check", *PATHS], capture_output=True, text=True, cwd=ROOT
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
