"""OSQP's generated workspace made per instance: the wheel's `codegen()` writes the solver as global C variables (one
solver per program); `instanced_workspace` rewrites them as the members of one C struct, so each anvil workspace holds
its own solver and instances run at once. The generated values become `static const` tables (flash on a
microcontroller) that `<prefix>state_init` copies into an instance before pointing its structures at its members."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from anvil.codegen.base import render_template

TEMPLATES = Path(__file__).parent / "templates"

#: One top-level declaration of the wheel's workspace: `T NAME[SIZE] = {...};`, `T NAME = {...};` or `T NAME[SIZE];`
_DECLARATION = re.compile(
  r"(?P<type>[A-Za-z_]\w*)\s+(?P<name>\w+)\s*(?:\[(?P<size>\d+)\])?\s*(?:=\s*\{(?P<init>[^{}]*)\})?\s*;"
)
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
#: The arrays holding the loaded values of P and A (a copied instance keeps them and factors them again).
MATRIX_VALUES = ("data_P_csc_x", "data_A_csc_x")
#: The members the backend reads directly (anvil/osqp_backend.hpp).
MEMBERS_USED = ("solver", "sol_x", "sol_y", *MATRIX_VALUES)


@dataclass(frozen=True)
class Variable:
  """One global of the wheel's workspace, as a member of the instance struct.

  Attributes:
    type: its C type (an array's element type).
    member: its name without the prefix.
    size: the array length, None for a structure.
    init: its initializer's entries (C expressions), the prefix's variables as members of `s`; None when zeroed.
  """

  type: str
  member: str
  size: int | None
  init: tuple[str, ...] | None

  @property
  def declaration(self) -> str:
    """Its member declaration (C has no empty arrays: one element at least)."""
    return f"{self.type} {self.member}" + ("" if self.size is None else f"[{max(self.size, 1)}]")


@dataclass(frozen=True)
class InstancedWorkspace:
  """The wheel's workspace.c for `prefix` as a per-instance struct `<prefix>state` (header and source).

  Args:
    prefix: the C prefix the wheel gave the workspace's symbols.
    source: the wheel's `<prefix>workspace.c`.
  """

  prefix: str
  source: str

  @cached_property
  def variables(self) -> tuple[Variable, ...]:
    """Every global of the source in order; raises ValueError on text this rewrite does not know (a new OSQP)."""
    text = _COMMENT.sub("", self.source)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    found, end = [], 0
    for match in _DECLARATION.finditer(text):
      if text[end : match.start()].strip():
        raise ValueError(f"{self.prefix}workspace.c: unexpected text {text[end : match.start()].strip()[:80]!r}")
      found.append(self._variable(match))
      end = match.end()
    if text[end:].strip():
      raise ValueError(f"{self.prefix}workspace.c: unexpected text {text[end:].strip()[:80]!r}")
    missing = set(MEMBERS_USED) - {v.member for v in found}
    if missing:
      raise ValueError(f"{self.prefix}workspace.c: OSQP's workspace lacks {sorted(missing)}")
    return tuple(found)

  def _variable(self, match: re.Match[str]) -> Variable:
    name = match["name"]
    if not name.startswith(self.prefix):
      raise ValueError(f"{self.prefix}workspace.c: {name} lacks the prefix {self.prefix!r}")
    init = match["init"]
    entries = None if init is None else tuple(e.strip() for e in init.split(",") if e.strip())
    size = None if match["size"] is None else int(match["size"])
    if size is not None and entries and len(entries) != size:
      raise ValueError(f"{self.prefix}workspace.c: {name} has {len(entries)} values for {size} elements")
    members = None if entries is None else tuple(re.sub(rf"\b{self.prefix}(\w+)", r"s->\1", e) for e in entries)
    return Variable(match["type"], name[len(self.prefix) :], size, members)

  @property
  def header(self) -> str:
    """`<prefix>workspace.h`: the struct and its init function (C, usable from C++)."""
    return render_template("osqp_workspace.h.j2", folder=TEMPLATES, prefix=self.prefix, variables=self.variables)

  @property
  def definitions(self) -> str:
    """`<prefix>workspace.c`: the generated values and `<prefix>state_init`."""
    return render_template("osqp_workspace.c.j2", folder=TEMPLATES, prefix=self.prefix, variables=self.variables,
                           kept=MATRIX_VALUES)  # fmt: skip
