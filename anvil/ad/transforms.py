"""Derivatives and batching as functions: each transform takes a `NumericalFunction` and returns a new one.

All of them are built from two primitives: tinygrad's reverse mode (`Tensor.gradient`) and the UOp batching rule of
`anvil.ad.batching`. Forward mode is the double-VJP trick; dense Jacobians are one *batched* VJP (or JVP) with an
identity seed, so their graph does not grow with the number of rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from tinygrad import Tensor, dtypes

from anvil.ad.batching import batch_graph, to_batch_last
from anvil.ad.scalar import scalar_dense, scalar_gauss_newton, scalar_gradient, scalar_route
from anvil.codegen import Arg, NumericalFunction
from anvil.codegen.build import stage

Fn = NumericalFunction[..., Any]
AxesLike = int | None | Sequence[int | None]


def check_wrt(fn: Fn, wrt: int, what: str) -> Arg:
  """The Arg of input `wrt`, after checking that `fn` can be differentiated with respect to it."""
  if not isinstance(fn, NumericalFunction):
    raise TypeError(f"{what}: expected a NumericalFunction, got {type(fn).__name__}")
  if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(fn.inputs):
    raise ValueError(f"{what}({fn.name}): wrt={wrt!r} is not an input index in [0, {len(fn.inputs)})")
  arg = fn.inputs[wrt]
  if not dtypes.is_float(arg.dtype):
    raise TypeError(f"{what}({fn.name}): input {wrt} ({arg.name}) is {arg.dtype.name}; derivatives need a float input")
  return arg


def single_output(fn: Fn, result: Any, what: str) -> Tensor:
  """The one float Tensor `fn` returned, or an error naming the transform `what`."""
  outs = result if isinstance(result, (tuple, list)) else (result,)
  if len(outs) != 1 or not isinstance(outs[0], Tensor):
    raise ValueError(f"{what}({fn.name}): the function must return exactly one Tensor, got {len(outs)} outputs")
  out = outs[0]
  if not dtypes.is_float(out.dtype):
    raise TypeError(f"{what}({fn.name}): the output is {out.dtype.name}; derivatives need a float output")
  return out


def placeholders(args: Sequence[Arg]) -> list[Tensor]:
  """Empty tensors shaped like `args`, to trace a function on before its graph is rebuilt on other inputs; float64
  ones in the default float (float32 inside the trace of a float32 function: anvil.codegen.precision)."""
  return [Tensor.empty(*a.shape, dtype=dtypes.default_float if a.dtype == dtypes.float64 else a.dtype) for a in args]


def _derived(fn: Fn, name: str | None, suffix: str, body: Callable[..., Any], inputs: Sequence[Arg]) -> Fn:
  """A NumericalFunction whose trace builds `body`'s graph inside a timed `derive` stage."""
  new_name = name if name is not None else f"{fn.name}_{suffix}"

  def traced(*xs: Tensor) -> Any:
    with stage(new_name, "derive"):
      return body(*xs)

  return NumericalFunction(new_name, traced, tuple(inputs), device=fn.device)


def vjp_graph(fn: Fn, xs: Sequence[Tensor], wrt: int, seed: Tensor, what: str) -> Tensor:
  """seedᵀ·∂f/∂x_wrt (the seed is a cotangent, shaped like the output)."""
  out = single_output(fn, fn.fn(*xs), what)
  return out.gradient(xs[wrt], gradient=seed.cast(out.dtype))[0]


def jvp_graph(fn: Fn, xs: Sequence[Tensor], wrt: int, seed: Tensor, what: str) -> Tensor:
  """∂f/∂x_wrt·seed (the seed is a tangent, shaped like input `wrt`)."""
  out = single_output(fn, fn.fn(*xs), what)
  # NOTE: forward mode by the double-VJP trick: g(w) = J^T w is linear in the dummy cotangent w, so
  # d/dw <g(w), v> = J v no longer refers to w.
  w = Tensor.empty(*out.shape, dtype=out.dtype)
  g = out.gradient(xs[wrt], gradient=w)[0]
  return (g * seed.cast(g.dtype)).sum().gradient(w)[0]


