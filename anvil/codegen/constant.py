"""`CodegenIntConstant`: named integer constants emitted as `constexpr` in generated modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from anvil.codegen.names import check_identifier

IntLike = Union[int, "CodegenIntConstant"]
INT_TYPES = ("int", "long", "long long", "unsigned", "std::size_t", "std::int32_t", "std::int64_t", "std::ptrdiff_t")
#: Spellings of INT_TYPES the API reference uses.
TYPE_ALIASES = {"int32_t": "std::int32_t", "int64_t": "std::int64_t"}


@dataclass(frozen=True, eq=False)
class CodegenIntConstant:
  """An integer known at code-generation time, declared once in a generated module as `inline constexpr`.

  Arithmetic (`+ - * //`) with ints or other constants builds an expression whose name is its C++ text (`(N + 1)`) and
  that remembers which declared constants it uses; `from_expr` names such an expression so it can be declared.
  `str(c)`, `repr(c)` and `f"{c}"` give that C++ text, so constants interpolate into hand-written C++. Constants are
  equal (and hash alike) when their name, value and type are.

  Args:
    name: the C++ identifier.
    value: the integer value.
    type: the C++ integer type of the declaration (`int32_t` and `int64_t` stand for `std::int32_t`, `std::int64_t`).

  Example:
    >>> N = CodegenIntConstant("N", 30)
    >>> NX = CodegenIntConstant("NX", 4)
    >>> W = CodegenIntConstant.from_expr("W", (N + 1) * NX)   # constexpr int W = ((N + 1) * NX);  W.value == 124
    >>> f"Buffer<double, {N + 1}>"                           # 'Buffer<double, (N + 1)>'
  """

  name: str
  value: int
  type: str = "int"
  expr: str | None = None
  deps: tuple[CodegenIntConstant, ...] = ()
  declared: bool = True

  def __post_init__(self) -> None:
    if isinstance(self.value, bool) or not isinstance(self.value, int):
      raise TypeError(f"CodegenIntConstant value: expected an int, got {self.value!r}")
    if self.declared:
      check_identifier(self.name, "CodegenIntConstant name")
    object.__setattr__(self, "type", TYPE_ALIASES.get(self.type, self.type))
    if self.type not in INT_TYPES:
      raise ValueError(f"CodegenIntConstant type: expected one of {INT_TYPES + tuple(TYPE_ALIASES)}, got {self.type!r}")

  @classmethod
  def from_expr(cls, name: str, expr: IntLike, type: str | None = None) -> CodegenIntConstant:
    """A named constant whose declaration is the expression `expr` (its value is computed here too); its type is
    `type`, else the expression's."""
    if isinstance(expr, int):
      return cls(name, expr, type or "int")
    if not isinstance(expr, CodegenIntConstant):
      raise TypeError(f"CodegenIntConstant.from_expr: expected an int or an expression, got {expr!r}")
    return cls(name, expr.value, type or expr.type, expr.name, _named(expr))

  @property
  def code(self) -> str:
    """How this constant is spelled inside an expression: its name (an expression's name is its parenthesized text)."""
    return self.name

  def dependencies(self) -> tuple[CodegenIntConstant, ...]:
    """The declared constants this one's declaration (or this expression) refers to directly."""
    return self.deps

  def all_dependencies(self) -> set[CodegenIntConstant]:
    """This constant and every declared constant it needs, transitively."""
    return {self, *self.declaration_order()}

  def declaration_order(self) -> tuple[CodegenIntConstant, ...]:
    """The declared constants to declare for this one, each after those it uses; itself last when declared."""
    out: dict[str, CodegenIntConstant] = {}

    def visit(c: CodegenIntConstant) -> None:
      for d in c.dependencies():
        if d.name not in out:
          visit(d)
      if c.declared:
        out.setdefault(c.name, c)

    visit(self)
    return tuple(out.values())

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, CodegenIntConstant):
      return NotImplemented
    return (self.name, self.value, self.type) == (other.name, other.value, other.type)

  def __hash__(self) -> int:
    return hash((self.name, self.value, self.type))

  def __str__(self) -> str:
    return self.name

  def __format__(self, spec: str) -> str:
    return format(self.name, spec)

  def declaration(self) -> str:
    """The C++ declaration of a declared constant."""
    if not self.declared:
      raise ValueError(f"constant expression {self.name} has no name; use CodegenIntConstant.from_expr to name it")
    return f"inline constexpr {self.type} {self.name} = {self.expr if self.expr is not None else self.value};"

  def _binary(self, other: IntLike, op: str, value: int, reverse: bool = False) -> CodegenIntConstant:
    if isinstance(other, bool) or not isinstance(other, (int, CodegenIntConstant)):
      return NotImplemented
    deps = dict.fromkeys(_named(self) + _named(other))
    left, right = (_code(other), self.code) if reverse else (self.code, _code(other))
    text = f"{left} {op} {right}"
    return CodegenIntConstant(f"({text})", value, self.type, text, tuple(deps), declared=False)

  def __add__(self, o: IntLike) -> CodegenIntConstant:
    return self._binary(o, "+", self.value + int(o))

  def __radd__(self, o: IntLike) -> CodegenIntConstant:
    return self._binary(o, "+", int(o) + self.value, True)

  def __sub__(self, o: IntLike) -> CodegenIntConstant:
    return self._binary(o, "-", self.value - int(o))

  def __rsub__(self, o: IntLike) -> CodegenIntConstant:
    return self._binary(o, "-", int(o) - self.value, True)

  def __mul__(self, o: IntLike) -> CodegenIntConstant:
    return self._binary(o, "*", self.value * int(o))

  def __rmul__(self, o: IntLike) -> CodegenIntConstant:
    return self._binary(o, "*", int(o) * self.value, True)

  def __floordiv__(self, o: IntLike) -> CodegenIntConstant:
    _check_division(self.value, int(o))
    return self._binary(o, "/", self.value // int(o))

  def __rfloordiv__(self, o: IntLike) -> CodegenIntConstant:
    _check_division(int(o), self.value)
    return self._binary(o, "/", int(o) // self.value, True)

  def __int__(self) -> int:
    return self.value

  def __index__(self) -> int:
    return self.value

  def __repr__(self) -> str:
    return self.name


def _check_division(a: int, b: int) -> None:
  # NOTE: C++ '/' truncates toward zero while Python '//' floors; they agree only for non-negative operands.
  if b == 0:
    raise ZeroDivisionError("CodegenIntConstant: division by zero")
  if a < 0 or b < 0:
    raise ValueError("CodegenIntConstant: // needs non-negative operands (C++ '/' truncates, Python '//' floors)")


def _named(x: IntLike) -> tuple[CodegenIntConstant, ...]:
  if not isinstance(x, CodegenIntConstant):
    return ()
  return (x,) if x.declared else x.deps


def _code(x: IntLike) -> str:
  return x.code if isinstance(x, CodegenIntConstant) else str(int(x))
