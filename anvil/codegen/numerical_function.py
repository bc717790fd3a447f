"""The module path the API reference gives the function classes and decorators (`anvil.codegen.numerical_function`):
a re-export of what lives in `arg`, `function`, `sparse` and `decorator`.

Importing it makes the package attribute `anvil.codegen.numerical_function` this module rather than the decorator of
that name, so the module is callable and forwards to the decorator: both spellings keep working."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from anvil.codegen.arg import Arg as Arg
from anvil.codegen.decorator import numerical_function as _decorator
from anvil.codegen.function import NumericalFunction as NumericalFunction
from anvil.codegen.sparse import SparseNumericalFunction as SparseNumericalFunction
from anvil.codegen.sparse import sparse_numerical_function as sparse_numerical_function

numerical_function = _decorator
__all__ = ["Arg", "NumericalFunction", "SparseNumericalFunction", "numerical_function", "sparse_numerical_function"]


class _CallableModule(ModuleType):
  """This module, callable as the `numerical_function` decorator."""

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return _decorator(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
