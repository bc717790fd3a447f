"""generate_module: toposorted modules that compile warning-free with g++ and clang++ and reproduce Python results."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av
from anvil.ad import jacobian, spjacobian
from anvil.codegen import program, straight_line
from anvil.problems import cartpole, quadrotor
from anvil.robots import Robot
from tests.conftest import STRICT
from tests.robots import SMALL_URDF

N = av.CodegenIntConstant("N_POINTS", 3)
TWO_N = av.CodegenIntConstant.from_expr("TWO_N", N * 2)
WEIGHTS = av.Tensor(np.array([0.5, -2.0, 4.0]))
PATTERN = sp.csc_array(np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))


class Twice(av.FunctionBase):
  """A hand-written function calling a generated one, to exercise dependencies."""

  name = "mod_twice"

  def __init__(self, inner: av.NumericalFunction) -> None:
    self.inner = inner

  def dependencies(self) -> tuple[av.FunctionBase, ...]:
    return (self.inner,)

  @property
  def codegen_constants(self) -> tuple[av.CodegenIntConstant, ...]:
    return (TWO_N,)

  @property
  def header_code(self) -> str:
    return "namespace mod_twice {\nint steps();\n}\n"

  @property
  def source_code(self) -> str:
    return "namespace mod_twice {\nint steps() { return TWO_N; }\n}\n"


def _functions() -> list[av.NumericalFunction]:
  # NOTE: eight quadrotors at once: a batched model, built through tinygrad's kernels (one alone is straight-line code)
  quad = av.NumericalFunction("mod_quad", quadrotor.step, (av.Arg((12, 8)), av.Arg((4, 8))))
  cart = av.NumericalFunction("mod_cart", cartpole.step, (av.Arg(4), av.Arg(1)))
  multi = av.NumericalFunction(
    "mod_multi",
    lambda x, a: (
      x[1:3],
      (x * WEIGHTS).sum(),
      av.Tensor.ones(2),
      x * 2,
      x * 2,
      (a.float() * 2).cast(av.dtypes.float64),
    ),
    (av.Arg(N), av.Arg((2, 2), av.dtypes.float32)),
  )
  sparse = av.SparseNumericalFunction("mod_sparse", lambda x: av.Tensor.stack(x[0], x[2], x[0] * x[1], x[1].exp()),
                                      av.Arg(3), PATTERN)  # fmt: skip
  empty = av.NumericalFunction("mod_empty", lambda p, x: x.sin() + p.sum(), (av.Arg(0), av.Arg(2)))
  # NOTE: a trajectory written as a loop over steps is straight-line code (anvil.codegen.straight_line)
  loop = av.NumericalFunction("mod_loop", _rollout, (av.Arg(4), av.Arg(10)))
  # NOTE: a URDF robot's ABA: its custom derivative's DETACH and TANGENT nodes are substituted before emission
  robot = Robot.from_urdf(SMALL_URDF, floating_base=True)
  nq, nv = robot.nq, robot.nv
  aba = av.NumericalFunction("mod_robot", robot.aba, (av.Arg(nq), av.Arg(nv), av.Arg(nv)))
  # NOTE: a 2-D lookup table (an even cubic axis, an uneven linear one would do too) read at a computed index
  grid = [np.linspace(-1.0, 1.0, 9), np.array([-1.0, -0.6, 0.1, 0.3, 1.0])]
  table = av.interpolant("mod_table", grid, np.add.outer(grid[0] ** 2, np.sin(grid[1])), method="cubic")
  # NOTE: every output depends on every input: its Jacobian's wide tangents are loops over columns (vector mode)
  wide = av.NumericalFunction("mod_wide", _mixing, av.Arg(40))
  return [quad, cart, multi, sparse, empty, loop, spjacobian(loop, 1), aba, jacobian(aba, 1), table, jacobian(table),
          jacobian(wide)]  # fmt: skip


def _mixing(x: av.Tensor) -> av.Tensor:
  y = [x[k] for k in range(40)]
  for s in range(6):
    for k in range(40):  # NOTE: in place: y[k - 1] is already this sweep's, so every output depends on every input
      y[k] = y[k] + 0.3 * y[k - 1] * x[(k + s) % 40].cos() - 0.2 * y[(k + 7) % 40]
  return av.Tensor.stack(*y[::3])


def _rollout(x: av.Tensor, u: av.Tensor) -> av.Tensor:
  states = []
  for k in range(10):
    x = cartpole.step(x, u[k : k + 1])
    states.append(x)
  return av.Tensor.cat(*states)


def _inputs(fn: av.NumericalFunction, rng: np.random.Generator) -> list[np.ndarray]:
  from anvil.codegen.arg import numpy_dtype

  return [rng.uniform(-1, 1, a.shape).astype(numpy_dtype(a.dtype)) for a in fn.inputs]


def _harness(fns: list[av.NumericalFunction], inputs: list[list[np.ndarray]]) -> str:
  lines = ["#include <cstdio>", '#include "mod_all.hpp"', "int main() {"]
  for fn, ins in zip(fns, inputs, strict=True):
    n = fn.name
    lines.append("  {")
    for i, a in enumerate(ins):
      ctype = "float" if a.dtype == np.float32 else "double"
      values = ", ".join(repr(float(v)) for v in a.ravel()) or "0"
      lines.append(f"    {n}::IN{i}_t in{i}; const {ctype} v{i}[] = {{{values}}};")
      lines.append(f"    for (std::size_t k = 0; k < {n}::IN{i}_t::size; ++k) in{i}[k] = v{i}[k];")
    for j in range(len(fn.outputs)):
      lines.append(f"    {n}::OUT{j}_t out{j};")
    args = ", ".join([*(f"in{i}" for i in range(len(ins))), *(f"out{j}" for j in range(len(fn.outputs)))])
    lines.append(f"    {n}::WS_t ws = {n}::init_ws();")
    lines.append(f"    {n}::call({args}, ws);")
    lines.append(f"    {n}::call({args}, ws);  // a second call must give the same result")
    for j in range(len(fn.outputs)):
      lines.append(
        f'    for (std::size_t k = 0; k < {n}::OUT{j}_t::size; ++k) std::printf("%.17g\\n", (double)out{j}[k]);'
      )
    lines.append("  }")
  lines.append('  std::printf("%d %d %d\\n", mod_twice::steps(), mod_sparse::nnz, mod_sparse::innerIndices[2]);')
  lines.append("  return 0;\n}")
  return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[av.NumericalFunction], list[np.ndarray]]:
  out = tmp_path_factory.mktemp("module")
  fns = _functions()
  rng = np.random.default_rng(0)
  inputs = [_inputs(fn, rng) for fn in fns]
  # NOTE: the quadrotor's kernels are kept functions of their own, as a large model's are (the others stay inlined),
  # so the compile, run and sanitizer tests below see both forms; generated code is cached: a cache of its own.
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("ANVIL_CACHE_DIR", str(tmp_path_factory.mktemp("module_cache")))
    mp.setattr(program, "INLINE_KERNELS_UP_TO", sum(len(k.source) for k in fns[0].program.kernels) - 1)
    mp.setattr(straight_line, "CHUNK_STATEMENTS", 100)  # NOTE: several chunks, values passed between them
    header, source = av.generate_module("mod_all", [Twice(fns[0]), *fns[1:]], out_dir=out)
    assert (header, source) == (out / "mod_all.hpp", out / "mod_all.cpp")
    (out / "main.cpp").write_text(_harness(fns, inputs))
    expected = []
    for fn, ins in zip(fns, inputs, strict=True):
      result = fn(*ins)
      outs = result if isinstance(result, tuple) else (result,)
      expected += [np.asarray(o.data if sp.issparse(o) else o, dtype=np.float64).ravel() for o in outs]
  return out, fns, [np.concatenate(expected)]


def _compile_and_run(cxx: str, out: Path, flags: list[str], exe: str) -> list[str]:
  cmd = [
    cxx,
    "-std=c++17",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Wpedantic",
    *STRICT,
    "-Werror",
    *flags,
    "main.cpp",
    "mod_all.cpp",
    "-o",
    exe,
  ]
  build = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
  assert build.returncode == 0, build.stderr
  run = subprocess.run([str(out / exe)], cwd=out, capture_output=True, text=True)
  assert run.returncode == 0, run.stderr
  assert run.stderr == "", run.stderr
  return run.stdout.split("\n")


def test_module_layout(module: tuple[Path, list[av.NumericalFunction], list[np.ndarray]]) -> None:
  out, _, _ = module
  header = (out / "mod_all.hpp").read_text()
  assert header.count("#define ANVIL_SUPPORT_HPP") == 1
  # constants once, dependencies first; functions toposorted (mod_quad before mod_twice)
  assert header.index("inline constexpr int N_POINTS = 3;") < header.index(
    "inline constexpr int TWO_N = (N_POINTS * 2);"
  )
  assert header.count("inline constexpr int N_POINTS") == 1
  assert header.index("namespace mod_quad") < header.index("namespace mod_twice")
  assert "typedef anvil::Buffer<double, N_POINTS> IN0_t;" in header
  assert "static constexpr int innerIndices[4] = {0, 2, 0, 1};" in header
  assert "static constexpr int outerStarts[4] = {0, 2, 2, 4};" in header
  source = (out / "mod_all.cpp").read_text()
  quad, cart = source.split("namespace mod_quad {")[1].split("namespace mod_multi {")[0].split("namespace mod_cart {")
  assert "ANVIL_KERNEL_OUTLINED void" in quad and "ANVIL_KERNEL void" not in quad
  assert "ANVIL_KERNEL void" in cart and "ANVIL_KERNEL_OUTLINED" not in cart
  assert "std::cos(" in source and "std::sin(" in source and "__builtin" not in source
  assert "malloc" not in source and "new " not in source.split("init_ws")[-1]
  assert "for (int c = " in source.split("namespace mod_wide_jac {")[1]  # NOTE: vector mode
  loop = source.split("namespace mod_loop {")[1]
  assert "const double v" in loop and "t_double[" in loop and "for (" not in loop.split("init_ws")[0]


def test_module_compiles_warning_free_and_matches_python(
  cxx: str, module: tuple[Path, list[av.NumericalFunction], list[np.ndarray]]
) -> None:
  out, _, (expected,) = module
  lines = _compile_and_run(cxx, out, [], f"main_{Path(cxx).name}")
  got = np.array([float(v) for v in lines[: expected.size]])
  np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
  assert lines[expected.size] == "6 4 0"


@pytest.mark.slow
def test_module_is_clean_under_sanitizers(module: tuple[Path, list[av.NumericalFunction], list[np.ndarray]]) -> None:
  from tests.conftest import available_compilers

  out, _, (expected,) = module
  flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
  lines = _compile_and_run(available_compilers()[0], out, flags, "main_asan")
  np.testing.assert_allclose(np.array([float(v) for v in lines[: expected.size]]), expected, rtol=1e-12, atol=1e-12)


def test_generate_module_rejects_bad_names(tmp_path: Path) -> None:
  f = av.NumericalFunction("mod_dup", lambda x: x + 1, av.Arg(1))
  g = av.NumericalFunction("mod_dup", lambda x: x + 2, av.Arg(1))
  with pytest.raises(ValueError, match=r"two different functions are both named 'mod_dup'"):
    av.generate_module("dups", [f, g], out_dir=tmp_path)
  with pytest.raises(ValueError, match=r"module_name: 'my module' is not a valid C\+\+ identifier"):
    av.generate_module("my module", [f], out_dir=tmp_path)
  with pytest.raises(TypeError, match=r"expected FunctionBase"):
    av.generate_module("m", [lambda x: x], out_dir=tmp_path)  # type: ignore[list-item]
  av.generate_module("same_twice", [f, f], out_dir=tmp_path)  # the same object twice is fine
  assert (tmp_path / "same_twice.hpp").read_text().count("namespace mod_dup {") == 1


def test_generate_module_rejects_cycles(tmp_path: Path) -> None:
  a, b = (
    Twice(av.NumericalFunction("mod_c", lambda x: x, av.Arg(1))),
    Twice(av.NumericalFunction("mod_d", lambda x: x, av.Arg(1))),
  )
  a.name, b.name = "mod_a", "mod_b"
  a.inner, b.inner = b, a  # type: ignore[assignment]
  with pytest.raises(ValueError, match=r"dependency cycle mod_a -> mod_b -> mod_a"):
    av.generate_module("cyc", [a], out_dir=tmp_path)


def test_generate_module_returns_every_file_readable_as_the_umask_allows(tmp_path: Path) -> None:
  f = av.NumericalFunction("mod_files", lambda x: x * 2, av.Arg(2))
  previous = os.umask(0o022)
  try:
    files = av.generate_module("files_mod", [f], out_dir=tmp_path)
  finally:
    os.umask(previous)
  header, source = files
  assert (header.name, source.name) == ("files_mod.hpp", "files_mod.cpp")
  names = {p.name for p in files.written}
  assert names == {"files_mod.hpp", "files_mod.cpp", "files_mod.cmake", "files_mod.mk", "CMakeLists.txt"}
  assert names == {p.name for p in tmp_path.iterdir() if p.is_file()}, "everything written is listed"
  for path in files.written:
    assert stat.S_IMODE(path.stat().st_mode) == 0o644, path  # NOTE: not the cache's private 0600
