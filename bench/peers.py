"""Other offline OCR engines the benchmark runs side by side with the appliance, page by page.

faster-paddle (MIT; PP-OCRv6 tiny and small inside a Rust extension with its own onnxruntime) is
the strongest pip-installable peer on these sets: a site comparing engines would try it first.
It is a benchmark dependency only (`pip install faster-paddle`, done by `make bench`); a peer
that is not installed is skipped with a message, never a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scoring import TextLine

PEERS = ("faster-paddle-tiny", "faster-paddle-small")

Reader = Callable[[Path], list[TextLine]]


def faster_paddle(size: str, threads: int | None = None) -> Reader | None:
    """A reader on faster-paddle's bundled `size` model, or None when the package is missing."""
    try:
        import faster_paddle as fp  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    engine: Any = fp.OcrEngine(model_size=size, threads=threads or len(os.sched_getaffinity(0)))

    def read(image: Path) -> list[TextLine]:
        result = engine.ocr(image.read_bytes())
        lines = []
        for bound in result["bounds"].values():
            (x0, y0), (x1, y1) = bound["topLeftCoord"], bound["bottomRightCoord"]
            lines.append(TextLine(str(bound["text"]), (float(x0), float(y0), float(x1), float(y1))))
        return lines

    return read


def build_peer(name: str) -> Reader | None:
    """The reader of a peer named in PEERS, or None when it is not installed."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    return faster_paddle(name.rsplit("-", 1)[1])
