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
from anvil.validation import as_array, check_shape


def convert_input(name: str, index: int, arg: Arg, value: object) -> np.ndarray:
  """The slow path: turn `value` into a C-contiguous array of `arg`'s dtype and shape, or raise naming the input (the
  checks of `anvil.validation`)."""
  what = f"input {index} ({arg.name})"
  dtype = numpy_dtype(arg.dtype)
  arr = as_array(name, what, value, dtype)
  check_shape(name, what, arr, arg.shape)
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
  pointers = ctypes.c_void_p * n

  def call(*arrays_then_ws: Any) -> None:
    # NOTE: a pointer array per call: one shared by the calls would be refilled by another thread between the
    # statements of this one
    slow(pointers(*(a.ctypes.data for a in arrays_then_ws[:-1])), arrays_then_ws[-1])

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
