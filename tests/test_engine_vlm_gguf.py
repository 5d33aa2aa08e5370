"""The vlm_gguf engine end to end on tiny real-architecture GGUF models, on the CPU with one thread.

OCR_APPLIANCE_TEST_VLM_DEVICE=gpu runs the same tests fully offloaded (a CUDA build of llama.cpp).
"""

from __future__ import annotations

import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from appliance.config import CascadeConfig, RasterizeConfig, VlmGgufConfig
from appliance.engines.base import PageText
from appliance.engines.factory import EnginePair
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.vlm_gguf import runtime
from appliance.engines.vlm_gguf.decoding import DecodeStats, Generation, text_log_likelihood
from appliance.engines.vlm_gguf.engine import VlmGgufEngine
from appliance.engines.vlm_gguf.gguf_manifest import write_vlm_manifest
from appliance.engines.vlm_gguf.line_image import LineInput
from appliance.engines.vlm_gguf.output import make_line
from appliance.engines.vlm_gguf.profiles import profile_for
from appliance.errors import ModelError
from appliance.pipeline.cascade import Cascade
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests import rendering
from tests.fakes.language_model import MarkovModel

FIXTURES = Path(__file__).parent / "fixtures" / "vlm"
FAMILIES = ("qwen2vl", "smolvlm", "paddleocr_vl", "lightonocr")
DEVICE = os.environ.get("OCR_APPLIANCE_TEST_VLM_DEVICE", "cpu")
# Exact equality of drafted and plain greedy output holds on the CPU. CUDA picks other kernels for
# a batch of drafts than for one token, so rounding differs: on an H200 one family of four
# (paddleocr_vl, its own tokens as the hint) diverged at token 32. bench/vlm_gpu_bench.py measures
# that agreement on the GPU ("same_as_expected").
exact_on_cpu_only = pytest.mark.skipif(DEVICE == "gpu", reason="batched CUDA kernels round differently")


def _page(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (96, 128, 3), dtype=np.uint8)


def _engine(
    family: str, model_dir: Path | None = None, as_family: str = "auto", **settings: Any
) -> VlmGgufEngine:
    """The fixture model of `family`, asked as `as_family` asks when that is given."""
    values: dict[str, Any] = {
        "model_dir": model_dir or FIXTURES / family,
        "family": as_family,
        "device": DEVICE,
        "threads": 1,
        "image_max_side": 128,
        "max_tokens_per_page": 48,
        # Random models loop; these tests look at drafting, so the guard waits longer than a page.
        "repetition": {"min_span": 400},
    }
    values.update(settings)
    return VlmGgufEngine(VlmGgufConfig.model_validate(values))


@pytest.fixture(scope="module", params=FAMILIES)
def reference(request: pytest.FixtureRequest) -> tuple[str, list[int], str]:
    """Each family's greedy tokens and text for page 0 without any draft."""
    engine = _engine(request.param, draft={"source": "none"})
    try:
        page = engine.read(_page(0))
        assert engine.last_generation is not None
        tokens = list(engine.last_generation.tokens)
        text = engine.text_of(tokens)  # the model's own output, as the hint it would verify fastest
        assert "\n".join(line.text for line in page.lines).strip() in text
    finally:
        engine.close()
    return request.param, tokens, text


def test_a_page_is_read_end_to_end(reference: tuple[str, list[int], str]) -> None:
    family, tokens, _ = reference
    engine = _engine(family, draft={"source": "none"})
    try:
        page = engine.read(_page(0))
        details = page.details["vlm_gguf"]
        assert details["family"] == family
        assert 0 < details["image_tokens"] < details["prompt_tokens"]
        assert 0 < details["image_ms"] <= details["prompt_ms"]  # the image's part of the prompt
        assert details["generated_tokens"] == len(tokens) > 0
        assert details["drafted_tokens"] == 0
        assert all(line.engine == "vlm_gguf" for line in page.lines)
        description = engine.describe()
        assert description["models"]["model"]["quantization"] == "F32"
        assert (description["memory_plan"]["n_gpu_layers"] > 0) == (DEVICE == "gpu")
    finally:
        engine.close()
    # The image matters: another page gives other tokens (the vision path is really used).
    assert len(set(tokens)) > 3, "the fixture model writes one token over and over: regenerate it"


