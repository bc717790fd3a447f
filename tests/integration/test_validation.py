"""Every layer (generated functions, the SQP solver, the MPC controller, tracing) rejects the same bad inputs with a
clear exception naming the function and the argument (anvil.validation). The functions are those of test_errors,
test_sqp and test_mpc (same names and graphs: their compiled libraries are shared); most cases raise before any
compile."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import anvil as av
from anvil import Arg, Tensor, dtypes
from anvil.ad import sphessian
from anvil.mpc import LeastSquares, MPCFunction
from anvil.sqp import SQPFunction
from tests.conftest import SHARED_CARTPOLE, stabilizing_cartpole

INF = np.inf


@pytest.fixture(scope="module")
def axpy() -> av.NumericalFunction:
  """test_errors' err_axpy: a * x + y with a scalar, x and y of 3."""
  return av.NumericalFunction("err_axpy", lambda a, x, y: a * x + y, (Arg(()), Arg(3), Arg((3,))))


@pytest.fixture(scope="module")
def solver() -> SQPFunction:
  """test_sqp's sqp_par: min |x - p[:2]|² subject to x0 + x1 - p[2] in [lbg, ubg] (n = 2, np = 3, m = 1)."""
  f = av.NumericalFunction("sqp_par_f", lambda x, p: ((x - p[:2]) ** 2).sum(), (Arg(2), Arg(3)))
  g = av.NumericalFunction("sqp_par_g", lambda x, p: (x.sum() - p[2]).reshape(1), (Arg(2), Arg(3)))
  return SQPFunction("sqp_par", f, g)


@pytest.fixture(scope="module")
def mpc() -> MPCFunction:
  """The shared stabilizing cart-pole controller (nx = 4, nu = 1, N = 30)."""
  return stabilizing_cartpole()


def sqp_args(**given: Any) -> dict[str, Any]:
  """Valid arguments of sqp_par, with `given` replacing some."""
  args = {"x0": np.zeros(2), "p": np.array([0.2, 0.3, 0.0]), "lbx": np.full(2, -INF), "ubx": np.full(2, INF),
          "lbg": [-INF], "ubg": [1.0]}  # fmt: skip
  return args | given


NOT_NUMBERS = {
  "string": "1.5",
  "strings": ["1", "2"],
  "complex": np.array([1.0 + 1.0j, 2.0]),
  "objects": np.array([1.0, 2.0], dtype=object),
  "None in a list": [None, 1.0],
}


@pytest.mark.parametrize("value", NOT_NUMBERS.values(), ids=NOT_NUMBERS.keys())
@pytest.mark.parametrize("layer", ["function", "sqp x0", "sqp lbg", "mpc x0", "mpc u_bounds", "cost weight"])
def test_every_layer_rejects_what_is_not_numbers(
  layer: str, value: object, axpy: av.NumericalFunction, solver: SQPFunction, mpc: MPCFunction
) -> None:
  calls: dict[str, tuple[Callable[[], Any], str]] = {
    "function": (lambda: axpy(value, np.ones(3), np.ones(3)), r"err_axpy: input 0 \(a\): cannot"),
    "sqp x0": (lambda: solver(**sqp_args(x0=value)), "sqp_par: x0: cannot"),
    "sqp lbg": (lambda: solver(**sqp_args(lbg=value)), "sqp_par: lbg: cannot"),
    "mpc x0": (lambda: mpc(value), f"{SHARED_CARTPOLE}: x0: cannot"),
    "mpc u_bounds": (lambda: mpc(np.zeros(4), u_bounds=(value, [1.0])), "riccati: u_bounds lower: cannot"),
    "cost weight": (lambda: LeastSquares(axpy, value), r"LeastSquares\(err_axpy\): weight: cannot"),
  }  # fmt: skip
  call, message = calls[layer]
  with pytest.raises(TypeError, match=message):
    call()


