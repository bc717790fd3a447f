"""`Arg`: the declared shape and dtype of one input of a generated function."""

from __future__ import annotations

import keyword
import math

import numpy as np
from tinygrad import dtypes
from tinygrad.dtype import DType

from anvil.codegen.constant import CodegenIntConstant

Dim = int | CodegenIntConstant
ShapeLike = Dim | tuple[Dim, ...]

# NOTE: the dtypes a generated function can take or return, with their C++ spelling.
CPP_TYPES: dict[DType, str] = {
  dtypes.float64: "double",
  dtypes.float32: "float",
  dtypes.int8: "int8_t",
  dtypes.int16: "int16_t",
  dtypes.int32: "int32_t",
  dtypes.int64: "int64_t",
  dtypes.uint8: "uint8_t",
  dtypes.uint16: "uint16_t",
  dtypes.uint32: "uint32_t",
  dtypes.uint64: "uint64_t",
  dtypes.bool: "bool",
}


def cpp_type(dtype: DType, what: str) -> str:
  """The C++ spelling of `dtype`; `what` names the argument for the error message."""
  if (name := CPP_TYPES.get(dtype)) is None:
    supported = ", ".join(d.name for d in CPP_TYPES)
    raise TypeError(f"{what}: dtype {dtype.name} is not supported by generated code (supported: {supported})")
  return name


def as_dtype(dtype: object, what: str) -> DType:
  """`dtype` as a tinygrad dtype: a DType, its name ("float32") or a numpy dtype-like (np.float32)."""
  if isinstance(dtype, DType):
    return dtype
  if isinstance(dtype, str) and isinstance(found := getattr(dtypes, dtype, None), DType):
    return found
  try:
    as_numpy = np.dtype(dtype)  # type: ignore[call-overload]
  except TypeError:
    as_numpy = None
  if (match := next((d for d in CPP_TYPES if as_numpy is not None and numpy_dtype(d) == as_numpy), None)) is not None:
    return match
  raise TypeError(f"{what}: expected a tinygrad dtype (dtypes.float64), its name or a numpy dtype, got {dtype!r}")


def numpy_dtype(dtype: DType) -> np.dtype:
  """The numpy dtype matching a supported tinygrad dtype."""
  return np.dtype(dtype.fmt)


def _normalize_shape(shape: ShapeLike) -> tuple[Dim, ...]:
  dims = shape if isinstance(shape, tuple) else (shape,)
  for d in dims:
    if isinstance(d, CodegenIntConstant):
      if not d.declared:
        raise ValueError(f"Arg shape: {d.name} is an unnamed expression; name it with CodegenIntConstant.from_expr")
      if d.value < 0:
        raise ValueError(f"Arg shape: constant {d.name} = {d.value} is negative")
    elif isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
      raise ValueError(f"Arg shape: expected non-negative ints, got {shape!r}")
  return tuple(d if isinstance(d, CodegenIntConstant) else int(d) for d in dims)


class Arg:
  """One input of a generated function: its shape (C order) and dtype.

  Args:
    shape: an int (a vector), a tuple of ints (`()` is a scalar), or `CodegenIntConstant`s, which the generated
      header then spells by name (`Buffer<double, N>`).
    dtype: a tinygrad dtype, its name ("float32") or a numpy dtype; float64 unless given.
    name: a name for error messages and the generated header; defaults to the Python parameter name.

  Example:
    >>> Arg(3), Arg((2, 2), dtype=dtypes.float32), Arg(0)
  """

  __slots__ = ("dims", "dtype", "name", "shape")

  def __init__(self, shape: ShapeLike, dtype: DType | str | type = dtypes.float64, name: str | None = None) -> None:
    self.dims: tuple[Dim, ...] = _normalize_shape(shape)
    self.shape: tuple[int, ...] = tuple(int(d) for d in self.dims)
    dtype = as_dtype(dtype, "Arg dtype")
    cpp_type(dtype, "Arg")
    if name is not None and (not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name)):
      raise ValueError(f"Arg name: {name!r} is not an identifier")
    self.dtype: DType = dtype
    self.name: str | None = name

  def __repr__(self) -> str:
    name = f", name={self.name!r}" if self.name is not None else ""
    return f"Arg({self.dims!r}, dtype=dtypes.{self.dtype.name}{name})"

  def __eq__(self, other: object) -> bool:
    """Args are equal when their shapes (constants included) and dtypes are; the name is only a label."""
    return isinstance(other, Arg) and (self.dims, self.dtype) == (other.dims, other.dtype)

  def __hash__(self) -> int:
    return hash((self.shape, self.dtype))

  @property
  def ndim(self) -> int:
    """Number of dimensions (0 for a scalar)."""
    return len(self.shape)

  @property
  def size(self) -> int:
    """Number of elements."""
    return math.prod(self.shape)

  @property
  def constants(self) -> tuple[CodegenIntConstant, ...]:
    """The named constants used in the shape."""
    return tuple(d for d in self.dims if isinstance(d, CodegenIntConstant))

  def named(self, name: str) -> Arg:
    """A copy of this Arg with `name` set when it has none."""
    return self if self.name is not None else Arg(self.dims, self.dtype, name)
