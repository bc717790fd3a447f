"""The documents anvil's API is specified by (the API reference, the NumericalFunctions guide and the GPU guide):
every documented signature and every code example, run on anvil.

Examples are adapted only where they need a GPU (CUDA/Metal code is generated and, where the device is missing, the
call is checked to raise `DeviceUnavailableError`) or clang (any C++17 compiler). Where anvil deliberately differs
(docs/differences.md), the test asserts anvil's documented alternative. Every function name starts
with `ref_` so that compiled libraries do not clash with other tests.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av
from anvil.ad import sphessian, spjacobian
from tests.conftest import STRICT

F32, F64 = av.dtypes.float32, av.dtypes.float64
DEVICES = {d.name: d for d in av.devices()}
CXX_FLAGS = ["-std=c++17", "-Wall", "-Wextra", *STRICT, "-Werror"]
EIGEN = Path("/usr/include/eigen3")

#: The CSC pattern [[a, 0, c], [0, 0, d], [b, 0, 0]] with its nonzeros in CSC order (a, b, c, d).
PATTERN_DENSE = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
PATTERN_INDICES, PATTERN_INDPTR = [0, 2, 0, 1], [0, 2, 2, 4]


def _sparse_values(x: av.Tensor) -> av.Tensor:
  """The nonzeros of the test pattern, in CSC order: x0, x2, x0 x1, exp(x1)."""
  return av.Tensor.stack(x[0], x[2], x[0] * x[1], x[1].exp())


def _sparse_expected(x: np.ndarray) -> np.ndarray:
  """The dense matrix `_sparse_values` describes, computed with numpy."""
  return np.array([[x[0], 0.0, x[0] * x[1]], [0.0, 0.0, np.exp(x[1])], [x[2], 0.0, 0.0]])


def _index_array(kind: str, values: list[int]) -> Any:
  """`values` as a tinygrad Tensor, a list or a numpy array."""
  if kind == "tensor":
    return av.Tensor(values, dtype=av.dtypes.int32)
  return list(values) if kind == "list" else np.array(values, dtype=np.int32)


def _compile_and_run(cxx: str, folder: Path, sources: list[str], exe: str, extra: tuple[str, ...] = ()) -> str:
  """Compile `sources` in `folder` warning-free (C++17, -Wall -Wextra -Werror), run the program, return its stdout."""
  build = subprocess.run([cxx, *CXX_FLAGS, *extra, *sources, "-o", exe], cwd=folder, capture_output=True, text=True)
  assert build.returncode == 0, build.stderr
  run = subprocess.run([str(folder / exe)], cwd=folder, capture_output=True, text=True)
  assert run.returncode == 0, run.stderr
  return run.stdout


def _floats(text: str) -> np.ndarray:
  """The numbers a harness printed, one per line."""
  return np.array([float(v) for v in text.split()])


# *** import paths of the reference (src/anvil/codegen/numerical_function.py and common.py) ***


@pytest.mark.parametrize(
  ("module", "names"),
  [
    (
      "anvil.codegen.numerical_function",
      ("NumericalFunction", "SparseNumericalFunction", "Arg", "numerical_function", "sparse_numerical_function"),
    ),
    ("anvil.codegen.common", ("CodegenIntConstant", "generate_module", "FunctionBase")),
  ],
)
def test_reference_import_paths(module: str, names: tuple[str, ...]) -> None:
  mod = importlib.import_module(module)
  for name in names:
    assert getattr(mod, name) is getattr(av, name), f"{module}.{name}"


# *** Arg ***


def test_arg_forms_of_the_guide() -> None:
  assert av.Arg(1024).shape == (1024,) and av.Arg(1024).dtype == F64
  assert av.Arg((3, 3)).shape == (3, 3) and av.Arg((3, 3)).dtype == F64
  assert av.Arg(1024, dtype=av.dtypes.float32).dtype == F32
  assert av.Arg((2, 2), F32).dtype == F32  # dtype is the second field, positional too
  assert av.Arg(0).shape == (0,) and av.Arg(0).size == 0


def test_arg_ndim() -> None:
  assert (av.Arg(()).ndim, av.Arg(1024).ndim, av.Arg((3, 3)).ndim, av.Arg((2, 3, 4)).ndim) == (0, 1, 2, 3)


def test_arg_accepts_string_dtypes() -> None:
  assert av.Arg(3, dtype="float32").dtype == F32
  assert av.Arg(3, dtype="float64").dtype == F64
  assert av.Arg(3, "float32") == av.Arg(3, dtype=F32)


def test_arg_is_hashable_and_compared_by_value() -> None:
  assert av.Arg(3) == av.Arg(3) and hash(av.Arg(3)) == hash(av.Arg(3))
  assert av.Arg((2, 2), F32) == av.Arg((2, 2), dtype=F32)
  assert av.Arg(3) != av.Arg(4) and av.Arg(3) != av.Arg(3, dtype=F32)
  assert len({av.Arg(3), av.Arg(3), av.Arg((2, 2))}) == 2
  assert {av.Arg(3): "x"}[av.Arg(3)] == "x"


def test_zero_length_arg_for_unused_parameters() -> None:
  fn = av.NumericalFunction("ref_unused_param", lambda x, p: x * 2, (av.Arg(3), av.Arg(0)))
  np.testing.assert_array_equal(fn(np.array([1.0, 2.0, 3.0]), np.zeros(0)), [2.0, 4.0, 6.0])


# *** CodegenIntConstant ***

N = av.CodegenIntConstant("N", 30)
NX = av.CodegenIntConstant("NX", 4)


def test_constant_fields_and_int() -> None:
  n = av.CodegenIntConstant("N", 30)
  assert (n.name, n.value, n.type, int(n)) == ("N", 30, "int", 30)
  k = av.CodegenIntConstant(name="K", value=7, type="int")
  assert (k.name, k.value, k.type) == ("K", 7, "int")
  assert av.CodegenIntConstant("L", 5, "int").type == "int"  # type is the third field


def test_constant_str_is_the_cpp_expression() -> None:
  assert str(N) == f"{N}" == "N"
  assert str(N + 1) == f"{N + 1}" == "(N + 1)"
  assert (N + 1).name == "(N + 1)"
  assert ((N + 1) * NX).name == "((N + 1) * NX)"


def test_constant_repr_is_its_name() -> None:
  # the reference: `def __repr__(self) -> str: return self.name`
  assert repr(N) == "N"
  assert repr(N + 1) == "(N + 1)"


@pytest.mark.parametrize(
  ("build", "text", "value"),
  [
    (lambda: N + 1, "(N + 1)", 31),
    (lambda: N + NX, "(N + NX)", 34),
    (lambda: N - 1, "(N - 1)", 29),
    (lambda: N - NX, "(N - NX)", 26),
    (lambda: 2 - N, "(2 - N)", -28),
    (lambda: N * 2, "(N * 2)", 60),
    (lambda: N * NX, "(N * NX)", 120),
    (lambda: N // 4, "(N / 4)", 7),
    (lambda: N // NX, "(N / NX)", 7),
    (lambda: 1 + N, None, 31),
    (lambda: 2 * N, None, 60),
  ],
  ids=["add", "add_c", "sub", "sub_c", "rsub", "mul", "mul_c", "floordiv", "floordiv_c", "radd", "rmul"],
)
def test_constant_arithmetic(build: Callable[[], av.CodegenIntConstant], text: str | None, value: int) -> None:
  expr = build()
  assert isinstance(expr, av.CodegenIntConstant)
  assert expr.value == int(expr) == value and expr.type == "int"
  if text is not None:
    assert str(expr) == text
  # the C++ text evaluates to the value (C++ '/' on non-negative ints is Python's '//')
  assert eval(str(expr).replace("/", "//"), {"N": 30, "NX": 4}) == value


def test_constant_arithmetic_keeps_the_type() -> None:
  big = av.CodegenIntConstant("BIG", 3, type="std::int64_t")
  assert (big + 1).type == (big * NX).type == (big - 2).type == (big // 3).type == "std::int64_t"


def test_constant_dependencies() -> None:
  assert set((N + 1).dependencies()) == {N}
  assert set((N * NX).dependencies()) == {N, NX}
  assert list(N.dependencies()) == []


def test_constant_all_dependencies_is_a_set_including_itself() -> None:
  w = av.CodegenIntConstant.from_expr("W", (N + 1) * NX)
  deps = w.all_dependencies()
  assert isinstance(deps, set)
  assert deps == {w, N, NX}
  assert N.all_dependencies() == {N}


def test_constant_from_expr() -> None:
  w = av.CodegenIntConstant.from_expr("W", (N + 1) * NX)
  assert (w.name, w.value, int(w), w.type) == ("W", 124, 124, "int")
  assert str(w) == "W"
  # only the named base constants remain as dependencies, not the intermediate (N + 1)
  assert set(w.dependencies()) == {N, NX}
  assert set(av.CodegenIntConstant.from_expr("W2", w * 2).dependencies()) == {w}


def test_constant_from_expr_keeps_the_expression_type() -> None:
  # the reference: `CodegenIntConstant(name=name, value=int(expr), type=expr.type, ...)`
  big = av.CodegenIntConstant("BIG", 3, type="std::int64_t")
  assert av.CodegenIntConstant.from_expr("BIG2", big * 2).type == "std::int64_t"


def test_constant_equality_and_hash_by_value() -> None:
  assert av.CodegenIntConstant("N", 30) == N and hash(av.CodegenIntConstant("N", 30)) == hash(N)
  assert av.CodegenIntConstant("N", 31) != N
  assert av.CodegenIntConstant("N", 30, type="std::int64_t") != N
  assert len({av.CodegenIntConstant("N", 30), N, NX}) == 2


@pytest.mark.parametrize(("alias", "std"), [("int32_t", "std::int32_t"), ("int64_t", "std::int64_t")])
def test_constant_int32_int64_type_aliases(alias: str, std: str) -> None:
  c = av.CodegenIntConstant("ALIASED", 5, type=alias)
  assert c == av.CodegenIntConstant("ALIASED", 5, type=std)
  assert c.value == 5 and std in c.declaration()


def test_constants_in_a_module_compile(tmp_path: Path, cxx: str) -> None:
  w = av.CodegenIntConstant.from_expr("REF_W", (av.CodegenIntConstant("REF_N", 30) + 1) * NX)
  i64 = av.CodegenIntConstant("REF_I64", 2**40, type="int64_t")
  i32 = av.CodegenIntConstant("REF_I32", -7, type="int32_t")
  fn = av.NumericalFunction("ref_const_user", lambda x: x + 1, (av.Arg(2),))
  av.generate_module("ref_consts", [fn], constants={w, i64, i32}, out_dir=tmp_path)  # a set, as in the reference
  header = (tmp_path / "ref_consts.hpp").read_text()
  assert header.index("REF_N = 30") < header.index("REF_W") and "NX = 4" in header
  (tmp_path / "main.cpp").write_text(
    '#include "ref_consts.hpp"\n#include <cstdio>\n#include <type_traits>\n'
    'static_assert(REF_W == 124, "from_expr value");\n'
    'static_assert(std::is_same<std::remove_cv_t<decltype(REF_I64)>, std::int64_t>::value, "int64_t");\n'
    'static_assert(std::is_same<std::remove_cv_t<decltype(REF_I32)>, std::int32_t>::value, "int32_t");\n'
    'static_assert(anvil::kAlignment == 64, "64-byte aligned buffers");\n'
    "int main() {\n"
    "  ref_const_user::OUT0_t out;\n"
    "  if (reinterpret_cast<std::uintptr_t>(out.data()) % 64 != 0) return 1;\n"
    '  std::printf("%d %lld %d\\n", REF_W, static_cast<long long>(REF_I64), REF_I32);\n'
    "}\n"
  )
  out = _compile_and_run(cxx, tmp_path, ["main.cpp", "ref_consts.cpp"], "main")
  assert out.split() == ["124", str(2**40), "-7"]


# *** NumericalFunction: the guide's examples ***


def test_guide_direct_construction() -> None:
  fn = av.NumericalFunction("ref_my_function", lambda x: 0.5 * x.square(), (av.Arg(1024),))
  x = np.random.default_rng(0).normal(size=1024)
  np.testing.assert_allclose(fn(x), 0.5 * x**2, rtol=1e-15)


def test_constructor_keywords() -> None:
  fn = av.NumericalFunction(name="ref_kw_ctor", fn=lambda x: x * 3, inputs=(av.Arg(2),), device="CPU")
  assert (fn.name, fn.device) == ("ref_kw_ctor", "CPU")
  np.testing.assert_array_equal(fn(np.array([1.0, -2.0])), [3.0, -6.0])


def test_guide_calling_convention() -> None:
  fn = av.NumericalFunction("ref_add", lambda x, y: x + y, (av.Arg(3), av.Arg(3)))
  x = np.array([1.0, 2.0, 3.0])
  y = np.array([4.0, 5.0, 6.0])
  result = fn(x, y)
  assert isinstance(result, np.ndarray)
  np.testing.assert_array_equal(result, [5.0, 7.0, 9.0])
  fn2 = av.NumericalFunction("ref_split", lambda x, y: (x + y, x * y), (av.Arg(3), av.Arg(3)))
  sum_result, prod_result = fn2(x, y)
  np.testing.assert_array_equal(sum_result, x + y)
  np.testing.assert_array_equal(prod_result, x * y)
  fn3 = av.NumericalFunction("ref_norm", lambda x: (x * x).sum(), (av.Arg(3),))
  s = fn3(x)
  # the guide's comment says np.float64; the reference's __call__ returns a 0-d array (np.empty(()) for a scalar)
  assert np.shape(s) == () and s == np.float64(14.0) and float(s) == 14.0


def test_call_is_lazy_and_traces_once() -> None:
  traces = []

  def body(x: av.Tensor) -> av.Tensor:
    traces.append(x.shape)
    return x.exp()

  fn = av.NumericalFunction("ref_lazy", body, (av.Arg(2),))
  assert traces == []  # constructing traces nothing
  np.testing.assert_allclose(fn(np.array([0.0, 1.0])), np.exp([0.0, 1.0]), rtol=1e-15)
  np.testing.assert_allclose(fn(np.array([2.0, 3.0])), np.exp([2.0, 3.0]), rtol=1e-15)
  assert len(traces) == 1  # later calls dispatch to the compiled code
  assert Path(fn.library).is_file()  # built by whichever C++17 compiler is here ($CXX, c++, g++, clang++)


def test_inputs_are_cast_and_made_contiguous_outputs_c_contiguous() -> None:
  fn = av.NumericalFunction("ref_cast", lambda x, A: A @ x, (av.Arg(3), av.Arg((3, 3))))
  A = np.arange(9.0).reshape(3, 3)
  expected = A @ np.array([1.0, 2.0, 3.0])
  np.testing.assert_array_equal(fn([1, 2, 3], A), expected)  # ints to float64
  np.testing.assert_array_equal(fn(np.array([1.0, 2.0, 3.0], dtype=np.float32), A), expected)
  np.testing.assert_array_equal(fn(np.array([1.0, 9.0, 2.0, 9.0, 3.0])[::2], np.asfortranarray(A)), expected)
  out = fn(np.ones(3), A.T)  # a transposed view
  np.testing.assert_array_equal(out, A.T @ np.ones(3))
  assert out.flags.c_contiguous and out.dtype == np.float64


def test_float32_and_2d_inputs() -> None:
  fn = av.NumericalFunction("ref_f32_2d", lambda A, x: A @ x, (av.Arg((2, 2), dtype=F32), av.Arg(2, dtype=F32)))
  A = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
  out = fn(A, np.array([1.0, -1.0], dtype=np.float32))
  assert out.dtype == np.float32 and out.flags.c_contiguous
  np.testing.assert_array_equal(out, np.array([-1.0, -1.0], dtype=np.float32))
  grid = av.NumericalFunction("ref_2d_out", lambda x: x.reshape(2, 3).T * 2, (av.Arg(6),))
  out2 = grid(np.arange(6.0))
  assert out2.shape == (3, 2) and out2.flags.c_contiguous
  np.testing.assert_array_equal(out2, np.arange(6.0).reshape(2, 3).T * 2)


def test_guide_capturing_constants() -> None:
  A = av.Tensor([[1.0, 2.0], [3.0, 4.0]])  # captured constant
  fn = av.NumericalFunction("ref_matmul", lambda x: A @ x, (av.Arg(2),))
  np.testing.assert_array_equal(fn(np.array([1.0, 1.0])), np.array([3.0, 7.0]))
  # embedded as a static constexpr double array; anvil's kernels read it in place (docs/differences.md: not copied by
  # init_ws())
  assert (name := re.search(r"static constexpr double (\w+)\[4\] = \{", fn.source_code))
  call = fn.source_code.split("void call(")[1]
  assert f"const_cast<double*>({name.group(1)})" in call and "memcpy" not in fn.source_code
  assert fn.ws_size < 4 * 8, "the constant takes no workspace"


def test_constant_output_function() -> None:
  # the reference's _has_const_output path: an output that is a compile-time constant
  fn = av.NumericalFunction("ref_const_out", lambda x: (av.Tensor.ones(2), x * 2), (av.Arg(2),))
  ones, twice = fn(np.array([1.0, 2.0]))
  np.testing.assert_array_equal(ones, [1.0, 1.0])
  np.testing.assert_array_equal(twice, [2.0, 4.0])


def test_call_accepts_tensor_arguments() -> None:
  # the reference's __call__: `a.numpy() if isinstance(a, Tensor) else a`
  fn = av.NumericalFunction("ref_tensor_arg", lambda x: x * 2, (av.Arg(2),))
  np.testing.assert_array_equal(fn(av.Tensor([1.0, 3.0])), [2.0, 6.0])


def test_unsupported_device_is_a_value_error() -> None:
  with pytest.raises(ValueError, match="TPU"):
    av.NumericalFunction("ref_tpu", lambda x: x, (av.Arg(1),), device="TPU")


def test_fields_name_fn_inputs_device() -> None:
  body = lambda x, y: x * y
  fn = av.NumericalFunction("ref_fields", body, (av.Arg(3), av.Arg(3)))
  assert fn.name == "ref_fields" and fn.fn is body and fn.device == "CPU"
  assert [a.shape for a in fn.inputs] == [(3,), (3,)] and all(a.dtype == F64 for a in fn.inputs)


def test_inputs_are_kept_as_given() -> None:
  inputs = (av.Arg(3), av.Arg((2, 2), F32))
  fn = av.NumericalFunction("ref_inputs_given", lambda x, A: x.sum() + A.sum().cast(F64), inputs)
  assert fn.inputs == inputs


def test_outputs_property() -> None:
  fn = av.NumericalFunction("ref_outputs", lambda x: (x.reshape(2, 2) * 2, x.sum(), x.cast(F32)), (av.Arg(4),))
  assert [tuple(o.shape) for o in fn.outputs] == [(2, 2), (), (4,)]
  assert [o.dtype for o in fn.outputs] == [F64, F64, F32]


def test_is_sparse() -> None:
  dense = av.NumericalFunction("ref_dense_flag", lambda x: x + 1, (av.Arg(3),))
  sparse = av.SparseNumericalFunction("ref_sparse_flag", _sparse_values, (av.Arg(3),), sp.csc_array(PATTERN_DENSE))
  assert dense.is_sparse is False and sparse.is_sparse is True


def test_ws_size_is_the_workspace_bytes() -> None:
  A = av.Tensor(np.arange(12.0).reshape(4, 3))  # 96 bytes captured: read from their table, not the workspace
  fn = av.NumericalFunction("ref_ws", lambda x: (A @ x.sin()).exp(), (av.Arg(3),))
  assert isinstance(fn.ws_size, int) and fn.ws_size < 96  # one fused kernel: no intermediate at all
  declared = re.search(r"Array<char, (\d+)> WS_t;", fn.header_code)
  assert declared is not None and int(declared.group(1)) == fn.ws_size
  x = np.array([0.1, 0.2, 0.3])
  np.testing.assert_allclose(fn(x), np.exp(np.arange(12.0).reshape(4, 3) @ np.sin(x)), rtol=1e-14)


def test_cuda_arch() -> None:
  cpu = av.NumericalFunction("ref_arch_cpu", lambda x: x + 1, (av.Arg(3),))
  assert cpu.cuda_arch is None
  cuda = av.NumericalFunction("ref_arch_cuda", lambda x: x + 1, (av.Arg(3),), device="CUDA")
  if DEVICES["CUDA"].usable:
    assert isinstance(cuda.cuda_arch, str) and cuda.cuda_arch.startswith("sm_")
  else:  # anvil compiles for the GPU init_ws() finds (the guide: nvidia-smi, else sm_80): none here
    assert cuda.cuda_arch is None


def test_function_base_properties_of_a_numerical_function() -> None:
  n = av.CodegenIntConstant("REF_LEN", 3)
  fn = av.NumericalFunction("ref_props", lambda x: x.sin(), (av.Arg(n),))
  assert isinstance(fn, av.FunctionBase)
  assert "namespace ref_props" in fn.header_code and "void call(" in fn.header_code
  assert "init_ws()" in fn.source_code
  assert all(isinstance(i, str) for i in (*fn.header_includes, *fn.source_includes))
  assert set(fn.codegen_constants) == {n}
  assert set(av.NumericalFunction("ref_props2", lambda x: x, (av.Arg(3),)).codegen_constants) == set()


def test_generated_signature_names_the_buffers() -> None:
  # the reference's buf_names (in0, out0, ...) live on as the parameter names of the generated call()
  fn = av.NumericalFunction("ref_buf_names", lambda x, y: (x + y, (x * y).sum()), (av.Arg(2), av.Arg(2)))
  header = fn.header_code
  assert "void call(const IN0_t& in0, const IN1_t& in1, OUT0_t& out0, OUT1_t& out1, WS_t& ws);" in header
  assert "typedef anvil::Buffer<double, 2> IN0_t;" in header and "typedef anvil::Buffer<double> OUT1_t;" in header
  assert "WS_t init_ws();" in header


def test_gpu_layout_replaces_the_reference_gpu_internals() -> None:
  # the reference's gpu_kernel_sources / gpu_buf_nbytes / gpu_kernel_buf_indices: anvil's gpu_layout
  fn = av.NumericalFunction("ref_gpu_layout", lambda x: (x.sin() * 2).exp(), (av.Arg(256),), device="CUDA")
  layout = fn.gpu_layout
  assert layout.device == "CUDA" and layout.kernels
  assert all(k in layout.source for k in layout.kernels)
  assert layout.nbytes == fn.ws_size >= 2 * 256 * 8  # the input and the output are staged on the device
  assert layout.source in fn.header_code


def test_generic_subscription_of_the_guide() -> None:
  # NumericalFunction[I: tuple[Arg, ...], R: Tensor | tuple[Tensor, ...]] as written in annotations
  assert av.NumericalFunction[tuple[av.Arg, av.Arg], av.Tensor] is not None
  assert av.SparseNumericalFunction is not None and issubclass(av.SparseNumericalFunction, av.NumericalFunction)


# *** numerical_function ***


def test_decorator_reference_example() -> None:
  @av.numerical_function("ref_dec_example", ((3,), (2,)))
  def my_fn(x: av.Tensor, y: av.Tensor) -> av.Tensor:
    return x + y.pad(((0, 1),))

  assert isinstance(my_fn, av.NumericalFunction)
  assert [a.shape for a in my_fn.inputs] == [(3,), (2,)] and all(a.dtype == F64 for a in my_fn.inputs)
  np.testing.assert_array_equal(my_fn(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0])), [11.0, 22.0, 3.0])


def test_decorator_guide_examples() -> None:
  @av.numerical_function("ref_guide_my_fn", 1024)
  def my_fn(x: av.Tensor) -> av.Tensor:
    return 0.5 * x.square()

  @av.numerical_function("ref_guide_add", 3, 3)
  def add(x: av.Tensor, y: av.Tensor) -> av.Tensor:
    return x + y

  x = np.linspace(-1.0, 1.0, 1024)
  np.testing.assert_allclose(my_fn(x), 0.5 * x**2, rtol=1e-15)
  np.testing.assert_array_equal(add(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])), [5.0, 7.0, 9.0])


@pytest.mark.parametrize(("name", "inputs"), [("ref_dec_kw_tuples", ((3,), (2,))), ("ref_dec_kw_ints", (3, 2))])
def test_decorator_inputs_keyword(name: str, inputs: tuple[Any, ...]) -> None:
  fn = av.numerical_function(name, inputs=inputs)(lambda x, y: x.sum() * y)
  assert [a.shape for a in fn.inputs] == [(3,), (2,)]
  np.testing.assert_array_equal(fn(np.array([1.0, 2.0, 3.0]), np.array([1.0, -1.0])), [6.0, -6.0])


def test_decorator_mixed_shapes() -> None:
  # the reference's `inputs: More[OneOrMore[int]]`: ints and tuples mixed
  fn = av.numerical_function("ref_dec_mixed", ((2, 2), 3))(lambda A, x: A.sum() + x)
  assert [a.shape for a in fn.inputs] == [(2, 2), (3,)]
  np.testing.assert_array_equal(fn(np.ones((2, 2)), np.array([0.0, 1.0, 2.0])), [4.0, 5.0, 6.0])


# *** SparseNumericalFunction and sparse_numerical_function ***


def _check_sparse(fn: av.SparseNumericalFunction) -> None:
  """`fn` computes the test pattern: attributes, header declarations and a call against numpy."""
  assert fn.is_sparse and isinstance(fn, av.NumericalFunction)
  assert tuple(fn.shape) == (3, 3) and fn.nnz == 4
  assert isinstance(fn.indices, np.ndarray) and isinstance(fn.indptr, np.ndarray)
  np.testing.assert_array_equal(fn.indices, PATTERN_INDICES)
  np.testing.assert_array_equal(fn.indptr, PATTERN_INDPTR)
  x = np.array([0.5, -1.5, 2.0])
  result = fn(x)
  assert isinstance(result, sp.csc_array) and result.shape == (3, 3)
  np.testing.assert_allclose(result.toarray(), _sparse_expected(x), rtol=1e-15)


@pytest.mark.parametrize("kind", ["tensor", "list", "numpy"])
def test_sparse_reference_form_positional(kind: str) -> None:
  fn = av.SparseNumericalFunction(
    f"ref_sp_pos_{kind}",
    _sparse_values,
    (av.Arg(3),),
    (3, 3),
    4,
    _index_array(kind, PATTERN_INDICES),
    _index_array(kind, PATTERN_INDPTR),
  )
  _check_sparse(fn)


def test_sparse_reference_form_keywords() -> None:
  fn = av.SparseNumericalFunction(
    name="ref_sp_kw",
    fn=_sparse_values,
    inputs=(av.Arg(3),),
    shape=(3, 3),
    nnz=4,
    indices=_index_array("tensor", PATTERN_INDICES),
    indptr=_index_array("tensor", PATTERN_INDPTR),
  )
  _check_sparse(fn)


def test_sparse_reference_form_checks_nnz() -> None:
  with pytest.raises(ValueError):
    av.SparseNumericalFunction(
      "ref_sp_bad_nnz", _sparse_values, (av.Arg(3),), (3, 3), 5, PATTERN_INDICES, PATTERN_INDPTR
    )


def test_sparse_pattern_form() -> None:
  _check_sparse(av.SparseNumericalFunction("ref_sp_pattern", _sparse_values, (av.Arg(3),), sp.csc_array(PATTERN_DENSE)))


def test_sparse_header_exposes_the_pattern() -> None:
  fn = av.SparseNumericalFunction("ref_sp_header", _sparse_values, (av.Arg(3),), sp.csc_array(PATTERN_DENSE))
  header = fn.header_code
  for line in (
    "static constexpr int rows = 3;",
    "static constexpr int cols = 3;",
    "static constexpr int nnz = 4;",
    "static constexpr int innerIndices[4] = {0, 2, 0, 1};",
    "static constexpr int outerStarts[4] = {0, 2, 2, 4};",
    "typedef anvil::Buffer<double, 4> OUT0_t;",
  ):
    assert line in header, line


@pytest.mark.parametrize("inputs", [av.Arg(3), (av.Arg(3),)], ids=["one_arg", "tuple"])
def test_sparse_decorator_reference_form(inputs: Any) -> None:
  name = f"ref_spdec_{'one' if isinstance(inputs, av.Arg) else 'tuple'}"
  fn = av.sparse_numerical_function(name, inputs, (3, 3), 4, PATTERN_INDICES, PATTERN_INDPTR)(_sparse_values)
  assert isinstance(fn, av.SparseNumericalFunction)
  _check_sparse(fn)


def test_sparse_decorator_reference_form_keywords() -> None:
  decorator = av.sparse_numerical_function(
    name="ref_spdec_kw",
    inputs=(av.Arg(3),),
    shape=(3, 3),
    nnz=4,
    indices=_index_array("tensor", PATTERN_INDICES),
    indptr=_index_array("numpy", PATTERN_INDPTR),
  )
  _check_sparse(decorator(_sparse_values))


def test_sparse_decorator_pattern_form() -> None:
  _check_sparse(av.sparse_numerical_function("ref_spdec_pattern", sp.csc_array(PATTERN_DENSE), 3)(_sparse_values))


# *** the guide's spjacobian / sphessian example ***


def _chain(x: av.Tensor) -> av.Tensor:
  """A scalar function of a 4-vector: sum_i x_i^2 x_{i+1}."""
  return (x[:-1] ** 2 * x[1:]).sum()


def test_guide_spjacobian_and_sphessian() -> None:
  n = 4
  fn = av.NumericalFunction("ref_chain", _chain, (av.Arg(n),))
  jac_fn = spjacobian(fn)
  hess_fn = sphessian(fn)
  assert isinstance(jac_fn, av.SparseNumericalFunction) and isinstance(hess_fn, av.SparseNumericalFunction)
  x = np.array([1.0, 2.0, -3.0, 0.5])
  grad = np.zeros(n)
  grad[:-1] += 2 * x[:-1] * x[1:]
  grad[1:] += x[:-1] ** 2
  hess = np.diag(np.r_[2 * x[1:], 0.0]) + np.diag(2 * x[:-1], 1) + np.diag(2 * x[:-1], -1)
  assert tuple(jac_fn.shape) == (1, n) and jac_fn.nnz == n
  values = jac_fn(x)
  # the guide: "returns a flat np.ndarray of nnz values"; the reference (and anvil): a scipy.sparse.csc_array, whose
  # .data are those values in CSC order
  assert isinstance(values, sp.csc_array)
  J = sp.csc_array((values.data, jac_fn.indices, jac_fn.indptr), shape=jac_fn.shape)
  np.testing.assert_allclose(J.toarray(), grad[None, :], rtol=1e-15)
  H = hess_fn(x)
  np.testing.assert_allclose(H.toarray(), np.triu(hess), rtol=1e-15)  # upper triangular
  assert sp.tril(H, -1).nnz == 0


def _vector(x: av.Tensor) -> av.Tensor:
  """R^3 -> R^4: x0 x1, sin x2, x0 + x2^2, x1 (a constant Jacobian row, too)."""
  return av.Tensor.stack(x[0] * x[1], x[2].sin(), x[0] + x[2] ** 2, x[1])


def _vector_jacobian(x: np.ndarray) -> np.ndarray:
  """The Jacobian of `_vector`, by hand."""
  return np.array([[x[1], x[0], 0.0], [0.0, 0.0, np.cos(x[2])], [1.0, 0.0, 2 * x[2]], [0.0, 1.0, 0.0]])


EIGEN_STAND_IN = """
// A stand-in for Eigen's Map<const SparseMatrix> (Eigen is not installed here): the same constructor.
namespace Eigen {
enum { ColMajor = 0 };
template <typename Scalar, int Options, typename StorageIndex>
class SparseMatrix {};
template <typename M>
class Map;
template <typename Scalar, int Options, typename StorageIndex>
class Map<const SparseMatrix<Scalar, Options, StorageIndex>> {
 public:
  Map(long rows, long cols, long nnz, const StorageIndex* outer, const StorageIndex* inner, const Scalar* values)
      : rows_(rows), cols_(cols), nnz_(nnz), outer_(outer), inner_(inner), values_(values) {}
  long rows() const { return rows_; }
  long cols() const { return cols_; }
  long nonZeros() const { return nnz_; }
  Scalar coeff(long r, long c) const {
    for (StorageIndex k = outer_[c]; k < outer_[c + 1]; ++k)
      if (inner_[k] == r) return values_[k];
    return Scalar(0);
  }

