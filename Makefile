# fedstats: `make demo` and `make test` set everything up on a fresh machine (only python3 needed).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SRC    := src tests benchmarks

.PHONY: install demo test test-fast lint docs docs-check bench clean

install: $(STAMP)

# uv installs the same packages as pip from the same index in about 20 s instead of about 150 s (pip's resolver
# is the largest part of a fresh clone's `make test`); pip is the fallback where uv cannot run.
# Debian's chromium and chromedriver drive the dashboard's browser test (tests/e2e/test_dashboard_browser.py):
# installed from the distribution only where missing; nothing downloads a browser at run time
$(STAMP): pyproject.toml
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver \
	  || echo "warning: could not install chromium (apt-get failed): the dashboard's browser test will skip"; \
	fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e ".[all]" \
	  || $(BIN)/python -m pip install -q --disable-pip-version-check -e ".[all]"
	@touch $(STAMP)

demo: install
	$(BIN)/fedstats demo

lint: install
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)
	$(BIN)/mypy

# the documentation site (MkDocs + mkdocstrings, offline): site/index.html
docs: install
	$(BIN)/mkdocs build --strict

# a strict build into a temporary folder, removed afterwards (part of make test; not --quiet:
# mkdocs then stops counting warnings, and strict mode would pass anything)
docs-check: install
	@d=$$(mktemp -d); $(BIN)/mkdocs build --strict --site-dir "$$d"; rc=$$?; rm -rf "$$d"; \
	  if [ $$rc -ne 0 ]; then echo "mkdocs build --strict failed"; fi; exit $$rc

# the sources and the installed packages compiled once (in parallel; a second time only checks them): where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) every server, CLI and device process the
# tests start would otherwise compile fedstats and its imports (numpy, pandas, httpx, ...) from source
# again. uv installs no bytecode: a device process's imports then took 3.2 s of CPU instead of 1.0 s, for
# each of the hundreds of processes make test starts (the Adult test alone starts 100 devices).
COMPILE := $(BIN)/python -m compileall -q -j 0 src/fedstats tests $(VENV)/lib >/dev/null
# pytest caches its assertion-rewritten test modules only where bytecode may be written: without this, each
# xdist worker rewrites every test module again (about a minute of CPU per worker on this machine)
# one BLAS thread per process: two xdist workers already fill the two cores, and the tests start server and
# device processes beside them; OpenBLAS's own threads (two per process here) then only compete for the
# cores (tests/library: 204 s with one thread, 248 s with two, -n 2 on this machine)
PYTEST  := env -u PYTHONDONTWRITEBYTECODE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/pytest

# --durations: the 30 slowest tests in every run's log (CI's included), where the 12-minute limit is spent.
# Three workers on two cores: many service tests wait (on deadlines, leases, servers starting), and a third
# worker runs tests meanwhile (same tree, back to back on this machine: 473 s with -n 3, 535 s with -n 2);
# the tests that must not run beside the heaviest share one worker (the machine-load group, conftest.py).
# The linters and the strict docs build (about 50 s of CPU, a minute of wall time before) run beside the
# tests: the tests leave about an eighth of the two cores idle while they wait (829 s of CPU in 473 s), which
# the checks fill. Their output is printed after the tests'; a failure of either fails make test.
test: install
	$(COMPILE)
	@log=$$(mktemp); ( $(MAKE) --no-print-directory lint docs-check > "$$log" 2>&1 ) & checks=$$!; \
	$(PYTEST) -q -n 3 --dist loadgroup --no-loadscope-reorder --durations=30 --doctest-modules src/fedstats tests; \
	rc=$$?; wait $$checks; crc=$$?; cat "$$log"; rm -f "$$log"; \
	if [ $$crc -ne 0 ]; then echo "make test: make lint or make docs-check failed (above)"; fi; \
	[ $$rc -eq 0 ] && [ $$crc -eq 0 ]

# the fast lane: the library, the CLI, the wire layer and the service on the in-process memory state, without
# the tests marked slow (no server process, no database; the layer marks come from tests/conftest.py)
test-fast: install
	$(COMPILE)
	$(PYTEST) -q -n 2 -m "not slow and (library or wire or cli or memory_state)" tests

bench: install
	@set -e; for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
