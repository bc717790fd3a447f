"""Checks of what users pass, shared by every layer (generated functions, the SQP solver, the MPC controller and its
simulator), so each rejects the same things with the same kind of message, naming the function, then the argument
(`<function>: <argument>: <problem>`).

Numbers are bools, ints and floats (of any width): strings, bytes, complex numbers, objects, datetimes and arrays
numpy cannot build are a TypeError; a wrong shape, NaN where none is allowed and inconsistent bounds a ValueError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType

F64 = NDArray[np.float64]
#: numpy kinds that are not numbers: objects, unicode and byte strings, void, datetimes, timedeltas, complex numbers.
NOT_NUMBERS = "OUSVMmc"


def as_array(where: str, what: str, value: object, dtype: DTypeLike) -> NDArray[Any]:
  """`value` as an array whose dtype casts to `dtype` within its kind (bools and ints to floats, float64 to float32);
  a Tensor made from data gives its data; TypeError for anything else, naming `where` (the function) and `what` (the
  argument)."""
  try:
    arr = np.asarray(tensor_data(where, what, value))
  except (ValueError, TypeError) as e:
    raise TypeError(f"{where}: {what}: cannot convert {type(value).__name__} to an array: {e}") from None
  target = np.dtype(dtype)
  float_to_int = arr.dtype.kind == "f" and target.kind in "iu"
  if float_to_int and _whole_numbers_of(arr, target):
    return arr.astype(target)  # NOTE: floats holding integers cast to an integer input, as the reference casts
  if arr.dtype.kind in NOT_NUMBERS or not np.can_cast(arr.dtype, target, casting="same_kind"):
    whole = " holding whole numbers in its range" if float_to_int else ""
    raise TypeError(f"{where}: {what}: cannot cast dtype {arr.dtype} to {target} (expected numbers{whole})")
  return arr


def _whole_numbers_of(arr: NDArray[Any], target: np.dtype[Any]) -> bool:
  """Whether every entry of a float array is a whole number within the integer dtype `target`'s range."""
  info = np.iinfo(target)
  # NOTE: the bound past the largest value, 2^k, is a float exactly (int64's maximum itself rounds up to it)
  past_max = float(info.max) + 1.0
  with np.errstate(invalid="ignore"):
    return bool(np.all(np.isfinite(arr) & (arr == np.trunc(arr)) & (arr >= info.min) & (arr < past_max)))


def tensor_data(where: str, what: str, value: object) -> object:
  """The data of `value` when it is a Tensor made from data, else `value`; TypeError for a Tensor computed by
  operations (it has no values outside a traced function)."""
  if not isinstance(value, Tensor):
    return value
  from anvil.codegen.trace import tensor_values  # NOTE: late import: anvil.codegen imports this module

  if (data := tensor_values(value)) is None:
    raise TypeError(f"{where}: {what}: a Tensor computed by operations has no values outside a traced function; "
                    "pass a numpy array (or a Tensor made from data)")  # fmt: skip
  return data


def check_shape(where: str, what: str, arr: NDArray[Any] | Tensor, shape: tuple[int, ...]) -> None:
  """ValueError unless `arr` (an array, or a Tensor being traced) has `shape`."""
  if arr.shape != shape:
    raise ValueError(f"{where}: {what}: expected shape {shape}, got {arr.shape}")


def float_array(where: str, what: str, value: object, shape: tuple[int, ...] | None, *, finite: bool = False) -> F64:
  """A C-contiguous float64 copy of `value`, of `shape` (any when None; a scalar is taken for a vector of one), with
  no NaN (with `finite`, no inf either)."""
  if value is None:
    expected = "" if shape is None else f" of shape {shape}"
    raise ValueError(f"{where}: {what} is required: pass an array{expected}")
  arr = np.array(as_array(where, what, value, np.float64), dtype=np.float64, order="C")
  if shape is not None:
    if arr.shape == () and len(shape) == 1 and shape[0] == 1:
      arr = arr.reshape(shape)
    check_shape(where, what, arr, shape)
  bad = np.isnan(arr) if not finite else ~np.isfinite(arr)
  if bad.any():
    at = np.argwhere(bad)[0]
    raise ValueError(
      f"{where}: {what} contains NaN{' or inf' if finite else ''} ({what}{_index(at)} = {arr[tuple(at)]})"
    )
  return arr


def check_bounds(where: str, what: str, lower: F64, upper: F64, at: Callable[[tuple[int, ...]], str]) -> None:
  """ValueError, naming the bounds `what`, the entry (`at(index)`) and the values, when no value satisfies a pair of
  bounds: lower = +inf, upper = -inf or lower > upper."""
  checks = (
    (lower == np.inf, "lower = +inf (-inf means no lower bound)"),
    (upper == -np.inf, "upper = -inf (+inf means no upper bound)"),
    (lower > upper, "lower > upper"),
  )
  for bad, problem in checks:
    if bad.any():
      index = tuple(int(i) for i in np.argwhere(bad)[0])
      raise ValueError(f"{where}: {what}: {problem} at {at(index)} (lower {lower[index]}, upper {upper[index]})")


def require_cpu_float64(
  where: str, what: str, fn: Any, *, outputs: bool = False, scalar: DType = dtypes.float64
) -> None:
  """ValueError unless the generated function `fn` runs on the CPU, TypeError unless every input (with `outputs`,
  every output too: this traces `fn`) is float64: the solvers run on the CPU, in double (a float32 solver's own
  functions, `scalar`, may take float32)."""
  if fn.device != "CPU":
    raise ValueError(f"{where}: {what} {fn.name} runs on {fn.device}; the solvers run on the CPU: build their "
                     "functions with device='CPU' (the default)")  # fmt: skip
  for i, arg in enumerate(fn.inputs):
    if arg.dtype not in (dtypes.float64, scalar):
      raise TypeError(f"{where}: {what} {fn.name} takes input {i} ({arg.name}) as {arg.dtype.name}; the solvers "
                      "compute in float64: declare it Arg(shape) (float64 is the default)")  # fmt: skip
  for i, out in enumerate(fn.outputs if outputs else ()):
    if out.dtype not in (dtypes.float64, scalar):
      raise TypeError(f"{where}: {what} {fn.name} returns output {i} as {out.dtype.name}; the solvers compute in "
                      "float64: return float64 (e.g. .cast(dtypes.float64))")  # fmt: skip


def require_type(where: str, what: str, value: object, kinds: tuple[type, ...], description: str) -> None:
  """TypeError unless `value` is an instance of one of `kinds` (`description` says what is expected)."""
  if not isinstance(value, kinds):
    raise TypeError(f"{where}: {what} must be {description}, got {type(value).__name__}")


def _index(index: NDArray[np.intp]) -> str:
  return "" if index.size == 0 else f"[{', '.join(str(int(i)) for i in index)}]"
