"""The backend registry: the `QPBackend` that solves the QPs of each QP solver's options (`qp_backend`); the options
stay plain data."""

from __future__ import annotations

from typing import Any

from anvil.qp.backend import QPBackend, QPProblem
from anvil.qp.options import OSQPOptions, QPOptions, RiccatiOptions, SparseIPMOptions
from anvil.qp.osqp import OSQPBackend
from anvil.qp.riccati_backend import RiccatiBackend
from anvil.qp.sparse_ipm import SparseIPMBackend

#: The backend class of each options class.
BACKENDS: dict[type, type[QPBackend[Any]]] = {
  OSQPOptions: OSQPBackend,
  RiccatiOptions: RiccatiBackend,
  SparseIPMOptions: SparseIPMBackend,
}


def qp_backend(options: QPOptions, name: str, problem: QPProblem) -> QPBackend[Any]:
  """The backend of `options`' solver for `problem` (its patterns; the Riccati backend's must carry a stage layout),
  C++ namespace `name`."""
  if type(options) not in BACKENDS:
    raise TypeError(f"{name}: QP options must be one of {', '.join(t.__name__ for t in BACKENDS)}, got "
                    f"{type(options).__name__}")  # fmt: skip
  return BACKENDS[type(options)](name, problem, options)
