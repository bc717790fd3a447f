"""The scalar type a generated solver computes in: float64 (the default) or float32 (for targets whose floating-point
unit is single precision: a Cortex-M4F does a double operation in software, tens of times slower).

A float32 solver is generated from the same float64 user functions: its functions take float32 inputs, on which the
user's math runs in float32 (`trace` makes float32 the default float of a function whose float inputs are all float32,
so `Tensor([1.0, 2.0])` and a captured `Tensor(np_array)` inside it are float32 too), and `in_scalar` casts what they
return to the solver's type (math that asks for float64 explicitly, `.cast(dtypes.float64)`, keeps that part in
double).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType

from anvil.codegen.arg import Arg
from anvil.codegen.function import NumericalFunction

#: The scalar types by name, as options take them.
SCALARS: dict[str, DType] = {"float64": dtypes.float64, "float32": dtypes.float32}
#: Each one's C++ type.
CPP_REALS = {"float64": "double", "float32": "float"}


def check_scalar(owner: str, scalar: object) -> str:
  """`scalar` if it names a scalar type ("float64" or "float32"), else a ValueError naming `owner`'s option."""
  if not isinstance(scalar, str) or scalar not in SCALARS:
    raise ValueError(f"{owner}.scalar: expected 'float64' or 'float32', got {scalar!r}")
  return scalar


def cpp_real(scalar: str) -> str:
  """The C++ type of the scalar type `scalar` ("double" or "float")."""
  return CPP_REALS[scalar]


def in_scalar(fn: Callable[..., Any], scalar: str) -> Callable[..., Any]:
  """`fn` with its float outputs (a Tensor or a tuple of them) cast to the scalar type: the functions a solver
  generates from user math return what the solver computes in, whatever constants the math captured."""
  dtype = SCALARS[scalar]
  if dtype == dtypes.float64:
    return fn

  def cast(out: Any) -> Any:
    return out.cast(dtype) if isinstance(out, Tensor) and dtypes.is_float(out.dtype) and out.dtype != dtype else out

  def lowered(*args: Any) -> Any:
    out = fn(*args)
    return tuple(cast(o) for o in out) if isinstance(out, tuple) else cast(out)

  return lowered


def in_precision(fn: NumericalFunction[..., Any], scalar: str, name: str | None = None) -> NumericalFunction[..., Any]:
  """`fn` computing in `scalar`: `fn` itself where `scalar` is float64 or `fn` takes no float64 input; else a function
  of the same inputs in float32 (named `name`, by default fn's name + "_f32") running fn's math on them, its outputs
  cast to float32."""
  dtype = SCALARS[scalar]
  if dtype == dtypes.float64 or all(a.dtype != dtypes.float64 for a in fn.inputs):
    return fn
  inputs = tuple(Arg(a.dims, dtype=dtype if a.dtype == dtypes.float64 else a.dtype, name=a.name) for a in fn.inputs)
  return NumericalFunction(name or f"{fn.name}_f32", in_scalar(fn.fn, scalar), inputs)
