"""A file settles only when size, mtime and inode stay the same for the settle time."""

from __future__ import annotations

import os
from pathlib import Path

from appliance.intake.stability import FileStabilityTracker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_settles_after_quiet_period(tmp_path: Path) -> None:
    clock = Clock()
    tracker = FileStabilityTracker(2.0, clock)
    path = tmp_path / "a.pdf"
    path.write_bytes(b"1")
    tracker.observe(path)
    clock.now += 1.9
    assert tracker.settled() == []
    clock.now += 0.2
    assert tracker.settled() == [path]


def test_growth_and_touch_restart_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    tracker = FileStabilityTracker(2.0, clock)
    path = tmp_path / "a.pdf"
    path.write_bytes(b"1")
    tracker.observe(path)
    clock.now += 1.5
    path.write_bytes(b"12")  # grew
    clock.now += 1.5
    assert tracker.settled() == []
    os.utime(path, ns=(1, 1))  # same size, new mtime
    clock.now += 1.5
    assert tracker.settled() == []
    clock.now += 2.1
    assert tracker.settled() == [path]


def test_replaced_file_restarts_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    tracker = FileStabilityTracker(1.0, clock)
    path = tmp_path / "a.pdf"
    path.write_bytes(b"ab")
    stat = path.stat()
    tracker.observe(path)
    clock.now += 0.9
    replacement = tmp_path / "b.tmp"
    replacement.write_bytes(b"cd")
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    replacement.rename(path)  # same size and mtime, different inode
    clock.now += 0.2
    assert tracker.settled() == []


def test_vanished_file_is_forgotten_and_order_is_oldest_first(tmp_path: Path) -> None:
    clock = Clock()
    tracker = FileStabilityTracker(1.0, clock)
    first, second, gone = tmp_path / "1.pdf", tmp_path / "2.pdf", tmp_path / "3.pdf"
    for path in (second, first, gone):
        path.write_bytes(b"x")
    tracker.observe(second)
    clock.now += 0.1
    tracker.observe(first)
    tracker.observe(gone)
    gone.unlink()
    clock.now += 2
    assert tracker.settled() == [second, first]
    assert gone not in tracker


def test_a_file_written_and_not_closed_does_not_settle(tmp_path: Path) -> None:
    """A writer pausing between pages longer than the settle time keeps the file (inotify's view)."""
    clock = Clock()
    tracker = FileStabilityTracker(2.0, clock, writer_grace_seconds=60.0)
    path = tmp_path / "multi.tif"
    path.write_bytes(b"page 1")
    tracker.written(path)
    clock.now += 10
    assert tracker.settled() == []
    assert tracker.being_written(path)
    with path.open("ab") as handle:
        handle.write(b" page 2")
    tracker.written(path)
    clock.now += 10
    assert tracker.settled() == []
    tracker.closed_after_write(path)
    assert tracker.settled() == [path], "closed and quiet for the settle time already"


def test_an_attribute_change_after_the_close_is_not_a_writer(tmp_path: Path) -> None:
    clock = Clock()
    tracker = FileStabilityTracker(2.0, clock)
    path = tmp_path / "a.pdf"
    path.write_bytes(b"x")
    tracker.written(path)
    tracker.closed_after_write(path)
    path.chmod(0o600)  # inotify reports IN_ATTRIB as a modification too
    tracker.written(path)
    clock.now += 2.1
    assert tracker.settled() == [path]


def test_a_lost_close_is_waited_for_only_the_grace_time(tmp_path: Path) -> None:
    clock = Clock()
    tracker = FileStabilityTracker(2.0, clock, writer_grace_seconds=30.0)
    path = tmp_path / "a.pdf"
    path.write_bytes(b"x")
    tracker.written(path)
    clock.now += 29
    assert tracker.settled() == []
    clock.now += 1.5
    assert tracker.settled() == [path]
    tracker.forget(path)
    assert not tracker.being_written(path)
