"""Preprocessing on rendered pages: turns and skews recovered, seals found, odd pages survive."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from appliance.config import PreprocessConfig
from appliance.engines.base import OrientationEvidence, PageText
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.pipeline.preprocess import deskew, filters, preprocess, read_page, seals
from appliance.pipeline.preprocess.deskew import estimate_skew, rotate_by, rotate_quarter
from appliance.pipeline.preprocess.orientation import read_upright
from appliance.pipeline.preprocess.transform import PageTransform
from tests import rendering
from tests.fakes.orientation import SidewaysEngine, UpsideDownEngine
from tests.rendering import LATIN_FONT, render_lines
from tests.scoring import cer

_TEXT = [
    "Scanners feed pages upside down and a few degrees askew.",
    "The appliance finds the skew from the profile of the ink,",
    "turns the page straight and reads it line by line again.",
    "Every step is recorded with its parameters and its time.",
]


def _page() -> np.ndarray:
    rows = [[(40, text)] for text in _TEXT * 3]
    return render_lines(rows, width=1100, font_path=LATIN_FONT, size=26).bgr()


ALL_ON = PreprocessConfig(deskew=True, border_crop=True)


@pytest.mark.parametrize("angle", [-7.0, -3.0, 2.0, 5.0, 12.0])
def test_skew_is_found_within_a_third_of_a_degree(angle: float) -> None:
    skewed, _ = rotate_by(_page(), angle, (255, 255, 255))
    estimate = estimate_skew(cv2.cvtColor(skewed, cv2.COLOR_BGR2GRAY), 15.0, check_vertical=True)
    assert estimate is not None and not estimate.vertical
    # rotate_by turns counter-clockwise, which makes lines rise: the skew found is its negative.
    assert abs(estimate.angle + angle) <= 0.3


def _prose_page() -> np.ndarray:
    """Lines of running text starting at staggered places, like a printed page.

    `_page` repeats four sentences from one margin, which stacks the same words into columns:
    turned a quarter, such a page scores only 4 times sharper one way than the other, as an
    upright receipt does, and the ink alone must not turn those.
    """
    words = " ".join(_TEXT).split()
    rows = [[(40 + (i * 53) % 160, " ".join(words[(i * 5) % 30 : (i * 5) % 30 + 8]))] for i in range(16)]
    return render_lines(rows, width=1100, font_path=LATIN_FONT, size=24).bgr()


@pytest.mark.parametrize("turns", [1, 3])
def test_quarter_turns_are_found(turns: int) -> None:
    turned, _ = rotate_quarter(_prose_page(), turns)
    result = preprocess(turned, ALL_ON)
    steps = {step.step: step.params for step in result.steps}
    assert steps["orientation"]["quarter_turns"] == 1
    height, width = result.image.shape[:2]
    assert width > height  # lines run across again (which way up is the engine read's call)


def test_the_ink_leaves_a_sideways_receipt_to_the_engine_check() -> None:
    """Short lines in columns score close both ways: no quarter turn from the ink alone."""
    turned, _ = rotate_quarter(rendering.receipt().bgr(), 1)
    result = preprocess(turned, ALL_ON)
    steps = {step.step: step.params for step in result.steps}
    assert steps["orientation"]["quarter_turns"] == 0


def test_deskew_records_the_angle_and_maps_boxes_back() -> None:
    page = _page()
    skewed, matrix = rotate_by(page, 4.0, (255, 255, 255))
    result = preprocess(skewed, ALL_ON)
    deskew = next(step for step in result.steps if step.step == "deskew")
    assert deskew.params["applied"] and abs(deskew.params["angle"] + 4.0) <= 0.3
    # A point of the processed page maps back to where it is on the skewed page.
    centre = np.array([[result.image.shape[1] / 2, result.image.shape[0] / 2]])
    back = result.transform.to_original(centre)[0]
    assert abs(back[0] - skewed.shape[1] / 2) < 3 and abs(back[1] - skewed.shape[0] / 2) < 3
    del matrix


def test_small_skew_is_left_alone() -> None:
    skewed, _ = rotate_by(_page(), 0.2, (255, 255, 255))
    result = preprocess(skewed, ALL_ON)
    deskew = next(step for step in result.steps if step.step == "deskew")
    assert not deskew.params["applied"]


def test_black_edges_are_cut() -> None:
    page = cv2.copyMakeBorder(_page(), 40, 30, 50, 20, cv2.BORDER_CONSTANT, value=(10, 10, 10))
    result = preprocess(page, PreprocessConfig(orientation=False, border_crop=True))
    crop = next(step for step in result.steps if step.step == "border_crop")
    assert crop.params["applied"]
    x0, y0, _, _ = crop.params["box"]
    assert 50 <= x0 <= 60 and 40 <= y0 <= 50
    assert result.image[:, :, 0].min() < 60 and np.mean(result.image[:5]) > 200


def test_red_seal_is_found_lifted_and_recorded() -> None:
    page = _page()
    cv2.circle(page, (500, 200), 90, (30, 30, 220), 6)
    result = preprocess(page, PreprocessConfig(orientation=False))
    assert len(result.occlusions) == 1
    x0, y0, x1, y1 = result.occlusions[0]
    assert x0 < 420 and x1 > 580 and y0 < 120 and y1 > 280
    ring = result.image[200, 500 - 90]
    assert ring.min() > 180  # the red ink is paper now
    assert result.image[:, :, 0].min() < 60  # the black text under it is not


def test_sharpness_sums_the_squared_steps_of_the_ink_profile() -> None:
    # Two points on row 0, three on row 2, none between: the profile is 2, 0, 3.
    points = np.array([[0, 0], [5, 0], [1, 2], [2, 2], [9, 2]], dtype=np.float64)
    assert deskew._sharpness(deskew._columns(points), 0.0) == (0 - 2) ** 2 + (3 - 0) ** 2
    # Turned a quarter, they project onto x: 1, 1, 1, 0, 0, 1, 0, 0, 0, 1 (columns 0 to 9), four steps.
    assert deskew._sharpness(deskew._columns(points), -90.0) == 4


def test_red_mask_takes_the_hues_within_ten_of_red_saturated_and_not_dark() -> None:
    # Every hue, saturation and value: the mask is exactly the rule its docstring states.
    hsv = np.stack(np.meshgrid(np.arange(180), np.arange(0, 256, 5), np.arange(0, 256, 5)), -1)
    page = cv2.cvtColor(hsv.reshape(-1, 1, 3).astype(np.uint8), cv2.COLOR_HSV2BGR)
    seen = cv2.cvtColor(page, cv2.COLOR_BGR2HSV).astype(int)
    hue, sat, val = seen[..., 0], seen[..., 1], seen[..., 2]
    expected = ((hue <= 10) | (hue >= 160)) & (sat >= 80) & (val >= 70)
    mask = seals.red_mask(page, 80)
    assert mask.dtype == np.uint8 and set(np.unique(mask)) == {0, 255}
    assert np.array_equal(mask == 255, expected)


def test_red_heading_is_not_a_seal() -> None:
    page = _page()
    cv2.rectangle(page, (40, 5), (900, 25), (30, 30, 220), -1)
    assert preprocess(page, PreprocessConfig(orientation=False)).occlusions == []


@pytest.mark.parametrize(
    "image",
    [
        np.full((800, 600, 3), 255, np.uint8),
        np.random.default_rng(1).integers(0, 255, (700, 900, 3), dtype=np.uint8),
        np.zeros((50, 40, 3), np.uint8),
    ],
    ids=["blank", "photo-like", "tiny-black"],
)
def test_odd_pages_pass_every_step(image: np.ndarray) -> None:
    config = PreprocessConfig(deskew=True, border_crop=True, denoise=True, contrast=True, binarize=True)
    result = preprocess(image, config.model_copy(update={"resize_long_side": 640}))
    assert result.image.ndim == 3 and result.image.dtype == np.uint8
    binarize = [step for step in result.steps if step.step == "binarize"]
    if binarize and image.shape == (700, 900, 3):
        assert not binarize[0].params["applied"]  # a photo is not thresholded


def test_transform_round_trip_of_a_quarter_turn() -> None:
    page = np.zeros((100, 200, 3), np.uint8)
    _, matrix = rotate_quarter(page, 1)
    transform = PageTransform()
    transform.then(matrix)
    # (10, 20) on the raster page lands at (100 - 1 - 20, 10) after a clockwise turn.
    processed = (matrix @ np.array([10.0, 20.0, 1.0]))[:2]
    assert np.allclose(processed, [79.0, 10.0])
    assert np.allclose(transform.to_original(processed[None, :])[0], [10.0, 20.0])


def test_points_map_back_through_every_step_added_after_an_earlier_mapping() -> None:
    # The inverse is kept between mappings (a page maps every line and word): a step added
    # later must not be mapped back through the inverse of the steps before it.
    transform = PageTransform()
    transform.then(np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]]))
    assert np.allclose(transform.to_original(np.array([[10.0, 20.0]]))[0], [5.0, 10.0])
    transform.then(np.array([[1.0, 0.0, -4.0], [0.0, 1.0, -6.0]]))
    assert np.allclose(transform.to_original(np.array([[6.0, 14.0]]))[0], [5.0, 10.0])


def test_a_page_reading_upside_down_is_read_again_turned() -> None:
    page = np.full((100, 200, 3), 255, np.uint8)
    page[0, 0] = 0  # the top-left corner is dark: this page is upside down
    engine = UpsideDownEngine()
    read, _, turn, decision = read_upright(engine, page, min_upright=0.25)
    assert decision.turns == 2 and turn is not None and engine.calls == 2
    assert read.lines[0].confidence == 0.95


def test_an_upright_page_is_read_once() -> None:
    engine = UpsideDownEngine()
    _, _, turn, decision = read_upright(engine, np.full((100, 200, 3), 255, np.uint8), min_upright=0.25)
    assert not decision.checked and turn is None and engine.calls == 1


def test_read_page_maps_boxes_to_the_raster_page_and_flags_lines_under_seals() -> None:
    page = np.full((100, 200, 3), 255, np.uint8)
    page[0, 0] = 0
    cv2.circle(page, (130, 80), 18, (30, 30, 220), 3)  # a seal over the line on the scan
    read = read_page(UpsideDownEngine(), page, PreprocessConfig(seal_min_size=0.2))
    line = read.blocks[0].lines[0]
    # Read at (10..110, 10..30) on the turned page, which is (89..189, 69..89) on the scan.
    assert line.box == pytest.approx((89.0, 69.0, 189.0, 89.0))
    assert [step["step"] for step in read.steps][-1] == "orientation_check"
    assert read.occlusions and line.occluded
    assert read.warnings


@pytest.mark.parametrize(("turns", "expected"), [(0, 0), (1, 3), (2, 2), (3, 1)])
def test_the_first_read_decides_the_turn(turns: int, expected: int) -> None:
    page = np.full((100, 200, 3), 255, np.uint8)
    page[0, 0] = 0
    scanned, _ = rotate_quarter(page, turns)
    engine = SidewaysEngine()
    _, image, matrix, decision = read_upright(engine, scanned, min_upright=0.25)
    assert decision.turns == expected
    assert image.shape == page.shape and image[0, 0, 0] == 0
    assert (matrix is None) == (expected == 0)
    # One read when upright, one more when the first read named the turn right.
    assert engine.calls == (1 if expected == 0 else 2)


def test_a_page_that_reads_badly_every_way_keeps_its_first_read() -> None:
    class _Unreadable(SidewaysEngine):
        def recognize(self, image: np.ndarray) -> PageText:
            self.calls += 1
            evidence = OrientationEvidence(regions=3, length=300.0, upright=10.0, flipped=0.0, vertical=0.0)
            return PageText(lines=[], evidence=evidence)

    engine = _Unreadable()
    _, _, matrix, decision = read_upright(engine, np.full((100, 200, 3), 255, np.uint8), min_upright=0.25)
    assert decision.turns == 0 and matrix is None and engine.calls == 2


@pytest.fixture(scope="module")
def upright_receipt_text(engine: PpocrOnnxEngine) -> str:
    """The rendered receipt read as it is: what each turned copy must read back (read once)."""
    upright = read_page(engine, rendering.receipt().bgr(), PreprocessConfig())
    return "\n".join(block.text for block in upright.blocks)


@pytest.mark.parametrize("turns", [1, 2, 3])
def test_rendered_receipt_turned_comes_back_upright(
    engine: PpocrOnnxEngine, upright_receipt_text: str, turns: int
) -> None:
    turned, _ = rotate_quarter(rendering.receipt().bgr(), turns)
    read = read_page(engine, turned, PreprocessConfig())
    steps = {step["step"]: step["params"] for step in read.steps}
    applied = (
        steps.get("orientation", {}).get("quarter_turns", 0)
        + steps.get("orientation_check", {}).get("quarter_turns", 0)
    ) % 4
    assert (turns + applied) % 4 == 0
    text = "\n".join(block.text for block in read.blocks)
    assert cer(text, upright_receipt_text) <= 0.01


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_engine_evidence_tells_the_turn(engine: PpocrOnnxEngine, turns: int) -> None:
    """Upright text reads confidently, upside-down text does not, sideways text runs vertically."""
    turned, _ = rotate_quarter(rendering.receipt().bgr(), turns)
    evidence = engine.recognize(turned).evidence
    assert evidence is not None and evidence.regions >= len(rendering.RECEIPT_ROWS)
    sideways = turns in (1, 3)
    assert (evidence.share(evidence.vertical) > 0.5) == sideways
    # Turned clockwise, the engine's counter-clockwise crop turn sets the lines upright again.
    reads_upright = turns in (0, 1)
    assert (evidence.share(evidence.upright) > 0.5) == reads_upright


def test_a_poor_scan_is_kept_the_right_way_round_rather_than_sideways() -> None:
    """No read reaches min_upright; the upright one wins over the sideways one reading a bit more."""

    class _Faint(SidewaysEngine):
        def recognize(self, image: np.ndarray) -> PageText:
            self.calls += 1
            sideways = image.shape[0] > image.shape[1]
            if sideways:
                upright = 90.0 if image[0, -1, 0] == 0 else 0.0
            else:
                upright = 80.0 if image[0, 0, 0] == 0 else 0.0
            vertical = 400.0 if sideways else 0.0
            evidence = OrientationEvidence(
                regions=4, length=400.0, upright=upright, flipped=0.0, vertical=vertical
            )
            return PageText(lines=[], evidence=evidence)

    page = np.full((100, 200, 3), 255, np.uint8)
    page[0, 0] = 0
    scanned, _ = rotate_quarter(page, 1)
    engine = _Faint()
    _, image, _, decision = read_upright(engine, scanned, min_upright=0.25)
    assert decision.turns == 3 and image[0, 0, 0] == 0 and engine.calls == 3


def test_shrink_matches_an_area_resize() -> None:
    """The quick shrink keeps what the ink profile and seal search see: strokes, blobs, their places."""
    page = cv2.resize(_page(), None, fx=4, fy=4, interpolation=cv2.INTER_NEAREST)  # a large scan
    cv2.circle(page, (900, 700), 150, (30, 30, 220), 12)
    scale = 0.15
    quick = filters.shrink(page, scale)
    exact = cv2.resize(page, quick.shape[1::-1], interpolation=cv2.INTER_AREA)
    assert quick.shape == exact.shape
    assert quick.shape[:2] == (round(page.shape[0] * scale), round(page.shape[1] * scale))
    assert float(np.mean(np.abs(quick.astype(np.int16) - exact.astype(np.int16)))) < 4.0  # nearest: 9.6
    assert filters.shrink(page, 1.0) is page
