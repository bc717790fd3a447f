"""User names beside the C and C++ libraries: every identifier that the C++17 and C standard headers, and the other
headers generated code includes (POSIX, OSQP, anvil's runtime headers), declare or define is either rejected by
validation with a ValueError or compiles wherever generated code puts a user name."""

from __future__ import annotations

import keyword
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import anvil as av
from anvil.codegen.base import check_identifier
from anvil.codegen.runtime import INCLUDE_DIRS
from tests.conftest import write_osqp_sources

CPP17_HEADERS = (
  "algorithm any array atomic bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono cinttypes ciso646 "
  "climits clocale cmath codecvt complex condition_variable csetjmp csignal cstdalign cstdarg cstdbool cstddef "
  "cstdint cstdio cstdlib cstring ctgmath ctime cuchar cwchar cwctype deque exception execution filesystem "
  "forward_list fstream functional future initializer_list iomanip ios iosfwd iostream istream iterator limits list "
  "locale map memory memory_resource mutex new numeric optional ostream queue random ratio regex scoped_allocator "
  "set shared_mutex sstream stack stdexcept streambuf string string_view strstream system_error thread tuple "
  "type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant vector"
).split()
C_HEADERS = (
  "assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal stdalign stdarg stdbool "
  "stddef stdint stdio stdlib string tgmath time uchar wchar wctype"
).split()
#: What anvil/cuda.hpp and anvil/metal.hpp include beside the standard library, and the solvers' C headers.
OTHER_HEADERS = ("unistd.h", "dlfcn.h", "osqp.h", "qdldl.h")
#: Names the issue reported: all reach generated C++ (as function, constant or module names) only through validation.
REPORTED = (
  "erf gamma index select free exit y1 j0 NULL int8_t std assert errno stdin EOF size_t sin printf memcpy "
  "offsetof va_arg setjmp INFINITY NAN M_PI CHAR_BIT INT_MAX uint64_t stdout FILE main"
).split()
#: Input names only appear in comments of the generated code: any Python identifier will do, the reported ones too.
INPUT_NAMES = tuple(n for n in REPORTED if not keyword.iskeyword(n))
IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


@dataclass(frozen=True)
class Library:
  """The headers of the test (as #include lines and the -I flags they need), the identifiers their preprocessed text
  holds, and the macros they define."""

  includes: str
  flags: tuple[str, ...]
  identifiers: frozenset[str]
  macros: frozenset[str]

  def compile_errors(self, tmp: Path, code: str) -> str:
    """The errors g++ reports on `code` after the includes (an empty string when it compiles)."""
    (tmp / "names.cpp").write_text(f"{self.includes}\n{code}")
    proc = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-w", *self.flags, str(tmp / "names.cpp")],
                          capture_output=True, text=True)  # fmt: skip
    return proc.stderr if proc.returncode else ""


def accepted(name: str) -> bool:
  """Whether validation accepts `name` for a function, a constant and a module (and agrees on all three)."""
  try:
    check_identifier(name, "name")
  except ValueError:
    rejected = True
  else:
    rejected = False
  try:
    av.CodegenIntConstant(name, 1)
  except ValueError:
    assert rejected, f"a constant may not be named {name!r} but a function may"
    return False
  assert not rejected, f"a function may not be named {name!r} but a constant may"
  return True


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
  """Every header, preprocessed with g++ for its identifiers and its macros."""
  tmp = write_osqp_sources(tmp_path_factory.mktemp("library"), "names_")
  folders = [*INCLUDE_DIRS, tmp / "osqp", tmp / "osqp/inc/public", tmp / "osqp/inc/private"]
  runtime = sorted(f"anvil/{p.name}" for root in INCLUDE_DIRS for p in (root / "anvil").glob("*.hpp"))
  headers = [*CPP17_HEADERS, *(f"{h}.h" for h in C_HEADERS), *OTHER_HEADERS, *runtime]
  includes = "".join(f"#include <{h}>\n" for h in headers)
  flags = tuple(f"-I{f}" for f in folders)
  (tmp / "all.cpp").write_text(includes)
  preprocess = ["g++", "-std=c++17", "-E", "-w", *flags, str(tmp / "all.cpp")]
  text = subprocess.run(preprocess, capture_output=True, text=True, check=True).stdout
  code = re.sub(r'^#.*$|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', " ", text, flags=re.MULTILINE)
  defines = subprocess.run([*preprocess, "-dM"], capture_output=True, text=True, check=True).stdout
  macros = frozenset(re.findall(r"^#define (\w+)", defines, flags=re.MULTILINE))
  return Library(includes, flags, frozenset(IDENTIFIER.findall(code)) | macros, macros)


def test_library_names_are_rejected_or_accepted(library: Library) -> None:
  assert len(library.identifiers) > 5000 and len(library.macros) > 1000
  names = sorted(library.identifiers)
  verdicts = {name: accepted(name) for name in names}
  assert not [m for m in library.macros if verdicts[m]]
  assert not [name for name in REPORTED if accepted(name)]
  assert sum(verdicts.values()) > 2500  # std:: members, struct fields and parameters stay usable


