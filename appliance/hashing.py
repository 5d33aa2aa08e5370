"""The sha256 of a file, read in chunks: one helper for models, inputs, claims and audit records."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, streamed by hashlib.file_digest so large files never sit in memory whole."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
