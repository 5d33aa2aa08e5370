"""Markdown output: reading order, one paragraph per block, pages split, OCR text escaped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from appliance.document import Block, Document, Line, Page, SourceFile, Word
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.outputs.markdown import escape_markdown, render_markdown
from appliance.outputs.writer import write_outputs
from tests import rendering
from tests.output_documents import read_rendered


def _html_text(markdown: str) -> list[str]:
    """The paragraphs CommonMark renders, as plain text (entities decoded, tags dropped)."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [token.content for token in tokens if token.type == "inline"]


def _plain(inline: str) -> str:
    """Inline Markdown source rendered to text: what a reader sees of one paragraph."""
    html = MarkdownIt("commonmark").renderInline(inline)
    return (
        re.sub(r"<[^>]+>", "", html)
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", '"')
    )


def _line(text: str) -> Line:
    return Line(text, (0, 0, 10, 10), ((0, 0), (10, 0), (10, 10), (0, 10)), 0.9, [0.9] * len(text), [])


def _document(pages: list[list[str]]) -> Document:
    source = SourceFile("x.png", "/x.png", "0" * 64, 1, "image/png")
    return Document(
        source=source,
        engine={"name": "fake"},
        pages=[
            Page(index=i, width=100, height=100, dpi=300, blocks=[Block([_line(t)]) for t in texts])
            for i, texts in enumerate(pages)
        ],
    )


def test_real_receipt_renders_in_reading_order(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    document = read_rendered(engine, rendering.receipt(), tmp_path / "receipt.png")
    path = write_outputs(document, tmp_path / "out", "receipt.png", ["markdown"])["markdown"]
    assert path.name == "receipt.png.md"
    markdown = path.read_text(encoding="utf-8")
    tokens = MarkdownIt("commonmark").parse(markdown)
    # Only paragraphs (and the page comment): no headings, lists or code from OCR text.
    assert {t.type for t in tokens} <= {"paragraph_open", "paragraph_close", "inline", "html_block"}
    paragraphs = [_plain(p) for p in _html_text(markdown)]
    assert paragraphs == [block.text for block in document.pages[0].blocks]
    assert paragraphs[0] == "CORNER BAKERY SDN BHD"
    assert "TOTAL 40.17" in paragraphs


def test_chinese_page_keeps_its_text(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    document = read_rendered(engine, rendering.chinese_page(), tmp_path / "zh.png")
    markdown = render_markdown(document).decode("utf-8")
    assert [_plain(p) for p in _html_text(markdown)] == [b.text for b in document.pages[0].blocks]
    assert "系统安装" in markdown


@pytest.mark.parametrize(
    "text",
    [
        "# not a heading",
        "1. not a list",
        "2) not a list",
        "- not a bullet",
        "+ 5.00",
        "* starred *",
        "> not a quote",
        "---",
        "___",
        "    indented",
        "a_b_c *d* **e** `code`",
        "[link](http://x) ![img](y)",
        "<b>html</b> &copy; &amp;",
        "| a | b |",
        "~~strike~~",
        "back\\slash",
        "=====",
    ],
)
def test_metacharacters_render_as_the_text_itself(text: str) -> None:
    markdown = render_markdown(_document([[text]])).decode("utf-8")
    tokens = MarkdownIt("commonmark").parse(markdown)
    inline = [t for t in tokens if t.type == "inline"]
    assert len(inline) == 1
    assert {t.type for t in tokens} <= {"paragraph_open", "paragraph_close", "inline", "html_block"}
    assert _plain(inline[0].content) == text.strip()


def test_pages_are_separated_by_a_thematic_break() -> None:
    markdown = render_markdown(_document([["first page"], ["second page", "more"]])).decode("utf-8")
    tokens = MarkdownIt("commonmark").parse(markdown)
    assert [t.type for t in tokens].count("hr") == 1
    assert "<!-- page 1 -->" in markdown and "<!-- page 2 -->" in markdown
    assert [t.content for t in tokens if t.type == "inline"] == ["first page", "second page", "more"]


def test_escape_leaves_plain_text_alone() -> None:
    assert escape_markdown("TOTAL 40.17") == "TOTAL 40.17"
    assert escape_markdown("本手册介绍如何安装") == "本手册介绍如何安装"


def test_word_model_is_not_needed_for_markdown() -> None:
    document = _document([["a"]])
    document.pages[0].blocks[0].lines[0].words = [Word("a", (0, 0, 1, 1), 0.5)]
    assert render_markdown(document).decode().endswith("a\n")
