"""Runs the code blocks of one Markdown page in order, as a reader would paste them: `python
tests/integration/docs_runner.py PAGE.md` (from any working directory; files the blocks write land there).

Python blocks run in one namespace. A block (of any language) preceded by `<!-- file: NAME -->` is saved as NAME
instead (what the page tells the reader to save); a shell block preceded by `<!-- run -->` runs in bash. A block
preceded by `<!-- requires: cuda -->` runs only where anvil can call a CUDA device (it prints why it did not).
Tracebacks name the page and the line of the page.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"<!--\s*(requires|file|run)\s*:?\s*([\w./-]*)\s*-->")


@dataclass(frozen=True)
class Block:
  """A fenced code block: its language, the page line its code starts on, the code, and the comment marking it."""

  language: str
  line: int
  code: str
  mark: tuple[str, str] | None = None


def blocks(text: str) -> list[Block]:
  """Every fenced code block of a Markdown text, with the `<!-- ... -->` mark on the line before it."""
  found, lines, i = [], text.splitlines(), 0
  while i < len(lines):
    opened = FENCE.match(lines[i])
    if opened is None:
      i += 1
      continue
    end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
    mark = MARK.search(lines[i - 1]) if i > 0 else None
    code = "\n".join(lines[i + 1 : end])
    found.append(Block(opened.group(1), i + 2, code, (mark.group(1), mark.group(2)) if mark else None))
    i = end + 1
  return found


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
  """(first line of the code, the code, its requirement or None) for each ```python block that runs."""
  return [(b.line, b.code, b.mark[1] if b.mark and b.mark[0] == "requires" else None)
          for b in blocks(text) if b.language == "python" and not (b.mark and b.mark[0] == "file")]  # fmt: skip


def available(requirement: str) -> bool:
  """Whether this machine meets a block's requirement."""
  if requirement == "cuda":
    import anvil as av

    return any(d.name == "CUDA" and d.usable for d in av.devices())
  raise ValueError(f"unknown requirement {requirement!r}")


def main(page: str) -> None:
  """Run (or save) the page's blocks in order."""
  path = Path(page).resolve()
  namespace: dict[str, object] = {"__name__": "__main__"}
  for block in blocks(path.read_text()):
    kind, value = block.mark or ("", "")
    if kind == "file":
      Path(value).write_text(block.code + "\n")
    elif kind == "requires" and not available(value):
      print(f"{path.name}:{block.line}: skipped (requires {value})")
    elif block.language == "python":
      exec(compile("\n" * (block.line - 1) + block.code, str(path), "exec"), namespace)
    elif kind == "run" and subprocess.run(["bash", "-euo", "pipefail", "-c", block.code]).returncode != 0:
      sys.exit(f"{path}:{block.line}: the shell block failed")


if __name__ == "__main__":
  main(sys.argv[1])
