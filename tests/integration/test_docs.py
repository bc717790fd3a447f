"""Every Python block of README.md and docs/ runs as written, in order within its page (tests/integration/docs_runner.py
runs a page in a fresh interpreter, in an empty working directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.docs_runner import python_blocks

RUNNER = Path(__file__).with_name("docs_runner.py")
PAGES = sorted(
  path.relative_to(ROOT).as_posix()
  for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
  if python_blocks(path.read_text())
)


def test_the_runner_finds_blocks_their_lines_and_requirements() -> None:
  text = "# t\n\n```python\na = 1\n```\n\n```bash\nls\n```\n<!-- requires: cuda -->\n```python\nb = a\nc = b\n```\n"
  assert python_blocks(text) == [(4, "a = 1", None), (12, "b = a\nc = b", "cuda")]


def test_the_runner_saves_files_and_runs_marked_shell_blocks(tmp_path: Path) -> None:
  page = tmp_path / "page.md"
  page.write_text(
    "<!-- file: hello.txt -->\n```text\nhi\n```\n\n```bash\nexit 1\n```\n\n<!-- run -->\n"
    "```bash\ncp hello.txt copy.txt\n```\n\n```python\nassert open('copy.txt').read() == 'hi\\n'\n```\n"
  )
  out = subprocess.run([sys.executable, str(RUNNER), str(page)], cwd=tmp_path, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  assert (tmp_path / "copy.txt").read_text() == "hi\n"


def test_a_failing_block_names_its_page_and_line(tmp_path: Path) -> None:
  page = tmp_path / "page.md"
  page.write_text("text\n\n```python\nx = 1\n```\n\n```python\ny = x\nz = undefined_name\n```\n")
  out = subprocess.run([sys.executable, str(RUNNER), str(page)], cwd=tmp_path, capture_output=True, text=True)
  assert out.returncode != 0
  assert f'File "{page}", line 9' in out.stderr and "undefined_name" in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_written(page: str, tmp_path: Path) -> None:
  env = {**os.environ, "MPLBACKEND": "Agg"}
  out = subprocess.run([sys.executable, str(RUNNER), str(ROOT / page)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)  # fmt: skip
  assert out.returncode == 0, f"{page}:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
