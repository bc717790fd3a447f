"""`NLP`: what an SQP solver solves, apart from how: min f(x, p) s.t. lbg <= g(x, p) <= ubg, lbx <= x <= ubx, as its
functions, sizes and scalar type, with the sparse derivatives the solver uses (given, else derived when first asked).
`SQPFunction` holds one; its labels (`NLPLabels`) and its sensitivities (`SensitivityFunction`) take it, not the solver
(as CasADi's sqpmethod holds an nlpsol problem)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

from numpy.typing import NDArray
from tinygrad import Tensor

from anvil.ad import sphessian, spjacobian
from anvil.codegen import Arg, FunctionBase, NumericalFunction
from anvil.codegen.precision import SCALARS

Fn = NumericalFunction[..., Any]


@runtime_checkable
class Sized(Protocol):
  """A generated function that states its output's length (`size`) without being traced."""

  @property
  def size(self) -> int: ...


class SparseDerivative(Protocol):
  """What the solver reads of a sparse derivative besides its generated code (a SparseNumericalFunction, or a
  generated function with the same C++ interface: namespace, IN/OUT types, WS_t, init_ws and call)."""

  @property
  def name(self) -> str: ...

  @property
  def inputs(self) -> tuple[Arg, ...]: ...

  @property
  def shape(self) -> tuple[int, int]: ...

  @property
  def indices(self) -> NDArray[Any]: ...

  @property
  def indptr(self) -> NDArray[Any]: ...

  @property
  def nnz(self) -> int: ...


@dataclass(frozen=True, eq=False)
class NLP:
  """An NLP's functions and sizes, and its derivatives.

  Attributes:
    name: the solver's name (the derived functions are named after it).
    cost: f(x, p), a scalar (in the solver's scalar type).
    constraints: g(x, p), a vector, or None.
    n: the number of variables x.
    np: the number of parameters p.
    scalar: "float64" or "float32".
    given_jacobian: ∂g/∂x as given (None: derived from g).
    given_hessian: the Lagrangian Hessian (or an approximation) as given (None: derived).
    constraints_code: g's generated code where it is not `constraints`' (anvil.mpc's stage-wise constraints).
  """

  name: str
  cost: Fn
  constraints: Fn | None
  n: int
  np: int
  scalar: str
  given_jacobian: SparseDerivative | None = None
  given_hessian: SparseDerivative | None = None
  constraints_code: FunctionBase | None = None

  @cached_property
  def m(self) -> int:
    """Number of constraints (from `constraints_code` when given: `constraints` is then not traced for it)."""
    if self.constraints is None:
      return 0
    return (self.constraints_code if isinstance(self.constraints_code, Sized) else self.constraints.outputs[0]).size

  @cached_property
  def jacobian(self) -> SparseDerivative | None:
    """The sparse ∂g/∂x (the one given, else derived), or None without constraints."""
    if self.given_jacobian is not None or self.constraints is None:
      return self.given_jacobian
    return spjacobian(self.constraints, 0, name=f"{self.name}_constraint_jacobian")

  @cached_property
  def hessian(self) -> SparseDerivative:
    """The upper triangle of the Hessian of sigma·f + λᵀg in x (or the approximation given), a function of
    (x, p, sigma, λ)."""
    if self.given_hessian is not None:
      return self.given_hessian
    cost, constraints = self.cost.fn, None if self.constraints is None else self.constraints.fn

    def lagrangian(x: Tensor, p: Tensor, sigma: Tensor, lam: Tensor) -> Tensor:
      value = sigma[0] * cost(x, p)
      return value if constraints is None else value + (constraints(x, p) * lam).sum()

    dtype = SCALARS[self.scalar]
    args = (Arg(self.n, dtype=dtype), Arg(self.np, dtype=dtype), Arg(1, dtype=dtype), Arg(self.m, dtype=dtype))
    return sphessian(
      NumericalFunction(f"{self.name}_lagrangian", lagrangian, args), 0, name=f"{self.name}_lagrangian_hessian"
    )
