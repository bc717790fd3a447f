"""The Python call path of a GPU function: host numpy arrays in and out, or (CUDA) device arrays through DLPack."""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anvil.codegen import dlpack
from anvil.codegen.arg import Arg, numpy_dtype
from anvil.codegen.cache import make_private_dirs
from anvil.codegen.caller import convert_input, count_error
from anvil.codegen.jit import cache_dir
from anvil.codegen.native import NativeHandle
from anvil.codegen.trace import OutputSpec

#: Device pointers handed to kernels must be this aligned (tinygrad's kernels load float4/double2 vectors).
DEVICE_ALIGNMENT = 16


def _check(name: str, error: bytes | None) -> None:
  if error is not None:
    raise RuntimeError(f"{name}: {error.decode(errors='replace')}")


def gpu_programs() -> Path:
  """The folder where CUDA keeps the kernels `init_ws()` compiles (the configuration of a GPU function's workspace)."""
  programs = cache_dir() / "gpu-programs"
  make_private_dirs(programs)
  return programs


class _Driver:
  """The few CUDA driver calls the Python side makes: output memory on the primary context of device 0."""

  def __init__(self) -> None:
    self.lib = ctypes.CDLL("libcuda.so.1")
    self.context = ctypes.c_void_p()
    self.check("cuInit", 0)
    self.check("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), 0)

  def check(self, fn: str, *args: Any) -> None:
    if (status := getattr(self.lib, fn)(*args)) != 0:
      raise RuntimeError(f"CUDA error in {fn} ({status})")

  def alloc(self, nbytes: int) -> int:
    self.check("cuCtxSetCurrent", self.context)
    pointer = ctypes.c_uint64()
    self.check("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1)))
    return pointer.value

  def free(self, pointer: int) -> None:
    self.lib.cuCtxSetCurrent(self.context)
    self.lib.cuMemFree_v2(ctypes.c_uint64(pointer))

  def copy(self, fn: str, dst: int, src: int, nbytes: int) -> None:
    """cuMemcpyHtoD_v2 or cuMemcpyDtoH_v2 of `nbytes` (host and device addresses are both 64-bit integers)."""
    self.check("cuCtxSetCurrent", self.context)
    self.check(fn, ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes))


@functools.cache
def _driver() -> _Driver:
  return _Driver()


class CudaArray:
  """A C-contiguous array in CUDA device memory, returned by CUDA functions called with device arrays.

  Hand it to any DLPack consumer without a copy (`cupy.from_dlpack(y)`, `torch.from_dlpack(y)`), or copy it to the
  host with `numpy()` / `np.asarray(y)`. The memory is freed once this object and every consumer are done with it.

  Attributes:
    shape: the array's shape.
    dtype: its numpy dtype.
    pointer: the device address.
  """

  def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
    self.shape, self.dtype = tuple(shape), np.dtype(dtype)
    self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
    self.pointer = _driver().alloc(self.nbytes)
    weakref.finalize(self, _driver().free, self.pointer)

  @classmethod
  def from_numpy(cls, array: np.ndarray) -> CudaArray:
    """A device copy of a host array (made C-contiguous)."""
    host = np.ascontiguousarray(array)
    out = cls(host.shape, host.dtype)
    _driver().copy("cuMemcpyHtoD_v2", out.pointer, host.ctypes.data, out.nbytes)
    return out

  def __dlpack__(self, *, stream: object = None, **_: object) -> Any:
    """A DLPack capsule over the device memory (the data is ready: the function synchronized before returning)."""
    return dlpack.export_array(self.pointer, (dlpack.CUDA, 0), self.shape, self.dtype, self)

  def __dlpack_device__(self) -> tuple[int, int]:
    """(CUDA, device 0)."""
    return dlpack.CUDA, 0

  def numpy(self) -> np.ndarray:
    """A host copy."""
    out = np.empty(self.shape, self.dtype)
    _driver().copy("cuMemcpyDtoH_v2", out.ctypes.data, self.pointer, self.nbytes)
    return out

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    return self.numpy() if dtype is None else self.numpy().astype(dtype)

  def __repr__(self) -> str:
    return f"CudaArray(shape={self.shape}, dtype={self.dtype})"


def _is_cuda_array(value: object) -> bool:
  device = getattr(value, "__dlpack_device__", None)
  return device is not None and not isinstance(value, np.ndarray) and device()[0] == dlpack.CUDA


def _import_input(name: str, index: int, arg: Arg, value: object) -> dlpack.Imported:
  what = f"{name}: input {index} ({arg.name})"
  if not _is_cuda_array(value):
    raise TypeError(f"{what} is a host array while other inputs are CUDA arrays; pass all inputs on one side")
  array = dlpack.import_array(value, stream=1)  # NOTE: 1 is the legacy default stream, which the kernels run on
  problem = (
    f"lives on CUDA device {array.device[1]}, anvil uses device 0" if array.device[1] != 0
    else f"has dtype {array.dtype}, expected {numpy_dtype(arg.dtype)} (no implicit casts on the GPU)"
    if array.dtype != numpy_dtype(arg.dtype)
    else f"has shape {array.shape}, expected {arg.shape}" if array.shape != arg.shape
    else "is not C-contiguous" if not array.contiguous
    else f"is not {DEVICE_ALIGNMENT}-byte aligned" if array.pointer % DEVICE_ALIGNMENT
    else ""
  )  # fmt: skip
  if problem:
    array.release()
    raise (TypeError if "dtype" in problem else ValueError)(f"{what}: the CUDA array {problem}")
  return array


def make_gpu_caller(
  name: str,
  device: str,
  inputs: Sequence[Arg],
  outputs: Sequence[OutputSpec],
  ws: NativeHandle,
  wrap: Callable[..., Any] | None,
) -> Callable[..., Any]:
  """`caller(*arrays)` on the workspace `ws`: host arrays go through `call()` (copies in and out); on CUDA, device
  arrays (anything with `__dlpack__` on a CUDA device) go through `call_device()` and the outputs come back as
  `CudaArray`s."""
  n = len(inputs) + len(outputs)
  host = ws.entry("call", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)
  device_call = ws.entry("call_device", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p) if device == "CUDA" else None
  dtypes = [numpy_dtype(o.dtype) for o in outputs]

  def result(outs: list[Any]) -> Any:
    value = outs[0] if len(outs) == 1 else tuple(outs)
    return wrap(value) if wrap is not None else value

  def on_device(args: tuple[Any, ...]) -> Any:
    assert device_call is not None
    borrowed: list[dlpack.Imported] = []
    try:
      for i, (arg, value) in enumerate(zip(inputs, args, strict=True)):
        borrowed.append(_import_input(name, i, arg, value))
      outs = [CudaArray(o.shape, dt) for o, dt in zip(outputs, dtypes, strict=True)]
      pointers = (ctypes.c_uint64 * max(n, 1))(*(a.pointer for a in borrowed), *(o.pointer for o in outs))
      _check(name, device_call(pointers, ws.pointer))
    finally:
      for array in borrowed:
        array.release()
    return result(outs)

  def caller(*args: Any) -> Any:
    if len(args) != len(inputs):
      raise count_error(name, inputs, len(args))
    if device_call is not None and any(map(_is_cuda_array, args)):
      return on_device(args)
    arrays = [convert_input(name, i, arg, value) for i, (arg, value) in enumerate(zip(inputs, args, strict=True))]
    outs = [np.empty(o.shape, dt) for o, dt in zip(outputs, dtypes, strict=True)]
    pointers = (ctypes.c_void_p * max(n, 1))(*(a.ctypes.data for a in (*arrays, *outs)))
    _check(name, host(pointers, ws.pointer))
    return result(outs)

  return caller