@exact_on_cpu_only
@pytest.mark.parametrize("source", ["model", "ocr_hint"])
def test_greedy_output_is_identical_with_drafts(reference: tuple[str, list[int], str], source: str) -> None:
    family, tokens, text = reference
    engine = _engine(family, draft={"source": source})
    try:
        page = engine.read(_page(0), hint=text)
        assert engine.last_generation is not None
        assert engine.last_generation.tokens == tokens
        details = page.details["vlm_gguf"]
        assert details["draft_source"] == ("draft_model" if source == "model" else "ocr_hint")
        assert details["drafted_tokens"] > 0
        assert 0 <= details["accepted_tokens"] <= details["drafted_tokens"]
        # Every accepted token saved a forward pass of the target.
        # Every accepted token saved a forward pass of the target (the first token comes from the
        # prompt's logits, the last chosen one is never fed).
        assert details["target_steps"] + details["accepted_tokens"] + 1 >= details["generated_tokens"]
    finally:
        engine.close()


@exact_on_cpu_only
def test_the_models_own_tokens_as_draft_are_all_accepted(reference: tuple[str, list[int], str]) -> None:
    """The upper bound through real llama.cpp: drafted tokens verified in batches and all kept,
    across M-RoPE positions after the image chunk (Qwen2-VL). (A text hint cannot show it on
    random models: their byte tokens are not valid UTF-8, so their text does not round-trip.)"""
    family, tokens, _ = reference
    # A fixed verification cost: the measured one depends on what else the machine is doing.
    engine = _engine(family, draft={"source": "ocr_hint", "extra_token_cost": 0.1})
    try:
        details = engine.read(_page(0), hint_tokens=tokens).details["vlm_gguf"]
        assert engine.last_generation is not None
        assert engine.last_generation.tokens == tokens
        assert details["acceptance_rate"] == 1.0
        assert details["target_steps"] <= len(tokens) // 4
    finally:
        engine.close()


@exact_on_cpu_only
def test_a_useless_hint_switches_drafting_off_and_changes_nothing(
    reference: tuple[str, list[int], str],
) -> None:
    family, tokens, _ = reference
    engine = _engine(family, draft={"source": "ocr_hint", "min_drafted": 4, "min_acceptance": 0.9})
    try:
        # The hint agrees on the first token, then never again: every later draft is wrong.
        wrong = [(token + 7) % 1000 for token in tokens]
        engine.read(_page(0), hint_tokens=[tokens[0], *wrong])
        assert engine.last_generation is not None
        assert engine.last_generation.tokens == tokens
        stats = engine.last_generation.stats
        assert stats.drafted >= 4
        assert stats.disabled_after is not None
    finally:
        engine.close()


def test_pages_do_not_leak_into_each_other(reference: tuple[str, list[int], str]) -> None:
    """Cache rollback after image chunks: page A, page B, page A again reads A the same."""
    family, tokens, text = reference
    engine = _engine(family, draft={"source": "ocr_hint"})
    try:
        engine.read(_page(0), hint=text)
        engine.read(_page(1), hint=text)
        engine.read(_page(0), hint=text)
        assert engine.last_generation is not None
        assert engine.last_generation.tokens == tokens
    finally:
        engine.close()


def test_pages_sent_from_several_threads_at_once_read_as_one_after_another(
    reference: tuple[str, list[int], str],
) -> None:
    """A worker reading several jobs at once shares one engine: its reads must not mix in one context."""
    family = reference[0]
    engine = _engine(family, draft={"source": "none"})
    try:
        alone = [_text(engine.read(_page(seed))) for seed in (0, 1, 2)]
        assert len(set(alone)) == 3  # three pages the model reads differently
        with ThreadPoolExecutor(3) as pool:
            together = list(pool.map(lambda seed: _text(engine.read(_page(seed))), [0, 1, 2, 0, 1, 2]))
        assert together == alone * 2
    finally:
        engine.close()


