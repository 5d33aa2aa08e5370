# Set up, run, test and measure the OCR appliance.
# `make run` and `make test` work on a fresh Debian machine as root: they create the virtual
# environment, install the pinned Python packages and the Debian packages they need.

PYTHON ?= python3
VENV ?= .venv
CONFIG ?= config.example.yaml
# onnxruntime flavour: `gpu` (onnxruntime-gpu, CUDA provider) where an NVIDIA driver is present.
ORT ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo gpu || echo cpu)
# Evaluation sets for `make bench` (read in place, never copied).
BENCH_DATA ?= ../shared/data/receipts_en ../shared/data/docs_zh
BENCH_ARGS ?=
PREFIX ?= /usr/local

# Fonts for the pages the tests render (Latin and CJK); Tesseract for the benchmark baseline.
APT_TEST = fonts-dejavu-core fonts-wqy-microhei
APT_BENCH = tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim

BIN = $(VENV)/bin
STAMP = $(VENV)/.installed-$(ORT)

.PHONY: setup run test lint bench clean apt-test apt-bench

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==26.3
	@# Both onnxruntime flavours provide the same module: remove the other one first.
	$(BIN)/python -m pip uninstall --quiet --yes onnxruntime onnxruntime-gpu >/dev/null 2>&1 || true
	$(BIN)/python -m pip install --quiet -e '.[$(ORT),dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

run: setup
	@mkdir -p var
	$(BIN)/ocr-appliance run --config $(CONFIG)

test: setup apt-test
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check appliance bench tests
	$(BIN)/ruff format --check appliance bench tests
	$(BIN)/mypy

bench: setup apt-bench
	$(BIN)/python -m bench.ocr_bench $(BENCH_ARGS) $(BENCH_DATA)

apt-test:
	@./scripts/apt-ensure $(APT_TEST)

apt-bench:
	@./scripts/apt-ensure $(APT_BENCH)

clean:
	rm -rf $(VENV) var build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
