"""The public API: the exported names, Arg and CodegenIntConstant validation, decorator shape forms, layering."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import anvil as av
import anvil.codegen
from anvil.codegen.base import check_identifier
from anvil.codegen.decorator import shapes_to_args
from anvil.codegen.module import sort_constants

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = {
  "Arg", "CodegenIntConstant", "CompileError", "CompilerNotFoundError", "CudaArray", "DeviceInfo",
  "DeviceUnavailableError", "FunctionBase", "GraphTooDeepError", "Interpolant", "NumericalFunction",
  "SparseNumericalFunction", "Tensor", "devices", "dtypes", "generate_module", "interpolant", "numerical_function",
  "sparse_numerical_function",
  "__version__",
}  # fmt: skip
#: The public names anvil.tables (lookup tables) gives the top level.
TABLES = {"Interpolant", "interpolant"}


def test_public_names_are_frozen() -> None:
  names = {n for n in dir(av) if not n.startswith("_") or n == "__version__"}
  assert {n for n in names if not inspect.ismodule(getattr(av, n))} == PUBLIC
  assert av.Tensor is __import__("tinygrad").Tensor
  for name in PUBLIC - {"Tensor", "dtypes", "__version__", "numerical_function"} - TABLES:
    assert getattr(anvil.codegen, name) is getattr(av, name)
  for name in TABLES:
    assert getattr(importlib.import_module("anvil.tables"), name) is getattr(av, name)
  # NOTE: importing the reference's module path anvil.codegen.numerical_function makes the package attribute that
  # module, which is callable as the decorator
  reference_module = sys.modules.get("anvil.codegen.numerical_function")
  assert anvil.codegen.numerical_function in (av.numerical_function, reference_module)


def test_every_public_object_has_a_docstring() -> None:
  for name in PUBLIC - {"Tensor", "dtypes", "__version__"}:
    assert getattr(av, name).__doc__, name


SUBPACKAGES = {
  "anvil.ad": {"SparsityError", "VmapError", "constant_jacobian", "gauss_newton", "gradient", "hessian", "jacobian",
               "jvp", "sphessian", "spjacobian", "vjp", "vmap"},
  "anvil.qp": {"OCPQPSolution", "OSQPOptions", "QPBackend", "QPOptions", "QPProblem", "QPStatus", "RiccatiOptions",
               "RiccatiQP", "SparseIPMOptions", "StageLayout", "StageReport", "StageSearch", "detect_stages",
               "search_stages"},
  "anvil.sqp": {"SQPFunction", "SQPOptions", "SQPResult", "SQPStatus", "Sensitivity"},
  "anvil.mpc": {"ClosedLoop", "LeastSquares", "MHEEstimate", "MHEFunction", "MPCFunction", "MPCOptions", "MPCSolution",
                "MuJoCoPlant", "Scaling", "AutoScaling", "Scenarios", "Soft", "euler", "campaign", "campaign_report",
                "plot_closed_loop", "irk", "rk4", "scenario_grid", "scenario_lhs", "shooting_layout", "simulate"},
  "anvil.robots": {"Frame", "FrameType", "Inertia", "Joint", "JointType", "Placement", "Robot", "URDFError"},
  "anvil.tables": TABLES,
}  # fmt: skip


@pytest.mark.parametrize(("package", "names"), SUBPACKAGES.items())
def test_subpackage_names_are_frozen_and_documented(package: str, names: set[str]) -> None:
  module = importlib.import_module(package)
  assert {n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n))} == names
  for name in names - {"QPOptions"}:  # a type alias
    assert getattr(module, name).__doc__, f"{package}.{name}"


# the layers: mpc -> sqp -> qp -> codegen, with ad beside qp; robots and tables beside ad (the codegen core only, so
# a model from a URDF or a table can be traced into any function); the reference problems use everything, nothing
# uses them
MODELS = ("anvil.robots", "anvil.tables")
LAYERS = [
  ("codegen", ("anvil.ad", "anvil.qp", "anvil.sqp", "anvil.mpc", *MODELS, "anvil.problems")),
  ("ad", ("anvil.qp", "anvil.sqp", "anvil.mpc", *MODELS, "anvil.problems")),
  ("qp", ("anvil.ad", "anvil.sqp", "anvil.mpc", *MODELS, "anvil.problems")),
  ("sqp", ("anvil.mpc", *MODELS, "anvil.problems")),
  ("mpc", (*MODELS, "anvil.problems")),
  ("robots", ("anvil.ad", "anvil.qp", "anvil.sqp", "anvil.mpc", "anvil.tables", "anvil.problems")),
  ("tables", ("anvil.ad", "anvil.qp", "anvil.sqp", "anvil.mpc", "anvil.robots", "anvil.problems")),
]


def _imported_modules(path: Path) -> list[str]:
  """Every module a file imports, wherever in it."""
  modules = []
  for node in ast.walk(ast.parse(path.read_text())):
    modules += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
    modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
  return modules


@pytest.mark.parametrize(("layer", "higher"), LAYERS)
def test_imports_flow_one_way(layer: str, higher: tuple[str, ...]) -> None:
  for path in (ROOT / "anvil" / layer).rglob("*.py"):
    modules = _imported_modules(path)
    assert not any(m.startswith(higher) for m in modules), (path, modules)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
  """The anvil modules a module imports at run time, wherever in it (a function's lazy import too; not under
  `if TYPE_CHECKING:`); `from package import submodule` imports the submodule."""
  found: set[str] = set()

  def visit(node: ast.AST) -> None:
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
      return
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      submodules = {f"{node.module}.{a.name}" for a in node.names} & modules
      found.update(submodules or {node.module})
    for child in ast.iter_child_nodes(node):
      visit(child)

  visit(ast.parse(path.read_text()))
  return found & modules


def test_no_import_cycles() -> None:
  """No module reaches itself through run-time imports (only `TYPE_CHECKING` imports may go back): the QP options
  are plain data, the registry above them builds the backends."""
  paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
           for p in (ROOT / "anvil").rglob("*.py")}  # fmt: skip
  graph = {m: _runtime_imports(p, set(paths)) - {m} for m, p in paths.items()}
  for start in graph:
    seen, frontier = set(), list(graph[start])
    while frontier:
      m = frontier.pop()
      assert m != start, f"{start} imports itself through {sorted(seen)}"
      if m not in seen:
        seen.add(m)
        frontier.extend(graph[m])


@pytest.mark.parametrize(("layer", "higher"), LAYERS)
def test_runtime_headers_include_one_way(layer: str, higher: tuple[str, ...]) -> None:
  """A package's C++ headers include only headers of its own layer or lower ones, as its Python imports."""
  owners = {p.name: p.parent.parent.parent.name for p in (ROOT / "anvil").glob("*/include/anvil/*.hpp")}
  forbidden = {name for name, owner in owners.items() if f"anvil.{owner}" in higher}
  for path in (ROOT / "anvil" / layer).glob("include/anvil/*.hpp"):
    included = set(re.findall(r'#include "anvil/([^"]+)"', path.read_text()))
    assert not included & forbidden, (path.name, included & forbidden)


