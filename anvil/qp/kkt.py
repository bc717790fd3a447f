"""`ActiveSetKKT`: the fixed pattern of a QP's active-set KKT matrix [[P, Aᵀ], [A, -D]] in a banded order, the
tables that fill it, and the sizes of its LDLᵀ factorization (the C++ is anvil/kkt.hpp).

ADMM (OSQP) reaches the active set of a QP long before it reaches high accuracy. Polishing guesses the active set
from the ADMM iterate and solves the equality-constrained KKT system directly (with QDLDL, shipped in OSQP's sources),
as OSQP's own polish does in its full build (embedded builds lack it); the same factorization tells whether P is
convex on the null space of the active rows (an inertia test). Inactive constraint rows are decoupled by zeroing their
A entries and putting -1 on their diagonal, so the pattern, the ordering and the symbolic factorization are fixed at
code generation and each use only refactors numerically.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee


@dataclass(frozen=True, eq=False)
class ActiveSetKKT:
  """KKT pattern of min ½dᵀPd + qᵀd s.t. l ≤ Ad ≤ u for fixed patterns of P (upper triangle, full diagonal) and A.

  Attributes:
    p_pattern: CSC pattern of P (upper triangle).
    a_pattern: CSC pattern of A.
  """

  p_pattern: sp.csc_array
  a_pattern: sp.csc_array

  @cached_property
  def _layout(self) -> tuple[sp.csc_array, np.ndarray, dict[str, tuple[int, ...]]]:
    n, m = self.p_pattern.shape[0], self.a_pattern.shape[0]
    # entries tagged by their source: 1 + k for P's k-th entry, 1 + nnzP + k for A's, 1 + nnzP + nnzA + i diag of y
    p = sp.coo_array(sp.csc_array((np.arange(1, self.p_pattern.nnz + 1), self.p_pattern.indices,
                                   self.p_pattern.indptr), shape=(n, n)))  # fmt: skip
    a_tags = np.arange(1, self.a_pattern.nnz + 1) + self.p_pattern.nnz
    a = sp.coo_array(sp.csc_array((a_tags, self.a_pattern.indices, self.a_pattern.indptr), shape=(m, n)))
    rows = np.concatenate([p.row, a.col, n + np.arange(m)])
    cols = np.concatenate([p.col, n + a.row, n + np.arange(m)])
    tags = np.concatenate([p.data, a.data, 1 + self.p_pattern.nnz + self.a_pattern.nnz + np.arange(m)])
    size = n + m
    symmetric = sp.csr_array((np.ones(2 * rows.size), (np.concatenate([rows, cols]), np.concatenate([cols, rows]))),
                             shape=(size, size))  # fmt: skip
    order = np.asarray(reverse_cuthill_mckee(symmetric, symmetric_mode=True), dtype=np.int64)
    position = np.empty(size, dtype=np.int64)
    position[order] = np.arange(size)
    pr, pc = position[rows], position[cols]
    upper_r, upper_c = np.minimum(pr, pc), np.maximum(pr, pc)
    k = sp.csc_array((tags.astype(np.float64), (upper_r, upper_c)), shape=(size, size))
    k.sort_indices()
    where = np.empty(tags.size, dtype=np.int64)
    where[k.data.astype(np.int64) - 1] = np.arange(k.nnz)
    nnz_p, nnz_a = self.p_pattern.nnz, self.a_pattern.nnz
    diagonal = np.flatnonzero(self.p_pattern.indices == np.repeat(np.arange(n), np.diff(self.p_pattern.indptr)))
    if diagonal.size != n:
      raise ValueError("ActiveSetKKT: P's pattern must hold its full diagonal")
    tables = {
      "P_to_K": tuple(int(v) for v in where[:nnz_p]),
      "Pdiag_to_K": tuple(int(v) for v in where[diagonal]),
      "A_to_K": tuple(int(v) for v in where[nnz_p : nnz_p + nnz_a]),
      "ydiag_to_K": tuple(int(v) for v in where[nnz_p + nnz_a :]),
      "K_perm": tuple(int(v) for v in position),
      "K_p": tuple(int(v) for v in k.indptr),
      "K_i": tuple(int(v) for v in k.indices),
      "A_p": tuple(int(v) for v in self.a_pattern.indptr),
      "A_i": tuple(int(v) for v in self.a_pattern.indices),
    }
    return k, position, tables

  @property
  def size(self) -> int:
    """Rows of the KKT matrix, n + m."""
    return self.p_pattern.shape[0] + self.a_pattern.shape[0]

  @property
  def nnz(self) -> int:
    """Stored entries of its upper triangle."""
    return self._layout[0].nnz

  @property
  def tables(self) -> dict[str, tuple[int, ...]]:
    """Index tables for the generated code: where P's entries, P's diagonal, A's entries and the y-diagonal's values
    go in K, the permutation (K_perm[i]: position of unknown i, x first then y), K's and A's CSC patterns."""
    return self._layout[2]

  @property
  def buffers(self) -> tuple[tuple[str, str, int], ...]:
    """(C++ type, name, size) of every buffer the factorization, the solve and the polish use (anvil/kkt.hpp)."""
    n, m, size, l_nnz = self.p_pattern.shape[0], self.a_pattern.shape[0], self.size, max(self.l_nnz, 1)
    doubles = [("Kx", self.nnz), ("Lx", l_nnz), *((v, size) for v in ("D", "Dinv", "fwork", "ksol", "krhs", "kres")),
               ("polish_d", n), ("polish_y", m)]  # fmt: skip
    ints = [("Li", l_nnz), ("Lp", size + 1), ("Lnz", size), ("etree", size), ("iwork", 3 * size), ("bwork", size),
            ("active", m), ("previous_active", m)]  # fmt: skip
    return (*(("double", v, k) for v, k in doubles), *(("int", v, k) for v, k in ints))

  @cached_property
  def l_nnz(self) -> int:
    """Nonzeros of the LDLᵀ factor's strictly lower part L (elimination tree column counts, Liu's algorithm)."""
    k = self._layout[0]
    size = k.shape[0]
    parent, mark, counts = np.full(size, -1), np.full(size, -1), np.zeros(size, dtype=np.int64)
    for j in range(size):
      mark[j] = j
      for i in k.indices[k.indptr[j] : k.indptr[j + 1]]:
        while i < j and mark[i] != j:
          if parent[i] == -1:
            parent[i] = j
          counts[i] += 1
          mark[i] = j
          i = parent[i]
    return int(counts.sum())
