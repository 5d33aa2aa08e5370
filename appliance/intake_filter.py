"""Which files in a hot folder are documents to read, and which are junk, partial or unsafe."""

from __future__ import annotations

import fnmatch
import stat
from pathlib import Path

# Names scanners, sync tools and file managers leave behind while writing or as metadata.
# A partial upload (`*.part`, `*.crdownload`, `name.tmp` before its rename) read too early is the
# most reported failure of hot-folder tools, so these are never taken.
IGNORED_PATTERNS = (
    ".*",
    "~$*",
    "*.tmp",
    "*.part",
    "*.crdownload",
    "Thumbs.db",
    "desktop.ini",
    "*.error.json",
)
IGNORED_DIRECTORIES = ("@eaDir", "#recycle", ".Trash*")


def is_ignored_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in IGNORED_PATTERNS)


def is_candidate(path: Path, root: Path) -> tuple[bool, str | None]:
    """Whether `path` may be read: (True, None), or (False, reason) where a reason worth a log line.

    Symlinks, FIFOs, sockets and device files are refused without being followed or opened: a
    symlink to /etc/shadow dropped into a share must not become an OCR result.
    """
    if is_ignored_name(path.name):
        return False, None
    relative = path.relative_to(root)
    if any(
        fnmatch.fnmatchcase(part, pattern) for part in relative.parts[:-1] for pattern in IGNORED_DIRECTORIES
    ):
        return False, None
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False, None
    if stat.S_ISLNK(info.st_mode):
        return False, "symbolic links are not followed"
    if not stat.S_ISREG(info.st_mode):
        return False, "not a regular file"
    return True, None
