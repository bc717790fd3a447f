"""Cost Hessians: `anvil.ad.gauss_newton` (Jᵀ (W + Wᵀ) J of a residual, on the scalar expressions or on tinygrad's
graph), and the MPC's cost Hessian stage by stage (anvil.mpc.stage_cost): its Gauss-Newton blocks against numpy
products of the residuals' Jacobians, its exact blocks against the Hessian of the whole cost."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import anvil as av
from anvil import Arg, NumericalFunction, Tensor
from anvil.ad import gauss_newton, gradient, jacobian, sphessian
from anvil.mpc import LeastSquares, MPCFunction, MPCOptions, Soft, rk4
from anvil.mpc.costs import constant_congruence
from anvil.mpc.stage_cost import StageCostGradient, StageCostHessian
from tests.conftest import STRICT, available_compilers

NX, NU, NP, N = 3, 2, 2, 5


def _reference(r: NumericalFunction, args: list[np.ndarray], W: np.ndarray, pattern: np.ndarray) -> np.ndarray:
  J = jacobian(r, 0)(*args)
  S = W * pattern
  return J.T @ (S + S.T) @ J


def _chain(x: Tensor, p: Tensor) -> Tensor:
  """A residual of many small tensors: a planar chain's tip position and orientation terms."""
  angle, tip, terms = x[0:1] * 0, [p[0:1] * 0, p[0:1] * 0], []
  for k in range(x.shape[0]):
    angle = angle + x[k : k + 1]
    tip = [tip[0] + angle.cos() * p[0:1], tip[1] + angle.sin() * p[1:2]]
    terms.append((angle * tip[0]).tanh())
  return tip[0].cat(tip[1], *terms, x * x[0:1])


@pytest.mark.parametrize("route", ["scalar", "tinygrad"])
def test_gauss_newton_equals_the_jacobian_product(route: str) -> None:
  rng = np.random.default_rng(0)
  if route == "scalar":
    r = NumericalFunction("test_gn_chain", _chain, (Arg(12), Arg(2)))
    args = [rng.normal(size=12), rng.uniform(0.5, 1.5, size=2)]
  else:
    r = NumericalFunction("test_gn_small", lambda x, p: (x[:1] * x[1:] * p).cat(x.sin()), (Arg(2), Arg(1)))
    args = [rng.normal(size=2), rng.normal(size=1)]
  m = r.outputs[0].size
  pattern = np.eye(m, dtype=bool)
  pattern[0, m - 1] = pattern[1, 2] = True  # not symmetric: W_ab + W_ba read only where the pattern has a or b
  H = gauss_newton(r, 0, weight_pattern=pattern, name=f"test_gn_{route}", scalar=route == "scalar")
  assert (H.derived is not None) is (route == "scalar")
  assert [a.shape for a in H.inputs] == [a.shape for a in r.inputs] + [(m, m)]
  W = rng.normal(size=(m, m))
  got, want = H(*args, W), _reference(r, args, W, pattern)
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
  if route == "scalar":  # each pair computed once, written twice
    np.testing.assert_array_equal(got, got.T)
  # W's entries outside the pattern never reach the result
  np.testing.assert_array_equal(H(*args, np.where(pattern, W, 1e6)), got)


@pytest.mark.parametrize(
  "rows, scale, moved",
  [
    (list(range(24)), None, True),  # x - x_ref, u: the identity
    ([0, 2, 3, 5, *range(8, 20)], [2.0, 1.0, 0.5, *([1.0] * 13)], True),  # a scaled selection with gaps
    ([*range(12, 24), *range(12)], None, True),  # two runs out of order
    (list(range(23, -1, -1)), None, False),  # 24 runs: the product
  ],
)
def test_constant_congruence_moves_what_a_selection_selects(
  rows: list[int], scale: list[float] | None, moved: bool
) -> None:
  """Jᵀ S J for a constant J whose columns hold at most one nonzero each (a residual selecting and scaling
  coordinates) is S's blocks moved into place, without J's entries; other J (a column with two nonzeros, too many
  runs) the product, reading J: both equal numpy's Jᵀ S J."""
  rng = np.random.default_rng(len(rows))
  J = np.eye(24)[rows] * (np.asarray(scale)[:, None] if scale else 1.0)
  J2 = np.vstack([J, np.eye(24)[:1]])
  J2[-1, 1] = 1.0  # column 1 now has two nonzeros where it had one
  for name, constant, is_moved in ((f"{len(rows)}_{rows[0]}_{moved}", J, moved), (f"two_{rows[0]}", J2, False)):
    m = constant.shape[0]
    f = NumericalFunction(f"test_congruence_{name}", lambda S, c=constant: constant_congruence(c, S), [Arg((m, m))])
    S = rng.normal(size=(m, m))
    np.testing.assert_allclose(f(S + S.T), constant.T @ (S + S.T) @ constant, rtol=1e-13, atol=1e-13)
    reads_J = any(len(c.values) == constant.size for c in f.program.constants)
    assert reads_J is not is_moved, "a moved block is S's entries, the product reads J's"


