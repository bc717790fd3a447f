"""The module path the API reference gives constants, the function base class and module generation
(`anvil.codegen.common`): a re-export of what lives in `constant`, `base` and `module`."""

from anvil.codegen.base import FunctionBase as FunctionBase
from anvil.codegen.constant import CodegenIntConstant as CodegenIntConstant
from anvil.codegen.module import generate_module as generate_module

__all__ = ["CodegenIntConstant", "FunctionBase", "generate_module"]
