"""Which files in a hot folder are documents to read, and which are junk, partial or unsafe."""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterable
from pathlib import Path

# Names scanners, sync tools and file managers leave behind while writing or as metadata.
# A partial upload (`*.part`, `*.crdownload`, `name.tmp` before its rename) read too early is the
# most reported failure of hot-folder tools, so these are never taken.
IGNORED_PATTERNS = (
    ".*",  # dotfiles, .DS_Store, our own temporary files
    "~$*",  # Office lock files
    "*.tmp",
    "*.part",
    "*.crdownload",
    "Thumbs.db",
    "desktop.ini",
    "*.error.json",
)
# Synology and Samba keep metadata and deleted files in these folders inside shares.
IGNORED_DIRECTORIES = ("@eaDir", "#recycle", ".*")


def is_ignored(relative: Path, extra_patterns: Iterable[str] = ()) -> bool:
    """Whether a path (relative to its hot folder) is junk that is silently left alone."""
    patterns = (*IGNORED_PATTERNS, *extra_patterns)
    if any(fnmatch.fnmatchcase(relative.name, pattern) for pattern in patterns):
        return True
    return any(
        fnmatch.fnmatchcase(part, pattern) for part in relative.parts[:-1] for pattern in IGNORED_DIRECTORIES
    )


def is_candidate(path: Path, root: Path, extra_patterns: Iterable[str] = ()) -> tuple[bool, str | None]:
    """Whether `path` may be read: (True, None), or (False, reason) where a reason is worth a log line.

    Symlinks, FIFOs, sockets and device files are refused without being followed or opened (a
    symlink to /etc/shadow dropped into a share must not become an OCR result, and opening a FIFO
    would block the daemon); so is anything whose real path lies outside the folder.
    """
    try:
        relative = path.relative_to(root)
    except ValueError:
        return False, "outside the hot folder"
    if is_ignored(relative, extra_patterns):
        return False, None
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False, None
    if stat.S_ISLNK(info.st_mode):
        return False, "symbolic links are not followed"
    if stat.S_ISDIR(info.st_mode):
        # Not a refusal: subfolders are mirrored and the files in them are seen on their own.
        return False, None
    if not stat.S_ISREG(info.st_mode):
        return False, "not a regular file (FIFO, socket or device)"
    real_root = os.path.realpath(root)
    if not os.path.realpath(path).startswith(real_root.rstrip("/") + "/"):
        return False, "resolves outside the hot folder (through a symlinked folder)"
    return True, None
