"""Integer division in generated code is defined for every operand, with numpy's results: floor division and its
remainder of negative operands, x // 0 == x % 0 == 0 (zero divisors from inputs and from constants), and
MIN // -1 == MIN, MIN % -1 == 0, where plain C++ traps (SIGFPE, or SIGILL on a constant zero)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType

import anvil as av
from anvil.codegen.arg import CPP_TYPES, numpy_dtype
from anvil.codegen.gpu_renderer import DIVISION
from anvil.problems import cartpole

DTYPES = (dtypes.int32, dtypes.int64, dtypes.int8, dtypes.uint32)


def operands(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
  """Dividends and divisors: every sign combination, zero divisors, the minimum by -1 and the extremes."""
  info = np.iinfo(numpy_dtype(dtype))
  a = [7, -7, 7, -7, 6, 0, 5, -5, info.min, info.min, info.max, info.max, info.min, 1]
  b = [2, 2, -2, -2, 3, 0, 0, 0, -1, 0, -1, info.min, info.max, -1]
  if info.min == 0:
    a, b = [v % (info.max + 1) for v in a], [v % (info.max + 1) for v in b]
  return np.array(a, numpy_dtype(dtype)), np.array(b, numpy_dtype(dtype))


def divisions(a: Tensor, b: Tensor, unit: int) -> tuple[Tensor, ...]:
  """Floor division and remainder by an input, by constant zero, by the constant `unit` (-1, or 1 when unsigned)
  and by a constant 3."""
  return a // b, a % b, a // 0, a % 0, a // unit, a % unit, a // 3, a % 3


def index_arithmetic(a: Tensor) -> Tensor:
  """A kernel that keeps its loops, dividing indices by constants (and values by constant 7)."""
  b = a.reshape(1, 1, 60).expand(2, 1, 60).reshape(5, 3, 8)[:, :, 0:4]
  return (Tensor.arange(60).reshape(3, 4, 5).permute(2, 0, 1).contiguous() // 3 + b) % 7


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name.replace(" ", "_"))
def test_integer_division_matches_numpy(dtype: DType) -> None:
  a, b = operands(dtype)
  unit = 1 if dtypes.is_unsigned(dtype) else -1
  inputs = [av.Arg(a.shape, dtype, name="a"), av.Arg(b.shape, dtype, name="b")]
  f = av.NumericalFunction("idiv", lambda a, b: divisions(a, b, unit), inputs)
  u, zero, three = (np.array(v, a.dtype) for v in (unit, 0, 3))
  with np.errstate(divide="ignore", over="ignore"):
    expected = (a // b, a % b, a // zero, a % zero, a // u, a % u, a // three, a % three)
  for got, want in zip(f(a, b), expected, strict=True):
    np.testing.assert_array_equal(got, want)


def test_guards_only_divisions_that_may_fault() -> None:
  looped = av.NumericalFunction("ix", index_arithmetic, [av.Arg(60, dtypes.int32)])
  step = av.NumericalFunction("step", cartpole.step, [av.Arg(4), av.Arg(1)])
  for f in (looped, step):
    assert "anvil::c" not in f.source_code
  assert "%5)" in looped.source_code and "/3)" in looped.source_code and "%7)" in looped.source_code
  signed = av.NumericalFunction("by_int64", lambda a, b: a // b, [av.Arg(3, dtypes.int64), av.Arg(3, dtypes.int64)])
  unsigned = av.NumericalFunction("by_uint8", lambda a: a // 0, [av.Arg(3, dtypes.uint8)])
  assert "anvil::cdiv<int64_t>(" in signed.source_code and "anvil::cmod<int64_t>(" in signed.source_code
  assert "anvil::cdiv<uint8_t>(" in unsigned.source_code


@pytest.mark.parametrize(("device", "type_name"), [("CUDA", "int"), ("METAL", "int")])
def test_gpu_kernels_guard_division(device: str, type_name: str) -> None:
  f = av.NumericalFunction("g", lambda a, b: (a // b, a // 4), [av.Arg(3, dtypes.int32)] * 2, device=device)
  assert f"anvil_cdiv<{type_name}>(" in f.header_code and f"anvil_cmod<{type_name}>(" in f.header_code
  assert "template <class T>" in f.header_code and "(val0>>2)" in f.header_code


def test_gpu_division_helpers_match_numpy(tmp_path: Path) -> None:
  # NOTE: no GPU here: the helpers of the CUDA and Metal preludes, compiled as C++ for the host, give numpy's results.
  cases = [(dtype, *operands(dtype)) for dtype in DTYPES]
  lines = []
  for dtype, a, b in cases:
    t = CPP_TYPES[dtype]
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
      args = f"({t}){x % 2**64}ULL, ({t}){y % 2**64}ULL"  # two's complement, wrapped by the conversion
      lines.append(
        f'  std::printf("%lld %lld\\n", (long long)anvil_cdiv<{t}>({args}), (long long)anvil_cmod<{t}>({args}));'
      )
  helpers = DIVISION.format(q="inline", u="unsigned long long")
  (tmp_path / "main.cpp").write_text(
    f"#include <cstdint>\n#include <cstdio>\n{helpers}\nint main() {{\n" + "\n".join(lines) + "\n}\n"
  )
  build = ["g++", "-std=c++17", "-O2", "-Wall", "-Werror", "main.cpp", "-o", "main"]
  subprocess.run(build, cwd=tmp_path, check=True)
  got = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.split()
  with np.errstate(divide="ignore", over="ignore"):
    want = [int(v) for _, a, b in cases for pair in zip(_truncated(a, b), _remainder(a, b), strict=True) for v in pair]
  assert [int(v) for v in got] == want


def _truncated(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """C's quotient (toward zero) with numpy's results where C has none."""
  q = a // np.where(b == 0, 1, b)
  return np.where(b == 0, 0, q + ((q * b != a) & ((a < 0) != (b < 0))).astype(a.dtype))


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """C's remainder (the sign of the dividend) with numpy's results where C has none."""
  return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))
