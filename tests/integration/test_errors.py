"""Every error a user will hit is a Python exception naming the function and the argument."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

import anvil as av


@pytest.fixture(scope="module")
def axpy() -> av.NumericalFunction:
  f = av.NumericalFunction("err_axpy", lambda a, x, y: a * x + y, (av.Arg(()), av.Arg(3), av.Arg((3,))))
  f(1.0, np.ones(3), np.ones(3))
  return f


def test_wrong_number_of_inputs(axpy: av.NumericalFunction) -> None:
  with pytest.raises(TypeError, match=r"err_axpy: expected 3 inputs \(a, x, y\), got 2"):
    axpy(1.0, np.ones(3))
  with pytest.raises(TypeError, match=r"err_axpy: takes positional inputs only"):
    axpy(1.0, np.ones(3), y=np.ones(3))


def test_wrong_shape(axpy: av.NumericalFunction) -> None:
  with pytest.raises(ValueError, match=r"err_axpy: input 1 \(x\): expected shape \(3,\), got \(4,\)"):
    axpy(1.0, np.ones(4), np.ones(3))
  with pytest.raises(ValueError, match=r"input 0 \(a\): expected shape \(\), got \(1,\)"):
    axpy(np.ones(1), np.ones(3), np.ones(3))


@pytest.mark.parametrize("bad", [np.array(["a", "b", "c"]), np.ones(3, dtype=complex), [object(), 1, 2]])
def test_non_castable_dtype(axpy: av.NumericalFunction, bad: object) -> None:
  with pytest.raises(TypeError, match=r"err_axpy: input 2 \(y\): cannot (cast|convert)"):
    axpy(1.0, np.ones(3), bad)


def test_castable_inputs_are_converted(axpy: av.NumericalFunction) -> None:
  x = np.arange(6.0)[::2]  # not contiguous
  out = axpy(2, x, [1, 1, 1])  # int scalar, strided array, list of ints
  np.testing.assert_array_equal(out, 2 * x + 1)
  np.testing.assert_array_equal(axpy(np.float32(2), x.astype(">f8"), np.ones(3, np.int64)), 2 * x + 1)


def test_integer_input_takes_whole_floats_and_rejects_the_others() -> None:
  f = av.NumericalFunction("err_int", lambda i: i * 2, av.Arg(2, av.dtypes.int32))
  np.testing.assert_array_equal(f(np.array([1, 2], np.int32)), [2, 4])
  np.testing.assert_array_equal(f(np.array([1.0, -3.0])), [2, -6])  # cast, as the reference API casts
  for bad in ([1.5, 2.0], [np.nan, 1.0], [np.inf, 1.0], [2.0**31, 0.0]):
    with pytest.raises(
      TypeError,
      match=r"err_int: input 0 \(i\): cannot cast dtype float64 to int32 \(expected "
      r"numbers holding whole numbers in its range\)",
    ):
      f(np.array(bad))


def test_whole_floats_past_int64_are_refused_not_wrapped() -> None:
  """int64's largest value rounds up to 2^63 as a float: 2^63 itself is out of range, not cast to -2^63."""
  from anvil.validation import as_array

  np.testing.assert_array_equal(as_array("f", "x", np.array([2.0**62, -(2.0**63)]), np.int64), [2**62, -(2**63)])
  for bad in (2.0**63, 2.0**64):
    with pytest.raises(TypeError, match=r"f: x: cannot cast dtype float64 to int64"):
      as_array("f", "x", np.array([bad]), np.int64)


@pytest.mark.parametrize("result", [1.0, np.ones(3), None, (), "x"])
def test_function_must_return_tensors(result: object) -> None:
  f = av.NumericalFunction("err_ret", lambda x: result, av.Arg(3))
  with pytest.raises(TypeError, match=r"err_ret: the function (must return a Tensor|returned no outputs)"):
    f(np.ones(3))


def test_mixed_tuple_output_names_the_bad_output() -> None:
  f = av.NumericalFunction("err_ret2", lambda x: (x * 2, 3.0), av.Arg(3))
  with pytest.raises(TypeError, match=r"err_ret2: .* output 1 is float"):
    f.traced  # noqa: B018


def test_declared_inputs_must_fit_the_function() -> None:
  with pytest.raises(TypeError, match=r"err_arity: fn.* cannot take the 3 declared inputs"):
    av.NumericalFunction("err_arity", lambda x, y: x + y, (av.Arg(1), av.Arg(1), av.Arg(1)))
  with pytest.raises(TypeError, match=r"inputs must be an Arg or a tuple of Args"):
    av.NumericalFunction("err_inputs", lambda x: x, (3,))  # type: ignore[arg-type]
  with pytest.raises(TypeError, match=r"fn must be callable"):
    av.NumericalFunction("err_call", 3, av.Arg(1))  # type: ignore[call-overload]


