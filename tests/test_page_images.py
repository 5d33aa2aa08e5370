"""The page images kept for the outputs: review pages held as pixels up to a budget, then on disk."""

from __future__ import annotations

import tempfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from appliance.pipeline.page_images import PageImages
from appliance.pipeline.rasterize import RasterPage


def _page(index: int, height: int = 40, width: int = 60) -> RasterPage:
    rng = np.random.default_rng(index)
    return RasterPage(index, rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8), 200.0)


def _decode(png: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return np.asarray(image)


def _decoded(pngs: list[tuple[int, bytes]]) -> dict[int, np.ndarray]:
    return {index: _decode(png) for index, png in pngs}


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder of this test's own for tempfile, so other tests' folders are not counted."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_pages_within_the_budget_stay_in_memory_and_come_back_as_the_same_pixels(temporary: Path) -> None:
    pages = [_page(0), _page(1)]
    with PageImages(pdf=False, review=True) as kept:
        for page in pages:
            kept.keep(page, "image/png")
        assert list(temporary.iterdir()) == []  # nothing written: most documents are never reviewed
        decoded = _decoded(list(kept.review_pngs()))
    assert list(decoded) == [0, 1]
    for page in pages:
        assert np.array_equal(decoded[page.index], page.image)  # PNG is lossless


def test_pages_beyond_the_budget_go_to_disk_in_order_and_are_removed_at_the_end(temporary: Path) -> None:
    pages = [_page(index) for index in range(4)]
    budget = pages[0].image.nbytes * 2  # two pages held, two written
    with PageImages(pdf=False, review=True, review_memory_bytes=budget) as kept:
        for page in pages:
            kept.keep(page, "image/png")
        (folder,) = temporary.iterdir()
        assert sorted(path.name for path in folder.iterdir()) == ["2.png", "3.png"]
        decoded = _decoded(list(kept.review_pngs()))
    assert list(decoded) == [0, 1, 2, 3]
    for page in pages:
        assert np.array_equal(decoded[page.index], page.image)
    assert not folder.exists()


def test_a_held_page_is_a_copy_the_reader_cannot_change() -> None:
    page = _page(0)
    original = page.image.copy()
    with PageImages(pdf=False, review=True) as kept:
        kept.keep(page, "image/png")
        page.image[:] = 0  # a later stage writing into the page's own array
        ((index, png),) = kept.review_pngs()
    assert index == 0
    assert np.array_equal(_decode(png), original)


def test_nothing_is_kept_without_review() -> None:
    with PageImages(pdf=False, review=False) as kept:
        kept.keep(_page(0), "image/png")
        assert list(kept.review_pngs()) == []
