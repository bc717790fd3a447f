"""DLPack without dependencies: read the arrays other libraries export (CuPy, PyTorch, JAX, numpy) and export
anvil's device arrays to them, through ctypes and the Python C API's capsules (legacy, unversioned DLPack)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

#: DLPack device types.
CPU, CUDA = 1, 2
_NAME, _USED = b"dltensor", b"used_dltensor"
#: DLPack dtype codes by numpy kind.
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


class DLDevice(ctypes.Structure):
  _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
  _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
  _fields_ = [
    ("data", ctypes.c_void_p),
    ("device", DLDevice),
    ("ndim", ctypes.c_int32),
    ("dtype", DLDataType),
    ("shape", ctypes.POINTER(ctypes.c_int64)),
    ("strides", ctypes.POINTER(ctypes.c_int64)),
    ("byte_offset", ctypes.c_uint64),
  ]


class DLManagedTensor(ctypes.Structure):
  pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype, _api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype, _api.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_raw_pointer = _api["PyCapsule_GetPointer"]  # NOTE: item access gives a second handle, typed for raw addresses
_raw_pointer.restype, _raw_pointer.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _Destructor]


def dtype_of(dt: DLDataType) -> np.dtype | None:
  """The numpy dtype of a DLPack dtype, or None when numpy has none."""
  kinds = {v: k for k, v in _CODES.items()}
  if dt.lanes != 1 or dt.code not in kinds:
    return None
  return np.dtype(f"{kinds[dt.code]}{dt.bits // 8}") if dt.code != 6 else np.dtype(bool)


@dataclass
class Imported:
  """An array borrowed from another library through DLPack; `release()` hands it back (once).

  Attributes:
    pointer: the address of the first element (byte offset included).
    device: (DLPack device type, device id).
    shape: the array's shape.
    dtype: its numpy dtype, None when numpy has none.
    contiguous: whether it is C-contiguous.
  """

  pointer: int
  device: tuple[int, int]
  shape: tuple[int, ...]
  dtype: np.dtype | None
  contiguous: bool
  _managed: Any

  def release(self) -> None:
    """Call the producer's deleter: the memory may be freed or reused from now on."""
    managed, self._managed = self._managed, None
    if managed is not None and managed.contents.deleter:
      managed.contents.deleter(managed)


def import_array(obj: Any, stream: int | None = None) -> Imported:
  """Borrow `obj`'s memory through its `__dlpack__` (the consumer side of the protocol).

  `stream` is the consumer's CUDA stream, so the producer orders its pending work before it (1: the legacy default
  stream). Call `release()` on the result once done with the memory.
  """
  capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
  address = _api.PyCapsule_GetPointer(capsule, _NAME)
  _api.PyCapsule_SetName(capsule, _USED)  # NOTE: this consumer now owns it: the capsule's destructor must not free it
  managed = ctypes.cast(address, ctypes.POINTER(DLManagedTensor))
  t = managed.contents.dl_tensor
  shape = tuple(t.shape[i] for i in range(t.ndim))
  contiguous = True
  if t.strides:
    expected = 1
    for i in reversed(range(t.ndim)):
      contiguous &= shape[i] == 1 or t.strides[i] == expected
      expected *= shape[i]
  pointer = (t.data or 0) + t.byte_offset
  return Imported(pointer, (t.device.device_type, t.device.device_id), shape, dtype_of(t.dtype), contiguous, managed)


@dataclass
class _Export:
  managed: DLManagedTensor
  shape: ctypes.Array[ctypes.c_int64]
  owner: object


#: Exported tensors by the address of their DLManagedTensor: alive until the consumer calls the deleter, or the
#: capsule dies unconsumed.
_EXPORTS: dict[int, _Export] = {}


@_Deleter
def _deleter(managed: Any) -> None:
  _EXPORTS.pop(ctypes.cast(managed, ctypes.c_void_p).value or 0, None)


@_Destructor
def _capsule_destructor(capsule: int | None) -> None:
  # NOTE: the capsule is being destroyed, so it is passed as a plain address, never as a new reference
  if capsule and _api.PyCapsule_IsValid(capsule, _NAME):  # never consumed (not renamed): free the export here
    _EXPORTS.pop(_raw_pointer(capsule, _NAME) or 0, None)


def export_array(pointer: int, device: tuple[int, int], shape: tuple[int, ...], dtype: np.dtype, owner: object) -> Any:
  """A DLPack capsule over `pointer` (C-contiguous `shape` of `dtype` on `device`) that keeps `owner` alive until the
  consumer is done with it (the producer side of the protocol)."""
  dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
  managed = DLManagedTensor()
  t = managed.dl_tensor
  t.data, t.device, t.ndim, t.byte_offset = pointer, DLDevice(*device), len(shape), 0
  t.dtype = DLDataType(_CODES[dtype.kind], dtype.itemsize * 8, 1)
  t.shape, t.strides = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)), None
  managed.deleter = _deleter
  address = ctypes.addressof(managed)
  _EXPORTS[address] = _Export(managed, dims, owner)
  return _api.PyCapsule_New(address, _NAME, _capsule_destructor)