 private:
  long rows_, cols_, nnz_;
  const StorageIndex* outer_;
  const StorageIndex* inner_;
  const Scalar* values_;
};
}  // namespace Eigen
"""

EIGEN_MAIN = """#include "ref_jac_mod.hpp"
#include <cstdio>
{eigen}
int main() {{
  ref_my_fn_jac::IN0_t in0;
  const double x[] = {{{x}}};
  for (std::size_t k = 0; k < ref_my_fn_jac::IN0_t::size; ++k) in0[k] = x[k];
  ref_my_fn_jac::OUT0_t out;
  ref_my_fn_jac::WS_t ws = ref_my_fn_jac::init_ws();
  ref_my_fn_jac::call(in0, out, ws);

  // the guide's snippet, verbatim but for the namespace
  using SpMat = Eigen::SparseMatrix<double, Eigen::ColMajor, int>;
  Eigen::Map<const SpMat> J(
      ref_my_fn_jac::rows, ref_my_fn_jac::cols, ref_my_fn_jac::nnz,
      ref_my_fn_jac::outerStarts, ref_my_fn_jac::innerIndices, out.data
  );

  for (int r = 0; r < ref_my_fn_jac::rows; ++r)
    for (int c = 0; c < ref_my_fn_jac::cols; ++c) std::printf("%.17g\\n", J.coeff(r, c));
  const double* values = out.data();  // data() keeps working
  std::printf("%.17g\\n", values[0]);
  return 0;
}}
"""


def test_guide_eigen_map_over_a_sparse_jacobian(tmp_path: Path, cxx: str) -> None:
  fn = av.NumericalFunction("ref_my_fn", _vector, (av.Arg(3),))
  jac_fn = spjacobian(fn, name="ref_my_fn_jac")
  assert jac_fn.name == "ref_my_fn_jac"
  x = np.array([0.5, -2.0, 1.25])
  np.testing.assert_allclose(jac_fn(x).toarray(), _vector_jacobian(x), rtol=1e-15)
  av.generate_module("ref_jac_mod", [jac_fn], out_dir=tmp_path)
  header = (tmp_path / "ref_jac_mod.hpp").read_text()
  assert "namespace ref_my_fn_jac {" in header and "static constexpr int nnz = " in header
  eigen = "#include <Eigen/SparseCore>" if EIGEN.is_dir() else EIGEN_STAND_IN
  (tmp_path / "main.cpp").write_text(EIGEN_MAIN.format(eigen=eigen, x=", ".join(repr(float(v)) for v in x)))
  extra = ("-isystem", str(EIGEN)) if EIGEN.is_dir() else ()
  got = _floats(_compile_and_run(cxx, tmp_path, ["main.cpp", "ref_jac_mod.cpp"], "main", extra))
  np.testing.assert_allclose(got[:-1], _vector_jacobian(x).ravel(), rtol=1e-15)
  assert got[-1] == jac_fn(x).data[0]


# *** generate_module ***


def test_generate_module_reference_signature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.chdir(tmp_path)
  fn = av.NumericalFunction("ref_gen_cwd", lambda x: x * x, (av.Arg(3),))
  av.generate_module("ref_gen_cwd_mod", [fn])  # the reference writes into the working directory
  assert (tmp_path / "ref_gen_cwd_mod.hpp").is_file() and (tmp_path / "ref_gen_cwd_mod.cpp").is_file()
  extra = av.CodegenIntConstant("REF_EXTRA", 11)
  av.generate_module(module_name="ref_gen_kw_mod", fns=[fn], constants={extra}, verbosity=0)
  assert "REF_EXTRA = 11;" in (tmp_path / "ref_gen_kw_mod.hpp").read_text()


def test_generate_module_verbosity_prints_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
  fn = av.NumericalFunction("ref_gen_verbose", lambda x: x - 1, (av.Arg(3),))
  av.generate_module("ref_verbose_mod", [fn], None, 1, out_dir=tmp_path)
  printed = capsys.readouterr().out
  assert "ref_verbose_mod.hpp" in printed and "ref_verbose_mod.cpp" in printed
  av.generate_module("ref_quiet_mod", [fn], out_dir=tmp_path)
  assert capsys.readouterr().out == ""


def test_generate_module_rejects_an_empty_function_list(tmp_path: Path) -> None:
  with pytest.raises(ValueError):
    av.generate_module("ref_empty_mod", [], out_dir=tmp_path)


def test_generate_module_rejects_an_empty_name_and_duplicates(tmp_path: Path) -> None:
  # the reference asserts (AssertionError); anvil raises ValueError
  f = av.NumericalFunction("ref_gen_dup", lambda x: x + 1, (av.Arg(1),))
  g = av.NumericalFunction("ref_gen_dup", lambda x: x + 2, (av.Arg(1),))
  with pytest.raises(ValueError):
    av.generate_module("", [f], out_dir=tmp_path)
  with pytest.raises(ValueError, match="ref_gen_dup"):
    av.generate_module("ref_dup_mod", [f, g], out_dir=tmp_path)


REF_STEPS = av.CodegenIntConstant("REF_STEPS", 3)


class RefScaled(av.FunctionBase):
  """A hand-written FunctionBase in the reference's style: set-valued `"#include <...>"` includes, cached properties,
  a list of dependencies and a set of codegen constants; it calls the NumericalFunction it depends on."""

  def __init__(self, inner: av.NumericalFunction) -> None:
    self.name = "ref_scaled"
    self.inner = inner

  def dependencies(self) -> list[av.FunctionBase]:
    return [self.inner]

  @cached_property
  def codegen_constants(self) -> set[av.CodegenIntConstant]:
    return {REF_STEPS}

  @cached_property
  def header_includes(self) -> set[str]:
    return {"#include <cstdlib>"}

  @cached_property
  def source_includes(self) -> set[str]:
    return {"#include <cstdlib>", "#include <cstring>"}

  @cached_property
  def header_code(self) -> str:
    return "namespace ref_scaled {\ndouble first(double x);\n}  // namespace ref_scaled\n"

  @cached_property
  def source_code(self) -> str:
    return (
      "namespace ref_scaled {\ndouble first(double x) {\n"
      "  ref_inner::IN0_t in0; ref_inner::OUT0_t out0; auto ws = ref_inner::init_ws();\n"
      "  for (std::size_t k = 0; k < ref_inner::IN0_t::size; ++k) in0[k] = x;\n"
      "  ref_inner::call(in0, out0, ws);\n"
      "  return std::abs(out0[0]) * REF_STEPS;\n}\n}  // namespace ref_scaled\n"
    )


def test_function_base_subclass_in_the_reference_style(tmp_path: Path, cxx: str) -> None:
  inner = av.NumericalFunction("ref_inner", lambda x: x * -2, (av.Arg(2),))
  av.generate_module("ref_base_mod", [RefScaled(inner)], out_dir=tmp_path)
  header = (tmp_path / "ref_base_mod.hpp").read_text()
  assert header.count("#include <cstdlib>") == 1 and "#include #include" not in header
  assert header.index("namespace ref_inner") < header.index("namespace ref_scaled")  # dependencies first
  assert "REF_STEPS = 3;" in header
  (tmp_path / "main.cpp").write_text(
    '#include "ref_base_mod.hpp"\n#include <cstdio>\nint main() { std::printf("%g\\n", ref_scaled::first(1.5)); }\n'
  )
  assert _compile_and_run(cxx, tmp_path, ["main.cpp", "ref_base_mod.cpp"], "main").split() == ["9"]


def test_generate_module_accepts_an_sqp_function(tmp_path: Path) -> None:
  # the reference: "fns: Functions to include (NumericalFunction, SQPFunction, etc.)"
  from anvil.sqp import SQPFunction

  f = av.NumericalFunction("ref_sqp_f", lambda x, p: (x - 1).square().sum(), (av.Arg(2), av.Arg(0)))
  g = av.NumericalFunction("ref_sqp_g", lambda x, p: x.sum().reshape(1), (av.Arg(2), av.Arg(0)))
  files = av.generate_module("ref_sqp_mod", [SQPFunction("ref_sqp", f, g)], out_dir=tmp_path)
  assert [p.name for p in files] == ["ref_sqp_mod.hpp", "ref_sqp_mod.cpp"]
  header = files[0].read_text()
  assert "namespace ref_sqp " in header or "namespace ref_sqp{" in header or "namespace ref_sqp {" in header
  assert "namespace ref_sqp_f {" in header and "namespace ref_sqp_g {" in header


# *** the GPU guide ***


def test_sqp_with_gpu_functions_is_rejected() -> None:
  # the guide: "SQP with GPU: Not yet supported. The SQP loop runs on CPU"
  from anvil.sqp import SQPFunction

  f = av.NumericalFunction("ref_sqp_gpu_f", lambda x, p: x.square().sum(), (av.Arg(2), av.Arg(0)), device="CUDA")
  g = av.NumericalFunction("ref_sqp_gpu_g", lambda x, p: x.sum().reshape(1), (av.Arg(2), av.Arg(0)), device="CUDA")
  with pytest.raises(ValueError, match="ref_sqp_gpu: cost ref_sqp_gpu_f runs on CUDA; the solvers run on the CPU"):
    SQPFunction("ref_sqp_gpu", f, g)


def _gpu_example(device: str) -> av.NumericalFunction:
  """The guide's `fn_metal` (float32) or `fn_cuda` (float64): x -> x^2 on 1024 entries."""
  dtype = F32 if device == "METAL" else F64
  return av.NumericalFunction(
    f"ref_gpu_{device.lower()}", lambda x: x.square(), (av.Arg(1024, dtype=dtype),), device=device
  )


