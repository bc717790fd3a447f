"""From a traced graph to a program: schedule kernels, lay out the workspace, render every kernel once."""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from tinygrad import dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import Context
from tinygrad.schedule import create_linear_with_vars
from tinygrad.uop.ops import Ops, UOp

from anvil.codegen.arg import cpp_type
from anvil.codegen.build import Progress
from anvil.codegen.parallel import render_in_parallel
from anvil.codegen.renderer import RenderedKernel, render_kernel
from anvil.codegen.trace import HOST_DEVICES, TracedGraph, constant_bytes, unmarked

ALIGNMENT = 64
#: Kernels are inlined into `call()` while their sources add up to at most this many characters.
INLINE_KERNELS_UP_TO = 100_000


@dataclass(frozen=True)
class BufferRef:
  """Where a kernel argument lives: input `index`, output `index`, the workspace at byte offset `index`, or captured
  constant `index` (its read-only `static constexpr` table); `offset` elements into it (a view of a slice, as tinygrad
  passes `x[a:b].contiguous()`)."""

  kind: str
  index: int
  dtype: DType
  offset: int = 0

  @property
  def cpp(self) -> str:
    """The C++ expression of the pointer, inside a generated `call()`."""
    at = f" + {self.offset}" if self.offset else ""
    if self.kind == "ws":
      return f"reinterpret_cast<{cpp_type(self.dtype, 'buffer')}*>(ws.data() + {self.index}){at}"
    if self.kind == "const":  # NOTE: kernels take every buffer as a mutable pointer; they only read constants
      return f"const_cast<{cpp_type(self.dtype, 'constant')}*>(const{self.index}){at}"
    return f"{self.kind}{self.index}.data(){at}"

  @property
  def whole(self) -> BufferRef:
    """The buffer this is a view of (itself when not a view)."""
    return replace(self, offset=0)


@dataclass(frozen=True)
class KernelStep:
  """One kernel launch: which kernel, and the pointer bound to each of its parameters."""

  kernel: str
  args: tuple[BufferRef, ...]

  @property
  def code(self) -> str:
    """The C++ statement."""
    return f"{self.kernel}({', '.join(a.cpp for a in self.args)});"


@dataclass(frozen=True)
class ConstantData:
  """A captured constant: a `static constexpr` array (in flash on a microcontroller) that the CPU's kernels read in
  place; on a GPU copied into device memory at byte `offset` by `init_ws()`; offset -1: never copied into the
  workspace (read in place, or copied into an output by every `call()` that returns it)."""

  name: str
  offset: int
  dtype: DType
  values: tuple[str, ...]

  @property
  def cpp_type(self) -> str:
    """The C++ element type."""
    return cpp_type(self.dtype, "constant")


@dataclass(frozen=True)
class CopyStep:
  """A memcpy inside `call()`: a captured constant returned as an output, or an output equal to an earlier one."""

  dst: BufferRef
  src: BufferRef | ConstantData
  nbytes: int

  @property
  def code(self) -> str:
    """The C++ statement."""
    src = self.src.cpp if isinstance(self.src, BufferRef) else self.src.name
    return f"std::memcpy({self.dst.cpp}, {src}, {self.nbytes});"

  @property
  def args(self) -> tuple[BufferRef, ...]:
    """The buffers the copy touches."""
    return (self.dst, self.src) if isinstance(self.src, BufferRef) else (self.dst,)


@dataclass(frozen=True)
class GatherStep:
  """`dst[k] = src[index[k]]` (`+ shift[k]` with a shift table) for every entry of a constant index table (sparse
  derivative values from a compressed evaluation)."""

  dst: BufferRef
  src: BufferRef
  index: ConstantData
  shift: ConstantData | None = None

  @property
  def code(self) -> str:
    """The C++ statement."""
    src, shift = self.src.cpp, "" if self.shift is None else f" + {self.shift.name}[k]"
    return (f"for (std::size_t k = 0; k < {len(self.index.values)}; ++k) {self.dst.cpp}[k] = "
            f"{src}[{self.index.name}[k]]{shift};")  # fmt: skip

  @property
  def args(self) -> tuple[BufferRef, ...]:
    """The buffers the gather touches."""
    return (self.dst, self.src)


