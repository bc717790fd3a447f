"""CUDA and Metal rendering of tinygrad kernels: tinygrad's own GPU renderers, made to render without a GPU or a GPU
compiler and to emit kernels that share one source (one NVRTC program or Metal library per function)."""

from __future__ import annotations

import math
import struct

from tinygrad import dtypes
from tinygrad.codegen import to_program
from tinygrad.device import Compiler
from tinygrad.helpers import Context, Target
from tinygrad.renderer import Renderer
from tinygrad.renderer.cstyle import CStyleLanguage, CUDARenderer, MetalRenderer, uops_to_dtypes
from tinygrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite

from anvil.codegen.renderer import (
  COS_MARK,
  COS_PATTERN,
  DivisionGuardedRenderer,
  RenderedKernel,
  mark_cos,
  pm_guarded_division,
  pm_wrapping,
)

#: pi/2 in float64 and rounded to float32: float32 kernels carry the rounded constant.
HALF_PI = (math.pi / 2, struct.unpack("<f", struct.pack("<f", math.pi / 2))[0])
#: Dtypes a GPU kernel may not compute in: those needing headers the kernel source does not include.
UNSUPPORTED_DTYPES = frozenset((dtypes.half, dtypes.bfloat16, *dtypes.fp8s))
#: anvil_cdiv and anvil_cmod of a GPU kernel source, as anvil/support.hpp defines them (x / 0 == 0, x % 0 == 0, and
#: MIN / -1 == MIN), declared with the qualifiers {q}; {u} spells the 64-bit unsigned type the negation wraps in.
DIVISION = (
  "template <class T> {q} T anvil_cdiv(T a, T b) {{ return b == T(0) ? T(0) : T(-1) < T(0) && b == T(-1) ? "
  "T(({u})0 - ({u})a) : T(a / b); }}\ntemplate <class T> {q} T anvil_cmod(T a, T b) {{ return b == T(0) || "
  "(T(-1) < T(0) && b == T(-1)) ? T(0) : T(a % b); }}"
)
#: anvil_wrap_add ... anvil_wrap_shl of a GPU kernel source, as anvil/support.hpp defines them (modulo 2^bits, computed
#: in the 64-bit unsigned type {u}, whose low bits are T's), declared with the qualifiers {q}.
WRAPPING = "\n".join(
  f"template <class T> {{q}} T anvil_wrap_{name}({params}) {{{{ return T({body}); }}}}"
  for name, params, body in (
    ("add", "T a, T b", "({u})a + ({u})b"),
    ("sub", "T a, T b", "({u})a - ({u})b"),
    ("mul", "T a, T b", "({u})a * ({u})b"),
    ("neg", "T a", "({u})0 - ({u})a"),
    ("shl", "T a, T b", "(T(-1) < T(0) && b < T(0)) || b >= T(8 * sizeof(T)) ? ({u})0 : ({u})a << b"),
  )
)
#: What each device's kernel source starts with, once per function (tinygrad repeats it per kernel).
PRELUDES = {
  "CUDA": "template <class T, class F> __device__ __forceinline__ T tg_bitcast(F v) { union U { F f; T t; }; U u; "
  "u.f = v; return u.t; }\n"
  + "\n".join(h.format(q="__device__ __forceinline__", u="unsigned long long") for h in (DIVISION, WRAPPING)),
  "METAL": "#include <metal_stdlib>\nusing namespace metal;\n"
  + "\n".join(h.format(q="inline", u="ulong") for h in (DIVISION, WRAPPING)),
}


def _mark_cos(s: UOp, c: UOp, x: UOp, m: UOp) -> UOp | None:
  return mark_cos(s, c, x, m, HALF_PI)


pm_mark_cos = PatternMatcher([(COS_PATTERN, _mark_cos)])


def _check_dtypes(renderer: CStyleLanguage, function_name: str, uops: list[UOp]) -> None:
  unsupported = UNSUPPORTED_DTYPES | ({dtypes.float64} if renderer.target.device == "METAL" else set())
  if bad := sorted({dt.name for dt, _ in uops_to_dtypes(uops) if dt in unsupported}):
    hint = " (Metal has no float64: make every input, constant and cast float32)" if "double" in bad else ""
    raise TypeError(f"kernel {function_name} computes in {', '.join(bad)}, which {renderer.target.device} cannot{hint}")


class _SharedSourceRenderer(DivisionGuardedRenderer):
  """What anvil changes in both of tinygrad's GPU renderers: a fixed target, no compiler or tensor cores at render
  time, the dtypes checked, and no per-kernel prelude (the function's source starts with PRELUDES once).

  Integer division follows the CPU's rule (see `PortableCppRenderer`): where the divisor may be 0 or -1 it calls the
  prelude's anvil_cdiv / anvil_cmod. GPUs do not trap there, but CUDA and Metal leave the results unspecified; the
  helpers make them numpy's, the same on every device."""

  gpu_target: Target
  division_prefix = "anvil_"

  def __init__(self) -> None:
    Renderer.__init__(self, self.gpu_target)
    self.compiler, self.tensor_cores = Compiler(), []

  def render_kernel(self, function_name, kernel, bufs, uops, prefix=None) -> str:
    _check_dtypes(self, function_name, uops)
    return CStyleLanguage.render_kernel(self, function_name, kernel, bufs, uops)


class AnvilCudaRenderer(_SharedSourceRenderer, CUDARenderer):
  """tinygrad's CUDA renderer without NVRTC at render time, tensor cores or per-kernel preludes."""

  # NOTE: the arch only gates half/bfloat16/fp8 and tensor cores, which anvil does not use: one rendering serves
  # every GPU, and the module compiles it for the device it finds at run time.
  gpu_target = Target("CUDA", "CUDA", "sm_75")
  infinity = "__int_as_float(0x7f800000)"
  nan = "__int_as_float(0x7fffffff)"
  type_map = {**CUDARenderer.type_map, dtypes.uint32: "unsigned int"}
  string_rewrite = (
    PatternMatcher([(UPat(Ops.SIN, arg=COS_MARK, name="x"), lambda ctx, x: f"cos({ctx[x.src[0]]})")])
    + pm_guarded_division
    + pm_wrapping
    + CUDARenderer.string_rewrite
  )


class AnvilMetalRenderer(_SharedSourceRenderer, MetalRenderer):
  """tinygrad's Metal renderer without the Metal compiler at render time, tensor cores or per-kernel preludes."""

  gpu_target = Target("METAL", "METAL", "portable")
  string_rewrite = (
    PatternMatcher([(UPat(Ops.SIN, arg=COS_MARK, name="x"), lambda ctx, x: f"precise::cos({ctx[x.src[0]]})")])
    + pm_guarded_division
    + pm_wrapping
    + MetalRenderer.string_rewrite
  )


RENDERERS: dict[str, CStyleLanguage] = {"CUDA": AnvilCudaRenderer(), "METAL": AnvilMetalRenderer()}


def render_gpu_kernel(ast: UOp, name: str, device: str) -> RenderedKernel:
  """Lower one scheduled kernel AST to a `device` kernel called `name` (tinygrad's GPU heuristics pick the launch)."""
  with Context(TUPLE_ORDER=0):
    prg = to_program(graph_rewrite(ast, pm_mark_cos, name="anvil mark cos"), RENDERERS[device])
  return RenderedKernel.from_program(prg, name)
