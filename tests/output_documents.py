"""Real Documents for the output-format tests: rendered pages read by the real engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.config import RasterizeConfig
from appliance.document import Document
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests.rendering import RenderedPage


def read_rendered(
    engine: PpocrOnnxEngine,
    page: RenderedPage,
    path: Path,
    rasterize: RasterizeConfig | None = None,
    **save: Any,
) -> Document:
    """Save the rendered page as `path` (format from the suffix) and read it into a Document."""
    page.image.save(path, **save)
    return DocumentProcessor(engine, Rasterizer(rasterize or RasterizeConfig())).process(path)


def words_of(document: Document) -> list[str]:
    """Every word's text in reading order, lines without words counted as one word."""
    from appliance.outputs.words import line_words

    return [word.text for page in document.pages for line in page.lines for word in line_words(line)]