@dataclass(frozen=True)
class Program:
  """Everything the C++ templates need to emit one function's body."""

  kernels: tuple[RenderedKernel, ...]
  steps: tuple[KernelStep | CopyStep | GatherStep, ...]
  constants: tuple[ConstantData, ...]
  ws_size: int

  @property
  def kernel_sources(self) -> tuple[str, ...]:
    """The kernels' definitions: inlined into `call()` (ANVIL_KERNEL) while the program is small, each kept a function
    of its own (ANVIL_KERNEL_OUTLINED) in a larger one, where one huge `call()` costs the C++ compiler superlinear
    time (a chain of masses' Jacobian, 141 kernels: 11.8 s inlined, 4.4 s outlined, evaluated as fast)."""
    if sum(len(k.source) for k in self.kernels) <= INLINE_KERNELS_UP_TO:
      return tuple(k.source for k in self.kernels)
    return tuple(k.source.replace("ANVIL_KERNEL ", "ANVIL_KERNEL_OUTLINED ", 1) for k in self.kernels)

  @property
  def used_params(self) -> set[str]:
    """The `call()` parameters the steps use (`in0`, `out1`, `ws`, ...)."""
    return {"ws" if r.kind == "ws" else f"{r.kind}{r.index}" for s in self.steps for r in s.args}


def schedule(traced: TracedGraph) -> tuple[UOp, ...]:
  """tinygrad's schedule of the traced graph: kernels (SINK) and constant copies (COPY), in execution order."""
  # NOTE: create_linear_with_vars (unlike Tensor.linear_with_vars) leaves user tensors alone, so a captured constant
  # keeps its COPY from host memory and every later trace still sees its data. Without the memory planner each
  # intermediate is its own BUFFER, laid out below.
  with Context(NO_MEMORY_PLANNER=1):
    linear, _ = create_linear_with_vars(unmarked(traced.call))
  return tuple(linear.src)


def _align(n: int) -> int:
  return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def cpp_literal(value: float | int | bool, dtype: DType) -> str:
  """An exact C++ literal for one constant element."""
  if dtypes.is_float(dtype):
    if math.isnan(value):
      return "NAN"
    if math.isinf(value):
      return "HUGE_VAL" if value > 0 else "-HUGE_VAL"
    return float(value).hex() + ("f" if dtype == dtypes.float32 else "")
  if dtype == dtypes.bool:
    return "true" if value else "false"
  suffix = {dtypes.int64: "LL", dtypes.uint64: "ULL", dtypes.uint32: "U"}.get(dtype, "")
  if dtype == dtypes.int64 and value == -(2**63):
    return "(-9223372036854775807LL - 1)"
  return f"{int(value)}{suffix}"


def _constant_values(buf: UOp) -> tuple[str, ...]:
  data, dtype = constant_bytes(buf), buf.dtype
  count = len(data) // dtype.itemsize
  return tuple(cpp_literal(v, dtype) for v in struct.unpack(f"<{count}{dtype.fmt}", data))