def test_gauss_newton_rejects_a_bad_pattern() -> None:
  r = NumericalFunction("test_gn_bad", lambda x: x.sin(), Arg(3))
  with pytest.raises(ValueError, match=r"weight_pattern must be a \(3, 3\) bool array"):
    gauss_newton(r, weight_pattern=np.ones((2, 2), bool))
  with pytest.raises(ValueError, match="wrt=2"):
    gauss_newton(r, 2)


def _ode(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
  return x[1:2].cat(-p[0] * x[0:1].sin() + u[0:1] * x[2:3], (u[1:2] - x[2:3]) * x[0:1].cos())


def _stage(x: Tensor, u: Tensor, p: Tensor) -> Tensor:
  return (x - p[0]).cat(u * x[0:1].exp(), (x[0:1] * u[1:2]).sin())


def _terminal(x: Tensor, p: Tensor) -> Tensor:
  return (x[0:2] * p[1]).cat(x[2:3].sin() * x[0:1])


def _mpc(hessian: str = "gauss_newton", least_squares: bool = True) -> MPCFunction:
  """An OCP with every part the Hessian holds: nonlinear stage and terminal costs reading p (least squares with a
  full stage weight, or a plain stage cost), an input rate (previous inputs as extra states, a constant block), soft
  state bounds (slacks' 2 l2)."""
  F = rk4("test_gn_mpc_F", _ode, 0.1, nx=NX, nu=NU, np=NP)
  stage = NumericalFunction("test_gn_mpc_r", _stage, (Arg(NX), Arg(NU), Arg(NP)))
  terminal = NumericalFunction("test_gn_mpc_rN", _terminal, (Arg(NX), Arg(NP)))
  A = np.random.default_rng(5).normal(size=(NX + NU + 1, NX + NU + 1))
  cost = LeastSquares(stage, A @ A.T)
  if not least_squares:
    cost = NumericalFunction("test_gn_mpc_l", lambda x, u, p: (_stage(x, u, p) ** 2).sum() * x[1].cosh(),
                             (Arg(NX), Arg(NU), Arg(NP)))  # fmt: skip
  name = f"test_gn_mpc_{hessian}_{int(least_squares)}"
  return MPCFunction(
    name, F, cost, LeastSquares(terminal, np.array([1.0, 2.0, 3.0])), horizon=N,
    x_bounds=(np.full(NX, -3.0), np.full(NX, 3.0)), soft={"x": Soft(l1=1.0, l2=10.0)},
    u_rate_weight=np.array([0.5, 2.0]), options=MPCOptions(hessian=hessian),
  )  # fmt: skip


def test_stage_wise_gauss_newton_equals_the_blocks_of_the_residuals() -> None:
  """The OCP of `_mpc` at random points, run-time weights and sigma."""
  mpc = _mpc()
  stage, terminal = mpc.ocp.stage_cost.residual, mpc.ocp.terminal_cost.residual
  nr = stage.outputs[0].size
  rng = np.random.default_rng(5)
  ocp, H = mpc.ocp, mpc.sqp.hessian
  assert isinstance(H, StageCostHessian) and ocp.nx == NX + NU  # the previous inputs are states
  w, params = rng.normal(size=ocp.nw), rng.normal(size=ocp.n_params)
  sigma, lam = np.array([0.7]), rng.normal(size=ocp.ng)
  got = H(w, params, sigma, lam).toarray()

  def weight(key: str) -> np.ndarray:  # the run-time weights in the NLP parameter (its tuning block)
    at, shape, size = ocp.tuning_layout[key]
    start = ocp.nx + (N + 1) * NP + at
    return params[start : start + size].reshape(shape)

  want, nz, P = np.zeros((ocp.nw, ocp.nw)), ocp.nz, params[ocp.nx : ocp.nx + (N + 1) * NP].reshape(N + 1, NP)
  for k in range(N):
    z = w[k * nz : (k + 1) * nz]
    x, u = z[:NX], z[NX + NU :]
    Jx, Ju = jacobian(stage, 0)(x, u, P[k]), jacobian(stage, 1)(x, u, P[k])
    J = np.hstack([Jx, np.zeros((nr, NU)), Ju])  # [x; v; u]: the previous inputs enter no residual
    S = weight("stage_weight") * ocp.stage_cost.pattern
    D = np.hstack([np.zeros((NU, NX)), -np.eye(NU), np.eye(NU)])  # u - v
    want[k * nz : (k + 1) * nz, k * nz : (k + 1) * nz] = J.T @ (S + S.T) @ J + 2 * D.T @ np.diag([0.5, 2.0]) @ D
  xN = w[N * nz : N * nz + NX]
  JN = np.hstack([jacobian(terminal, 0)(xN, P[N]), np.zeros((3, NU))])
  SN = weight("terminal_weight") * ocp.terminal_cost.pattern
  want[N * nz : N * nz + ocp.nx, N * nz : N * nz + ocp.nx] = JN.T @ (SN + SN.T) @ JN
  slacks = N * nz + ocp.nx + np.arange(ocp.ns)
  want[slacks, slacks] = 2 * weight("l2")
  want = np.triu(sigma[0] * want)
  assert ocp.ns > 0 and np.count_nonzero(want) > 10
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_stage_wise_gauss_newton_in_cpp_is_warning_free_clean_and_equal(tmp_path: Path) -> None:
  """The exported controller's stage-wise Gauss-Newton Hessian compiles warning-free with every compiler here, runs
  clean under AddressSanitizer and UBSan, and gives the values the JIT library gives."""
  mpc = _mpc()
  H = mpc.sqp.hessian
  rng = np.random.default_rng(9)
  inputs = [rng.normal(size=a.size) for a in H.inputs]
  want = H(*inputs).data
  av.generate_module("gn_module", [mpc], out_dir=tmp_path)
  arrays = "\n".join(f"static const double v{i}[] = {{{', '.join(float(v).hex() for v in a)}}};"
                     for i, a in enumerate(inputs))  # fmt: skip
  main = f"""#include <cstdio>
#include "gn_module.hpp"
{arrays}
static {H.name}::WS_t ws;
static {H.name}::IN0_t w;
static {H.name}::IN1_t p;
static {H.name}::IN2_t sigma;
static {H.name}::IN3_t lam;
static {H.name}::OUT0_t out;
int main() {{
  {H.name}::init(ws);
  for (std::size_t k = 0; k < w.size; ++k) w[k] = v0[k];
  for (std::size_t k = 0; k < p.size; ++k) p[k] = v1[k];
  sigma[0] = v2[0];
  for (std::size_t k = 0; k < lam.size; ++k) lam[k] = v3[k];
  {H.name}::call(w, p, sigma, lam, out, ws);
  for (std::size_t k = 0; k < out.size; ++k) std::printf("%a\\n", out[k]);
  return 0;
}}
"""
  (tmp_path / "main.cpp").write_text(main)
  warnings = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Wpedantic", *STRICT, "-Werror"]
  for cxx in available_compilers():
    build = subprocess.run([cxx, *warnings, "-c", "gn_module.cpp", "-o", f"{cxx}.o"], cwd=tmp_path, capture_output=True,
                           text=True)  # fmt: skip
    assert build.returncode == 0, (cxx, build.stderr[:2000])
  sanitized = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "main.cpp", "gn_module.cpp", "-o", "gn"]
  build = subprocess.run(
    [available_compilers()[0], *warnings, *sanitized], cwd=tmp_path, capture_output=True, text=True
  )
  assert build.returncode == 0, build.stderr[:2000]
  run = subprocess.run([str(tmp_path / "gn")], capture_output=True, text=True)
  assert run.returncode == 0, run.stderr[:2000]
  np.testing.assert_array_equal([float.fromhex(v) for v in run.stdout.split()], want)


