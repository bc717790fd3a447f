"""The SQP solver's JIT boundary, declared once (`anvil.codegen.boundary`): a call's bounds (`SQP_BOUNDS`), its limits
(`SQP_OPTIONS`, whose first three fields, `LIMITS`, the controllers and estimators built on it share) and the scalars
it writes beside its history (`SQP_SCALARS`), each emitted as the C++ struct of the solver's module (the scalars: of
its JIT entry point) and mirrored by the ctypes structure Python fills or reads (`Struct.mirror`); the history's
columns (`HISTORY_COLUMNS`, `IHISTORY_COLUMNS`) and the scalars are filled by name by `stats_export`'s C++."""

from __future__ import annotations

from pathlib import Path

from anvil.codegen.base import render_template
from anvil.codegen.boundary import BoundaryCode, Field, Struct, boundary_code

TEMPLATES = Path(__file__).parent / "templates"

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
#: The per-iteration history a call exports (anvil::sqp::Stats's arrays, by name): its double columns and its int ones.
HISTORY_COLUMNS = (
  "objective",
  "primal_infeasibility",
  "dual_infeasibility",
  "step",
  "regularization",
  "complementarity",
)
IHISTORY_COLUMNS = ("qp_iterations", "qp_status", "restoration")
#: What a call writes beside its history (anvil::sqp::Stats's scalars, by name): its iterations and status, the function
#: and output entry that returned NaN/inf (-1: none), the most violated constraint (-1: none), its violation and
#: value, and the seconds spent in evaluations, QP updates, QP solves and the line search.
SQP_SCALARS = Struct("SQPScalars", "What an SQP call writes beside its history (anvil/sqp/boundary.py).", (
  *(Field(name, "int") for name in ("iterations", "status", "failed_function", "failed_index", "worst_constraint")),
  *(Field(name, "double") for name in ("worst_violation", "worst_value", "time_evaluation", "time_qp_update",
                                        "time_qp_solve", "time_line_search")),
))  # fmt: skip


def stats_export() -> str:
  """The C++ `export_sqp(stats, history, ihistory, scalars)` that fills a JIT call's history and SQPScalars."""
  return render_template("stats_export.hpp.j2", folder=TEMPLATES, history=HISTORY_COLUMNS, ihistory=IHISTORY_COLUMNS,
                         scalars=SQP_SCALARS.names)  # fmt: skip


def sqp_boundary(name: str) -> BoundaryCode:
  """The C++ of the SQP module `name`'s boundary structs (its JIT entry point's scalars included)."""
  return boundary_code(((SQP_BOUNDS, f"{name}::Bounds"), (SQP_OPTIONS, f"{name}::Options"),
                        (SQP_SCALARS, "anvil::jit::SQPScalars")), stats_export(), sqp=name)  # fmt: skip
