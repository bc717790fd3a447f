"""The controllers' and estimators' JIT boundary, declared once (`anvil.codegen.boundary`): the scalars a call writes
beside its arrays (`CALL_SCALARS`, the JIT entry point's `anvil::jit::CallScalars`), a controller call's bounds
(`CALL_BOUNDS`) and its limits and run-time values (`CALL_OPTIONS`), emitted as its module's `Bounds` and `Options`,
and an estimator call's limits (`MHE_OPTIONS`, its module's `Options`). Each is mirrored by the ctypes structure
Python fills or reads (`Struct.mirror`)."""

from __future__ import annotations

from typing import Any

from anvil.codegen.boundary import BoundaryCode, Field, Struct, boundary_code
from anvil.mpc.result import FALLBACKS
from anvil.sqp.boundary import LIMITS, SQP_SCALARS, stats_export

#: The cost, the solve's seconds, the fallback's code, the call's SQP iterations (both solves' where it restarted), and
#: whether it restarted cold (1.0) after a failed warm start (beside the SQP's own: anvil.sqp.boundary.SQP_SCALARS).
CALL_SCALARS = Struct("CallScalars", "What a call writes beside its arrays (anvil/mpc/boundary.py).", tuple(
  Field(name, "double") for name in ("cost", "solve_time", "fallback", "iterations", "restarted_cold")
))  # fmt: skip
CALL_BOUNDS = Struct("Bounds", "A call's bounds per stage, row-major (±HUGE_VAL: no bound): lbx/ubx (N + 1) x nx "
                     "(row 0 unused: x_0 = x0),\nlbu/ubu N x nu, lbh/ubh N x nh, lbhN/ubhN nhN.", tuple(
  Field(name, "const real*") for name in ("lbx", "ubx", "lbu", "ubu", "lbh", "ubh", "lbhN", "ubhN")
))  # fmt: skip
#: A controller call's run-time values, beside its limits.
RUN_TIME_VALUES = (
  Field("tuning", "const real*", "n_tuning weights and penalties (nullptr: tuning_default)", "nullptr"),
  Field("u_prev", "const real*", "the input applied before (nullptr: the last u[0..nu) returned)", "nullptr"),
)
CALL_OPTIONS = Struct("Options", "A call's limits and run-time values, by name (each defaults to the build-time one).",
                      (*LIMITS, *RUN_TIME_VALUES))  # fmt: skip
MHE_OPTIONS = Struct("Options", "A call's limits, by name (each defaults to the build-time one).", LIMITS)
#: What every call writes beside its arrays: its SQP's scalars, then its own, in the JIT entry point's namespace.
SCALARS = ((SQP_SCALARS, "anvil::jit::SQPScalars"), (CALL_SCALARS, "anvil::jit::CallScalars"))


def outcome(scalars: Any) -> dict[str, Any]:
  """The fields MPCSolution and MHEEstimate take from a call's CallScalars: iterations, cost, solve_time, fallback."""
  return {"iterations": int(scalars.iterations), "cost": float(scalars.cost), "solve_time": float(scalars.solve_time),
          "fallback": FALLBACKS[int(scalars.fallback)]}  # fmt: skip


def controller_boundary(name: str, sqp: str) -> BoundaryCode:
  """The C++ of the controller module `name`'s boundary structs (limits defaulting to its SQP solver `sqp`'s)."""
  return boundary_code((*SCALARS, (CALL_BOUNDS, f"{name}::Bounds"), (CALL_OPTIONS, f"{name}::Options")),
                       stats_export(), sqp=sqp)  # fmt: skip


def estimator_boundary(name: str, sqp: str) -> BoundaryCode:
  """The C++ of the estimator module `name`'s boundary structs (limits defaulting to its SQP solver `sqp`'s)."""
  return boundary_code((*SCALARS, (MHE_OPTIONS, f"{name}::Options")), stats_export(), sqp=sqp)
