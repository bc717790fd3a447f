"""Which devices can run generated functions on this machine, and why the others cannot."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass

from anvil.codegen.jit import CompilerNotFoundError, find_compiler, find_nvcc

CUDA_DRIVER = "libcuda.so.1"
METAL_FRAMEWORK = "/System/Library/Frameworks/Metal.framework/Metal"


class DeviceUnavailableError(RuntimeError):
  """A function was called on a device this machine cannot run (the message says why)."""


@dataclass(frozen=True)
class DeviceInfo:
  """One device kind and whether this machine can run generated functions on it.

  Attributes:
    name: "CPU", "CUDA" or "METAL".
    usable: whether functions on this device can be called from Python here (any device's code can be generated).
    reason: why not, when not usable: every missing piece, separated by "; ".
    gpu: the GPU's name (CUDA device 0, or Metal's default device); empty for the CPU.
    arch: the CUDA compute capability as "sm_XY"; empty otherwise.
    memory_free: free device memory in bytes (0 where the device does not report it).
    memory_total: total device memory in bytes (Metal: the recommended working set).
  """

  name: str
  usable: bool
  reason: str = ""
  gpu: str = ""
  arch: str = ""
  memory_free: int = 0
  memory_total: int = 0

  def __str__(self) -> str:
    if not self.usable:
      return f"{self.name}: unusable ({self.reason})"
    details = [d for d in (self.gpu, self.arch) if d]
    if self.memory_total:
      details.append(f"{self.memory_free / 2**30:.1f} of {self.memory_total / 2**30:.1f} GiB free")
    return f"{self.name}: usable" + (f" ({', '.join(details)})" if details else "")


def _cpu() -> DeviceInfo:
  try:
    find_compiler()
  except CompilerNotFoundError as e:
    return DeviceInfo("CPU", False, str(e))
  return DeviceInfo("CPU", True)


def _nvrtc_found() -> bool:
  from anvil.codegen.gpu import NVRTC_LIBRARIES  # NOTE: late import: gpu imports the renderers, which import tinygrad

  names = [os.environ.get("ANVIL_NVRTC_LIBRARY", ""), *NVRTC_LIBRARIES]
  for name in filter(None, names):
    try:
      ctypes.CDLL(name)
      return True
    except OSError:
      continue
  return False


def _cuda_gpu(cuda: ctypes.CDLL) -> tuple[str, DeviceInfo | None]:
  """Initialise the driver and describe device 0; a reason instead when that fails."""

  def call(fn: Callable[..., int], *args: object) -> None:
    if (status := fn(*args)) != 0:
      message = ctypes.c_char_p()
      cuda.cuGetErrorString(status, ctypes.byref(message))
      raise OSError(f"{fn.__name__}: {(message.value or b'unknown error').decode()} ({status})")

  try:
    call(cuda.cuInit, 0)
    count, device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    call(cuda.cuDeviceGetCount, ctypes.byref(count))
    if count.value == 0:
      return "the CUDA driver sees no GPU", None
    call(cuda.cuDeviceGet, ctypes.byref(device), 0)
    name = ctypes.create_string_buffer(256)
    call(cuda.cuDeviceGetName, name, 256, device)
    call(cuda.cuDeviceGetAttribute, ctypes.byref(major), 75, device)
    call(cuda.cuDeviceGetAttribute, ctypes.byref(minor), 76, device)
    context, free, total = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    call(cuda.cuDevicePrimaryCtxRetain, ctypes.byref(context), device)
    try:
      call(cuda.cuCtxSetCurrent, context)
      call(cuda.cuMemGetInfo_v2, ctypes.byref(free), ctypes.byref(total))
    finally:
      cuda.cuDevicePrimaryCtxRelease_v2(device)
  except OSError as e:
    return f"the CUDA driver failed: {e}", None
  arch = f"sm_{major.value}{minor.value}"
  return "", DeviceInfo("CUDA", True, "", name.value.decode(), arch, free.value, total.value)


def _cuda() -> DeviceInfo:
  reasons = []
  try:
    find_nvcc()
  except CompilerNotFoundError as e:
    reasons.append(str(e))
  if not _nvrtc_found():
    reasons.append("NVRTC not found (install the CUDA toolkit or set ANVIL_NVRTC_LIBRARY to libnvrtc.so)")
  try:
    cuda = ctypes.CDLL(CUDA_DRIVER)
  except OSError:
    return DeviceInfo("CUDA", False, "; ".join([f"no CUDA driver ({CUDA_DRIVER} not found)", *reasons]))
  reason, info = _cuda_gpu(cuda)
  if info is None:
    return DeviceInfo("CUDA", False, "; ".join([reason, *reasons]))
  return info if not reasons else DeviceInfo("CUDA", False, "; ".join(reasons), info.gpu, info.arch)


def _metal() -> DeviceInfo:
  if sys.platform != "darwin":
    return DeviceInfo("METAL", False, f"Metal needs macOS (this is {platform.system() or sys.platform})")
  try:
    find_compiler()
    ctypes.CDLL("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics")
    metal = ctypes.CDLL(METAL_FRAMEWORK)
    objc = ctypes.CDLL(ctypes.util.find_library("objc") or "libobjc.dylib")
  except (OSError, CompilerNotFoundError) as e:
    return DeviceInfo("METAL", False, str(e))
  metal.MTLCreateSystemDefaultDevice.restype = ctypes.c_void_p
  if not (device := metal.MTLCreateSystemDefaultDevice()):
    return DeviceInfo("METAL", False, "no Metal GPU (MTLCreateSystemDefaultDevice returned nil)")
  objc.sel_registerName.restype = ctypes.c_void_p
  objc.sel_registerName.argtypes = [ctypes.c_char_p]

  def send(obj: int, selector: bytes, restype: type) -> object:
    fn = ctypes.CFUNCTYPE(restype, ctypes.c_void_p, ctypes.c_void_p)(("objc_msgSend", objc))
    return fn(obj, objc.sel_registerName(selector))

  name = send(send(device, b"name", ctypes.c_void_p), b"UTF8String", ctypes.c_char_p)
  total = send(device, b"recommendedMaxWorkingSetSize", ctypes.c_uint64)
  return DeviceInfo("METAL", True, "", name.decode() if isinstance(name, bytes) else "", "", 0, int(total or 0))


_PROBES = {"CPU": _cpu, "CUDA": _cuda, "METAL": _metal}


def devices() -> tuple[DeviceInfo, ...]:
  """Every device kind, with whether functions on it can be called here and, if not, why.

  Generating code (`generate_module`) works for every device on any machine; calling a function needs its device
  usable: a C++ compiler for the CPU; the CUDA driver, a GPU, NVRTC and nvcc for CUDA; macOS and a Metal GPU for Metal.

  Example:
    >>> for d in av.devices(): print(d)
    CPU: usable
    CUDA: usable (NVIDIA H100 80GB HBM3, sm_90, 78.6 of 79.1 GiB free)
    METAL: unusable (Metal needs macOS (this is Linux))
  """
  return tuple(probe() for probe in _PROBES.values())


def require_device(name: str) -> DeviceInfo:
  """The usable device `name`, or DeviceUnavailableError with the reason it cannot be used."""
  info = _PROBES[name]()
  if not info.usable:
    raise DeviceUnavailableError(f"device {name} is not usable on this machine: {info.reason}")
  return info
