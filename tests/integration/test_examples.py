"""Smoke runs of what users see first: the demo and the first example of the guide."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.docs_runner import python_blocks

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_python_and_cpp_closed_loops_match() -> None:
  """`make demo`: the cart-pole MPC's closed loop from Python and from the standalone C++ harness, one table."""
  png = ROOT / "build" / "demo" / "cartpole_closed_loop.png"
  png.unlink(missing_ok=True)
  proc = subprocess.run([sys.executable, "examples/demo.py"], cwd=ROOT, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
  assert proc.returncode == 0, proc.stderr
  costs = re.search(r"^closed-loop cost\s+([0-9.]+)\s+([0-9.]+)\s*$", proc.stdout, re.MULTILINE)
  assert costs, proc.stdout
  for cost in costs.groups():
    assert float(cost) == pytest.approx(5.478384, rel=1e-5), proc.stdout
  deviation = re.search(r"^max \|x_py - x_cpp\| over the run\s+([0-9.e+-]+)\s*$", proc.stdout, re.MULTILINE)
  assert deviation and float(deviation.group(1)) < 1e-9, proc.stdout
  assert png.exists()


def test_functions_guide_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """The functions guide's first blocks run and their numbers are right."""
  page = ROOT / "docs" / "guide" / "functions.md"
  monkeypatch.chdir(tmp_path)
  scope: dict = {}
  for line, code, _ in python_blocks(page.read_text())[:3]:
    exec(compile("\n" * (line - 1) + code, str(page), "exec"), scope)
  np.testing.assert_allclose(scope["v"], [0.0, 1.0, 0.0], atol=1e-15)
  assert float(scope["e"]) == pytest.approx(0.5 * (2.3e-3 + 2.3e-3 + 4.0e-3), rel=1e-15)
  np.testing.assert_array_equal(scope["Ax"], np.ones(3))
  w, angle = np.array([0.2, -0.5, 1.0]), np.array(0.3)  # the composition equals its two functions called in turn
  composed, in_turn = scope["spin"](w, angle), scope["energy"](scope["rotate_z"](w, angle))
  assert float(composed) == pytest.approx(float(in_turn), rel=1e-14)
  assert (tmp_path / "build" / "robot_math.hpp").exists()
