"""`numerical_function`: the decorator form of `NumericalFunction`, building float64 `Arg`s from shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, overload

from numpy.typing import ArrayLike
from tinygrad import Tensor

from anvil.codegen.arg import Arg, ShapeLike
from anvil.codegen.function import Array, NumericalFunction


class NumericalFunctionDecorator(Protocol):
  """Turns a Tensor function into a `NumericalFunction`; typed by the function's arity and output count."""

  @overload
  def __call__(self, fn: Callable[[Tensor], Tensor], /) -> NumericalFunction[[ArrayLike], Array]: ...
  @overload
  def __call__(
    self, fn: Callable[[Tensor], tuple[Tensor, Tensor]], /
  ) -> NumericalFunction[[ArrayLike], tuple[Array, Array]]: ...
  @overload
  def __call__(self, fn: Callable[[Tensor, Tensor], Tensor], /) -> NumericalFunction[[ArrayLike, ArrayLike], Array]: ...
  @overload
  def __call__(
    self, fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], /
  ) -> NumericalFunction[[ArrayLike, ArrayLike], tuple[Array, Array]]: ...
  @overload
  def __call__(
    self, fn: Callable[[Tensor, Tensor, Tensor], Tensor], /
  ) -> NumericalFunction[[ArrayLike, ArrayLike, ArrayLike], Array]: ...
  @overload
  def __call__(
    self, fn: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]], /
  ) -> NumericalFunction[[ArrayLike, ArrayLike, ArrayLike], tuple[Array, Array]]: ...
  @overload
  def __call__(
    self, fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor], /
  ) -> NumericalFunction[[ArrayLike, ArrayLike, ArrayLike, ArrayLike], Array]: ...
  @overload
  def __call__(
    self, fn: Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]], /
  ) -> NumericalFunction[[ArrayLike, ArrayLike, ArrayLike, ArrayLike], tuple[Array, Array]]: ...
  @overload
  def __call__(self, fn: Callable[..., Any], /) -> NumericalFunction[..., Any]: ...


def shapes_to_args(shapes: tuple[Any, ...]) -> tuple[Arg, ...]:
  """float64 `Arg`s from shapes: `(3, (2, 2))`, or the single tuple-of-shapes form `(((3,), (2,)),)` / `(((2, 2), 3),)`
  (the API reference's `inputs`)."""
  if len(shapes) == 1 and isinstance(shapes[0], tuple) and any(isinstance(s, (tuple, Arg)) for s in shapes[0]):
    shapes = shapes[0]  # NOTE: a shape holds only ints: a tuple holding tuples is the reference's tuple of inputs
  return tuple(s if isinstance(s, Arg) else Arg(s) for s in shapes)


def numerical_function(
  name: str,
  *shapes: ShapeLike | Arg | tuple[ShapeLike, ...],
  inputs: tuple[ShapeLike | Arg, ...] | list[ShapeLike | Arg] | None = None,
  device: str = "CPU",
) -> NumericalFunctionDecorator:
  """Decorator building a `NumericalFunction` with float64 inputs of the given shapes (or `Arg`s), given one per
  argument or as `inputs=` (the API reference's keyword: a tuple of shapes, one per input).

  Example:
    >>> @numerical_function("add", 3, 3)
    ... def add(x, y): return x + y
    >>> @numerical_function("mv", ((2, 2), (2,)))
    ... def mv(A, x): return A @ x
    >>> @numerical_function("mv2", inputs=((2, 2), (2,)))
    ... def mv2(A, x): return A @ x
  """
  if inputs is not None:
    if shapes:
      raise TypeError(f"{name}: give the input shapes by position or as inputs=, not both")
    if not isinstance(inputs, (tuple, list)):
      raise TypeError(f"{name}: inputs must be a tuple of shapes, one per input, got {inputs!r}")
    shapes = tuple(inputs)
  args = shapes_to_args(shapes)

  def decorate(fn: Callable[..., Any]) -> NumericalFunction[..., Any]:
    return NumericalFunction(name, fn, args, device=device)

  return decorate