@pytest.mark.parametrize("device", ["METAL", "CUDA"])
def test_gpu_guide_example(device: str, tmp_path: Path) -> None:
  fn = _gpu_example(device)
  assert fn.device == device
  files = av.generate_module(f"ref_gpu_module_{device.lower()}", [fn], out_dir=tmp_path)
  assert [p.name for p in files] == [f"ref_gpu_module_{device.lower()}.hpp"]  # a single header
  assert not (tmp_path / f"ref_gpu_module_{device.lower()}.cpp").exists()
  header = files[0].read_text()
  assert 'R"anvil_kernels(' in header and "init_ws()" in header and "void call(" in header
  x = np.random.default_rng(1).normal(size=1024).astype(np.float32 if device == "METAL" else np.float64)
  if DEVICES[device].usable:
    np.testing.assert_allclose(fn(x), x**2, rtol=1e-6)
  else:  # calling needs the device: anvil says why it cannot
    with pytest.raises(av.DeviceUnavailableError):
      fn(x)


def test_gpu_host_code_compiles_with_plain_cxx(tmp_path: Path, cxx: str) -> None:
  av.generate_module("ref_gpu_host", [_gpu_example("CUDA")], out_dir=tmp_path)
  (tmp_path / "main.cpp").write_text(
    '#include "ref_gpu_host.hpp"\nint main() { return ref_gpu_cuda::IN0_t::size == 1024 ? 0 : 1; }\n'
  )
  _compile_and_run(cxx, tmp_path, ["main.cpp"], "main", ("-ldl",))


