"""Portable C++17 rendering of tinygrad kernels: `std::` math, no clang-only builtins, no threads, no vectors."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import tinygrad.codegen.opt.heuristic as heuristic
from tinygrad import dtypes
from tinygrad.codegen import to_program
from tinygrad.codegen.opt import KernelOptError, Opt, OptOps
from tinygrad.codegen.opt.postrange import Scheduler
from tinygrad.device import Compiler
from tinygrad.dtype import AddrSpace, DType
from tinygrad.helpers import Context, Target
from tinygrad.renderer import Renderer
from tinygrad.renderer.cstyle import ClangRenderer, CStyleLanguage, base_rewrite
from tinygrad.uop.ops import AxisType, GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

from anvil.codegen.arg import CPP_TYPES

COS_MARK = "cos"


#: sin(pi/2 - x) as tinygrad writes cos(x); `c` is pi/2 rounded to the operand's dtype.
COS_PATTERN = UPat(
  Ops.SIN,
  src=(UPat(Ops.ADD, src=(UPat(Ops.CONST, name="c"), UPat(Ops.MUL, src=(UPat.var("x"), UPat(Ops.CONST, name="m"))))),),
  name="s",
)


def mark_cos(s: UOp, c: UOp, x: UOp, m: UOp, half_pi: tuple[float, ...] = (math.pi / 2,)) -> UOp | None:
  """The SIN of COS_PATTERN marked as a cos of `x` when its constant is one of `half_pi`."""
  if c.arg not in half_pi or m.arg != -1 or x.op is Ops.CONST:
    return None
  return UOp(Ops.SIN, s.dtype, (x,), COS_MARK)


# NOTE: tinygrad has no COS op: Tensor.cos is sin(pi/2 - x). The compiler then cannot pair sin(a) with cos(a) into one
# sincos call, which costs ~20% on rotation-heavy models (measured on the quadrotor). Before lowering, mark those SINs
# (the arg survives upcasting and devectorizing, unlike a CUSTOM op) and render them as std::cos of the operand.
pm_mark_cos = PatternMatcher([(COS_PATTERN, mark_cos)])


#: The helper (anvil/support.hpp, or a GPU prelude) each integer division op is rendered as where it may fault.
DIVISION_HELPERS = {Ops.CDIV: "cdiv", Ops.CMOD: "cmod"}


def division_may_fault(x: UOp) -> bool:
  """Whether the integer CDIV or CMOD `x` may divide by zero, or the dtype's minimum by -1 (the quotient overflows):
  C++ leaves both undefined, and x86 traps (SIGFPE; SIGILL where the compiler sees a constant zero divisor)."""
  divisor, dividend = x.src[1], x.src[0]
  overflow = not dtypes.is_unsigned(x.dtype) and divisor.vmin <= -1 <= divisor.vmax
  return divisor.vmin <= 0 <= divisor.vmax or (overflow and dividend.vmin <= x.dtype.min)


class DivisionGuardedRenderer(CStyleLanguage):
  """A C-style renderer whose integer helpers (see `pm_guarded_division` and `pm_wrapping`) are spelled
  `division_prefix` followed by cdiv, cmod, wrap_add, wrap_sub, wrap_mul, wrap_neg or wrap_shl."""

  division_prefix: str


def _helper_call(ctx: DivisionGuardedRenderer, x: UOp, helper: str) -> str:
  """`x` as a call of the renderer's integer `helper`, typed by its dtype."""
  return f"{ctx.division_prefix}{helper}<{ctx.render_dtype(x.dtype)}>({', '.join(ctx[s] for s in x.src)})"


def _render_division(ctx: DivisionGuardedRenderer, x: UOp) -> str | None:
  return _helper_call(ctx, x, DIVISION_HELPERS[x.op]) if division_may_fault(x) else None


#: Integer CDIV and CMOD that may fault rendered as calls of the renderer's `division_prefix` + cdiv / cmod, typed by
#: the result's dtype; any other (by a constant, as index arithmetic divides, or by a divisor known positive) keeps C's
#: operator.
pm_guarded_division = PatternMatcher([(UPat(tuple(DIVISION_HELPERS), dtype=dtypes.ints, name="x"), _render_division)])


#: The helper (anvil/support.hpp, or a GPU prelude) each integer op is rendered as where it may overflow.
WRAPPING_HELPERS = {op: f"wrap_{op.name.lower()}" for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.SHL)}


def wraps_unlike_numpy(dtype: DType) -> bool:
  """Whether C++ integer arithmetic on `dtype` may differ from numpy's where a result leaves the dtype's range: signed
  overflow is undefined, and types narrower than int are computed in int, truncated only where stored. Unsigned types
  at least as wide as int wrap as numpy's do."""
  return dtypes.is_int(dtype) and not (dtypes.is_unsigned(dtype) and dtype.itemsize >= 4)


