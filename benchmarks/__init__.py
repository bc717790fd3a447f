"""anvil benchmarks: run `python -m benchmarks.bench_eval` (or `make bench`) from the repository root."""
