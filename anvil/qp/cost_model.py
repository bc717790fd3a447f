"""A cost model of a RiccatiQP solve under partial condensing: the work of each of its kernels, counted from the
sizes and priced by kind. `anvil.qp.riccati.auto_condensing` picks the block size it predicts fastest.

The kinds run at different rates. The products of the factorization and of the condensing (P [A B],
[A B]'(P [A B]), the input elimination's solves and update, the Gram products of dense rows, the block Hessians and
dynamics) are register-blocked: every loaded entry serves several multiply-adds. The passes over vectors (the
residuals, the Newton steps' backward and forward passes, the step, the expansion) read each matrix entry once for
one multiply-add. The Cholesky factorization of a block's input Hessian and the solves with it are chains of
dependent steps. Each row with a bound costs a fixed time per iteration (its residual, right-hand sides, steps and
ratio tests), whatever the condensing, and the condensing writes the condensed QP (its Hessians, dynamics and rows)
once per solve.

The prices are fitted (non-negative least squares on the relative error) to `python -m benchmarks.bench_riccati
--condensing` and to the solver's kernels timed alone, on a 2-core Xeon with GCC 12 at the generated code's flags;
benchmarks/RESULTS.md has the fit's error and the choices' regret. On another machine the times scale, and the choice
depends on their ratios.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Seconds per multiply-add of the register-blocked products.
PRODUCT_SECONDS = 1 / 12e9
#: Seconds per multiply-add of the passes over vectors.
VECTOR_SECONDS = 1 / 9.4e9
#: Seconds per multiply-add of chains of dependent steps (the input Hessian's Cholesky factorization and solves).
SCALAR_SECONDS = 1 / 2e9
#: Seconds per row with a bound and iteration.
ROW_SECONDS = 90e-9
#: Seconds per entry of the condensed QP written by the condensing.
ENTRY_SECONDS = 0.85e-9
#: Interior-point iterations a cold-started solve is assumed to take (random OCP QPs to 1e-8 take 10-22), and a
#: warm-started one (an SQP step's QP, started from the last: about 2 on the chain of masses).
COLD_ITERATIONS = 10.0
WARM_ITERATIONS = 2.0
#: A larger block is chosen only where it is predicted faster than every smaller one by this fraction: the model's
#: typical error, and larger blocks compile more code.
MARGIN = 0.05


def _lower_product(rows: int, n: int) -> int:
  """Multiply-adds of the lower triangle of M'N (M, N: rows x n), computed in row blocks of 4 up to each block's
  last column (anvil::dense::add_lower_product)."""
  return rows * sum(min(4 * (i // 4) + 4, n) for i in range(n))


def _check_int(what: str, value: object, least: int) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < least:
    raise ValueError(f"RiccatiCostModel: {what} must be an int >= {least}, got {value!r}")


@dataclass(frozen=True)
class RiccatiCostModel:
  """The modeled time of one RiccatiQP solve: N stages of nx states and nu inputs, of which the first nud enter the
  dynamics, condensed in blocks of M stages or not (M = 1), over `iterations` interior-point iterations.

  Args:
    nx: states per stage.
    nu: inputs per stage.
    N: the horizon (stages).
    nud: the inputs that enter the dynamics (RiccatiQP's: the first nud).
    state_rows: rows with bounds per stage that involve the states: once condensed, each is a dense row of its
      block's variables (an inner state depends on every earlier input of its block).
    rows: rows with bounds per stage in all (default: state_rows + nu, every input bounded).
    iterations: interior-point iterations per solve (COLD_ITERATIONS by default); the condensing is done once per
      solve.

  Example:
    >>> model = RiccatiCostModel(nx=21, nu=3, N=40, nud=3, state_rows=1)
    >>> model.seconds(1), model.seconds(5), model.best()
  """

  nx: int
  nu: int
  N: int
  nud: int
  state_rows: int = 0
  rows: int | None = None
  iterations: float = COLD_ITERATIONS

  def __post_init__(self) -> None:
    for what, value, least in (("nx", self.nx, 1), ("nu", self.nu, 1), ("N", self.N, 1), ("nud", self.nud, 0),
                               ("state_rows", self.state_rows, 0)):  # fmt: skip
      _check_int(what, value, least)
    if self.rows is not None:
      _check_int("rows", self.rows, 0)
    if self.nud > self.nu:
      raise ValueError(f"RiccatiCostModel: nud must be at most nu = {self.nu}, got {self.nud}")
    number = isinstance(self.iterations, (int, float)) and not isinstance(self.iterations, bool)
    if not (number and math.isfinite(self.iterations) and self.iterations > 0):
      raise ValueError(f"RiccatiCostModel: iterations must be a finite number > 0, got {self.iterations!r}")

  def blocks(self, M: int) -> int:
    """Stages of the condensed QP (the last block padded where M does not divide N)."""
    if isinstance(M, bool) or not isinstance(M, int) or not 1 <= M <= self.N:
      raise ValueError(f"RiccatiCostModel: M must be an int in [1, N = {self.N}] (stages per block), got {M!r}")
    return -(-self.N // M)

  def products(self, M: int) -> float:
    """Multiply-adds of one iteration's register-blocked products (the factorization), over every block."""
    x, u, d = self.nx, M * self.nu, self.nx + M * self.nud
    z, dense_rows = x + u, M * self.state_rows
    factor = x * x * d + _lower_product(x, d)  # P [A B], then [A B]'(P [A B])
    eliminate = u * u * x + _lower_product(u, x)  # V = L^-1 Q_ux and K, then P = Q_xx - V'V
    return self.blocks(M) * (factor + eliminate + dense_rows * z * z / 2)

  def vectors(self, M: int) -> float:
    """Multiply-adds of one iteration's passes over vectors, over every block: Q and P copied, the residuals, two
    Newton steps (predictor and corrector: P b, [A B]'s, the rollout's [A B] z and K dx, the input solves), the
    step's P dx and the dense rows' values and updates."""
    x, u, d = self.nx, M * self.nu, self.nx + M * self.nud
    z, dense_rows = x + u, M * self.state_rows
    copies = z * z + x * x
    residuals = z * z + 2 * x * d
    newton = x * x + 2 * x * d + 2 * u * x + u * u
    return self.blocks(M) * (copies + residuals + 2 * newton + x * x + 4 * dense_rows * z)

  def scalar(self, M: int) -> float:
    """Multiply-adds of one iteration's chains of dependent steps: each block's input Hessian's Cholesky
    factorization and, in each Newton step, its two triangular solves."""
    u = M * self.nu
    return self.blocks(M) * (u**3 / 6 + 2 * u * u)

  def condensing(self, M: int) -> tuple[float, float, int]:
    """One solve's condensing and expansion, over every block (none without condensing): the products' multiply-adds
    (the block Hessians and dynamics, the rows), the vector passes' (the inner states and multipliers) and the
    entries of the condensed QP written."""
    blocks = self.blocks(M)
    if M == 1:
      return 0.0, 0.0, 0
    x, nu = self.nx, self.nu
    products = 0.0
    for j in range(1, M):
      cols = x + j * self.nud  # the nonzero columns of the inner state's map Phi_j
      products += 2 * x * x * cols + nu * x * cols + _lower_product(x, cols)  # Hs Phi, Phi'(Hs Phi), A Phi
      products += self.state_rows * x * (x + M * self.nud)  # the rows a'Phi_j
    z = x + M * nu
    rows = z + M * self.state_rows + (M - 1) * x  # the block's boxes, its rows, its inner states' boxes
    entries = z * z + rows * z + x * z
    return blocks * products, blocks * (M - 1) * 3 * x * x, blocks * entries

  def seconds(self, M: int) -> float:
    """The modeled time of one solve in blocks of M stages."""
    rows = self.state_rows + self.nu if self.rows is None else self.rows
    iteration = (self.products(M) * PRODUCT_SECONDS + self.vectors(M) * VECTOR_SECONDS
                 + self.scalar(M) * SCALAR_SECONDS + self.N * rows * ROW_SECONDS)  # fmt: skip
    products, vectors, entries = self.condensing(M)
    return self.iterations * iteration + products * PRODUCT_SECONDS + vectors * VECTOR_SECONDS + entries * ENTRY_SECONDS

  def best(self) -> int:
    """The block size predicted fastest: the smallest M within MARGIN of the least modeled time. The block sizes are
    tried from 1 up, until one is modeled at twice the least so far (past its best, a block's cost grows as its
    inputs cubed; the padding of a last block makes small bumps only)."""
    times = {1: self.seconds(1)}
    least = times[1]
    for M in range(2, self.N + 1):
      times[M] = self.seconds(M)
      if times[M] > 2 * least:
        break
      least = min(least, times[M])
    return min(M for M, t in times.items() if t <= least * (1 + MARGIN))
