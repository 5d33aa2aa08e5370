"""The job journal in PostgreSQL, shared by several appliances: claims, leases, fencing, one audit chain.

Every node watches the same hot folders (a shared mount) and spool. A claim is unique on the
file's identity and content, so two nodes that both see a file cannot both journal it. A node
takes the most urgent queued job with `FOR UPDATE SKIP LOCKED`, so nodes never wait for each
other nor take the same job. A running job holds a lease that its node renews; once the lease has
run out (the node was killed, powered off or cut off), any node gives the job back to the queue
without counting it against the file, and another node reads it. Each start of a job gets a new
lease token; a node records a running job's result only while it holds the token and its lease
has not run out (`fence`, and every change of a running job checks the token), so a node that
comes back after losing the job cannot record a second result.

Lease times are the database's clock, not the nodes': nodes whose clocks differ still agree.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from appliance.cluster import audit as chain
from appliance.cluster.schema import migrate
from appliance.errors import FailureReason
from appliance.journal import (
    _FINISH_FROM,
    FINISHED_STATES,
    MAX_DAEMON_RESTARTS,
    RECOVER_REASON,
    AlreadyClaimedError,
    InvalidTransition,
    Job,
    JobState,
    JournalError,
    JournalUnavailableError,
    LeaseLostError,
    NodeStatus,
    Transition,
    UnknownJobError,
    _check_page,
    crash_outcome,
    died_outcome,
    job_from_row,
    path_value,
    retry_outcome,
    transition_from_row,
)
from appliance.names import display

# Why a job went back to the queue when its node stopped renewing the lease; counted with the
# restarts of a daemon (RECOVER_REASON), so a file that takes nodes down cannot loop for ever.
LEASE_EXPIRED_REASON = "the node reading it stopped renewing its lease"

# Transitions are numbered by a sequence, and a sequence hands out numbers in the order
# transactions ask, not in the order they commit: a watcher resuming "after seq N" could miss a
# lower seq that commits later. Every write that records a transition takes this lock first, so
# seq order is commit order. Writes are short (no file work inside them), so it costs little.
_TRANSITIONS_LOCK = 0x6F63725F74726E  # "ocr_trn"

_DB_NOW = "extract(epoch FROM clock_timestamp())"

_JOB_COLUMNS = (
    "id, sha256, source_folder, relative_path, name, size, spool_path, profile, priority, state, "
    "attempts, reason, created_at, updated_at, not_before, outputs, duplicate_of, failure, "
    "lease_node, lease_token, media_type"
)

Row = dict[str, Any]


@contextmanager
def _reachable() -> Iterator[None]:
    """A lost connection or an unreachable server, as the journal's own error the daemon waits out."""
    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as error:
        raise JournalUnavailableError(f"the PostgreSQL journal is unreachable: {error}") from error


