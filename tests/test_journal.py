"""The job journal on real SQLite files: state machine, ordering, crash recovery, WAL, concurrency."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.journal import (
    RECOVER_REASON,
    SCHEMA_VERSION,
    InvalidTransition,
    Job,
    JobState,
    Journal,
    JournalError,
    UnknownJobError,
)

T0 = 1_000_000.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "journal.sqlite3"


@pytest.fixture
def journal(db: Path) -> Iterator[Journal]:
    with Journal(db) as opened:
        yield opened


def _add(journal: Journal, n: int = 0, *, now: float | None = T0, **overrides: object) -> Job:
    fields: dict[str, object] = {
        "sha256": f"{n:064x}",
        "source_folder": "/srv/in",
        "relative_path": f"scans/doc{n}.pdf",
        "name": f"doc{n}.pdf",
        "size": 1000 + n,
        "spool_path": f"/var/spool/{n}.pdf",
    }
    fields.update(overrides)
    return journal.add(now=now, **fields)  # type: ignore[arg-type]


def _running(journal: Journal, sha256: str = "0" * 64) -> Job:
    job = _add(journal, sha256=sha256)
    started = journal.start_next(now=T0)
    assert started is not None
    assert started.id == job.id
    return started


# --- the file itself ---------------------------------------------------------------------------


def test_creates_parent_directory_and_wal_file(db: Path) -> None:
    journal = Journal(db)
    _add(journal)
    wal = db.with_name(db.name + "-wal")
    assert wal.exists()
    with sqlite3.connect(db) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # Per-connection settings, so only the journal's own connection can show them.
    assert journal._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert journal._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    journal.close()
    journal.close()  # closing twice is harmless


def test_reopening_keeps_everything(db: Path) -> None:
    with Journal(db) as journal:
        job = _add(journal)
        journal.start_next(now=T0)
    with Journal(db) as reopened:
        again = reopened.get(job.id)
        assert again is not None
        assert (again.state, again.attempts) == (JobState.RUNNING, 1)
        assert [t.to_state for t in reopened.transitions()] == [JobState.QUEUED, JobState.RUNNING]


def test_newer_schema_version_is_refused(db: Path) -> None:
    Journal(db).close()
    with sqlite3.connect(db) as other:
        other.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 41}")
    with pytest.raises(JournalError, match=rf"newer appliance.*version {SCHEMA_VERSION + 41}"):
        Journal(db)


def test_other_sqlite_file_is_refused(db: Path) -> None:
    db.parent.mkdir()
    with sqlite3.connect(db) as other:
        other.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(JournalError, match="not a job journal"):
        Journal(db)


def test_garbage_file_is_refused(db: Path) -> None:
    db.parent.mkdir()
    db.write_bytes(b"this is not a database at all, just some text" * 100)
    with pytest.raises(JournalError, match="cannot be opened as a job journal"):
        Journal(db)


def test_max_attempts_must_be_positive(db: Path) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        Journal(db, max_attempts=0)


# --- adding and reading ------------------------------------------------------------------------


def test_add_records_a_queued_job(journal: Journal) -> None:
    job = _add(journal, 7, profile="invoices", priority=5)
    assert len(job.id) == 32
    int(job.id, 16)
    assert job.state is JobState.QUEUED
    assert (job.sha256, job.source_folder, job.relative_path, job.name) == (
        f"{7:064x}",
        "/srv/in",
        "scans/doc7.pdf",
        "doc7.pdf",
    )
    assert (job.size, job.spool_path, job.profile, job.priority) == (1007, "/var/spool/7.pdf", "invoices", 5)
    assert (job.attempts, job.reason, job.outputs, job.duplicate_of) == (0, "claimed", {}, None)
    assert job.created_at == job.updated_at == job.not_before == T0
    assert journal.get(job.id) == job
    assert journal.get("0" * 32) is None
    (transition,) = journal.transitions(job.id)
    assert (transition.from_state, transition.to_state, transition.reason, transition.at) == (
        None,
        JobState.QUEUED,
        "claimed",
        T0,
    )


def test_add_uses_the_clock_by_default(journal: Journal) -> None:
    job = _add(journal, now=None, reason="claimed by watcher")
    assert job.created_at > T0
    assert job.reason == "claimed by watcher"


def test_jobs_newest_first_filtered_and_paged(journal: Journal) -> None:
    added = [_add(journal, n, now=T0 + n) for n in range(5)]
    journal.start_next(now=T0 + 10)  # takes added[0]
    assert [job.id for job in journal.jobs()] == [job.id for job in reversed(added)]
    assert [job.id for job in journal.jobs(JobState.QUEUED)] == [job.id for job in reversed(added[1:])]
    assert [job.id for job in journal.jobs(JobState.RUNNING)] == [added[0].id]
    assert journal.jobs(JobState.DONE) == []
    assert [job.id for job in journal.jobs(limit=2, offset=1)] == [added[3].id, added[2].id]
    with pytest.raises(ValueError, match="negative"):
        journal.jobs(limit=-1)


def test_counts_include_every_state(journal: Journal) -> None:
    assert journal.counts() == dict.fromkeys(JobState, 0)
    _add(journal, 1)
    _add(journal, 2)
    started = journal.start_next(now=T0)
    assert started is not None
    journal.finish(started.id, JobState.REVIEW, "low confidence")
    assert journal.counts() == {
        JobState.QUEUED: 1,
        JobState.RUNNING: 0,
        JobState.DONE: 0,
        JobState.REVIEW: 1,
        JobState.FAILED: 0,
    }


# --- the state machine -------------------------------------------------------------------------


@pytest.mark.parametrize("state", [JobState.DONE, JobState.REVIEW, JobState.FAILED])
def test_running_job_finishes(journal: Journal, state: JobState) -> None:
    job = _running(journal)
    outputs = {"json": "/out/doc0.json", "txt": "/out/doc0.txt"}
    finished = journal.finish(job.id, state, "read", outputs=outputs, now=T0 + 5)
    assert (finished.state, finished.reason, finished.outputs) == (state, "read", outputs)
    assert (finished.attempts, finished.updated_at, finished.created_at) == (1, T0 + 5, T0)
    assert journal.get(job.id) == finished
    last = journal.transitions(job.id)[-1]
    assert (last.from_state, last.to_state, last.reason) == (JobState.RUNNING, state, "read")


@pytest.mark.parametrize("state", [JobState.DONE, JobState.FAILED])
def test_queued_job_may_finish_without_running(journal: Journal, state: JobState) -> None:
    original = _running(journal, sha256="a" * 64)
    journal.finish(original.id, JobState.DONE, "read", outputs={"json": "/out/a.json"})
    duplicate = _add(journal, 1, sha256="a" * 64)
    finished = journal.finish(
        duplicate.id, state, "duplicate", outputs={"json": "/out/b.json"}, duplicate_of=original.id
    )
    assert (finished.state, finished.attempts, finished.duplicate_of) == (state, 0, original.id)
    last = journal.transitions(duplicate.id)[-1]
    assert (last.from_state, last.to_state) == (JobState.QUEUED, state)


def test_queued_job_cannot_go_to_review(journal: Journal) -> None:
    job = _add(journal)
    with pytest.raises(InvalidTransition) as refused:
        journal.finish(job.id, JobState.REVIEW, "nope")
    message = str(refused.value)
    assert job.id in message
    assert "queued" in message
    assert "review" in message
    assert (refused.value.from_state, refused.value.to_state) == (JobState.QUEUED, JobState.REVIEW)


@pytest.mark.parametrize("target", [JobState.QUEUED, JobState.RUNNING])
def test_finish_refuses_non_final_targets(journal: Journal, target: JobState) -> None:
    job = _running(journal)
    with pytest.raises(InvalidTransition, match=f"from running to {target}"):
        journal.finish(job.id, target, "nope")


def test_review_is_resolved_to_done_or_failed_only(journal: Journal) -> None:
    job = _running(journal)
    journal.finish(job.id, JobState.REVIEW, "low confidence")
    with pytest.raises(InvalidTransition, match="cannot go from review to review"):
        journal.finish(job.id, JobState.REVIEW, "again")
    with pytest.raises(InvalidTransition, match="from review to queued"):
        journal.retry_later(job.id, "again", 1)
    resolved = journal.finish(job.id, JobState.DONE, "corrected by a reviewer", {"json": "/out/x.json"})
    assert resolved.state is JobState.DONE
    assert resolved.outputs == {"json": "/out/x.json"}
    with pytest.raises(InvalidTransition):
        journal.finish(job.id, JobState.FAILED, "too late")


@pytest.mark.parametrize("final", [JobState.DONE, JobState.FAILED])
def test_finished_jobs_accept_no_further_change(journal: Journal, final: JobState) -> None:
    job = _running(journal)
    journal.finish(job.id, final, "first")
    before = journal.transitions(job.id)
    for target in (JobState.DONE, JobState.REVIEW, JobState.FAILED):
        with pytest.raises(InvalidTransition, match=f"job {job.id}: cannot go from {final} to {target}"):
            journal.finish(job.id, target, "again")
    with pytest.raises(InvalidTransition, match=f"from {final} to queued"):
        journal.retry_later(job.id, "again", 1)
    with pytest.raises(InvalidTransition, match=f"from {final} to queued"):
        journal.worker_died(job.id, "again")
    assert journal.start_next(now=T0 + 100) is None
    assert journal.transitions(job.id) == before
    assert journal.get(job.id) is not None
    assert journal.get(job.id).state is final  # type: ignore[union-attr]


def test_queued_job_cannot_be_retried_or_die(journal: Journal) -> None:
    job = _add(journal)
    with pytest.raises(InvalidTransition, match="from queued to queued"):
        journal.retry_later(job.id, "oom", 1)
    with pytest.raises(InvalidTransition, match="from queued to queued"):
        journal.worker_died(job.id, "segfault")
    assert len(journal.transitions(job.id)) == 1


def test_unknown_job_is_reported(journal: Journal) -> None:
    calls: list[Callable[[], object]] = [
        lambda: journal.finish("f" * 32, JobState.DONE, "x"),
        lambda: journal.retry_later("f" * 32, "x", 1),
        lambda: journal.worker_died("f" * 32, "x"),
    ]
    for call in calls:
        with pytest.raises(UnknownJobError, match="f" * 32):
            call()
    job = _running(journal)
    with pytest.raises(UnknownJobError):
        journal.finish(job.id, JobState.DONE, "dup", duplicate_of="e" * 32)
    with pytest.raises(ValueError, match="itself"):
        journal.finish(job.id, JobState.DONE, "dup", duplicate_of=job.id)
    assert journal.get(job.id).state is JobState.RUNNING  # type: ignore[union-attr]


# --- scheduling --------------------------------------------------------------------------------


def test_start_next_takes_priority_then_age(journal: Journal) -> None:
    old_low = _add(journal, 1, now=T0, priority=0)
    new_high = _add(journal, 2, now=T0 + 3, priority=9)
    old_high = _add(journal, 3, now=T0 + 1, priority=9)
    middle = _add(journal, 4, now=T0 + 2, priority=5)
    # Same created_at as old_low: insertion order breaks the tie.
    tie_low = _add(journal, 5, now=T0, priority=0)
    order = [journal.start_next(now=T0 + 10) for _ in range(5)]
    assert [job.id for job in order if job] == [old_high.id, new_high.id, middle.id, old_low.id, tie_low.id]
    assert all(job is not None and job.state is JobState.RUNNING for job in order)
    assert journal.start_next(now=T0 + 10) is None


def test_start_next_on_empty_journal(journal: Journal) -> None:
    assert journal.start_next() is None


def test_retry_later_honours_not_before(journal: Journal) -> None:
    job = _running(journal)
    later = _add(journal, 1, now=T0 + 1)
    requeued = journal.retry_later(job.id, "engine out of memory", 30, now=T0 + 2)
    assert (requeued.state, requeued.not_before, requeued.reason) == (
        JobState.QUEUED,
        T0 + 32,
        "engine out of memory",
    )
    # The older job waits out its backoff; the younger one goes first.
    second = journal.start_next(now=T0 + 31.9)
    assert second is not None
    assert second.id == later.id
    assert journal.start_next(now=T0 + 31.9) is None
    again = journal.start_next(now=T0 + 32)
    assert again is not None
    assert (again.id, again.attempts) == (job.id, 2)


def test_retry_later_refuses_a_bad_delay(journal: Journal) -> None:
    job = _running(journal)
    for delay in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="delay_seconds"):
            journal.retry_later(job.id, "oom", delay)


def test_attempts_count_each_start(journal: Journal) -> None:
    job = _add(journal)
    for attempt in (1, 2, 3):
        started = journal.start_next(now=T0 + attempt)
        assert started is not None
        assert started.attempts == attempt
        if attempt < 3:
            journal.retry_later(job.id, "oom", 0, now=T0 + attempt)
    finished = journal.finish(job.id, JobState.DONE, "read")
    assert finished.attempts == 3


def test_retry_later_gives_up_after_max_attempts(db: Path) -> None:
    with Journal(db, max_attempts=2) as journal:
        job = _add(journal)
        journal.start_next(now=T0)
        assert journal.retry_later(job.id, "oom", 0, now=T0).state is JobState.QUEUED
        journal.start_next(now=T0)
        failed = journal.retry_later(job.id, "CUDA out of memory", 5, now=T0)
        assert failed.state is JobState.FAILED
        assert failed.reason == "gave up after 2 attempts: CUDA out of memory"
        assert journal.transitions(job.id)[-1].reason == failed.reason
        assert journal.start_next(now=T0 + 100) is None


def test_poison_after_max_worker_deaths(journal: Journal) -> None:
    job = _add(journal)
    for death in (1, 2):
        journal.start_next(now=T0)
        requeued = journal.worker_died(job.id, "worker exited with SIGSEGV")
        assert (requeued.state, requeued.attempts, requeued.reason) == (
            JobState.QUEUED,
            death,
            "worker exited with SIGSEGV",
        )
    journal.start_next(now=T0)
    poisoned = journal.worker_died(job.id, "worker exited with SIGSEGV")
    assert poisoned.state is JobState.FAILED
    assert poisoned.attempts == 3
    assert poisoned.reason == "poison: killed its worker 3 times (worker exited with SIGSEGV)"
    assert journal.start_next(now=T0 + 100) is None


# --- crashes -----------------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from appliance.journal import Journal

    journal = Journal(Path(sys.argv[1]))
    job = journal.start_next()
    print(job.id, job.attempts, flush=True)
    time.sleep(60)
    """
)


