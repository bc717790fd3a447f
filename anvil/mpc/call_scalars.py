"""The scalars a controller's or an estimator's JIT call writes beside its arrays, declared once: `CALL_SCALARS` is
emitted as the C++ struct its entry point fills (templates/call_scalars.j2) and mirrored by the ctypes structure Python
reads (`CallScalars`), so both sides name the same fields in the same order."""

from __future__ import annotations

import ctypes
from typing import Any

from anvil.mpc.result import FALLBACKS

#: (name, count) of each field, in order: the most violated constraint's violation and value (anvil::sqp::export_stats),
#: the cost, the solve's seconds, the fallback's code, the SQP's seconds in evaluations, QP updates, QP solves and the
#: line search, the call's SQP iterations, and whether it restarted cold (1.0) after a failed warm start.
CALL_SCALARS = (("worst", 2), ("cost", 1), ("solve_time", 1), ("fallback", 1), ("times", 4), ("iterations", 1),
                ("restarted_cold", 1))  # fmt: skip


class CallScalars(ctypes.Structure):
  """The ctypes mirror of the C++ `anvil::jit::CallScalars` (doubles, CALL_SCALARS' fields)."""

  _fields_ = [(name, ctypes.c_double * count if count > 1 else ctypes.c_double) for name, count in CALL_SCALARS]

  def outcome(self) -> dict[str, Any]:
    """The fields MPCSolution and MHEEstimate take from them: iterations, cost, solve_time, fallback."""
    return {"iterations": int(self.iterations), "cost": float(self.cost), "solve_time": float(self.solve_time),
            "fallback": FALLBACKS[int(self.fallback)]}  # fmt: skip
