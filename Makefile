# The two README commands: `make train` and `make test`. Each installs what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
MODEL_DIR ?= runs/image_classification

.PHONY: install train test test-slow test-all lint bench gpu-check

install:
	@bash scripts/bootstrap.sh

train: install
	$(VENV)/bin/torchgarden train --experiment image_classification --mode train_and_eval \
		--model_dir $(MODEL_DIR)

test: install
	$(PY) -m pytest -q

test-slow: install
	$(PY) -m pytest -q -m "slow or distributed"

test-all: test test-slow

lint: install
	$(VENV)/bin/ruff check .

bench:
	@EXTRAS=dev,bench bash scripts/bootstrap.sh
	OMP_WAIT_POLICY=PASSIVE $(PY) benchmarks/run_all.py

# One GPU, <= 8 minutes: gpu tests, GPT-2 small and ResNet-50 against hand-written loops.
gpu-check:
	bash scripts/gpu_check.sh
