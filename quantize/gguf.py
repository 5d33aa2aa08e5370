"""Vision-language OCR models to GGUF: convert an HF checkpoint, quantize it, write its manifest.

Two subcommands::

    python -m quantize.gguf convert --hf DIR --family qwen2vl --out OUT [--draft-hf DIR]
        [--llama-src SDIST] [--quant Q8_0 --quant Q4_K_M]
    python -m quantize.gguf manifest --family lightonocr --model X.gguf --mmproj Y.gguf
        [--draft Z.gguf] --out DIR/manifest.json

`convert` runs llama.cpp's own converter (convert_hf_to_gguf.py), which ships only in the source
distribution of llama-cpp-python 0.3.36 (the wheel has the library, not the converter): pass the
unpacked sdist with --llama-src, or it is fetched once with `pip download` into a cache folder. The
converter needs torch and transformers, which the appliance itself never installs: point
--converter-python at an environment that has them (CPU builds suffice). The text model (and draft)
is then quantized here, with llama.cpp's quantizer through llama-cpp-python's bindings
(`llama_model_quantize`), so no separate llama-quantize binary is needed. llama.cpp's quantizer
does not take a projector; `--mmproj-outtype q8_0` has the converter write it in Q8_0 itself, which
libmtmd loads (the trained line reader's 13.0 MB F16 projector is 7.8 MB in Q8_0 and reads the
receipt crops as well: bench/README). Sites normally bring GGUF files that are already converted
and only need `manifest`.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import get_args

from appliance.engines.vlm_gguf.gguf_manifest import VlmManifest, read_gguf_info, write_vlm_manifest
from appliance.engines.vlm_gguf.line_image import LINE_HEIGHT, LineInput
from appliance.engines.vlm_gguf.profiles import profile_for
from appliance.errors import ModelError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
_CACHE = Path.home() / ".cache" / "ocr-appliance" / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}"
# llama.cpp's LLAMA_FTYPE_* values for the types this tool writes (llama.h, enum llama_ftype).
QUANT_TYPES = {"Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}

# Runs the vendored converter with its own gguf-py first on sys.path (as the script does itself) and,
# when asked, names the BPE pre-tokenizer instead of letting the converter recognise it by hash: a
# tokenizer trained here has no hash in the converter's table, and is then refused.
_CONVERTER_SHIM = """
import runpy, sys
from pathlib import Path
script, pre = sys.argv[1], sys.argv[2]
root = Path(script).parent
sys.path[:0] = [str(root / "gguf-py"), str(root)]
if pre:
    import conversion.base as base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


def resolve_llama_src(given: Path | None) -> Path:
    """The llama.cpp source folder holding convert_hf_to_gguf.py, fetching the sdist once if needed.

    Accepts the unpacked sdist, its vendor/llama.cpp folder, or the .tar.gz itself.
    """
    if given is not None:
        if given.is_file() and given.name.endswith(".tar.gz"):
            return _unpack(given, _CACHE)
        for candidate in (given, given / "vendor" / "llama.cpp"):
            if (candidate / "convert_hf_to_gguf.py").is_file():
                return candidate
        raise SystemExit(f"{given}: no convert_hf_to_gguf.py here or under vendor/llama.cpp")
    cached = _CACHE / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp"
    if (cached / "convert_hf_to_gguf.py").is_file():
        return cached
    with tempfile.TemporaryDirectory(prefix="llama-sdist-") as tmp:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", tmp,
            ],
            check=True,
        )  # fmt: skip
        archives = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if not archives:
            raise SystemExit("pip download gave no llama-cpp-python sdist")
        return _unpack(archives[0], _CACHE)


