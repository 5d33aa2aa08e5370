"""Tracks files until their size and mtime have been stable for the settle time.

A file is a candidate only once nothing has changed for `settle_seconds` (monotonic time, so a
clock step never releases a file early). Scanners that create a 0-byte file and fill it page by
page, and copies over SMB that pause between chunks, keep resetting the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    inode: int
    since: float
    first_seen: float


class FileStabilityTracker:
    """Remembers what each watched file looked like and since when."""

    def __init__(self, settle_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.settle_seconds = settle_seconds
        self._clock = clock
        self._seen: dict[Path, _Seen] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, path: object) -> bool:
        return path in self._seen

    def observe(self, path: Path) -> None:
        """Record the file's current state; a change restarts its settle clock."""
        try:
            info = path.stat()
        except FileNotFoundError:
            self._seen.pop(path, None)
            return
        now = self._clock()
        known = self._seen.get(path)
        state = (info.st_size, info.st_mtime_ns, info.st_ino)
        if known is None:
            self._seen[path] = _Seen(*state, since=now, first_seen=now)
        elif (known.size, known.mtime_ns, known.inode) != state:
            self._seen[path] = _Seen(*state, since=now, first_seen=known.first_seen)

    def forget(self, path: Path) -> None:
        self._seen.pop(path, None)

    def settled(self) -> list[Path]:
        """Files unchanged on disk for the settle time (each re-checked now), oldest first."""
        for path in list(self._seen):
            self.observe(path)
        now = self._clock()
        ready = [
            (seen.first_seen, path)
            for path, seen in self._seen.items()
            if now - seen.since >= self.settle_seconds
        ]
        return [path for _, path in sorted(ready)]

    def waiting_since(self, path: Path) -> float | None:
        """Monotonic time the file was first seen, or None if it is not tracked."""
        seen = self._seen.get(path)
        return None if seen is None else seen.first_seen

    def is_empty(self, path: Path) -> bool:
        seen = self._seen.get(path)
        return seen is not None and seen.size == 0
