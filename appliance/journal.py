"""Crash-safe job journal: one SQLite file in WAL mode, the single source of truth for every claimed file.

It also defines what every journal backend offers (`JobJournal`) and the job model they share;
`appliance.cluster.journal` is the PostgreSQL backend that several appliances share.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from appliance.errors import ApplianceError, FailureReason
from appliance.names import display

SCHEMA_VERSION = 4

# Waiting this long for another connection's write lock is normal under load (a second daemon
# thread, an API reader checkpointing); beyond it something is stuck and the caller should hear it.
BUSY_TIMEOUT_MS = 10_000

# Distinct from the reason a clean shutdown records (release): recover counts its own transitions.
RECOVER_REASON = "the daemon died while the job was running"

# A file can take the whole daemon down, not only its worker (a worker's memory blow-up that makes
# systemd's OOM killer stop the whole service, a bug in the daemon's own intake of it). A crash of
# the daemon is not counted as an attempt: it is almost always the daemon's doing (a kill, a power
# cut, an upgrade), and a good file must never turn poison through it. Crashes are counted apart,
# from the journal's own transitions (no extra column), and only a file that was being read at this
# many crashes is failed, with its own reason, so a file that kills the daemon cannot loop for ever.
MAX_DAEMON_RESTARTS = 10


class JobState(StrEnum):
    """Where a job is in its life; done and failed are final, review waits for a person."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    REVIEW = "review"
    FAILED = "failed"


FINISHED_STATES = (JobState.DONE, JobState.REVIEW, JobState.FAILED)

# The whole state machine: (from, to) pairs that `finish` accepts. start_next, retry_later,
# worker_died and recover each check their own single source state.
_FINISH_FROM: dict[JobState, tuple[JobState, ...]] = {
    JobState.RUNNING: (JobState.DONE, JobState.REVIEW, JobState.FAILED),
    # A duplicate whose earlier result is re-issued, or a file refused before reading, never runs.
    JobState.QUEUED: (JobState.DONE, JobState.FAILED),
    # A reviewer resolves a document (done, with corrections) or rejects it (failed).
    JobState.REVIEW: (JobState.DONE, JobState.FAILED),
}


@dataclass(frozen=True)
class Job:
    """One claimed file as the journal last recorded it."""

    id: str
    sha256: str
    source_folder: str
    relative_path: str
    name: str
    size: int
    spool_path: str
    profile: str
    priority: int
    state: JobState
    attempts: int
    reason: str | None
    created_at: float
    updated_at: float
    not_before: float
    outputs: dict[str, str]
    duplicate_of: str | None
    # Why a failed job failed, as a code (the reason beside it is prose for people); None otherwise.
    failure: FailureReason | None = None
    # A shared journal's running job: the node that holds it and the token of its lease (a new one
    # each time the job is started), which fences a node that lost the lease. None on SQLite.
    lease_node: str | None = None
    lease_token: int | None = None
    # The file's format as intake's completeness check sniffed it (None: not known).
    media_type: str | None = None


@dataclass(frozen=True)
class NodeStatus:
    """One appliance of a cluster sharing a journal, as its last heartbeat left it."""

    id: str
    name: str
    pid: int
    started_at: float
    heartbeat_at: float
    # How long ago its last heartbeat was, on the database's clock (so node clocks do not matter).
    seconds_since_heartbeat: float
    running: int
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transition:
    """One recorded state change; `seq` is global and never reused, so readers can resume after it."""

    seq: int
    job_id: str
    from_state: JobState | None
    to_state: JobState
    reason: str
    at: float


class JournalError(ApplianceError):
    """The journal file cannot be used: not a journal, written by a newer appliance, or not WAL-capable."""


class JournalUnavailableError(JournalError):
    """The journal cannot be reached for now (its database server is down or cut off); retry later."""


class LeaseLostError(Exception):
    """The running job's lease is no longer this node's: another node may be reading it now.

    Whatever this node has of the job is stale and must not be recorded.
    """

    def __init__(self, job_id: str, detail: str) -> None:
        super().__init__(f"job {job_id}: lease lost ({detail})")
        self.job_id = job_id


