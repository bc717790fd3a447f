"""`generate_module`: toposort functions and their dependencies into one C++ header and source."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from anvil.codegen.base import FunctionBase, check_identifier, render_template
from anvil.codegen.constant import CodegenIntConstant
from anvil.codegen.gpu import device_support
from anvil.codegen.jit import write_atomic
from anvil.codegen.parallel import build_in_parallel
from anvil.codegen.runtime import inline_runtime_headers, runtime_include
from anvil.version import __version__

logger = logging.getLogger("anvil")
BASE_INCLUDES = ("<array>", "<cmath>", "<cstddef>", "<cstdint>", "<cstring>")


def toposort(fns: Iterable[FunctionBase]) -> tuple[FunctionBase, ...]:
  """`fns` and everything they depend on, dependencies first; raises ValueError on cycles and name clashes."""
  order: dict[str, FunctionBase] = {}
  visiting: list[FunctionBase] = []

  def visit(fn: FunctionBase) -> None:
    if not isinstance(fn, FunctionBase):
      raise TypeError(f"generate_module: expected FunctionBase objects, got {type(fn).__name__}")
    check_identifier(fn.name, f"function name of {fn!r}")
    if (seen := order.get(fn.name)) is not None:
      if seen is not fn:
        raise ValueError(f"generate_module: two different functions are both named {fn.name!r}")
      return
    if fn in visiting:
      cycle = " -> ".join(f.name for f in [*visiting[visiting.index(fn) :], fn])
      raise ValueError(f"generate_module: dependency cycle {cycle}")
    if any(f.name == fn.name for f in visiting):
      raise ValueError(f"generate_module: two different functions are both named {fn.name!r}")
    visiting.append(fn)
    for dep in fn.dependencies():
      visit(dep)
    visiting.pop()
    order[fn.name] = fn

  for fn in fns:
    visit(fn)
  return tuple(order.values())


def sort_constants(constants: Iterable[CodegenIntConstant]) -> tuple[CodegenIntConstant, ...]:
  """Every named constant once, each after the constants its expression uses."""
  out: dict[str, CodegenIntConstant] = {}
  for c in constants:
    if not isinstance(c, CodegenIntConstant):
      raise TypeError(f"generate_module: constants must be CodegenIntConstant, got {type(c).__name__}")
    if not c.declared:
      raise ValueError(f"generate_module: constant expression {c.name} has no name; use CodegenIntConstant.from_expr")
    for d in c.declaration_order():
      if (seen := out.get(d.name)) is not None and (seen.value, seen.expr, seen.type) != (d.value, d.expr, d.type):
        raise ValueError(f"generate_module: constant {d.name} is declared twice with different values")
      out.setdefault(d.name, d)
  return tuple(out.values())


def module_device(fns: Sequence[FunctionBase]) -> str:
  """The one device all of `fns` run on; raises ValueError naming them when they mix devices."""
  devices = {f.device for f in fns}
  if len(devices) > 1:
    listed = ", ".join(f"{f.name} ({f.device})" for f in fns)
    raise ValueError(f"generate_module: a module holds functions of one device, got {listed}; write one module each")
  return devices.pop() if devices else "CPU"


@dataclass(frozen=True)
class ModuleCode:
  """The text of a generated module: a header and a source; a GPU module (`device` CUDA or METAL) is only a header
  and its source is empty. `parts` maps the name of a function whose definitions were split off the source to a
  translation unit of their own (it includes the header)."""

  name: str
  header: str
  source: str
  functions: tuple[FunctionBase, ...]
  device: str = "CPU"
  parts: Mapping[str, str] = field(default_factory=dict)


def module_code(
  module_name: str, fns: Sequence[FunctionBase], constants: Sequence[CodegenIntConstant] = (), split_over: int = 0
) -> ModuleCode:
  """Render the header and source of a module holding `fns`, their dependencies and `constants`.

  With `split_over` > 0, the definitions of every function with a self-contained source longer than `split_over`
  characters go into a translation unit of their own (`ModuleCode.parts`), so a build compiles them side
  by side; the header is unchanged.
  """
  check_identifier(module_name, "generate_module: module_name")
  if not fns:
    raise ValueError(f"generate_module({module_name!r}): the function list is empty; give at least one function")
  ordered = toposort(fns)
  device = module_device(ordered)
  build_in_parallel(ordered)
  consts = sort_constants([*constants, *(c for f in ordered for c in f.codegen_constants)])
  if clashes := sorted({f.name for f in ordered}.intersection(c.name for c in consts)):
    raise ValueError(f"generate_module: {', '.join(clashes)} name both a function and a constant (one C++ scope)")
  header_includes = _dedup(inc for f in ordered for inc in _include_targets(f.header_includes))
  # NOTE: a GPU module is header-only: its functions' header code holds their (inline) definitions.
  gpu = device != "CPU"
  support = [runtime_include("support"), *([device_support(device)] if gpu else [])]
  inlined: set[str] = set()
  header = render_template(
    "module.hpp.j2",
    version=__version__,
    name=module_name,
    includes=_ordered(
      [
        *support,
        *header_includes,
        *(_dedup(i for f in ordered for i in _include_targets(f.source_includes)) if gpu else ()),
      ]
    ),
    constants=[c.declaration() for c in consts],
    functions=[f.header_code for f in ordered],
  )
  header = inline_runtime_headers(header, inlined)
  if gpu:
    return ModuleCode(module_name, header, "", ordered, device)
  split = [f for f in ordered if split_over > 0 and f.self_contained_source and len(f.source_code) > split_over]
  parts = {f.name: _source(module_name, [f], set(inlined)) for f in split}
  source = _source(module_name, [f for f in ordered if f not in split], inlined)
  return ModuleCode(module_name, header, source, ordered, parts=parts)


def _source(module_name: str, fns: Sequence[FunctionBase], inlined: set[str]) -> str:
  """A translation unit of the module: the header, then the definitions of `fns` with the runtime headers they need
  (those not in `inlined`, the ones the header already holds)."""
  text = render_template(
    "module.cpp.j2",
    version=__version__,
    name=module_name,
    includes=_ordered(_dedup(inc for f in fns for inc in _include_targets(f.source_includes))),
    functions=[f.source_code for f in fns],
  )
  return inline_runtime_headers(text, inlined)


def _include_targets(includes: Iterable[str]) -> list[str]:
  """A function's include targets, given as `<x>` / `"x"` or as whole `#include <x>` lines (the API reference's
  spelling); a set is sorted, so the module's text does not depend on hashing."""
  items = sorted(includes) if isinstance(includes, (set, frozenset)) else list(includes)
  return [inc.strip().removeprefix("#include").strip() for inc in items]


