"""The SQP solver's JIT boundary, declared once (`anvil.codegen.boundary`): a call's bounds (`SQP_BOUNDS`), its limits
(`SQP_OPTIONS`, whose first three fields, `LIMITS`, the controllers and estimators built on it share) and the scalars
it writes beside its arrays (`SQP_SCALARS`), each emitted as the C++ struct of the solver's module (the scalars: of its
JIT entry point) and mirrored by the ctypes structure Python fills or reads (`Struct.mirror`)."""

from __future__ import annotations

from anvil.codegen.boundary import BoundaryCode, Field, Struct, boundary_code

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


def sqp_boundary(name: str) -> BoundaryCode:
  """The C++ of the SQP module `name`'s boundary structs (its JIT entry point's scalars included)."""
  return boundary_code(((SQP_BOUNDS, f"{name}::Bounds"), (SQP_OPTIONS, f"{name}::Options"),
                        (SQP_SCALARS, "anvil::jit::SQPScalars")), sqp=name)  # fmt: skip
