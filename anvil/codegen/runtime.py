"""Runtime headers: the C++ that does not change with the problem (buffers, GPU support, the QP and SQP algorithms)
written as plain headers templated on sizes, each in an `include/anvil/` folder beside the Python that uses it.

Generated code includes them as `#include "anvil/<name>.hpp"`; `inline_runtime_headers` replaces each such line by the
header's text (its own runtime includes first, every header once), so a generated module stays self-contained: one
`.hpp` and one `.cpp`, or a single `.hpp` on a GPU. Compiled on their own, the headers only need `-I` pointing at
the `include` folders (`INCLUDE_DIRS`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

#: Every package's folder of runtime headers (`anvil/<package>/include`).
INCLUDE_DIRS: tuple[Path, ...] = tuple(sorted(Path(__file__).resolve().parent.parent.glob("*/include")))
_RUNTIME_INCLUDE = re.compile(r'^#include "(anvil/[A-Za-z0-9_]+\.hpp)"[^\n]*\n', re.MULTILINE)


def runtime_include(name: str) -> str:
  """The `#include` target of the runtime header `name` (e.g. "riccati" -> '"anvil/riccati.hpp"'), checked to exist."""
  header_path(f"anvil/{name}.hpp")
  return f'"anvil/{name}.hpp"'


def header_path(name: str) -> Path:
  """The file of the runtime header `name` ("anvil/<file>.hpp"); raises FileNotFoundError naming the folders."""
  for root in INCLUDE_DIRS:
    if (path := root / name).is_file():
      return path
  raise FileNotFoundError(f"runtime header {name} not found in {', '.join(map(str, INCLUDE_DIRS))}")


@functools.cache
def _text(name: str) -> str:
  return header_path(name).read_text()


def inline_runtime_headers(text: str, done: set[str] | None = None) -> str:
  """`text` with every `#include "anvil/<name>.hpp"` line replaced by that header's text, its own runtime includes
  inlined first; a header already in `done` (which collects the ones inlined here) is dropped instead."""
  done = set() if done is None else done

  def expand(match: re.Match[str]) -> str:
    name = match.group(1)
    if name in done:
      return ""
    done.add(name)
    return inline_runtime_headers(_text(name), done).rstrip("\n") + "\n"

  return _RUNTIME_INCLUDE.sub(expand, text)
