"""`CodegenIntConstant`: named integer constants emitted as `constexpr` in generated modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from anvil.codegen.names import check_identifier

IntLike = Union[int, "CodegenIntConstant"]
INT_TYPES = ("int", "long", "long long", "unsigned", "std::size_t", "std::int32_t", "std::int64_t", "std::ptrdiff_t")


@dataclass(frozen=True, eq=False)
class CodegenIntConstant:
  """An integer known at code-generation time, declared once in a generated module as `inline constexpr`.

  Arithmetic (`+ - * //`) with ints or other constants builds an unnamed expression that remembers which named
  constants it uses; `from_expr` names such an expression so it can be declared.

  Args:
    name: the C++ identifier (None only for the unnamed expressions arithmetic builds).
    value: the integer value.
    type: the C++ integer type of the declaration.

  Example:
    >>> N = CodegenIntConstant("N", 30)
    >>> NX = CodegenIntConstant("NX", 4)
    >>> W = CodegenIntConstant.from_expr("W", (N + 1) * NX)   # constexpr int W = ((N + 1) * NX);  W.value == 124
  """

  name: str | None
  value: int
  type: str = "int"
  expr: str | None = None
  deps: tuple[CodegenIntConstant, ...] = ()

  def __post_init__(self) -> None:
    if isinstance(self.value, bool) or not isinstance(self.value, int):
      raise TypeError(f"CodegenIntConstant value: expected an int, got {self.value!r}")
    if self.name is not None:
      check_identifier(self.name, "CodegenIntConstant name")
    if self.type not in INT_TYPES:
      raise ValueError(f"CodegenIntConstant type: expected one of {INT_TYPES}, got {self.type!r}")

  @classmethod
  def from_expr(cls, name: str, expr: IntLike, type: str = "int") -> CodegenIntConstant:
    """A named constant whose declaration is the expression `expr` (its value is computed here too)."""
    if isinstance(expr, int):
      return cls(name, expr, type)
    if not isinstance(expr, CodegenIntConstant):
      raise TypeError(f"CodegenIntConstant.from_expr: expected an int or an expression, got {expr!r}")
    return cls(name, expr.value, type, expr.code, expr.dependencies())

  @property
  def code(self) -> str:
    """How this constant is spelled inside an expression."""
    return self.name if self.name is not None else f"({self.expr})"

  def dependencies(self) -> tuple[CodegenIntConstant, ...]:
    """The named constants this one's declaration (or this expression) refers to directly."""
    return self.deps

  def all_dependencies(self) -> tuple[CodegenIntConstant, ...]:
    """Every named constant this one needs, transitively, dependencies first."""
    out: dict[str, CodegenIntConstant] = {}

    def visit(c: CodegenIntConstant) -> None:
      for d in c.dependencies():
        if d.name is not None and d.name not in out:
          visit(d)
          out[d.name] = d

    visit(self)
    return tuple(out.values())

  def declaration(self) -> str:
    """The C++ declaration of a named constant."""
    if self.name is None:
      raise ValueError(f"constant expression {self.code} has no name; use CodegenIntConstant.from_expr to name it")
    return f"inline constexpr {self.type} {self.name} = {self.expr if self.expr is not None else self.value};"

  def _binary(self, other: IntLike, op: str, value: int, reverse: bool = False) -> CodegenIntConstant:
    if isinstance(other, bool) or not isinstance(other, (int, CodegenIntConstant)):
      return NotImplemented
    deps = dict.fromkeys(_named(self) + _named(other))
    left, right = (_code(other), self.code) if reverse else (self.code, _code(other))
    return CodegenIntConstant(None, value, self.type, f"{left} {op} {right}", tuple(deps))

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
    return (
      f"CodegenIntConstant({self.name!r}, {self.value})" if self.name else f"CodegenIntConstant(expr={self.expr!r})"
    )


def _check_division(a: int, b: int) -> None:
  # NOTE: C++ '/' truncates toward zero while Python '//' floors; they agree only for non-negative operands.
  if b == 0:
    raise ZeroDivisionError("CodegenIntConstant: division by zero")
  if a < 0 or b < 0:
    raise ValueError("CodegenIntConstant: // needs non-negative operands (C++ '/' truncates, Python '//' floors)")


def _named(x: IntLike) -> tuple[CodegenIntConstant, ...]:
  if not isinstance(x, CodegenIntConstant):
    return ()
  return (x,) if x.name is not None else x.deps


def _code(x: IntLike) -> str:
  return x.code if isinstance(x, CodegenIntConstant) else str(int(x))
