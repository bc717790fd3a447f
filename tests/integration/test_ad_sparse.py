"""Sparse derivatives: exact structural patterns, values equal to the dense derivatives, standalone C++ modules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import anvil as av
from anvil import Arg, Tensor
from anvil.ad import hessian, jacobian, sphessian, spjacobian
from anvil.problems import quadrotor, shooting
from tests.integration.test_ad import fd_jacobian


def _p2(n: int) -> tuple[av.NumericalFunction, av.NumericalFunction]:
  g = av.NumericalFunction(f"sp_defects{n}", lambda w, x0: shooting.defects(w, x0, n), (Arg(shooting.size(n)), Arg(4)))
  lag = av.NumericalFunction(f"sp_lagrangian{n}", lambda w, x0, lam: shooting.lagrangian(w, x0, lam, n),
                             (Arg(shooting.size(n)), Arg(4), Arg(4 * n + 4)))  # fmt: skip
  return g, lag


@pytest.mark.parametrize("n", [5, 20])
def test_p2_multiple_shooting_patterns_and_values(n: int) -> None:
  g, lag = _p2(n)
  jac, hess = spjacobian(g), sphessian(lag)
  assert jac.nnz == 19 * n + 4 and jac.shape == (4 * n + 4, 5 * n + 4)
  assert hess.nnz == 8 * n and hess.shape == (5 * n + 4, 5 * n + 4)
  # one kernel evaluates the Jacobian's varying entries; a second places its constant ones (the defects' identity)
  assert len(jac.program.kernels) == 2 and len(hess.program.kernels) == 1
  rng = np.random.default_rng(n)
  w, x0, lam = rng.uniform(-1, 1, shooting.size(n)), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4 * n + 4)
  j = jac(w, x0)
  assert isinstance(j, sp.csc_array) and j.has_sorted_indices
  np.testing.assert_allclose(j.toarray(), jacobian(g)(w, x0), rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(
    j.toarray(), fd_jacobian(lambda z: shooting.defects_numpy(z, x0, n), w), rtol=1e-6, atol=1e-7
  )
  h = hess(w, x0, lam)
  assert sp.triu(h).nnz == h.nnz, "sphessian holds the upper triangle"
  dense = hessian(lag)(w, x0, lam)
  np.testing.assert_allclose(h.toarray(), np.triu(dense), rtol=1e-12, atol=1e-12)
  full = h + sp.triu(h, k=1).T
  np.testing.assert_allclose(full.toarray(), dense, rtol=1e-12, atol=1e-12)


def test_p1_sparse_jacobian_matches_finite_differences() -> None:
  f = av.NumericalFunction("sp_quad", quadrotor.step, (Arg(12), Arg(4)))
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  jx, ju = spjacobian(f, 0), spjacobian(f, 1)
  np.testing.assert_allclose(
    jx(x, u).toarray(), fd_jacobian(lambda z: quadrotor.step_numpy(z, u), x), rtol=1e-6, atol=1e-8
  )
  np.testing.assert_allclose(
    ju(x, u).toarray(), fd_jacobian(lambda z: quadrotor.step_numpy(x, z), u), rtol=1e-6, atol=1e-8
  )
  assert jx.nnz < 12 * 12  # positions do not feed back into anything


def test_dense_and_empty_patterns() -> None:
  a = Tensor(np.arange(1.0, 13.0).reshape(4, 3))
  dense = av.NumericalFunction("sp_dense", lambda x, y: ((a @ x).sin() * y[0], x.sum() * 0 + 1.0), (Arg(3), Arg(2)))
  only_first = av.NumericalFunction("sp_first", lambda x, y: (a @ x).sin() * y[0], (Arg(3), Arg(2)))
  jac = spjacobian(only_first)
  assert jac.nnz == 12  # full
  np.testing.assert_allclose(jac(np.ones(3), np.array([2.0, 5.0])).toarray(),
                             jacobian(only_first)(np.ones(3), np.array([2.0, 5.0])), rtol=1e-14)  # fmt: skip
  ignores = av.NumericalFunction("sp_ignores", lambda x, y: x * 2 + y[0], (Arg(3), Arg(2)))
  jy = spjacobian(ignores, 1)
  assert jy.nnz == 3 and np.all(np.diff(jy.indptr) == [3, 0])  # column 1 (y[1]) is empty
  np.testing.assert_array_equal(jy(np.ones(3), np.ones(2)).toarray(), [[1.0, 0.0]] * 3)
  del dense


def test_hessian_of_a_function_without_curvature_is_empty() -> None:
  f = av.NumericalFunction("sp_linear", lambda x: (x * Tensor(np.array([1.0, 2.0, 3.0]))).sum(), Arg(3))
  h = sphessian(f)
  assert h.nnz == 0 and h(np.ones(3)).shape == (3, 3)


def test_sparse_jacobian_module_compiles_standalone(tmp_path: Path, cxx: str) -> None:
  n = 5
  g, _ = _p2(n)
  jac = spjacobian(g)
  rng = np.random.default_rng(3)
  w, x0 = rng.uniform(-1, 1, shooting.size(n)), rng.uniform(-1, 1, 4)
  expected = jac(w, x0)
  av.generate_module("p2_jac", [jac], out_dir=tmp_path)
  main = f"""#include <cstdio>