def test_examples_are_plain_scripts() -> None:
  """examples/ is a folder of scripts, not a package: nothing imports it, and its scripts import anvil, third-party
  packages and each other (beside them), never tests or benchmarks, and never edit sys.path."""
  assert not list((ROOT / "examples").rglob("__init__.py"))
  for folder in ("anvil", "tests", "benchmarks"):
    for path in (ROOT / folder).rglob("*.py"):
      assert not any(m.split(".")[0] == "examples" for m in _imported_modules(path)), path
  for path in (ROOT / "examples").rglob("*.py"):
    assert not any(m.split(".")[0] in ("tests", "benchmarks") for m in _imported_modules(path)), path
    assert "sys.path" not in path.read_text(), path


#: The size budget of a jinja2 template: glue that fills sizes, names and tables around runtime headers, never an
#: algorithm. No template over MAX_TEMPLATE_LINES lines; one over SMALL_TEMPLATE_LINES holds no control flow (no
#: statement but `include`/`import`: only substitutions), and three in four stay under SMALL_TEMPLATE_LINES.
MAX_TEMPLATE_LINES, SMALL_TEMPLATE_LINES = 80, 60
COMPOSITION = re.compile(r"{%-?\s*(include|import|from)\b")


def test_templates_are_small_glue() -> None:
  templates = sorted((ROOT / "anvil").rglob("templates/*.j2"))
  lines = {t.relative_to(ROOT).as_posix(): len(t.read_text().splitlines()) for t in templates}
  assert max(lines.values()) <= MAX_TEMPLATE_LINES, lines
  assert sum(n < SMALL_TEMPLATE_LINES for n in lines.values()) >= 0.75 * len(lines), lines
  for t in templates:
    text, n = t.read_text(), lines[t.relative_to(ROOT).as_posix()]
    assert "{{" in text or "{%" in text, f"{t.name} holds no jinja2: write it as a runtime header"
    control = [s for s in re.findall(r"{%-?\s*\w+", text) if not COMPOSITION.match(s)]
    assert n <= SMALL_TEMPLATE_LINES or not control, f"{t.name}: {n} lines with control flow {control[:3]}: split it"


def test_solver_entry_points_pass_limits_and_scalars_by_name() -> None:
  # the boundary structs (anvil.codegen.boundary) carry them; an index into a packed array is a layout kept twice
  for t in sorted((ROOT / "anvil").rglob("templates/*_jit.cpp.j2")):
    packed = re.findall(r"\b(?:limits|scalars|info)\[\d+\]", t.read_text())
    assert not packed, f"{t.name} reads {packed}: declare a Struct in a boundary module"


