# Everything a fresh machine needs: `make demo` and `make test` create the venv, install anvil (editable, with the
# dev extras) and a C++ compiler via apt when none is found, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SUDO := $(shell [ "$$(id -u)" -ne 0 ] && echo sudo)

.PHONY: demo test test-fast docs lint format bench compiler embedded clean

$(STAMP): pyproject.toml
	@command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 \
	  || $(MAKE) --no-print-directory compiler
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

compiler:
	@echo "no C++ compiler found: installing g++ with apt-get"
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq g++

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

# a quick check while working (a few minutes with the build cache warm): the unit tests and one integration test file
# per layer, the slow ones left out; `make test` is what CI and a change's last check run
FAST_TESTS := tests/unit $(addprefix tests/integration/, test_validation.py test_ad.py test_sparse.py test_sqp.py \
  test_stage_routing.py test_tuning.py test_errors.py test_mpc.py test_mhe.py test_stagewise.py test_robots.py)
test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow" $(FAST_TESTS)

DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[docs]"
	@touch $(DOCS_STAMP)

# the documentation site in build/site, warnings as errors (mkdocs.yml: strict)
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check anvil tests examples benchmarks docs
	$(VENV)/bin/ruff format --check anvil tests examples benchmarks docs

format: $(STAMP)
	$(VENV)/bin/ruff format anvil tests examples benchmarks docs
	$(VENV)/bin/ruff check --fix anvil tests examples benchmarks docs

bench: $(STAMP)
	$(PY) -m benchmarks.bench_eval
	$(PY) -m benchmarks.bench_ad
	$(PY) -m benchmarks.bench_sqp
	$(PY) -m benchmarks.bench_mpc
	$(PY) -m benchmarks.bench_qp
	$(PY) -m benchmarks.bench_robust
	$(PY) -m benchmarks.bench_robots

# The cart-pole MPC cross-built for aarch64 Linux and a bare-metal Cortex-M7, run under QEMU (installs Debian's cross
# toolchains and QEMU with apt-get when missing); prints one table: closed-loop cost against x86, flash, RAM, stack.
embedded: $(STAMP)
	$(PY) -m tests.support.cross

clean:
	rm -rf build $(VENV) .pytest_cache .ruff_cache .mypy_cache
