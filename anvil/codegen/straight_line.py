"""Straight-line C++ for graphs of many small tensors: the scalar lowering's expressions as assignments.

A function traced from a Python loop over stages is thousands of tensor ops of a few elements each. tinygrad's
scheduler and kernel lowering take minutes on such graphs (a cart-pole swing-up's constraint Jacobian, written as a loop
over 10 stages: 11.6 s scheduling and 23 s rendering two kernels), and their code is no faster than plain assignments.
Those graphs are lowered to scalar expressions instead (`anvil.codegen.scalar`) and emitted in order, one assignment per
operation, split into functions of at most CHUNK_STATEMENTS assignments: the C++ compiler's time on one function grows
faster than its length, so a long program compiles as many short functions. Values a later function needs pass
through the workspace. g++ optimizes those functions at -O1 (ANVIL_STRAIGHT_LINE in anvil/support.hpp): on straight
-line code -O3 only costs compile time (a swing-up's Lagrangian Hessian, 40 functions: 30 s at -O3, 18 s at -O1, the
same 40-80 us per call). Computations repeated stage after stage on strided elements are emitted as loops instead
(`anvil.codegen.rolling`): one stage's code, compiled once (that Hessian: one loop, 0.9 s to compile).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tinygrad.dtype import DType
from tinygrad.uop.ops import Ops, UOp

from anvil.codegen.arg import cpp_type
from anvil.codegen.program import ALIGNMENT, BufferRef, CopyStep, KernelStep, Program, cpp_literal, output_copies
from anvil.codegen.renderer import COS_MARK, RENDERER, WRAPPING_HELPERS, RenderedKernel, wraps_unlike_numpy
from anvil.codegen.rolling import Family, find_families
from anvil.codegen.scalar import ScalarGraph, Unsupported, lower
from anvil.codegen.trace import TracedGraph

logger = logging.getLogger("anvil")

#: Graphs of at least this many tensor ops... (on fewer, tinygrad's scheduler is quick; from a few hundred it is not:
#: the swing-up's cost summed in a loop over 50 stages, 400 ops: 2.2 s to schedule and render, its gradient 2.9 s and
#: 5.3 s of g++ on the fused kernel, against 0.1 s each as straight-line code)
MIN_OPS = 200
#: ...of at most this many elements per op on average (small tensors: stages written one by one, not a batched model;
#: measured: the swing-up's constraints written as a loop 1.5, the same batched over 5 stages 7.8, over 50 stages 77)
MAX_ELEMENTS_PER_OP = 4
#: ...and at most this many elements in all are emitted as straight-line code.
MAX_ELEMENTS = 1_000_000
#: Assignments per generated function.
CHUNK_STATEMENTS = 2000
#: The kernels a JIT build may compile side by side (`split_chunks`): their qualifier, its form in a translation unit of
#: its own, and what a character costs the compiler, relative to straight-line code (-O1 under g++). Vector forward
#: mode's loops over columns (`anvil.ad.vector_mode`) are vectorized at the build's level: a humanoid's ∂ABA, 1.2 MB of
#: them: 20-24 s of g++ -O3, against 6 s for 1.7 MB of straight-line code.
SPLITTABLE = {"ANVIL_STRAIGHT_LINE ": ("ANVIL_STRAIGHT_LINE_PART ", 1),
              "ANVIL_COLUMN_LOOPS ": ("ANVIL_COLUMN_LOOPS_PART ", 5)}  # fmt: skip
#: Characters of straight-line chunks per translation unit of a JIT build: a larger program's chunks are compiled side
#: by side (`split_chunks`), one compiler per core (ABA's Jacobian of a 38-dof humanoid, 14 MB: 21 s in one unit).
CHARS_PER_UNIT = 2_000_000


def suits_straight_line(traced: TracedGraph) -> bool:
  """Whether the graph is one of many small tensors, which straight-line code serves better than tinygrad's kernels."""
  nodes = [u for u in traced.call.src[0].toposort() if u.op not in (Ops.CONST, Ops.PARAM, Ops.STACK)]
  if len(nodes) < MIN_OPS:
    return False
  elements = sum(_elements(u) for u in nodes)
  return elements <= min(MAX_ELEMENTS, MAX_ELEMENTS_PER_OP * len(nodes))


def _elements(u: UOp) -> int:
  """The elements of a node's value (more than any graph may have for a symbolic shape, none for no value)."""
  if u._shape is None:
    return 0
  return math.prod(int(d) for d in u.shape) if all(isinstance(d, int) for d in u.shape) else MAX_ELEMENTS + 1


