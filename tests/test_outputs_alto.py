"""ALTO 4 output, checked with lxml against the structure of the ALTO 4.2 schema.

No copy of the ALTO XSD could be had from PyPI or Debian (OCR-D's packages, kraken and
ocrd-page-to-alto were looked at; none ships it), so these tests check by hand what the schema
requires of the parts we write: element order, required attributes, numeric types and ranges.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from lxml import etree

from appliance.document import Document
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.outputs.alto import ALTO_NS, render_alto
from appliance.outputs.writer import write_outputs
from tests import rendering
from tests.output_documents import read_rendered, words_of

A = f"{{{ALTO_NS}}}"
NS = {"a": ALTO_NS}
GEOMETRY = ("HPOS", "VPOS", "WIDTH", "HEIGHT")


def _children(element: etree._Element) -> list[str]:
    return [etree.QName(child).localname for child in element]


def _box(element: etree._Element) -> tuple[float, float, float, float]:
    hpos, vpos, width, height = (float(element.get(name, "nan")) for name in GEOMETRY)
    return hpos, vpos, hpos + width, vpos + height


def _check_alto(root: etree._Element, document: Document) -> None:
    assert root.tag == f"{A}alto"
    assert _children(root) == ["Description", "Layout"]
    description = root.find("a:Description", NS)
    assert description is not None
    assert _children(description) == ["MeasurementUnit", "sourceImageInformation", "OCRProcessing"]
    assert description.findtext("a:MeasurementUnit", namespaces=NS) == "pixel"
    source = description.find("a:sourceImageInformation", NS)
    assert source is not None and _children(source) == ["fileName", "fileIdentifier"]
    assert source.findtext("a:fileName", namespaces=NS) == document.source.name
    assert source.findtext("a:fileIdentifier", namespaces=NS) == document.source.sha256
    processing = description.find("a:OCRProcessing", NS)
    assert processing is not None and processing.get("ID")
    step = processing.find("a:ocrProcessingStep", NS)
    assert step is not None
    # processingStepType's sequence: processingDateTime, (agency), (descriptions), settings, software.
    assert _children(step) == ["processingDateTime", "processingStepSettings", "processingSoftware"]
    settings = step.findtext("a:processingStepSettings", namespaces=NS) or ""
    for model in document.engine["models"]:
        assert model["sha256"] in settings and model["name"] in settings
    software = step.find("a:processingSoftware", NS)
    assert software is not None
    assert _children(software) == ["softwareName", "softwareVersion", "applicationDescription"]

    pages = root.findall("a:Layout/a:Page", NS)
    assert len(pages) == len(document.pages)
    ids: list[str] = []
    strings: list[str] = []
    for page_element, page in zip(pages, document.pages, strict=True):
        assert page_element.get("ID") and page_element.get("PHYSICAL_IMG_NR") == str(page.index + 1)
        assert (int(page_element.get("WIDTH", "0")), int(page_element.get("HEIGHT", "0"))) == (
            page.width,
            page.height,
        )
        assert _children(page_element) == ["PrintSpace"]
        print_space = page_element[0]
        space_box = _box(print_space)
        for block in print_space:
            assert etree.QName(block).localname == "TextBlock"
            block_box = _box(block)
            assert space_box[0] <= block_box[0] and block_box[2] <= space_box[2]
            for line in block:
                assert etree.QName(line).localname == "TextLine"
                line_box = _box(line)  # TextLine's geometry is required by the schema
                assert block_box[0] <= line_box[0] and line_box[2] <= block_box[2]
                kinds = _children(line)
                # (String, SP?)+: strings and single spaces alternate, starting and ending with a String.
                assert kinds[0] == "String" and kinds[-1] == "String"
                assert all(a != b for a, b in itertools.pairwise(kinds)), kinds
                for child in line:
                    ids.extend([child.get("ID", "")] if child.get("ID") else [])
                    if etree.QName(child).localname == "SP":
                        assert float(child.get("WIDTH", "-1")) >= 0
                        continue
                    assert child.get("CONTENT")
                    strings.append(child.get("CONTENT", ""))
                    assert 0 <= float(child.get("WC", "-1")) <= 1
                    x0, y0, x1, y1 = _box(child)
                    assert 0 <= x0 < x1 <= page.width and 0 <= y0 < y1 <= page.height
                ids.append(line.get("ID", ""))
            ids.append(block.get("ID", ""))
    assert all(ids) and len(ids) == len(set(ids))
    assert strings == words_of(document)


@pytest.fixture(scope="module")
def receipt(engine: PpocrOnnxEngine, tmp_path_factory: pytest.TempPathFactory) -> Document:
    return read_rendered(engine, rendering.receipt(), tmp_path_factory.mktemp("alto") / "receipt.png")


def test_receipt_alto_has_the_alto4_structure(receipt: Document, tmp_path: Path) -> None:
    path = write_outputs(receipt, tmp_path, "receipt.png", ["alto"])["alto"]
    assert path.name == "receipt.png.alto.xml"
    root = etree.parse(str(path)).getroot()
    assert root.nsmap[None] == "http://www.loc.gov/standards/alto/ns-v4#"
    assert root.get("SCHEMAVERSION", "").startswith("4.")
    _check_alto(root, receipt)
    assert "TOTAL" in [s.get("CONTENT") for s in root.iter(f"{A}String")]


def test_chinese_alto(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    document = read_rendered(engine, rendering.chinese_page(), tmp_path / "zh.png")
    root = etree.fromstring(render_alto(document))
    _check_alto(root, document)
    assert "系统" in "".join(s.get("CONTENT", "") for s in root.iter(f"{A}String"))


def test_spaces_sit_between_the_words_they_separate(receipt: Document) -> None:
    root = etree.fromstring(render_alto(receipt))
    for space in root.iter(f"{A}SP"):
        before, after = space.getprevious(), space.getnext()
        assert before is not None and after is not None
        assert float(space.get("HPOS", "0")) == float(before.get("HPOS", "0")) + float(
            before.get("WIDTH", "0")
        )
        assert (
            float(space.get("HPOS", "0")) + float(space.get("WIDTH", "0"))
            <= float(after.get("HPOS", "0")) + 1
        )
