"""`MPCSensitivityFunction`: the derivatives of a controller's applied input, ∂u0/∂x0 and ∂u0/∂p, at its last
solution, generated as C++ beside the controller (`generate_module(..., [mpc, mpc.sensitivity_function])`): the
solution sensitivity of the OCP's NLP (`anvil.sqp.SensitivityFunction`) at the NLP state the controller keeps."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from anvil.codegen import FunctionBase
from anvil.codegen.templated import TemplatedFunction

if TYPE_CHECKING:
  from anvil.mpc.controller import MPCFunction


@dataclass(frozen=True)
class _MPCSensitivityContext:
  """What the templates need."""

  name: str
  mpc: str
  kkt: str
  nx: int
  nx_nlp: int
  nu: int
  N: int
  np: int
  nw: int
  ng: int
  n_params: int


class MPCSensitivityFunction(TemplatedFunction):
  """∂u0/∂x0 (nu, nx) and ∂u0/∂p_k (nu, (N + 1) np) of an MPCFunction's last full-SQP solution, as C++
  (`<mpc>_sensitivity::call(mpc_ws, du0_dx0, du0_dp, ws)`): the KKT system of the OCP's NLP at the solution, exact
  Hessian (MPCSolution.du0_dx0 and du0_dp compute the same in Python).

  Args:
    mpc: the controller (full-SQP mode; exact or Gauss-Newton Hessian: the sensitivity generates its own exact one).
  """

  template = "mpc_sensitivity"

  def __init__(self, mpc: MPCFunction) -> None:
    if mpc.options.mode != "sqp":
      raise ValueError(f"{mpc.name}: sensitivities are those of a converged full-SQP solution; this controller runs "
                       f"mode={mpc.options.mode!r}")  # fmt: skip
    self.name = f"{mpc.name}_sensitivity"
    self.mpc = mpc

  def dependencies(self) -> tuple[FunctionBase, ...]:
    """The controller and its NLP's solution sensitivity."""
    return (self.mpc, self.mpc.sqp.sensitivity_function)

  @cached_property
  def context(self) -> _MPCSensitivityContext:
    """Sizes and names."""
    mpc, sqp = self.mpc, self.mpc.sqp
    return _MPCSensitivityContext(
      name=self.name, mpc=mpc.name, kkt=sqp.sensitivity_function.name, nx=mpc.nx, nx_nlp=mpc.ocp.nx, nu=mpc.nu,
      N=mpc.N, np=mpc.np, nw=sqp.n, ng=sqp.m, n_params=sqp.np,
    )  # fmt: skip