def _start_then_get_killed(db: Path) -> tuple[str, int]:
    """A real daemon-like process starts a job and is SIGKILLed while it is running."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(db)], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert child.stdout is not None
        job_id, attempts = child.stdout.readline().split()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return job_id, int(attempts)


def test_recover_after_sigkill_requeues_without_using_an_attempt(db: Path) -> None:
    """A daemon killed while a good file runs is not the file's fault: it never turns poison this way."""
    with Journal(db) as journal:
        job = _add(journal, now=None)
        bystander = _add(journal, 1, now=None, priority=-1)
    for _ in range(4):
        job_id, attempts = _start_then_get_killed(db)
        assert (job_id, attempts) == (job.id, 1)
        with Journal(db) as journal:
            # The commit the killed process made is there; nothing else it did is.
            assert journal.get(job.id).state is JobState.RUNNING  # type: ignore[union-attr]
            (recovered,) = journal.recover()
            assert recovered.id == job.id
            assert (recovered.state, recovered.attempts, recovered.reason) == (
                JobState.QUEUED,
                0,
                RECOVER_REASON,
            )
            assert journal.get(job.id) == recovered
            assert journal.recover() == []  # nothing left running
            assert journal.get(bystander.id).state is JobState.QUEUED  # type: ignore[union-attr]
    with Journal(db) as journal:
        states = [(t.from_state, t.to_state) for t in journal.transitions(job.id)]
        crash = [(JobState.QUEUED, JobState.RUNNING), (JobState.RUNNING, JobState.QUEUED)]
        assert states == [(None, JobState.QUEUED), *crash * 4]


