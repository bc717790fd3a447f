"""Checked by tests/unit/test_typing.py with mypy: the revealed types and the flagged wrong-arity call."""

import numpy as np

import anvil as av
from anvil import Tensor


def one_out(x: Tensor, y: Tensor) -> Tensor:
  return x + y


def two_out(x: Tensor) -> tuple[Tensor, Tensor]:
  return x * 2, x.sin()


f = av.NumericalFunction("f", one_out, (av.Arg(3), av.Arg(3)))
g = av.NumericalFunction("g", two_out, (av.Arg(3),))


@av.numerical_function("h", 3, 3, 3)
def h(x: Tensor, y: Tensor, z: Tensor) -> Tensor:
  return x * y + z


x = np.zeros(3)
reveal_type(f(x, x))  # noqa: F821
reveal_type(g(x))  # noqa: F821
reveal_type(h(x, x, x))  # noqa: F821
f(x)  # wrong arity: flagged
