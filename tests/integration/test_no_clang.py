"""Tracing, scheduling and rendering need no clang and open no tinygrad device; only compiling needs a compiler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import numpy as np
import anvil as av
from tinygrad.device import Device
from anvil.problems import quadrotor
J = av.Tensor(np.diag([1.0, 2.0, 3.0]))
f = av.NumericalFunction("noclang_quad", lambda x, u: (quadrotor.step(x, u), J @ x[9:12]), (av.Arg(12), av.Arg(4)))
assert "std::cos" in f.source_code and "std::sin" in f.source_code
g = av.NumericalFunction("noclang_again", lambda x: J @ x, av.Arg(3))  # the constant is traced a second time
assert "0x1.8000000000000p+1" in g.source_code, "the captured constant's data must survive a second trace"
assert Device._opened_devices <= {"NPY", "PYTHON"}, Device._opened_devices  # host memory only
print("ok")
"""


def test_tracing_and_rendering_without_clang(tmp_path: Path) -> None:
  env = {**os.environ, "CC": "/nonexistent/clang", "ALLOW_DEVICE_USAGE": "0", "PYTHONPATH": str(ROOT),
         "ANVIL_CACHE_DIR": str(tmp_path / "anvil"), "CACHEDB": str(tmp_path / "tinygrad.db"),
         "XDG_CACHE_HOME": str(tmp_path / "xdg")}  # fmt: skip
  env.pop("DEV", None)
  proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True)
  assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