class _Layout:
  """Assigns every buffer that is neither an input nor an output an aligned region of the workspace. Regions are
  reused: a buffer's region is free again after the last step that uses it, so the workspace (and the memory the
  kernels touch) is the most that is live at one step, not the sum of every intermediate."""

  def __init__(self, name: str, traced: TracedGraph, gathered: Collection[int]):
    self.refs: dict[UOp, BufferRef] = {u: BufferRef("in", i, u.dtype) for i, u in enumerate(traced.inputs)}
    first_output = {slot: i for i, slot in reversed(list(enumerate(traced.output_slots)))}
    self.refs |= {u: BufferRef("out", first_output[j], u.dtype) for j, u in enumerate(traced.stores)
                  if first_output[j] not in gathered}  # fmt: skip
    self.size = 0
    self.written: set[BufferRef] = set()
    self.name = name

  def check_initialized(self, step: KernelStep, reads: list[bool]) -> None:
    """Raise if the step reads a workspace buffer nothing wrote; record what it writes."""
    for ref, read in zip(step.args, reads, strict=True):
      if read and ref.kind == "ws" and ref.whole not in self.written:
        raise ValueError(
          f"{self.name}: the function reads a tensor of {ref.dtype.name} that is neither an input nor a "
          "captured constant (a Tensor.empty inside the function has no data)"
        )
    self.written.update(ref.whole for ref, read in zip(step.args, reads, strict=True) if not read)

  def place(self, uses: Sequence[Sequence[UOp]], persistent: Collection[UOp]) -> None:
    """Give the workspace buffers among `uses` (the buffers of each step, in order) their regions; `persistent` ones
    (captured constants that a GPU's `init_ws()` uploads once) are never freed."""
    last = {b: i for i, bufs in enumerate(uses) for b in bufs if b not in self.refs}
    dying: dict[int, list[UOp]] = {}
    for b, i in last.items():
      if b not in persistent:
        dying.setdefault(i, []).append(b)
    free: list[tuple[int, int]] = []  # (offset, bytes), sorted by offset, adjacent blocks merged
    for i, bufs in enumerate(uses):
      for b in bufs:
        if b not in self.refs:
          self.refs[b] = BufferRef("ws", self._allocate(free, _nbytes(b)), b.dtype)
      for b in dying.get(i, ()):
        _release(free, self.refs[b].index, _nbytes(b))

  def _allocate(self, free: list[tuple[int, int]], nbytes: int) -> int:
    """First fit among the free blocks, else at the end (growing a free block that ends there)."""
    for j, (offset, size) in enumerate(free):
      if size >= nbytes:
        free[j : j + 1] = [(offset + nbytes, size - nbytes)] if size > nbytes else []
        return offset
    offset = free.pop()[0] if free and free[-1][0] + free[-1][1] == self.size else self.size
    self.size = offset + nbytes
    return offset

  def ref(self, buf: UOp) -> BufferRef:
    base, offset = _view(buf)
    return replace(self.refs[base], offset=offset)


def _view(buf: UOp) -> tuple[UOp, int]:
  """A kernel argument as (its buffer, an element offset into it): tinygrad passes a slice of a buffer that a kernel
  reads or writes as one contiguous range (`x[a:b].contiguous()`) as a SHRINK of it (offset, size)."""
  if buf.op is not Ops.SHRINK:
    return buf, 0
  if buf.src[1].op is not Ops.CONST:
    raise NotImplementedError(f"internal: a view of a buffer at a symbolic offset ({buf.src[1].op})")
  base, offset = _view(buf.src[0])
  return base, offset + int(buf.src[1].arg)


def _nbytes(buf: UOp) -> int:
  return _align(buf.max_numel() * buf.dtype.itemsize)


def _release(free: list[tuple[int, int]], offset: int, nbytes: int) -> None:
  """Return a region to the sorted free list, merged with its neighbours."""
  j = bisect.bisect(free, (offset, 0))
  free.insert(j, (offset, nbytes))
  if j + 1 < len(free) and offset + nbytes == free[j + 1][0]:
    free[j : j + 2] = [(offset, nbytes + free[j + 1][1])]
  if j > 0 and free[j - 1][0] + free[j - 1][1] == offset:
    free[j - 1 : j + 1] = [(free[j - 1][0], free[j - 1][1] + free[j][1])]