@pytest.mark.parametrize("least_squares", [True, False], ids=["least_squares", "plain_cost"])
def test_exact_stage_wise_cost_hessian_equals_the_hessian_of_the_whole_cost(least_squares: bool) -> None:
  """The exact Hessian of a nonlinear cost, stage by stage, against sphessian of sigma times the NLP's whole cost."""
  mpc = _mpc("exact", least_squares)
  ocp = mpc.ocp
  (H,) = mpc.sqp.hessian.terms  # the stage-wise Lagrangian Hessian adds it to the constraints' curvature
  assert isinstance(H, StageCostHessian)
  args = (Arg(ocp.nw), Arg(ocp.n_params), Arg(1), Arg(ocp.ng))
  whole = NumericalFunction(f"test_gn_whole_{int(least_squares)}", lambda w, p, s, lam: s[0] * ocp.cost(w, p), args)
  reference = sphessian(whole, 0)
  rng = np.random.default_rng(2)
  for _ in range(2):
    w, params = rng.normal(size=ocp.nw), rng.normal(size=ocp.n_params)
    point = (w, params, np.array([0.7]), rng.normal(size=ocp.ng))
    got, want = H(*point).toarray(), reference(*point).toarray()
    assert np.count_nonzero(np.triu(want, 1)) > 10
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())


