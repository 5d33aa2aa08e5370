"""quantize.gguf: quantizing the tiny fixture models and writing manifests for GGUF sets a site brings."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest

from appliance.engines.vlm_gguf.gguf_manifest import load_vlm_manifest, read_gguf_info, verify_vlm_files
from appliance.engines.vlm_gguf.line_image import LineInput
from appliance.errors import ModelError
from quantize.gguf import main, quantize_gguf

FIXTURES = Path(__file__).parent / "fixtures" / "vlm"


def _llama_cpp() -> object:
    return pytest.importorskip("llama_cpp")


@pytest.mark.parametrize(
    ("family", "quant"), [("smolvlm", "Q8_0"), ("qwen2vl", "Q8_0"), ("qwen2vl", "Q4_K_M")]
)
def test_quantized_copy_is_smaller_reads_as_its_type_and_loads(
    tmp_path: Path, family: str, quant: str
) -> None:
    _llama_cpp()
    from llama_cpp import Llama

    source = FIXTURES / family / "model-f32.gguf"
    target = quantize_gguf(source, tmp_path / f"model-{quant}.gguf", quant, n_threads=1)
    info, original = read_gguf_info(target), read_gguf_info(source)
    # Q4_K_M needs rows of 256: these 64-wide tensors fall back to Q5_0/Q8_0 per tensor, yet the
    # file is still labelled Q4_K_M and shrinks to about a quarter.
    assert info.file_type == quant
    assert info.size < original.size / 3
    assert (info.architecture, info.vocab_sha256) == (original.architecture, original.vocab_sha256)
    llm = Llama(model_path=str(target), n_ctx=64, n_threads=1, verbose=False)
    try:
        assert llm.n_vocab() == original.n_vocab
        assert llm.tokenize(b"Total 12.00", add_bos=False)
    finally:
        llm.close()


def test_quantized_model_with_f32_mmproj_reads_an_image(tmp_path: Path) -> None:
    """The Q8_0 text model with the F32 projector goes through libmtmd and decodes greedily."""
    llama_cpp = _llama_cpp()
    from llama_cpp import Llama, mtmd_cpp

    model = quantize_gguf(FIXTURES / "smolvlm" / "model-f32.gguf", tmp_path / "model-Q8_0.gguf", "Q8_0")
    llm = Llama(model_path=str(model), n_ctx=256, n_batch=256, n_threads=1, verbose=False)
    params = mtmd_cpp.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 1
    params.print_timings = False
    ctx = mtmd_cpp.mtmd_init_from_file(
        str(FIXTURES / "smolvlm" / "mmproj-f32.gguf").encode(), llm.model, params
    )
    assert ctx
    pixels = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    bitmap = mtmd_cpp.mtmd_bitmap_init(
        64, 64, (ctypes.c_uint8 * pixels.size).from_buffer_copy(pixels.tobytes())
    )
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    try:
        text = (
            f"<|im_start|>User: {mtmd_cpp.mtmd_default_marker().decode()}Read.<end_of_utterance>\nAssistant:"
        )
        encoded = text.encode()
        prompt = mtmd_cpp.mtmd_input_text(
            text=encoded, text_len=len(encoded), add_special=True, parse_special=True
        )
        bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(prompt), bitmaps, 1) == 0
        kinds = [
            mtmd_cpp.mtmd_input_chunk_get_type(mtmd_cpp.mtmd_input_chunks_get(chunks, index))
            for index in range(mtmd_cpp.mtmd_input_chunks_size(chunks))
        ]
        # 64 px page, 32 px tiles: a 2x2 grid and the overview, each its own image chunk.
        assert kinds.count(mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE) == 5
        n_past = llama_cpp.llama_pos(0)  # type: ignore[attr-defined]
        status = mtmd_cpp.mtmd_helper_eval_chunks(ctx, llm.ctx, chunks, 0, 0, 256, True, ctypes.byref(n_past))
        assert status == 0
        assert n_past.value == mtmd_cpp.mtmd_helper_get_n_pos(chunks)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))  # type: ignore[attr-defined]
        assert np.isfinite(logits).all()
        assert 0 <= int(np.argmax(logits)) < llm.n_vocab()
    finally:
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        mtmd_cpp.mtmd_bitmap_free(bitmap)
        mtmd_cpp.mtmd_free(ctx)
        llm.close()


def test_projector_is_not_quantized(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="is an mmproj"):
        quantize_gguf(FIXTURES / "qwen2vl" / "mmproj-f32.gguf", tmp_path / "x.gguf", "Q8_0")
    with pytest.raises(ModelError, match="unknown quantization"):
        quantize_gguf(FIXTURES / "qwen2vl" / "model-f32.gguf", tmp_path / "x.gguf", "Q3_XL")
    assert not (tmp_path / "x.gguf").exists()


def test_convert_writes_the_projector_in_the_type_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's quantizer does not take a projector, so `--mmproj-outtype q8_0` is the converter's
    # job; the converter itself needs torch, so a stand-in copies the fixture files it would write.
    import quantize.gguf as gguf_module

    asked: dict[str, str] = {}

    def converter(
        hf_dir: Path, outfile: Path, *, mmproj: bool = False, outtype: str = "f32", **_: object
    ) -> Path:
        role = "mmproj" if mmproj else "model"
        asked[role] = outtype
        shutil.copy(FIXTURES / "qwen2vl" / f"{role}-f32.gguf", outfile)
        return outfile

    monkeypatch.setattr(gguf_module, "convert_hf_checkpoint", converter)
    monkeypatch.setattr(gguf_module, "resolve_llama_src", lambda _given: tmp_path)
    out = tmp_path / "out"
    code = main(
        [
            "convert",
            "--hf",
            str(tmp_path),
            "--family",
            "qwen2vl",
            "--out",
            str(out),
            "--mmproj-outtype",
            "q8_0",
        ]
    )
    assert code == 0
    assert asked == {"model": "f16", "mmproj": "q8_0"}
    manifest = load_vlm_manifest(out / "manifest.json")
    assert {entry.role: entry.file for entry in manifest.files} == {
        "model": "model-f16.gguf",
        "mmproj": "mmproj-q8_0.gguf",
    }


def test_manifest_subcommand_for_site_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "lighton-tiny"
    folder.mkdir()
    for name in ("model-f32.gguf", "mmproj-f32.gguf", "draft-f32.gguf"):
        shutil.copy(FIXTURES / "qwen2vl" / name, folder / name)
    code = main([
        "manifest", "--family", "qwen2vl",
        "--model", str(folder / "model-f32.gguf"), "--mmproj", str(folder / "mmproj-f32.gguf"),
        "--draft", str(folder / "draft-f32.gguf"), "--out", str(folder / "manifest.json"),
    ])  # fmt: skip
    assert code == 0
    manifest = load_vlm_manifest(folder / "manifest.json")
    assert (manifest.name, manifest.family) == ("lighton-tiny", "qwen2vl")
    assert set(verify_vlm_files(manifest, folder)) == {"model", "mmproj", "draft"}
    assert "wrote" in capsys.readouterr().out


def test_manifest_subcommand_refuses_a_wrong_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("model-f32.gguf", "mmproj-f32.gguf"):
        shutil.copy(FIXTURES / "smolvlm" / name, tmp_path / name)
    shutil.copy(FIXTURES / "qwen2vl" / "draft-f32.gguf", tmp_path / "draft-f32.gguf")
    code = main([
        "manifest", "--family", "smolvlm",
        "--model", str(tmp_path / "model-f32.gguf"), "--mmproj", str(tmp_path / "mmproj-f32.gguf"),
        "--draft", str(tmp_path / "draft-f32.gguf"), "--out", str(tmp_path / "manifest.json"),
    ])  # fmt: skip
    assert code == 5
    assert "a draft must share the model's tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize(
    ("family", "expected"), [("qwen2vl_line", LineInput(stretch=1.5, levels=(54, 255))), ("qwen2vl", None)]
)
def test_convert_carries_a_line_readers_stretch_and_levels_into_every_manifest_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str, expected: LineInput | None
) -> None:
    import quantize.gguf as gguf_module

    def converter(hf_dir: Path, outfile: Path, *, mmproj: bool = False, **_: object) -> Path:
        shutil.copy(FIXTURES / "qwen2vl" / f"{'mmproj' if mmproj else 'model'}-f32.gguf", outfile)
        return outfile

    monkeypatch.setattr(gguf_module, "convert_hf_checkpoint", converter)
    monkeypatch.setattr(gguf_module, "resolve_llama_src", lambda _given: tmp_path)
    export = tmp_path / "export"
    export.mkdir()
    LineInput(stretch=1.5, levels=(54, 255)).write(export)
    out = tmp_path / "out"
    args = ["convert", "--hf", str(export), "--family", family, "--out", str(out), "--quant", "Q8_0"]
    assert main(args) == 0
    for manifest in (out / "manifest.json", out / "q8_0" / "manifest.json"):
        written = load_vlm_manifest(manifest)
        assert written.line_input == expected  # a page model has none


def test_convert_refuses_a_line_reader_trained_on_taller_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import quantize.gguf as gguf_module

    converted: list[Path] = []
    monkeypatch.setattr(
        gguf_module, "convert_hf_checkpoint", lambda hf_dir, *_a, **_k: converted.append(hf_dir)
    )
    monkeypatch.setattr(gguf_module, "resolve_llama_src", lambda _given: tmp_path)
    export = tmp_path / "export"
    export.mkdir()
    LineInput(stretch=1.5, height=56).write(export)
    out = tmp_path / "out"
    assert main(["convert", "--hf", str(export), "--family", "qwen2vl_line", "--out", str(out)]) == 6
    assert "trained on lines 56 px high" in capsys.readouterr().err
    assert converted == [] and not (out / "manifest.json").exists()
