"""`ActiveSetKKT`: the fixed pattern of a QP's KKT matrix [[P, Aᵀ], [A, -D]] in a fill-reducing order, the tables
that fill it, and the sizes of its LDLᵀ factorization (the C++ is anvil/kkt.hpp).

ADMM (OSQP) reaches the active set of a QP long before it reaches high accuracy. Polishing guesses the active set
from the ADMM iterate and solves the equality-constrained KKT system directly (with QDLDL, shipped in OSQP's sources),
as OSQP's own polish does in its full build (embedded builds lack it); the same factorization tells whether P is
convex on the null space of the active rows (an inertia test). Inactive constraint rows are decoupled by zeroing their
A entries and putting -1 on their diagonal, so the pattern, the ordering and the symbolic factorization are fixed at
code generation and each use only refactors numerically. The sparse interior point (anvil/sparse_ipm.hpp) factors
the same pattern with its barrier weights on the rows' diagonal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee
from scipy.sparse.linalg import splu


@dataclass(frozen=True, eq=False)
class ActiveSetKKT:
  """KKT pattern of min ½dᵀPd + qᵀd s.t. l ≤ Ad ≤ u for fixed patterns of P (upper triangle) and A; K's pattern
  holds P's whole diagonal whether P's does or not (its regularization).

  Attributes:
    p_pattern: CSC pattern of P (upper triangle).
    a_pattern: CSC pattern of A.
  """

  p_pattern: sp.csc_array
  a_pattern: sp.csc_array

  @cached_property
  def _entries(self) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) in K of P's entries, A's (transposed into the upper block), P's diagonal and the rows' diagonal,
    unknowns in natural order (d first, then the rows' multipliers)."""
    n, m = self.p_pattern.shape[0], self.a_pattern.shape[0]
    p, a = sp.coo_array(self.p_pattern), sp.coo_array(self.a_pattern)
    diagonal = np.arange(n + m)
    return np.concatenate([p.row, a.col, diagonal]), np.concatenate([p.col, n + a.row, diagonal])

  def _orders(self) -> list[np.ndarray]:
    """The candidate elimination orders: reverse Cuthill-McKee (banded: stage-structured problems) and SuperLU's
    minimum degree on K + Kᵀ (general sparse problems)."""
    rows, cols = self._entries
    n, size = self.p_pattern.shape[0], self.size
    symmetric = sp.csc_array((np.ones(2 * rows.size), (np.concatenate([rows, cols]), np.concatenate([cols, rows]))),
                             shape=(size, size))  # fmt: skip
    orders = [np.asarray(reverse_cuthill_mckee(sp.csr_array(symmetric), symmetric_mode=True), dtype=np.int64)]
    # NOTE: only the column ordering SuperLU computes is used; the values make K quasi-definite (nonsingular), so the
    # factorization that comes with it cannot fail
    diagonal = np.where(rows < n, 1.0, -1.0)
    values = sp.csc_array((np.where(rows == cols, diagonal, 1e-3), (rows, cols)), shape=(size, size))
    full = sp.csc_array(values + sp.triu(values, k=1).T)
    if size > 1:
      perm = splu(full, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True}).perm_c.astype(np.int64)
      orders += [perm, np.argsort(perm)]
    return orders

  def _symbolic(self, order: np.ndarray) -> tuple[np.ndarray, sp.csc_array, tuple[list[int], list[int]]]:
    """For the unknowns in `order`: their positions, K's upper triangle (entries: 1) and its elimination tree."""
    rows, cols = self._entries
    position = np.empty(self.size, dtype=np.int64)
    position[order] = np.arange(self.size)
    pr, pc = position[rows], position[cols]
    k = sp.csc_array((np.ones(rows.size), (np.minimum(pr, pc), np.maximum(pr, pc))), shape=(self.size, self.size))
    k.sum_duplicates()
    k.sort_indices()
    return position, k, _elimination_tree(k)

  @cached_property
  def _layout(self) -> tuple[sp.csc_array, dict[str, tuple[int, ...]]]:
    """K's pattern and the tables, in the candidate order whose factor has the least fill."""
    n, size = self.p_pattern.shape[0], self.size
    position, k, (parent, counts) = min((self._symbolic(o) for o in self._orders()), key=lambda s: sum(s[2][1]))
    rows, cols = self._entries
    pr, pc = position[rows], position[cols]
    keys = np.repeat(np.arange(size), np.diff(k.indptr)) * size + k.indices  # sorted: K's storage order
    where = np.searchsorted(keys, np.maximum(pr, pc) * size + np.minimum(pr, pc))
    nnz_p, nnz_a = self.p_pattern.nnz, self.a_pattern.nnz
    as_tuple = lambda values: tuple(int(v) for v in values)
    tables = {
      "P_to_K": as_tuple(where[:nnz_p]),
      "Pdiag_to_K": as_tuple(where[nnz_p + nnz_a : nnz_p + nnz_a + n]),
      "A_to_K": as_tuple(where[nnz_p : nnz_p + nnz_a]),
      "ydiag_to_K": as_tuple(where[nnz_p + nnz_a + n :]),
      "K_perm": as_tuple(position),
      "K_p": as_tuple(k.indptr),
      "K_i": as_tuple(k.indices),
      "K_etree": as_tuple(parent),
      "K_Lnz": as_tuple(counts),
      "A_p": as_tuple(self.a_pattern.indptr),
      "A_i": as_tuple(self.a_pattern.indices),
    }
    return k, tables

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
    go in K, the permutation (K_perm[i]: position of unknown i, x first then y), K's and A's CSC patterns, and K's
    symbolic factorization (K_etree: the elimination tree, K_Lnz: the column counts of L, as QDLDL_etree gives
    them)."""
    return self._layout[1]

  @property
  def buffers(self) -> tuple[tuple[str, str, int], ...]:
    """(C++ type, name, size) of every buffer the factorization, the refined solve and the polish use (anvil/kkt.hpp),
    the rows' coupling flags (`active`) included."""
    n, m, size, l_nnz = self.p_pattern.shape[0], self.a_pattern.shape[0], self.size, max(self.l_nnz, 1)
    doubles = [("Kx", self.nnz), ("Lx", l_nnz), *((v, size) for v in ("D", "Dinv", "fwork", "ksol", "krhs", "kres")),
               ("polish_d", n), ("polish_y", m)]  # fmt: skip
    ints = [("Li", l_nnz), ("Lp", size + 1), ("iwork", 3 * size), ("bwork", size), ("active", m),
            ("previous_active", m)]  # fmt: skip
    return (*(("double", v, k) for v, k in doubles), *(("int", v, k) for v, k in ints))

  @cached_property
  def l_nnz(self) -> int:
    """Nonzeros of the LDLᵀ factor's strictly lower part L."""
    return sum(self.tables["K_Lnz"])


def _elimination_tree(k: sp.csc_array) -> tuple[list[int], list[int]]:
  """The elimination tree (parent of each column, -1 at a root) and the column counts of the strictly lower LDLᵀ
  factor of the symmetric matrix whose upper triangle is k (Liu's algorithm, as QDLDL_etree computes them)."""
  size = k.shape[0]
  indices, indptr = k.indices.tolist(), k.indptr.tolist()
  parent, mark, counts = [-1] * size, [-1] * size, [0] * size
  for j in range(size):
    mark[j] = j
    for i in indices[indptr[j] : indptr[j + 1]]:
      while i < j and mark[i] != j:
        if parent[i] == -1:
          parent[i] = j
        counts[i] += 1
        mark[i] = j
        i = parent[i]
  return parent, counts