def _dedup(items: Iterable[str]) -> list[str]:
  return [i for i in dict.fromkeys(items) if i not in BASE_INCLUDES]


def _ordered(includes: Iterable[str]) -> list[str]:
  """System and third-party includes first, then anvil's runtime headers (inlined in that order)."""
  includes = list(dict.fromkeys(includes))
  return sorted(includes, key=lambda inc: inc.startswith('"anvil/'))


def generate_module(
  module_name: str,
  fns: Sequence[FunctionBase],
  constants: Sequence[CodegenIntConstant] | None = None,
  verbosity: int = 0,
  out_dir: str | Path = ".",
) -> tuple[Path, ...]:
  """Write `<module_name>.hpp` and `<module_name>.cpp` holding `fns`, everything they depend on, and `constants`.

  Functions that need more files (an SQP solver's embedded OSQP C sources) write them beside the module. A module of
  CUDA or Metal functions is header-only: only `<module_name>.hpp` is written.

  Args:
    module_name: a C++ identifier, used for the file names.
    fns: the functions to emit; their dependencies are pulled in and everything is toposorted.
    constants: extra `CodegenIntConstant`s to declare (those the functions use are declared anyway).
    verbosity: 0 is silent; 1 prints the files written; 2 also lists the functions.
    out_dir: the folder to write into (created if missing).

  Returns:
    The paths of the header and the source (only the header for a GPU module).

  Raises:
    ValueError: no functions, a name that is not a C++ identifier or is reserved (see `anvil.codegen.names`), two
      different functions with one name, a function and a constant with one name, a dependency cycle, a constant
      declared twice with different values, or functions of different devices.

  Example:
    >>> generate_module("quad", [rk4_step], out_dir="build")
  """
  if isinstance(fns, FunctionBase):
    fns = [fns]
  code = module_code(module_name, fns, constants or ())
  out = Path(out_dir)
  files = {out / f"{module_name}.hpp": code.header}
  if code.device == "CPU":
    files[out / f"{module_name}.cpp"] = code.source
  for path, text in files.items():
    write_atomic(path, text, recorded=False)
  for f in code.functions:
    for relative, text in f.extra_files().items():
      write_atomic(out / relative, text, recorded=False)
  written = " and ".join(map(str, files))
  logger.info("generate_module: wrote %s (%d functions)", written, len(code.functions))
  if verbosity >= 1:
    print(f"anvil: wrote {written}")
  if verbosity >= 2:
    for f in code.functions:
      print(f"  {type(f).__name__} {f.name}")
  return tuple(files)
