"""The structs of a call's boundary, declared once: the scalars a controller's or an estimator's JIT call writes beside
its arrays (`CALL_SCALARS`, emitted as the C++ struct its entry point fills by templates/call_scalars.j2), and a
controller call's bounds (`CALL_BOUNDS`) and limits and run-time values (`CALL_OPTIONS`), emitted as its module's
`Bounds` and `Options` by templates/mpc_call.hpp.j2. Each is mirrored by the ctypes structure Python fills or reads
(`CallScalars`, `CallBounds`, `CallOptions`), so both sides name the same fields in the same order."""

from __future__ import annotations

import ctypes
from typing import Any

from anvil.mpc.result import FALLBACKS

#: (name, count) of each field, in order: the most violated constraint's violation and value (anvil::sqp::export_stats),
#: the cost, the solve's seconds, the fallback's code, the SQP's seconds in evaluations, QP updates, QP solves and the
#: line search, the call's SQP iterations, and whether it restarted cold (1.0) after a failed warm start.
CALL_SCALARS = (("worst", 2), ("cost", 1), ("solve_time", 1), ("fallback", 1), ("times", 4), ("iterations", 1),
                ("restarted_cold", 1))  # fmt: skip


#: A controller call's bounds per stage (its module's `Bounds`: pointers to the controller's reals, row-major, ±inf: no
#: bound): lbx/ubx (N + 1) x nx (row 0 unused: x_0 = x0), lbu/ubu N x nu, lbh/ubh N x nh, lbhN/ubhN nhN.
CALL_BOUNDS = ("lbx", "ubx", "lbu", "ubu", "lbh", "ubh", "lbhN", "ubhN")
#: A controller call's limits and run-time values (its module's `Options`): (name, C++ type, default, what it is); a
#: default `sqp::<constant>` is the build-time value of the controller's SQP solver.
CALL_OPTIONS = (
  ("max_iter", "int", "sqp::max_iter", "SQP iterations (at most the build-time limit)"),
  ("tol", "double", "sqp::tol", "convergence tolerance"),
  ("max_time", "double", "sqp::max_time", "time limit (s)"),
  ("tuning", "const real*", "nullptr", "n_tuning weights and penalties (nullptr: tuning_default)"),
  ("u_prev", "const real*", "nullptr", "the input applied before (nullptr: the last u[0..nu) returned)"),
)
_CTYPES: dict[str, type[ctypes.c_int] | type[ctypes.c_double] | type[ctypes.c_void_p]] = {
  "int": ctypes.c_int, "double": ctypes.c_double, "const real*": ctypes.c_void_p,
}  # fmt: skip


class CallBounds(ctypes.Structure):
  """The ctypes mirror of a controller module's `Bounds` (CALL_BOUNDS' pointers)."""

  _fields_ = [(name, ctypes.c_void_p) for name in CALL_BOUNDS]


class CallOptions(ctypes.Structure):
  """The ctypes mirror of a controller module's `Options` (CALL_OPTIONS' fields)."""

  _fields_ = [(name, _CTYPES[kind]) for name, kind, _, _ in CALL_OPTIONS]


class CallScalars(ctypes.Structure):
  """The ctypes mirror of the C++ `anvil::jit::CallScalars` (doubles, CALL_SCALARS' fields)."""

  _fields_ = [(name, ctypes.c_double * count if count > 1 else ctypes.c_double) for name, count in CALL_SCALARS]

  def outcome(self) -> dict[str, Any]:
    """The fields MPCSolution and MHEEstimate take from them: iterations, cost, solve_time, fallback."""
    return {"iterations": int(self.iterations), "cost": float(self.cost), "solve_time": float(self.solve_time),
            "fallback": FALLBACKS[int(self.fallback)]}  # fmt: skip


def layout(struct: type[ctypes.Structure]) -> tuple[tuple[str, int], ...]:
  """(field, byte offset) of each field of a ctypes mirror, then ("", its size): the C++ side asserts the same
  (templates/call_scalars.j2), so a mirror that drifts from its struct fails to compile instead of misreading."""
  return (*((name, int(getattr(struct, name).offset)) for name, *_ in struct._fields_), ("", ctypes.sizeof(struct)))


#: The JIT boundary's structs with their mirrors' layouts, as the C++ names them: an estimator's entry point fills
#: CallScalars; a controller's also takes its module's Bounds and Options ("@": the controller's namespace).
ESTIMATOR_LAYOUTS = (("anvil::jit::CallScalars", layout(CallScalars)),)
CONTROLLER_LAYOUTS = (*ESTIMATOR_LAYOUTS, ("@::Bounds", layout(CallBounds)), ("@::Options", layout(CallOptions)))
