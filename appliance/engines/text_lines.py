"""Lines of the document model from text without boxes: what a reader that writes text (a VLM) gives."""

from __future__ import annotations

from appliance.document import Box, Line, Word


def make_line(text: str, char_confidences: list[float], box: Box, engine: str) -> Line:
    """A Line from text and confidences, its words spaced along `box` in proportion to their characters."""
    x0, y0, x1, y1 = box
    step = (x1 - x0) / max(len(text), 1)
    words: list[Word] = []
    start = None
    for index, char in enumerate([*text, " "]):
        if char.isspace():
            if start is not None:
                confidence = min(char_confidences[start:index], default=0.0)
                words.append(
                    Word(text[start:index], (x0 + start * step, y0, x0 + index * step, y1), confidence)
                )
                start = None
        elif start is None:
            start = index
    confidence = sum(char_confidences) / len(char_confidences) if char_confidences else 0.0
    return Line(
        text=text,
        box=box,
        polygon=((x0, y0), (x1, y0), (x1, y1), (x0, y1)),
        confidence=confidence,
        char_confidences=list(char_confidences),
        words=words,
        engine=engine,
    )