def test_the_prompt_head_is_computed_once_and_the_output_stays_the_same(
    reference: tuple[str, list[int], str],
) -> None:
    """The text before the image is kept in the cache after the first page; later pages skip it."""
    family, tokens, _ = reference
    engine = _engine(family, draft={"source": "none"})
    fresh = _engine(family, draft={"source": "none"}, reuse_prompt_head=False)
    try:
        first = engine.read(_page(1)).details["vlm_gguf"]
        again = engine.read(_page(0)).details["vlm_gguf"]
        assert engine.last_generation is not None
        assert engine.last_generation.tokens == tokens
        assert first["prompt_tokens_reused"] == 0
        assert 0 < again["prompt_tokens_reused"] < again["prompt_tokens"]
        fresh.read(_page(1))
        assert fresh.read(_page(0)).details["vlm_gguf"]["prompt_tokens_reused"] == 0
        assert fresh.last_generation is not None
        assert fresh.last_generation.tokens == tokens
    finally:
        engine.close()
        fresh.close()


def test_a_line_reader_keeps_everything_before_the_image_and_reads_the_same() -> None:
    """qwen2vl_line asks before the image: after the first line only the image and the turn's end are new."""
    line = _engine("qwen2vl", as_family="qwen2vl_line", draft={"source": "none"})
    fresh = _engine("qwen2vl", as_family="qwen2vl_line", draft={"source": "none"}, reuse_prompt_head=False)
    page = _engine("qwen2vl", draft={"source": "none"})
    try:
        line.read(_page(1))
        second = line.read(_page(0)).details["vlm_gguf"]
        assert line.last_generation is not None
        fresh.read(_page(1))
        fresh.read(_page(0))
        assert fresh.last_generation is not None
        assert line.last_generation.tokens == fresh.last_generation.tokens
        page.read(_page(1))
        page_second = page.read(_page(0)).details["vlm_gguf"]
        line_new = second["prompt_tokens"] - second["prompt_tokens_reused"] - second["image_tokens"]
        page_new = (
            page_second["prompt_tokens"] - page_second["prompt_tokens_reused"] - page_second["image_tokens"]
        )
        # The page prompt's instruction, after its image, is computed again for every page; the
        # line reader's, before its image, is kept: what is new shrinks by exactly the former.
        assert line_new > 0
        assert page_new - line_new == len(page._model.tokenize(profile_for("qwen2vl").prompt or ""))
    finally:
        line.close()
        fresh.close()
        page.close()


def _text(page: PageText) -> str:
    return "\n".join(line.text for line in page.lines)


@exact_on_cpu_only
def test_lines_read_side_by_side_read_as_each_alone_and_the_head_stays() -> None:
    """read_lines decodes a group's lines in one pass each: the text is each line's read alone."""
    rng = np.random.default_rng(3)
    crops = [rng.integers(0, 256, (30, width, 3), dtype=np.uint8) for width in (120, 300, 200, 500, 90)]
    alone = _engine("qwen2vl", as_family="qwen2vl_line", draft={"source": "none"}, image_max_side=0)
    together = _engine(
        "qwen2vl", as_family="qwen2vl_line", draft={"source": "none"}, image_max_side=0, lines_together=3
    )
    try:
        expected = [alone.read(crop) for crop in crops]
        read = together.read_lines(crops)
        assert [_text(page) for page in read] == [_text(page) for page in expected]
        figures = [page.details["vlm_gguf"] for page in read]
        assert [f["lines_together"] for f in figures] == [3, 3, 3, 2, 2]
        wanted = [page.details["vlm_gguf"] for page in expected]
        for key in ("generated_tokens", "image_tokens", "prompt_tokens", "stop_reason"):
            assert [f[key] for f in figures] == [w[key] for w in wanted], key
        # Each line's image is its own (encoded apart); the prompt time is the group's, shared.
        groups = [figures[:3], figures[3:]]
        for group in groups:
            assert all(f["image_ms"] > 0 for f in group)
            assert sum(f["image_ms"] for f in group) <= sum(f["prompt_ms"] for f in group) + 0.01 * len(group)
        # Afterwards a line read alone reads as before, the prompt's head still kept.
        again = together.read(crops[1])
        assert _text(again) == _text(expected[1])
        assert again.details["vlm_gguf"]["prompt_tokens_reused"] > 0
    finally:
        alone.close()
        together.close()