def test_arg_shapes() -> None:
  assert av.Arg(3).shape == (3,)
  assert av.Arg((2, 2)).shape == (2, 2)
  assert av.Arg(()).shape == () and av.Arg(()).size == 1
  assert av.Arg(0).shape == (0,) and av.Arg(0).size == 0
  assert av.Arg(3, av.dtypes.float32).dtype == av.dtypes.float32
  assert av.Arg(3, "float32") == av.Arg(3, np.float32) == av.Arg(3, av.dtypes.float32)
  assert len({av.Arg(3), av.Arg(3), av.Arg((3,))}) == 1 and av.Arg(3) != av.Arg(4)
  assert (av.Arg(()).ndim, av.Arg(3).ndim, av.Arg((2, 2)).ndim) == (0, 1, 2)
  n = av.CodegenIntConstant("N", 5)
  a = av.Arg((n, 2))
  assert a.shape == (5, 2) and a.constants == (n,)


@pytest.mark.parametrize("shape", [-1, (2, -3), 2.5, "3", (True,)])
def test_arg_rejects_bad_shapes(shape: object) -> None:
  with pytest.raises(ValueError, match=r"Arg shape"):
    av.Arg(shape)  # type: ignore[arg-type]


def test_arg_rejects_bad_dtype_and_name() -> None:
  with pytest.raises(TypeError, match=r"Arg dtype"):
    av.Arg(3, dtype="banana")
  with pytest.raises(TypeError, match=r"Arg dtype"):
    av.Arg(3, dtype=object)
  with pytest.raises(TypeError, match=r"not supported"):
    av.Arg(3, dtype=av.dtypes.float16)
  with pytest.raises(ValueError, match=r"Arg name"):
    av.Arg(3, name="not an id")


def test_decorator_shape_forms() -> None:
  assert [a.shape for a in shapes_to_args((3, (2, 2)))] == [(3,), (2, 2)]
  assert [a.shape for a in shapes_to_args((((3,), (2,)),))] == [(3,), (2,)]
  assert [a.shape for a in shapes_to_args(((2, 2),))] == [(2, 2)]
  assert [a.shape for a in shapes_to_args(((),))] == [()]
  assert all(a.dtype == av.dtypes.float64 for a in shapes_to_args((3, 4)))


@pytest.mark.parametrize("name", ["1abc", "a-b", "class", "namespace", "__x", "_X", "with", "", "é", "sin", "main"])
def test_identifier_rules(name: str) -> None:
  with pytest.raises(ValueError, match=r"identifier|reserved"):
    check_identifier(name, "name")


def test_codegen_int_constant_expressions() -> None:
  n, nx = av.CodegenIntConstant("N", 30), av.CodegenIntConstant("NX", 4)
  expr = (n + 1) * nx - 2
  assert expr.value == 122 and expr.name == str(expr) == f"{expr}" == "(((N + 1) * NX) - 2)"
  assert {d.name for d in expr.dependencies()} == {"N", "NX"}
  w = av.CodegenIntConstant.from_expr("W", expr)
  assert w.value == 122 and w.declaration() == "inline constexpr int W = (((N + 1) * NX) - 2);"
  half = av.CodegenIntConstant.from_expr("HALF", w // 2)
  assert half.value == 61
  assert [d.name for d in half.dependencies()] == ["W"]
  assert [d.name for d in half.declaration_order()] == ["N", "NX", "W", "HALF"]
  assert half.all_dependencies() == {n, nx, w, half}
  assert av.CodegenIntConstant("N", 30) == n and hash(av.CodegenIntConstant("N", 30)) == hash(n)
  assert av.CodegenIntConstant("N", 31) != n and av.CodegenIntConstant("N", 30, "long") != n
  assert av.CodegenIntConstant("I", 2, type="int64_t").declaration() == "inline constexpr std::int64_t I = 2;"
  assert (10 - n).value == -20 and (3 * n).value == 90 and (100 // nx).value == 25
  assert av.CodegenIntConstant("L", 7, type="long").declaration() == "inline constexpr long L = 7;"


def test_codegen_int_constant_errors() -> None:
  n = av.CodegenIntConstant("N", 3)
  with pytest.raises(ValueError, match=r"identifier"):
    av.CodegenIntConstant("3N", 3)
  with pytest.raises(TypeError, match=r"int"):
    av.CodegenIntConstant("N", 3.0)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match=r"type"):
    av.CodegenIntConstant("N", 3, type="float")
  with pytest.raises(ZeroDivisionError):
    n // 0
  with pytest.raises(ValueError, match=r"non-negative"):
    (n - 5) // 2
  with pytest.raises(ValueError, match=r"no name"):
    (n + 1).declaration()


def test_constants_sorted_once_in_dependency_order() -> None:
  n = av.CodegenIntConstant("N", 3)
  m = av.CodegenIntConstant.from_expr("M", n * 2)
  k = av.CodegenIntConstant.from_expr("K", m + n)
  assert [c.name for c in sort_constants([k, m, n, k])] == ["N", "M", "K"]
  with pytest.raises(ValueError, match=r"twice"):
    sort_constants([n, av.CodegenIntConstant("N", 4)])
  with pytest.raises(ValueError, match=r"no name"):
    sort_constants([n + 1])