def test_worker_deaths_still_make_poison_between_daemon_restarts(journal: Journal) -> None:
    job = _add(journal)
    for death in (1, 2):
        journal.start_next(now=T0)
        journal.worker_died(job.id, "worker exited with SIGSEGV", now=T0)
        journal.start_next(now=T0)
        (recovered,) = journal.recover(now=T0)
        assert (recovered.state, recovered.attempts) == (JobState.QUEUED, death)
    journal.start_next(now=T0)
    poisoned = journal.worker_died(job.id, "worker exited with SIGSEGV", now=T0)
    assert poisoned.state is JobState.FAILED
    assert poisoned.reason == "poison: killed its worker 3 times (worker exited with SIGSEGV)"


def test_a_file_running_at_every_daemon_crash_fails_at_the_restart_limit(db: Path) -> None:
    with Journal(db, max_attempts=3, max_restarts=5) as journal:
        _add(journal)
        for restart in range(1, 5):
            journal.start_next(now=T0)
            (recovered,) = journal.recover(now=T0)
            assert (recovered.state, recovered.attempts) == (JobState.QUEUED, 0), restart
        journal.start_next(now=T0)
        (failed,) = journal.recover(now=T0)
    assert failed.state is JobState.FAILED
    assert failed.reason == (
        f"crashed_daemon: it was being read at each of 5 daemon crashes ({RECOVER_REASON})"
    )
    assert failed.attempts == 0
    # A clean stop (release) is never counted as a crash.
    with Journal(db, max_restarts=2) as journal:
        other = _add(journal, 1)
        for _ in range(3):
            journal.start_next(now=T0)
            journal.release(other.id, "daemon stopped while the job was running", now=T0)
        journal.start_next(now=T0)
        (recovered,) = journal.recover(now=T0)
        assert recovered.state is JobState.QUEUED


