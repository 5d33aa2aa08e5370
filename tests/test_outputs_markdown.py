"""Markdown output: reading order, rows joined into paragraphs, receipts' rows kept, OCR text escaped."""

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


def _line(text: str, box: tuple[float, float, float, float] = (0, 0, 10, 10)) -> Line:
    x0, y0, x1, y1 = box
    return Line(text, box, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)), 0.9, [0.9] * len(text), [])


def _document(pages: list[list[str]]) -> Document:
    """Each text its own block, far enough below the last to be its own paragraph."""
    source = SourceFile("x.png", "/x.png", "0" * 64, 1, "image/png")
    return Document(
        source=source,
        engine={"name": "fake"},
        pages=[
            Page(
                index=i,
                width=100,
                height=100,
                dpi=300,
                blocks=[Block([_line(t, (0, 40 * n, 10, 40 * n + 10))]) for n, t in enumerate(texts)],
            )
            for i, texts in enumerate(pages)
        ],
    )


def _rows(*rows: str | tuple[str, ...], gap: float = 4, top: float = 0) -> list[Block]:
    """Rows printed one under the other, `gap` px apart, 20 px high, 10 px a character.

    A tuple is a row of cells spread over 600 px (a receipt's label and amount).
    """
    blocks = []
    for n, row in enumerate(rows):
        y0 = top + n * (20 + gap)
        if isinstance(row, str):
            blocks.append(Block([_line(row, (0, y0, 10 * len(row), y0 + 20))]))
            continue
        step = 600 / len(row)
        blocks.append(
            Block(
                [
                    _line(cell, (k * step, y0, k * step + 10 * len(cell), y0 + 20))
                    for k, cell in enumerate(row)
                ]
            )
        )
    return blocks


def _page_markdown(blocks: list[Block]) -> str:
    source = SourceFile("x.png", "/x.png", "0" * 64, 1, "image/png")
    page = Page(index=0, width=1000, height=1000, dpi=300, blocks=blocks)
    return render_markdown(Document(source=source, engine={"name": "fake"}, pages=[page])).decode("utf-8")


def _rendered_paragraphs(markdown: str) -> list[str]:
    """Each paragraph as a reader sees it: soft breaks as spaces, hard breaks as newlines."""
    html = MarkdownIt("commonmark").render(markdown)
    paragraphs = re.findall(r"<p>(.*?)</p>", html, flags=re.S)
    return [
        re.sub(r"<[^>]+>", "", p.replace("<br />\n", "\n"))
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", '"')
        for p in paragraphs
    ]


def test_real_receipt_renders_in_reading_order(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    document = read_rendered(engine, rendering.receipt(), tmp_path / "receipt.png")
    path = write_outputs(document, tmp_path / "out", "receipt.png", ["markdown"])["markdown"]
    assert path.name == "receipt.png.md"
    markdown = path.read_text(encoding="utf-8")
    tokens = MarkdownIt("commonmark").parse(markdown)
    # Only paragraphs (and the page comment): no headings, lists or code from OCR text.
    assert {t.type for t in tokens} <= {"paragraph_open", "paragraph_close", "inline", "html_block"}
    rows = [row for paragraph in _rendered_paragraphs(markdown) for row in paragraph.split("\n")]
    # Every word in reading order; rows with amounts stay rows of their own.
    assert " ".join(rows).split() == " ".join(b.text for b in document.pages[0].blocks).split()
    assert rows[0].startswith("CORNER BAKERY SDN BHD")
    assert "TOTAL 40.17" in rows


def test_chinese_page_keeps_its_text(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    document = read_rendered(engine, rendering.chinese_page(), tmp_path / "zh.png")
    markdown = render_markdown(document).decode("utf-8")
    rendered = "".join(_rendered_paragraphs(markdown)).replace("\n", "")
    assert rendered.replace(" ", "") == "".join(b.text for b in document.pages[0].blocks).replace(" ", "")
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


def test_prose_lines_join_into_one_paragraph() -> None:
    markdown = _page_markdown(
        _rows(
            "The appliance reads every page of a scanned docu-",
            "ment and writes its text in reading order so that",
            "a sentence broken across lines reads as one again.",
        )
    )
    assert _rendered_paragraphs(markdown) == [
        "The appliance reads every page of a scanned document and writes its text in reading order"
        " so that a sentence broken across lines reads as one again."
    ]


def test_a_hyphen_before_a_capital_or_a_digit_is_kept() -> None:
    markdown = _page_markdown(
        _rows("The results of Jean-", "Pierre and the pre-", "2020 figures agree here too.")
    )
    assert _rendered_paragraphs(markdown) == [
        "The results of Jean-Pierre and the pre-2020 figures agree here too."
    ]


def test_cjk_lines_join_without_a_space() -> None:
    markdown = _page_markdown(_rows("本手册介绍如何在计算机上安装系统，", "并说明安装后的基本设置。"))
    assert _rendered_paragraphs(markdown) == ["本手册介绍如何在计算机上安装系统，并说明安装后的基本设置。"]


def test_a_gap_starts_a_new_paragraph() -> None:
    first = _rows("First paragraph of the letter, long enough to fill", "the line and go on below it.")
    second = _rows("Second paragraph after a blank line of space here.", top=200)
    assert _rendered_paragraphs(_page_markdown(first + second)) == [
        "First paragraph of the letter, long enough to fill the line and go on below it.",
        "Second paragraph after a blank line of space here.",
    ]


def test_receipt_rows_stay_rows() -> None:
    markdown = _page_markdown(
        _rows(("NASI LEMAK", "5.50"), ("TEH TARIK", "2.20"), "SUBTOTAL 7.70", ("TOTAL", "7.70"), "THANK YOU")
    )
    assert _rendered_paragraphs(markdown) == [
        "NASI LEMAK 5.50\nTEH TARIK 2.20\nSUBTOTAL 7.70\nTOTAL 7.70\nTHANK YOU"
    ]


def test_a_short_line_ends_its_row() -> None:
    markdown = _page_markdown(
        _rows("Dear Sir,", "please find enclosed the invoice for the month of November", "as agreed.")
    )
    assert _rendered_paragraphs(markdown) == [
        "Dear Sir,\nplease find enclosed the invoice for the month of November as agreed."
    ]


@pytest.mark.parametrize("start", ["- item", "# heading", "1. first", "> quote", "---", "=====", "+ 5"])
def test_a_continuation_line_never_starts_a_block(start: str) -> None:
    markdown = _page_markdown(_rows("A paragraph whose next printed line begins oddly, like", start))
    tokens = MarkdownIt("commonmark").parse(markdown)
    assert {t.type for t in tokens} <= {"paragraph_open", "paragraph_close", "inline", "html_block"}
    assert len(_rendered_paragraphs(markdown)) == 1
    assert start in _rendered_paragraphs(markdown)[0]
