"""A random-weight GGUF text model + mmproj at a real VLM's published shapes, scaled from a tiny template.

Usage: python -m bench.vlm_random_model --template DIR --out DIR [--quant Q8_0 --quant Q4_K_M]
                                        [--small] [shape options]

The template is the tiny LightOnOCR fixture (tests/fixtures/vlm/lightonocr, built by
tests.fixtures.vlm.build from transformers' own LightOnOcrForConditionalGeneration and converted by
llama.cpp's converter), whose widths are all different numbers, so every tensor dimension maps to
one hyperparameter. This copies its metadata and tensor names, replicates block 0 for every layer,
scales every dimension to the published shapes (defaults: LightOnOCR-2-1B, Qwen3 text + Pixtral
vision), pads the vocabulary with unused tokens, and writes F16 weights drawn from N(0, 0.02)
(norm weights 1), then quantizes the text model with llama.cpp. The output reads no text; it has
the size, layout and arithmetic of the real model, which is what a speed benchmark needs.

Full size cannot travel to the GPU machine (transfers are small), so the benchmark builds it there.
gguf-py comes from the installed `gguf` package or, failing that, from the llama.cpp sources that
the CUDA build unpacks (LLAMA_GGUF_PY, default /tmp/llama-build/.../vendor/llama.cpp/gguf-py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np


def import_gguf() -> Any:
    try:
        import gguf
    except ImportError:
        default = sorted(Path("/tmp/llama-build").glob("llama_cpp_python-*/vendor/llama.cpp/gguf-py"))
        path = os.environ.get("LLAMA_GGUF_PY") or (str(default[0]) if default else "")
        if not path:
            raise SystemExit("gguf-py not found: install gguf or set LLAMA_GGUF_PY") from None
        sys.path.insert(0, path)
        import gguf
    return gguf


@dataclass(frozen=True)
class Shapes:
    """The published hyperparameters the model is scaled to (LightOnOCR-2-1B's config.json)."""

    text_hidden: int = 1024
    text_layers: int = 28
    text_heads: int = 16
    text_kv_heads: int = 8
    text_head_dim: int = 128
    text_ffn: int = 3072
    text_ctx: int = 40960
    vocab: int = 151936
    vision_hidden: int = 1024
    vision_layers: int = 24
    vision_heads: int = 16
    vision_ffn: int = 4096
    image_size: int = 1540
    merge: int = 2


# Small enough for a CPU smoke test, still with the full vocabulary (its logits dominate a step).
SMALL = Shapes(
    text_hidden=128,
    text_layers=2,
    text_heads=4,
    text_kv_heads=2,
    text_head_dim=32,
    text_ffn=256,
    text_ctx=8192,
    vision_hidden=64,
    vision_layers=2,
    vision_heads=2,
    vision_ffn=128,
    image_size=448,
)
STD = 0.02
# Kept as they are in every model of the family: RGB channels and the 14-pixel patch side.
_FIXED_DIMS = {3: 3, 14: 14}


def _fields(reader: Any, gguf: Any) -> dict[str, tuple[Any, Any, Any]]:
    """Template metadata as key -> (value, type, array element type)."""
    out: dict[str, tuple[Any, Any, Any]] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        out[key] = (field.contents(), vtype, sub)
    return out


def _get(meta: dict[str, tuple[Any, Any, Any]], key: str) -> int:
    return int(meta[key][0])


class _Noise:
    """Normal noise served from one shared pool at random offsets: fast, and different per tensor."""

    def __init__(self, seed: int, size: int = 1 << 25) -> None:
        self._rng = np.random.default_rng(seed)
        self._pool = (self._rng.standard_normal(size, dtype=np.float32) * STD).astype(np.float16)

    def take(self, count: int) -> np.ndarray:
        pool = self._pool
        start = int(self._rng.integers(0, pool.size))
        parts = [pool[start : start + count]]
        filled = parts[0].size
        while filled < count:
            part = pool[: count - filled]
            parts.append(part)
            filled += part.size
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()


def _scale_file(  # noqa: PLR0917 (one call site per file kind, every argument named there)
    gguf: Any,
    template: Path,
    out: Path,
    dims: dict[int, int],
    layers: dict[str, int],
    overrides: dict[str, Any],
    noise: _Noise,
    vocab: int | None,
) -> None:
    """Write `out`: the template's metadata with `overrides`, its tensors scaled by `dims`.

    `layers` maps a block prefix ("blk." or "v.blk.") to the number of blocks wanted; block 0 of
    the template is replicated. Every tensor dimension must be a key of `dims`.
    """
    reader = gguf.GGUFReader(str(template))
    meta = _fields(reader, gguf)
    architecture = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(str(out), architecture)
    for key, (stored, vtype, sub) in meta.items():
        value = overrides.get(key, stored)
        if vocab is not None and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            # Pad to the real vocabulary: never produced by the tokenizer, but the embedding and
            # output matrices (and so the logits each step returns) get their real size.
            extra = vocab - len(stored)
            if key == "tokenizer.ggml.tokens":
                value = [*stored, *(f"<|unused_{index}|>" for index in range(extra))]
            else:
                value = [*stored, *([int(gguf.TokenType.UNUSED)] * extra)]
        writer.add_key_value(key, value, vtype, sub_type=sub)
    for tensor in reader.tensors:
        name = tensor.name
        prefix = next((p for p in layers if name.startswith(p)), None)
        if prefix is not None:
            block, _, rest = name[len(prefix) :].partition(".")
            if block != "0":
                continue
            names = [f"{prefix}{index}.{rest}" for index in range(layers[prefix])]
        else:
            names = [name]
        # GGUF lists dimensions innermost first; numpy wants them outermost first.
        shape_gguf = [int(d) for d in tensor.shape]
        missing = [d for d in shape_gguf if d not in dims and d != 1]
        if missing:
            raise SystemExit(
                f"{template.name}: {name} has dimension(s) {missing} that map to no hyperparameter"
            )
        shape = [dims.get(d, 1) for d in reversed(shape_gguf)]
        count = int(np.prod(shape))
        for new_name in names:
            if len(shape) == 1:  # norm weights (and any bias): F32 as the converter writes them
                data = np.ones(shape, dtype=np.float32) if "norm" in new_name or "ln" in new_name else None
                if data is None:
                    data = np.zeros(shape, dtype=np.float32)
            else:
                data = noise.take(count).reshape(shape)
            writer.add_tensor(new_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build(template_dir: Path, out_dir: Path, shapes: Shapes, seed: int = 0) -> tuple[Path, Path]:
    """Write model-f16.gguf and mmproj-f16.gguf at `shapes` into out_dir."""
    gguf = import_gguf()
    out_dir.mkdir(parents=True, exist_ok=True)
    noise = _Noise(seed)
    text_template = template_dir / "model-f32.gguf"
    mmproj_template = template_dir / "mmproj-f32.gguf"
    text_meta = _fields(gguf.GGUFReader(str(text_template)), gguf)
    vision_meta = _fields(gguf.GGUFReader(str(mmproj_template)), gguf)
    arch = "qwen3"
    t_embd = _get(text_meta, f"{arch}.embedding_length")
    t_heads = _get(text_meta, f"{arch}.attention.head_count")
    t_kv = _get(text_meta, f"{arch}.attention.head_count_kv")
    t_head_dim = _get(text_meta, f"{arch}.attention.key_length")
    t_ffn = _get(text_meta, f"{arch}.feed_forward_length")
    t_vocab = len(text_meta["tokenizer.ggml.tokens"][0])
    v_embd = _get(vision_meta, "clip.vision.embedding_length")
    v_ffn = _get(vision_meta, "clip.vision.feed_forward_length")
    merge = _get(vision_meta, "clip.vision.spatial_merge_size")
    text_dims = {
        t_embd: shapes.text_hidden,
        t_heads * t_head_dim: shapes.text_heads * shapes.text_head_dim,
        t_kv * t_head_dim: shapes.text_kv_heads * shapes.text_head_dim,
        t_head_dim: shapes.text_head_dim,
        t_ffn: shapes.text_ffn,
        t_vocab: shapes.vocab,
    }
    vision_dims = {
        **_FIXED_DIMS,
        v_embd: shapes.vision_hidden,
        v_ffn: shapes.vision_ffn,
        v_embd * merge * merge: shapes.vision_hidden * shapes.merge * shapes.merge,
        t_embd: shapes.text_hidden,  # the projector's output is the text model's width
    }
    for name, table, wanted in (("text", text_dims, 6), ("vision", vision_dims, 6)):
        if len(table) != wanted:
            raise SystemExit(f"template {name} widths are not all different: {table}")
    model = out_dir / "model-f16.gguf"
    mmproj = out_dir / "mmproj-f16.gguf"
    _scale_file(
        gguf,
        text_template,
        model,
        text_dims,
        {"blk.": shapes.text_layers},
        {
            "general.name": "random-lightonocr-shapes",
            "general.file_type": 1,  # mostly F16
            f"{arch}.block_count": shapes.text_layers,
            f"{arch}.context_length": shapes.text_ctx,
            f"{arch}.embedding_length": shapes.text_hidden,
            f"{arch}.feed_forward_length": shapes.text_ffn,
            f"{arch}.attention.head_count": shapes.text_heads,
            f"{arch}.attention.head_count_kv": shapes.text_kv_heads,
            f"{arch}.attention.key_length": shapes.text_head_dim,
            f"{arch}.attention.value_length": shapes.text_head_dim,
        },
        noise,
        shapes.vocab,
    )
    _scale_file(
        gguf,
        mmproj_template,
        mmproj,
        vision_dims,
        {"v.blk.": shapes.vision_layers},
        {
            "general.name": "random-lightonocr-shapes-mmproj",
            "general.file_type": 1,
            "clip.vision.projection_dim": shapes.text_hidden,
            "clip.vision.image_size": shapes.image_size,
            "clip.vision.embedding_length": shapes.vision_hidden,
            "clip.vision.feed_forward_length": shapes.vision_ffn,
            "clip.vision.block_count": shapes.vision_layers,
            "clip.vision.attention.head_count": shapes.vision_heads,
            "clip.vision.spatial_merge_size": shapes.merge,
        },
        noise,
        None,
    )
    return model, mmproj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vlm_random_model", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--template", type=Path, default=Path("tests/fixtures/vlm/lightonocr"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quant", action="append", default=[], help="Q8_0, Q4_K_M, ... (repeatable)")
    parser.add_argument("--small", action="store_true", help="small shapes for a CPU smoke test")
    parser.add_argument("--seed", type=int, default=0)
    for item in fields(Shapes):
        parser.add_argument(f"--{item.name.replace('_', '-')}", type=int, dest=item.name)
    args = parser.parse_args(argv)
    base = SMALL if args.small else Shapes()
    given = {item.name: getattr(args, item.name) for item in fields(Shapes) if getattr(args, item.name)}
    shapes = Shapes(**{**base.__dict__, **given})
    started = time.perf_counter()
    model, mmproj = build(args.template, args.out, shapes, args.seed)
    sizes = f"{model.stat().st_size / 2**20:.0f} MiB, {mmproj.stat().st_size / 2**20:.0f} MiB"
    print(f"{model}, {mmproj} ({sizes}) in {time.perf_counter() - started:.1f} s", flush=True)
    if args.quant:
        import_gguf()  # quantize.gguf reads headers with gguf-py
        from quantize.gguf import quantize_gguf

        for quant in args.quant:
            started = time.perf_counter()
            target = quantize_gguf(model, args.out / f"model-{quant}.gguf", quant)
            size = target.stat().st_size / 2**20
            print(f"{target} ({size:.0f} MiB) in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