WRONG_SHAPES = {
  "x0 (1, 2)": ({"x0": np.zeros((1, 2))}, r"x0: expected shape \(2,\), got \(1, 2\)"),
  "x0 (2, 2)": ({"x0": np.zeros((2, 2))}, r"x0: expected shape \(2,\), got \(2, 2\)"),
  "lbx (2, 1)": ({"lbx": np.zeros((2, 1))}, r"lbx: expected shape \(2,\), got \(2, 1\)"),
  "p too long": ({"p": np.zeros(4)}, r"p: expected shape \(3,\), got \(4,\)"),
}


@pytest.mark.parametrize(("given", "message"), WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_sqp_rejects_wrong_shapes_instead_of_flattening(
  solver: SQPFunction, given: dict[str, Any], message: str
) -> None:
  with pytest.raises(ValueError, match=f"sqp_par: {message}"):
    solver(**sqp_args(**given))


def test_sqp_takes_bools_ints_and_a_scalar_for_a_vector_of_one(solver: SQPFunction) -> None:
  floats = solver(**sqp_args(x0=np.array([1.0, 0.0]), lbx=np.array([0.0, 0.0]), ubg=np.array([1.0])))
  others = solver(**sqp_args(x0=[True, False], lbx=np.array([0, 0]), ubg=1))
  assert floats.status == others.status == "converged"
  np.testing.assert_allclose(floats.x, others.x, atol=1e-9)


def test_sqp_says_p_is_required(solver: SQPFunction) -> None:
  with pytest.raises(ValueError, match=r"sqp_par: p is required: the problem has 3 parameters; pass p of length 3"):
    solver(**sqp_args(p=None))


IMPOSSIBLE_SQP_BOUNDS = {
  "lbx +inf": ({"lbx": np.array([-INF, INF])}, r"lbx, ubx: lower = \+inf .* at index 1 \(lower inf, upper inf\)"),
  "ubx -inf": ({"ubx": np.array([-INF, 1.0])}, r"lbx, ubx: upper = -inf .* at index 0 \(lower -inf, upper -inf\)"),
  "lbg > ubg": ({"lbg": [2.0], "ubg": [1.0]}, r"lbg, ubg: lower > upper at index 0 \(lower 2.0, upper 1.0\)"),
}


@pytest.mark.parametrize(("given", "message"), IMPOSSIBLE_SQP_BOUNDS.values(), ids=IMPOSSIBLE_SQP_BOUNDS.keys())
def test_sqp_rejects_bounds_no_value_satisfies(solver: SQPFunction, given: dict[str, Any], message: str) -> None:
  with pytest.raises(ValueError, match=f"sqp_par: bounds {message}"):
    solver(**sqp_args(**given))


IMPOSSIBLE_MPC_BOUNDS = {
  "x lower +inf": (
    "x_bounds",
    (np.array([-2.0, INF, -INF, -INF]), np.full(4, INF)),
    "lower = \\+inf",
    "stage 0, component 1",
  ),
  "u upper -inf": ("u_bounds", ([-INF], [-INF]), "upper = -inf", "stage 0, component 0"),
  "u lower > upper": ("u_bounds", ([1.0], [-1.0]), "lower > upper", r"stage 0, component 0 \(lower 1.0, upper -1.0\)"),
}


@pytest.mark.parametrize(("what", "bounds", "problem", "where"), IMPOSSIBLE_MPC_BOUNDS.values(),
                         ids=IMPOSSIBLE_MPC_BOUNDS.keys())  # fmt: skip
@pytest.mark.parametrize("when", ["construction", "call"])
def test_mpc_rejects_bounds_no_value_satisfies(
  mpc: MPCFunction, when: str, what: str, bounds: tuple[Any, Any], problem: str, where: str
) -> None:
  with pytest.raises(ValueError, match=f"{what}: {problem} .*at {where}"):
    if when == "call":
      mpc(np.zeros(4), **{what: bounds})
    else:
      MPCFunction("v_mpc_bounds", mpc.ocp.dynamics, mpc.stage_cost, horizon=5, **{what: bounds})


F32 = dtypes.float32


def nf(name: str, body: Callable[..., Tensor], *args: Arg) -> av.NumericalFunction:
  """A NumericalFunction of `args`."""
  return av.NumericalFunction(name, body, args)


def squares(x: Tensor, u: Tensor) -> Tensor:
  return (x * x).sum()


def add(x: Tensor, u: Tensor) -> Tensor:
  return x + u


def squares32(x: Tensor, u: Tensor) -> Tensor:
  return squares(x, u).cast(F32)


FLOAT32 = {
  "sqp cost input": (
    lambda: SQPFunction("v_f32", nf("v_f32_f", squares, Arg(2, F32), Arg(0, F32))),
    r"v_f32: cost v_f32_f takes input 0 \(x\) as float; the solvers compute in float64",
  ),
  "mpc dynamics input": (
    lambda: MPCFunction("v_f32_mpc", nf("v_f32_F", add, Arg(1, F32), Arg(1, F32)), nf("v_l", squares, Arg(1), Arg(1))),
    r"dynamics v_f32_F takes input 0 \(x\) as float; the solvers compute in float64",
  ),
  "mpc stage cost output": (
    lambda: MPCFunction("v_f32_mpc", nf("v_F", add, Arg(1), Arg(1)), nf("v_f32_l", squares32, Arg(1), Arg(1))),
    r"stage_cost v_f32_l returns output 0 as float; the solvers compute in float64",
  ),
}


@pytest.mark.parametrize(("build", "message"), FLOAT32.values(), ids=FLOAT32.keys())
def test_solvers_reject_float32_functions_at_construction(build: Callable[[], Any], message: str) -> None:
  with pytest.raises(TypeError, match=message):
    build()


VALUE_READS: dict[str, Callable[[Tensor], Any]] = {
  "item": lambda x: x * x.sum().item(),
  "numpy": lambda x: x * float(x.numpy()[0]),
  "tolist": lambda x: x * x.tolist()[0],
  "float": lambda x: x * float(x[0]),
  "math.sin": lambda x: x * math.sin(x[0]),
  "np.sin returned": lambda x: np.sin(x),
  "np.sin in a Tensor": lambda x: Tensor(np.sin(x)),
  "np.sin in math": lambda x: x + np.sin(x),
  "np.sum": lambda x: np.sum(x),
  "branch": lambda x: x if x[0] > 0 else -x,
}


@pytest.mark.parametrize("fn", VALUE_READS.values(), ids=VALUE_READS.keys())
def test_tracing_says_a_traced_function_cannot_read_values(fn: Callable[[Tensor], Any]) -> None:
  f = av.NumericalFunction("v_reads", fn, Arg(2))
  with pytest.raises(TypeError, match=r"v_reads: .*a traced function cannot read tensor values.* Tensor methods .*"
                     r"Tensor\.where"):  # fmt: skip
    _ = f.traced


PLAIN_CALLABLES = ["dynamics", "stage_cost", "terminal_cost", "constraints", "terminal_constraints"]


@pytest.mark.parametrize("what", PLAIN_CALLABLES)
def test_mpc_says_its_functions_must_be_numerical_functions(mpc: MPCFunction, what: str) -> None:
  functions: dict[str, Any] = {"dynamics": mpc.ocp.dynamics, "stage_cost": mpc.stage_cost}
  functions[what] = lambda x, u: x
  kind = "a NumericalFunction or LeastSquares" if what.endswith("cost") else "a NumericalFunction"
  kind += r" \(or made by irk\)" if what == "dynamics" else ""
  with pytest.raises(TypeError, match=f"MPCFunction\\(v_plain\\): {what} must be {kind}, got function"):
    MPCFunction("v_plain", horizon=5, **functions)


def test_derivatives_of_a_zero_size_input_with_a_reduction_are_empty() -> None:
  f = av.NumericalFunction("v_empty_p", lambda x, p: (x * x).sum() + p.sum(), (Arg(2), Arg(0)))
  hessian = sphessian(f, 0)
  assert hessian.shape == (2, 2) and hessian.nnz == 2
  np.testing.assert_array_equal(hessian(np.array([1.0, 2.0]), np.zeros(0)).toarray(), 2.0 * np.eye(2))
