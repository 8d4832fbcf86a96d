# Set-up in two commands: `make demo` runs the main job, `make test` the tests (README, "The two commands").
# Both create .venv when it is missing and install torch 2.13 and fsdpbench into it.
#
# TORCH_PIP_ARGS: extra arguments for installing torch; empty = whatever pip is configured with.
# On Linux x86_64 PyPI's torch is the CUDA build (several GB); for the CPU build use
#   make demo TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
TORCH_PIP_ARGS ?=
DEMO_ARGS ?=

BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test setup setup-test

demo: setup
	@set -e; run_dir=$$($(BIN)/fsdpbench ab $(DEMO_ARGS)); echo; \
	if [ -f "$$run_dir/report.html" ]; then echo "report: $$run_dir/report.html (and report.md beside it)"; \
	else echo "results: $$run_dir (no report.html: see the messages above)"; fi

test: setup-test
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	# the README's test command:
	. $(BIN)/activate && OMP_NUM_THREADS=1 python -m pytest -q tests

# The README's picture (docs/img/report.png): a profiled `fsdpbench ab` on the CPU default, drawn by the report.
.PHONY: readme-figure
readme-figure: setup
	$(BIN)/python scripts/readme_figure.py

setup: $(VENV)/.fsdpbench-installed
setup-test: $(VENV)/.fsdpbench-test-installed

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files: torch is installed once; fsdpbench again when pyproject.toml changes.
$(VENV)/.torch-installed: | $(BIN)/python
	$(PIP) install $(TORCH_PIP_ARGS) torch==$(TORCH_VERSION)
	touch $@

$(VENV)/.fsdpbench-installed: pyproject.toml $(VENV)/.torch-installed
	$(PIP) install -e .
	touch $@

$(VENV)/.fsdpbench-test-installed: pyproject.toml $(VENV)/.torch-installed
	$(PIP) install -e '.[test,deepspeed]'
	touch $@