def build_program(
  name: str,
  traced: TracedGraph,
  items: tuple[UOp, ...],
  progress: Progress | None = None,
  gathers: Mapping[int, Sequence[int]] | None = None,
  render: Callable[[UOp, str], RenderedKernel] = render_kernel,
  shifts: Mapping[int, Sequence[float]] | None = None,
  constants_in_place: bool = True,
) -> Program:
  """Lay out the workspace and render each distinct kernel of the schedule `items` once, with `render` (default:
  portable C++ for the CPU). Captured constants are read from their `static constexpr` tables (`constants_in_place`,
  the CPU: no RAM, no copy) or copied into the workspace once (a GPU's device memory).

  `gathers` maps an output index to an index table: that output is then `value[table[k]]` for each k, where `value`
  is what the function computed for it (kept in the workspace); `shifts` (by output index) adds a constant per entry.
  """
  gathers = gathers or {}
  layout = _Layout(name, traced, gathers)
  distinct: dict[bytes, tuple[UOp, str]] = {}
  for item in items:
    if (ast := item.src[0]).op is Ops.SINK and ast.key not in distinct:
      distinct[ast.key] = (ast, f"k{len(distinct)}")
  kernels = dict(zip(distinct, render_in_parallel(list(distinct.values()), render, progress), strict=True))
  work: list[tuple[UOp, tuple[UOp, ...]]] = []  # (kernel or copy, its buffers)
  for item in items:
    ast, args = item.src[0], item.src[1:]
    if ast.op is Ops.COPY:
      if args[1].device not in HOST_DEVICES:
        raise RuntimeError(f"internal: copy from device {args[1].device} is not a captured constant")
      if args[0].max_numel() > 0:  # NOTE: C++ has no zero-length arrays, and there is nothing to copy
        work.append((ast, args))
      continue
    if ast.op is not Ops.SINK:
      raise NotImplementedError(f"schedule item {ast.op} is not supported by anvil's C++ backend")
    work.append((ast, tuple(args[i] for i in kernels[ast.key].params)))
  gathered = {i: traced.stores[traced.output_slots[i]] for i, table in gathers.items() if len(table)}
  copies = [_view(bufs[0])[0] for ast, bufs in work if ast.op is Ops.COPY]
  if constants_in_place:
    layout.refs |= {b: BufferRef("const", k, b.dtype) for k, b in enumerate(copies) if b not in layout.refs}
  bases = [tuple(_view(b)[0] for b in (bufs[:1] if ast.op is Ops.COPY else bufs)) for ast, bufs in work]
  layout.place([*bases, tuple(gathered.values())], set(copies))
  steps: list[KernelStep | CopyStep | GatherStep] = []
  constants: list[ConstantData] = []
  for ast, bufs in work:
    if ast.op is Ops.COPY:
      dst, src = bufs
      ref = layout.ref(dst)
      layout.written.add(ref)
      const = ConstantData(f"const{len(constants)}", ref.index if ref.kind == "ws" else -1, dst.dtype,
                           _constant_values(src))  # fmt: skip
      constants.append(const)
      if ref.kind == "out":  # NOTE: a constant returned as an output is copied on every call
        steps.append(CopyStep(ref, const, len(const.values) * dst.dtype.itemsize))
      continue
    kernel = kernels[ast.key]
    step = KernelStep(kernel.name, tuple(layout.ref(b) for b in bufs))
    layout.check_initialized(step, [i not in kernel.writes for i in kernel.params])
    steps.append(step)
  for i, store in gathered.items():  # NOTE: outputs without nonzeros have nothing to gather (and no C++ array)
    constants.append(index := ConstantData(f"gather{i}", -1, dtypes.int32, tuple(str(int(t)) for t in gathers[i])))
    shift = None
    if (values := (shifts or {}).get(i)) is not None:
      literals = tuple(cpp_literal(v, store.dtype) for v in values)
      constants.append(shift := ConstantData(f"shift{i}", -1, store.dtype, literals))
    steps.append(GatherStep(BufferRef("out", i, store.dtype), layout.ref(store), index, shift))
  return Program(tuple(kernels.values()), (*steps, *output_copies(traced)), tuple(constants), layout.size)


def output_copies(traced: TracedGraph) -> tuple[CopyStep, ...]:
  """Copies of the outputs equal to an earlier output (one stored value returned twice)."""
  first: dict[int, int] = {}
  copies = []
  for i, slot in enumerate(traced.output_slots):
    if slot in first:
      spec = traced.outputs[i]
      src = BufferRef("out", first[slot], spec.dtype)
      copies.append(CopyStep(BufferRef("out", i, spec.dtype), src, spec.size * spec.dtype.itemsize))
    else:
      first[slot] = i
  return tuple(copies)
