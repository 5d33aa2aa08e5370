"""A failed job's reason code: stored by the journal in a column of its own and returned typed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from appliance.errors import FailureReason
from appliance.journal import SCHEMA_VERSION, Job, JobState, Journal


def _running(journal: Journal, n: int = 0) -> Job:
    journal.add(
        sha256=f"{n:064x}",
        source_folder="/in",
        relative_path=f"doc{n}.pdf",
        name=f"doc{n}.pdf",
        size=1,
        spool_path=f"/spool/{n}/doc{n}.pdf",
    )
    started = journal.start_next()
    assert started is not None
    return started


def test_each_way_of_failing_records_its_code(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.sqlite3", max_attempts=1, max_restarts=1) as journal:
        corrupt = journal.finish(
            _running(journal, 1).id, JobState.FAILED, "corrupt: no pages", failure=FailureReason.CORRUPT
        )
        gave_up = journal.retry_later(_running(journal, 2).id, "engine_error: out of memory", 0)
        poison = journal.worker_died(_running(journal, 3).id, "killed by SIGKILL")
        unnamed = journal.finish(
            _running(journal, 4).id, JobState.FAILED, "its hot folder is no longer configured"
        )
        _running(journal, 5)
        (crashed,) = journal.recover()
        done = journal.finish(_running(journal, 6).id, JobState.DONE, "read 1 page(s)")
    assert (corrupt.failure, gave_up.failure, poison.failure) == (
        FailureReason.CORRUPT,
        FailureReason.GAVE_UP,
        FailureReason.POISON,
    )
    assert (unnamed.failure, crashed.failure, done.failure) == (
        FailureReason.INTERNAL,
        FailureReason.CRASHED_DAEMON,
        None,
    )
    # Kept in the file, not only in the returned object.
    with Journal(tmp_path / "journal.sqlite3") as journal:
        assert journal.get(gave_up.id) == gave_up


def test_a_code_is_refused_for_a_job_that_did_not_fail(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.sqlite3") as journal:
        job = _running(journal)
        with pytest.raises(ValueError, match="failed job only"):
            journal.finish(job.id, JobState.DONE, "read", failure=FailureReason.CORRUPT)
        assert journal.get(job.id).state is JobState.RUNNING  # type: ignore[union-attr]


def test_jobs_failed_under_the_previous_schema_get_the_code_their_reason_starts_with(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    reasons = {
        "a": "poison: killed its worker 3 times (killed by SIGKILL)",
        "b": "gave up after 3 attempts: engine_error: out of memory",
        "c": "encrypted: the PDF needs a password",
        "d": "crashed_daemon: it was being read at each of 10 daemon crashes",
        "e": "its hot folder is no longer configured",
        "f": "Poison: not a code the daemon ever wrote",
    }
    with Journal(path) as journal:
        ids = {key: _running(journal, n).id for n, key in enumerate(reasons)}
        done = _running(journal, len(reasons)).id
        for key, reason in reasons.items():
            journal.finish(ids[key], JobState.FAILED, reason)
        journal.finish(done, JobState.DONE, "read 1 page(s)")
    # Back to what a journal of schema version 2 held: no failure column (nor the later media type).
    with sqlite3.connect(path) as raw:
        raw.execute("ALTER TABLE jobs DROP COLUMN media_type")
        raw.execute("ALTER TABLE jobs DROP COLUMN failure")
        raw.execute("PRAGMA user_version = 2")
    raw.close()
    with Journal(path) as journal:
        codes = {key: journal.get(job_id).failure for key, job_id in ids.items()}  # type: ignore[union-attr]
        assert journal.get(done).failure is None  # type: ignore[union-attr]
    assert codes == {
        "a": FailureReason.POISON,
        "b": FailureReason.GAVE_UP,
        "c": FailureReason.ENCRYPTED,
        "d": FailureReason.CRASHED_DAEMON,
        "e": FailureReason.INTERNAL,
        "f": FailureReason.INTERNAL,
    }
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()
