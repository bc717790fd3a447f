"""anvil benchmarks: run `python benchmarks/bench_eval.py` (or `make bench`) from the repository root."""
