"""The review folder's page images: the pages the document's boxes refer to."""

from __future__ import annotations

import json
from pathlib import Path

import cv2

from appliance.config import RasterizeConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.pipeline.page_images import PageImages
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from appliance.review import REASONS_FILE, write_review_extras
from tests import rendering


def test_review_pages_are_rasterized_as_the_document_was_read(
    engine: PpocrOnnxEngine, tmp_path: Path
) -> None:
    source = tmp_path / "receipt.jpg"
    rendering.receipt().image.save(source, quality=90)
    # Not the defaults: the receipt counts as large, so it is read at half scale.
    rasterize = RasterizeConfig(jpeg_draft_megapixels=0.1)
    folder = tmp_path / "review"
    with PageImages(pdf=False, review=True) as pages:
        document = DocumentProcessor(engine, Rasterizer(rasterize)).process(source, on_raster=pages.keep)

        write_review_extras(folder, document, ["low confidence"], "job-1", pages.review_pngs())

    (page,) = document.pages
    png = cv2.imread(str(folder / "page-001.png"))
    assert png.shape[:2] == (page.height, page.width)
    line = max(page.lines, key=lambda line: len(line.text))
    x0, y0, x1, y1 = (int(value) for value in line.box)
    assert png[y0:y1, x0:x1].min() < 100  # the longest line's box holds ink on the PNG
    record = json.loads((folder / REASONS_FILE).read_text(encoding="utf-8"))
    assert record["reasons"] == ["low confidence"] and record["job_id"] == "job-1"
