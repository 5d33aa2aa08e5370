"""hOCR 1.2 output: well-formed XHTML, the hOCR class hierarchy, boxes, confidences, metadata."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from lxml import etree

from appliance.document import Document
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.outputs.hocr import render_hocr
from appliance.outputs.writer import write_outputs
from tests import rendering
from tests.output_documents import read_rendered, words_of

NS = {"h": "http://www.w3.org/1999/xhtml"}
PARENT = {"ocr_carea": "ocr_page", "ocr_par": "ocr_carea", "ocr_line": "ocr_par", "ocrx_word": "ocr_line"}


def _properties(title: str) -> dict[str, str]:
    """hOCR's title syntax: `name value; name value`, with quoted strings possibly holding ';'."""
    properties = {}
    for part in re.findall(r'(?:[^;"]|"(?:\\.|[^"\\])*")+', title):
        name, _, value = part.strip().partition(" ")
        properties[name] = value
    return properties


def _bbox(title: str) -> tuple[int, ...]:
    return tuple(int(v) for v in _properties(title)["bbox"].split())


@pytest.fixture(scope="module")
def receipt(engine: PpocrOnnxEngine, tmp_path_factory: pytest.TempPathFactory) -> Document:
    return read_rendered(engine, rendering.receipt(), tmp_path_factory.mktemp("hocr") / "receipt.png")


def test_receipt_hocr_parses_as_xml_with_the_hocr_hierarchy(receipt: Document, tmp_path: Path) -> None:
    path = write_outputs(receipt, tmp_path, "receipt.png", ["hocr"])["hocr"]
    assert path.name == "receipt.png.hocr"
    root = etree.parse(str(path), etree.XMLParser(resolve_entities=False, no_network=True)).getroot()
    assert root.tag == "{http://www.w3.org/1999/xhtml}html"
    metas = {m.get("name"): m.get("content") for m in root.iterfind(".//h:meta", NS) if m.get("name")}
    assert metas["ocr-system"].startswith("ocr-appliance ")
    assert set(metas["ocr-capabilities"].split()) >= {
        "ocr_page",
        "ocr_carea",
        "ocr_par",
        "ocr_line",
        "ocrx_word",
    }
    assert metas["ocr-number-of-pages"] == "1"

    page = receipt.pages[0]
    (page_element,) = root.iterfind(".//*[@class='ocr_page']")
    properties = _properties(page_element.get("title", ""))
    assert properties["bbox"] == f"0 0 {page.width} {page.height}"
    assert properties["image"] == '"receipt.png"'
    assert properties["ppageno"] == "0"
    assert properties["scan_res"] == "300 300"

    ids = [element.get("id") for element in root.iter() if element.get("id")]
    assert len(ids) == len(set(ids))
    for css_class, parent_class in PARENT.items():
        elements = list(root.iterfind(f".//*[@class='{css_class}']"))
        assert elements, css_class
        for element in elements:
            parent = element.getparent()
            assert parent is not None and parent.get("class") == parent_class
            x0, y0, x1, y1 = _bbox(element.get("title", ""))
            assert 0 <= x0 < x1 <= page.width and 0 <= y0 < y1 <= page.height
            # Every box lies inside its parent's box.
            px0, py0, px1, py1 = _bbox(parent.get("title", ""))
            assert px0 <= x0 and py0 <= y0 and x1 <= px1 and y1 <= py1

    words = list(root.iterfind(".//*[@class='ocrx_word']"))
    assert [w.text for w in words] == words_of(receipt)
    for word in words:
        assert 0 <= int(_properties(word.get("title", ""))["x_wconf"]) <= 100
    lines = ["".join(line.itertext()).strip() for line in root.iterfind(".//*[@class='ocr_line']")]
    assert lines == [line.text for line in page.lines]
    assert "TOTAL" in lines


class _Collector(HTMLParser):
    """The standard library's HTML parser, as a browser-like reader would see the file."""

    def __init__(self) -> None:
        super().__init__()
        self.classes: list[str] = []
        self.words: list[str] = []
        self._in_word = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        css = dict(attrs).get("class") or ""
        self.classes.append(css)
        self._in_word = css == "ocrx_word"

    def handle_endtag(self, tag: str) -> None:
        self._in_word = False

    def handle_data(self, data: str) -> None:
        if self._in_word:
            self.words.append(data)


def test_chinese_hocr_reads_back_with_the_html_parser(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    document = read_rendered(engine, rendering.chinese_page(), tmp_path / "zh.png")
    collector = _Collector()
    collector.feed(render_hocr(document).decode("utf-8"))
    assert collector.words == words_of(document)
    assert "".join(collector.words).count("系统") >= 1
    assert collector.classes.count("ocr_line") == len(document.pages[0].lines)


def test_names_with_quotes_and_markup_are_escaped(receipt: Document) -> None:
    receipt.source.name = 'odd "name"; <b>&.png'
    try:
        root = etree.fromstring(render_hocr(receipt))
    finally:
        receipt.source.name = "receipt.png"
    page = next(root.iterfind(".//*[@class='ocr_page']"))
    assert _properties(page.get("title", ""))["image"] == r'"odd \"name\"; <b>&.png"'
