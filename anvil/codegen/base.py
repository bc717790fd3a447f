"""`FunctionBase`: the one protocol every generated thing follows, and the jinja2 templates that fill it."""

from __future__ import annotations

import abc
import functools
from pathlib import Path
from typing import Any, Self

import jinja2

from anvil.codegen.constant import CodegenIntConstant
from anvil.codegen.names import check_identifier as check_identifier

TEMPLATES = Path(__file__).parent / "templates"


@functools.cache
def _environment(folder: Path) -> jinja2.Environment:
  env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(folder),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
  )
  env.filters["float_hex"] = _float_literal
  return env


def _float_literal(value: float) -> str:
  """An exact C++ literal for a setting (hexadecimal; ±HUGE_VAL for ±inf)."""
  value = float(value)
  return value.hex() if value not in (float("inf"), float("-inf")) else ("HUGE_VAL" if value > 0 else "-HUGE_VAL")


def render_template(template: str, /, folder: Path = TEMPLATES, **context: Any) -> str:
  """Fill the jinja2 `template` from `folder` (default: this package's `templates/`)."""
  return _environment(folder).get_template(template).render(**context)


def _construct(cls: type[FunctionBase], args: tuple[Any, ...], kwargs: dict[str, Any]) -> FunctionBase:
  """cls(*args, **kwargs): how a pickled FunctionBase is rebuilt."""
  return cls(*args, **kwargs)


class FunctionBase(abc.ABC):
  """Anything that becomes C++ in a generated module: a numerical function, a derivative, a solver, a controller.

  `generate_module` collects `dependencies()` recursively, toposorts them, declares every `codegen_constants` once,
  and concatenates `header_code` and `source_code` in dependency order.
  """

  name: str
  _constructed_with: tuple[tuple[Any, ...], dict[str, Any]]
  #: Where the generated code runs: "CPU", "CUDA" or "METAL" (one device per module).
  device: str = "CPU"
  #: Whether `source_code` defines nothing the definitions of other functions use, so a build may compile it as a
  #: translation unit of its own (beside the rest, which reaches it through the header's declarations).
  self_contained_source: bool = False

  def __new__(cls, *args: Any, **kwargs: Any) -> Self:
    """A new instance that remembers the arguments of its constructor: it pickles as that call (`__reduce__`)."""
    self = super().__new__(cls)
    self._constructed_with = (args, kwargs)
    return self

  def __reduce__(self) -> tuple[Any, ...]:
    """Pickles as the constructor call that made it: unpickled (in a worker process, on another machine), it traces
    again and finds its compiled code in the disk cache (or builds it); state set since (a controller's warm start,
    its run-time weights) is not carried. The arguments must pickle too: with cloudpickle (Ray, Dask), lambdas do."""
    args, kwargs = self._constructed_with
    return (_construct, (type(self), args, kwargs))

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The generated functions this one calls (emitted before it)."""
    return ()

  @property
  def codegen_constants(self) -> tuple[CodegenIntConstant, ...]:
    """Named constants this function's code refers to."""
    return ()

  @property
  def header_includes(self) -> tuple[str, ...]:
    """`#include` targets its header code needs, spelled with quotes or angle brackets."""
    return ()

  @property
  def source_includes(self) -> tuple[str, ...]:
    """`#include` targets its source code needs."""
    return ()

  @property
  def build_size(self) -> int:
    """How much scheduling and rendering producing the code still takes (graph nodes; 0: none, the code is at hand):
    a module builds the functions with the most in parallel first."""
    return 0

  def extra_files(self) -> dict[str, str]:
    """Further files (relative path -> text) the generated code needs beside the module, e.g. C sources."""
    return {}

  @property
  def include_dirs(self) -> tuple[str, ...]:
    """Folders among `extra_files()` (relative paths) that compiling the module needs on the include path."""
    return ()

  @property
  @abc.abstractmethod
  def header_code(self) -> str:
    """Declarations for the module header."""

  @property
  @abc.abstractmethod
  def source_code(self) -> str:
    """Definitions for the module source."""

  @property
  def exported_header_code(self) -> str:
    """Declarations for the header of a module a user builds (`generate_module`): `header_code` and what only such a
    module carries, e.g. a controller's Python-side defaults. The JIT's library, which Python calls with those
    defaults, leaves it out: changing them rebuilds nothing."""
    return self.header_code

  def __repr__(self) -> str:
    return f"{type(self).__name__}({self.name!r})"