def test_a_line_read_writes_no_more_than_its_crop_is_wide() -> None:
    """A line reader that runs on is cut at a bound set by its crop's width, alone and side by side."""
    rng = np.random.default_rng(5)
    crops = [rng.integers(0, 256, (28, width, 3), dtype=np.uint8) for width in (60, 600)]
    settings: dict[str, Any] = {"draft": {"source": "none"}, "image_max_side": 0, "max_tokens_per_page": 0}
    alone = _engine("qwen2vl", as_family="qwen2vl_line", **settings)
    together = _engine("qwen2vl", as_family="qwen2vl_line", lines_together=2, **settings)
    profile = alone.profile
    try:
        for read in ([alone.read(crop) for crop in crops], together.read_lines(crops)):
            figures = [page.details["vlm_gguf"] for page in read]
            limits = [profile.token_limit(f["image_tokens"]) for f in figures]
            assert limits[0] == 4 * figures[0]["image_tokens"] + 8 < limits[1] < profile.max_tokens
            # The random model never ends a line: each is cut at its own limit, not the family's 192.
            assert [f["generated_tokens"] for f in figures] == limits
            assert [f["stop_reason"] for f in figures] == ["max_tokens", "max_tokens"]
    finally:
        alone.close()
        together.close()


@exact_on_cpu_only
def test_lines_read_side_by_side_draft_each_from_its_own_hint_and_read_as_alone() -> None:
    """With hints, read_lines checks each line's drafts in the group's passes: same text, fewer passes."""
    rng = np.random.default_rng(5)
    crops = [rng.integers(0, 256, (30, width, 3), dtype=np.uint8) for width in (150, 260, 400)]
    alone = _engine("qwen2vl", as_family="qwen2vl_line", draft={"source": "none"}, image_max_side=0)
    together = _engine(
        "qwen2vl",
        as_family="qwen2vl_line",
        draft={"source": "ocr_hint", "extra_token_cost": 0.0},
        image_max_side=0,
        lines_together=3,
    )
    try:
        expected = [alone.read(crop) for crop in crops]
        texts = [_text(page) for page in expected]
        plain = together.read_lines(crops)
        drafted = together.read_lines(crops, hints=[texts[0], "nothing like it", None])
        assert [_text(page) for page in plain] == texts
        assert [_text(page) for page in drafted] == texts
        figures = [page.details["vlm_gguf"] for page in drafted]
        assert [f["draft_source"] for f in figures] == ["ocr_hint", "ocr_hint", "none"]
        assert figures[0]["accepted_tokens"] > 0
        assert figures[0]["target_steps"] < plain[0].details["vlm_gguf"]["target_steps"]
        assert figures[2]["drafted_tokens"] == 0
        # Rejected drafts leave nothing behind: the group reads again as before, drafted or not.
        assert [_text(page) for page in together.read_lines(crops)] == texts
    finally:
        alone.close()
        together.close()


def test_a_line_reader_gets_each_crop_at_its_trained_size(tmp_path: Path) -> None:
    """qwen2vl_line sizes a crop as train/ does: 28 px high, whole tokens, 8 to 40 of them, at the
    stretch its manifest records (1.0 where it records none, as models from before the stretch)."""
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (40, 300, 3), dtype=np.uint8)
    large = cv2.resize(small, (600, 80))  # the same line scanned at twice the resolution
    long_line = rng.integers(0, 256, (30, 3000, 3), dtype=np.uint8)
    stretched = tmp_path / "stretched"
    shutil.copytree(FIXTURES / "qwen2vl", stretched)
    files = {role: stretched / f"{role}-f32.gguf" for role in ("model", "mmproj")}
    write_vlm_manifest(
        stretched / "manifest.json", "qwen2vl-line", "qwen2vl_line", files, line_input=LineInput(stretch=1.5)
    )
    line = _engine("qwen2vl", as_family="qwen2vl_line", draft={"source": "none"}, image_max_side=0)
    wide = _engine("qwen2vl", stretched, draft={"source": "none"}, image_max_side=0)
    page = _engine("qwen2vl", draft={"source": "none"}, image_max_side=0)

    def image_tokens(engine: VlmGgufEngine, *crops: np.ndarray) -> list[int]:
        return [engine.read(crop).details["vlm_gguf"]["image_tokens"] for crop in crops]

    try:
        # 300 x 40 -> 210 x 28, padded to 224: 8 tokens at either resolution; 3,000 x 30 is squeezed to 40.
        assert image_tokens(line, small, large, long_line) == [8, 8, 40]
        # Stretched by 1.5: 315 px, padded to 336, 12 tokens; the long line stays at the cap.
        assert image_tokens(wide, small, large, long_line) == [12, 12, 40]
        as_page = image_tokens(page, small, large)
        assert as_page[0] != as_page[1]  # a page profile lets llama.cpp size the image itself
    finally:
        line.close()
        wide.close()
        page.close()


