"""Typed views of a page's engine details (`PageText.details`, kept as `Page.engine_details`).

The details stay a plain dict in the Document, because that is what the result JSON holds;
code that reads them goes through these views instead of string keys spread over modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The key a page's cascade record is kept under, beside each engine's own key.
CASCADE_KEY = "cascade"
# The key the VLM's figures are kept under (its engine name): what the status API sums.
VLM_KEY = "vlm_gguf"
# The decoding figures a second reader reports per page (or summed over a page's lines).
DECODING_KEYS = ("generated_tokens", "drafted_tokens", "accepted_tokens", "draft_ms", "target_ms")
# A read that stopped for one of these did not finish: the first engine's read stands.
CUT_SHORT_STOPS = ("timeout", "repetition", "max_tokens")


@dataclass(frozen=True)
class ReadFigures:
    """A second reader's figures for one read (a page, or a page's lines summed)."""

    decoding: Mapping[str, float]
    stop_reason: str | None = None
    gpu_memory_used_bytes: int | None = None  # the device's memory in use after the read
    # log P of the reader's own text and of its hint (the first engine's), where it scored them
    # (a line reader asked to: the cascade's `keep: joint`).
    read_log_likelihood: float | None = None
    hint_log_likelihood: float | None = None

    @classmethod
    def of(cls, details: Mapping[str, Any], reader: str = VLM_KEY) -> ReadFigures | None:
        """The figures `reader` left in a page's details; None when it did not read the page."""
        raw = details.get(reader)
        if not raw:
            return None
        gpu = raw.get("gpu_memory_used_bytes")
        own, hint = raw.get("read_log_likelihood"), raw.get("hint_log_likelihood")
        return cls(
            decoding={key: float(raw.get(key) or 0.0) for key in DECODING_KEYS},
            stop_reason=raw.get("stop_reason"),
            gpu_memory_used_bytes=None if gpu is None else int(gpu),
            read_log_likelihood=None if own is None else float(own),
            hint_log_likelihood=None if hint is None else float(hint),
        )

    @property
    def cut_short(self) -> bool:
        return self.stop_reason in CUT_SHORT_STOPS


@dataclass(frozen=True)
class CascadeRecord:
    """What the cascade decided for a page: its route and the lines whose first read stood."""

    route: str | None
    lines_kept: tuple[str, ...] = ()

    @classmethod
    def of(cls, details: Mapping[str, Any]) -> CascadeRecord | None:
        raw = details.get(CASCADE_KEY)
        if not raw:
            return None
        return cls(route=raw.get("route"), lines_kept=tuple(raw.get("lines_kept") or ()))

    @property
    def fallbacks(self) -> int:
        """Reads where the first engine's text stood: the page, or each line kept line by line."""
        if self.route == "onnx_fallback":
            return 1
        if self.route == "vlm_lines":
            return len(self.lines_kept)
        return 0
