"""Vector forward mode: the wide tangents of a Jacobian as loops over its columns (as ADOL-C's vector mode).

`anvil.ad.scalar` derives a Jacobian column by column: each node's tangent is a sparse {column: expression} and each
entry one scalar statement. That is the right code while tangents are narrow (a stage's few variables). Where they are
wide it is not: a humanoid's ∂ABA applies M(q)⁻¹ (two triangular solves) to all 115 tangent columns of its ∂RNEA,
~100k scalar statements the compiler cannot vectorize. Here a node whose tangent spans at least `VECTOR` columns (and
every node computed from one) keeps its tangent as a vector in the workspace: t_i = Σ_k p_k t_k over its operands is
a loop over the columns, which the compiler vectorizes. The partials p_k and the narrow tangents that feed vectors are
computed by the scalar code first and passed through the workspace.

Each vector is a slot of the workspace as wide as the Jacobian, holding its columns as intervals of whole
`BLOCK`-column blocks (no remainder code; gaps of at most `GAP` blocks bridged with zeros). A node's loops
run over the segments of its intervals where the same terms hold columns, one loop summing them per segment. A slot
is reused once its vector is dead, and a vector that dies where a wider one is computed from it is extended in place
(a triangular solve's x_j - l_ji x_i is one loop). A node that only scales its one operand's tangent gets no loop:
it is the operand's vector with a factor.

Columns sit in a slot in an order of their own (`_column_order`): the inputs' order scatters a tangent's columns
(a tree's joint k has its q, v and τ columns in three far blocks), and every interval is a loop. Columns that wide
tangents hold together sit next to each other instead (talos's ∂ABA: 6.7k intervals in the inputs' order, 4.4k).

Only Jacobians with truly wide tangents take this route (`WIDE`, `MIN_WORK`); the rest keep the scalar code, which
exploits every structural zero and rolls stage loops (`anvil.codegen.rolling`).
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from tinygrad import dtypes
from tinygrad.dtype import DType
from tinygrad.uop.ops import Ops

from anvil.ad.sparsity import set_bits
from anvil.codegen.arg import cpp_type
from anvil.codegen.program import ALIGNMENT, BufferRef, KernelStep, Program, cpp_literal
from anvil.codegen.renderer import RenderedKernel
from anvil.codegen.scalar import ScalarGraph
from anvil.codegen.straight_line import emit_program

#: A Jacobian takes vector mode when its tangents over at least `WIDE` columns hold at least `MIN_WORK` multiply-adds
#: (fewer, and its straight-line code is small and fast enough and keeps its stage loops rolled: a model's ODE Jacobian
#: whose rows each depend on a few neighbours, however many, stays scalar code)...
WIDE = 32
MIN_WORK = 20_000
#: ...and then every node whose tangent spans at least this many columns (or is computed from one that does) is a
#: vector. Measured on a humanoid's ∂ABA (talos, 115 columns; µs, interleaved runs): 32 columns 41-43, 16 44, 12 40,
#: 8 35-37, 4 33-34, all built in 19-21 s.
VECTOR = 8
#: Columns a loop takes at a time: a vector's intervals of columns are whole blocks, aligned (AVX: 4 doubles).
BLOCK = 4
#: Blocks of zeros a vector's loops run through rather than split (a loop's overhead is about a block's work).
GAP = 1
#: Terms one loop may sum (vectors read once are summed where they are read: `_Planner._fuse`).
MAX_TERMS = 4
#: Lines per generated function.
LINES_PER_FUNCTION = 50
#: About how many tangents are sampled (between this and twice this), and how many paths started, when choosing the
#: columns' order (`_column_order`).
ORDER_SAMPLE = 4096
ORDER_STARTS = 16

Tangent = dict[int, int]
Write = tuple[int, int, int]
Partials = Callable[[ScalarGraph, int], list[tuple[int, int]]]
Intervals = list[tuple[int, int]]


@dataclass(frozen=True)
class _Vector:
  """A wide tangent: `scale` (a node) times the vector stored for node `base`."""

  scale: int
  base: int


@dataclass
class _Stored:
  """A node whose tangent is stored: Σ scale · vector(base) over `terms` plus the narrow entries `scalar` {column:
  expression} (computed by the scalar code), over `intervals` of columns."""

  terms: dict[int, int]  # base -> scale
  scalar: Tangent
  intervals: Intervals


@dataclass
class VectorJacobian:
  """A Jacobian's rows in vector mode: `narrow` rows as {column: expression} (the scalar code writes them), `wide`
  rows as their columns (the structural support, in order), written by the loops (`program`)."""

  graph: ScalarGraph
  dtype: DType
  columns: int
  narrow: dict[int, Tangent]
  wide: dict[int, list[int]]
  position: list[int]  # column -> its entry in every slot
  rows: dict[int, _Vector]
  steps: list[tuple[int, _Stored | None, list[int]]]  # (node, its stored tangent or None, the output rows it is)

  def program(self, writes: Sequence[Write], positions: dict[tuple[int, int], int], inputs: Sequence[DType],
              output: DType) -> Program:  # fmt: skip
    """The program writing the scalar code's `writes` (output 0, element, node) and each wide entry (row, column) at
    element `positions[row, column]` of output 0."""
    g, dt = self.graph, self.dtype
    exchange: dict[int, int] = {}  # node -> its element of the exchange array

    def value(node: int) -> str:
      return _literal(g, node) if g.is_const(node) else f"e[{exchange.setdefault(node, len(exchange))}]"

    loops = _Loops(
      g, value, _padded(self.columns), "" if output == dt else f"static_cast<{cpp_type(output, 'output')}>"
    )
    dying = self._dying()
    for k, (node, stored, rows) in enumerate(self.steps):
      if stored is not None:
        loops.compute(node, stored, dying.get(k, []))
      for r in rows:
        loops.write(self.rows[r], [(positions[r, c], self.position[c]) for c in self.wide[r]])
      loops.release(dying.get(k, []))
    scalar = emit_program(g, [*writes, *((1, k, n) for n, k in exchange.items())], inputs, [output, dt])
    at_exchange = _aligned(scalar.ws_size)
    at_vectors = at_exchange + _aligned(len(exchange) * dt.itemsize)
    exchange_ref = BufferRef("ws", at_exchange, dt)
    steps = tuple(
      replace(s, args=tuple(exchange_ref if (a.kind, a.index) == ("out", 1) else a for a in s.args))
      if isinstance(s, KernelStep) else s for s in scalar.steps
    )  # fmt: skip
    kernels, launches = loops.functions(dt, output, exchange_ref, BufferRef("ws", at_vectors, dt))
    return Program((*scalar.kernels, *kernels), (*steps, *launches), scalar.constants,
                   at_vectors + _aligned(loops.slots * loops.width * dt.itemsize))  # fmt: skip

  def _dying(self) -> dict[int, list[int]]:
    """For each step, the vectors it reads last (dead after it)."""
    last: dict[int, int] = {}
    for k, (node, stored, rows) in enumerate(self.steps):
      for base in [*(stored.terms if stored else ()), *(self.rows[r].base for r in rows), *([node] if stored else ())]:
        last[base] = k
    dying: dict[int, list[int]] = {}
    for base, k in last.items():
      dying.setdefault(k, []).append(base)
    return dying


def vector_jacobian(g: ScalarGraph, outputs: Sequence[int], wrt: int, columns: int, partials: Partials,
                    needed: bytearray, zero: bytearray) -> VectorJacobian | None:  # fmt: skip
  """The Jacobian of `outputs` in input `wrt` (of `columns` elements) in vector mode, or None where its wide tangents
  are too few to pay (`MIN_WORK`) or mix dtypes. `partials(g, i)` gives node i's (operand, partial) pairs; `needed`
  and `zero` are those of the final derivative pass (`anvil.ad.scalar.tangents`)."""
  support: dict[int, int] = {}  # node -> its tangent's columns, as a bit set
  contributions: dict[int, list[tuple[int, int]]] = {}
  wide: set[int] = set()
  work = 0
  live = g.live(outputs)
  for i in live:
    if g.ops[i] is Ops.LOAD:
      support[i] = 1 << g.args[i].element if g.args[i].index == wrt else 0
      continue
    if not needed[i] or not any(support.get(s) for s in g.srcs[i]):
      continue
    found = [(s, p) for s, p in partials(g, i) if support.get(s) and not (p < len(zero) and zero[p])]
    if not found:
      continue
    contributions[i] = found
    support[i] = _union(support[s] for s, _ in found)
    spans = support[i].bit_count()
    if spans >= VECTOR or any(s in wide for s, _ in found):
      wide.add(i)
    if spans >= WIDE:
      work += sum(support[s].bit_count() for s, _ in found)
  if work < MIN_WORK:
    return None
  dt = g.dtypes[outputs[0]]
  if not dtypes.is_float(dt) or any(g.dtypes[i] != dt for i in wide):
    return None
  position = _column_order([support[i] for i in wide], columns)
  support |= {i: _moved(support[i], position) for i in wide}
  return _Planner(g, dt, support, contributions, wide, position).plan(live, outputs, columns)


def _column_order(masks: list[int], columns: int) -> list[int]:
  """Each column's entry in a slot (a permutation): an order in which the `masks` (the wide tangents' columns) break
  into few intervals. A mask's intervals are about half its changes between neighbouring columns, so the order is a
  short path through the columns in the Hamming distance of their membership in the masks (the cheapest of nearest-
  neighbour paths from `ORDER_STARTS` columns, over every (count // `ORDER_SAMPLE`)-th mask)."""
  sample = masks[:: max(1, len(masks) // ORDER_SAMPLE)]
  member = np.zeros((len(sample), columns), dtype=np.float32)
  for k, mask in enumerate(sample):
    member[k, set_bits(mask)] = 1.0
  distance = member.T @ (1.0 - member) + (1.0 - member).T @ member
  best: tuple[float, list[int]] = (math.inf, list(range(columns)))
  for start in range(0, columns, max(1, columns // ORDER_STARTS)):
    left = np.ones(columns, dtype=bool)
    left[start] = False
    path, cost = [start], 0.0
    for _ in range(columns - 1):
      step = int(np.argmin(np.where(left, distance[path[-1]], np.inf)))
      cost += float(distance[path[-1], step])
      left[step] = False
      path.append(step)
    best = min(best, (cost, path), key=lambda b: b[0])
  position = [0] * columns
  for p, c in enumerate(best[1]):
    position[c] = p
  return position


def _moved(mask: int, position: list[int]) -> int:
  """`mask` with each column's bit at its position."""
  return _union(1 << position[c] for c in set_bits(mask))


class _Planner:
  """Narrow tangents as expressions (as `tangents` forms them), wide ones as stored vectors or scaled references."""

  def __init__(self, g: ScalarGraph, dt: DType, support: dict[int, int],
               contributions: dict[int, list[tuple[int, int]]], wide: set[int], position: list[int]):  # fmt: skip
    self.g, self.dt, self.support, self.contributions, self.wide = g, dt, support, contributions, wide
    self.position = position  # NOTE: tangents here are keyed by position (`_column_order`), rows by column
    self.narrow: dict[int, Tangent] = {}
    self.vectors: dict[int, _Vector] = {}
    self.stored: dict[int, _Stored] = {}

  def plan(self, live: list[int], outputs: Sequence[int], columns: int) -> VectorJacobian:
    g = self.g
    for i in live:
      if g.ops[i] is Ops.LOAD:
        self.narrow[i] = {self.position[g.args[i].element]: g.const(1.0, g.dtypes[i])} if self.support.get(i) else {}
      elif i in self.wide:
        self._wide(i)
      elif i in self.contributions:
        t: Tangent = {}
        for s, p in self.contributions[i]:
          accumulate(g, t, self.narrow[s], p, g.dtypes[i])
        self.narrow[i] = t
    rows_of: dict[int, list[int]] = {}
    for r, o in enumerate(outputs):
      if o in self.wide:
        rows_of.setdefault(o, []).append(r)
    self._fuse({self.vectors[o].base for o in rows_of})
    steps = [(i, self.stored.get(i), rows_of.get(i, [])) for i in live if i in self.stored or i in rows_of]
    column = sorted(range(columns), key=self.position.__getitem__)
    narrow, wide_rows, rows = {}, {}, {}
    for r, o in enumerate(outputs):
      if o in self.wide:
        wide_rows[r], rows[r] = sorted(column[p] for p in set_bits(self.support[o])), self.vectors[o]
      else:
        narrow[r] = {column[p]: d for p, d in self.narrow.get(o, {}).items()}
    return VectorJacobian(g, self.dt, columns, narrow, wide_rows, self.position, rows, steps)

  def _fuse(self, written: set[int]) -> None:
    """Vectors read once, by a later vector's loop, and holding no narrow entries are summed in that loop instead of
    stored (while it sums at most `MAX_TERMS` terms): a chain of sums is one loop."""
    g, dt = self.g, self.dt
    uses = collections.Counter(b for node in self.stored.values() for b in node.terms)
    fused = set()
    for node in self.stored.values():
      terms = dict(node.terms)
      for b in node.terms:
        scale = terms[b]  # NOTE: this loop may have added to it (a term b's inner vector also had)
        inner = self.stored.get(b)
        if (
          inner is None or uses[b] != 1 or b in written or inner.scalar or len(terms) + len(inner.terms) > MAX_TERMS + 1
        ):
          continue
        del terms[b]
        for c, s in inner.terms.items():
          product = g.alu(Ops.MUL, dt, scale, s)
          if c in terms:
            uses[c] -= 1
            product = g.alu(Ops.ADD, dt, terms[c], product)
          terms[c] = product
        fused.add(b)
      node.terms = terms
    for b in fused:
      del self.stored[b]

  def _wide(self, i: int) -> None:
    g, dt = self.g, self.dt
    terms: dict[int, int] = {}
    scalar: Tangent = {}
    for s, p in self.contributions[i]:
      if s in self.wide:
        vector = self.vectors[s]
        scale = g.alu(Ops.MUL, dt, p, vector.scale)
        terms[vector.base] = scale if (old := terms.get(vector.base)) is None else g.alu(Ops.ADD, dt, old, scale)
      else:
        accumulate(g, scalar, self.narrow[s], p, dt)
    if not scalar and len(terms) == 1:
      base, scale = next(iter(terms.items()))
      self.vectors[i] = _Vector(scale, base)
    else:
      self.vectors[i] = _Vector(g.const(1.0, dt), i)
      self.stored[i] = _Stored(terms, scalar, _intervals(self.support[i]))


def accumulate(g: ScalarGraph, into: Tangent, tangent: Tangent, partial: int, dt: DType) -> None:
  """into += partial * tangent, column by column (forward mode's step on sparse tangents, `anvil.ad.scalar`'s too)."""
  for column, d in tangent.items():
    term = g.alu(Ops.MUL, dt, partial, g.cast(d, dt))
    into[column] = term if (old := into.get(column)) is None else g.alu(Ops.ADD, dt, old, term)


def _union(masks: Iterable[int]) -> int:
  out = 0
  for m in masks:
    out |= m
  return out


def _intervals(mask: int) -> Intervals:
  """The columns of `mask` as intervals [start, end) of whole blocks of `BLOCK` columns (so that every loop is a
  whole number of vector instructions: no remainder code), intervals at most `GAP` blocks apart joined. A superset's
  intervals cover a subset's."""
  out: Intervals = []
  for c in set_bits(mask):
    block = c // BLOCK * BLOCK
    if out and block < out[-1][1]:
      continue
    if out and block - out[-1][1] <= GAP * BLOCK:
      out[-1] = (out[-1][0], block + BLOCK)
    else:
      out.append((block, block + BLOCK))
  return out


class _Loops:
  """The loops computing the stored vectors in the array `t` (a slot of `width` entries per live vector), reading
  partials and narrow entries from the exchange array `e`, writing output 0."""

  def __init__(self, g: ScalarGraph, value: Callable[[int], str], width: int, cast: str):
    self.g, self.value, self.width, self.cast = g, value, width, cast
    self.lines: list[str] = []
    self.slot: dict[int, int] = {}
    self.free: list[int] = []
    self.slots = 0
    self.covered: dict[int, Intervals] = {}  # the intervals each live vector holds

  def compute(self, node: int, stored: _Stored, dying: list[int]) -> None:
    """The loops of node's vector: one per segment of its intervals over which the same terms hold columns, each
    summing those terms. One of the `dying` vectors it reads (dead after it) is extended in place into it (`dying`
    loses it); else it takes a free slot."""
    g = self.g
    terms = {b: s for b, s in stored.terms.items() if not (g.is_const(s) and g.args[s] == 0)}
    extended = max((b for b in terms if b in dying), key=self._held, default=None)
    if extended is not None:
      dying.remove(extended)
      self.slot[node] = self.slot.pop(extended)
    else:
      self.slot[node] = self.free.pop() if self.free else self._grow()
    at = self._at(node)
    reads = {b: self._at(node if b == extended else b) for b in terms}
    cuts = sorted({c for b in terms for interval in self.covered[b] for c in interval})
    for lo, hi in stored.intervals:
      bounds = [lo, *(c for c in cuts if lo < c < hi), hi]
      for start, end in itertools.pairwise(bounds):
        held = [b for b in terms if any(a <= start and end <= z for a, z in self.covered[b])]
        if extended is not None and held == [extended] and g.is_const(terms[extended]) and g.args[terms[extended]] == 1:
          continue  # NOTE: the extended vector's own entries, in place already
        total = " + ".join(self._term(terms[b], f"t[{reads[b]} + c]") for b in held) or "0"
        self.lines.append(f"for (int c = {start}; c < {end}; ++c) t[{at} + c] = {total};")
    for c, entry in stored.scalar.items():
      self.lines.append(f"t[{at + c}] += {self.value(entry)};")
    self.covered[node] = stored.intervals

  def write(self, vector: _Vector, targets: list[tuple[int, int]]) -> None:
    """out0[element] = the vector's entry at column c, for each (element, c) of `targets`."""
    at = self._at(vector.base)
    runs: list[tuple[int, int, int]] = []  # (first element, first column, length)
    for e, c in targets:
      if runs and runs[-1][0] + runs[-1][2] == e and runs[-1][1] + runs[-1][2] == c:
        runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
      else:
        runs.append((e, c, 1))
    for e, c, n in runs:
      read = self._term(vector.scale, f"t[{at + c} + i]")
      self.lines.append(f"for (int i = 0; i < {n}; ++i) out0[{e} + i] = {self.cast}({read});")

  def release(self, nodes: list[int]) -> None:
    """The vectors of `nodes` are dead: their slots are free."""
    for node in nodes:
      self.free.append(self.slot.pop(node))
      del self.covered[node]

  def _held(self, node: int) -> int:
    """The columns node's vector holds."""
    return sum(hi - lo for lo, hi in self.covered[node])

  def _grow(self) -> int:
    self.slots += 1
    return self.slots - 1

  def _at(self, node: int) -> int:
    return self.slot[node] * self.width

  def _term(self, scale: int, read: str) -> str:
    """scale * read, constant factors ±1 folded."""
    if self.g.is_const(scale) and self.g.args[scale] in (1, -1):
      return read if self.g.args[scale] == 1 else f"(-{read})"
    return f"{self.value(scale)} * {read}"

  def functions(self, dt: DType, output: DType, exchange: BufferRef, vectors: BufferRef
                ) -> tuple[list[RenderedKernel], list[KernelStep]]:  # fmt: skip
    """The loops as functions of `LINES_PER_FUNCTION` lines each, and their launches."""
    value, out = cpp_type(dt, "temp"), cpp_type(output, "output")
    params = {"e[": (f"const {value}* ANVIL_RESTRICT e", exchange), "t[": (f"{value}* ANVIL_RESTRICT t", vectors),
              "out0[": (f"{out}* ANVIL_RESTRICT out0", BufferRef("out", 0, output))}  # fmt: skip
    kernels, steps = [], []
    for j, first in enumerate(range(0, len(self.lines), LINES_PER_FUNCTION)):
      body = "\n".join(f"  {line}" for line in self.lines[first : first + LINES_PER_FUNCTION])
      used = [p for use, p in params.items() if use in body]  # NOTE: a function's unused parameters would warn
      source = f"ANVIL_COLUMN_LOOPS void w{j}({', '.join(p for p, _ in used)}) {{\n{body}\n}}"
      kernels.append(RenderedKernel(f"w{j}", source, (), (), (1, 1, 1), (1, 1, 1)))
      steps.append(KernelStep(f"w{j}", tuple(ref for _, ref in used)))
    return kernels, steps


def _padded(columns: int) -> int:
  """A slot's entries: whole groups of 8, so that every slot starts aligned."""
  return (columns + 7) // 8 * 8


def _literal(g: ScalarGraph, node: int) -> str:
  literal = cpp_literal(g.args[node], g.dtypes[node])
  return f"({literal})" if literal.startswith("-") else literal


def _aligned(n: int) -> int:
  return math.ceil(n / ALIGNMENT) * ALIGNMENT