def hvp_graph(fn: Fn, xs: Sequence[Tensor], wrt: int, seed: Tensor, what: str) -> Tensor:
  """∇²f·seed for a scalar f (the seed is a direction, shaped like input `wrt`)."""
  out = single_output(fn, fn.fn(*xs), what)
  if out.shape != ():
    raise ValueError(f"{what}({fn.name}): the output has shape {out.shape}; a Hessian needs a scalar output")
  # NOTE: reverse over reverse: H v = grad_x <grad_x f, v>, one more reverse pass (H is symmetric).
  g = out.gradient(xs[wrt])[0]
  return (g * seed.cast(g.dtype)).sum().gradient(xs[wrt])[0]


def gradient(fn: Fn, wrt: int = 0, *, name: str | None = None, scalar: bool | None = None) -> Fn:
  """The gradient of a scalar-valued function with respect to input `wrt`, shaped like that input. A function of many
  small tensors (or any CPU function with `scalar`=True; never with False) has it derived on its scalar expressions
  (reverse mode, straight-line code).

  Example:
    >>> f = NumericalFunction("f", lambda x, p: (x * x).sum() * p[0], (Arg(3), Arg(1)))
    >>> df = gradient(f)          # df(x, p) == 2 * x * p[0]
  """
  check_wrt(fn, wrt, "gradient")

  def body(*xs: Tensor) -> Tensor:
    out = single_output(fn, fn.fn(*xs), "gradient")
    if out.shape != ():
      raise ValueError(f"gradient({fn.name}): the output has shape {out.shape}; gradient needs a scalar output")
    return out.gradient(xs[wrt])[0]

  derivative = _derived(fn, name, "grad", body, fn.inputs)
  if _on_scalars(fn, scalar):
    derivative.derived = scalar_gradient(fn, wrt)
  return derivative


def _on_scalars(fn: Fn, scalar: bool | None) -> bool:
  """Whether a derivative of `fn` is derived on its scalar expressions: `scalar` True on the CPU, None where its graph
  suits it (many small tensors), False never."""
  return scalar is not False and (scalar_route(fn) if scalar is None else fn.device == "CPU")


def vjp(fn: Fn, wrt: int = 0, *, name: str | None = None) -> Fn:
  """Vector-Jacobian product: a new last input `ct` shaped like the output; returns ctᵀ·∂f/∂x_wrt shaped like x_wrt."""
  check_wrt(fn, wrt, "vjp")
  out = single_output(fn, fn.fn(*placeholders(fn.inputs)), "vjp")
  ct = Arg(tuple(int(d) for d in out.shape), out.dtype, "ct")
  return _derived(fn, name, "vjp", lambda *xs: vjp_graph(fn, xs[:-1], wrt, xs[-1], "vjp"), (*fn.inputs, ct))


def jvp(fn: Fn, wrt: int = 0, *, name: str | None = None) -> Fn:
  """Jacobian-vector product: a new last input `v` shaped like input `wrt`; returns ∂f/∂x_wrt·v, shaped like f."""
  arg = check_wrt(fn, wrt, "jvp")
  tangent = Arg(arg.shape, arg.dtype, "v")
  return _derived(fn, name, "jvp", lambda *xs: jvp_graph(fn, xs[:-1], wrt, xs[-1], "jvp"), (*fn.inputs, tangent))


def jacobian_graph(fn: Fn, xs: Sequence[Tensor], wrt: int, what: str = "jacobian") -> Tensor:
  """The dense Jacobian of `fn` at the tensors `xs`, shape (output size, input size), as one batched pass."""
  arg = check_wrt(fn, wrt, what)
  probe = placeholders(fn.inputs)
  out = single_output(fn, fn.fn(*probe), what)
  m, n = int(out.numel()), arg.size
  dtype = out.dtype
  if m <= n:  # reverse mode: one batched VJP over the m rows of an identity seed
    seed_arg, seeds = Arg(tuple(int(d) for d in out.shape), dtype), Tensor.eye(m, dtype=dtype).reshape(m, *out.shape)
    rows = batched_graph(fn, xs, wrt, seed_arg, seeds, m, vjp_graph, what)
    return rows.reshape(m, n)
  seeds = Tensor.eye(n, dtype=arg.dtype).reshape(n, *arg.shape)  # forward mode: one batched JVP over n columns
  cols = batched_graph(fn, xs, wrt, Arg(arg.shape, arg.dtype), seeds, n, jvp_graph, what)
  return cols.reshape(n, m).transpose(0, 1)


