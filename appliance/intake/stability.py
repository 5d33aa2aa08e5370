"""Tracks files until their size and mtime have been stable for the settle time.

A file is a candidate only once nothing has changed for `settle_seconds` (monotonic time, so a
clock step never releases a file early). Scanners that create a 0-byte file and fill it page by
page, and copies over SMB that pause between chunks, keep resetting the clock.

Where inotify reports writes and closes (local disks), a file written since its writer last closed
it is not settled at all, however long the writer pauses: a multi-page TIFF written page by page is
a valid TIFF after every page, and a scanner may pause longer than the settle time between pages.
This needs no privilege, unlike the read lease the claim takes (lease.py), which only works on the
service's own files. A close event can be lost (an inotify queue overflow), so a file still marked
as being written is let through after `writer_grace_seconds` without a change.
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

    def __init__(
        self,
        settle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        writer_grace_seconds: float = 600.0,
    ) -> None:
        self.settle_seconds = settle_seconds
        self.writer_grace_seconds = writer_grace_seconds
        self._clock = clock
        self._seen: dict[Path, _Seen] = {}
        # Files written since their writer last closed them: path -> (size, mtime_ns) at the write.
        self._writing: dict[Path, tuple[int, int]] = {}
        # What each file looked like when its writer last closed it (an attribute change, which
        # inotify also reports as a modification, leaves size and mtime as they were).
        self._closed: dict[Path, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, path: object) -> bool:
        return path in self._seen

    def observe(self, path: Path) -> None:
        """Record the file's current state; a change restarts its settle clock."""
        try:
            info = path.stat()
        except FileNotFoundError:
            self.forget(path)
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
        self._writing.pop(path, None)
        self._closed.pop(path, None)

    def written(self, path: Path) -> None:
        """A writer changed the file (inotify IN_MODIFY): not settled until it closes the file."""
        try:
            info = path.stat()
        except FileNotFoundError:
            self.forget(path)
            return
        state = (info.st_size, info.st_mtime_ns)
        if self._closed.get(path) != state:  # not the attribute change of a closed file
            self._writing[path] = state
        self.observe(path)

    def closed_after_write(self, path: Path) -> None:
        """The writer closed the file (inotify IN_CLOSE_WRITE): it may settle from now on."""
        self._writing.pop(path, None)
        try:
            info = path.stat()
        except FileNotFoundError:
            self.forget(path)
            return
        self._closed[path] = (info.st_size, info.st_mtime_ns)
        self.observe(path)

    def being_written(self, path: Path) -> bool:
        """Whether a writer changed the file and has not closed it (and the grace has not passed)."""
        if path not in self._writing:
            return False
        seen = self._seen.get(path)
        return seen is None or self._clock() - seen.since < self.writer_grace_seconds

    def settled(self) -> list[Path]:
        """Files unchanged on disk for the settle time (each re-checked now), oldest first."""
        for path in list(self._seen):
            self.observe(path)
        now = self._clock()
        ready = [
            (seen.first_seen, path)
            for path, seen in self._seen.items()
            if now - seen.since >= self.settle_seconds and not self.being_written(path)
        ]
        return [path for _, path in sorted(ready)]

    def waiting_since(self, path: Path) -> float | None:
        """Monotonic time the file was first seen, or None if it is not tracked."""
        seen = self._seen.get(path)
        return None if seen is None else seen.first_seen

    def is_empty(self, path: Path) -> bool:
        seen = self._seen.get(path)
        return seen is not None and seen.size == 0