def straight_line_program(
  name: str, traced: TracedGraph, gathers: Mapping[int, Sequence[int]], shifts: Mapping[int, Sequence[float]]
) -> Program | None:
  """The program computing `traced` as straight-line C++ (gathers and shifts as `build_program` takes them), or None
  when the graph holds something the scalar lowering does not handle."""
  try:
    lowered = lower(traced)
  except Unsupported as e:
    logger.info("%s: built through tinygrad's kernels (straight-line code does not support %s)", name, e)
    return None
  graph = lowered.graph
  writes: list[tuple[int, int, int]] = []  # (output, element, node)
  first = {slot: i for i, slot in reversed(list(enumerate(traced.output_slots)))}
  for slot, out in first.items():
    values, dtype = lowered.values[slot].tolist(), traced.stores[slot].dtype
    if out in gathers:
      add = shifts.get(out) or [0.0] * len(gathers[out])
      values = [
        graph.alu(Ops.ADD, dtype, values[t], graph.const(s, dtype)) for t, s in zip(gathers[out], add, strict=True)
      ]
    writes += [(out, k, v) for k, v in enumerate(values)]
  inputs = tuple(u.dtype for u in traced.inputs)
  outputs = tuple(traced.stores[slot].dtype for slot in traced.output_slots)
  return emit_program(graph, writes, inputs, outputs, output_copies(traced))


def emit_program(graph: ScalarGraph, writes: Sequence[tuple[int, int, int]], inputs: Sequence[DType],
                 outputs: Sequence[DType], copies: Sequence[CopyStep] = ()) -> Program:  # fmt: skip
  """The program computing `writes` (output, element, node) of `graph`, as functions of inputs of `inputs`' dtypes
  into outputs of `outputs`' dtypes, followed by `copies`: the computations repeated with a stride (the stages of a
  loop) as loops (`anvil.codegen.rolling`), the rest as straight-line chunks. DETACH and TANGENT nodes are
  substituted first (`ScalarGraph.substituted`)."""
  nodes = graph.substituted([n for _, _, n in writes])
  writes = [(o, k, n) for (o, k, _), n in zip(writes, nodes, strict=True)]
  families, rest = find_families(graph, [(o, k, graph.cast(n, outputs[o])) for o, k, n in writes])
  chunks = _Emitter(graph, rest, tuple(inputs), tuple(outputs)).program() if rest else Program((), (), (), 0)
  loops = [_loop(graph, f, f"r{i}", tuple(inputs), tuple(outputs)) for i, f in enumerate(families)]
  return Program((*chunks.kernels, *(k for k, _ in loops)), (*chunks.steps, *(s for _, s in loops), *copies), (),
                 chunks.ws_size)  # fmt: skip


def _loop(graph: ScalarGraph, family: Family, name: str, inputs: tuple[DType, ...], outputs: tuple[DType, ...]
          ) -> tuple[RenderedKernel, KernelStep]:  # fmt: skip
  """One family as a function looping over its members."""

  def operand(i: int) -> str:
    if graph.ops[i] is Ops.LOAD:
      load = graph.args[i]
      return f"in{load.index}[{_indexed(load.element, family.strides[i])}]"
    return _constant(graph, i) if graph.ops[i] is Ops.CONST else f"v{i}"

  ctype = lambda i: cpp_type(graph.dtypes[i], "value")
  lines = [f"const {ctype(i)} v{i} = {_render(graph, i, [operand(s) for s in graph.srcs[i]])};" for i in family.nodes]
  lines += [f"out{o}[{_indexed(k, d)}] = v{node};" for o, k, d, node in family.writes]
  used_in = sorted({graph.args[i].index for i in family.strides})
  used_out = sorted({o for o, _, _, _ in family.writes})
  params = [(f"const {cpp_type(inputs[i], 'input')}* ANVIL_RESTRICT in{i}", BufferRef("in", i, inputs[i]))
            for i in used_in]  # fmt: skip
  params += [(f"{cpp_type(outputs[o], 'output')}* ANVIL_RESTRICT out{o}", BufferRef("out", o, outputs[o]))
             for o in used_out]  # fmt: skip
  body = "\n".join(f"    {line}" for line in lines)
  signature = ", ".join(p for p, _ in params)
  source = (
    f"ANVIL_STRAIGHT_LINE void {name}({signature}) {{\n  for (int s = 0; s < {family.count}; ++s) {{\n{body}\n  }}\n}}"
  )
  return RenderedKernel(name, source, (), (), (1, 1, 1), (1, 1, 1)), KernelStep(name, tuple(r for _, r in params))


def _indexed(first: int, stride: int) -> str:
  """The element `first` advanced by `stride` per iteration s."""
  return str(first) if stride == 0 else f"{first} {'+' if stride > 0 else '-'} {abs(stride)} * s"


@dataclass
class _Chunk:
  """One generated function: its assignments and the buffers it touches."""

  lines: list[str] = field(default_factory=list)
  inputs: set[int] = field(default_factory=set)
  outputs: set[int] = field(default_factory=set)
  temps: set[DType] = field(default_factory=set)


