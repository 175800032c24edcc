# Two commands do all set-up on a fresh machine with Python 3.11:
#   make demo   -> builds the venv if needed, then runs the CPU demo (tiny end-to-end GRPO run)
#   make test   -> builds the venv if needed, then runs the test suite
# GPU machines instead: make gpu-install (launch/install_gpu.sh: the locked GPU set into .venv).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO_OUT ?= runs/demo

.PHONY: demo test lint venv gpu-install gpu-lock

$(VENV)/.installed: setup.py
	@test ! -e $(VENV)/.gpu-installed || { echo "$(VENV) is the GPU install (make gpu-install); move it first"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch first, so nothing later pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[cpu,dev]'
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/ragym demo --out $(DEMO_OUT)

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The GPU install: launch/gpu-requirements.lock, then flash-attn, then ragym (PYTHON picks the interpreter).
gpu-install:
	PYTHON=$(PYTHON) bash launch/install_gpu.sh

# Re-resolve the GPU lock from setup.py's gpu extra (uv; Linux x86-64, Python 3.11); keeps pins that still fit.
gpu-lock:
	PYTHON=$(PYTHON) bash launch/install_gpu.sh --lock
