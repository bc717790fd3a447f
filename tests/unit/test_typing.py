"""The typed API: mypy infers arity and array-vs-tuple results of NumericalFunction calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "typing" / "typed_example.py"


@pytest.mark.slow
def test_mypy_infers_call_results_and_flags_wrong_arity() -> None:
  proc = subprocess.run(
    # NOTE: no cache written: the package check beside it (another worker) reads and writes the repository's, and a
    # cache written by two processes at once made mypy fail with an internal error
    [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir=/dev/null", "--follow-imports=silent",
     "--no-error-summary", str(EXAMPLE)],
    capture_output=True, text=True, cwd=EXAMPLE.parents[2],
  )  # fmt: skip
  lines = proc.stdout.splitlines()
  revealed = [ln.split("Revealed type is ")[1].strip('"') for ln in lines if "Revealed type is" in ln]
  # NOTE: the spelling of ndarray's parameters depends on the numpy and mypy versions; the structure does not.
  assert len(revealed) == 3, f"mypy exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
  single, pair, three_inputs = revealed
  assert single.startswith("numpy.ndarray[") and three_inputs == single, proc.stdout
  assert pair == f"tuple[{single}, {single}]", proc.stdout
  errors = [ln for ln in lines if ": error:" in ln]
  assert len(errors) == 1 and "Too few arguments" in errors[0] and ":30:" in errors[0], proc.stdout


@pytest.mark.slow
def test_mypy_is_clean_on_the_package() -> None:
  proc = subprocess.run([sys.executable, "-m", "mypy", "anvil"], capture_output=True, text=True, cwd=EXAMPLE.parents[2])
  assert proc.returncode == 0, proc.stdout
