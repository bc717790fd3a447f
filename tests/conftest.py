"""Shared test set-up: a cache directory inside the repository's build/ folder, helpers for compilers, and the
controllers several test files share (one name each, so one library in the cache for all of them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
  from anvil.mpc import MPCFunction
  from anvil.qp import QPOptions

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ANVIL_CACHE_DIR", str(ROOT / "build" / "test-cache"))
#: Warnings generated modules are also clean of, beyond -Wall -Wextra (a robot's build may turn them on)
STRICT = ["-Wshadow", "-Wconversion"]


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


def write_osqp_sources(out: Path, prefix: str) -> Path:
  """OSQP's C sources and headers (with QDLDL), as the wheel generates them for a 2x2 problem, written under `out`."""
  import numpy as np
  import scipy.sparse as sp

  from anvil.qp import OSQPOptions
  from anvil.qp.osqp import EmbeddedOSQP

  pattern = sp.csc_array(np.eye(2))
  for name, text in EmbeddedOSQP(prefix, pattern, pattern, OSQPOptions()).files.items():
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
  return out


def qp_named(name: str) -> QPOptions:
  """The default options of the QP solver named `name` ("riccati", "osqp", "sparse_ipm"), for tests parametrized by
  solver name."""
  from anvil.qp import OSQPOptions, RiccatiOptions, SparseIPMOptions

  return {"riccati": RiccatiOptions, "osqp": OSQPOptions, "sparse_ipm": SparseIPMOptions}[name]()


#: The name of the stabilizing cart-pole MPC (P2, default options) that test files share: its library is built once
#: into the suite's cache and loaded by every file that asks for it. A test that changes its options or horizon takes
#: a name of its own.
SHARED_CARTPOLE = "test_mpc_stab_riccati"


def stabilizing_cartpole() -> MPCFunction:
  """A new instance of the shared stabilizing cart-pole MPC (SHARED_CARTPOLE), with its own warm start."""
  from anvil.mpc import MPCOptions
  from anvil.problems import cartpole_mpc as cm

  return cm.stabilizing(SHARED_CARTPOLE, MPCOptions())
