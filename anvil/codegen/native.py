"""The Python side of generated code's native interface: `NativeHandle`, a workspace's lifecycle (create, use, free)
in a loaded library, and `NativeStatus`, the statuses generated solvers report as int codes."""

from __future__ import annotations

import ctypes
import functools
import weakref
from enum import StrEnum
from typing import Any, Self

#: The message of a workspace whose allocation failed (anvil/jit.hpp), raised as MemoryError.
OUT_OF_MEMORY = "out of memory (std::bad_alloc)"


class NativeHandle:
  """The workspace of the generated function `name` in a library the JIT loaded, freed when this handle is collected.

  Every JIT library exports `const char* anvil_<name>_ws_new(const char* config, void** ws)` (null on success, else
  the message of the C++ exception that stopped it, raised here as RuntimeError, or as MemoryError when allocating
  failed) and `void anvil_<name>_ws_free(void* ws)` (anvil/jit.hpp); `config` is what that function's `init_ws()`
  needs beyond its sizes (the kernel cache folder of a CUDA function), empty for most.

  Example:
    >>> handle = NativeHandle(load_library(path), "f")
    >>> call = handle.entry("call", None, ctypes.c_void_p, ctypes.c_void_p)
    >>> call(pointers, handle.pointer)
  """

  def __init__(self, lib: ctypes.CDLL, name: str, config: str = "") -> None:
    self.lib, self.name = lib, name
    new = self.entry("ws_new", ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
    free = self.entry("ws_free", None, ctypes.c_void_p)
    self.pointer = ctypes.c_void_p()
    if (error := new(config.encode(), ctypes.byref(self.pointer))) is not None:
      message = error.decode(errors="replace")
      if message == OUT_OF_MEMORY:
        raise MemoryError(f"{name}: not enough memory for its workspace")
      raise RuntimeError(f"{name}: {message}")
    weakref.finalize(self, free, self.pointer.value)

  def entry(self, what: str, restype: Any, *argtypes: Any) -> Any:
    """The library's entry point `anvil_<name>_<what>`, typed."""
    fn = self.lib[f"anvil_{self.name}_{what}"]
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


class NativeStatus(StrEnum):
  """The base of a status a generated solver reports as an int code: the position of its value in the subclass, as
  the C++ enum lists them. A `str`, so `status == "converged"` works."""

  @classmethod
  def from_code(cls, code: int) -> Self:
    """The status of the C++ code `code`."""
    return cls.codes()[code]

  @classmethod
  @functools.cache
  def codes(cls) -> tuple[Self, ...]:
    """Every status, indexed by its C++ code."""
    return tuple(cls)
