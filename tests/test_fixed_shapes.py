"""Fixed input shapes: the bucket chosen, the padding added, padded rows dropped, one session per shape."""

from __future__ import annotations

import os
from typing import Any

import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from appliance.config import PpocrOnnxConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx import engine as engine_module
from appliance.engines.ppocr_onnx.detection import TextDetector
from appliance.engines.ppocr_onnx.orientation import LineOrientation
from appliance.engines.ppocr_onnx.recognition import TextRecognizer
from appliance.engines.ppocr_onnx.shape_branches import BRANCH
from appliance.engines.ppocr_onnx.shapes import (
    choose_bucket,
    choose_width,
    detector_buckets,
    line_widths,
    pad_page,
    pad_rows,
    paper_colour,
)
from tests import rendering


class _Input:
    name = "x"


class _Output:
    name = "probabilities"

    def __init__(self, classes: int | str) -> None:
        self.shape = ["n", "t", classes]


class _FakeSession:
    """Records every input it runs; returns what `respond` makes of the input."""

    def __init__(self, respond: Any, classes: int | str = 4) -> None:
        self.respond = respond
        self.classes = classes
        self.inputs: list[np.ndarray] = []

    def get_inputs(self) -> list[_Input]:
        return [_Input()]

    def get_outputs(self) -> list[_Output]:
        return [_Output(self.classes)]

    def run(self, _names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensor = feeds["x"]
        self.inputs.append(tensor)
        return [self.respond(tensor)]

    @property
    def shapes(self) -> set[tuple[int, ...]]:
        return {tensor.shape for tensor in self.inputs}


def test_detector_buckets_pad_the_short_side_only() -> None:
    assert detector_buckets(1280) == (
        (640, 1280),
        (1280, 640),
        (960, 1280),
        (1280, 960),
        (1280, 1280),
    )
    # A limit that is not a multiple of 32: the largest side is what the detector's resize can reach.
    assert max(max(size) for size in detector_buckets(1000)) == 1024


def test_fewer_detector_shares_give_fewer_buckets_and_always_the_square() -> None:
    assert detector_buckets(1280, (0.5,)) == ((640, 1280), (1280, 640), (1280, 1280))
    assert detector_buckets(1280, (0.5, 1.0)) == detector_buckets(1280, (0.5,))
    # Every page the detector's resize can give still fits a bucket.
    for height, width in ((1280, 700), (700, 1280), (1280, 1280), (300, 1280)):
        assert choose_bucket(height, width, detector_buckets(1280, (0.5,))) in detector_buckets(1280, (0.5,))
    with pytest.raises(ValidationError):
        PpocrOnnxConfig(fixed_detector_shares=(0.0, 1.0))
    with pytest.raises(ValidationError):
        PpocrOnnxConfig(fixed_detector_shares=(1.5,))


def test_the_engine_opens_a_detector_session_per_configured_bucket() -> None:
    config = PpocrOnnxConfig(
        provider="cpu", fixed_shapes="on", det_limit_side_len=640, fixed_detector_shares=(0.5,)
    )
    engine = PpocrOnnxEngine(config)
    try:
        assert sorted(engine._detector._buckets or {}) == sorted(detector_buckets(640, (0.5,)))
        assert engine.recognize(rendering.receipt().bgr()).lines
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("height", "width", "bucket"),
    [
        (1280, 600, (1280, 640)),  # a tall receipt
        (1280, 641, (1280, 960)),
        (900, 1280, (960, 1280)),  # a landscape page
        (1280, 1280, (1280, 1280)),
        (320, 320, (640, 1280)),  # a small page, kept at its size, fits the smallest area
    ],
)
def test_choose_bucket_takes_the_smallest_that_holds_the_page(
    height: int, width: int, bucket: tuple[int, int]
) -> None:
    assert choose_bucket(height, width, detector_buckets(1280)) == bucket


def test_choose_bucket_refuses_a_page_larger_than_every_bucket() -> None:
    with pytest.raises(ValueError, match="no detector bucket"):
        choose_bucket(1312, 640, detector_buckets(1280))


