"""Markdown: the text in reading order, rows joined into paragraphs, pages split by a thematic break.

Blocks are visual rows (appliance.pipeline.layout), so prose arrives one printed line at a time.
Rows that follow each other closely in one column are joined into a paragraph, the way a reader
reads them: a hyphen at a line's end before a lower-case continuation joins the word (before
anything else it stays, without a space), CJK lines join without a space, others with one. A
receipt's rows are rows, not prose: a row that holds an amount, is split into cells, or ends well
short of the column's width (it ended on purpose) is kept on its own line with a hard line break.

OCR text is escaped so that a receipt's "*", "#", "1." or "<" stays text instead of becoming
emphasis, a heading, a list or HTML in whatever renders the file. Written by hand because the
rules are few and fixed by CommonMark, where a library would be a dependency for one function.
"""

from __future__ import annotations

import itertools
import re
import statistics
import unicodedata
from dataclasses import dataclass

from appliance.document import Block, Document

# Characters CommonMark (and GitHub's tables and strikethrough) give a meaning anywhere in a line.
_INLINE = re.compile(r"([\\`*_\[\]<>&|~])")
# What makes a line's start a heading, quote, list item, setext underline or code fence.
_BLOCK_START = re.compile(r"^([#>+=-])")
_ORDERED_START = re.compile(r"^(\d{1,9})([.)])")
# A money amount or quantity with decimals (40.17, 1,234.50, 3,50): a receipt row, not prose.
_AMOUNT = re.compile(r"\d[.,]\d{2}(?!\d)")
# CommonMark's hard line break: a backslash at the end of a line.
_HARD_BREAK = "\\\n"
# Rows further apart than this many line heights start a new paragraph.
_PARAGRAPH_GAP = 0.8
# A row narrower than this share of its paragraph's widest row ended on purpose (a short line).
_SHORT_ROW = 0.6


def escape_markdown(text: str) -> str:
    """OCR text as Markdown that renders as exactly that text (one line of it)."""
    # Leading spaces would make an indented code block; a paragraph's own spacing carries no text.
    escaped = _INLINE.sub(r"\\\1", text.strip())
    escaped = _BLOCK_START.sub(r"\\\1", escaped)
    return _ORDERED_START.sub(r"\1\\\2", escaped)


@dataclass(frozen=True)
class _Row:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    cells: int

    @classmethod
    def of(cls, block: Block) -> _Row:
        x0, y0, x1, y1 = block.box
        return cls(block.text.strip(), x0, y0, x1, y1, len(block.lines))

    @property
    def width(self) -> float:
        return self.x1 - self.x0


def _is_cjk(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _starts_paragraph(previous: _Row, row: _Row, line_height: float) -> bool:
    if row.y0 < previous.y0:  # back up the page: the next column or region
        return True
    if row.y0 - previous.y1 > _PARAGRAPH_GAP * line_height:
        return True
    return row.x1 <= previous.x0 or row.x0 >= previous.x1  # side by side, not one under the other


def _paragraphs(rows: list[_Row]) -> list[list[_Row]]:
    if not rows:
        return []
    line_height = statistics.median(max(1.0, row.y1 - row.y0) for row in rows)
    groups: list[list[_Row]] = [[rows[0]]]
    for row in rows[1:]:
        if _starts_paragraph(groups[-1][-1], row, line_height):
            groups.append([row])
        else:
            groups[-1].append(row)
    return groups


def _is_table_row(row: _Row) -> bool:
    return row.cells > 1 or bool(_AMOUNT.search(row.text))


def _join(previous: str, text: str) -> tuple[str, str]:
    """How the escaped `previous` line meets `text`: (what stays of previous, separator)."""
    if previous.endswith("-") and len(previous) > 1 and previous[-2].isalnum():
        if text[:1].islower():
            return previous[:-1], ""  # a word broken at the line's end
        return previous, ""  # a compound's own hyphen (Jean-Pierre, pre-2020)
    if _is_cjk(previous[-1]) or _is_cjk(text[0]):
        return previous, ""
    return previous, " "


def _render_paragraph(rows: list[_Row]) -> str:
    widest = max(row.width for row in rows)
    out = escape_markdown(rows[0].text)
    for before, row in itertools.pairwise(rows):
        line = escape_markdown(row.text)
        short = before.width < _SHORT_ROW * widest
        if short or _is_table_row(before) or _is_table_row(row):
            out += _HARD_BREAK + line
        else:
            # Joined on the raw line: the escapes only touch a line's start and metacharacters.
            kept, separator = _join(out, row.text)
            out = kept + separator + line
    return out


def render_markdown(document: Document) -> bytes:
    pages = []
    for page in document.pages:
        # The comment marks the page for programs without showing when rendered.
        parts = [f"<!-- page {page.index + 1} -->"]
        rows = [_Row.of(block) for block in page.blocks if block.text.strip()]
        parts.extend(_render_paragraph(group) for group in _paragraphs(rows))
        pages.append("\n\n".join(parts))
    return ("\n\n---\n\n".join(pages) + "\n").encode("utf-8")
