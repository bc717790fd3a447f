"""`TemplatedFunction`: the base of every generated thing whose C++ is glue around runtime headers (solvers, QP
backends, controllers), and `module_library`, which compiles a module with JIT entry points into one library.

The glue is jinja2: `<template>.hpp.j2` and `<template>.cpp.j2` in the `templates/` folder beside the subclass's
module, filled with its `context` (as `c`), a frozen dataclass of sizes, names and index tables; the algorithms are
runtime headers (`include/anvil/*.hpp`, see `anvil.codegen.runtime`). `<template>_jit.cpp.j2` holds the entry points
Python calls.
"""

from __future__ import annotations

import abc
import hashlib
import sys
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from anvil.codegen.base import FunctionBase, render_template
from anvil.codegen.build import stage
from anvil.codegen.jit import (
  cached_library,
  codegen_fingerprint,
  compile_library,
  library_key,
  load_library,
  store_library,
)
from anvil.codegen.module import module_code
from anvil.codegen.native import NativeHandle
from anvil.codegen.runtime import inline_runtime_headers, runtime_include


class TemplatedFunction(FunctionBase):
  """A FunctionBase rendered from jinja2 glue templates around runtime headers, callable through a JIT library.

  Subclasses set `template` (the templates' stem), the runtime headers their declarations (`header_runtime`) and
  definitions (`source_runtime`) need, and `context`.
  """

  #: The stem of the templates: `<template>.hpp.j2`, `<template>.cpp.j2` and `<template>_jit.cpp.j2`.
  template: ClassVar[str]
  #: Runtime headers (names under include/anvil, without .hpp) the declarations need: inlined into the module header.
  header_runtime: ClassVar[tuple[str, ...]] = ()
  #: Runtime headers only the definitions need: inlined into the module source.
  source_runtime: ClassVar[tuple[str, ...]] = ()

  @property
  @abc.abstractmethod
  def context(self) -> Any:
    """What the templates see (as `c`)."""

  def render(self, suffix: str, **extra: Any) -> str:
    """The template `<template><suffix>` filled with the context (and `extra`)."""
    folder = Path(sys.modules[type(self).__module__].__file__ or "").parent / "templates"
    return render_template(f"{self.template}{suffix}", folder=folder, c=self.context, **extra)

  @property
  def header_code(self) -> str:
    """The declarations."""
    return self.render(".hpp.j2")

  @property
  def source_code(self) -> str:
    """The definitions."""
    return self.render(".cpp.j2")

  @property
  def header_includes(self) -> tuple[str, ...]:
    """The runtime headers of the declarations."""
    return tuple(runtime_include(h) for h in self.header_runtime)

  @property
  def source_includes(self) -> tuple[str, ...]:
    """The runtime headers of the definitions."""
    return tuple(runtime_include(h) for h in self.source_runtime)

  @property
  def problem_key(self) -> str | None:
    """A cache key of everything this function's code is generated from that is known before generating it (the
    traced graphs of the user's functions, the options, the sizes), or None (the default): its library is then found
    by the generated code's key alone."""
    return None

  @cached_property
  def library(self) -> str:
    """Path of the compiled JIT library: this function's module and its entry points. A library cached under
    `problem_key` is used without generating the module (a warm process derives nothing); one built is stored under
    it too."""
    # NOTE: one cache path for every generated solver: the quick key, where a subclass knows one, then the code's key
    quick = self.problem_key
    if quick is not None and (path := cached_library(quick, f"anvil_{self.name}_ws_new")) is not None:
      return str(path)
    built = module_library(self, lambda module: self.render("_jit.cpp.j2", module=module))
    if quick is not None:
      store_library(quick, Path(built).read_bytes())
    return built

  @property
  def library_paths(self) -> tuple[str, ...]:
    """Every cache path its library is found under (the generated code's key, and `problem_key`, which a warm
    process looks up first): what a worker elsewhere needs in its cache to skip the build."""
    quick = None if self.problem_key is None else cached_library(self.problem_key)
    return tuple(dict.fromkeys([self.library, *([] if quick is None else [str(quick)])]))

  @cached_property
  def handle(self) -> NativeHandle:
    """This function's workspace in its loaded library (created on first use)."""
    return NativeHandle(load_library(self.library), self.name)


def problem_key_of(kind: str, parts: Iterable[str]) -> str:
  """The library key of a `problem_key` naming `parts` (what a generated function of `kind` is generated from)."""
  return library_key(f"{kind}|" + hashlib.sha256("\0".join(parts).encode()).hexdigest())


#: A JIT library compiles the definitions of each generated function longer than this many characters (derivatives of
#: large models: the bulk of a solver's code) as a translation unit of its own, side by side with the rest.
SPLIT_OVER = 100_000


def module_library(fn: FunctionBase, wrapper: Callable[[str], str]) -> str:
  """Compile (or find in the cache) the JIT library of `fn`'s module: `fn` and its dependencies, the entry points
  `wrapper(module)` renders (they include `<module>.cpp`), and the C sources the functions bring (`extra_files`)."""
  module = f"anvil_jit_{fn.name}"
  code = module_code(module, [fn], split_over=SPLIT_OVER)
  extra = {path: text for f in code.functions for path, text in f.extra_files().items()}
  parts = {f"{module}_part{k}.cpp": text for k, (_, text) in enumerate(sorted(code.parts.items()), 1)}
  sources = {**extra, **parts, f"{module}.hpp": code.header, f"{module}.cpp": code.source}
  sources["jit.cpp"] = inline_runtime_headers(wrapper(module))
  digest = hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in sorted(sources.items())).encode()).hexdigest()
  key = library_key(f"module|{codegen_fingerprint()}|{digest}")
  if (path := cached_library(key, f"anvil_{fn.name}_ws_new")) is not None:
    return str(path)
  c_sources = sorted(path for path in extra if path.endswith(".c"))
  include_dirs = sorted({d for f in code.functions for d in f.include_dirs})
  with stage(fn.name, "compile"):
    return str(compile_library(key, sources, "jit.cpp", fn.name, c_sources, include_dirs, cxx_parts=sorted(parts)))