class PostgresJournal:
    """The shared journal as one node sees it; safe to use from several threads of that node."""

    def __init__(
        self,
        dsn: str,
        *,
        node_id: str,
        node_name: str,
        lease_seconds: float = 30.0,
        max_attempts: int = 3,
        max_restarts: int = MAX_DAEMON_RESTARTS,
        pool_size: int = 4,
        connect_timeout: float = 30.0,
    ) -> None:
        if max_attempts < 1 or max_restarts < 1:
            raise ValueError("max_attempts and max_restarts must be at least 1")
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive (got {lease_seconds})")
        self.max_attempts = max_attempts
        self.max_restarts = max_restarts
        self.node_id: str | None = node_id
        self.node_name = node_name
        self.lease_seconds = lease_seconds
        # Which running jobs this node started, with the lease token each got: only these may be
        # changed from running here, and only while the database still shows the same token.
        self._held: dict[str, int] = {}
        self._held_lock = threading.Lock()
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            # How long a call waits for a connection: while the server is away each call fails
            # after this (the daemon's loop says so and carries on), not after psycopg's 30 s.
            timeout=10.0,
            open=False,
            name=f"journal-{node_name}",
            kwargs={
                "autocommit": True,  # every call opens its own transaction block
                "row_factory": dict_row,
                "application_name": f"ocr-appliance {node_name}"[:63],
                # A node stopped in the middle of a transaction must not hold its row locks for
                # ever: the server ends such a session, and the other nodes carry on.
                "options": "-c idle_in_transaction_session_timeout=60000",
            },
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as error:
            self._pool.close()
            raise JournalError(f"cannot reach the PostgreSQL journal ({error})") from None
        try:
            with self._pool.connection() as conn:
                migrate(conn)
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO nodes (id, name, pid, started_at, heartbeat_at) "
                        f"VALUES (%s, %s, %s, {_DB_NOW}, {_DB_NOW}) ON CONFLICT (id) DO UPDATE SET "
                        f"name = excluded.name, pid = excluded.pid, started_at = {_DB_NOW}, "
                        f"heartbeat_at = {_DB_NOW}, stats = '{{}}'",
                        (node_id, node_name, os.getpid()),
                    )
        except BaseException:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[Row]]:
        with _reachable(), self._pool.connection() as conn:
            yield conn  # type: ignore[misc]

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Row]]:
        """One transaction: all of it or none of it."""
        with _reachable(), self._pool.connection() as conn, conn.transaction():
            yield conn  # type: ignore[misc]

    # -- rows and moves ---------------------------------------------------------------------------

    def _load(self, conn: psycopg.Connection[Row], job_id: str, *, lock: bool = True) -> Job:
        row = conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = %s{' FOR UPDATE' if lock else ''}", (job_id,)
        ).fetchone()
        if row is None:
            raise UnknownJobError(job_id)
        return job_from_row(row)

    def _check_held(self, job: Job) -> None:
        """A running job may be changed here only by the node holding its current lease."""
        if job.state is not JobState.RUNNING:
            return
        with self._held_lock:
            token = self._held.get(job.id)
        if job.lease_node != self.node_id or token is None or token != job.lease_token:
            holder = job.lease_node or "no node"
            raise LeaseLostError(job.id, f"it was started again, now held by {holder}")

    def _move(
        self,
        conn: psycopg.Connection[Row],
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
            failure = failure or FailureReason.INTERNAL
        elif failure is not None:
            raise ValueError(f"job {job.id}: a failure reason ({failure}) belongs to a failed job only")
        running = to_state is JobState.RUNNING
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_TRANSITIONS_LOCK,))
        row = conn.execute(
            "UPDATE jobs SET state = %s, reason = %s, updated_at = %s, attempts = %s, not_before = %s, "
            "outputs = %s, duplicate_of = %s, failure = %s, "
            f"lease_node = %s, lease_token = {'nextval(%s)' if running else '%s'}, "
            f"lease_expires = {_DB_NOW} + %s "
            f"WHERE id = %s AND state = %s RETURNING {_JOB_COLUMNS}",
            (
                to_state.value,
                display(reason),
                at,
                job.attempts if attempts is None else attempts,
                job.not_before if not_before is None else not_before,
                json.dumps(job.outputs if outputs is None else outputs, sort_keys=True),
                job.duplicate_of if duplicate_of is None else duplicate_of,
                None if failure is None else failure.value,
                self.node_id if running else None,
                "lease_tokens" if running else None,
                self.lease_seconds if running else None,
                job.id,
                job.state.value,
            ),
        ).fetchone()
        if row is None:  # the caller locked the row in this transaction; this is a bug guard
            raise RuntimeError(f"job {job.id} changed under a row lock")
        self._record(conn, job.id, job.state, to_state, reason=reason, at=at)
        moved = job_from_row(row)
        with self._held_lock:
            if running:
                assert moved.lease_token is not None
                self._held[moved.id] = moved.lease_token
            else:
                self._held.pop(moved.id, None)
        return moved

    @staticmethod
    def _record(
        conn: psycopg.Connection[Row],
        job_id: str,
        from_state: JobState | None,
        to_state: JobState,
        *,
        reason: str,
        at: float,
    ) -> None:
        conn.execute(
            "INSERT INTO transitions (job_id, from_state, to_state, reason, at) VALUES (%s, %s, %s, %s, %s)",
            (job_id, None if from_state is None else from_state.value, to_state.value, display(reason), at),
        )

    # -- the journal's operations (see appliance.journal.JobJournal) --------------------------------

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
        """Record a newly claimed file as queued; AlreadyClaimedError if another node journalled it."""
        at = time.time() if now is None else now
        job_id = uuid.uuid4().hex
        with self._write() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_TRANSITIONS_LOCK,))
            row = conn.execute(
                "INSERT INTO jobs (id, sha256, identity, source_folder, relative_path, name, size, "
                "spool_path, profile, priority, state, attempts, reason, created_at, updated_at, "
                "not_before, outputs, media_type) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'queued', 0, %s, %s, %s, %s, '{}', %s) "
                "ON CONFLICT (identity, sha256) WHERE identity IS NOT NULL DO NOTHING "
                f"RETURNING {_JOB_COLUMNS}",
                (
                    job_id,
                    sha256,
                    identity,
                    path_value(source_folder),
                    path_value(relative_path),
                    path_value(name),
                    size,
                    path_value(spool_path),
                    profile,
                    priority,
                    display(reason),
                    at,
                    at,
                    at,
                    media_type,
                ),
            ).fetchone()
            if row is None:
                existing = conn.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE identity = %s AND sha256 = %s",
                    (identity, sha256),
                ).fetchone()
                assert existing is not None  # the conflict that skipped the insert is this row
                raise AlreadyClaimedError(job_from_row(existing))
            self._record(conn, job_id, None, JobState.QUEUED, reason=reason, at=at)
            return job_from_row(row)

    def get(self, job_id: str) -> Job | None:
        with self._read() as conn:
            row = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = %s", (job_id,)).fetchone()
        return None if row is None else job_from_row(row)

    def start_next(self, now: float | None = None, sources: Sequence[str] | None = None) -> Job | None:
        """Take the most urgent startable job as running, with a lease; skip jobs other nodes are taking.

        `sources`: only jobs from these hot folders (None: any), so a node never takes a job it
        has no folder settings for while another node has.
        """
        at = time.time() if now is None else now
        where, args = "", tuple[list[bytes], ...]()
        if sources is not None:
            where, args = "AND source_folder = ANY(%s) ", ([path_value(source) for source in sources],)
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = 'queued' AND not_before <= %s {where}"
                "ORDER BY priority DESC, created_at ASC, seq ASC LIMIT 1 FOR UPDATE SKIP LOCKED",
                (at, *args),
            ).fetchone()
            if row is None:
                return None
            job = job_from_row(row)
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
        """Close a job; its audit entry is chained in the same transaction, so both or neither exist."""
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._load(conn, job_id)
            if state not in _FINISH_FROM.get(job.state, ()):
                raise InvalidTransition(job_id, job.state, state)
            self._check_held(job)
            if duplicate_of is not None:
                if duplicate_of == job_id:
                    raise ValueError(f"job {job_id} cannot be a duplicate of itself")
                self._load(conn, duplicate_of, lock=False)
            finished = self._move(
                conn, job, state, reason, at, outputs=outputs, duplicate_of=duplicate_of, failure=failure
            )
            if audit is not None:
                chain.append_entry(conn, audit, job_id)
            return finished

    def retry_later(self, job_id: str, reason: str, delay_seconds: float, *, now: float | None = None) -> Job:
        if not math.isfinite(delay_seconds) or delay_seconds < 0:
            raise ValueError(f"delay_seconds must be a finite number >= 0 (got {delay_seconds})")
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._running(conn, job_id)
            state, why, failure = retry_outcome(job, reason, self.max_attempts)
            return self._move(conn, job, state, why, at, not_before=at + delay_seconds, failure=failure)

    def worker_died(self, job_id: str, reason: str, *, now: float | None = None) -> Job:
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._running(conn, job_id)
            state, why, failure = died_outcome(job, reason, self.max_attempts)
            return self._move(conn, job, state, why, at, failure=failure)

    def release(self, job_id: str, reason: str, *, now: float | None = None) -> Job:
        at = time.time() if now is None else now
        with self._write() as conn:
            job = self._running(conn, job_id)
            return self._move(conn, job, JobState.QUEUED, reason, at, attempts=max(0, job.attempts - 1))

    def _running(self, conn: psycopg.Connection[Row], job_id: str) -> Job:
        job = self._load(conn, job_id)
        if job.state is not JobState.RUNNING:
            with self._held_lock:
                # Kept in `_held` (a lost job is rare): every later call about it says lease lost.
                lost = job_id in self._held
            if lost:
                raise LeaseLostError(job_id, f"it is {job.state} now")
            raise InvalidTransition(job_id, job.state, JobState.QUEUED)
        self._check_held(job)
        return job

    # -- leases -----------------------------------------------------------------------------------

    def fence(self, job_id: str) -> None:
        """Prove this node still holds the running job's lease, and extend it; else LeaseLostError.

        Called before a result is recorded: a node that was stopped or cut off for longer than
        its lease finds here that the job went back to the queue (or to another node).
        """
        with self._write() as conn:
            job = self._running(conn, job_id)
            row = conn.execute(
                f"UPDATE jobs SET lease_expires = {_DB_NOW} + %s "
                f"WHERE id = %s AND lease_token = %s AND lease_expires > {_DB_NOW} RETURNING id",
                (self.lease_seconds, job_id, job.lease_token),
            ).fetchone()
            if row is None:
                raise LeaseLostError(job_id, "its lease ran out before this node renewed it")

    def renew_leases(self, job_ids: Sequence[str], stats: Mapping[str, Any] | None = None) -> list[str]:
        """Extend the leases of these jobs that this node still holds, and record its heartbeat.

        Returns the jobs renewed. Only the jobs the daemon is reading now are named: one it lost
        track of (its result could not be recorded) is let go, and its lease runs out. A lease
        that has already run out is not renewed: another node may have read the job's state as
        abandoned, and `reclaim_expired` will give it back to the queue.
        """
        with self._write() as conn:
            rows = conn.execute(
                f"UPDATE jobs SET lease_expires = {_DB_NOW} + %s WHERE state = 'running' "
                f"AND lease_node = %s AND id = ANY(%s) AND lease_expires > {_DB_NOW} "
                "RETURNING id, lease_token",
                (self.lease_seconds, self.node_id, list(job_ids)),
            ).fetchall()
            conn.execute(
                f"UPDATE nodes SET heartbeat_at = {_DB_NOW}, pid = %s, stats = %s WHERE id = %s",
                (os.getpid(), json.dumps(dict(stats or {}), sort_keys=True), self.node_id),
            )
        with self._held_lock:
            return [row["id"] for row in rows if self._held.get(row["id"]) == row["lease_token"]]

    def reclaim_expired(self, *, now: float | None = None) -> list[Job]:
        """Give every running job whose lease ran out back to the queue (any node may do this).

        Not counted as an attempt: a node that died says nothing about the file. Only a file that
        was being read at `max_restarts` such deaths (or daemon crashes) is failed, as
        crashed_daemon, so a file that takes its nodes down cannot loop for ever.
        """
        at = time.time() if now is None else now
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = 'running' AND lease_expires < {_DB_NOW} "
                "ORDER BY seq FOR UPDATE SKIP LOCKED"
            ).fetchall()
            return [self._requeue_crashed(conn, job_from_row(row), LEASE_EXPIRED_REASON, at) for row in rows]

    def recover(self, *, now: float | None = None) -> list[Job]:
        """At start-up, requeue the jobs this node was reading when it last stopped.

        The node's id is kept in its state folder and only one daemon may use that folder, so a
        running job of this node is one its previous life left behind; it need not wait for its
        lease to run out.
        """
        at = time.time() if now is None else now
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = 'running' AND lease_node = %s "
                "ORDER BY seq FOR UPDATE",
                (self.node_id,),
            ).fetchall()
            return [self._requeue_crashed(conn, job_from_row(row), RECOVER_REASON, at) for row in rows]

    def _requeue_crashed(self, conn: psycopg.Connection[Row], job: Job, reason: str, at: float) -> Job:
        row = conn.execute(
            "SELECT count(*) AS crashes FROM transitions WHERE job_id = %s AND from_state = 'running' "
            "AND (reason = %s OR reason = %s)",
            (job.id, RECOVER_REASON, LEASE_EXPIRED_REASON),
        ).fetchone()
        assert row is not None
        attempts = max(0, job.attempts - 1)  # start_next counted one; the worker did not die
        state, why, failure = crash_outcome(int(row["crashes"]) + 1, self.max_restarts, reason)
        return self._move(conn, job, state, why, at, attempts=attempts, failure=failure)

    def nodes(self) -> list[NodeStatus]:
        """Every node that has used this journal, with its last heartbeat and running jobs."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT n.id, n.name, n.pid, n.started_at, n.heartbeat_at, {_DB_NOW} - n.heartbeat_at "
                "AS since, n.stats, (SELECT count(*) FROM jobs j WHERE j.state = 'running' "
                "AND j.lease_node = n.id) AS running FROM nodes n ORDER BY n.name, n.id"
            ).fetchall()
        return [
            NodeStatus(
                id=row["id"],
                name=row["name"],
                pid=row["pid"],
                started_at=row["started_at"],
                heartbeat_at=row["heartbeat_at"],
                seconds_since_heartbeat=max(0.0, float(row["since"])),
                running=int(row["running"]),
                stats=dict(row["stats"]),
            )
            for row in rows
        ]

    # -- reading ----------------------------------------------------------------------------------

    def latest_seq(self) -> int:
        with self._read() as conn:
            row = conn.execute("SELECT coalesce(max(seq), 0) AS seq FROM transitions").fetchone()
        assert row is not None
        return int(row["seq"])

    def find_by_spool_path(self, spool_path: str) -> Job | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE spool_path = %s ORDER BY seq DESC LIMIT 1",
                (path_value(spool_path),),
            ).fetchone()
        return None if row is None else job_from_row(row)

    def find_done_by_sha256(self, sha256: str) -> Job | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE sha256 = %s AND state IN ('done', 'review') "
                "AND duplicate_of IS NULL ORDER BY updated_at DESC, seq DESC LIMIT 1",
                (sha256,),
            ).fetchone()
        return None if row is None else job_from_row(row)

    def jobs(self, state: JobState | None = None, limit: int = 100, offset: int = 0) -> list[Job]:
        _check_page(limit, offset)
        where, args = ("", ()) if state is None else ("WHERE state = %s", (state.value,))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs {where} ORDER BY created_at DESC, seq DESC "
                "LIMIT %s OFFSET %s",
                (*args, limit, offset),
            ).fetchall()
        return [job_from_row(row) for row in rows]

    def counts(self) -> dict[JobState, int]:
        with self._read() as conn:
            rows = conn.execute("SELECT state, count(*) AS n FROM jobs GROUP BY state").fetchall()
        found = {JobState(row["state"]): int(row["n"]) for row in rows}
        return {state: found.get(state, 0) for state in JobState}

    def transitions(
        self, job_id: str | None = None, after_seq: int = 0, limit: int = 1000
    ) -> list[Transition]:
        _check_page(limit)
        where, args = ("", ()) if job_id is None else ("AND job_id = %s", (job_id,))
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, job_id, from_state, to_state, reason, at FROM transitions "
                f"WHERE seq > %s {where} ORDER BY seq LIMIT %s",
                (after_seq, *args, limit),
            ).fetchall()
        return [transition_from_row(row) for row in rows]

    def prune(self, older_than_seconds: float, now: float | None = None) -> list[Job]:
        """Delete finished jobs (done, failed) last changed before the cut-off; the audit chain stays."""
        cutoff = (time.time() if now is None else now) - older_than_seconds
        with self._write() as conn:
            rows = conn.execute(
                "DELETE FROM jobs WHERE state IN ('done', 'failed') AND updated_at < %s "
                f"RETURNING {_JOB_COLUMNS}",
                (cutoff,),
            ).fetchall()
            # Nodes gone as long as that are no longer shown in the cluster's status.
            conn.execute(f"DELETE FROM nodes WHERE heartbeat_at < {_DB_NOW} - %s", (older_than_seconds,))
        return sorted((job_from_row(row) for row in rows), key=lambda job: job.created_at)


__all__ = ["FINISHED_STATES", "LEASE_EXPIRED_REASON", "PostgresJournal"]
