"""Integer arithmetic in generated code wraps modulo 2^bits, as numpy's does: addition, subtraction, multiplication,
negation and shifts of any operands, in kernels and in straight-line code, with no undefined behaviour (UBSan runs the
code), where plain C++ overflow is undefined and optimizers fold it away (`(a * 3) // 3` returned a)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType

import anvil as av
from anvil.codegen.arg import CPP_TYPES, numpy_dtype
from anvil.codegen.gpu_renderer import WRAPPING
from anvil.problems import cartpole

DTYPES = (dtypes.int32, dtypes.int64, dtypes.int16, dtypes.int8, dtypes.uint16, dtypes.uint32)


def extremes(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
  """Operands at and near the dtype's limits, and small ones of both signs."""
  info = np.iinfo(numpy_dtype(dtype))
  root = int(np.sqrt(float(info.max))) + 1
  a = [info.max, info.min, root, -root, -7, 0, info.max, info.min, 5]
  b = [3, 3, root, root, 2, info.min, info.max, -1, -3]
  wrap = lambda v: (v - info.min) % (info.max - info.min + 1) + info.min
  return np.array([wrap(v) for v in a], numpy_dtype(dtype)), np.array([wrap(v) for v in b], numpy_dtype(dtype))


def arithmetic(a: Tensor, b: Tensor) -> tuple[Tensor, ...]:
  """Each operation that may overflow, on inputs and with constants (a * 4 is a shift)."""
  return a * b, a + b, a - b, -a, (a * 3) // 3, a * 4, a + a.max(), (a * b) * (a * b)