def may_overflow(x: UOp) -> bool:
  """Whether the integer ADD, SUB, MUL, NEG or SHL `x` may leave its dtype's range where C++ does not wrap it as numpy
  does (signed overflow is undefined, which optimizers fold away; narrower types are not truncated within an
  expression), by tinygrad's value ranges: index arithmetic, whose ranges are known and small, never does; arithmetic
  on values read from buffers may."""
  if not wraps_unlike_numpy(x.dtype):
    return False
  if x.op is Ops.NEG:
    low, high = -x.src[0].vmax, -x.src[0].vmin
  elif x.op is Ops.SHL and (x.src[0].vmin < 0 or not 0 <= x.src[1].vmin <= x.src[1].vmax < 8 * x.dtype.itemsize):
    return True
  else:
    low, high = x.vmin, x.vmax
  return low < x.dtype.min or high > x.dtype.max


def _render_wrapping(ctx: DivisionGuardedRenderer, x: UOp) -> str | None:
  return _helper_call(ctx, x, WRAPPING_HELPERS[x.op]) if may_overflow(x) else None


#: Integer ADD, SUB, MUL, NEG and SHL that may leave their dtype's range rendered as calls of the renderer's
#: `division_prefix` + wrap_add ... wrap_shl: modulo 2^bits, as numpy computes; any other (index arithmetic, whose
#: ranges are known) keeps C's operator.
pm_wrapping = PatternMatcher([(UPat(tuple(WRAPPING_HELPERS), dtype=dtypes.ints, name="x"), _render_wrapping)])


def _bit_cast(ctx: PortableCppRenderer, x: UOp) -> str:
  return f"anvil::bit_cast<{ctx.render_type(x)}>({ctx[x.src[0]]})"


class PortableCppRenderer(DivisionGuardedRenderer, ClangRenderer):
  """tinygrad's C renderer, made to emit portable C++17 that g++ and clang++ both compile warning-free.

  Integer division is defined for every operand, with numpy's results: `x // 0 == 0` and `x % 0 == 0`, and the
  dtype's minimum `// -1` wraps to itself (`% -1 == 0`). C++ leaves these undefined (x86 traps), so a CDIV or CMOD
  whose divisor may be 0 or -1 becomes a call of `anvil::cdiv` / `anvil::cmod` (anvil/support.hpp); division by a
  constant other than 0 and -1 keeps the operator, so index arithmetic and float code render as tinygrad renders them.
  Integer addition, subtraction, multiplication, negation and left shift wrap modulo 2^bits, as numpy's do: where
  tinygrad's value ranges say one may leave its dtype's range, it becomes a call of `anvil::wrap_add` ...
  `anvil::wrap_shl` (unsigned arithmetic, truncated to the dtype; C++ leaves signed overflow undefined).
  """

  has_threads = False
  supports_float4 = False
  buffer_suffix = " ANVIL_RESTRICT"
  division_prefix = "anvil::"
  infinity = "HUGE_VAL"
  nan = "NAN"
  type_map = {
    **ClangRenderer.type_map,
    **{d: n for d, n in CPP_TYPES.items() if d not in (dtypes.float32, dtypes.float64)},
  }
  code_for_op = {
    **ClangRenderer.code_for_op,
    Ops.SQRT: lambda x, dtype: f"std::sqrt({x})",
    Ops.SIN: lambda x, dtype: f"std::sin({x})",
    Ops.EXP2: lambda x, dtype: f"std::exp2({x})",
    Ops.LOG2: lambda x, dtype: f"std::log2({x})",
    Ops.TRUNC: lambda x, dtype: f"std::trunc({x})",
    Ops.RECIPROCAL: lambda x, dtype: f"({'1.0f' if dtype == dtypes.float32 else '1.0'}/{x})",
  }
  # NOTE: without FDIV tinygrad keeps a/b as a*(1/b): one division per divisor, shared by every quotient (derivatives
  # of divisions divide by the same denominators many times).
  code_for_op.pop(Ops.FDIV)
  string_rewrite = (
    PatternMatcher(
      [
        (UPat(Ops.SIN, arg=COS_MARK, name="x"), lambda ctx, x: f"std::cos({ctx[x.src[0]]})"),
        (
          UPat(Ops.BITCAST, name="x"),
          lambda ctx, x: None if x.addrspace in (AddrSpace.GLOBAL, AddrSpace.LOCAL) else _bit_cast(ctx, x),
        ),
      ]
    )
    + pm_guarded_division
    + pm_wrapping
    + base_rewrite
  )

  def __init__(self) -> None:
    Renderer.__init__(self, Target("CPU", "CLANG", "x86_64,portable"))
    # NOTE: the base Compiler returns the source unchanged: rendering never runs clang.
    self.compiler = Compiler()

  def render_kernel(self, function_name, kernel, bufs, uops, prefix=None) -> str:
    if vectors := [f"{dt.name}x{n}" for dt, n in self._vector_types(uops)]:
      raise NotImplementedError(
        f"kernel {function_name} uses vector types {vectors}, which portable C++ cannot express"
      )
    params = []
    for name, (u, mutable) in bufs:
      const = "" if mutable else "const "
      params.append(
        f"{const}{self._render_dtype(u.dtype, sz=1, addrspace=u.addrspace, shape=u._shape)}{self.buffer_suffix} {name}"
      )
    body = "\n".join(kernel)
    return f"ANVIL_KERNEL void {function_name}({', '.join(params)}) {{\n{body}\n}}"

  @staticmethod
  def _vector_types(uops: list[UOp]) -> list[tuple]:
    from tinygrad.renderer.cstyle import uops_to_dtypes

    return [(dt, n) for dt, n in uops_to_dtypes(uops) if n > 1]