def test_max_restarts_must_be_positive(db: Path) -> None:
    with pytest.raises(ValueError, match="max_restarts"):
        Journal(db, max_restarts=0)


def test_recover_handles_every_running_job(journal: Journal) -> None:
    first = _running(journal)
    second = _add(journal, 1)
    journal.start_next(now=T0)
    waiting = _add(journal, 2)
    recovered = journal.recover(now=T0 + 1)
    assert [job.id for job in recovered] == [first.id, second.id]
    assert all(job.state is JobState.QUEUED and job.updated_at == T0 + 1 for job in recovered)
    assert journal.get(waiting.id).state is JobState.QUEUED  # type: ignore[union-attr]


def test_failure_inside_a_transaction_leaves_nothing(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _add(journal)
    before = journal.transitions()

    def fail(*_: object, **__: object) -> None:
        raise OSError("disk went away between the update and the transition row")

    monkeypatch.setattr(journal, "_record", fail)
    with pytest.raises(OSError, match="disk went away"):
        journal.start_next(now=T0)
    monkeypatch.undo()
    after = journal.get(job.id)
    assert after is not None
    assert (after.state, after.attempts) == (JobState.QUEUED, 0)
    assert journal.transitions() == before
    # The connection is not left inside the failed transaction.
    started = journal.start_next(now=T0)
    assert started is not None
    assert started.attempts == 1


# --- transitions -------------------------------------------------------------------------------


def test_transitions_are_ordered_with_reasons_and_page_by_seq(journal: Journal) -> None:
    a = _add(journal, 1, reason="claimed from /srv/in")
    b = _add(journal, 2)
    journal.start_next(now=T0)
    journal.finish(a.id, JobState.DONE, "read 3 pages", outputs={"json": "/out/a.json"})
    journal.finish(b.id, JobState.FAILED, "unsupported format")
    every = journal.transitions()
    seqs = [t.seq for t in every]
    assert seqs == sorted(set(seqs))
    assert [(t.job_id, t.reason) for t in every] == [
        (a.id, "claimed from /srv/in"),
        (b.id, "claimed"),
        (a.id, "started"),
        (a.id, "read 3 pages"),
        (b.id, "unsupported format"),
    ]
    # Resuming from the last seq seen: pages join up with nothing lost or repeated.
    paged, after = [], 0
    while page := journal.transitions(after_seq=after, limit=2):
        paged.extend(page)
        after = page[-1].seq
    assert paged == every
    assert journal.transitions(after_seq=every[-1].seq) == []
    assert [t.to_state for t in journal.transitions(b.id)] == [JobState.QUEUED, JobState.FAILED]
    assert journal.transitions(a.id, after_seq=every[2].seq) == [every[3]]


def test_seq_is_never_reused_after_prune(journal: Journal) -> None:
    job = _running(journal)
    journal.finish(job.id, JobState.DONE, "read", now=T0)
    last = journal.transitions()[-1].seq
    journal.prune(60, now=T0 + 3600)
    assert journal.transitions() == []
    fresh = _add(journal, 1)
    assert journal.transitions(fresh.id)[0].seq > last


# --- deduplication -----------------------------------------------------------------------------


def test_find_done_by_sha256_returns_the_latest_original(journal: Journal) -> None:
    sha = "c" * 64

    def finished(n: int, state: JobState, at: float, **kwargs: object) -> Job:
        job = _add(journal, n, sha256=sha, now=at)
        if state is not JobState.QUEUED or kwargs:
            started = journal.start_next(now=at)
            assert started is not None
            assert started.id == job.id
        return journal.finish(job.id, state, "x", now=at, **kwargs)  # type: ignore[arg-type]

    assert journal.find_done_by_sha256(sha) is None
    failed = finished(1, JobState.FAILED, T0)
    assert journal.find_done_by_sha256(sha) is None
    done = finished(2, JobState.DONE, T0 + 1, outputs={"json": "/out/2.json"})
    assert journal.find_done_by_sha256(sha) == journal.get(done.id)
    review = finished(3, JobState.REVIEW, T0 + 2)
    assert journal.find_done_by_sha256(sha) == journal.get(review.id)
    # Later jobs that are failed, duplicates, queued or running never replace the original.
    finished(4, JobState.FAILED, T0 + 3)
    finished(5, JobState.DONE, T0 + 4, duplicate_of=review.id)
    _add(journal, 6, sha256=sha, now=T0 + 5)
    _add(journal, 7, sha256=sha, now=T0 + 5)
    journal.start_next(now=T0 + 5)
    assert journal.find_done_by_sha256(sha) == journal.get(review.id)
    assert journal.find_done_by_sha256("d" * 64) is None
    assert failed.state is JobState.FAILED


# --- pruning -----------------------------------------------------------------------------------


def test_prune_removes_only_old_finished_jobs(journal: Journal) -> None:
    def job_in(n: int, state: JobState, at: float) -> Job:
        job = _add(journal, n, now=at)
        if state is JobState.QUEUED:
            return job
        started = journal.start_next(now=at)
        assert started is not None
        assert started.id == job.id
        if state is JobState.RUNNING:
            return started
        return journal.finish(job.id, state, "x", now=at)

    # Queued jobs last, so start_next above only ever finds the job just added.
    states = [*(state for state in JobState if state is not JobState.QUEUED), JobState.QUEUED]
    slots = [(state, at) for state in states for at in (T0, T0 + 900)]
    made = {(at, state): job_in(n, state, at) for n, (state, at) in enumerate(slots)}
    old = [job for (at, _), job in made.items() if at == T0]
    recent = [job for (at, _), job in made.items() if at > T0]
    pruned = journal.prune(older_than_seconds=600, now=T0 + 1000)
    finished = {JobState.DONE, JobState.FAILED}  # review waits for a person, however long
    assert sorted(job.id for job in pruned) == sorted(job.id for job in old if job.state in finished)
    assert {job.spool_path for job in pruned} == {job.spool_path for job in old if job.state in finished}
    remaining = {job.id for job in journal.jobs()}
    assert remaining == {job.id for job in recent} | {job.id for job in old if job.state not in finished}
    for job in pruned:
        assert journal.get(job.id) is None
        assert journal.transitions(job.id) == []
    for job_id in remaining:
        assert journal.transitions(job_id) != []
    assert journal.prune(older_than_seconds=600, now=T0 + 1000) == []


# --- threads and concurrency -------------------------------------------------------------------


def test_created_on_one_thread_used_on_another(journal: Journal) -> None:
    job = _add(journal)
    seen: list[Job | None] = []
    worker = threading.Thread(target=lambda: seen.append(journal.start_next(now=T0)))
    worker.start()
    worker.join()
    assert seen[0] is not None
    assert seen[0].id == job.id


def test_two_journals_on_two_threads_never_share_a_job(db: Path) -> None:
    with Journal(db) as setup:
        added = {_add(setup, n, now=T0 + n % 7, priority=n % 3).id for n in range(200)}
    barrier = threading.Barrier(2)
    taken: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def drain(slot: int) -> Callable[[], None]:
        def run() -> None:
            try:
                with Journal(db) as mine:
                    barrier.wait()
                    while (job := mine.start_next(now=T0 + 100)) is not None:
                        taken[slot].append(job.id)
            except BaseException as error:
                errors.append(error)

        return run

    threads = [threading.Thread(target=drain(slot)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    both = taken[0] + taken[1]
    assert len(both) == len(set(both)) == 200
    assert set(both) == added
    with Journal(db) as check:
        assert check.counts()[JobState.RUNNING] == 200
        assert all(job.attempts == 1 for job in check.jobs(limit=300))
        starts = [t for t in check.transitions(limit=1000) if t.to_state is JobState.RUNNING]
        assert len(starts) == 200


def test_release_returns_the_attempt_so_shutdowns_never_make_poison(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite3", max_attempts=2) as journal:
        job = journal.add(
            sha256="a" * 64,
            source_folder="/in",
            relative_path="x.png",
            name="x.png",
            size=1,
            spool_path="/s/x.png",
        )
        for _ in range(5):
            started = journal.start_next()
            assert started is not None and started.attempts == 1
            released = journal.release(job.id, "daemon stopped")
            assert released.state is JobState.QUEUED
            assert released.attempts == 0
        with pytest.raises(InvalidTransition):
            journal.release(job.id, "not running")


def test_find_by_spool_path(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite3") as journal:
        job = journal.add(
            sha256="b" * 64,
            source_folder="/in",
            relative_path="y.png",
            name="y.png",
            size=1,
            spool_path="/s/y.png",
        )
        found = journal.find_by_spool_path("/s/y.png")
        assert found is not None and found.id == job.id
        assert journal.find_by_spool_path("/s/other.png") is None


def test_latest_seq_follows_transitions(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite3") as journal:
        assert journal.latest_seq() == 0
        journal.add(
            sha256="c" * 64,
            source_folder="/in",
            relative_path="z.png",
            name="z.png",
            size=1,
            spool_path="/s/z",
        )
        journal.start_next()
        assert journal.latest_seq() == journal.transitions()[-1].seq == 2


def test_start_next_can_be_limited_to_some_hot_folders(journal: Journal) -> None:
    common = {"relative_path": "a.png", "name": "a.png", "size": 1, "spool_path": "/s/a.png"}
    mine = journal.add(sha256="a" * 64, source_folder="/in", **common)  # type: ignore[arg-type]
    theirs = journal.add(sha256="b" * 64, source_folder=b"/\xff".decode(errors="surrogateescape"), **common)  # type: ignore[arg-type]
    assert journal.start_next(sources=[]) is None
    assert journal.start_next(sources=["/nowhere"]) is None
    assert journal.start_next(sources=[theirs.source_folder]).id == theirs.id  # type: ignore[union-attr]
    assert journal.start_next(sources=["/in"]).id == mine.id  # type: ignore[union-attr]


def test_a_version_3_journal_gains_the_media_type_and_keeps_its_jobs(db: Path) -> None:
    with Journal(db) as journal:
        old = journal.add(
            sha256="a" * 64,
            source_folder="/in",
            relative_path="a.pdf",
            name="a.pdf",
            size=1,
            spool_path="/s/a",
        )
    with sqlite3.connect(db) as raw:
        raw.execute("ALTER TABLE jobs DROP COLUMN media_type")
        raw.execute("PRAGMA user_version = 3")
    raw.close()
    with Journal(db) as journal:
        assert journal.get(old.id).media_type is None  # type: ignore[union-attr]
        new = journal.add(
            sha256="b" * 64,
            source_folder="/in",
            relative_path="b.pdf",
            name="b.pdf",
            size=1,
            spool_path="/s/b",
            media_type="application/pdf",
        )
        assert journal.get(new.id).media_type == "application/pdf"  # type: ignore[union-attr]