class AlreadyClaimedError(Exception):
    """Another node journalled this very file first (same file identity and content)."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"{job.relative_path} is already job {job.id}")
        self.job = job


class InvalidTransition(Exception):  # noqa: N818 - the name is part of the journal's API
    """A state change the state machine does not allow; a bug in the caller, never a user error."""

    def __init__(self, job_id: str, from_state: JobState, to_state: JobState) -> None:
        super().__init__(f"job {job_id}: cannot go from {from_state} to {to_state}")
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state


class UnknownJobError(LookupError):
    """No job with that id is in the journal (never added, or pruned)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id} in the journal")
        self.job_id = job_id


_SCHEMA = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    source_folder TEXT NOT NULL,
    relative_path TEXT NOT NULL,
    name TEXT NOT NULL,
    size INTEGER NOT NULL CHECK (size >= 0),
    spool_path TEXT NOT NULL,
    profile TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'review', 'failed')),
    attempts INTEGER NOT NULL CHECK (attempts >= 0),
    reason TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    not_before REAL NOT NULL,
    outputs TEXT NOT NULL,
    -- No foreign key: pruning an original must not fail, nor silently turn its re-issued
    -- duplicates into originals that find_done_by_sha256 would then hand out.
    duplicate_of TEXT
);
CREATE INDEX jobs_queue ON jobs (state, priority DESC, created_at);
CREATE INDEX jobs_sha256 ON jobs (sha256, state);
CREATE INDEX jobs_created ON jobs (created_at);
CREATE INDEX jobs_finished ON jobs (state, updated_at);
CREATE INDEX jobs_spool ON jobs (spool_path);
CREATE TABLE transitions (
    -- AUTOINCREMENT so a seq is never reused even after prune deletes the newest rows:
    -- a client resuming "after seq N" must never miss a later transition.
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    from_state TEXT,
    to_state TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX transitions_job ON transitions (job_id, seq);
"""

# Version 2: file names and paths are stored as the bytes the kernel gave (os.fsencode), as BLOB
# values in the same columns (a TEXT column keeps a BLOB as it is), so a name that is not UTF-8
# (an SMB or NFS client's legacy code page) is kept exactly; SQLite could not take it as text.
_PATH_COLUMNS = ("source_folder", "relative_path", "name", "spool_path")
# Version 3: a failed job's reason code in a column of its own (`failure`), so that nothing parses
# the prose reason for it. Jobs failed before are given the code their reason starts with, as the
# daemon used to read it: "poison: ...", "gave up after ...", "<code>: ...", else internal.
_REASON_HEAD = (
    "CASE WHEN instr(reason, ':') > 0 THEN substr(reason, 1, instr(reason, ':') - 1) ELSE reason END"
)
_KNOWN_FAILURES = ", ".join(f"'{item.value}'" for item in FailureReason)
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: tuple(f"UPDATE jobs SET {column} = CAST({column} AS BLOB)" for column in _PATH_COLUMNS),
    3: (
        "ALTER TABLE jobs ADD COLUMN failure TEXT",
        f"UPDATE jobs SET failure = CASE "
        f"WHEN {_REASON_HEAD} = 'poison' THEN 'poison' "
        f"WHEN substr({_REASON_HEAD}, 1, 13) = 'gave up after' THEN 'gave_up' "
        f"WHEN {_REASON_HEAD} IN ({_KNOWN_FAILURES}) THEN {_REASON_HEAD} "
        "ELSE 'internal' END WHERE state = 'failed'",
    ),
    # Version 4: the media type intake's completeness check found (PDF, TIFF, ...), so the reader
    # need not sniff the file again; NULL for jobs from before, and for orphans found at start.
    4: ("ALTER TABLE jobs ADD COLUMN media_type TEXT",),
}

_JOB_COLUMNS = (
    "id, sha256, source_folder, relative_path, name, size, spool_path, profile, priority, state, "
    "attempts, reason, created_at, updated_at, not_before, outputs, duplicate_of, failure, media_type"
)
_JOB_PLACEHOLDERS = ", ".join(f":{column.strip()}" for column in _JOB_COLUMNS.split(","))


def path_value(path: str) -> bytes:
    """A name or path as stored: the exact bytes (a non-UTF-8 name arrives surrogate-escaped)."""
    return os.fsencode(path)


class Row(Protocol):
    """A result row by column name: sqlite3.Row, or psycopg's dict rows."""

    def __getitem__(self, key: str, /) -> Any: ...
    def keys(self) -> Any: ...


def job_from_row(row: Row) -> Job:
    """A job as either backend stores it (paths as bytes; outputs as JSON text or already a dict)."""
    columns = set(row.keys())
    outputs = row["outputs"]
    return Job(
        id=row["id"],
        sha256=row["sha256"],
        source_folder=os.fsdecode(bytes(row["source_folder"])),
        relative_path=os.fsdecode(bytes(row["relative_path"])),
        name=os.fsdecode(bytes(row["name"])),
        size=row["size"],
        spool_path=os.fsdecode(bytes(row["spool_path"])),
        profile=row["profile"],
        priority=row["priority"],
        state=JobState(row["state"]),
        attempts=row["attempts"],
        reason=row["reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        not_before=row["not_before"],
        outputs=json.loads(outputs) if isinstance(outputs, str) else dict(outputs),
        duplicate_of=row["duplicate_of"],
        failure=None if row["failure"] is None else FailureReason(row["failure"]),
        # Only a shared journal keeps leases.
        lease_node=row["lease_node"] if "lease_node" in columns else None,
        lease_token=row["lease_token"] if "lease_token" in columns else None,
        media_type=row["media_type"],
    )


def transition_from_row(row: Row) -> Transition:
    from_state = row["from_state"]
    return Transition(
        seq=row["seq"],
        job_id=row["job_id"],
        from_state=None if from_state is None else JobState(from_state),
        to_state=JobState(row["to_state"]),
        reason=row["reason"],
        at=row["at"],
    )


def _check_page(limit: int, offset: int = 0) -> None:
    # SQLite reads a negative LIMIT as "no limit", which would turn a caller's bug into a full scan.
    if limit < 0 or offset < 0:
        raise ValueError(f"limit and offset must not be negative (got {limit}, {offset})")


# The rules every backend applies when a running job stops without a result: one place, so the
# SQLite and PostgreSQL journals cannot drift apart.
Outcome = tuple[JobState, str, FailureReason | None]


def retry_outcome(job: Job, reason: str, max_attempts: int) -> Outcome:
    """A transient error: queued again, or failed once the attempts are used up."""
    if job.attempts >= max_attempts:
        return JobState.FAILED, f"gave up after {job.attempts} attempts: {reason}", FailureReason.GAVE_UP
    return JobState.QUEUED, reason, None


def died_outcome(job: Job, reason: str, max_attempts: int) -> Outcome:
    """The job's worker died: queued again, or failed as poison once the attempts are used up.

    The attempt was counted by start_next. No backoff: a worker lost to a crash is replaced at
    once, and the file has at most max_attempts tries.
    """
    if job.attempts >= max_attempts:
        poison = f"poison: killed its worker {job.attempts} times ({reason})"
        return JobState.FAILED, poison, FailureReason.POISON
    return JobState.QUEUED, reason, None


def crash_outcome(crashes: int, max_restarts: int, reason: str) -> Outcome:
    """The daemon (or the node) reading the job died: queued again, or failed at max_restarts crashes."""
    if crashes >= max_restarts:
        failed = f"crashed_daemon: it was being read at each of {crashes} daemon crashes ({reason})"
        return JobState.FAILED, failed, FailureReason.CRASHED_DAEMON
    return JobState.QUEUED, reason, None


class JobJournal(Protocol):
    """What the daemon and its collaborators need of a journal, whichever backend keeps it."""

    max_attempts: int
    node_id: str | None  # this appliance's id in a cluster (None: the journal is its alone)

    def close(self) -> None: ...
    def add(
        self,
        *,
        sha256: str,
        source_folder: str,
        relative_path: str,
        name: str,
        size: int,
        spool_path: str,
        profile: str = "default",
        priority: int = 0,
        reason: str = "claimed",
        identity: str | None = None,
        media_type: str | None = None,
        now: float | None = None,
    ) -> Job: ...
    def get(self, job_id: str) -> Job | None: ...
    def start_next(self, now: float | None = None, sources: Sequence[str] | None = None) -> Job | None: ...
    def finish(
        self,
        job_id: str,
        state: JobState,
        reason: str,
        outputs: dict[str, str] | None = None,
        duplicate_of: str | None = None,
        *,
        failure: FailureReason | None = None,
        audit: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> Job: ...
    def retry_later(
        self, job_id: str, reason: str, delay_seconds: float, *, now: float | None = None
    ) -> Job: ...
    def worker_died(self, job_id: str, reason: str, *, now: float | None = None) -> Job: ...
    def release(self, job_id: str, reason: str, *, now: float | None = None) -> Job: ...
    def fence(self, job_id: str) -> None: ...
    def renew_leases(self, job_ids: Sequence[str], stats: Mapping[str, Any] | None = None) -> list[str]: ...
    def reclaim_expired(self, *, now: float | None = None) -> list[Job]: ...
    def nodes(self) -> list[NodeStatus]: ...
    def latest_seq(self) -> int: ...
    def find_by_spool_path(self, spool_path: str) -> Job | None: ...
    def recover(self, *, now: float | None = None) -> list[Job]: ...
    def find_done_by_sha256(self, sha256: str) -> Job | None: ...
    def jobs(self, state: JobState | None = None, limit: int = 100, offset: int = 0) -> list[Job]: ...
    def counts(self) -> dict[JobState, int]: ...
    def transitions(
        self, job_id: str | None = None, after_seq: int = 0, limit: int = 1000
    ) -> list[Transition]: ...
    def prune(self, older_than_seconds: float, now: float | None = None) -> list[Job]: ...


class Journal:
    """The job journal. Use from one thread at a time; any thread may be that thread.

    Several `Journal` objects, in one process or several, may share the file: every write takes
    SQLite's write lock first (`BEGIN IMMEDIATE`), so two of them never hand out the same job.
    """

    def __init__(
        self,
        path: Path,
        max_attempts: int = 3,
        max_restarts: int = MAX_DAEMON_RESTARTS,
        *,
        audit_sink: Callable[[Mapping[str, Any]], object] | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1 (got {max_attempts})")
        if max_restarts < 1:
            raise ValueError(f"max_restarts must be at least 1 (got {max_restarts})")
        self.path = path
        self.max_attempts = max_attempts
        self.max_restarts = max_restarts
        self.node_id: str | None = None  # one daemon owns the file: no cluster
        # Where a finished job's audit record goes: a hash-chained file beside this one, appended
        # just after the job's state commits (PostgreSQL keeps both in one transaction).
        self._audit_sink = audit_sink
        # Calls are serialised by this lock, so the connection may move between threads
        # (created by the daemon's main thread, used by its scheduler thread).
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the module must not open transactions behind our back; every
        # write opens its own BEGIN IMMEDIATE so a state change and its transition commit together.
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        # Rows by column name: the mapping to Job cannot drift when a migration adds a column.
        self._conn.row_factory = sqlite3.Row
        try:
            self._configure()
            self._migrate()
        except sqlite3.DatabaseError as error:
            self._conn.close()
            raise JournalError(f"{path} cannot be opened as a job journal: {error}") from error
        except BaseException:
            self._conn.close()
            raise

    def _configure(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if str(mode).lower() != "wal":
            # Without WAL (e.g. some network file systems) readers would block the daemon's writes.
            raise JournalError(f"{self.path}: SQLite refused WAL mode (got {mode!r}); use a local disk")
        # In WAL mode, NORMAL only syncs at checkpoints: a job reported done could come back as
        # running after a power cut and be read twice. FULL syncs the WAL on every commit.
        conn.execute("PRAGMA synchronous = FULL")
        # Off by default in SQLite; needed for transitions' ON DELETE CASCADE and job references.
        conn.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        conn = self._conn
        # IMMEDIATE so two processes opening a fresh file at once cannot both create the schema.
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"{self.path} was written by a newer appliance (journal schema version {version}; "
                    f"this version understands up to {SCHEMA_VERSION}); upgrade the appliance "
                    "or move the journal aside"
                )
            if version == 0:
                (tables,) = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                if tables:
                    raise JournalError(f"{self.path} is an SQLite file but not a job journal")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                version = 1
            # Each step in the same transaction as the version it sets: all of it or none of it.
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement)
            if version != SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: a crash, or an exception here, leaves all of it or none of it."""
        with self._lock:
            conn = self._conn
            # IMMEDIATE takes the write lock before reading, so the state we check is the state we
            # change; a deferred transaction could read, then lose the race to another connection.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _load(self, conn: sqlite3.Connection, job_id: str) -> Job:
        row = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJobError(job_id)
        return job_from_row(row)

    def _move(
        self,
        conn: sqlite3.Connection,
        job: Job,
        to_state: JobState,
        reason: str,
        at: float,
        *,
        attempts: int | None = None,
        not_before: float | None = None,
        outputs: dict[str, str] | None = None,
        duplicate_of: str | None = None,
        failure: FailureReason | None = None,
    ) -> Job:
        """Change one job's state and record the transition, inside the caller's transaction."""
        if to_state is JobState.FAILED:
            failure = failure or FailureReason.INTERNAL  # a failure nobody named is the appliance's
        elif failure is not None:
            raise ValueError(f"job {job.id}: a failure reason ({failure}) belongs to a failed job only")
        changed = conn.execute(
            "UPDATE jobs SET state = ?, reason = ?, updated_at = ?, attempts = ?, not_before = ?, "
            "outputs = ?, duplicate_of = ?, failure = ? WHERE id = ? AND state = ?",
            (
                to_state.value,
                display(reason),
                at,
                job.attempts if attempts is None else attempts,
                job.not_before if not_before is None else not_before,
                json.dumps(job.outputs if outputs is None else outputs, sort_keys=True),
                job.duplicate_of if duplicate_of is None else duplicate_of,
                None if failure is None else failure.value,
                job.id,
                job.state.value,
            ),
        ).rowcount
        if changed != 1:  # the caller read the job in this same transaction; this is a bug guard
            raise RuntimeError(f"job {job.id} changed under an IMMEDIATE transaction")
        self._record(conn, job.id, job.state, to_state, reason=reason, at=at)
        return self._load(conn, job.id)

    def _record(
        self,
        conn: sqlite3.Connection,
        job_id: str,
        from_state: JobState | None,
        to_state: JobState,
        *,
        reason: str,
        at: float,
    ) -> None:
        conn.execute(
            "INSERT INTO transitions (job_id, from_state, to_state, reason, at) VALUES (?, ?, ?, ?, ?)",
            # A reason may quote a file name; shown escaped, as SQLite text must be UTF-8.
            (job_id, None if from_state is None else from_state.value, to_state.value, display(reason), at),
        )

    def add(
        self,
        *,
        sha256: str,
        source_folder: str,
        relative_path: str,
        name: str,
        size: int,
        spool_path: str,
        profile: str = "default",
        priority: int = 0,
        reason: str = "claimed",
        identity: str | None = None,
        media_type: str | None = None,
        now: float | None = None,
    ) -> Job:
        """Record a newly claimed file as queued (with its media type when intake sniffed it).

        `identity` (the claimed file's device, inode and mtime) matters only to a shared journal,
        where two nodes may claim one file; one daemon owns an SQLite journal and its claim's
        atomic rename already makes a file its own once.
        """
        at = time.time() if now is None else now
        job_id = uuid.uuid4().hex
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({_JOB_PLACEHOLDERS})",
                {
                    "id": job_id,
                    "sha256": sha256,
                    "source_folder": path_value(source_folder),
                    "relative_path": path_value(relative_path),
                    "name": path_value(name),
                    "size": size,
                    "spool_path": path_value(spool_path),
                    "profile": profile,
                    "priority": priority,
                    "state": JobState.QUEUED.value,
                    "attempts": 0,
                    "reason": display(reason),
                    "created_at": at,
                    "updated_at": at,
                    "not_before": at,
                    "outputs": "{}",
                    "duplicate_of": None,
                    "failure": None,
                    "media_type": media_type,
                },
            )
            self._record(conn, job_id, None, JobState.QUEUED, reason=reason, at=at)
            return self._load(conn, job_id)

    def get(self, job_id: str) -> Job | None:
        with self._read() as conn:
            row = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else job_from_row(row)

    def start_next(self, now: float | None = None, sources: Sequence[str] | None = None) -> Job | None:
        """Hand out the most urgent startable job as running, counting the attempt; None if none.

        `sources`: only jobs from these hot folders (None: any).
        """
        at = time.time() if now is None else now
        where, args = "", tuple[bytes, ...]()
        if sources is not None:
            where = f"AND source_folder IN ({', '.join('?' * len(sources))}) " if sources else "AND 0 "
            args = tuple(path_value(source) for source in sources)
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = ? AND not_before <= ? {where}"
                # rowid breaks created_at ties in insertion order (a coarse clock can repeat).
                "ORDER BY priority DESC, created_at ASC, rowid ASC LIMIT 1",
                (JobState.QUEUED.value, at, *args),
            ).fetchone()
            if row is None:
                return None
            job = job_from_row(row)
            # Counted here, before any worker exists; recover() gives it back when the daemon, not
            # the worker, died, and release() when the daemon interrupted the job itself.
            return self._move(conn, job, JobState.RUNNING, "started", at, attempts=job.attempts + 1)

    def finish(
        self,
        job_id: str,
        state: JobState,
        reason: str,
        outputs: dict[str, str] | None = None,
        duplicate_of: str | None = None,
        *,
        failure: FailureReason | None = None,
        audit: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> Job:
        """Close a job: running → done, review or failed; queued → done or failed (never ran).

        A failed job records `failure`, its reason code (internal when none is given); `audit` is
        the document's audit record, handed to the audit sink once the change has committed.
        """
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._load(conn, job_id)
            if state not in _FINISH_FROM.get(job.state, ()):
                raise InvalidTransition(job_id, job.state, state)
            if duplicate_of is not None:
                if duplicate_of == job_id:
                    raise ValueError(f"job {job_id} cannot be a duplicate of itself")
                self._load(conn, duplicate_of)
            finished = self._move(
                conn, job, state, reason, at, outputs=outputs, duplicate_of=duplicate_of, failure=failure
            )
        if audit is not None and self._audit_sink is not None:
            self._audit_sink(audit)
        return finished

    def retry_later(self, job_id: str, reason: str, delay_seconds: float, *, now: float | None = None) -> Job:
        """Requeue a running job after a transient error, or fail it once its attempts are used up."""
        if not math.isfinite(delay_seconds) or delay_seconds < 0:
            raise ValueError(f"delay_seconds must be a finite number >= 0 (got {delay_seconds})")
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._load(conn, job_id)
            if job.state is not JobState.RUNNING:
                raise InvalidTransition(job_id, job.state, JobState.QUEUED)
            state, why, failure = retry_outcome(job, reason, self.max_attempts)
            return self._move(conn, job, state, why, at, not_before=at + delay_seconds, failure=failure)

    def worker_died(self, job_id: str, reason: str, *, now: float | None = None) -> Job:
        """Requeue a job whose worker died, or fail it as poison once it has used all its attempts."""
        at = time.time() if now is None else now
        with self._write() as conn:
            return self._died(conn, self._load(conn, job_id), reason, at)

    def _died(self, conn: sqlite3.Connection, job: Job, reason: str, at: float) -> Job:
        if job.state is not JobState.RUNNING:
            raise InvalidTransition(job.id, job.state, JobState.QUEUED)
        state, why, failure = died_outcome(job, reason, self.max_attempts)
        return self._move(conn, job, state, why, at, failure=failure)

    def release(self, job_id: str, reason: str, *, now: float | None = None) -> Job:
        """Give a running job back to the queue without using up an attempt.

        For a job the daemon itself interrupted (a shutdown between pages): the file did nothing
        wrong, so the attempt counted by start_next is returned and it can never turn poison this way.
        """
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._load(conn, job_id)
            if job.state is not JobState.RUNNING:
                raise InvalidTransition(job_id, job.state, JobState.QUEUED)
            return self._move(conn, job, JobState.QUEUED, reason, at, attempts=max(0, job.attempts - 1))

    # -- leases: a shared journal's; one daemon owns an SQLite journal, so it has none to keep ----

    def fence(self, job_id: str) -> None:
        """Check that this daemon may still record the running job's result (always, on SQLite)."""
        job = self.get(job_id)
        if job is None:
            raise UnknownJobError(job_id)
        if job.state is not JobState.RUNNING:
            raise LeaseLostError(job_id, f"it is {job.state}, not running")

    def renew_leases(self, job_ids: Sequence[str], stats: Mapping[str, Any] | None = None) -> list[str]:
        """Nothing to renew: a crash is found by `recover` at the next start."""
        return []

    def reclaim_expired(self, *, now: float | None = None) -> list[Job]:
        return []

    def nodes(self) -> list[NodeStatus]:
        """No cluster: the one daemon's status is its own."""
        return []

    def latest_seq(self) -> int:
        """The newest transition's seq (0 when there is none): where a watcher of new events starts."""
        with self._read() as conn:
            (seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM transitions").fetchone()
        return int(seq)

    def find_by_spool_path(self, spool_path: str) -> Job | None:
        """The job that owns a spooled file, if any (start-up uses it to tell orphans from known files)."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE spool_path = ? ORDER BY rowid DESC LIMIT 1",
                (path_value(spool_path),),
            ).fetchone()
        return None if row is None else job_from_row(row)

    def recover(self, *, now: float | None = None) -> list[Job]:
        """At start-up, requeue every job a crash left running, giving back the attempt it was counted.

        The daemon died, not (as far as anyone can tell) the file's worker, so the crash never makes
        a file poison; only a file that was running at `max_restarts` crashes is failed, as
        `crashed_daemon` (see MAX_DAEMON_RESTARTS). Call it only while no other daemon uses this
        journal: a running job here is assumed dead.
        """
        at = time.time() if now is None else now
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = ? ORDER BY rowid",
                (JobState.RUNNING.value,),
            ).fetchall()
            return [self._recover_one(conn, job_from_row(row), at) for row in rows]

    def _recover_one(self, conn: sqlite3.Connection, job: Job, at: float) -> Job:
        (earlier,) = conn.execute(
            "SELECT count(*) FROM transitions WHERE job_id = ? AND from_state = ? AND reason = ?",
            (job.id, JobState.RUNNING.value, RECOVER_REASON),
        ).fetchone()
        attempts = max(0, job.attempts - 1)  # start_next counted one; the worker did not die
        state, why, failure = crash_outcome(int(earlier) + 1, self.max_restarts, RECOVER_REASON)
        return self._move(conn, job, state, why, at, attempts=attempts, failure=failure)

    def find_done_by_sha256(self, sha256: str) -> Job | None:
        """The most recent original result (done or review, not itself a duplicate) for this content."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE sha256 = ? AND state IN (?, ?) "
                "AND duplicate_of IS NULL ORDER BY updated_at DESC, rowid DESC LIMIT 1",
                (sha256, JobState.DONE.value, JobState.REVIEW.value),
            ).fetchone()
        return None if row is None else job_from_row(row)

    def jobs(self, state: JobState | None = None, limit: int = 100, offset: int = 0) -> list[Job]:
        """Jobs newest first, optionally in one state."""
        _check_page(limit, offset)
        where, args = ("", ()) if state is None else ("WHERE state = ?", (state.value,))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs {where} ORDER BY created_at DESC, rowid DESC "
                "LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        return [job_from_row(row) for row in rows]

    def counts(self) -> dict[JobState, int]:
        with self._read() as conn:
            rows = conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall()
        found = {JobState(state): int(count) for state, count in rows}
        return {state: found.get(state, 0) for state in JobState}

    def transitions(
        self, job_id: str | None = None, after_seq: int = 0, limit: int = 1000
    ) -> list[Transition]:
        """Transitions in seq order after `after_seq`, optionally of one job; page on with the last seq."""
        _check_page(limit)
        where, args = ("", ()) if job_id is None else ("AND job_id = ?", (job_id,))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT seq, job_id, from_state, to_state, reason, at FROM transitions "
                f"WHERE seq > ? {where} ORDER BY seq LIMIT ?",
                (after_seq, *args, limit),
            ).fetchall()
        return [transition_from_row(row) for row in rows]

    def prune(self, older_than_seconds: float, now: float | None = None) -> list[Job]:
        """Delete finished jobs last changed before now - older_than_seconds, with their transitions.

        Returns the deleted jobs so the caller can delete their spool files; once this commits the
        journal no longer claims them, so a crash before the files go leaves only orphans, never jobs
        pointing at missing files.
        """
        cutoff = (time.time() if now is None else now) - older_than_seconds
        # Review is not final: a document waiting for a person is kept however long it waits.
        finished = (JobState.DONE.value, JobState.FAILED.value)
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN (?, ?) AND updated_at < ? ORDER BY rowid",
                (*finished, cutoff),
            ).fetchall()
            pruned = [job_from_row(row) for row in rows]
            # Explicit rather than relying on the cascade, which is only as safe as foreign_keys=ON.
            conn.executemany("DELETE FROM transitions WHERE job_id = ?", [(job.id,) for job in pruned])
            conn.executemany("DELETE FROM jobs WHERE id = ?", [(job.id,) for job in pruned])
        return pruned
