# Set-up in two commands: `make demo` runs the main job, `make test` the tests (README, "The two commands").
# Both create .venv when it is missing and install torch 2.13 and fsdpbench into it, quietly: one line per
# step, pip's output in .venv/setup.log (printed when a step fails).
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
SETUP_LOG := $(VENV)/setup.log
TEST_EXTRAS := '.[run,test,deepspeed]'
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# $(call quiet_install,WHAT,PIP ARGS): one line on the console; pip's output goes to $(SETUP_LOG) and is
# shown (its last 60 lines) only when the install fails.
define quiet_install
@echo "setting up $(VENV): $(1) (pip's log: $(SETUP_LOG))"
@echo "== pip install $(2)" >>$(SETUP_LOG)
@$(PIP) install $(2) >>$(SETUP_LOG) 2>&1 || { tail -n 60 $(SETUP_LOG); \
	echo "set-up failed installing $(1): the log above, in full in $(SETUP_LOG)" >&2; exit 1; }
@touch $@
endef

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
	@$(PYTHON) -m venv $(VENV)

# Stamp files: torch is installed once; fsdpbench again when pyproject.toml changes.
$(VENV)/.torch-installed: | $(BIN)/python
	$(call quiet_install,torch $(TORCH_VERSION),$(TORCH_PIP_ARGS) torch==$(TORCH_VERSION))

$(VENV)/.fsdpbench-installed: pyproject.toml $(VENV)/.torch-installed
	$(call quiet_install,fsdpbench,-e '.[run]')

$(VENV)/.fsdpbench-test-installed: pyproject.toml $(VENV)/.torch-installed
	$(call quiet_install,fsdpbench with the test extras,-e $(TEST_EXTRAS))
