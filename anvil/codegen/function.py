"""`NumericalFunction`: plain tinygrad math traced, rendered to C++, compiled and called from Python."""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, ParamSpec, TypeVar, overload

from numpy.typing import ArrayLike, NDArray
from tinygrad import Tensor, dtypes

from anvil.codegen.arg import Arg, cpp_type, numpy_dtype
from anvil.codegen.base import FunctionBase, check_identifier, render_template
from anvil.codegen.build import stage
from anvil.codegen.cache import read_artifact
from anvil.codegen.caller import make_caller
from anvil.codegen.constant import CodegenIntConstant
from anvil.codegen.devices import DeviceUnavailableError, require_device
from anvil.codegen.gpu import GPU_DEVICES, GpuLayout, check_inputs, check_traced, gpu_layout
from anvil.codegen.gpu_caller import gpu_programs, make_gpu_caller
from anvil.codegen.gpu_renderer import render_gpu_kernel
from anvil.codegen.jit import (
  Toolchain,
  array_data_offset,
  cache_dir,
  cached_library,
  codegen_fingerprint,
  compile_library,
  library_key,
  load_library,
  write_atomic,
)
from anvil.codegen.module import module_code
from anvil.codegen.native import NativeHandle
from anvil.codegen.program import Program, build_program, schedule
from anvil.codegen.renderer import render_kernel
from anvil.codegen.runtime import inline_runtime_headers
from anvil.codegen.straight_line import split_chunks, straight_line_program, suits_straight_line
from anvil.codegen.trace import OutputSpec, TracedGraph, default_float, graph_key, replay, tensor_values, trace
from anvil.validation import as_array, check_shape

TINYGRAD_VERSION = importlib.metadata.version("tinygrad")
P = ParamSpec("P")
R = TypeVar("R", covariant=True)
Array = NDArray[Any]
DEVICES = ("CPU", *GPU_DEVICES)
InputsLike = Arg | Sequence[Arg]


def check_device(device: object, what: str) -> str:
  """Return the canonical device name or raise ValueError naming the supported ones."""
  if not isinstance(device, str) or device.upper() not in DEVICES:
    raise ValueError(f"{what}: unknown device {device!r}; supported devices: {', '.join(DEVICES)}")
  return device.upper()


@dataclass(frozen=True)
class _ArraySpec:
  cpp_type: str
  dims: str
  name: str


@dataclass(frozen=True)
class _FunctionContext:
  """What the function templates need."""

  name: str
  signature: str
  inputs: tuple[_ArraySpec, ...]
  outputs: tuple[_ArraySpec, ...]
  ws_size: int
  program: Program
  extra_declarations: tuple[str, ...]
  unused_params: tuple[str, ...]

  @property
  def call_params(self) -> str:
    ins = [f"const IN{i}_t& in{i}" for i in range(len(self.inputs))]
    outs = [f"OUT{i}_t& out{i}" for i in range(len(self.outputs))]
    return ", ".join([*ins, *outs, "WS_t& ws"])

  @property
  def call_arg_names(self) -> tuple[str, ...]:
    return (*(f"in{i}" for i in range(len(self.inputs))), *(f"out{i}" for i in range(len(self.outputs))))

  @property
  def call_args(self) -> str:
    return ", ".join(self.call_arg_names)


def _dims(dims: Sequence[int | CodegenIntConstant]) -> str:
  return "".join(f", {d.name if isinstance(d, CodegenIntConstant) else int(d)}" for d in dims)


@dataclass(frozen=True)
class DerivedCode:
  """The code of a function generated from another function's graph rather than from its own trace (a derivative
  derived on the scalar expressions of the function it differentiates: `anvil.ad.scalar`).

  Attributes:
    graph: the traced graph the code derives from (called when needed).
    what: what the code computes from that graph (part of the cache key).
    outputs: shape and dtype of each output.
    build: the program, or None to build from the function's own trace after all.
  """

  graph: Callable[[], TracedGraph]
  what: str
  outputs: tuple[OutputSpec, ...]
  build: Callable[[], Program | None]


