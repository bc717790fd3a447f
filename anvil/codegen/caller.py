"""The Python call path of a compiled function: a caller generated per function, validating cheaply, calling once."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from anvil.codegen.arg import Arg, numpy_dtype
from anvil.codegen.jit import array_data_offset
from anvil.codegen.native import NativeHandle
from anvil.codegen.trace import OutputSpec


def convert_input(name: str, index: int, arg: Arg, value: object) -> np.ndarray:
  """The slow path: turn `value` into a C-contiguous array of `arg`'s dtype and shape, or raise naming the input."""
  what = f"{name}: input {index} ({arg.name})"
  try:
    arr = np.asarray(value)
  except (ValueError, TypeError) as e:
    raise TypeError(f"{what}: cannot convert {type(value).__name__} to an array: {e}") from None
  dtype = numpy_dtype(arg.dtype)
  if arr.dtype.kind in "OUSVMmc" or not np.can_cast(arr.dtype, dtype, casting="same_kind"):
    raise TypeError(f"{what}: cannot cast dtype {arr.dtype} to {dtype}")
  if arr.shape != arg.shape:
    raise ValueError(f"{what}: expected shape {arg.shape}, got {arr.shape}")
  return np.ascontiguousarray(arr, dtype=dtype)


def count_error(name: str, inputs: Sequence[Arg], n: int) -> TypeError:
  """The error for a call with `n` arguments instead of one per input."""
  names = ", ".join(a.name or f"in{i}" for i, a in enumerate(inputs))
  return TypeError(f"{name}: expected {len(inputs)} input{'s' if len(inputs) != 1 else ''} ({names}), got {n}")


def _library_call(ws: NativeHandle, n: int) -> Callable[..., None]:
  """The entry point taking the `n` arrays, then the workspace pointer."""
  if array_data_offset() is not None:
    # NOTE: passing the arrays themselves (py_object) lets C++ read their data pointers; `ndarray.ctypes.data` costs
    # about a microsecond per array, more than the whole call of a small function.
    return ws.entry("call_arrays", None, *[ctypes.py_object] * n, ctypes.c_void_p)
  slow = ws.entry("call", None, ctypes.c_void_p, ctypes.c_void_p)
  ptrs = (ctypes.c_void_p * n)()

  def call(*arrays_then_ws: Any) -> None:
    for i, a in enumerate(arrays_then_ws[:-1]):
      ptrs[i] = a.ctypes.data
    slow(ptrs, arrays_then_ws[-1])

  return call


def make_caller(
  name: str, inputs: Sequence[Arg], outputs: Sequence[OutputSpec], ws: NativeHandle, wrap: Callable[..., Any] | None
) -> Callable[..., Any]:
  """A Python function `caller(*arrays)` specialised to this signature and workspace: one check per input on the fast
  path."""
  n_in, n_out = len(inputs), len(outputs)
  env: dict[str, Any] = {
    "ndarray": np.ndarray, "empty": np.empty, "ws": ws, "wsp": ws.pointer, "wrap": wrap,
    "lib_call": _library_call(ws, n_in + n_out),
    "convert": lambda i, v: convert_input(name, i, inputs[i], v),
    "wrong_count": lambda n: count_error(name, inputs, n),
  }  # fmt: skip
  lines = ["def caller(*args):", f"  if len(args) != {n_in}: raise wrong_count(len(args))"]
  ins = [f"a{i}" for i in range(n_in)]
  if n_in:
    lines.append(f"  {', '.join(ins)}, = args")
  for i, arg in enumerate(inputs):
    env[f"dt{i}"], env[f"sh{i}"] = numpy_dtype(arg.dtype), arg.shape
    lines.append(f"  if a{i}.__class__ is not ndarray or a{i}.dtype is not dt{i} or a{i}.shape != sh{i} "
                 f"or not a{i}.flags.c_contiguous: a{i} = convert({i}, a{i})")  # fmt: skip
  outs = [f"o{i}" for i in range(n_out)]
  for i, out in enumerate(outputs):
    env[f"odt{i}"], env[f"osh{i}"] = numpy_dtype(out.dtype), out.shape
    lines.append(f"  o{i} = empty(osh{i}, odt{i})")
  lines.append(f"  lib_call({', '.join([*ins, *outs, 'wsp'])})")
  result = outs[0] if n_out == 1 else f"({', '.join(outs)},)"
  lines.append(f"  return wrap({result})" if wrap is not None else f"  return {result}")
  exec(compile("\n".join(lines), f"<anvil caller {name}>", "exec"), env)
  return env["caller"]
