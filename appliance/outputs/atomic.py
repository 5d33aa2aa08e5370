"""Atomic file writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make a rename inside `directory` durable across a power cut."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write to a hidden temporary file in the same folder, fsync, then rename over `path`.

    The temporary name starts with a dot so the appliance's own intake (and most sync tools)
    ignore it, and lives in the same folder so the rename never crosses filesystems. It is short
    and random, not derived from `path`'s name: a name near NAME_MAX (255 bytes) plus a prefix
    and suffix would not fit, and the write would fail with ENAMETOOLONG.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=".wa-", suffix=".tmp", dir=path.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        temp.chmod(mode)
        temp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_directory(path.parent)