def batched_graph(
  fn: Fn,
  xs: Sequence[Tensor],
  wrt: int,
  seed_arg: Arg,
  seeds: Tensor,
  size: int,
  graph: Callable[[Fn, Sequence[Tensor], int, Tensor, str], Tensor],
  what: str,
) -> Tensor:
  """`graph` (a VJP or JVP) traced once on placeholders, then batched over `size` seeds and bound to `xs`."""
  probe = placeholders(fn.inputs)
  (seed,) = placeholders((seed_arg,))
  result = graph(fn, probe, wrt, seed, what)
  (batched,) = batch_graph([result.uop], {seed.uop: to_batch_last(seeds.uop)},
                           {p.uop: x.uop for p, x in zip(probe, xs, strict=True)}, size)  # fmt: skip
  return Tensor(batched)


def jacobian(fn: Fn, wrt: int = 0, *, name: str | None = None) -> Fn:
  """The dense Jacobian, shape (output size, input `wrt` size), built as one batched pass with an identity seed."""
  check_wrt(fn, wrt, "jacobian")
  derivative = _derived(fn, name, "jac", lambda *xs: jacobian_graph(fn, xs, wrt), fn.inputs)
  if scalar_route(fn):  # NOTE: many small tensors (a rigid-body algorithm, a loop over stages): forward mode there
    derivative.derived = scalar_dense(fn, "jacobian", wrt)
  return derivative


def hessian(fn: Fn, wrt: int = 0, *, name: str | None = None) -> Fn:
  """The dense Hessian (n, n) of a scalar-valued function with respect to input `wrt`: one batched Hessian-vector
  product over an identity seed."""
  check_wrt(fn, wrt, "hessian")
  derivative = _derived(fn, name, "hess", lambda *xs: hessian_graph(fn, xs, wrt), fn.inputs)
  if scalar_route(fn):
    derivative.derived = scalar_dense(fn, "hessian", wrt)
  return derivative


def gauss_newton(
  fn: Fn, wrt: int = 0, *, weight_pattern: ArrayLike | None = None, name: str | None = None, scalar: bool | None = None
) -> Fn:
  """The Gauss-Newton Hessian Jᵀ (W + Wᵀ) J of fn(x)ᵀ W fn(x), dense (n, n), J = ∂fn/∂x_wrt (m, n); W (m, m) is a
  new last input, read on `weight_pattern` (m, m) alone (default: every entry), so the entries outside it never
  reach the code. For W symmetric it is 2 JᵀWJ, the Hessian of a least-squares cost without its second-order terms.

  A function of many small tensors (or any CPU function with `scalar`=True) has it derived on its scalar expressions:
  straight-line code holding only the products of entries of J and W that are not structurally zero.

  Example:
    >>> r = NumericalFunction("r", lambda x: (x[:1] * x[1:]).cat(x.sin()), Arg(2))
    >>> H = gauss_newton(r)                     # H(x, W), W (3, 3)
  """
  check_wrt(fn, wrt, "gauss_newton")
  if len(fn.outputs) != 1:
    raise ValueError(f"gauss_newton({fn.name}): the function must return exactly one Tensor, got {len(fn.outputs)}")
  m, dtype = fn.outputs[0].size, fn.outputs[0].dtype
  pattern = np.ones((m, m), bool) if weight_pattern is None else np.asarray(weight_pattern)
  if pattern.shape != (m, m) or pattern.dtype != np.bool_:
    raise ValueError(f"gauss_newton({fn.name}): weight_pattern must be a ({m}, {m}) bool array, got "
                     f"{pattern.dtype} {pattern.shape}")  # fmt: skip

  def graph(*xs: Tensor) -> Tensor:
    J, W = jacobian_graph(fn, xs[:-1], wrt, "gauss_newton"), xs[-1] * Tensor(pattern.astype(np.float64))
    return J.T @ ((W + W.T).cast(J.dtype) @ J)

  derivative = _derived(fn, name, "gn", graph, (*fn.inputs, Arg((m, m), dtype, "W")))
  if _on_scalars(fn, scalar):
    derivative.derived = scalar_gauss_newton(fn, wrt, pattern)
  return derivative


