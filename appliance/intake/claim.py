"""Claims a settled file: moves it out of the hot folder into the spool, with its sha256.

Once claimed, a file is no longer in the inbox, so neither a rescan nor a restart can take it a
second time, and the scanner cannot overwrite it while it is read. A claim record is written into
the job's spool folder before the move, so a crash between the move and the journal entry leaves
an orphan that start-up finds and queues (nothing lost), never a file nobody knows about.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from appliance.hashing import sha256_file
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


class ClaimChangedError(Exception):
    """The file changed while it was being copied off another filesystem; it stays in the inbox."""


def _copy_and_hash(source: Path, target: Path) -> str:
    digest = hashlib.sha256()
    with source.open("rb") as reader, target.open("xb") as writer:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            writer.write(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest()


def claim(path: Path, hot_folder: Path, spool_dir: Path) -> Claimed:
    """Move `path` into a new folder of the spool and return what was claimed.

    Same filesystem: one atomic rename. Another filesystem (a hot folder on a network share, a
    spool on local disk): copy with fsync, hash the source again to prove it did not change while
    copied, then unlink it.
    """
    relative = path.relative_to(hot_folder).as_posix()
    job_dir = spool_dir / uuid.uuid4().hex
    job_dir.mkdir(parents=True)
    record = {"source_folder": str(hot_folder), "relative_path": relative}
    write_atomic(job_dir / CLAIM_RECORD, json.dumps(record).encode())
    # The spooled file keeps its original name: the reader's messages and the result name it.
    target = job_dir / path.name
    if path.stat().st_dev == job_dir.stat().st_dev:
        path.rename(target)
        fsync_directory(job_dir)
        fsync_directory(path.parent)
        digest = sha256_file(target)
    else:
        digest = _copy_and_hash(path, target)
        if sha256_file(path) != digest:
            shutil.rmtree(job_dir)
            raise ClaimChangedError(f"{relative} changed while it was copied into the spool")
        path.unlink()
        fsync_directory(job_dir)
    return Claimed(target, digest, target.stat().st_size, str(hot_folder), relative)


def orphaned_claims(spool_dir: Path, known_spool_paths: set[str]) -> list[Claimed]:
    """Spool folders holding a claimed file that the journal does not know (a crash after the move).

    Folders with a claim record but no file are removed: the move never happened and the file is
    still in its hot folder, where the next scan finds it.
    """
    orphans: list[Claimed] = []
    if not spool_dir.is_dir():
        return orphans
    for job_dir in sorted(spool_dir.iterdir()):
        try:
            record = json.loads((job_dir / CLAIM_RECORD).read_text(encoding="utf-8"))
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
            )
        )
    return orphans
