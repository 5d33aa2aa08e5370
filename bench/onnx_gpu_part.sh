#!/usr/bin/env bash
# Part @PART@ of @PARTS@ of onnxruntime-gpu and what the ONNX benchmarks need, for a GPU machine without
# network; written by bench/pack_onnx_gpu.py (bench/README.md, "The ONNX engine on the GPU").
# Unpacks site/ into $SITE (default /tmp/site) and data/ into $DATA (default /tmp/data) with
# $PYTHON (default python3); the last part links $SITE/nvidia/{cu13,cudnn} to this Python's own
# nvidia pip folders (torch's) and checks that onnxruntime from $SITE offers CUDAExecutionProvider.
# Refuses to run before the previous part of the same pack; a second run changes nothing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SITE="${SITE:-/tmp/site}"
DATA="${DATA:-/tmp/data}"
PY="${PYTHON:-python3}"
PART=@PART@
PARTS=@PARTS@
PREVIOUS_SUMS=@PREVIOUS_SUMS@  # sha256 of the previous part's SHA256SUMS, which is its stamp
STAMP="$SITE/.onnx-gpu-part-$PART"

if ((PART > 1)); then
  previous="$SITE/.onnx-gpu-part-$((PART - 1))"
  if [[ ! -f "$previous" || "$(sha256sum <"$previous" | cut -d' ' -f1)" != "$PREVIOUS_SUMS" ]]; then
    echo "part $PART: part $((PART - 1)) of this pack is not installed in $SITE: run part-$((PART - 1))/run.sh first" >&2
    exit 2
  fi
fi

if [[ -f "$STAMP" ]] && cmp -s "$STAMP" "$HERE/SHA256SUMS"; then
  echo "part $PART: already installed in $SITE"
else
  (cd "$HERE" && sha256sum --quiet --strict -c SHA256SUMS)
  mkdir -p "$SITE" "$DATA"
  "$PY" - "$HERE" "$SITE" "$DATA" <<'EOF'
import lzma, os, shutil, sys, tarfile
from pathlib import Path
here, site, data = (Path(arg) for arg in sys.argv[1:])
for path in sorted(here.glob("site/**/*.xz")):
    if path.name.endswith(".tar.xz"):
        with tarfile.open(path) as tar:
            tar.extractall(site, filter="data")
    else:  # one library: site/onnxruntime/capi/NAME.xz -> $SITE/onnxruntime/capi/NAME
        target = site / path.relative_to(here / "site").with_suffix("")
        target.parent.mkdir(parents=True, exist_ok=True)
        with lzma.open(path) as packed, open(f"{target}.part", "wb") as out:
            shutil.copyfileobj(packed, out, 1 << 22)
        os.chmod(f"{target}.part", 0o755)
        os.replace(f"{target}.part", target)
    print(f"installed {path.relative_to(here)}")
for path in sorted(here.glob("data/*.tar")):
    with tarfile.open(path) as tar:
        tar.extractall(data, filter="data")
    print(f"installed {path.relative_to(here)} into {data}")
EOF
  if ((PART == PARTS)); then
    env -u PYTHONPATH "$PY" - "$SITE" <<'EOF'
import os, sys
site = os.path.realpath(sys.argv[1])
os.makedirs(os.path.join(site, "nvidia"), exist_ok=True)
for name in ("cu13", "cudnn"):
    found = [os.path.join(entry, "nvidia", name) for entry in sys.path
             if entry and os.path.isdir(os.path.join(entry, "nvidia", name, "lib"))
             and not os.path.realpath(entry).startswith(site)]
    link = os.path.join(site, "nvidia", name)
    if os.path.islink(link):
        os.unlink(link)
    if found:
        os.symlink(found[0], link)
        print(f"linked {link} -> {found[0]}")
    else:
        print(f"no nvidia/{name} among this Python's packages: onnxruntime will not find it in {site}")
EOF
  fi
  cp "$HERE/SHA256SUMS" "$STAMP"
  echo "part $PART of $PARTS: installed in $SITE and $DATA in ${SECONDS} s"
fi

if ((PART == PARTS)); then
  PYTHONPATH="$SITE" "$PY" - "$SITE" <<'EOF'
import os, sys
import onnxruntime
providers = onnxruntime.get_available_providers()
print("onnxruntime", onnxruntime.__version__, "from", os.path.dirname(onnxruntime.__file__), providers)
if not os.path.realpath(onnxruntime.__file__).startswith(os.path.realpath(sys.argv[1]) + os.sep):
    sys.exit("onnxruntime was not imported from the pack's site folder")
if "CUDAExecutionProvider" not in providers:
    sys.exit("onnxruntime offers no CUDAExecutionProvider")
EOF
fi