@dataclass(frozen=True)
class RenderedKernel:
  """One kernel as a C++ function.

  Attributes:
    name: the C++ function name.
    source: the function definition.
    params: for each parameter, the index of the schedule argument it binds.
    writes: the schedule arguments the kernel writes.
    global_size: the launch grid (GPU thread blocks per axis; one for the CPU).
    local_size: the threads of one block per axis (one for the CPU).
  """

  name: str
  source: str
  params: tuple[int, ...]
  writes: tuple[int, ...]
  global_size: tuple[int, ...]
  local_size: tuple[int, ...]

  @classmethod
  def from_program(cls, prg: UOp, name: str) -> RenderedKernel:
    """The kernel of tinygrad's PROGRAM `prg`, its function renamed `name`."""
    info = prg.arg
    source = prg.src[2].arg.replace(f" {info.function_name}(", f" {name}(", 1)
    dims = [int(d) for d in info.global_size], [int(d) for d in info.local_size or (1, 1, 1)]
    return cls(name, source, tuple(info.globals), tuple(info.outs), *(tuple(d + [1] * (3 - len(d))) for d in dims))


RENDERER = PortableCppRenderer()
#: Loops whose trip count, times the lanes already unrolled, stays within this many lanes are fully unrolled.
UNROLL_LANES = 16
#: Kernels with at most this many iterations in all are unrolled completely: straight-line code, in which tinygrad
#: folds index-dependent constants (identity seeds of small Jacobians) before the C++ compiler sees them...
FULL_UNROLL_ITERATIONS = 256
#: ...when the unrolled code stays within this many operations (iterations times the loop body's ALU operations). A
#: larger kernel (a model batched over a horizon's stages) keeps its loops: unrolling it would repeat the body per
#: stage, multiplying render and compile time for no run-time gain.
FULL_UNROLL_OPERATIONS = 1024
LOOP_AXES = (AxisType.LOOP, AxisType.WEAK, AxisType.GLOBAL, AxisType.REDUCE)


def _unroll_small_loops(hand_coded: Callable[[Scheduler], Scheduler], k: Scheduler) -> Scheduler:
  """tinygrad's hand-coded opts, then every remaining loop small enough fully unrolled (no loops, no lane selects)."""
  k = hand_coded(k)
  sizes = [r.vmax + 1 for r in k.rngs if isinstance(r.vmax, int)]
  iterations = math.prod(sizes)
  full = len(sizes) == len(k.rngs) and iterations <= FULL_UNROLL_ITERATIONS
  full = full and iterations * _body_operations(k.ast) <= FULL_UNROLL_OPERATIONS
  lanes = FULL_UNROLL_ITERATIONS if full else UNROLL_LANES
  while True:
    small = [(i, r) for i, r in enumerate(k.rngs) if r.arg[-1] in LOOP_AXES and isinstance(r.vmax, int)
             and r.vmax + 1 > 1 and k.upcast_size() * (r.vmax + 1) <= lanes]  # fmt: skip
    if not small:
      return k
    i, r = small[0]
    reduce = r.arg[-1] is AxisType.REDUCE
    try:
      k.apply_opt(Opt(OptOps.UNROLL, k.unrollable_dims.index(i), 0) if reduce else Opt(OptOps.UPCAST, i, 0))
    except KernelOptError:
      k.shift_to(r, r.vmax + 1, AxisType.UNROLL if reduce else AxisType.UPCAST)


def _body_operations(ast: UOp) -> int:
  """The ALU operations of one iteration of a kernel's loops (index arithmetic included)."""
  return sum(1 for u in ast.toposort() if u.op in GroupOp.ALU)


@contextmanager
def _small_loops_unrolled() -> Iterator[None]:
  # NOTE: apply_opts imports hand_coded_optimizations at call time, so swapping the module attribute for the length of
  # one to_program call changes the opts of anvil's kernels only; anvil's renderer type keys tinygrad's program cache.
  original = heuristic.hand_coded_optimizations
  heuristic.hand_coded_optimizations = lambda k: _unroll_small_loops(original, k)
  try:
    yield
  finally:
    heuristic.hand_coded_optimizations = original


def render_kernel(ast: UOp, name: str) -> RenderedKernel:
  """Lower one scheduled kernel AST to a C++ function called `name`."""
  # NOTE: the linearizer orders equal-priority uops by their args, and None (sin) cannot be compared with "cos".
  with Context(TUPLE_ORDER=0), _small_loops_unrolled():
    prg = to_program(graph_rewrite(ast, pm_mark_cos, name="anvil mark cos"), RENDERER)
  return RenderedKernel.from_program(prg, name)
