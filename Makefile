# Two commands do all set-up on a fresh machine with Python 3.11:
#   make demo   -> builds the venv if needed, then runs the CPU demo (tiny end-to-end GRPO run)
#   make test   -> builds the venv if needed, then runs the test suite
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO_OUT ?= runs/demo

.PHONY: demo test lint venv

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch first, so nothing later pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/ragym demo --out $(DEMO_OUT)

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