def test_bad_names() -> None:
  with pytest.raises(ValueError, match=r"not a valid C\+\+ identifier"):
    av.NumericalFunction("my-fn", lambda x: x, av.Arg(1))
  with pytest.raises(ValueError, match=r"not a valid C\+\+ identifier"):
    av.NumericalFunction("double", lambda x: x, av.Arg(1))


@pytest.mark.parametrize("device", ["TPU", "gpu0", 3, ""])
def test_unknown_device(device: object) -> None:
  with pytest.raises(ValueError, match=r"unknown device .* supported devices: CPU"):
    av.NumericalFunction("err_dev", lambda x: x, av.Arg(1), device=device)  # type: ignore[arg-type]


def _fresh(name: str) -> av.NumericalFunction:
  # NOTE: a graph of its own (the name is part of the cache key), so the compiler really runs.
  return av.NumericalFunction(name, lambda x: x.exp() * 3, av.Arg(2))


def test_missing_compiler(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("CXX", "/nonexistent/c++")
  with pytest.raises(av.CompilerNotFoundError, match=r"install a C\+\+17 compiler.*apt-get install g\+\+"):
    _fresh("err_nocxx")(np.ones(2))
  monkeypatch.delenv("CXX")
  monkeypatch.setenv("PATH", str(fresh_cache))
  with pytest.raises(av.CompilerNotFoundError, match=r"no C\+\+ compiler found .*apt-get install g\+\+"):
    _fresh("err_nocxx2")(np.ones(2))


def test_compiler_failure_reports_first_errors_and_kept_source(
  fresh_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
  fake = tmp_path / "fake-c++"
  fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo fake 1.0; exit 0; fi\n"
                  "echo 'gen.cpp:1:1: error: something broke' >&2; exit 1\n")  # fmt: skip
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  monkeypatch.setenv("CXX", str(fake))
  with pytest.raises(av.CompileError) as info:
    _fresh("err_cc")(np.ones(2))
  message = str(info.value)
  assert "err_cc: the C++ compiler failed (exit 1)" in message and "error: something broke" in message
  kept = Path(message.split("source kept at ")[1].split("\n")[0])
  assert kept.exists() and "anvil_jit_err_cc.cpp" in kept.read_text()
  assert not any(p.suffix == ".so" for p in (fresh_cache / "lib").glob("*")), "no library may be left behind"
  assert os.environ["CXX"] == str(fake)


def test_reading_a_tensor_without_data() -> None:
  stray = av.Tensor.empty(3, dtype=av.dtypes.float64)
  f = av.NumericalFunction("err_stray", lambda x: x + stray, av.Arg(3))
  with pytest.raises(ValueError, match=r"err_stray: the function reads a tensor .* neither an input nor a captured"):
    f(np.ones(3))


GAIN = 2.0


def _scaled(x: av.Tensor) -> av.Tensor:
  return x * GAIN


def test_a_tinygrad_error_names_the_function_and_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
  # NOTE: a global the model reads, reassigned to another object (tinygrad said only "Could not infer dtype of ...")
  monkeypatch.setattr(f"{__name__}.GAIN", av.NumericalFunction("err_other", lambda x: x, av.Arg(1)))
  f = av.NumericalFunction("err_global", _scaled, av.Arg(3))
  with pytest.raises(RuntimeError, match=r"err_global: tinygrad could not trace it at the line test_errors.py:\d+ "
                                         r"`return x \* GAIN`: RuntimeError: Could not infer dtype"):  # fmt: skip
    f(np.ones(3))
  with pytest.raises(IndexError, match=r"err_shapes: tinygrad could not trace it \(output 0.s shape\): IndexError"):
    av.NumericalFunction("err_shapes", lambda x, y: x + y, [av.Arg(3), av.Arg(4)])(np.ones(3), np.ones(4))


def test_an_sqp_checks_its_functions_outputs_at_construction() -> None:
  """A vector cost or a matrix of constraints is refused when the solver is built, naming the function, not at the
  first call deep in a derivative."""
  from anvil.sqp import SQPFunction

  args = (av.Arg(2), av.Arg(0))
  g = av.NumericalFunction("sqp_out_g", lambda x, p: x.sum(), args)
  for bad in (lambda x, p: x * 2.0, lambda x, p: (x * x).sum().reshape(1)):
    f = av.NumericalFunction("sqp_out_f", bad, args)
    with pytest.raises(ValueError, match=r"sqp_out: cost sqp_out_f must return one scalar \(shape \(\)"):
      SQPFunction("sqp_out", f, g)
  f = av.NumericalFunction("sqp_out_f2", lambda x, p: (x * x).sum(), args)
  h = av.NumericalFunction("sqp_out_h", lambda x, p: x.reshape(1, 2), args)
  with pytest.raises(ValueError, match=r"sqp_out: constraints sqp_out_h must return one vector \(m,\)"):
    SQPFunction("sqp_out", f, h)
