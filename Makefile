# Quick start:   make demo   (set up, diagnose the bundled sample, write report.html)
#                make test   (set up, run the whole test suite)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TI     := $(VENV)/bin/traceinsight
SAMPLE ?= sample_traces/cpu_transformer_train.pt.trace.json.gz

.PHONY: demo test setup browser bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev,torch,hta]'
	touch $@

setup: $(VENV)/.installed

demo: $(VENV)/.installed
	$(TI) summary $(SAMPLE)

# Headless Chromium for the report's browser test (Debian package; needs root or sudo).
browser:
	@command -v chromium >/dev/null 2>&1 || ( \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not installed and no root: the browser test will be skipped"; fi ) || true

test: $(VENV)/.installed browser
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/bench_ingest.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache report.html report.md result.json
