"""anvil benchmarks: run `python -m benchmarks.bench_eval` (or `make bench`) from the repository root.

Every solver timed here runs on one thread; numpy's and scipy's BLAS pools are held to one thread too (unless the
environment says otherwise) before either loads: their idle threads spin, and on a 2-core machine they took time from
the solver being timed (anvil's and CasADi's alike: the chain MPC's per-step medians varied by 1.5x between runs).
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
  os.environ.setdefault(_variable, "1")
