"""Searchable PDF: page images at true size, invisible text that pdfium extracts, PDF/A-2b parts.

veraPDF is not packaged in Debian, so PDF/A conformance is checked part by part here (XMP
pdfaid, sRGB OutputIntent, embedded font, no encryption) and the file's syntax by qpdf, through
pikepdf and, where Debian's qpdf is installed, its command line.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pikepdf
import pypdfium2 as pdfium
import pytest
from PIL import Image

from appliance.config import RasterizeConfig
from appliance.document import Document
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.outputs.searchable_pdf import render_searchable_pdf
from appliance.outputs.writer import write_outputs
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests import rendering
from tests.fixtures_files import jpeg_with_orientation
from tests.output_documents import read_rendered
from tests.scoring import cer


def _extract(data: bytes) -> list[str]:
    pdf = pdfium.PdfDocument(data)
    try:
        return [pdf[i].get_textpage().get_text_range() for i in range(len(pdf))]
    finally:
        pdf.close()


def _check_pdfa(path: Path) -> None:
    with pikepdf.open(path) as pdf:
        assert not pdf.is_encrypted
        meta = pdf.open_metadata()
        assert meta.pdfa_status == "2B"
        (intent,) = pdf.Root.OutputIntents
        assert intent.S == pikepdf.Name.GTS_PDFA1
        profile = intent.DestOutputProfile.read_bytes()
        assert profile[36:40] == b"acsp" and profile[16:20] == b"RGB "  # an ICC profile for RGB
        assert "/ID" in pdf.trailer
        for page in pdf.pages:
            for font in page.Resources.Font.values():
                assert font.Subtype == pikepdf.Name.Type0 and font.Encoding == pikepdf.Name("/Identity-H")
                assert "/ToUnicode" in font
                (descendant,) = font.DescendantFonts
                assert len(descendant.FontDescriptor.FontFile2.read_bytes()) > 0  # embedded
                assert "/CIDToGIDMap" in descendant
            contents = page.Contents.read_bytes().decode("ascii")
            assert "3 Tr" in contents  # the text is invisible
            assert re.search(r"/Im0 Do", contents)


def _qpdf_check(path: Path) -> None:
    qpdf = shutil.which("qpdf")
    if qpdf is None:
        return  # pikepdf (qpdf's library) opened and parsed every object above
    result = subprocess.run([qpdf, "--check", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No syntax or stream encoding errors" in result.stdout


@pytest.fixture(scope="module")
def receipt(engine: PpocrOnnxEngine, tmp_path_factory: pytest.TempPathFactory) -> tuple[Document, Path]:
    path = tmp_path_factory.mktemp("pdf") / "receipt.png"
    return read_rendered(engine, rendering.receipt(), path), path


def test_receipt_pdf_text_matches_the_document(receipt: tuple[Document, Path], tmp_path: Path) -> None:
    document, source = receipt
    path = write_outputs(document, tmp_path, source.name, ["pdf", "text"], source_path=source)["pdf"]
    assert path.name == "receipt.png.pdf"
    (text,) = _extract(path.read_bytes())
    assert cer(text, document.text) < 0.01
    # Reading order and line breaks survive: one extracted line per document line.
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[0] == "CORNER BAKERY SDN BHD"
    assert "TOTAL 40.17" in lines
    _check_pdfa(path)
    _qpdf_check(path)


def test_page_has_the_true_size_and_the_image(receipt: tuple[Document, Path]) -> None:
    document, source = receipt
    page = document.pages[0]
    data = render_searchable_pdf(document, source)
    pdf = pdfium.PdfDocument(data)
    width, height = pdf[0].get_size()
    assert width == pytest.approx(page.width * 72 / 300, abs=0.01)  # a PNG without dpi: 300
    assert height == pytest.approx(page.height * 72 / 300, abs=0.01)
    # The rendered PDF looks like the input: the invisible text adds no ink.
    rendered = pdf[0].render(scale=300 / 72).to_pil().convert("L").resize((page.width, page.height))
    original = Image.open(source).convert("L")
    difference = np.abs(np.asarray(rendered, dtype=np.int16) - np.asarray(original, dtype=np.int16))
    assert difference.mean() < 6  # JPEG noise only, in grey levels
    pdf.close()


def test_words_are_placed_on_their_boxes(receipt: tuple[Document, Path]) -> None:
    document, source = receipt
    page = document.pages[0]
    pdf = pdfium.PdfDocument(render_searchable_pdf(document, source))
    textpage = pdf[0].get_textpage()
    scale = 72 / 300
    word = next(w for line in page.lines for w in line.words if w.text == "TOTAL")
    searcher = textpage.search("TOTAL", match_case=True, match_whole_word=True)
    found = searcher.get_next()
    assert found is not None
    index, _count = found
    left, bottom, _right, top = textpage.get_charbox(index, loose=True)
    height_pt = page.height * scale
    assert left == pytest.approx(word.box[0] * scale, abs=1.0)
    assert height_pt - top == pytest.approx(word.box[1] * scale, abs=3.0)
    assert height_pt - bottom == pytest.approx(word.box[3] * scale, abs=3.0)
    pdf.close()


def test_chinese_pdf_text_matches(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    source = tmp_path / "zh.png"
    document = read_rendered(engine, rendering.chinese_page(), source)
    path = write_outputs(document, tmp_path / "out", source.name, ["pdf"], source_path=source)["pdf"]
    (text,) = _extract(path.read_bytes())
    assert cer(text, document.text) < 0.01
    assert "系统安装" in text
    _check_pdfa(path)
    _qpdf_check(path)


def test_jpeg_input_is_embedded_as_it_is(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    source = tmp_path / "receipt.jpg"
    document = read_rendered(engine, rendering.receipt(), source, quality=90, dpi=(200, 200))
    data = render_searchable_pdf(document, source)
    with pikepdf.open(io.BytesIO(data)) as pdf:
        image = pdf.pages[0].Resources.XObject["/Im0"]
        assert image.read_raw_bytes() == source.read_bytes()
        width = float(pdf.pages[0].MediaBox[2])
    assert width == pytest.approx(document.pages[0].width * 72 / 200, abs=0.01)
    (text,) = _extract(data)
    assert cer(text, document.text) < 0.01


def test_jpeg_read_at_a_reduced_scale_is_embedded_whole_at_the_same_size(
    engine: PpocrOnnxEngine, tmp_path: Path
) -> None:
    source = tmp_path / "receipt.jpg"
    full = read_rendered(engine, rendering.receipt(), source, quality=90, dpi=(200, 200))
    reduced = read_rendered(
        engine,
        rendering.receipt(),
        source,
        RasterizeConfig(jpeg_draft_megapixels=0.1),
        quality=90,
        dpi=(200, 200),
    )
    assert reduced.pages[0].width < full.pages[0].width  # the page was read at a DCT scale-down

    data = render_searchable_pdf(reduced, source)

    with pikepdf.open(io.BytesIO(data)) as pdf:
        image = pdf.pages[0].Resources.XObject["/Im0"]
        assert image.read_raw_bytes() == source.read_bytes()  # the file's own pixels, all of them
        assert (int(image.Width), int(image.Height)) == (full.pages[0].width, full.pages[0].height)
        media_box = [float(value) for value in pdf.pages[0].MediaBox]
    # The page is as large as when the whole image was read, and the text lies on the image.
    assert media_box[2] == pytest.approx(full.pages[0].width * 72 / 200, abs=0.5)
    assert media_box[3] == pytest.approx(full.pages[0].height * 72 / 200, abs=0.5)
    (text,) = _extract(data)
    assert cer(text, reduced.text) < 0.01


class _LowDraftDefaults(RasterizeConfig):
    """Rasterize defaults under which this test's small page counts as large."""

    jpeg_draft_megapixels: float = 0.1


