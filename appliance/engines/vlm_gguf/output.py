"""Turns what an OCR VLM wrote (plain text, Markdown or DocTags) into lines with per-character confidences."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.document import Box, Line
from appliance.engines import text_lines
from appliance.engines.vlm_gguf.profiles import OutputFormat

ENGINE_NAME = "vlm_gguf"


@dataclass
class TextLine:
    """One line of the model's answer, cleaned of markup, with the probability behind each character."""

    text: str
    char_confidences: list[float]
    box: tuple[float, float, float, float] | None = None  # in 0..1 page units, where the format gives one


def spell_out(pieces: Sequence[bytes], probabilities: Sequence[float]) -> tuple[str, list[float]]:
    """Join token pieces into text; each character gets the probability of the token that wrote it.

    Pieces are bytes because a multi-byte character (most CJK characters) may span tokens; such a
    character takes the lowest probability among its tokens.
    """
    data = bytearray()
    owner: list[float] = []
    for piece, probability in zip(pieces, probabilities, strict=True):
        data.extend(piece)
        owner.extend([probability] * len(piece))
    text = data.decode("utf-8", errors="replace")
    confidences: list[float] = []
    offset = 0
    for char in text:
        width = len(char.encode("utf-8")) if char != "\ufffd" else 1
        span = owner[offset : offset + width] or [0.0]
        confidences.append(min(span))
        offset += width
    return text, confidences


# Markdown that carries layout, not text: heading marks, emphasis, list bullets, table rules.
_MD_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_MD_PREFIX = re.compile(r"^\s{0,3}(#{1,6}\s+|>\s?|[-*+]\s+(?=\S))")
_MD_EMPHASIS = re.compile(r"(\*\*|__|\*|`)")
_HTML_TAG = re.compile(r"<[^>]{1,200}>")
_DOCTAG_LOC = re.compile(r"<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>")
# Innermost elements only (a body holding no closing tag): `<doctag>` wraps the whole page.
_DOCTAG_ELEMENT = re.compile(r"<(?P<tag>[a-z_]+)>(?P<body>(?:(?!</).)*?)</(?P=tag)>", re.DOTALL)
_DOCTAG_SCALE = 500.0  # DocTags locations are on a 0..500 grid over the page


def _keep(text: str, confidences: list[float], pattern: re.Pattern[str]) -> tuple[str, list[float]]:
    """Remove every match of `pattern`, keeping each remaining character's confidence."""
    kept_text: list[str] = []
    kept_conf: list[float] = []
    position = 0
    for match in pattern.finditer(text):
        kept_text.append(text[position : match.start()])
        kept_conf.extend(confidences[position : match.start()])
        position = match.end()
    kept_text.append(text[position:])
    kept_conf.extend(confidences[position:])
    return "".join(kept_text), kept_conf


def _strip(text: str, confidences: list[float]) -> TextLine | None:
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if start >= end:
        return None
    return TextLine(text[start:end], confidences[start:end])


def _lines(text: str, confidences: list[float]) -> list[tuple[str, list[float]]]:
    out = []
    position = 0
    for raw in text.split("\n"):
        out.append((raw, confidences[position : position + len(raw)]))
        position += len(raw) + 1
    return out


def parse_answer(text: str, confidences: list[float], output_format: OutputFormat) -> list[TextLine]:
    """Lines of the answer in the order the model wrote them, markup removed."""
    if output_format == "doctags":
        return _parse_doctags(text, confidences)
    lines: list[TextLine] = []
    for raw, conf in _lines(text, confidences):
        if output_format == "markdown":
            if _MD_TABLE_RULE.match(raw):
                continue
            line = _strip(*_unmark(raw, conf))
        else:
            line = _strip(raw, conf)
        if line is not None:
            lines.append(line)
    return lines


def _unmark(text: str, conf: list[float]) -> tuple[str, list[float]]:
    """One Markdown line as plain text: no HTML tags, heading/quote/bullet marks or emphasis."""
    text, conf = _keep(text, conf, _HTML_TAG)
    prefix = _MD_PREFIX.match(text)
    if prefix:
        text, conf = text[prefix.end() :], conf[prefix.end() :]
    text, conf = _keep(text, conf, _MD_EMPHASIS)
    if "|" in text:  # a table row: its cells, in order, separated by spaces
        cells = text.strip().strip("|")
        offset = text.index(cells) if cells else 0
        conf = conf[offset : offset + len(cells)]
        text = cells.replace("|", " ")
    return text, conf


def _parse_doctags(text: str, confidences: list[float]) -> list[TextLine]:
    """DocTags elements (`<text><loc_..>x4 words</text>`) become lines with their page location."""
    lines: list[TextLine] = []
    for element in _DOCTAG_ELEMENT.finditer(text):
        body_start = element.start("body")
        body = element.group("body")
        conf = confidences[body_start : body_start + len(body)]
        box = None
        location = _DOCTAG_LOC.match(body)
        if location:
            x0, y0, x1, y1 = (int(value) / _DOCTAG_SCALE for value in location.groups())
            box = (x0, y0, x1, y1)
            body, conf = body[location.end() :], conf[location.end() :]
        body, conf = _keep(body, conf, _HTML_TAG)
        for raw, line_conf in _lines(body, conf):
            line = _strip(raw, line_conf)
            if line is not None:
                line.box = box
                lines.append(line)
    return lines


def make_line(text: str, char_confidences: list[float], box: Box, engine: str = ENGINE_NAME) -> Line:
    """A Line of this engine's text, words spaced along the box in proportion (text_lines.make_line)."""
    return text_lines.make_line(text, char_confidences, box, engine)