def test_a_line_reader_trained_on_levelled_lines_reads_its_crops_levelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest's line_levels reach prepare_line: a faded crop is read with the ink and paper levels
    its model was trained on; without them it is read as scanned."""
    import appliance.engines.vlm_gguf.engine as engine_module

    seen: list[np.ndarray] = []
    real_prepare = engine_module.prepare_line

    def spy(*args: Any, **kwargs: Any) -> np.ndarray:
        seen.append(real_prepare(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(engine_module, "prepare_line", spy)
    faded = np.full((40, 300, 3), 200, np.uint8)  # grey paper
    faded[10:30, 50:250] = 120  # faded ink
    levelled = tmp_path / "levelled"
    shutil.copytree(FIXTURES / "qwen2vl", levelled)
    files = {role: levelled / f"{role}-f32.gguf" for role in ("model", "mmproj")}
    levels = LineInput(stretch=1.0, levels=(54, 255))
    write_vlm_manifest(levelled / "manifest.json", "line", "qwen2vl_line", files, line_input=levels)
    plain = _engine("qwen2vl", as_family="qwen2vl_line", draft={"source": "none"}, image_max_side=0)
    level = _engine("qwen2vl", levelled, draft={"source": "none"}, image_max_side=0)
    try:
        plain.read(faded)
        level.read(faded)
    finally:
        plain.close()
        level.close()
    as_scanned, as_trained = seen
    assert as_scanned[14, 105].tolist() == [120] * 3 and as_scanned[2, 105].tolist() == [200] * 3
    assert as_trained[14, 105].tolist() == [54] * 3 and as_trained[2, 105].tolist() == [255] * 3


def _cascade_crop_shapes(engine: VlmGgufEngine, page: np.ndarray, first: PageText) -> list[tuple[int, ...]]:
    """The shapes of the crops the cascade (`unit: lines`) hands the engine for the first read's lines."""
    shapes: list[tuple[int, ...]] = []
    read = engine.read

    def spy(image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        shapes.append(image.shape[:2])
        return read(image, hint, deadline)

    engine.read = spy  # type: ignore[method-assign,assignment]
    Cascade(engine, CascadeConfig(mode="always", unit="lines")).refine(page, first)
    return shapes


def test_a_line_reader_gets_the_onnx_recognisers_crop_and_a_page_vlm_more_paper() -> None:
    """The cascade cuts a line reader's crop as it cuts the ONNX recogniser's (train/ measured that one)."""
    page = np.full((200, 300, 3), 255, np.uint8)
    page[40:56, 20:260] = 0
    box = (20.0, 40.0, 260.0, 56.0)
    first = PageText(lines=[make_line("TOTAL 12.5O", [0.5] * 11, box, engine="ppocr_onnx")])
    line = _engine("qwen2vl", as_family="qwen2vl_line", max_tokens_per_page=2, draft={"source": "none"})
    vlm = _engine("qwen2vl", max_tokens_per_page=2, draft={"source": "none"})
    try:
        # The 240 x 16 box with an eighth of its height round it (2 px each side), as
        # OnnxLineReader.line_margin; a page VLM gets a quarter (4 px).
        assert _cascade_crop_shapes(line, page, first) == [(20, 244)]
        assert _cascade_crop_shapes(vlm, page, first) == [(24, 248)]
    finally:
        line.close()
        vlm.close()


def test_a_page_cut_short_goes_to_review(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine("qwen2vl", max_tokens_per_page=5, draft={"source": "none"})
    try:
        page = engine.read(_page(0))
        assert page.details["vlm_gguf"]["stop_reason"] == "max_tokens"
        assert page.review_reasons == [
            "vlm_gguf: the read needed more tokens than its limit (a page's, or a line's by its width)"
        ]
        # A loop is cut the same way: the guard's verdict becomes the page's review reason.
        monkeypatch.setattr(engine._guard.__class__, "looping", lambda self, tokens: len(tokens) >= 3)
        page = engine.read(_page(0))
        assert page.details["vlm_gguf"]["stop_reason"] == "repetition"
        assert page.details["vlm_gguf"]["generated_tokens"] == 3
        assert page.review_reasons and "repeating" in page.review_reasons[0]
    finally:
        engine.close()


def _copy_family(family: str, tmp_path: Path) -> Path:
    target = tmp_path / family
    shutil.copytree(FIXTURES / family, target)
    return target


def test_a_truncated_model_is_refused_with_its_name(tmp_path: Path) -> None:
    folder = _copy_family("qwen2vl", tmp_path)
    model = folder / "model-f32.gguf"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    with pytest.raises(ModelError, match=r"model-f32\.gguf"):
        _engine("qwen2vl", model_dir=folder)


def test_a_draft_with_another_vocabulary_is_refused(tmp_path: Path) -> None:
    folder = _copy_family("qwen2vl", tmp_path)
    shutil.copy(FIXTURES / "smolvlm" / "draft-f32.gguf", folder / "draft-f32.gguf")
    write_vlm_manifest(
        folder / "manifest.json",
        name="mixed",
        family="qwen2vl",
        files={role: folder / f"{role}-f32.gguf" for role in ("model", "mmproj", "draft")},
    )
    with pytest.raises(ModelError, match="draft"):
        _engine("qwen2vl", model_dir=folder, draft={"source": "model"})


def test_a_draft_model_source_without_a_draft_file_is_refused(tmp_path: Path) -> None:
    folder = _copy_family("qwen2vl", tmp_path)
    (folder / "draft-f32.gguf").unlink()
    write_vlm_manifest(
        folder / "manifest.json",
        name="no-draft",
        family="qwen2vl",
        files={role: folder / f"{role}-f32.gguf" for role in ("model", "mmproj")},
    )
    with pytest.raises(ModelError, match="names no 'draft'"):
        _engine("qwen2vl", model_dir=folder, draft={"source": "model"})
    _engine("qwen2vl", model_dir=folder, draft={"source": "ocr_hint"}).close()


def test_the_vram_budget_is_shared_by_the_worker_processes() -> None:
    from appliance.config import EngineConfig
    from appliance.engines.factory import build_engine, vlm_of

    config = EngineConfig.model_validate(
        {
            "ppocr_onnx": {"provider": "cpu"},
            "vlm_gguf": {"model_dir": str(FIXTURES / "qwen2vl"), "device": "cpu", "vram_budget_mb": 8192},
        }
    )
    engine = build_engine(config, workers=2)
    try:
        vlm = vlm_of(engine)
        assert vlm is not None
        assert engine.describe()["vlm"]["memory_plan"]["budget_mb"] == 4096
    finally:
        engine.close()


@pytest.mark.parametrize(("family", "layers"), [("qwen2vl", 2), ("smolvlm", 2)])
def test_the_memory_plan_sees_the_models_real_shape(family: str, layers: int) -> None:
    """The shape comes from the header: a vocabulary-only llama.cpp load reports 0 layers."""
    from appliance.engines.vlm_gguf.runtime import model_shape

    folder = FIXTURES / family
    shape = model_shape(folder / "model-f32.gguf", folder / "mmproj-f32.gguf", None)
    assert shape.n_layer == layers
    assert shape.head_dim > 0 and shape.n_head_kv > 0
    assert shape.n_vocab == 1024
    assert shape.kv_bytes_per_token("f16") == 2 * layers * shape.n_head_kv * shape.head_dim * 2


def test_device_memory_asks_ggml_for_every_device_of_this_build() -> None:
    """A real call into libggml's device registry: the CPU always, GPUs only on a CUDA build."""
    from appliance.engines.vlm_gguf import runtime

    devices = runtime.device_memory()
    cpus = [device for device in devices if device.kind == "cpu"]
    assert len(cpus) == 1 and cpus[0].name == "CPU"
    assert cpus[0].total_bytes > 0 and 0 <= cpus[0].free_bytes <= cpus[0].total_bytes
    gpus = [device for device in devices if device.kind in ("gpu", "igpu")]
    if runtime.supports_gpu():
        assert gpus and all(0 < gpu.free_bytes <= gpu.total_bytes for gpu in gpus)
        used = runtime.gpu_memory_used()  # read again: other processes may have moved it a little
        assert used is not None and 0 < used <= sum(gpu.total_bytes for gpu in gpus)
    else:
        assert not gpus
        assert runtime.gpu_memory_used() is None


def test_on_the_cpu_no_gpu_memory_is_reported() -> None:
    # Also on a CUDA build: an engine told to stay on the CPU never asks the GPU.
    engine = _engine("qwen2vl", device="cpu", draft={"source": "none"}, max_tokens_per_page=4)
    try:
        details = engine.read(_page(0)).details["vlm_gguf"]
        assert "gpu_memory_used_bytes" not in details
        assert engine.describe()["gpu_memory"] is None
    finally:
        engine.close()


def test_gpu_memory_is_sampled_before_and_after_loading_and_after_every_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GPU cannot run here: ggml's device readings are replaced by a card whose use changes
    between the samples (the models themselves load and read on the CPU)."""
    from appliance.engines.vlm_gguf import runtime

    mib = 2**20
    # GPU memory in use at each sample: before the load, after it, after page 1, 2 and 3.
    used = [1000 * mib, 3000 * mib, 4500 * mib, 3500 * mib, 4000 * mib]
    calls: list[int] = []

    def device_memory() -> list[runtime.DeviceMemory]:
        reading = used[min(len(calls), len(used) - 1)]
        calls.append(reading)
        total = 80_000 * mib
        return [
            runtime.DeviceMemory("CPU", "cpu", 1 * mib, 64_000 * mib),  # never counted
            runtime.DeviceMemory("CUDA0", "gpu", total - (reading - 200 * mib), total),
            runtime.DeviceMemory("iGPU", "igpu", 800 * mib, 1000 * mib),  # 200 MiB in use, counted
        ]

    monkeypatch.setattr(runtime, "device_memory", device_memory)
    monkeypatch.setattr(runtime, "supports_gpu", lambda: True)
    engine = _engine(
        "qwen2vl", device="auto", vram_budget_mb=2048, draft={"source": "none"}, max_tokens_per_page=4
    )
    try:
        assert engine.describe()["gpu_memory"] == {
            "before_load_bytes": 1000 * mib,
            "after_load_bytes": 3000 * mib,
            "peak_bytes": 3000 * mib,
            "budget_bytes": 2048 * mib,
        }
        pages = [engine.read(_page(seed)).details["vlm_gguf"] for seed in range(3)]
        assert [page["gpu_memory_used_bytes"] for page in pages] == used[2:]
        gpu_memory = engine.describe()["gpu_memory"]
        assert gpu_memory["peak_bytes"] == 4500 * mib  # page 1, not the last page
        assert gpu_memory["before_load_bytes"] == 1000 * mib
        assert gpu_memory["after_load_bytes"] == 3000 * mib
        assert len(calls) == 5  # one sample each: no reading hidden elsewhere
    finally:
        engine.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_cascade_sends_line_crops_a_real_engine_reads(family: str) -> None:
    """Line by line, the VLM sees crops a few dozen pixels high; every family reads them."""
    page = np.full((200, 300, 3), 255, np.uint8)
    page[40:56, 20:260] = 0
    first = PageText(
        lines=[make_line("TOTAL 12.5O", [0.5] * 11, (20.0, 40.0, 260.0, 56.0), engine="ppocr_onnx")]
    )
    engine = _engine(family, max_tokens_per_page=8)
    try:
        result = Cascade(engine, CascadeConfig(mode="below_threshold", unit="lines")).refine(page, first)
    finally:
        engine.close()
    cascade = result.details["cascade"]
    assert cascade["route"] == "vlm_lines" and cascade["lines_sent"] == 1
    assert result.details["vlm_gguf"]["generated_tokens"] > 0
    # A random model writes until its token limit: the line's ONNX read stands, and says why.
    if cascade["lines_replaced"] == 0:
        assert result.lines[0].text == "TOTAL 12.5O" and cascade["lines_kept"]
    else:
        assert result.lines[0].engine == "vlm_gguf" and result.lines[0].box == (20.0, 40.0, 260.0, 56.0)


def test_a_line_cascade_keeping_both_readers_scores_asks_each_real_reader_for_them(
    engine: PpocrOnnxEngine,
) -> None:
    """keep: auto is joint for a VLM line reader: the processor has both real readers keep scores."""
    reader = _engine("qwen2vl", as_family="qwen2vl_line", image_max_side=0)
    page = rendering.receipt().bgr()
    try:
        assert all(line.likelihood is None for line in engine.recognize(page).lines)
        cascade = CascadeConfig(mode="always", unit="lines")
        processor = DocumentProcessor(
            EnginePair(engine, reader), Rasterizer(RasterizeConfig()), cascade=cascade
        )
        assert processor._cascade is not None and processor._cascade.keep == "joint"
        lines = engine.recognize(page).lines
        assert lines and all(line.likelihood is not None for line in lines)
        assert reader._score_hints
    finally:
        engine.keep_step_evidence(0)  # the engine is the session's
        reader.close()
    # A page reader has no such scores to give.
    page_reader = _engine("qwen2vl")
    try:
        assert not page_reader.score_hints(True)
    finally:
        page_reader.close()


class _ScoredModel:
    """A llama.cpp model's vocabulary as _hint_scores uses it: one character a token, 0 the end."""

    n_vocab = 50

    def tokenize(self, text: str) -> list[int]:
        return [1 + (ord(char) % 48) for char in text]

    def piece(self, token: int) -> bytes:
        return chr(ord("0") + token - 1).encode() if token else b""

    def is_end(self, token: int) -> bool:
        return token == 0


class _ScoredContext:
    """Sequences past their prompts whose rows come from MarkovModels: feed, forget, or run out of room."""

    def __init__(self, room: int = 100) -> None:
        self.models = {0: MarkovModel(seed=3), 1: MarkovModel(seed=4)}
        self.forgotten: list[tuple[int, int]] = []
        self.room = room

    def forget(self, sequence: int, position: int) -> None:
        self.forgotten.append((sequence, position))

    def feed_sequences(
        self, parts: list[tuple[int, int, list[int]]], every_row: bool = False
    ) -> list[np.ndarray]:
        if sum(len(tokens) for _, _, tokens in parts) > self.room:
            raise runtime.OutOfMemoryError("llama_decode failed with status 1")
        return [self.models[sequence].append(tokens) for sequence, _, tokens in parts]


def _scoring_engine() -> VlmGgufEngine:
    engine = object.__new__(VlmGgufEngine)  # what _hint_scores needs of a loaded line reader
    engine._score_hints = True
    engine._model = _ScoredModel()  # type: ignore[assignment]
    engine._end_tokens = None
    return engine


def _ended(tokens: list[int], end: float = 0.5) -> Generation:
    return Generation(tokens, [0.9] * len(tokens), "end", DecodeStats(source="none"), end)


def test_a_hint_that_differs_is_scored_on_its_lines_place_and_one_that_agrees_costs_nothing() -> None:
    engine, context = _scoring_engine(), _ScoredContext()
    model = _ScoredModel()
    first = [np.random.default_rng(seed).standard_normal(50).astype(np.float32) for seed in (0, 1)]
    own = [model.tokenize("12"), model.tokenize("34")]
    places = [(0, 20, first[0]), (1, 30, first[1])]
    scores = engine._hint_scores(context, places, [_ended(own[0]), _ended(own[1])], ["12", "39"])  # type: ignore[arg-type]
    expected_own = 2 * math.log(0.9) + math.log(0.5)
    assert scores[0] == {
        "read_log_likelihood": pytest.approx(expected_own),
        "hint_log_likelihood": pytest.approx(expected_own),
    }
    # Only the line whose hint differs is fed again, from the end of its own prompt.
    assert context.forgotten == [(1, 30)]
    rows = MarkovModel(seed=4).append(model.tokenize("39"))
    assert scores[1]["hint_log_likelihood"] == pytest.approx(
        text_log_likelihood(np.vstack([first[1][None, :], rows]), model.tokenize("39"), [0])
    )
    assert scores[1]["read_log_likelihood"] == pytest.approx(expected_own)


def test_hints_past_the_contexts_room_leave_the_reads_unscored_against_them() -> None:
    engine, context = _scoring_engine(), _ScoredContext(room=1)
    first = np.zeros(50, dtype=np.float32)
    cut = Generation([1, 2], [0.9, 0.9], "max_tokens", DecodeStats(source="none"))
    scores = engine._hint_scores(context, [(0, 5, first), (1, 5, first)], [_ended([3]), cut], ["77", "88"])  # type: ignore[arg-type]
    assert scores == [{"read_log_likelihood": pytest.approx(math.log(0.9) + math.log(0.5))}, {}]
    engine._score_hints = False
    assert engine._hint_scores(context, [(0, 5, first)], [_ended([3])], ["77"]) == [{}]  # type: ignore[arg-type]
