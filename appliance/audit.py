"""The audit trail: one hash-chained JSON Lines entry per document, and a verifier for the chain.

Each line is one entry: `seq` (1, 2, ...), `prev_hash` (the previous entry's `hash`, 64 zeros for
the first), `time`, `record` (what happened to the document) and `hash`, the sha256 of the
canonical JSON (sorted keys, no spaces, UTF-8) of the entry without `hash`. Editing an entry
changes its hash; removing or reordering entries breaks the seq numbers and the chain; so
`verify` finds any of them, and names the first bad line.

What a chain cannot show on its own: the removal of the *last* entries (the log simply looks
shorter). Sites that need that too should copy the newest hash somewhere else (it is logged
with every append) and compare it with `VerifyResult.head_hash`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from appliance.document import Document
from appliance.hashing import sha256_file
from appliance.outputs.atomic import fsync_directory

log = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64
_ENTRY_KEYS = frozenset({"seq", "prev_hash", "time", "record", "hash"})
_TAIL_CHUNK = 1 << 16


class AuditError(Exception):
    """The audit log cannot be appended to (unreadable, or its last entry is not valid)."""


class Problem(StrEnum):
    """Why `verify` rejected a line."""

    BAD_JSON = "bad_json"  # not a JSON object with the entry's fields
    TRUNCATED = "truncated"  # the file ends in the middle of a line (a cut-short write or a cut)
    EDITED = "edited"  # the entry's content does not match its hash, or the chain to it
    REMOVED = "removed"  # one or more entries before this one are missing
    REORDERED = "reordered"  # entries are out of order (or one appears twice)
    UNREADABLE = "unreadable"  # the file cannot be opened or read


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of `verify`: ok, or the first bad line (1-based) and why."""

    ok: bool
    entries: int  # entries that verified before the first problem (all of them when ok)
    head_hash: str  # the hash of the last entry that verified (GENESIS_HASH for an empty log)
    line: int | None = None
    problem: Problem | None = None
    message: str = ""


def canonical_json(value: Any) -> bytes:
    """The bytes that are hashed: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def entry_hash(entry: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an entry without its `hash` field."""
    return hashlib.sha256(canonical_json({k: v for k, v in entry.items() if k != "hash"})).hexdigest()


def _last_line(fd: int, end: int) -> tuple[bytes, int]:
    """The line that ends at offset `end` (its newline excluded) and the offset it starts at.

    Read backwards in chunks so an append stays cheap however long the log grows.
    """
    position, buffer = end, b""
    while position > 0:
        step = min(_TAIL_CHUNK, position)
        position -= step
        buffer = os.pread(fd, step, position) + buffer
        newline = buffer.rfind(b"\n")
        if newline >= 0:
            return buffer[newline + 1 :], position + newline + 1
    return buffer, 0


class AuditLog:
    """Appends entries to one audit log file; safe from several threads and processes.

    Each append takes a thread lock and an flock on the file, reads the last entry to chain to,
    writes the new line with one write(2) on an O_APPEND descriptor and fsyncs before
    returning, so an entry that `append` returned survives a power cut.
    """

    def __init__(self, path: Path, mode: int = 0o640) -> None:
        self.path = path
        self._mode = mode
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Chain `record` onto the log and return the entry written (with seq and hashes)."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, self._mode)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                seq, prev_hash = self._head(fd)
                entry: dict[str, Any] = {
                    "seq": seq + 1,
                    "prev_hash": prev_hash,
                    "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    "record": dict(record),
                }
                entry["hash"] = entry_hash(entry)
                line = canonical_json(entry) + b"\n"
                written = 0
                while written < len(line):
                    written += os.write(fd, line[written:])
                os.fsync(fd)
            finally:
                os.close(fd)  # closing releases the flock
            if created:
                fsync_directory(self.path.parent)
        log.info(
            "audit entry %d for %s: %s", entry["seq"], record.get("document", {}).get("name"), entry["hash"]
        )
        return entry

    def _head(self, fd: int) -> tuple[int, str]:
        """The last entry's seq and hash, after dropping a line cut short by a crash.

        A torn last line can only come from an append that never returned (the write or its
        fsync did not finish), so no caller was told that entry exists; it is cut off, with a
        warning, rather than leaving a line every later verification would stop at.
        """
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            _, start = _last_line(fd, size)
            log.warning(
                "%s: dropping a cut-short last line (%d bytes) left by a crash", self.path, size - start
            )
            os.ftruncate(fd, start)
            os.fsync(fd)
            size = start
        if size == 0:
            return 0, GENESIS_HASH
        line, _ = _last_line(fd, size - 1)
        try:
            entry = json.loads(line)
            seq, stored = int(entry["seq"]), str(entry["hash"])
        except (ValueError, KeyError, TypeError) as error:
            raise AuditError(
                f"{self.path}: the last entry is not valid ({error}); run audit verify"
            ) from None
        if entry_hash(entry) != stored:
            raise AuditError(f"{self.path}: the last entry does not match its hash; run audit verify")
        return seq, stored


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        return None
    if not isinstance(entry["seq"], int) or not isinstance(entry["hash"], str):
        return None
    return entry


