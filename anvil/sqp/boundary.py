"""The SQP solver's JIT boundary, declared once (`anvil.codegen.boundary`): a call's bounds (`SQP_BOUNDS`), its limits
(`SQP_OPTIONS`, whose first three fields, `LIMITS`, the controllers and estimators built on it share) and the scalars
it writes beside its arrays (`SQP_SCALARS`), each emitted as the C++ struct of the solver's module (the scalars: of its
JIT entry point) and mirrored by the ctypes structure Python fills or reads."""

from __future__ import annotations

import ctypes

from anvil.codegen.boundary import Field, Struct, layout_asserts

#: A call's limits: defaults are the build-time values of the SQP solver `{sqp}` (its namespace).
LIMITS = (
  Field("max_iter", "int", "SQP iterations (at most the build-time limit)", "::{sqp}::max_iter"),
  Field("tol", "double", "convergence tolerance", "::{sqp}::tol"),
  Field("max_time", "double", "time limit (s)", "::{sqp}::max_time"),
)
SQP_BOUNDS = Struct("Bounds", "A call's bounds (±HUGE_VAL: no bound): lbx, ubx (nx) and lbg, ubg (ng).", tuple(
  Field(name, "const real*") for name in ("lbx", "ubx", "lbg", "ubg")
))  # fmt: skip
SQP_OPTIONS = Struct("Options", "A call's limits, by name (each defaults to the build-time one).", (
  *LIMITS,
  Field("estimate_multipliers", "bool", "lam_g0 is unknown (zeros): the equality rows' are estimated at x0", "false"),
))  # fmt: skip
#: What a call writes beside its arrays: the most violated constraint's violation and value (anvil::sqp::export_stats)
#: and the seconds spent in evaluations, QP updates, QP solves and the line search.
SQP_SCALARS = Struct("SQPScalars", "What a call writes beside its arrays (anvil/sqp/boundary.py).", (
  Field("worst", "double", count=2), Field("times", "double", count=4),
))  # fmt: skip


class SQPBounds(ctypes.Structure):
  """The ctypes mirror of an SQP module's `Bounds`."""

  _fields_ = SQP_BOUNDS.ctypes_fields()


class SQPCallOptions(ctypes.Structure):
  """The ctypes mirror of an SQP module's `Options`."""

  _fields_ = SQP_OPTIONS.ctypes_fields()


class SQPScalars(ctypes.Structure):
  """The ctypes mirror of the JIT entry point's `anvil::jit::SQPScalars`."""

  _fields_ = SQP_SCALARS.ctypes_fields()


def sqp_layout_asserts(name: str) -> str:
  """The C++ checks that the SQP module `name`'s boundary structs match their mirrors (its JIT entry point's)."""
  mirrors = ((SQPBounds, f"{name}::Bounds"), (SQPCallOptions, f"{name}::Options"),
             (SQPScalars, "anvil::jit::SQPScalars"))  # fmt: skip
  return "".join(layout_asserts(mirror, qualified) for mirror, qualified in mirrors)
