"""Calling a generated glue function (a `TemplatedFunction` with a JIT `call` entry point taking pointers to its
inputs, then to its output) from Python on numpy arrays."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from anvil.codegen import Arg
from anvil.codegen.native import NativeHandle


class NativelyCalled(Protocol):
  """A generated function with a JIT `call` entry point taking pointers to its inputs, then to its output."""

  name: str
  inputs: tuple[Arg, ...]

  @property
  def handle(self) -> NativeHandle:
    """Its workspace in its loaded library."""


def native_call(fn: NativelyCalled, args: tuple[Any, ...], size: int, scalar: str, lock: threading.Lock
                ) -> NDArray[np.float64]:  # fmt: skip
  """The output (`size` values) of `fn` (a function of `fn.inputs`, through its JIT library's `call` entry point:
  pointers to the inputs then the output) at numpy inputs, on one workspace under `lock`."""
  if len(args) != len(fn.inputs):
    raise TypeError(f"{fn.name}: expected {len(fn.inputs)} inputs, got {len(args)}")
  arrays = []
  for i, (a, spec) in enumerate(zip(args, fn.inputs, strict=True)):
    array = np.ascontiguousarray(a, dtype=scalar)
    if array.shape != tuple(spec.shape):
      raise ValueError(f"{fn.name}: input {i} must have shape {tuple(spec.shape)}, got {array.shape}")
    arrays.append(array)
  out = np.zeros(size, scalar)
  pointers = (ctypes.c_void_p * (len(arrays) + 1))(*(a.ctypes.data for a in (*arrays, out)))
  with lock:
    fn.handle.entry("call", None, ctypes.c_void_p, ctypes.c_void_p)(pointers, fn.handle.pointer)
  return out
