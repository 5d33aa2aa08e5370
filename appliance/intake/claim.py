"""Claims a settled file: moves it out of the hot folder into the spool, with its sha256.

Once claimed, a file is no longer in the inbox, so neither a rescan nor a restart can take it a
second time, and the scanner cannot overwrite it while it is read. A claim record is written into
the job's spool folder before the move, so a crash between the move and the journal entry leaves
an orphan that start-up finds and queues (nothing lost), never a file nobody knows about.

A file another process still holds open for writing is never claimed where the kernel can tell
(a read lease, see lease.py): a multi-page TIFF written page by page is a valid TIFF after every
page, so neither the settle time nor the format check can tell that more pages are coming.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from appliance.hashing import sha256_file
from appliance.intake.lease import ReadLease, WriterActiveError, take_read_lease
from appliance.outputs.atomic import fsync_directory, write_atomic

CLAIM_RECORD = "claim.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Claimed:
    """A file now owned by the appliance."""

    spool_path: Path
    sha256: str
    size: int
    source_folder: str
    relative_path: str
    # Why the kernel could not be asked whether a writer still had the file open (None: it was
    # asked, and none had); the claim then rested on the settle time and the format check alone.
    writer_check_unavailable: str | None = None
    # The file as it lay in the hot folder (device, inode, mtime in ns): with the sha256, what a
    # shared journal keys a claim on, so two nodes that both see one file cannot both journal it.
    identity: str | None = None
    # Its format as the completeness check sniffed it (None: not known, e.g. an orphan).
    media_type: str | None = None


class ClaimChangedError(Exception):
    """The file changed, or was opened for writing, while it was claimed; it stays in the inbox."""


def _copy_and_hash(source: Path, target: Path) -> str:
    digest = hashlib.sha256()
    with source.open("rb") as reader, target.open("xb") as writer:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            writer.write(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest()


def _hash_unchanged(fd: int, relative: str) -> tuple[str, int]:
    """sha256 and size of the open file, proven unchanged while it was read (same size and mtime)."""
    before = os.fstat(fd)
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    after = os.fstat(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or offset != after.st_size:
        raise ClaimChangedError(f"{relative} changed while it was claimed")
    return digest.hexdigest(), offset


def _put_back(target: Path, path: Path, job_dir: Path) -> None:
    """Undo a rename into the spool; if even that fails the claim record stays, and start-up queues it."""
    try:
        target.rename(path)
    except OSError:
        return
    shutil.rmtree(job_dir, ignore_errors=True)


def _renamed(
    path: Path, target: Path, job_dir: Path, *, fd: int, lease: ReadLease, relative: str
) -> tuple[str, int]:
    """Hash a file renamed into the spool through the descriptor opened before the move."""
    try:
        digest, size = _hash_unchanged(fd, relative)
        if lease.broken():
            raise ClaimChangedError(f"{relative} was opened for writing while it was claimed")
        fsync_directory(job_dir)
        fsync_directory(path.parent)
    except BaseException:
        _put_back(target, path, job_dir)
        raise
    return digest, size


def _copied(path: Path, target: Path, job_dir: Path, *, lease: ReadLease, relative: str) -> tuple[str, int]:
    """Copy with fsync, hash the source again to prove it did not change, then unlink it."""
    try:
        digest = _copy_and_hash(path, target)
        if sha256_file(path) != digest or lease.broken():
            raise ClaimChangedError(f"{relative} changed while it was copied into the spool")
        path.unlink()
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)  # the source is still in the inbox
        raise
    # From here the spool holds the only copy: a failure leaves it there, with its claim record,
    # and start-up queues it (an orphan), never deletes it.
    fsync_directory(job_dir)
    fsync_directory(path.parent)
    return digest, target.stat().st_size


def claim(path: Path, hot_folder: Path, spool_dir: Path) -> Claimed:
    """Move `path` into a new folder of the spool and return what was claimed.

    Raises WriterActiveError (lease.py) while another process has the file open for writing,
    ClaimChangedError when it changed during the claim (it stays in the inbox either way), and
    OSError when it cannot be claimed at all (its own message says why).

    First a rename, atomic. When the kernel refuses it with EXDEV, copy with fsync, hash the source
    again to prove it did not change while copied, then unlink it. EXDEV is the only test: under
    systemd with ProtectSystem=strict, ReadWritePaths= and StateDirectory= are separate mounts of
    the same disk, with the same st_dev, and rename() between them still fails with EXDEV.
    """
    relative = path.relative_to(hot_folder).as_posix()
    try:
        # O_NONBLOCK: a file another process holds a write lease on (a file server's own lease on a
        # file a client is writing) fails at once instead of stalling the daemon until it is broken.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except BlockingIOError:
        raise WriterActiveError("another process holds a write lease on it") from None
    try:
        lease = take_read_lease(fd)
        try:
            found = os.fstat(fd)
            identity = f"{found.st_dev}:{found.st_ino}:{found.st_mtime_ns}"
            job_dir = spool_dir / uuid.uuid4().hex
            job_dir.mkdir(parents=True)
            # The spooled file keeps its original name: the reader's messages and the result name it.
            target = job_dir / path.name
            try:
                record = {"source_folder": str(hot_folder), "relative_path": relative, "identity": identity}
                write_atomic(job_dir / CLAIM_RECORD, json.dumps(record).encode())
                path.rename(target)
            except OSError as error:
                if error.errno != errno.EXDEV:
                    shutil.rmtree(job_dir, ignore_errors=True)
                    raise
                digest, size = _copied(path, target, job_dir, lease=lease, relative=relative)
            else:
                digest, size = _renamed(path, target, job_dir, fd=fd, lease=lease, relative=relative)
        finally:
            lease.release()
    finally:
        os.close(fd)
    return Claimed(
        target,
        digest,
        size,
        str(hot_folder),
        relative,
        writer_check_unavailable=lease.unavailable,
        identity=identity,
    )


def orphaned_claims(spool_dir: Path, known_spool_paths: set[str], min_age: float = 0.0) -> list[Claimed]:
    """Spool folders holding a claimed file that the journal does not know (a crash after the move).

    Folders with a claim record but no file are removed: the move never happened and the file is
    still in its hot folder, where the next scan finds it. A spool shared by several nodes holds
    other nodes' claims in progress too: only claim records older than `min_age` seconds are
    looked at there.
    """
    orphans: list[Claimed] = []
    if not spool_dir.is_dir():
        return orphans
    now = time.time()
    for job_dir in sorted(spool_dir.iterdir()):
        try:
            record_path = job_dir / CLAIM_RECORD
            if min_age and now - record_path.stat().st_mtime < min_age:
                continue
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        target = job_dir / Path(record["relative_path"]).name
        if str(target) in known_spool_paths:
            continue
        if not target.exists():
            shutil.rmtree(job_dir, ignore_errors=True)
            continue
        orphans.append(
            Claimed(
                target,
                sha256_file(target),
                target.stat().st_size,
                record["source_folder"],
                record["relative_path"],
                identity=record.get("identity"),
            )
        )
    return orphans
