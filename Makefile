# Quick start:   make demo   (set up, diagnose the bundled 4-rank sample, write report.html)
#                make test   (set up with the test extras, lint, run the whole test suite)
#                make lint   (ruff on the code, tests and tools; mypy; the import-linter layers)
# Options:       SKIP_BROWSER=1 make test   no Chromium install; the browser test is skipped
#                TRACEINSIGHT_SHARED=DIR    the shared real-trace corpus (DIR/traces), default ../shared
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TI     := $(VENV)/bin/traceinsight
SAMPLE ?= sample_traces/synthetic_straggler_4rank
PIP    := $(PY) -m pip install --disable-pip-version-check --progress-bar on
SHARED := $(or $(TRACEINSIGHT_SHARED),../shared)

.PHONY: demo test lint setup browser bench bench-ranks docs clean

$(VENV)/bin/python:
	@echo "==> [1/3] creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# the core: what `diagnose` needs (no torch, no HTA)
$(VENV)/.base: pyproject.toml | $(VENV)/bin/python
	@echo "==> [2/3] installing traceinsight (editable) and what diagnose needs: pyarrow, pandas,"
	@echo "          numpy, msgspec, click, jinja2, pyyaml (about 150 MB; a minute on a fresh machine)"
	$(PIP) -e .
	touch $@

# tests: pytest, build, playwright; torch (CPU wheel, pinned) and HTA (the parity oracle)
$(VENV)/.dev: pyproject.toml | $(VENV)/bin/python
	@echo "==> [2/3] installing traceinsight (editable) with the test extras: pytest, build,"
	@echo "          playwright (drives Chromium for the browser test), ruff, mypy and import-linter (make lint),"
	@echo "          torch CPU (records real traces in tests), Holistic Trace Analysis (the parity"
	@echo "          oracle). About 1 GB: a few minutes on a fresh machine"
	$(PIP) -e '.[dev,torch,hta]'
	touch $@ $(VENV)/.base

setup: $(VENV)/.dev

demo: $(VENV)/.base
	@echo "==> [3/3] diagnosing the bundled 4-rank sample $(SAMPLE)"
	$(TI) diagnose $(SAMPLE) --html report.html --markdown report.md --json result.json
	@echo "open report.html in a browser; report.md is the ticket body, result.json the CI contract"

# Headless Chromium for the report's browser test (tests/test_browser.py): the Debian package,
# installed with root or sudo. SKIP_BROWSER=1 skips the install and the test.
browser:
	@if [ -n "$(SKIP_BROWSER)" ]; then \
	  echo "==> browser test: skipped (SKIP_BROWSER is set; tests/test_browser.py is deselected)"; \
	elif [ -n "$$TRACEINSIGHT_CHROMIUM" ] || command -v chromium >/dev/null 2>&1 \
	     || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then \
	  echo "==> browser test: Chromium found ($${TRACEINSIGHT_CHROMIUM:-$$(command -v chromium || command -v chromium-browser || command -v google-chrome)})"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "==> browser test: installing Chromium (apt-get install chromium, about 100 Debian packages;"; \
	  echo "    SKIP_BROWSER=1 make test skips this and the browser test)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
	    || echo "==> browser test: the install failed; tests/test_browser.py will skip"; \
	elif command -v sudo >/dev/null 2>&1; then \
	  echo "==> browser test: installing Chromium with sudo (apt-get install chromium; SKIP_BROWSER=1 skips)"; \
	  sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
	    || echo "==> browser test: the install failed; tests/test_browser.py will skip"; \
	else \
	  echo "==> browser test: no Chromium and no root or sudo: tests/test_browser.py will skip"; \
	  echo "    (install chromium, or set TRACEINSIGHT_CHROMIUM=/path/to/chrome, or SKIP_BROWSER=1)"; \
	fi

# lint first: it takes seconds and fails fast, before the browser install and the suite
test: $(VENV)/.dev lint browser
	@if [ -d "$(SHARED)/traces" ]; then \
	  echo "==> [3/3] running the test suite, with the shared real-trace corpus $(SHARED)/traces"; \
	else \
	  echo "==> [3/3] running the test suite; $(SHARED)/traces is absent, so the corpus tests skip"; \
	  echo "    (set TRACEINSIGHT_SHARED=DIR to the folder holding traces/)"; \
	fi
	TRACEINSIGHT_SHARED=$(SHARED) $(PY) -m pytest -q $(if $(SKIP_BROWSER),-m "not browser",)

# ruff on the code, tests and tools; mypy on the package; lint-imports: the layer contracts
# (all three configured in pyproject.toml)
lint: $(VENV)/.dev
	@echo "==> lint: ruff, mypy and import-linter"
	$(VENV)/bin/ruff check traceinsight tracegen tests bench sample_traces
	$(VENV)/bin/ruff format --check traceinsight tracegen tests bench sample_traces
	$(VENV)/bin/mypy traceinsight
	$(VENV)/bin/lint-imports --no-cache --no-logo

bench: $(VENV)/.dev
	$(PY) bench/bench_ingest.py --repeat 3 --hta-repeat 2 --fixed

bench-ranks: $(VENV)/.dev
	$(PY) bench/bench_ranks.py --many 0 --no-dask --repeat 2 --shape hta_a100 --shape-mb 88 \
		--shape-ranks 16 --out bench/results/ranks_workers.json

docs: $(VENV)/.base
	$(PY) -m traceinsight.store.schema > docs/STORE.md
	$(PY) -m traceinsight.engine.evaluate > docs/RULES.md

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache report.html report.md result.json
