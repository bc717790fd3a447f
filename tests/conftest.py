"""Shared test set-up: a cache directory inside the repository's build/ folder, and helpers for compilers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ANVIL_CACHE_DIR", str(ROOT / "build" / "test-cache"))


def available_compilers() -> list[str]:
  """The C++ compilers on this machine among g++ and clang++ (at least one is required)."""
  return [c for c in ("g++", "clang++") if shutil.which(c)]


@pytest.fixture(params=available_compilers())
def cxx(request: pytest.FixtureRequest) -> str:
  """Each available C++ compiler in turn."""
  return str(request.param)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
  """An empty anvil cache directory for this test."""
  cache = tmp_path / "cache"
  monkeypatch.setenv("ANVIL_CACHE_DIR", str(cache))
  return cache
