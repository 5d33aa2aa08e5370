"""Plain text in reading order, pages separated by a form feed."""

from __future__ import annotations

from appliance.document import Document


def render_text(document: Document) -> bytes:
    return (document.text + "\n").encode("utf-8")
