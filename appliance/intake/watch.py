"""Chooses how a hot folder is watched: inotify on local disks, polling on network and FUSE mounts.

inotify never sees changes made by another machine on an SMB or NFS share, which is how scanners
usually deliver; watchers that rely on it there simply never fire (OCRmyPDF #1645). The mount a
folder lives on is read from /proc/self/mountinfo and network or FUSE filesystems get watchdog's
polling observer instead.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyObserver
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)

WatchMode = Literal["auto", "inotify", "poll"]

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "ceph",
        "glusterfs",
        "afs",
        "davfs",
        "sshfs",
        "lustre",
        "gpfs",
    }
)


@dataclass(frozen=True)
class MountInfo:
    """The mount a path lives on."""

    mount_point: str
    fs_type: str

    @property
    def needs_polling(self) -> bool:
        return self.fs_type in NETWORK_FILESYSTEMS or self.fs_type.startswith("fuse")


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def mount_of(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> MountInfo | None:
    """The mount holding `path` (longest matching mount point), or None where mountinfo is absent."""
    try:
        text = mountinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    target = os.path.realpath(path)
    best: MountInfo | None = None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        mount_point = _unescape(fields[4])
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) >= len(best.mount_point)):
            best = MountInfo(mount_point=mount_point, fs_type=tail[0])
    return best


def make_observer(path: Path, mode: WatchMode, poll_seconds: float) -> BaseObserver:
    """An observer suited to where `path` lives (or the one forced by `mode`)."""
    if mode == "auto":
        mount = mount_of(path)
        if mount is not None and mount.needs_polling:
            log.info(
                "%s is on %s (%s): polling every %.1f s", path, mount.mount_point, mount.fs_type, poll_seconds
            )
            return PollingObserver(timeout=poll_seconds)
        return Observer()
    if mode == "poll":
        return PollingObserver(timeout=poll_seconds)
    return Observer()


def reports_writer_closes(observer: BaseObserver) -> bool:
    """Whether the observer reports a writer's close (IN_CLOSE_WRITE): inotify does, polling cannot."""
    return isinstance(observer, InotifyObserver)
