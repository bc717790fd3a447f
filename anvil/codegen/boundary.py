"""Structs that cross the JIT boundary, each declared once: a `Struct` renders its C++ declaration, builds its ctypes
mirror, and renders the `static_assert`s that make a build fail where the mirror's layout differs (instead of a call
that misreads); `boundary_code` gathers a module's for its templates."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from anvil.codegen.base import render_template

#: The ctypes type of each C++ field type a boundary struct may hold (pointers to the generated code's reals).
CTYPES: dict[str, Any] = {
  "int": ctypes.c_int, "double": ctypes.c_double, "bool": ctypes.c_bool, "const real*": ctypes.c_void_p,
}  # fmt: skip


@dataclass(frozen=True)
class Field:
  """One field of a boundary struct.

  Attributes:
    name: its name, on both sides.
    kind: its C++ type, a key of `CTYPES`.
    doc: what it is (the C++ comment).
    default: its C++ default member initializer ("": none); `{name}` fields are filled by `Struct.declaration`.
    count: an array of `count` where > 1.
  """

  name: str
  kind: str
  doc: str = ""
  default: str = ""
  count: int = 1

  def __post_init__(self) -> None:
    if self.kind not in CTYPES:
      raise ValueError(f"Field {self.name}: kind must be one of {tuple(CTYPES)}, got {self.kind!r}")


@dataclass(frozen=True)
class Struct:
  """A C++ struct and its ctypes mirror, from one declaration.

  Attributes:
    name: its C++ name where it is declared.
    doc: what it is (the C++ doc comment; one line per line).
    fields: its fields, in order.
  """

  name: str
  doc: str
  fields: tuple[Field, ...]

  @property
  def names(self) -> tuple[str, ...]:
    """Its fields' names, in order."""
    return tuple(f.name for f in self.fields)

  @cached_property
  def mirror(self) -> type[ctypes.Structure]:
    """Its ctypes mirror: a structure of the same fields in the same order (one class per declaration)."""
    fields = [(f.name, CTYPES[f.kind] * f.count if f.count > 1 else CTYPES[f.kind]) for f in self.fields]
    return type(self.name, (ctypes.Structure,), {"_fields_": fields, "__doc__": f"The ctypes mirror of {self.name}."})

  def declaration(self, **names: str) -> str:
    """The C++ declaration, its fields' defaults filled with `names` (e.g. the namespace of a solver's constants)."""
    fields = [(f, f.default.format(**names)) for f in self.fields]
    return render_template("boundary_struct.hpp.j2", struct=self, fields=fields)

  def layout_asserts(self, qualified: str) -> str:
    """`static_assert`s that the C++ struct `qualified` (this one, where it is declared) has its mirror's layout."""
    offsets = [(f.name, int(getattr(self.mirror, f.name).offset)) for f in self.fields]
    size = ctypes.sizeof(self.mirror)
    return render_template("boundary_layout.hpp.j2", qualified=qualified, offsets=offsets, size=size)


@dataclass(frozen=True)
class BoundaryCode:
  """The C++ of a module's boundary structs, as its templates take it.

  Attributes:
    structs: each struct's declaration, by its name (`c.boundary.structs.Bounds` in a template).
    asserts: the layout checks of them all, for its JIT build.
    functions: C++ that fills them (its JIT build's).
  """

  structs: dict[str, str]
  asserts: str
  functions: str = ""


def boundary_code(structs: tuple[tuple[Struct, str], ...], functions: str = "", **names: str) -> BoundaryCode:
  """The C++ of `structs` ((declaration, its qualified C++ name) each), defaults filled with `names`, and the
  `functions` that fill them."""
  return BoundaryCode({s.name: s.declaration(**names) for s, _ in structs},
                      "".join(s.layout_asserts(qualified) for s, qualified in structs), functions)  # fmt: skip