def hessian_graph(fn: Fn, xs: Sequence[Tensor], wrt: int, what: str = "hessian") -> Tensor:
  """The dense Hessian of `fn`'s scalar output at the tensors `xs`, shape (n, n), as one batched pass."""
  arg = check_wrt(fn, wrt, what)
  n = arg.size
  seeds = Tensor.eye(n, dtype=arg.dtype).reshape(n, *arg.shape)
  return batched_graph(fn, xs, wrt, Arg(arg.shape, arg.dtype), seeds, n, hvp_graph, what).reshape(n, n)


def _in_axes(fn: Fn, in_axes: AxesLike) -> tuple[int | None, ...]:
  axes: tuple[int | None, ...] = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(fn.inputs)  # type: ignore[assignment]
  if len(axes) != len(fn.inputs):
    raise ValueError(f"vmap({fn.name}): in_axes has {len(axes)} entries for {len(fn.inputs)} inputs")
  for i, a in enumerate(axes):
    if a is not None and (isinstance(a, bool) or a != 0):
      raise ValueError(f"vmap({fn.name}): in_axes[{i}] = {a!r}; only 0 (a leading batch axis) or None are supported")
  return axes


def vmap(
  fn: Fn, in_axes: AxesLike = 0, *, size: int | None = None, axis_size: int | None = None, name: str | None = None
) -> Fn:
  """The function over a leading batch axis of length `size`, as one batched graph (not a loop of copies).

  Args:
    fn: the function to batch.
    in_axes: per input, 0 if it gains a leading batch axis, None if it is shared by all batch entries (one value
      for every input, or a sequence).
    size: the batch size (required: generated code has fixed shapes). `axis_size` is accepted too, as in JAX.
    name: the new function's name (default `<name>_vmap`).

  Every output gains a leading axis of length `size`, also outputs that do not depend on a batched input.

  Example:
    >>> F = NumericalFunction("F", step, (Arg(4), Arg(1)))
    >>> FN = vmap(F, size=50)      # FN(X: (50, 4), U: (50, 1)) -> (50, 4), one kernel
  """
  if not isinstance(fn, NumericalFunction):
    raise TypeError(f"vmap: expected a NumericalFunction, got {type(fn).__name__}")
  if size is None and axis_size is None:
    raise TypeError(f"vmap({fn.name}): pass the batch size, e.g. vmap(fn, size=50); generated code has fixed shapes")
  if size is not None and axis_size is not None and size != axis_size:
    raise ValueError(f"vmap({fn.name}): size={size} and axis_size={axis_size} disagree")
  size = size if size is not None else axis_size
  if isinstance(size, bool) or not isinstance(size, int) or size < 1:
    raise ValueError(f"vmap({fn.name}): size must be a positive int, got {size!r}")
  axes = _in_axes(fn, in_axes)
  inputs = [Arg((size, *a.shape), a.dtype, a.name) if ax == 0 else a for a, ax in zip(fn.inputs, axes, strict=True)]

  def body(*xs: Tensor) -> Any:
    probe = placeholders(fn.inputs)
    result = fn.fn(*probe)
    outs = result if isinstance(result, (tuple, list)) else (result,)
    if not all(isinstance(o, Tensor) for o in outs):
      raise TypeError(f"vmap({fn.name}): the function must return a Tensor or a tuple of Tensors")
    batched = {p.uop: to_batch_last(x.uop) for p, x, ax in zip(probe, xs, axes, strict=True) if ax == 0}
    shared = {p.uop: x.uop for p, x, ax in zip(probe, xs, axes, strict=True) if ax is None}
    new = [Tensor(u) for u in batch_graph([o.uop for o in outs], batched, shared, size)]
    return tuple(new) if isinstance(result, (tuple, list)) else new[0]

  return _derived(fn, name, "vmap", body, inputs)
