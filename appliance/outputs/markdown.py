"""Markdown: the text in reading order, one paragraph per block, pages split by a thematic break.

OCR text is escaped so that a receipt's "*", "#", "1." or "<" stays text instead of becoming
emphasis, a heading, a list or HTML in whatever renders the file. Written by hand because the
rules are few and fixed by CommonMark, where a library would be a dependency for one function.
"""

from __future__ import annotations

import re

from appliance.document import Document

# Characters CommonMark (and GitHub's tables and strikethrough) give a meaning anywhere in a line.
_INLINE = re.compile(r"([\\`*_\[\]<>&|~])")
# What makes a paragraph's start a heading, quote, list item, setext underline or code fence.
_BLOCK_START = re.compile(r"^([#>+=-])")
_ORDERED_START = re.compile(r"^(\d{1,9})([.)])")


def escape_markdown(text: str) -> str:
    """OCR text as Markdown that renders as exactly that text."""
    # Leading spaces would make an indented code block; a paragraph's own spacing carries no text.
    escaped = _INLINE.sub(r"\\\1", text.strip())
    escaped = _BLOCK_START.sub(r"\\\1", escaped)
    return _ORDERED_START.sub(r"\1\\\2", escaped)


def render_markdown(document: Document) -> bytes:
    pages = []
    for page in document.pages:
        # The comment marks the page for programs without showing when rendered.
        parts = [f"<!-- page {page.index + 1} -->"]
        parts.extend(escape_markdown(block.text) for block in page.blocks if block.text.strip())
        pages.append("\n\n".join(parts))
    return ("\n\n---\n\n".join(pages) + "\n").encode("utf-8")
