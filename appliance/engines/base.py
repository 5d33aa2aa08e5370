"""The engine protocol: a page image in, lines with polygons, text and confidences out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from appliance.document import Line


@dataclass
class PageText:
    """What an engine read on one page, in the engine's own (not yet layout-sorted) order."""

    lines: list[Line]
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class Engine(Protocol):
    """Anything that reads text from a BGR page image."""

    name: str

    def describe(self) -> dict[str, Any]:
        """Engine name, model ids and hashes, and the execution provider each model runs on."""
        ...

    def recognize(self, image: np.ndarray) -> PageText:
        """Read one page given as an HxWx3 uint8 BGR array."""
        ...

    def close(self) -> None:
        """Release models and sessions."""
        ...
