"""Smoke runs of what users see first: the demo and the README example."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_and_matches_numpy() -> None:
  proc = subprocess.run([sys.executable, "examples/demo.py"], cwd=ROOT, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
  assert proc.returncode == 0, proc.stderr
  errors = [float(e) for e in re.findall(r"max \|(?:anvil|C\+\+) - numpy\| = ([0-9.e+-]+)", proc.stdout)]
  assert len(errors) == 2 and max(errors) < 1e-12, proc.stdout
  assert (ROOT / "build" / "demo" / "quadrotor.hpp").exists()


def test_readme_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  readme = (ROOT / "README.md").read_text()
  code = readme.split("```python\n")[1].split("```")[0]
  monkeypatch.chdir(tmp_path)
  scope: dict = {}
  exec(compile(code, "README.md", "exec"), scope)
  np.testing.assert_allclose(scope["v"], [0.0, 1.0, 0.0], atol=1e-15)
  assert float(scope["e"]) == pytest.approx(0.5 * (2.3e-3 + 2.3e-3 + 4.0e-3), rel=1e-15)
  np.testing.assert_array_equal(scope["Ax"], np.ones(3))
  assert (tmp_path / "build" / "robot_math.hpp").exists()