def expected(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
  with np.errstate(over="ignore"):
    three, four = np.array(3, a.dtype), np.array(4, a.dtype)
    return a * b, a + b, a - b, -a, (a * three) // three, a * four, a + a.max(), (a * b) * (a * b)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name.replace(" ", "_"))
def test_integer_arithmetic_wraps_as_numpy(dtype: DType) -> None:
  a, b = extremes(dtype)
  inputs = [av.Arg(a.shape, dtype, name="a"), av.Arg(b.shape, dtype, name="b")]
  f = av.NumericalFunction(f"wrap_{numpy_dtype(dtype).name}", arithmetic, inputs)
  for got, want in zip(f(a, b), expected(a, b), strict=True):
    np.testing.assert_array_equal(got, want)


def chained(a: Tensor) -> Tensor:
  """Hundreds of small ops (straight-line code) that overflow int32 again and again."""
  x, outs = a[0:1], []
  for i in range(80):
    x = x * 3 + a[i % 4 : i % 4 + 1] - 1
    outs.append(x)
  return Tensor.cat(*outs)


def chained_numpy(a: np.ndarray) -> np.ndarray:
  x, outs = a[0:1], []
  with np.errstate(over="ignore"):
    for i in range(80):
      x = x * np.int32(3) + a[i % 4 : i % 4 + 1] - np.int32(1)
      outs.append(x)
  return np.concatenate(outs)


def test_straight_line_code_wraps() -> None:
  a = np.array([2**31 - 1, -(2**31), 46341, -7], np.int32)
  f = av.NumericalFunction("wrap_chain", chained, [av.Arg(4, dtypes.int32)])
  assert "ANVIL_STRAIGHT_LINE" in f.source_code and "anvil::wrap_mul<int32_t>(" in f.source_code
  np.testing.assert_array_equal(f(a), chained_numpy(a))


def float_indexed(a: Tensor) -> Tensor:
  """A kernel that keeps its loops, its index arithmetic (and an integer arange's) in int."""
  b = a.reshape(1, 1, 60).expand(2, 1, 60).reshape(5, 3, 8)[:, :, 0:4]
  return b * 2.0 + (Tensor.arange(60).reshape(3, 4, 5).permute(2, 0, 1).contiguous() // 3 % 7).float()


def test_index_arithmetic_keeps_its_operators() -> None:
  looped = av.NumericalFunction("wrap_ix", float_indexed, [av.Arg(60)])
  assert "for (" in looped.source_code and "%5)" in looped.source_code
  x = np.arange(60.0)
  indices = np.arange(60).reshape(3, 4, 5).transpose(2, 0, 1) // 3 % 7
  want = 2 * np.broadcast_to(x, (2, 60)).reshape(5, 3, 8)[:, :, :4] + indices
  np.testing.assert_array_equal(looped(x), want)
  step = av.NumericalFunction("wrap_step", cartpole.step, [av.Arg(4), av.Arg(1)])
  for f in (looped, step):
    assert "anvil::wrap_" not in f.source_code
  positive = av.NumericalFunction("wrap_small", lambda a: (a & 255) * 3 + 1, [av.Arg(3, dtypes.int32)])
  assert "anvil::wrap_" not in positive.source_code  # NOTE: the ranges say it cannot overflow


def test_gpu_kernels_wrap() -> None:
  for device in ("CUDA", "METAL"):
    f = av.NumericalFunction("gwrap", lambda a, b: (a * b, -a, a + 1), [av.Arg(3, dtypes.int32)] * 2, device=device)
    for helper in ("mul", "neg", "add"):
      assert f"anvil_wrap_{helper}<int>(" in f.header_code
    assert "T anvil_wrap_shl(" in f.header_code


def test_gpu_wrapping_helpers_match_numpy(tmp_path: Path) -> None:
  # NOTE: no GPU here: the helpers of the CUDA and Metal preludes, compiled as C++ for the host, give numpy's results.
  lines, want = [], []
  for dtype in DTYPES:
    t, (a, b) = CPP_TYPES[dtype], extremes(dtype)
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
      args = f"({t}){x % 2**64}ULL, ({t}){y % 2**64}ULL"
      calls = [f"anvil_wrap_{op}<{t}>({args})" for op in ("add", "sub", "mul")]
      calls += [f"anvil_wrap_neg<{t}>(({t}){x % 2**64}ULL)", f"anvil_wrap_shl<{t}>(({t}){x % 2**64}ULL, ({t})2)"]
      lines += [f'  std::printf("%lld\\n", (long long){c});' for c in calls]
    with np.errstate(over="ignore"):
      for x, y in zip(a, b, strict=True):
        want += [int(v) for v in (x + y, x - y, x * y, -x, x * np.array(4, a.dtype))]
  helpers = WRAPPING.format(q="inline", u="unsigned long long")
  (tmp_path / "main.cpp").write_text(
    f"#include <cstdint>\n#include <cstdio>\n{helpers}\nint main() {{\n" + "\n".join(lines) + "\n}\n"
  )
  subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Werror", "main.cpp", "-o", "main"], cwd=tmp_path, check=True)
  got = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.split()
  assert [int(v) for v in got] == want


SANITIZED = """
import numpy as np
from tinygrad import dtypes
import anvil as av
from tests.integration.test_integer_wrapping import DTYPES, arithmetic, chained, chained_numpy, expected, extremes
from anvil.codegen.arg import numpy_dtype
for dtype in DTYPES:
  a, b = extremes(dtype)
  args = [av.Arg(a.shape, dtype), av.Arg(b.shape, dtype)]
  f = av.NumericalFunction(f"ub_{numpy_dtype(dtype).name}", arithmetic, args)
  for got, want in zip(f(a, b), expected(a, b), strict=True):
    np.testing.assert_array_equal(got, want)
a = np.array([2**31 - 1, -(2**31), 46341, -7], np.int32)
np.testing.assert_array_equal(av.NumericalFunction("ub_chain", chained, [av.Arg(4, dtypes.int32)])(a), chained_numpy(a))
print("clean")
"""


@pytest.mark.slow
def test_integer_code_is_clean_under_ubsan(tmp_path: Path) -> None:
  # NOTE: a cache of its own, every library built with UBSan, which aborts at the first undefined operation
  env = {**os.environ, "ANVIL_CACHE_DIR": str(tmp_path / "cache"),
         "ANVIL_CXXFLAGS": "-fsanitize=undefined -fno-sanitize-recover=all"}  # fmt: skip
  run = subprocess.run([sys.executable, "-c", textwrap.dedent(SANITIZED)], env=env, capture_output=True, text=True,
                       cwd=Path(__file__).parents[2], timeout=600)  # fmt: skip
  assert run.returncode == 0 and "clean" in run.stdout, run.stderr[-3000:]