def test_a_turned_jpeg_read_at_a_reduced_scale_is_re_encoded_at_its_own_resolution(
    engine: PpocrOnnxEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The PDF's own second read must decode whole whatever the defaults say.
    monkeypatch.setattr("appliance.outputs.searchable_pdf.RasterizeConfig", _LowDraftDefaults)
    # EXIF orientation 6: stored 1200x800, upright 800x1200; the original bits cannot be used.
    source = jpeg_with_orientation(tmp_path / "turned.jpg", 6, size=(1200, 800))
    documents = [
        DocumentProcessor(engine, Rasterizer(RasterizeConfig(jpeg_draft_megapixels=floor))).process(source)
        for floor in (0.1, 0)
    ]
    assert (documents[0].pages[0].width, documents[0].pages[0].height) == (400, 600)  # upright, halved

    media_boxes = []
    for document in documents:
        with pikepdf.open(io.BytesIO(render_searchable_pdf(document, source))) as pdf:
            image = pdf.pages[0].Resources.XObject["/Im0"]
            assert (int(image.Width), int(image.Height)) == (800, 1200)  # the file's own resolution
            media_boxes.append([float(value) for value in pdf.pages[0].MediaBox])
    assert media_boxes[0] == pytest.approx(media_boxes[1], abs=0.01)  # and the page's own size


def test_multi_page_pdf_input_keeps_pages_and_order(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    source = tmp_path / "two.pdf"
    first, second = rendering.receipt().image, rendering.chinese_page().image
    first.save(source, save_all=True, append_images=[second], resolution=150)
    from appliance.config import RasterizeConfig
    from appliance.pipeline.process import DocumentProcessor
    from appliance.pipeline.rasterize import Rasterizer

    document = DocumentProcessor(engine, Rasterizer(RasterizeConfig(pdf_dpi=200))).process(source)
    data = render_searchable_pdf(document, source)
    texts = _extract(data)
    assert len(texts) == 2
    for text, page in zip(texts, document.pages, strict=True):
        assert cer(text, page.text) < 0.01
    pdf = pdfium.PdfDocument(data)
    # The page keeps the input's size in points whatever dpi it was read at.
    assert pdf[0].get_size()[0] == pytest.approx(first.width * 72 / 150, abs=0.5)
    pdf.close()


def test_pdf_needs_the_source_file(receipt: tuple[Document, Path], tmp_path: Path) -> None:
    document, _ = receipt
    with pytest.raises(ValueError, match="input file"):
        write_outputs(document, tmp_path, "x", ["pdf"])
    assert not list(tmp_path.iterdir())