def test_accepted_names_compile_as_global_names(library: Library, tmp_path: Path) -> None:
  # NOTE: a namespace at global scope clashes with any global entity of its name: it stands for a function's
  # namespace, a constant and the JIT's entry points at once.
  names = sorted(n for n in library.identifiers if accepted(n))
  lines = [f"namespace {n} {{ inline constexpr int value = 0; }}" for n in names]
  errors = library.compile_errors(tmp_path, "\n".join(lines))
  first = library.includes.count("\n") + 2
  clashes = sorted({names[int(m) - first] for m in re.findall(r"names\.cpp:(\d+):\d+: error", errors)})
  assert not errors, f"accepted names that do not compile (reserve them in anvil/codegen/names.py): {clashes}"


@pytest.fixture(scope="module")
def spread(library: Library) -> list[str]:
  """About 60 accepted lowercase names spread over the whole list."""
  names = sorted(n for n in library.identifiers if n.islower() and accepted(n))
  return names[:: len(names) // 60]


def test_module_of_library_names_compiles_and_runs(spread: list[str], tmp_path: Path) -> None:
  module, names, constants = spread[0], spread[1:21], spread[21:41]
  fns = []
  for i, (name, constant) in enumerate(zip(names, constants, strict=True)):
    size = av.CodegenIntConstant(constant, 2 + i % 3)
    inputs = [av.Arg(size, name=INPUT_NAMES[i]), av.Arg(3, name=INPUT_NAMES[-1 - i])]
    fns.append(av.NumericalFunction(name, lambda x, y, k=i: x * (k + 1) + y.sum(), inputs))
  av.generate_module(module, fns, out_dir=tmp_path)
  calls = "\n".join(_call(f.name, f.inputs[0].shape[0]) for f in fns)
  (tmp_path / "main.cpp").write_text(f'#include <cstdio>\n#include "{module}.hpp"\nint main() {{\n{calls}\n}}\n')
  exe = tmp_path / "main"
  build = ["g++", "-std=c++17", "-O0", "-Wall", "-Wextra", "-Werror", "main.cpp", f"{module}.cpp", "-o", str(exe)]
  proc = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr[:3000]
  out = [float(v) for v in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
  expected = [(k + 1) * v + 3.0 for k, f in enumerate(fns) for v in range(f.inputs[0].shape[0])]
  assert out == expected


def _call(name: str, size: int) -> str:
  """C++ evaluating the function `name` on x = 0, 1, ... and y = 1, 1, 1 and printing its output."""
  return (
    f"  {{ {name}::IN0_t x; {name}::IN1_t y; {name}::OUT0_t out; auto ws = {name}::init_ws();\n"
    f"    for (int i = 0; i < {size}; ++i) x[i] = i;\n    for (int i = 0; i < 3; ++i) y[i] = 1;\n"
    f'    {name}::call(x, y, out, ws);\n    for (double v : out) std::printf("%.17g\\n", v); }}'
  )


def test_jit_function_of_library_names(spread: list[str]) -> None:
  size = av.CodegenIntConstant(spread[-2], 4)
  f = av.NumericalFunction(spread[-1], lambda x, y: x - y, [av.Arg(size, name="errno"), av.Arg(size, name="NULL")])
  np.testing.assert_array_equal(f(np.arange(4.0), np.ones(4)), np.arange(4.0) - 1)


@pytest.mark.parametrize("name", ["erf", "index", "select", "y1", "NULL", "errno", "stdin", "EOF", "int8_t", "std"])
def test_reported_names_are_rejected_up_front(name: str, tmp_path: Path) -> None:
  with pytest.raises(ValueError, match="reserved"):
    av.NumericalFunction(name, lambda x: x, [av.Arg(1)])
  with pytest.raises(ValueError, match="reserved"):
    av.CodegenIntConstant(name, 1)
  with pytest.raises(ValueError, match="reserved"):
    av.generate_module(name, [], out_dir=tmp_path)


def test_function_and_constant_of_one_name_are_rejected(tmp_path: Path) -> None:
  f = av.NumericalFunction("twin", lambda x: x, [av.Arg(av.CodegenIntConstant("twin", 2))])
  with pytest.raises(ValueError, match="twin"):
    av.generate_module("clash", [f], out_dir=tmp_path)


def test_names_too_long_for_the_file_system_are_refused_at_construction() -> None:
  """A 250-character name is refused when the function is made (its files' names would not fit the file system);
  a solver's name keeps room for the names it derives: the longest one allowed builds and solves."""
  from anvil.codegen.names import DERIVED_ROOM, MAX_NAME
  from anvil.sqp import SQPFunction

  long = "f" * 250
  with pytest.raises(ValueError, match=r"NumericalFunction name: 'f+'\.\.\. is 250 characters long; at most 160"):
    av.NumericalFunction(long, lambda x: x * 2.0, av.Arg(2))
  cost = av.NumericalFunction("long_name_cost", lambda x, p: ((x - p) ** 2).sum(), (av.Arg(2), av.Arg(2)))
  with pytest.raises(ValueError, match=f"SQPFunction name: .* at most {MAX_NAME - DERIVED_ROOM}"):
    SQPFunction("s" * (MAX_NAME - DERIVED_ROOM + 1), cost)
  solver = SQPFunction("s" * (MAX_NAME - DERIVED_ROOM), cost)
  res = solver(np.zeros(2), np.array([0.5, -1.0]), np.full(2, -np.inf), np.full(2, np.inf), [], [])
  np.testing.assert_allclose(res.x, [0.5, -1.0], atol=1e-9)