def test_pad_page_fills_with_the_paper_colour_and_moves_nothing() -> None:
    page = np.full((40, 30, 3), (200, 210, 220), dtype=np.uint8)
    page[10:20, 5:25] = 0  # ink
    fill = paper_colour(page)
    assert fill == (200, 210, 220)
    padded = pad_page(page, (64, 96), fill)
    assert padded.shape == (64, 96, 3)
    assert np.array_equal(padded[:40, :30], page)
    assert (padded[40:] == (200, 210, 220)).all() and (padded[:, 30:] == (200, 210, 220)).all()


def test_line_widths_start_at_the_minimum_width() -> None:
    assert line_widths(320) == (320, 640, 1280, 3200)
    assert line_widths(160)[:3] == (160, 320, 640)
    assert choose_width(321, line_widths(320)) == 640
    assert choose_width(320, line_widths(320)) == 320
    assert choose_width(5000, line_widths(320)) == 3200  # squeezed to the widest


def test_configured_line_widths_are_sorted_once_above_the_minimum() -> None:
    assert line_widths(320, (1920, 640, 320, 640, 160)) == (320, 640, 1920)
    assert choose_width(700, line_widths(320, (3200, 960))) == 960


def test_pad_rows_adds_blank_rows() -> None:
    batch = np.ones((3, 2), dtype=np.float32)
    padded = pad_rows(batch, 5)
    assert padded.shape == (5, 2) and (padded[:3] == 1).all() and (padded[3:] == 0).all()
    with pytest.raises(ValueError):
        pad_rows(batch, 2)


def _probability(tensor: np.ndarray) -> np.ndarray:
    """A 'probability map' that is the input's first channel, so the crop of the output shows."""
    return tensor[:, :1].copy()


def test_detector_runs_the_bucket_session_and_cuts_the_map_back_to_the_page() -> None:
    buckets = {size: _FakeSession(_probability) for size in detector_buckets(320)}
    fallback = _FakeSession(_probability)
    detector = TextDetector(fallback, 320, 0.3, 0.6, 1.5, buckets=buckets)
    page = np.full((320, 200, 3), 255, dtype=np.uint8)  # resized as now: 320 x 192
    probability, scale_y, scale_x = detector.probability_map(page)
    assert probability.shape == (320, 192)
    assert (scale_y, scale_x) == (1.0, 192 / 200)
    assert fallback.inputs == []
    used = [size for size, session in buckets.items() if session.inputs]
    assert used == [(320, 256)]  # of (320, 160), (320, 256), (320, 320) and two landscape ones
    (tensor,) = buckets[used[0]].inputs
    assert tensor.shape == (1, 3, *used[0])
    # The padding is the page's paper colour (white here), normalised like the page itself.
    assert np.allclose(tensor[0, 0, :, 192:], tensor[0, 0, 0, 0])


