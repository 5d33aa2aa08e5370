#!/usr/bin/env bash
# Reads receipt line crops with a freshly trained line reader on a GPU machine without network:
# converts a train/ export to a Q8_0 GGUF and runs bench.vlm_lines on the GPU (bench/README.md,
# "Side by side on the GPU").
#
#   bash bench/vlm_lines_gpu.sh HF_DIR CROPS HINTS OUT_DIR [bench.vlm_lines options...]
#
# Expects llama-cpp-python built with CUDA into $SITE (default /tmp/site) by the build script that
# ../shared/gpu/prepare-llama-sdist.sh packs, its unpacked sdist in /tmp/llama-build (the converter
# comes from there), and transformers in $TRAIN_SITE (default /tmp/trainsite, where train's run.sh
# installs it) for the converter, which $CONVERTER_PYTHON runs (default python3, with torch).
# BUILD_DONE names a file to wait for (up to 450 s) when the build runs in the background beside
# the training; WHEELS a folder of cp312 wheels of the appliance's pure-Python dependencies
# (pydantic, pyyaml, rapidfuzz, sentencepiece for the converter...) to install into $SITE first.
# HINTS comes from `python -m bench.vlm_lines --crops CROPS --save-hints HINTS`, run where
# onnxruntime and the ONNX models are.
set -euo pipefail
if (($# < 4)); then
  echo "usage: $0 HF_DIR CROPS HINTS OUT_DIR [bench.vlm_lines options...]" >&2
  exit 2
fi
HF_DIR=$1 CROPS=$2 HINTS=$3 OUT_DIR=$4
shift 4
SITE="${SITE:-/tmp/site}"
TRAIN_SITE="${TRAIN_SITE:-/tmp/trainsite}"
if [[ -n "${BUILD_DONE:-}" ]]; then
  for _ in $(seq 90); do [[ -e "$BUILD_DONE" ]] && break; sleep 5; done
  [[ -e "$BUILD_DONE" ]] || { echo "the llama.cpp build did not finish ($BUILD_DONE)" >&2; exit 1; }
fi
if [[ -n "${WHEELS:-}" ]]; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl
fi
SRC=$(ls -d /tmp/llama-build/llama_cpp_python-* | head -1)
export PYTHONPATH="$SITE:$TRAIN_SITE:.:$SRC/vendor/llama.cpp/gguf-py" PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"
python3 -m quantize.gguf convert --hf "$HF_DIR" --family qwen2vl_line --out "$OUT_DIR/gguf" \
  --converter-python "${CONVERTER_PYTHON:-python3}" --pre-tokenizer gpt-2 --quant Q8_0 --llama-src "$SRC"
# bench.vlm_lines samples the card's memory itself and reports its peak.
python3 -m bench.vlm_lines --model-dir "$OUT_DIR/gguf/q8_0" --crops "$CROPS" --hints "$HINTS" --device gpu "$@"
