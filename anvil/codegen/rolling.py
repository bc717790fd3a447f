"""Re-rolling straight-line code: the stages of a problem written as a Python loop, found again as loops.

A function traced from a loop over stages (and its derivatives, derived on the scalar expressions) computes the same
expressions once per stage on other elements. Emitted one assignment per operation, the code and the compiler's time
grow with the number of stages (a swing-up's Lagrangian Hessian at 50 stages: 79k assignments, 20 s of g++). Here the
computations are split into families, each the same expression graph on elements that advance by a fixed stride from
one member to the next, and each family becomes one loop whose body is one member's code with its loads and writes
indexed by the iteration (`in0[3 + 5*s]`): the code of a stage is compiled once, whatever the number of stages.

A member is a connected component of the graph's operations (inputs, constants and the operations all stages share
do not connect): the values one stage computes and the outputs it writes. Two members are the same computation when
their operations, dtypes, constants, the order of operands and their writes match, read depth first from the writes
(a commutative op's operands in a canonical order), with each input element replaced by the order it is first read
in; a run of such members (in the order of their first write) whose input elements and written positions advance by
constant strides is a family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinygrad.uop.ops import Ops

from anvil.codegen.scalar import COMMUTATIVE, ScalarGraph

#: The fewest members a family needs to become a loop.
MIN_MEMBERS = 3

Write = tuple[int, int, int]  # (output, element, node)


@dataclass(frozen=True)
class Family:
  """A loop over `count` members of one computation.

  Attributes:
    count: iterations.
    nodes: the first member's operations, each after its operands (the loop body).
    strides: for each input element the first member reads (its LOAD node), the elements it advances by per
      iteration.
    writes: (output, first element, stride, node of the first member) for each write.
  """

  count: int
  nodes: tuple[int, ...]
  strides: dict[int, int]
  writes: tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class _Member:
  """One connected computation: its writes (by output position), its operations and its LOAD nodes by slot."""

  writes: tuple[Write, ...]
  nodes: tuple[int, ...]
  loads: tuple[int, ...]


def find_families(graph: ScalarGraph, writes: Sequence[Write]) -> tuple[list[Family], list[Write]]:
  """The loops `writes` fold into, and the writes left to straight-line code."""
  groups: dict[tuple[Any, ...], list[_Member]] = {}
  live = graph.live([w[2] for w in writes])
  invariant = _invariant(graph, writes, live)
  rest = [w for w in writes if not _computed(graph, w[2]) or w[2] in invariant]
  computed = [w for w in writes if _computed(graph, w[2]) and w[2] not in invariant]
  canonical = _Canonical(graph, live)
  for component in _components(graph, computed, invariant, live):
    signature, member = canonical.read(component)
    groups.setdefault(signature, []).append(member)
  families: list[Family] = []
  for group in groups.values():
    group.sort(key=lambda m: m.writes[0][:2])
    start = 0
    while start < len(group):
      end = _run_end(graph, group, start)
      if end - start >= MIN_MEMBERS:
        families.append(_family(graph, group[start], group[start + 1], end - start))
      else:
        rest += [w for m in group[start:end] for w in m.writes]
      start = end
  return families, rest


def _computed(graph: ScalarGraph, i: int) -> bool:
  return graph.ops[i] not in (Ops.CONST, Ops.LOAD)


def _invariant(graph: ScalarGraph, writes: Sequence[Write], live: list[int]) -> set[int]:
  """The operations every stage shares (hash-consing made them one node: `p[0] - 1`, `sigma * 2`): those reading only
  input elements that more than half of the writes depend on. They join no component; each member that uses them
  recomputes them in its loop body. `live`: the nodes the writes depend on, in creation order."""
  reach: dict[int, int] = {}  # node -> the writes depending on it, as bits
  for bit, (_, _, node) in enumerate(writes):
    reach[node] = reach.get(node, 0) | 1 << bit
  for i in reversed(live):
    if (r := reach.get(i, 0)) and _computed(graph, i):
      for s in graph.srcs[i]:
        reach[s] = reach.get(s, 0) | r
  shared: dict[int, bool] = {}
  for i in live:
    op = graph.ops[i]
    if op is Ops.LOAD:
      shared[i] = 2 * reach.get(i, 0).bit_count() > len(writes)
    else:
      shared[i] = all(shared[s] for s in graph.srcs[i])
  return {i for i in live if shared[i] and _computed(graph, i)}


def _components(graph: ScalarGraph, writes: Sequence[Write], invariant: set[int], live: list[int]) -> list[list[Write]]:
  """The writes grouped by the connected component of operations their values belong to (union-find over operand
  edges between the `live` operations that are not `invariant`), each group in output order."""
  parent: dict[int, int] = {}

  def find(i: int) -> int:
    while parent[i] != i:
      parent[i] = parent[parent[i]]
      i = parent[i]
    return i

  for i in live:
    if _computed(graph, i) and i not in invariant:
      parent[i] = i
      for s in graph.srcs[i]:
        if s in parent:
          a, b = find(i), find(s)
          if a != b:
            parent[a] = b
  grouped: dict[int, list[Write]] = {}
  for w in sorted(writes):
    grouped.setdefault(find(w[2]), []).append(w)
  return list(grouped.values())


class _Canonical:
  """Operand orders that do not depend on node ids: a commutative op's operands sorted by a structural hash of their
  expressions (inputs by their buffer, not their element), so stages whose nodes were numbered in another order (a
  constant first made in the middle of stage 0) read the same."""

  def __init__(self, graph: ScalarGraph, live: list[int]) -> None:
    self.graph = graph
    self.hash: dict[int, int] = {}
    tags: dict[Any, int] = {}  # NOTE: dtypes and args as numbers in order of appearance: no str hashing, so the order
    tag = lambda value: tags.setdefault(value, len(tags))  # (and the code) is the same in every process
    for i in live:
      op, dtype = graph.ops[i], tag(graph.dtypes[i])
      if op is Ops.LOAD:
        self.hash[i] = hash((op.value, dtype, graph.args[i].index))
      else:
        operands = tuple(self.hash[s] for s in self.operands(i))
        self.hash[i] = hash((op.value, dtype, tag(repr(graph.args[i])), operands))

  def operands(self, i: int) -> tuple[int, ...]:
    srcs = self.graph.srcs[i]
    return tuple(sorted(srcs, key=self.hash.__getitem__)) if self.graph.ops[i] in COMMUTATIVE else srcs

  def read(self, writes: list[Write]) -> tuple[tuple[Any, ...], _Member]:
    """The signature of a component (module docstring) and the member it is: its nodes depth first from its writes,
    operands in canonical order."""
    graph, local = self.graph, dict[int, Any]()
    loads: list[int] = []
    nodes: list[int] = []
    signature: list[Any] = []
    for i in self._postorder([w[2] for w in writes]):
      op = graph.ops[i]
      if op is Ops.CONST:
        local[i] = ("c", graph.dtypes[i], repr(graph.args[i]))  # NOTE: repr tells -0.0 from 0.0
      elif op is Ops.LOAD:
        local[i] = ("l", len(loads))
        signature.append(("load", graph.args[i].index, graph.dtypes[i]))
        loads.append(i)
      else:
        local[i] = len(nodes)
        signature.append((op, graph.dtypes[i], graph.args[i], tuple(local[s] for s in self.operands(i))))
        nodes.append(i)
    signature.append(tuple((out, local[node]) for out, _, node in writes))
    return tuple(signature), _Member(tuple(writes), tuple(nodes), tuple(loads))

  def _postorder(self, roots: list[int]) -> list[int]:
    done: set[int] = set()
    order: list[int] = []
    for root in roots:
      stack = [(root, False)]
      while stack:
        i, expanded = stack.pop()
        if i in done:
          continue
        if expanded:
          done.add(i)
          order.append(i)
          continue
        stack.append((i, True))
        stack.extend((s, False) for s in reversed(self.operands(i)) if s not in done)
    return order


def _positions(graph: ScalarGraph, member: _Member) -> list[int]:
  """The input elements a member reads (by slot), then the output elements it writes."""
  return [graph.args[i].element for i in member.loads] + [k for _, k, _ in member.writes]


def _run_end(graph: ScalarGraph, group: list[_Member], start: int) -> int:
  """The end of the run from `start` whose positions advance by one stride per member."""
  if start + 1 >= len(group):
    return len(group)
  first = _positions(graph, group[start])
  stride = [b - a for a, b in zip(first, _positions(graph, group[start + 1]), strict=True)]
  end = start + 2
  while end < len(group) and all(
    p == a + (end - start) * d for p, a, d in zip(_positions(graph, group[end]), first, stride, strict=True)
  ):
    end += 1
  return end


def _family(graph: ScalarGraph, first: _Member, second: _Member, count: int) -> Family:
  strides = {i: graph.args[j].element - graph.args[i].element for i, j in zip(first.loads, second.loads, strict=True)}
  writes = tuple((out, k, k2 - k, node) for (out, k, node), (_, k2, _) in zip(first.writes, second.writes, strict=True))
  return Family(count, first.nodes, strides, writes)