class NumericalFunction(FunctionBase, Generic[P, R]):
  """A function of arrays written with tinygrad `Tensor` math, emitted as C++ and callable from Python.

  The pipeline runs lazily, one cached property per stage: `traced` -> `program` (schedule + render) ->
  `header_code`/`source_code` -> `library` (compile, or load from the on-disk cache) -> calls.

  Args:
    name: a C++ identifier; the generated namespace.
    fn: a Python function taking one `Tensor` per input and returning a `Tensor` or a tuple of them.
    inputs: one `Arg` per parameter of `fn` (a single `Arg` is accepted too).
    device: "CPU", "CUDA" or "METAL" (float32 only). GPU functions take and return numpy arrays too (copied to the
      GPU and back); CUDA ones also take device arrays (DLPack) and then return `CudaArray`s. Their code can be
      generated anywhere; calling them needs the device usable here (see `anvil.devices()`).

  Calls are thread-safe without a lock: each converts its inputs into arrays of its own and gets freshly allocated
  outputs, and the native call holds the GIL, so two calls never share a buffer or run on the workspace at once.

  Example:
    >>> f = NumericalFunction("f", lambda x, A: A @ x.sin(), (Arg(3), Arg((3, 3))))
    >>> y = f(np.ones(3), np.eye(3))          # numpy in, numpy out
  """

  self_contained_source = True

  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike], Array],
    name: str,
    fn: Callable[[Tensor], Tensor],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike], tuple[Array, Array]],
    name: str,
    fn: Callable[[Tensor], tuple[Tensor, Tensor]],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike, ArrayLike], Array],
    name: str,
    fn: Callable[[Tensor, Tensor], Tensor],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike, ArrayLike], tuple[Array, Array]],
    name: str,
    fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike, ArrayLike, ArrayLike], Array],
    name: str,
    fn: Callable[[Tensor, Tensor, Tensor], Tensor],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike, ArrayLike, ArrayLike], tuple[Array, Array]],
    name: str,
    fn: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike, ArrayLike, ArrayLike, ArrayLike], Array],
    name: str,
    fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[[ArrayLike, ArrayLike, ArrayLike, ArrayLike], tuple[Array, Array]],
    name: str,
    fn: Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]],
    inputs: InputsLike,
    device: str = ...,
  ) -> None: ...
  @overload
  def __init__(
    self: NumericalFunction[..., Any], name: str, fn: Callable[..., Any], inputs: InputsLike, device: str = ...
  ) -> None: ...
  def __init__(self, name: str, fn: Callable[..., Any], inputs: InputsLike, device: str = "CPU") -> None:
    self.name = check_identifier(name, "NumericalFunction name")
    if not callable(fn):
      raise TypeError(f"{name}: fn must be callable, got {type(fn).__name__}")
    self.fn = fn
    self.device = check_device(device, name)
    self.inputs: tuple[Arg, ...] = _named_args(name, fn, inputs)
    check_inputs(name, self.device, self.inputs)
    #: Set where this function's code is generated from another function's graph (see `DerivedCode`).
    self.derived: DerivedCode | None = None

  # *** the pipeline ***

  @cached_property
  def traced(self) -> TracedGraph:
    """The traced tinygrad graph (stage `trace`)."""
    with stage(self.name, "trace"):
      traced = trace(self.name, self._traced_fn, self.inputs)
    self._check_outputs(traced.outputs)
    check_traced(self.name, self.device, traced)
    return traced

  def _check_outputs(self, outputs: tuple[OutputSpec, ...]) -> None:
    """Raise if the traced outputs do not fit this kind of function (any outputs fit a NumericalFunction)."""

  @property
  def outputs(self) -> tuple[OutputSpec, ...]:
    """Shape and dtype of each output."""
    return self.traced.outputs if self.derived is None else self.derived.outputs

  @cached_property
  def key(self) -> str:
    """Hash of the traced graph, constants, signature and versions: the key of every cached artefact."""
    sig = "|".join(f"{a.name}:{a.dtype.name}:{_dims(a.dims)}" for a in self.inputs)
    derived = "" if self.derived is None else self.derived.what
    extra = f"{type(self).__name__}|{self.device}|{sig}|{self._key_extra}|{derived}|{codegen_fingerprint()}"
    extra += f"|{TINYGRAD_VERSION}"
    return graph_key(self.name, self._source_graph, extra)

  @property
  def _key_extra(self) -> str:
    return ""

  @property
  def _source_graph(self) -> TracedGraph:
    """The traced graph this function's code is generated from: its own, or the one its code derives from."""
    return self.traced if self.derived is None else self.derived.graph()

  @property
  def _traced_fn(self) -> Callable[..., Any]:
    """What the C++ computes before any gather: `fn` itself here."""
    return self.fn

  @property
  def _gathers(self) -> dict[int, Sequence[int]]:
    """Outputs computed compressed and expanded by an index table (see `build_program`); none here."""
    return {}

  @property
  def _gather_shifts(self) -> dict[int, Sequence[float]]:
    """Constants added to gathered outputs, entry by entry (see `build_program`); none here."""
    return {}

  @cached_property
  def program(self) -> Program:
    """Scheduled kernels, workspace layout and rendered kernel sources (stages `schedule` and `render`); on the CPU,
    a graph of many small tensors is lowered to straight-line code instead (stage `lower`)."""
    if self.derived is not None:
      with stage(self.name, "derive"):
        derived = self.derived.build()
      if derived is not None:
        return derived
    if self.device == "CPU" and suits_straight_line(self.traced):
      with stage(self.name, "lower"):
        program = straight_line_program(self.name, self.traced, self._gathers, self._gather_shifts)
      if program is not None:
        return program
    with stage(self.name, "schedule"):
      items = schedule(self.traced)
    render = render_kernel if self.device == "CPU" else functools.partial(render_gpu_kernel, device=self.device)
    with stage(self.name, "render") as progress:
      return build_program(
        self.name,
        self.traced,
        items,
        progress,
        self._gathers,
        render,
        self._gather_shifts,
        constants_in_place=self.device == "CPU",
      )

  @property
  def ws_size(self) -> int:
    """Size in bytes of the workspace: its intermediates (captured constants stay in their constexpr tables); on a
    GPU, the device allocation `init_ws()` makes, which also holds the constants and stages inputs and outputs."""
    return self.program.ws_size if self.device == "CPU" else self.gpu_layout.nbytes

  @property
  def cuda_arch(self) -> str | None:
    """The CUDA architecture `init_ws()` compiles the kernels for ("sm_89": device 0's; NVRTC versions that do not
    know it get PTX for the newest one they do), or None for a function that does not run on CUDA or where there is
    no usable CUDA GPU."""
    if self.device != "CUDA":
      return None
    try:
      return require_device("CUDA").arch
    except DeviceUnavailableError:
      return None

  @property
  def is_sparse(self) -> bool:
    """Whether the output is a sparse matrix (a `SparseNumericalFunction`)."""
    return False

  @cached_property
  def gpu_layout(self) -> GpuLayout:
    """Device memory and launch sequence of a CUDA or Metal function."""
    ins = [a.size * a.dtype.itemsize for a in self.inputs]
    outs = [o.size * o.dtype.itemsize for o in self.outputs]
    return gpu_layout(self.name, self.device, self.program, ins, outs)

  @property
  def build_size(self) -> int:
    """The traced graph's node count while the code is neither in memory nor in the on-disk cache, else 0 (code found
    in the cache is kept, so it is read once)."""
    if "_code" not in self.__dict__ and (cached := _cached_code(self._code_file)) is not None:
      self.__dict__["_code"] = cached
    return 0 if "_code" in self.__dict__ else len(self._source_graph.call.toposort())

  @property
  def _code_file(self) -> str:
    return f"{self.key}.json"

  @cached_property
  def _code(self) -> dict[str, str]:
    if (cached := _cached_code(self._code_file)) is not None:
      return cached
    ctx = self._context()
    if self.device == "CPU":
      header, source = render_template("function.hpp.j2", fn=ctx), render_template("function.cpp.j2", fn=ctx)
    else:
      header, source = render_template("gpu_function.hpp.j2", fn=ctx, gpu=self.gpu_layout), ""
    code = {"header": header, "source": source}
    write_atomic(cache_dir() / "code" / self._code_file, json.dumps(code))
    return code

  @property
  def header_code(self) -> str:
    """Declarations: buffer typedefs, `init_ws()` and `call()` inside `namespace <name>`; on a GPU also their
    (inline) definitions, with the kernel source."""
    return self._code["header"]

  @property
  def source_code(self) -> str:
    """Definitions: constants, kernels, `init_ws()` and `call()` (empty on a GPU: its code is all in the header)."""
    return self._code["source"]

  @property
  def codegen_constants(self) -> tuple[CodegenIntConstant, ...]:
    """The named constants used in input shapes."""
    return tuple(c for a in self.inputs for c in a.constants)

  def _extra_declarations(self) -> tuple[str, ...]:
    return ()

  def _context(self) -> _FunctionContext:
    program = self.program
    ins = tuple(
      _ArraySpec(cpp_type(a.dtype, a.name or ""), _dims(a.dims), a.name or f"in{i}") for i, a in enumerate(self.inputs)
    )
    outs = tuple(
      _ArraySpec(cpp_type(o.dtype, f"output {i}"), _dims(o.shape), f"out{i}") for i, o in enumerate(self.outputs)
    )
    used = program.used_params
    params = [*(f"in{i}" for i in range(len(ins))), *(f"out{i}" for i in range(len(outs))), "ws"]
    signature = f"({', '.join(a.name or '' for a in self.inputs)}) -> {len(outs)} output{'s' if len(outs) != 1 else ''}"
    return _FunctionContext(
      self.name,
      signature,
      ins,
      outs,
      program.ws_size,
      program,
      self._extra_declarations(),
      tuple(p for p in params if p not in used),
    )

  @cached_property
  def library(self) -> str:
    """Path of the compiled shared library (stage `compile`, skipped when the disk cache has it)."""
    lib_key = library_key(f"{self.key}|{array_data_offset()}", self.device)
    if (path := cached_library(lib_key, f"anvil_{self.name}_ws_new")) is not None:
      return str(path)
    module = f"anvil_jit_{self.name}"
    code = module_code(module, [self])
    ctx = self._context()
    sources = {f"{module}.hpp": code.header}
    parts: dict[str, str] = {}
    if self.device == "CPU":
      kernels = self.program.kernel_sources
      units = (os.cpu_count() or 1) if len(code.functions) == 1 else 1  # NOTE: a part repeats what precedes fn
      sources[f"{module}.cpp"], texts = split_chunks(code.source, self.name, kernels, units)
      parts = {f"{module}_part{k}.cpp": text for k, text in enumerate(texts, 1)}
      sources.update(parts)
      wrapper = render_template("jit.cpp.j2", fn=ctx, module=module, data_offset=array_data_offset() or 0)
    else:
      wrapper = render_template("gpu_jit.cpp.j2", fn=ctx, device=self.device, module=module)
    sources["jit.cpp"] = inline_runtime_headers(wrapper)
    with stage(self.name, "compile"):
      toolchain = Toolchain.for_device(self.device)
      return str(compile_library(lib_key, sources, "jit.cpp", self.name, toolchain=toolchain, cxx_parts=list(parts)))

  # *** calling ***

  def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
    """Evaluate on numpy arrays (or anything `np.asarray` takes); returns new arrays, a tuple for several outputs.
    Called on Tensors computed by operations (inside another function being traced), it is a composition: its
    computation is inlined into the caller's graph and it returns Tensors (see `compose`); a Tensor made from data is
    taken for its data."""
    if kwargs:
      raise TypeError(f"{self.name}: takes positional inputs only, got keywords {sorted(kwargs)}")
    if any(isinstance(a, Tensor) and tensor_values(a) is None for a in args):
      return self.compose(*args)
    return self._caller(*args)

  def replay(self, *args: Tensor) -> Any:
    """fn(*args) inside another function's trace, for Tensors of the Args' shapes and dtypes: this function's traced
    graph with its inputs substituted, so that a function applied many times (an integrator's rate, at every stage
    of a Runge-Kutta step and in its derivatives) runs its Python once. fn itself where its graph does not apply (other
    shapes or dtypes, another default float, a function whose code is derived or gathered)."""
    if self.derived is None and self._traced_fn is self.fn:
      replayed = replay(self.traced, args, default_float(self.inputs))
      if replayed is not None:
        return replayed
    return self.fn(*args)

  def compose(self, *args: Any) -> Any:
    """This function's computation on Tensors, inlined into the graph being traced: a Tensor, or a tuple for several
    outputs (a sparse function's nonzeros). Each input is a Tensor (or array data, captured as a constant) of its
    Arg's shape; one of another dtype is cast to a float Arg's (an integer Arg takes its own dtype only). A float64
    Arg takes the default float: float32 inside the trace of a float32 function (a float32 solver's), whose math
    then stays float32."""
    if len(args) != len(self.inputs):
      raise TypeError(f"{self.name}: takes {len(self.inputs)} inputs, got {len(args)}")
    tensors = []
    for i, (value, arg) in enumerate(zip(args, self.inputs, strict=True)):
      dtype = dtypes.default_float if arg.dtype == dtypes.float64 else arg.dtype
      what, numpy = f"input {i} ({arg.name})", numpy_dtype(dtype)
      tensor = value if isinstance(value, Tensor) else Tensor(as_array(self.name, what, value, numpy).astype(numpy))
      check_shape(self.name, what, tensor, arg.shape)
      if tensor.dtype != dtype:
        if not dtypes.is_float(dtype):
          raise TypeError(f"{self.name}: {what}: expected {dtype.name}, got {tensor.dtype.name}")
        tensor = tensor.cast(dtype)
      tensors.append(tensor)
    return self.fn(*tensors)

  @cached_property
  def handle(self) -> NativeHandle:
    """This function's workspace in its loaded JIT library (`init_ws()`; on a GPU its compiled kernels and device
    memory). `handle.entry(...)` reaches the library's entry points, for callers that drive them directly."""
    if self.device == "CPU":
      return NativeHandle(load_library(self.library), self.name)
    require_device(self.device)
    return NativeHandle(load_library(self.library), self.name, str(gpu_programs()))

  @cached_property
  def _caller(self) -> Callable[..., Any]:
    if self.device == "CPU":
      return make_caller(self.name, self.inputs, self.outputs, self.handle, self._wrap_outputs)
    return make_gpu_caller(self.name, self.device, self.inputs, self.outputs, self.handle, self._wrap_outputs)

  @property
  def _wrap_outputs(self) -> Callable[..., Any] | None:
    """Turns the output arrays into the call's result, or None to return them as they are."""
    return None


def _cached_code(filename: str) -> dict[str, str] | None:
  """The rendered code in the cache's `code/filename` when it verifies and holds a header and a source."""
  if (data := read_artifact(f"code/{filename}")) is None:
    return None
  try:
    code = json.loads(data)
  except ValueError:
    return None
  valid = isinstance(code, dict) and all(isinstance(code.get(k), str) for k in ("header", "source"))
  return code if valid else None


def _named_args(name: str, fn: Callable[..., Any], inputs: object) -> tuple[Arg, ...]:
  args = (inputs,) if isinstance(inputs, Arg) else inputs
  if not isinstance(args, (tuple, list)) or not all(isinstance(a, Arg) for a in args):
    raise TypeError(f"{name}: inputs must be an Arg or a tuple of Args, got {inputs!r}")
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return tuple(a.named(f"in{i}") for i, a in enumerate(args))
  try:
    signature.bind(*range(len(args)))
  except TypeError:
    raise TypeError(f"{name}: fn{signature} cannot take the {len(args)} declared inputs") from None
  positional = [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  names = positional[: len(args)] + [f"in{i}" for i in range(len(positional), len(args))]
  return tuple(a.named(n) for a, n in zip(args, names, strict=True))
