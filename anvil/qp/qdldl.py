"""QDLDL, the sparse LDLᵀ factorization in OSQP's sources, alone: for the C++ that factors KKT systems without an OSQP
solver (anvil/kkt.hpp: the sparse interior point, the solution sensitivities)."""

from __future__ import annotations

import functools

import scipy.sparse as sp

from anvil.qp.options import OSQPOptions
from anvil.qp.osqp import INCLUDE_DIRS, EmbeddedOSQP


@functools.cache
def qdldl_files() -> dict[str, str]:
  """QDLDL alone: `osqp/src/qdldl.c` and the headers it needs, at the paths OSQP's own files have, under INCLUDE_DIRS
  (for ActiveSetKKT in a module without an OSQP solver).

  NOTE: from the files of a 1x1 OSQP solver the wheel generates: its `osqp_configure.h` (the types and embedded mode
  QDLDL's headers include) exists only as the wheel's codegen() writes it."""
  one = sp.csc_array(sp.eye_array(1, format="csc"))
  files = EmbeddedOSQP("anvil_qdldl_", one, one, OSQPOptions()).files
  keep = lambda path: path == "osqp/src/qdldl.c" or (path.endswith(".h") and "workspace" not in path)
  return {path: text for path, text in files.items() if keep(path)}


class UsesQDLDL:
  """For a backend whose C++ factors KKT systems with QDLDL alone (anvil/kkt.hpp): its sources and include folders."""

  def extra_files(self) -> dict[str, str]:
    """QDLDL from OSQP's sources."""
    return qdldl_files()

  @property
  def include_dirs(self) -> tuple[str, ...]:
    """QDLDL's include folders among the extra files."""
    return INCLUDE_DIRS