def test_a_detector_graph_that_normalises_uint8_pixels_finds_the_same_lines() -> None:
    """image_input.py's graph takes the padded page as bytes and gives the map numpy's normalisation gives."""
    import onnxruntime as ort

    from appliance.engines.manifest import builtin_manifest_path, load_manifest, verify_models
    from appliance.engines.ppocr_onnx.image_input import prepend_normalisation, takes_image

    path = verify_models(load_manifest(builtin_manifest_path("ppocrv6_small")), None, roles=("det",))["det"]
    plain = _Recording(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
    graph = prepend_normalisation(path, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    image = _Recording(ort.InferenceSession(graph, providers=["CPUExecutionProvider"]))
    assert takes_image(image) and not takes_image(plain)
    page = rendering.receipt().bgr()
    quads, maps = {}, {}
    for name, session in (("plain", plain), ("image", image)):
        detector = TextDetector(
            session, 640, 0.3, 0.6, 1.5, buckets=dict.fromkeys(detector_buckets(640), session)
        )
        quads[name] = detector.detect(page)
        maps[name] = detector.probability_map(page)[0]
    pixels = image.feeds[0]
    assert pixels.dtype == np.uint8 and pixels.shape[-1] == 3  # (1, H, W, 3): the page's own bytes
    assert plain.feeds[0].dtype == np.float32 and plain.feeds[0].shape[1] == 3
    assert np.allclose(maps["image"], maps["plain"], atol=1e-4)
    assert len(quads["image"]) == len(quads["plain"]) > 0
    for mine, theirs in zip(quads["image"], quads["plain"], strict=True):
        assert np.allclose(mine, theirs, atol=1.0)


class _Recording:
    """Wraps a real session and keeps the first feed of each run."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.feeds: list[np.ndarray] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
        if not self.feeds:
            self.feeds.append(next(iter(feeds.values())))
        return self._session.run(names, feeds)


def _steps(tensor: np.ndarray) -> np.ndarray:
    """CTC 'probabilities' reading class 1 + the row's index, so each row's read is recognisable."""
    rows = tensor.shape[0]
    out = np.zeros((rows, 4, 8), dtype=np.float32)
    for row in range(rows):
        out[row, :, 1 + row % 7] = 1.0
    return out


def test_recognizer_batches_by_width_bucket_and_drops_padded_rows() -> None:
    keys = ["blank", "a", "b", "c", "d", "e", "f", "g"]
    widths = {width: _FakeSession(_steps, classes=8) for width in line_widths(320)}
    recognizer = TextRecognizer(_FakeSession(_steps, classes=8), keys, 4, 320, widths=widths)
    # Three narrow lines (<= 320 px at height 48), one of 600 px, one of 10000 px (squeezed).
    crops = [np.full((48, w, 3), 255, dtype=np.uint8) for w in (100, 600, 200, 300, 10000)]
    reads = recognizer.recognize(crops)
    assert len(reads) == len(crops)
    assert {w for w, s in widths.items() if s.inputs} == {320, 640, 3200}
    for width, session in widths.items():
        # Every run of a bucket's session has the bucket's one shape, filled up to 4 rows.
        assert session.shapes <= {(4, 3, 48, width)}
    # The narrow lines were rows 0-2 of one batch: each got its own row's read, none a padded row's.
    assert sorted(reads[i].text for i in (0, 2, 3)) == ["a", "b", "c"]
    assert reads[1].text == "a" and reads[4].text == "a"


def test_orientation_runs_fixed_batches_and_drops_padded_rows() -> None:
    session = _FakeSession(lambda tensor: np.tile([[0.2, 0.8]], (len(tensor), 1)))
    orientation = LineOrientation(session, batch_size=8, fixed_batch=True)  # type: ignore[arg-type]
    crops = [np.full((40, 60, 3), 255, dtype=np.uint8) for _ in range(3)]
    assert orientation.upside_down_probability(crops) == pytest.approx([0.8] * 3)
    assert session.shapes == {(8, 3, 80, 160)}


class _ShapeRecorder:
    """Wraps a real session and notes, for each copy of its graph it runs, the input shapes it gives.

    A session of one shape has one copy (None); a branched session's copy is the one its condition
    inputs choose (shape_branches.py).
    """

    def __init__(self, session: Any) -> None:
        self._session = session
        self.shapes: dict[int | None, set[tuple[int, ...]]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
        conditions = sorted(name for name in feeds if name.startswith(BRANCH))
        copy = None
        if conditions:
            chosen = [index for index, name in enumerate(conditions) if bool(feeds[name])]
            copy = chosen[0] if chosen else len(conditions)
        data = [tensor.shape for name, tensor in feeds.items() if not name.startswith(BRANCH)]
        self.shapes.setdefault(copy, set()).update(data)
        return self._session.run(names, feeds)

    def one_shape_per_copy(self) -> bool:
        return all(len(shapes) == 1 for shapes in self.shapes.values())


@pytest.mark.parametrize(
    ("shape_sessions", "sessions", "copies"),
    [("per_shape", 5 + 4 + 1, [1] * 10), ("one", 3, [5, 4, 1])],
)
def test_engine_with_fixed_shapes_gives_each_session_one_shape(
    monkeypatch: pytest.MonkeyPatch, shape_sessions: str, sessions: int, copies: list[int]
) -> None:
    """5 detector buckets, 4 line widths, 1 orientation shape: each its own session or its own copy
    of its model's graph in one session (the CUDA provider pays its memory per session)."""
    opened: list[tuple[str, _ShapeRecorder]] = []
    real = engine_module.create_session

    def recording(path: Any, *args: Any, **kwargs: Any) -> Any:
        session, info = real(path, *args, **kwargs)
        recorder = _ShapeRecorder(session)
        opened.append((path.name, recorder))
        return recorder, info

    monkeypatch.setattr(engine_module, "create_session", recording)
    config = PpocrOnnxConfig(
        provider="cpu",
        fixed_shapes="on",
        fixed_batch_size=4,
        det_limit_side_len=640,
        shape_sessions=shape_sessions,  # type: ignore[arg-type]
    )
    engine = PpocrOnnxEngine(config)
    try:
        assert engine.describe()["fixed_shapes"] is True
        assert engine._recognizer._best  # the best class per step comes back, not every probability
        assert engine._detector._takes_image  # the page goes as uint8; the graph normalises it
        assert len(opened) == sessions
        assert engine.describe()["shared_cuda_arena"] is False  # CPU sessions have no CUDA arena
        assert [len(recorder.shapes) for _, recorder in opened] == copies  # each copy warmed at load
        assert all(recorder.one_shape_per_copy() for _, recorder in opened)
        page = rendering.receipt()
        lines = engine.recognize(page.bgr()).lines
        assert lines
        assert all(recorder.one_shape_per_copy() for _, recorder in opened)
    finally:
        engine.close()


def test_one_session_for_all_shapes_reads_as_a_session_per_shape() -> None:
    pages = [rendering.receipt().bgr(), rendering.chinese_page().bgr()]
    reads = []
    for shape_sessions in ("per_shape", "one"):
        config = PpocrOnnxConfig(
            provider="cpu", fixed_shapes="on", det_limit_side_len=960, shape_sessions=shape_sessions
        )
        engine = PpocrOnnxEngine(config)
        try:
            reads.append([[line.text for line in engine.recognize(page).lines] for page in pages])
        finally:
            engine.close()
    assert reads[0] == reads[1]
    assert all(reads[0])


def test_warm_up_runs_the_largest_input_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Largest first, so a shared arena's first block is the largest and the later runs reuse it."""
    warmed: list[tuple[int, ...]] = []
    real = engine_module.create_session
    real_warm = PpocrOnnxEngine._warm

    class Recorder(_ShapeRecorder):
        def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
            warmed.extend(tensor.shape for name, tensor in feeds.items() if not name.startswith(BRANCH))
            return super().run(names, feeds)

    def recording(path: Any, *args: Any, **kwargs: Any) -> Any:
        session, info = real(path, *args, **kwargs)
        return Recorder(session), info

    def warm(self: PpocrOnnxEngine, *args: Any) -> float:
        warmed.clear()  # only the warm-up's runs count (the recogniser may probe its classes before)
        return real_warm(self, *args)

    monkeypatch.setattr(engine_module, "create_session", recording)
    monkeypatch.setattr(PpocrOnnxEngine, "_warm", warm)
    config = PpocrOnnxConfig(
        provider="cpu",
        fixed_shapes="on",
        fixed_batch_size=2,
        det_limit_side_len=320,
        fixed_line_widths=(640,),
    )
    engine = PpocrOnnxEngine(config)
    engine.close()
    sizes = [int(np.prod(shape)) for shape in warmed]
    assert len(warmed) == 5 + 2 + 1  # detector buckets, widths 320 and 640, orientation
    assert (2, 3, 48, 640) in warmed and (2, 3, 48, 320) in warmed
    assert sizes == sorted(sizes, reverse=True)


def test_fixed_shapes_stay_off_on_the_cpu_by_default() -> None:
    engine = PpocrOnnxEngine(PpocrOnnxConfig(provider="cpu"))
    try:
        assert engine.describe()["fixed_shapes"] is False
        assert engine._detector._buckets is None and engine._recognizer._widths is None
    finally:
        engine.close()


def test_best_class_output_reads_the_same_as_the_probabilities() -> None:
    """The TopK appended for the GPU gives each step's arg-max and its probability, and the same reads."""
    import onnxruntime as ort

    from appliance.engines.manifest import builtin_manifest_path, load_manifest, verify_models
    from appliance.engines.ppocr_onnx.best_class import BEST_OUTPUTS, SPACE_OUTPUT, append_best_class
    from appliance.engines.ppocr_onnx.recognition import dictionary

    paths = verify_models(load_manifest(builtin_manifest_path("ppocrv6_small")), None, roles=("rec",))
    plain = ort.InferenceSession(str(paths["rec"]), providers=["CPUExecutionProvider"])
    best = ort.InferenceSession(append_best_class(paths["rec"]), providers=["CPUExecutionProvider"])
    page = rendering.receipt().bgr()
    batch = np.stack(
        [
            (cv2.resize(page[y : y + 40, 20:420], (320, 48)).astype(np.float32) / 255.0 - 0.5) / 0.5
            for y in range(60, 380, 40)
        ]
    ).transpose(0, 3, 1, 2)
    (probabilities,) = plain.run(None, {plain.get_inputs()[0].name: batch})
    scores, indices, last = best.run([*BEST_OUTPUTS, SPACE_OUTPUT], {best.get_inputs()[0].name: batch})
    assert np.array_equal(indices, probabilities.argmax(axis=2))
    assert np.array_equal(scores, probabilities.max(axis=2))
    assert np.array_equal(last, probabilities[:, :, -1])
    keys = dictionary(paths)
    widths = dict.fromkeys(line_widths(320))
    crops = [page[y : y + 40, 20:420] for y in range(60, 380, 40)]
    reads = {}
    for name, session in (("plain", plain), ("best", best)):
        recognizer = TextRecognizer(session, keys, 4, 320, widths=dict.fromkeys(widths, session))
        assert recognizer._best is (name == "best")
        assert recognizer.keep_evidence(4)
        reads[name] = recognizer.recognize(crops)
    assert [r.text for r in reads["best"]] == [r.text for r in reads["plain"]]
    # The spacing rule's evidence comes through the best-class graph unchanged.
    assert [r.space_before for r in reads["best"]] == [r.space_before for r in reads["plain"]]
    assert all(r.space_before is not None for r in reads["best"])
    assert any(r.text for r in reads["plain"])
    for mine, theirs in zip(reads["best"], reads["plain"], strict=True):
        assert mine.confidences == pytest.approx(theirs.confidences)
        assert mine.positions == theirs.positions
        # The cascade's `keep: joint` evidence too (to a hundredth, float32 sums): the top classes.
        assert mine.likelihood is not None and theirs.likelihood is not None
        for text in (theirs.text, theirs.text[:-1] + "#", "CASH"):
            assert mine.likelihood(text) == pytest.approx(theirs.likelihood(text), rel=1e-4, abs=0.01)


def test_auto_takes_fixed_shapes_and_one_line_thread_only_where_cuda_can_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = PpocrOnnxConfig(provider="auto")
    monkeypatch.setattr(engine_module, "on_gpu", lambda _config: True)
    monkeypatch.setattr(engine_module, "prepare_cuda", lambda: None)
    assert engine_module.fixed_shapes(config) and engine_module.line_threads(config) == 1
    # onnxruntime-gpu installed, but the driver is missing: `auto` runs on the CPU as before.
    monkeypatch.setattr(engine_module, "prepare_cuda", lambda: "no NVIDIA driver")
    assert not engine_module.fixed_shapes(config)
    assert engine_module.line_threads(config) == len(os.sched_getaffinity(0))
    assert engine_module.fixed_shapes(config.model_copy(update={"fixed_shapes": "on"}))