#include "p2_jac.hpp"
int main() {{
  namespace J = {jac.name};
  J::IN0_t w; J::IN1_t x0; J::OUT0_t values;
  const double wv[] = {{{", ".join(map(repr, w.tolist()))}}};
  const double xv[] = {{{", ".join(map(repr, x0.tolist()))}}};
  for (int i = 0; i < {w.size}; ++i) w[i] = wv[i];
  for (int i = 0; i < 4; ++i) x0[i] = xv[i];
  J::WS_t ws = J::init_ws();
  J::call(w, x0, values, ws);
  std::printf("%d %d %d\\n", J::rows, J::cols, J::nnz);
  for (int j = 0; j <= J::cols; ++j) std::printf("%d\\n", J::outerStarts[j]);
  for (int k = 0; k < J::nnz; ++k) std::printf("%d %.17g\\n", J::innerIndices[k], values[k]);
}}
"""
  (tmp_path / "main.cpp").write_text(main)
  flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"]
  build = subprocess.run(
    [cxx, *flags, "main.cpp", "p2_jac.cpp", "-o", "main"], cwd=tmp_path, capture_output=True, text=True
  )
  assert build.returncode == 0, build.stderr
  lines = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.splitlines()
  rows, cols, nnz = map(int, lines[0].split())
  indptr = np.array([int(v) for v in lines[1 : cols + 2]])
  entries = [line.split() for line in lines[cols + 2 :]]
  rebuilt = sp.csc_array(([float(v) for _, v in entries], [int(i) for i, _ in entries], indptr), shape=(rows, cols))
  assert nnz == expected.nnz
  np.testing.assert_array_equal(rebuilt.indices, expected.indices)
  np.testing.assert_array_equal(rebuilt.indptr, expected.indptr)
  np.testing.assert_allclose(rebuilt.toarray(), expected.toarray(), rtol=1e-15, atol=0)


def test_sparse_derivatives_compose_and_differentiate_again() -> None:
  f = av.NumericalFunction("sp_again", lambda x: Tensor.stack(x[0] * x[1], x[1].sin(), x[2] ** 3), Arg(3))
  jac = spjacobian(f)
  second = jacobian(jac)  # d(nonzeros of J)/dx
  x = np.array([0.5, -0.25, 2.0])
  np.testing.assert_allclose(second(x), fd_jacobian(lambda z: jac(z).data, x), rtol=1e-6, atol=1e-8)
  total = av.NumericalFunction("sp_sum", lambda x: jac.fn(x).sum(), Arg(3))  # a sparse derivative inside other math
  np.testing.assert_allclose(total(x), jac(x).sum(), rtol=1e-14)


def test_empty_sparse_jacobian_module_compiles(tmp_path: Path, cxx: str) -> None:
  f = av.NumericalFunction("sp_indep", lambda x, y: y * 2, (Arg(3), Arg(2)))
  jac = spjacobian(f, 0)
  assert jac.nnz == 0 and jac(np.ones(3), np.ones(2)).shape == (2, 3)
  av.generate_module("sp_empty_mod", [jac], out_dir=tmp_path)
  cmd = [cxx, "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-c", "sp_empty_mod.cpp", "-o", "m.o"]
  build = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
  assert build.returncode == 0, build.stderr


def test_constant_entries_are_not_evaluated_and_values_stay_exact() -> None:
  # NOTE: x_{k+1} - F(x_k) defects of a nonlinear map: the identity entries are constants of the generated code, so
  # x_k and x_{k+1} may share a colour; their seeds still add the constants in, which the gather takes off again
  def defects(w):
    x = w.reshape(6, 2)
    f = Tensor.stack(x[:-1, 0] + 0.1 * x[:-1, 1].sin(), x[:-1, 1] - 0.2 * x[:-1, 0] * x[:-1, 1], dim=1)
    return (x[1:] - f).flatten().cat(x[0] * 3.0)

  g = av.NumericalFunction("sp_constant_entries", defects, Arg(12))
  jac = spjacobian(g)
  assert jac.gather_shift is not None
  w = np.random.default_rng(7).uniform(-1, 1, 12)
  np.testing.assert_allclose(jac(w).toarray(), jacobian(g)(w), rtol=1e-14, atol=1e-14)
  np.testing.assert_allclose(jac(w).toarray(), fd_jacobian(lambda z: g(z), w), rtol=1e-6, atol=1e-8)
  # fully linear: every entry is a constant, nothing is evaluated
  lin = av.NumericalFunction("sp_all_constant", lambda w: w[1:] - 2.0 * w[:-1], Arg(5))
  expected = np.eye(5, k=1)[:4] - 2.0 * np.eye(5)[:4]
  np.testing.assert_array_equal(spjacobian(lin)(np.ones(5)).toarray(), expected)


def test_the_route_can_be_chosen() -> None:
  """scalar=True derives a small function on its scalar expressions (straight-line code), scalar=False through
  tinygrad's kernels: the same patterns and values (and the same Hessians)."""
  f = av.NumericalFunction("sp_route", lambda x, u: quadrotor.ode(x, u, quadrotor.TINYGRAD), (Arg(12), Arg(4)))
  x, u = quadrotor.TEST_X, quadrotor.TEST_U
  routes = {s: spjacobian(f, 0, name=f"sp_route_{s}", scalar=s) for s in (True, False)}
  assert routes[True].derived is not None and routes[False].derived is None
  np.testing.assert_allclose(routes[True](x, u).toarray(), routes[False](x, u).toarray(), rtol=1e-14, atol=1e-14)
  lag = av.NumericalFunction("sp_route_l", lambda x, u: (quadrotor.ode(x, u, quadrotor.TINYGRAD) * x).sum(),
                             (Arg(12), Arg(4)))  # fmt: skip
  h = {s: sphessian(lag, 0, name=f"sp_route_h_{s}", scalar=s) for s in (True, False)}
  assert h[True].derived is not None and h[True].nnz == h[False].nnz > 0
  np.testing.assert_allclose(h[True](x, u).toarray(), h[False](x, u).toarray(), rtol=1e-13, atol=1e-13)