class _Emitter:
  """Orders the live nodes, splits them into chunks, gives values crossing chunks workspace slots, renders."""

  def __init__(self, graph: ScalarGraph, writes: list[tuple[int, int, int]], inputs: tuple[DType, ...],
               outputs: tuple[DType, ...]):  # fmt: skip
    self.graph, self.writes, self.input_dtypes, self.output_dtypes = graph, writes, inputs, outputs
    order = graph.postorder([node for _, _, node in writes])
    self.statements = [i for i in order if graph.ops[i] not in (Ops.CONST, Ops.LOAD)]
    self.chunk_of = {i: k // CHUNK_STATEMENTS for k, i in enumerate(self.statements)}
    self.chunks = max(1, math.ceil(len(self.statements) / CHUNK_STATEMENTS))
    self.slots = self._slots()

  def _slots(self) -> dict[int, int]:
    """A workspace slot (per dtype) for each value a later chunk uses, free again after the last chunk using it."""
    last: dict[int, int] = {}
    for i in self.statements:
      for s in self.graph.srcs[i]:
        if s in self.chunk_of and self.chunk_of[s] != self.chunk_of[i]:
          last[s] = max(last.get(s, 0), self.chunk_of[i])
    defined: dict[int, list[int]] = {}
    dying: dict[int, list[int]] = {}
    for i in sorted(last):
      defined.setdefault(self.chunk_of[i], []).append(i)
      dying.setdefault(last[i], []).append(i)
    slots: dict[int, int] = {}
    free: dict[DType, list[int]] = {}
    self.temp_sizes: dict[DType, int] = {}
    for c in range(self.chunks):
      for i in defined.get(c, ()):
        dtype = self.graph.dtypes[i]
        pool = free.setdefault(dtype, [])
        slots[i] = pool.pop() if pool else self.temp_sizes.get(dtype, 0)
        self.temp_sizes[dtype] = max(self.temp_sizes.get(dtype, 0), slots[i] + 1)
      for i in dying.get(c, ()):
        free[self.graph.dtypes[i]].append(slots[i])
    return slots

  def program(self) -> Program:
    """The kernels (one per chunk), their launches and the workspace of values crossing chunks."""
    chunks = [_Chunk() for _ in range(self.chunks)]
    writes_at: dict[int, list[tuple[int, int]]] = {}
    for out, k, node in self.writes:
      writes_at.setdefault(node, []).append((out, k))
    for node in [n for n in writes_at if n not in self.chunk_of]:  # NOTE: constants and inputs returned as they are
      for out, k in writes_at.pop(node):
        chunks[0].outputs.add(out)
        chunks[0].lines.append(f"out{out}[{k}] = {self._operand(node, 0, chunks[0])};")
    for i in self.statements:
      chunk = chunks[c := self.chunk_of[i]]
      ctype = cpp_type(self.graph.dtypes[i], "value")
      chunk.lines.append(f"const {ctype} v{i} = {self._expression(i, c, chunk)};")
      if i in self.slots:
        chunk.temps.add(self.graph.dtypes[i])
        chunk.lines.append(f"{_temp(self.graph.dtypes[i])}[{self.slots[i]}] = v{i};")
      for out, k in writes_at.get(i, ()):
        chunk.outputs.add(out)
        chunk.lines.append(f"out{out}[{k}] = v{i};")
    offsets, ws_size = {}, 0
    for dtype, size in self.temp_sizes.items():
      offsets[dtype], ws_size = ws_size, ws_size + _aligned(size * dtype.itemsize)
    kernels, steps = [], []
    for c, chunk in enumerate(chunks):
      params = [(f"const {cpp_type(self.input_dtypes[i], 'input')}* ANVIL_RESTRICT in{i}", BufferRef("in", i, d))
                for i, d in sorted((i, self.input_dtypes[i]) for i in chunk.inputs)]  # fmt: skip
      params += [(f"{cpp_type(self.output_dtypes[o], 'output')}* ANVIL_RESTRICT out{o}", BufferRef("out", o, d))
                 for o, d in sorted((o, self.output_dtypes[o]) for o in chunk.outputs)]  # fmt: skip
      params += [(f"{cpp_type(d, 'temp')}* ANVIL_RESTRICT {_temp(d)}", BufferRef("ws", offsets[d], d))
                 for d in sorted(chunk.temps, key=lambda d: d.name)]  # fmt: skip
      signature = ", ".join(p for p, _ in params)
      body = "\n".join(f"  {line}" for line in chunk.lines)
      source = f"ANVIL_STRAIGHT_LINE void k{c}({signature}) {{\n{body}\n}}"
      kernels.append(RenderedKernel(f"k{c}", source, (), (), (1, 1, 1), (1, 1, 1)))
      steps.append(KernelStep(f"k{c}", tuple(ref for _, ref in params)))
    return Program(tuple(kernels), tuple(steps), (), ws_size)

  def _operand(self, i: int, c: int, chunk: _Chunk) -> str:
    """How chunk c names node i."""
    g = self.graph
    if g.ops[i] is Ops.CONST:
      return _constant(g, i)
    if g.ops[i] is Ops.LOAD:
      chunk.inputs.add(g.args[i].index)
      return f"in{g.args[i].index}[{g.args[i].element}]"
    if self.chunk_of[i] == c:
      return f"v{i}"
    chunk.temps.add(g.dtypes[i])
    return f"{_temp(g.dtypes[i])}[{self.slots[i]}]"

  def _expression(self, i: int, c: int, chunk: _Chunk) -> str:
    return _render(self.graph, i, [self._operand(s, c, chunk) for s in self.graph.srcs[i]])


def _constant(g: ScalarGraph, i: int) -> str:
  literal = cpp_literal(g.args[i], g.dtypes[i])
  return f"({literal})" if literal.startswith("-") else literal


def _render(g: ScalarGraph, i: int, xs: list[str]) -> str:
  """The C++ expression of node i over its operands `xs`."""
  op, dtype = g.ops[i], g.dtypes[i]
  if op is Ops.SIN and g.args[i] == COS_MARK:
    return f"std::cos({xs[0]})"
  if op is Ops.CAST:
    return f"static_cast<{cpp_type(dtype, 'value')}>({xs[0]})"
  if op is Ops.MAX:
    return f"(({xs[0]}<{xs[1]})?{xs[1]}:{xs[0]})"
  if op is Ops.FDIV:
    return f"({xs[0]}/{xs[1]})"
  if op is Ops.POW:
    return f"std::pow({xs[0]}, {xs[1]})"
  if op is Ops.MULACC:
    return f"(({xs[0]}*{xs[1]})+{xs[2]})"
  if op in (Ops.CDIV, Ops.CMOD):
    return f"anvil::{'cdiv' if op is Ops.CDIV else 'cmod'}({xs[0]}, {xs[1]})"
  if op in WRAPPING_HELPERS and wraps_unlike_numpy(dtype):  # NOTE: no value ranges here: every such op wraps
    return f"anvil::{WRAPPING_HELPERS[op]}<{cpp_type(dtype, 'value')}>({', '.join(xs)})"
  return RENDERER.code_for_op[op](*xs, dtype)


def _temp(dtype: DType) -> str:
  return f"t_{dtype.name}"


def _aligned(n: int) -> int:
  return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def split_chunks(source: str, fn: str, kernels: Sequence[str], units: int) -> tuple[str, list[str]]:
  """A JIT translation unit `source` holding function `fn` with its straight-line `kernels` (and loops over columns,
  `SPLITTABLE`) spread over up to `units` translation units, in shares of equal compile cost: the first keeps its share
  (and everything else), each other one defines its share with external linkage in `namespace fn::chunks` (the
  kernels' _PART form), which the first declares and uses. Returns the first unit's text and the others'. The
  generated module itself (generate_module) stays one unit."""
  chunks = [(k, kind) for k in kernels if (kind := _splittable(k)) is not None and source.count(k) == 1]
  marker = f"// {fn}: "
  cost = lambda k, kind: len(k) * SPLITTABLE[kind][1]
  total = sum(cost(k, kind) for k, kind in chunks)
  units = min(units, math.ceil(total / CHARS_PER_UNIT))
  if units < 2 or source.count(marker) != 1:
    return source, []
  prefix = source[: source.index(marker)]
  shares: list[list[tuple[str, str]]] = [[] for _ in range(units)]
  done = 0
  for k, kind in chunks:
    shares[min(units - 1, done * units // total)].append((k, kind))
    done += cost(k, kind)
  parts = []
  for share in shares[1:]:
    for k, kind in share:
      prototype = k.split(" {\n", 1)[0].removeprefix(kind)
      name = prototype.split("(", 1)[0].removeprefix("void ")
      declared = f"}}  // namespace\nnamespace chunks {{\n{prototype};\n}}\nnamespace {{\nusing chunks::{name};"
      source = source.replace(k, declared)
    body = "\n\n".join(k.replace(kind, SPLITTABLE[kind][0], 1) for k, kind in share)
    closing = f"}}  // namespace chunks\n}}  // namespace {fn}\n"
    parts.append(f"{prefix}namespace {fn} {{\nnamespace chunks {{\n{body}\n{closing}")
  return source, parts


def _splittable(kernel: str) -> str | None:
  """The `SPLITTABLE` kind of a kernel's source, or None."""
  return next((kind for kind in SPLITTABLE if kernel.startswith(kind)), None)