def _check_entry(
    entry: dict[str, Any] | None, expected_seq: int, prev_hash: str, later_seqs: Sequence[int | None]
) -> tuple[Problem, str] | None:
    """What is wrong with one parsed line, given what the lines before it established."""
    if entry is None:
        return Problem.BAD_JSON, "not a JSON object with seq, prev_hash, time, record and hash"
    seq = entry["seq"]
    if entry_hash(entry) != entry["hash"]:
        return Problem.EDITED, f"entry {seq} does not match its hash: its content was changed"
    if seq != expected_seq:
        # The expected entry further down (or a number already seen) means a move, not a loss.
        if seq < expected_seq or expected_seq in later_seqs:
            return Problem.REORDERED, f"entry {seq} stands where entry {expected_seq} belongs"
        missing = str(expected_seq) if seq == expected_seq + 1 else f"{expected_seq}-{seq - 1}"
        return Problem.REMOVED, f"entry {missing} is missing before entry {seq}"
    if entry["prev_hash"] != prev_hash:
        return Problem.EDITED, f"entry {seq} does not chain to the entry before it: that entry was rewritten"
    return None


def verify(path: Path) -> VerifyResult:
    """Check every entry's hash, seq and link to the one before; stop at the first problem."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return VerifyResult(False, 0, GENESIS_HASH, None, Problem.UNREADABLE, f"cannot read {path}: {error}")
    lines = data.split(b"\n")
    # The part after the last newline is b"" for a whole file.
    return verify_entries(lines[:-1], torn=lines[-1])


def verify_entries(complete: Sequence[bytes], torn: bytes = b"") -> VerifyResult:
    """Check a chain given as its entries' JSON, in stored order (file lines or database rows)."""
    parsed = [_parse(line) for line in complete]
    later_seqs = [entry["seq"] if entry else None for entry in parsed]
    expected_seq, prev_hash = 1, GENESIS_HASH
    for index, entry in enumerate(parsed):
        failure = _check_entry(entry, expected_seq, prev_hash, later_seqs[index + 1 :])
        if failure is not None:
            problem, message = failure
            return VerifyResult(False, expected_seq - 1, prev_hash, index + 1, problem, message)
        assert entry is not None
        expected_seq, prev_hash = expected_seq + 1, entry["hash"]
    if torn:
        return VerifyResult(
            False,
            expected_seq - 1,
            prev_hash,
            len(complete) + 1,
            Problem.TRUNCATED,
            f"the file ends in the middle of a line ({len(torn)} bytes without a newline)",
        )
    return VerifyResult(True, expected_seq - 1, prev_hash)


def _file_digest(path: Path) -> dict[str, Any]:
    return {"path": str(path), "sha256": sha256_file(path), "size": path.stat().st_size}


def document_record(
    document: Document,
    outputs: Mapping[str, Path],
    *,
    route: str,
    reasons: Sequence[str] = (),
    ruleset_version: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The audit record of one finished document: what went in, what came out, and why it went where.

    `outputs` maps format -> written file (as `write_outputs` returns it); each file is hashed
    here, after it was written, so the record proves what the reader got. `extra` carries
    fields a caller adds (a job id, the hot folder) without changing this function.
    """
    engine = document.engine
    record: dict[str, Any] = {
        "document": {
            "name": document.source.name,
            "path": document.source.path,
            "sha256": document.source.sha256,
            "size": document.source.size,
            "media_type": document.source.media_type,
            "pages": len(document.pages),
            "created": document.created,
        },
        "outputs": {fmt: _file_digest(path) for fmt, path in sorted(outputs.items())},
        "engine": {
            "name": engine.get("name"),
            "manifest": engine.get("manifest"),
            "models": [
                {key: model.get(key) for key in ("role", "name", "file", "sha256", "provider")}
                for model in engine.get("models", [])
            ],
        },
        "appliance_version": document.appliance_version,
        "ruleset_version": ruleset_version,
        "confidence": None if document.confidence is None else round(document.confidence, 4),
        "timings_ms": {stage: round(ms, 2) for stage, ms in document.timings_ms.items()},
        "route": route,
        "reasons": list(reasons),
    }
    if extra:
        record.update(extra)
    return record
