"""`irk`: a discrete-time model from a stiff ODE or a semi-explicit index-1 DAE, by implicit Runge-Kutta steps (Radau
IIA or Gauss-Legendre collocation) solved by Newton's method in the generated code.

No traced graph can hold Newton's iterations, so the function `irk` returns is not a NumericalFunction: it is an
`ImplicitIntegrator`, generated C++ glue around the runtime anvil/implicit_rk.hpp calling three small generated
functions of the ODE (its rate, its sparse Jacobian, and in an MPC with exact Hessians the Hessian of mu'e), callable
from Python on numpy arrays, emitted in modules, and accepted as an MPC's dynamics, whose derivatives then come from the
implicit function theorem at the converged step (anvil.mpc.stagewise).
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.polynomial import Polynomial, legendre
from tinygrad import Tensor, dtypes

from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.base import FunctionBase
from anvil.codegen.caller import convert_input, count_error
from anvil.codegen.forksafe import owned_lock
from anvil.codegen.templated import TemplatedFunction
from anvil.codegen.trace import OutputSpec
from anvil.mpc.integrators import check_model, checked_rate, model_inputs
from anvil.mpc.ode import OdeContext, OdeDerivatives

METHODS = ("radau", "gauss")
#: Why a step failed, by the status the C++ reports (anvil::integrators::ImplicitStatus).
FAILURES = {1: "Newton's iterations did not converge", 2: "Newton's matrix is singular",
            3: "the ODE (or its Jacobian) returned NaN/inf"}  # fmt: skip


def irk(
  name: str, ode: Callable[..., Any], dt: float, nx: int, nu: int, np: int = 0, *, nz: int = 0,
  method: str = "radau", stages: int = 3, steps: int = 1, newton_tol: float = 1e-10, newton_iter: int = 10,
  z_guess: Sequence[float] | None = None,
) -> ImplicitIntegrator:  # fmt: skip
  """x_next = F(x, u[, p]): `steps` implicit Runge-Kutta steps of dt / steps with the input held constant.

  Args:
    name: a C++ identifier for the new function.
    ode: the continuous dynamics written with Tensor ops: `ode(x, u[, p]) -> xdot`, or for a semi-explicit index-1
      DAE (nz > 0) `ode(x, z, u[, p]) -> (xdot, g)`, with 0 = g(x, z, u[, p]) (nz equations, dg/dz invertible).
    dt: the sampling time (seconds), > 0.
    nx: the state size.
    nu: the input size.
    np: the parameter size (0: the function takes no parameter).
    nz: the number of algebraic states.
    method: "radau" (Radau IIA: order 2 stages - 1, stiffly accurate, L-stable; the one for DAEs) or "gauss"
      (Gauss-Legendre: order 2 stages, A-stable, symplectic; ODEs only).
    stages: collocation points per step, 1 to 4.
    steps: integration steps per sampling interval.
    newton_tol: Newton stops when an update moves the stage states by at most newton_tol (1 + |x|) (h |dK|: the
      states' units; |dz| for the algebraic states). A float32 controller uses at least 1e-5.
    newton_iter: the most Newton iterations per step; a step that does not converge fails (NaN, status 1).
    z_guess: the algebraic states' guess for the first step (zeros by default; a step starts from the last one's).

  Each Newton iteration evaluates the ODE's Jacobian at the stages and factorizes the (stages (nx + nz))-square
  Newton matrix; the derivatives of the step (`F.jacobian`, and an MPC's) are those of the converged step by the
  implicit function theorem. A failed step returns NaN in C++ (`ws.rk.status` says why) and raises RuntimeError in
  Python.

  Example:
    >>> F = irk("cstr_F", ode, 0.1, nx=2, nu=1)          # F(x, u) -> x_next, Radau IIA, 3 stages
    >>> x_next, J = F.jacobian(x, u)                      # J = dx_next/d[x; u]
  """
  where = f"irk({name})"
  check_model(where, name, ode, "(x, [z,] u[, p])", dt, nx=(nx, 1), nu=(nu, 0), np=(np, 0), nz=(nz, 0),
              stages=(stages, 1), steps=(steps, 1), newton_iter=(newton_iter, 1))  # fmt: skip
  if method not in METHODS:
    raise ValueError(f"{where}: method must be one of {METHODS}, got {method!r}")
  if stages > 4:
    raise ValueError(f"{where}: stages must be 1 to 4, got {stages}")
  if nz and method != "radau":
    raise ValueError(f"{where}: a DAE (nz > 0) needs method='radau' (stiffly accurate), got {method!r}")
  if isinstance(newton_tol, bool) or not isinstance(newton_tol, (int, float)) or not 0 < newton_tol < 1:
    raise ValueError(f"{where}: newton_tol must be a number in (0, 1), got {newton_tol!r}")
  a, b = collocation_tableau(method, stages)
  x, u = Arg(nx, name="x"), Arg(nu, name="u")
  p_args = (Arg(np, name="p"),) if np else ()
  if nz:
    rate_fn = lambda x_, z_, u_, *p: _dae_rate(ode, where, nx, nz, x_, z_, u_, *p)
    rate = NumericalFunction(f"{name}_ode", rate_fn, (x, Arg(nz, name="z"), u, *p_args))
  else:
    rate = NumericalFunction(
      f"{name}_ode", lambda x_, u_, *p: checked_rate(ode, where, nx, x_, u_, *p), (x, u, *p_args)
    )
  method_spec = Method(
    method, float(dt) / steps, steps, a, b, float(newton_tol), newton_iter, _guess(where, z_guess, nz)
  )
  return ImplicitIntegrator(name, rate, model_inputs(nx, nu, np), nz, method_spec)


def collocation_tableau(method: str, stages: int) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
  """The Butcher tableau (A, b) of the collocation method with `stages` points: Gauss-Legendre (the roots of the
  Legendre polynomial P_s on [0, 1]) or Radau IIA (the roots of P_s - P_{s-1}, which end at 1); A[i][j] integrates
  the j-th Lagrange polynomial of the points from 0 to c_i, b[j] from 0 to 1."""
  if method == "gauss":
    c = (legendre.leggauss(stages)[0] + 1) / 2
  else:
    roots = np.sort((legendre.Legendre.basis(stages) - legendre.Legendre.basis(stages - 1)).roots().real)
    c = (roots + 1) / 2
    c[-1] = 1.0
  a, b = np.zeros((stages, stages)), np.zeros(stages)
  for j in range(stages):
    others = np.delete(c, j)
    basis = Polynomial.fromroots(others) if others.size else Polynomial([1.0])
    integral = (basis / basis(c[j])).integ()
    a[:, j] = integral(c) - integral(0.0)
    b[j] = integral(1.0) - integral(0.0)
  if method == "radau":
    b = a[-1].copy()  # NOTE: stiffly accurate: the last stage is the step's end
  return tuple(tuple(float(v) for v in row) for row in a), tuple(float(v) for v in b)


@dataclass(frozen=True)
class Method:
  """An implicit step's method and settings: h = dt / steps, the tableau (a, b) and Newton's tolerance, iterations
  and the algebraic states' first guess."""

  name: str
  h: float
  steps: int
  a: tuple[tuple[float, ...], ...]
  b: tuple[float, ...]
  newton_tol: float
  newton_iter: int
  z_guess: tuple[float, ...]


@dataclass(frozen=True)
class _Context:
  """What the implicit_rk templates need."""

  name: str
  inputs: tuple[int, ...]
  outputs: tuple[int, ...]
  nx: int
  nu: int
  ode: OdeContext


class ImplicitIntegrator(TemplatedFunction):
  """x_next = F(x, u[, p]) (with `with_jacobian`, also dx_next/d[x; u], nx x (nx + nu)): `method.steps` implicit
  Runge-Kutta steps on the ODE `rate`, a NumericalFunction of (x[, z], u[, p]) -> xdot (or [xdot; g] for a DAE with
  `algebraic` states z). Made by `irk`. Callable on numpy arrays (thread-safe), emitted in modules; in C++,
  `call(x, u[, p], x_next[, jac], ws)` returns false where the step failed (outputs NaN, `ws.rk.status` says why)."""

  template = "implicit_rk"
  header_runtime = ("implicit_rk",)
  #: It solves its stages by Newton's method (anvil.mpc.ode.Integrator); runs on the CPU.
  implicit, device = True, "CPU"

  def __init__(
    self, name: str, rate: NumericalFunction[..., Any], inputs: tuple[Arg, ...], algebraic: int, method: Method,
    with_jacobian: bool = False,
  ) -> None:  # fmt: skip
    self.name, self.rate, self.inputs, self.algebraic, self.method = name, rate, inputs, algebraic, method
    self.with_jacobian = with_jacobian
    nx, nz = inputs[0].size, inputs[0].size + inputs[1].size
    self.outputs = (OutputSpec((nx,), dtypes.float64),) + ((OutputSpec((nx, nz), dtypes.float64),) * with_jacobian)
    self.h, self.steps, self.a, self.b = method.h, method.steps, method.a, method.b
    self.newton_tol, self.newton_iter, self.z_guess = method.newton_tol, method.newton_iter, method.z_guess
    self._lock = owned_lock(self)

  @cached_property
  def jacobian(self) -> ImplicitIntegrator:
    """The same step returning (x_next, dx_next/d[x; u]): the derivative of the converged step (implicit function
    theorem), not of Newton's iterations."""
    if self.with_jacobian:
      return self
    return ImplicitIntegrator(f"{self.name}_jacobian", self.rate, self.inputs, self.algebraic, self.method, True)

  @cached_property
  def key(self) -> str:
    """Identifies the generated code: the ODE's graph, the method and the outputs."""
    return hashlib.sha256(f"irk|{self.name}|{self.rate.key}|{self.method!r}|{self.with_jacobian}".encode()).hexdigest()

  @cached_property
  def ode(self) -> OdeDerivatives:
    """The ODE's rate and Jacobian the step calls."""
    return OdeDerivatives.of(self, hessian=False)

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The ODE's rate and Jacobian."""
    return (self.ode.rate, self.ode.jacobian)

  @cached_property
  def context(self) -> _Context:
    """Sizes, the ODE and the method."""
    sizes = lambda specs: tuple(a.size for a in specs)
    ode = OdeContext.of(self.ode, True, False, "float64")
    return _Context(self.name, sizes(self.inputs), sizes(self.outputs), self.inputs[0].size, self.inputs[1].size, ode)

  def __call__(self, *args: Any) -> Any:
    """x_next (or with `with_jacobian`, (x_next, jacobian)) at numpy inputs; RuntimeError where the step failed."""
    if any(isinstance(a, Tensor) for a in args):
      raise TypeError(
        f"{self.name}: an implicit integrator (irk) runs Newton's method in generated code and cannot be traced into "
        "another function; call it on numpy arrays, or use it as an MPC's dynamics"
      )
    if len(args) != len(self.inputs):
      raise count_error(self.name, self.inputs, len(args))
    arrays = [convert_input(self.name, i, spec, a) for i, (spec, a) in enumerate(zip(self.inputs, args, strict=True))]
    for i, (spec, array) in enumerate(zip(self.inputs, arrays, strict=True)):
      if not np.all(np.isfinite(array)):
        raise ValueError(f"{self.name}: input {i} ({spec.name}) has NaN/inf; a step needs finite x, u and p")
    outs = [np.empty(o.shape) for o in self.outputs]
    pointers = (ctypes.c_void_p * (len(arrays) + len(outs)))(*(a.ctypes.data for a in (*arrays, *outs)))
    with self._lock:
      self.handle.entry("call", None, ctypes.c_void_p, ctypes.c_void_p)(pointers, self.handle.pointer)
      status = int(self.handle.entry("status", ctypes.c_int, ctypes.c_void_p)(self.handle.pointer))
    if status:
      raise RuntimeError(f"{self.name}: the implicit step failed at x = {arrays[0]}, u = {arrays[1]}: "
                         f"{FAILURES[status]} (newton_iter = {self.newton_iter}, newton_tol = {self.newton_tol:g}); "
                         "try more steps")  # fmt: skip
    return outs[0] if len(outs) == 1 else tuple(outs)


def _guess(where: str, z_guess: Sequence[float] | None, nz: int) -> tuple[float, ...]:
  """The algebraic states' first guess, checked: nz finite numbers (zeros when None)."""
  guess = np.zeros(nz) if z_guess is None else np.asarray(z_guess, dtype=np.float64)
  if guess.shape != (nz,) or not np.all(np.isfinite(guess)):
    raise ValueError(f"{where}: z_guess must be {nz} finite numbers, got {z_guess!r}")
  return tuple(float(v) for v in guess)


def _dae_rate(ode: Callable[..., Any], where: str, nx: int, nz: int, *args: Tensor) -> Tensor:
  """[xdot; g] from a DAE's ode(x, z, u[, p]) -> (xdot, g), checked."""
  out = ode(*args)
  shapes = tuple(getattr(o, "shape", None) for o in out) if isinstance(out, tuple) else None
  if shapes != ((nx,), (nz,)) or not all(isinstance(o, Tensor) for o in out):
    raise ValueError(f"{where}: a DAE's ode must return (xdot, g), Tensors of shapes ({nx},) and ({nz},), got {shapes}")
  return out[0].cat(out[1])
