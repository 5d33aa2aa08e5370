"""Crops cut from a page set's ground-truth boxes, optionally seen through fewer rows of pixels."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from train.make_crops import make_crops, read_crops


def _page_set(root: Path) -> None:
    (root / "images").mkdir(parents=True)
    (root / "gt").mkdir()
    page = np.full((200, 400), 255, np.uint8)
    cv2.putText(page, "TOTAL 12.50", (20, 80), cv2.FONT_HERSHEY_SIMPLEX, 1.6, 0, 3)
    cv2.putText(page, "CASH", (20, 160), cv2.FONT_HERSHEY_SIMPLEX, 0.5, 0, 1)
    cv2.imwrite(str(root / "images" / "p.png"), page)
    lines = [{"text": "TOTAL 12.50", "box": [15, 40, 300, 92]}, {"text": "CASH", "box": [15, 146, 70, 164]}]
    (root / "gt" / "p.json").write_text(json.dumps({"image": "p.png", "lines": lines}), encoding="utf-8")


def test_crops_seen_through_fewer_rows_keep_their_size_and_lose_their_detail(tmp_path: Path) -> None:
    _page_set(tmp_path / "set")
    assert make_crops(tmp_path / "set", tmp_path / "sharp") == 2
    assert make_crops(tmp_path / "set", tmp_path / "coarse", through_height=30) == 2
    sharp, coarse = read_crops(tmp_path / "sharp"), read_crops(tmp_path / "coarse")
    assert [(name, text) for name, _, text in sharp] == [(name, text) for name, _, text in coarse]
    (_, tall, _), (_, tall_coarse, _) = sharp[0], coarse[0]
    assert tall.shape == tall_coarse.shape

    # Fewer rows blur the strokes' edges: fewer pure black or white pixels, the same ink in all.
    def pure(image: np.ndarray) -> int:
        return int(np.count_nonzero((image < 40) | (image > 215)))

    assert pure(tall_coarse) < 0.9 * pure(tall)
    assert abs(float(tall_coarse.mean()) - float(tall.mean())) < 8
    # A crop no taller than the rows asked for is written as it was cut.
    (_, short, _), (_, short_coarse, _) = sharp[1], coarse[1]
    assert short.shape[0] <= 30
    assert np.array_equal(short, short_coarse)