def _unpack(archive: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        # filter="data" refuses links and paths that leave the folder.
        tar.extractall(into, filter="data")
    found = sorted(into.glob("llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py"))
    if not found:
        raise SystemExit(f"{archive}: not a llama-cpp-python sdist with the converter")
    return found[-1].parent


def convert_hf_checkpoint(
    hf_dir: Path,
    outfile: Path,
    *,
    llama_src: Path,
    mmproj: bool = False,
    outtype: str = "f32",
    pre_tokenizer: str | None = None,
    python: str = sys.executable,
) -> Path:
    """Runs convert_hf_to_gguf.py on hf_dir: the text model, or with mmproj=True the projector."""
    script = llama_src / "convert_hf_to_gguf.py"
    args = [str(hf_dir), "--outfile", str(outfile), "--outtype", outtype]
    if mmproj:
        args.append("--mmproj")
    command = [python, "-c", _CONVERTER_SHIM, str(script), pre_tokenizer or "", *args]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0 or not outfile.is_file():
        raise SystemExit(f"converter failed on {hf_dir} (mmproj={mmproj}):\n{completed.stderr[-4000:]}")
    return outfile


def quantize_gguf(source: Path, target: Path, quant: str, n_threads: int = 0) -> Path:
    """Quantizes a text-model GGUF with llama.cpp's quantizer; raises ModelError if it fails.

    Tensors whose rows do not split into the type's blocks (K-quants need multiples of 256) are
    written in a fallback type by llama.cpp itself, so tiny models still quantize.
    """
    import llama_cpp

    if quant not in QUANT_TYPES:
        raise ModelError(f"unknown quantization {quant!r}; one of {', '.join(QUANT_TYPES)}")
    info = read_gguf_info(source)
    if info.projector_type is not None or info.architecture == "clip":
        raise ModelError(
            f"{source}: is an mmproj, which llama.cpp's quantizer does not take; "
            "convert it with --mmproj-outtype q8_0 instead"
        )
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[quant]
    params.nthread = n_threads
    target.parent.mkdir(parents=True, exist_ok=True)
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if status != 0 or not target.is_file():
        target.unlink(missing_ok=True)
        raise ModelError(f"{source}: llama_model_quantize to {quant} failed (status {status})")
    return target


def _convert(args: argparse.Namespace) -> int:
    # A line reader is read as it was trained (its stretch and levels): its export says how.
    line_input = LineInput.of_export(args.hf) if profile_for(args.family).line_input else None
    height = LINE_HEIGHT if line_input is None else line_input.height
    if height != LINE_HEIGHT:
        # The engine draws every line 28 px high (line_image.prepare_line); a reader trained on
        # taller lines would be read at the wrong height and give garbage, not an error.
        print(
            f"error: {args.hf} was trained on lines {height} px high; the appliance "
            f"reads lines {LINE_HEIGHT} px high",
            file=sys.stderr,
        )
        return 6
    llama_src = resolve_llama_src(args.llama_src)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    outtype: str = args.outtype
    pre: str | None = args.pre_tokenizer

    def convert(hf_dir: Path, role: str) -> Path:
        kind = (args.mmproj_outtype or outtype) if role == "mmproj" else outtype
        return convert_hf_checkpoint(
            hf_dir,
            out / f"{role}-{kind}.gguf",
            llama_src=llama_src,
            mmproj=role == "mmproj",
            outtype=kind,
            pre_tokenizer=pre,
            python=args.converter_python,
        )

    model = convert(args.hf, "model")
    mmproj = convert(args.hf, "mmproj")
    draft = None
    if args.draft_hf is not None:
        draft = convert(args.draft_hf, "draft")
    name = args.name or args.hf.resolve().name
    written = [
        _manifest_for(
            out,
            f"{name}-{outtype}",
            args.family,
            model=model,
            mmproj=mmproj,
            draft=draft,
            line_input=line_input,
        )
    ]
    for quant in args.quant or []:
        quant_dir = out / quant.lower()
        quant_model = quantize_gguf(model, quant_dir / f"model-{quant}.gguf", quant)
        quant_draft = quantize_gguf(draft, quant_dir / f"draft-{quant}.gguf", quant) if draft else None
        # The manifest names files relative to its own folder, so the mmproj is copied beside them.
        quant_mmproj = quant_dir / mmproj.name
        quant_mmproj.write_bytes(mmproj.read_bytes())
        written.append(
            _manifest_for(
                quant_dir,
                f"{name}-{quant}",
                args.family,
                model=quant_model,
                mmproj=quant_mmproj,
                draft=quant_draft,
                line_input=line_input,
            )
        )
    for manifest in written:
        print(f"{manifest.name}: {', '.join(f'{e.role}={e.file} ({e.file_type})' for e in manifest.files)}")
    return 0


def _manifest_for(
    folder: Path,
    name: str,
    family: str,
    *,
    model: Path,
    mmproj: Path,
    draft: Path | None,
    line_input: LineInput | None,
) -> VlmManifest:
    files = {"model": model, "mmproj": mmproj}
    if draft is not None:
        files["draft"] = draft
    return write_vlm_manifest(
        folder / "manifest.json",
        name,
        family,
        files,
        origin="quantize.gguf convert",
        verify=True,
        line_input=line_input,
    )


def _manifest(args: argparse.Namespace) -> int:
    files = {"model": args.model, "mmproj": args.mmproj}
    if args.draft is not None:
        files["draft"] = args.draft
    out: Path = args.out
    folder = out.parent.resolve()
    for role, path in files.items():
        if path.resolve().parent != folder:
            raise SystemExit(f"--{role} {path}: must sit in the manifest's folder {folder}")
    try:
        manifest = write_vlm_manifest(
            out,
            args.name or folder.name,
            args.family,
            files,
            origin=args.origin or "site-provided GGUF",
            verify=True,
        )
    except ModelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 5
    for entry in manifest.files:
        print(f"{entry.role}: {entry.file} {entry.architecture} {entry.file_type} {entry.size} bytes")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantize.gguf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    convert = sub.add_parser("convert", help="HF checkpoint -> GGUF + mmproj (+ draft), quantized copies")
    convert.add_argument("--hf", type=Path, required=True, help="HF checkpoint folder of the VLM")
    convert.add_argument(
        "--draft-hf", type=Path, help="HF checkpoint of a text-only draft on the same vocabulary"
    )
    convert.add_argument("--family", required=True, help="qwen2vl, smolvlm, lightonocr, paddleocr_vl, ...")
    convert.add_argument("--out", type=Path, required=True)
    convert.add_argument("--name", help="manifest name (default: the checkpoint folder's name)")
    convert.add_argument(
        "--llama-src", type=Path, help="unpacked llama-cpp-python 0.3.36 sdist (or its .tar.gz)"
    )
    convert.add_argument("--outtype", default="f16", choices=["f32", "f16", "bf16"])
    convert.add_argument(
        "--mmproj-outtype",
        choices=["f32", "f16", "bf16", "q8_0"],
        help="the projector's type, written by the converter (default: --outtype)",
    )
    convert.add_argument("--quant", action="append", choices=sorted(QUANT_TYPES), help="repeatable")
    convert.add_argument(
        "--pre-tokenizer",
        help="name the BPE pre-tokenizer (e.g. gpt-2, qwen2) when the converter does not recognise it",
    )
    convert.add_argument(
        "--converter-python",
        default=sys.executable,
        help="Python with torch and transformers that runs the converter (default: this one); "
        "quantizing runs here and needs llama-cpp-python",
    )
    convert.set_defaults(run=_convert)

    manifest = sub.add_parser("manifest", help="write manifest.json for GGUF files a site already has")
    manifest.add_argument("--family", required=True)
    manifest.add_argument("--model", type=Path, required=True)
    manifest.add_argument("--mmproj", type=Path, required=True)
    manifest.add_argument("--draft", type=Path)
    manifest.add_argument("--out", type=Path, required=True, help="DIR/manifest.json, beside the files")
    manifest.add_argument("--name", help="default: the folder's name")
    manifest.add_argument("--origin", help="where the files came from (recorded in the manifest)")
    manifest.set_defaults(run=_manifest)

    args = parser.parse_args(argv)
    # The engine picks its prompt and output parser by family: a name it does not know is refused
    # here rather than when the appliance starts. Imported late: tiny_vlm runs without pydantic.
    from appliance.config import VlmFamily

    if args.family not in get_args(VlmFamily):
        parser.error(f"--family {args.family!r}: one of {', '.join(get_args(VlmFamily))}")
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
