"""MkDocs hooks: the site's home page is README.md (its links into docs/ and to the measurements made the site's)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def on_page_read_source(page: Any, config: Any) -> str | None:
  """README.md's text for index.md, with `docs/...` links rewritten to the site's pages."""
  if page.file.src_uri != "index.md":
    return None
  return re.sub(r"\]\(docs/", "](", README.read_text()).replace("](benchmarks/RESULTS.md)", "](results.md)")