def test_metal_float64_rejection_is_both_type_and_value_error() -> None:
  with pytest.raises(ValueError) as raised:
    av.NumericalFunction("ref_metal_f64_in", lambda x: x.square(), (av.Arg(1024),), device="METAL")
  assert isinstance(raised.value, TypeError)
  gains = av.Tensor(np.array([0.5, -1.0]))
  fn = av.NumericalFunction(
    "ref_metal_f64_const", lambda x: (x.cast(F64) * gains).cast(F32), (av.Arg(2, dtype=F32),), device="METAL"
  )
  with pytest.raises(ValueError) as raised:
    _ = fn.header_code
  assert isinstance(raised.value, TypeError)


def test_metal_captured_float64_constants_are_rejected() -> None:
  # the guide: "The dtype validation only checks Arg inputs, not captured Tensor constants"; anvil checks them too
  gains = av.Tensor(np.array([0.5, -1.0]))
  fn = av.NumericalFunction(
    "ref_metal_const64", lambda x: (x.cast(F64) * gains).cast(F32), (av.Arg(2, dtype=F32),), device="METAL"
  )
  with pytest.raises(TypeError, match="captured constant"):
    _ = fn.header_code
  ok = av.NumericalFunction(
    "ref_metal_const32", lambda x: x * av.Tensor([0.5, -1.0], dtype=F32), (av.Arg(2, dtype=F32),), device="METAL"
  )
  assert "float" in ok.header_code


def test_one_gpu_backend_per_module(tmp_path: Path) -> None:
  with pytest.raises(ValueError, match="one device"):
    av.generate_module("ref_mixed_gpu", [_gpu_example("METAL"), _gpu_example("CUDA")], out_dir=tmp_path)
  cpu = av.NumericalFunction("ref_cpu_beside_gpu", lambda x: x, (av.Arg(3),))
  with pytest.raises(ValueError, match="one device"):
    av.generate_module("ref_mixed_cpu_gpu", [cpu, _gpu_example("CUDA")], out_dir=tmp_path)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: the CUDA example cannot be JIT-built here")
def test_gpu_guide_cuda_jit_builds() -> None:
  assert Path(_gpu_example("CUDA").library).is_file()