@pytest.mark.parametrize("least_squares", [True, False], ids=["least_squares", "plain_cost"])
def test_stage_wise_cost_gradient_equals_the_gradient_of_the_whole_cost(least_squares: bool) -> None:
  """The cost's gradient stage by stage (the stage and terminal costs', the input rate's, the slacks' l1 + 2 l2 s),
  which the SQP solver calls, against the gradient of the NLP's whole cost traced as one function."""
  mpc = _mpc("gauss_newton" if least_squares else "exact", least_squares)
  ocp, G = mpc.ocp, mpc.sqp.gradient
  assert isinstance(G, StageCostGradient)
  args = (Arg(ocp.nw), Arg(ocp.n_params))
  reference = gradient(NumericalFunction(f"test_gn_cost_{int(least_squares)}", ocp.cost, args), 0)
  rng = np.random.default_rng(4)
  for _ in range(3):
    w, params = rng.normal(size=ocp.nw), rng.normal(size=ocp.n_params)
    want = reference(w, params)
    assert np.count_nonzero(want) > ocp.nw // 2
    np.testing.assert_allclose(G(w, params), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_a_block_of_an_unknown_kind_says_what_is_expected() -> None:
  from anvil.mpc.stage_cost import Block

  residual = NumericalFunction("test_gn_kind_r", lambda x, u: x.cat(u), (Arg(2), Arg(1)))
  with pytest.raises(ValueError, match=r"kind must be one of \('gauss_newton', 'exact'\), got 'newton'"):
    Block.of(LeastSquares(residual, np.ones(3)), "newton", "test_gn_kind", False, 2, 3, "float64")


def test_sqp_refuses_a_gradient_of_other_inputs() -> None:
  from anvil.sqp import SQPFunction

  cost = NumericalFunction("test_gn_sqp_f", lambda x, p: (x * x).sum(), (Arg(3), Arg(0)))
  wrong = NumericalFunction("test_gn_sqp_g", lambda x: x * 2, (Arg(4),))
  with pytest.raises(TypeError, match=r"gradient must be a generated function of \(x, p\) shaped \(3,\), \(0,\)"):
    SQPFunction("test_gn_sqp", cost, gradient=wrong)
  with pytest.raises(TypeError, match="gradient must be a generated function"):
    SQPFunction("test_gn_sqp", cost, gradient=lambda x, p: 2 * x)  # type: ignore[arg-type]
