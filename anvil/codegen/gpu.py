"""GPU functions: the device memory layout and launch sequence of a program on CUDA or Metal, and their C++.

A GPU function is header-only C++: its kernels as one raw string literal, which `init_ws()` compiles for the GPU it
finds (NVRTC for CUDA, `newLibraryWithSource:` for Metal), and host code that moves data, launches every kernel in
schedule order and synchronizes. Device memory is one allocation per workspace: the program's workspace (intermediates
and captured constants, at the offsets the CPU layout uses), then staging room for each input and output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tinygrad import dtypes
from tinygrad.uop.ops import Ops

from anvil.codegen.arg import Arg
from anvil.codegen.gpu_renderer import PRELUDES
from anvil.codegen.program import ALIGNMENT, BufferRef, ConstantData, CopyStep, KernelStep, Program
from anvil.codegen.runtime import runtime_include
from anvil.codegen.trace import HOST_DEVICES, TracedGraph, constant_bytes

GPU_DEVICES = ("CUDA", "METAL")
#: The C++ namespace of each device's support code.
API = {"CUDA": "anvil::cuda", "METAL": "anvil::metal"}
#: NVRTC libraries a CUDA module tries, in order (after $ANVIL_NVRTC_LIBRARY); anvil/cuda.hpp lists the same.
NVRTC_LIBRARIES = ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2")
#: The raw string delimiter around kernel sources.
DELIMITER = "anvil_kernels"


def _align(n: int) -> int:
  return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class GpuLayout:
  """What the GPU function templates need beyond the CPU function context.

  Attributes:
    device: "CUDA" or "METAL".
    source: the kernel source (one program or library for all kernels of the function).
    kernels: the kernel names, in the order the launches index them.
    params: the `call()` parameters the launches use (`in0`, `out1`, ...), in order.
    staging: the device byte offset of each of `params` in the host-memory `call()`.
    steps: the C++ statements of the launch sequence.
    nbytes: the size of the device allocation.
  """

  device: str
  source: str
  kernels: tuple[str, ...]
  params: tuple[str, ...]
  staging: tuple[int, ...]
  steps: tuple[str, ...]
  nbytes: int

  @property
  def api(self) -> str:
    """The namespace of the device's support code."""
    return API[self.device]

  @property
  def uploads(self) -> tuple[tuple[str, int], ...]:
    """(input parameter, staging offset) for each input the host-memory `call()` copies to the GPU."""
    return tuple((p, o) for p, o in zip(self.params, self.staging, strict=True) if p.startswith("in"))

  @property
  def downloads(self) -> tuple[tuple[str, int], ...]:
    """(output parameter, staging offset) for each output the host-memory `call()` copies back."""
    return tuple((p, o) for p, o in zip(self.params, self.staging, strict=True) if p.startswith("out"))

  @property
  def delimiter(self) -> str:
    """The raw string delimiter around the kernel source."""
    return DELIMITER


def _pointer(ref: BufferRef) -> str:
  """The device address of a kernel argument (a view `offset` elements into its buffer)."""
  at = ref.offset * ref.dtype.itemsize
  if ref.kind == "ws":
    return f"ws.at({ref.index + at})"
  return f"{ref.kind}{ref.index}" + (f" + {at}" if at else "")


def _launch_steps(name: str, device: str, program: Program) -> tuple[str, ...]:
  kernels = {k.name: (i, k) for i, k in enumerate(program.kernels)}
  steps = []
  for step in program.steps:
    if isinstance(step, KernelStep):
      index, kernel = kernels[step.kernel]
      grid, block = (", ".join(map(str, d)) for d in (kernel.global_size, kernel.local_size))
      steps.append(f"ws.launch({index}, {{{grid}}}, {{{block}}}, {{{', '.join(map(_pointer, step.args))}}});")
    elif isinstance(step, CopyStep):
      dst, src = _pointer(step.dst), step.src
      if isinstance(src, ConstantData):
        steps.append(f"ws.upload({dst}, detail::{src.name}, {step.nbytes});")
      else:
        steps.append(f"ws.copy({dst}, {_pointer(src)}, {step.nbytes});")
    else:
      raise NotImplementedError(f"{name}: gathered sparse outputs are not supported on {device} yet; use device='CPU'")
  return tuple(steps)


def gpu_layout(
  name: str, device: str, program: Program, input_nbytes: Sequence[int], output_nbytes: Sequence[int]
) -> GpuLayout:
  """Lay out device memory for `program` and render its launch sequence on `device`."""
  used = program.used_params
  sizes = {**{f"in{i}": n for i, n in enumerate(input_nbytes)}, **{f"out{i}": n for i, n in enumerate(output_nbytes)}}
  params = tuple(p for p in sizes if p in used)
  staging, offset = [], _align(program.ws_size)
  for p in params:
    staging.append(offset)
    offset += _align(sizes[p])
  source = "\n\n".join([PRELUDES[device], *(k.source for k in program.kernels)])
  if f'){DELIMITER}"' in source:
    raise RuntimeError(f"internal: {name}'s kernel source contains the raw string delimiter")
  return GpuLayout(device, source, tuple(k.name for k in program.kernels), params, tuple(staging),
                   _launch_steps(name, device, program), offset)  # fmt: skip


def device_support(device: str) -> str:
  """The runtime header a module of `device` functions includes once (`anvil/cuda.hpp` or `anvil/metal.hpp`: the
  `anvil::cuda` or `anvil::metal` runtime)."""
  return runtime_include(device.lower())


class UnsupportedDtypeError(TypeError, ValueError):
  """A dtype the device cannot compute in (Metal: float64). Both a TypeError and a ValueError: the API reference
  raises ValueError."""


def _no_float64(name: str, what: str, fix: str) -> UnsupportedDtypeError:
  return UnsupportedDtypeError(f"{name}: {what} is float64, but Metal has no float64: {fix}")


def check_inputs(name: str, device: str, inputs: Sequence[Arg]) -> None:
  """Raise UnsupportedDtypeError naming the first input `device` cannot take (Metal: float64)."""
  for i, a in enumerate(inputs):
    if device == "METAL" and a.dtype == dtypes.float64:
      raise _no_float64(name, f"input {i} ({a.name})", "declare it Arg(..., dtype=dtypes.float32)")


def check_traced(name: str, device: str, traced: TracedGraph) -> None:
  """Raise UnsupportedDtypeError naming the first captured constant or output `device` cannot hold (Metal:
  float64)."""
  if device != "METAL":
    return
  constants = [b for b in traced.call.src[1:] if b.op is Ops.BUFFER and b.device in HOST_DEVICES]
  for k, buf in enumerate(constants):
    if buf.dtype == dtypes.float64:
      values = memoryview(constant_bytes(buf)).cast("d")
      shown = ", ".join(f"{v:g}" for v in values[:4]) + (", ..." if len(values) > 4 else "")
      what = f"captured constant {k} ({len(values)} values: {shown})"
      raise _no_float64(name, what, "capture it as float32, e.g. Tensor(array, dtype=dtypes.float32)")
  for i, out in enumerate(traced.outputs):
    if out.dtype == dtypes.float64:
      raise _no_float64(name, f"output {i}", "compute it in float32 (float32 inputs and constants)")
