"""Workers reading several jobs at once (`jobs.per_worker`): real worker processes, journal and files.

Each test holds jobs in flight with gate files (tests/fakes/engines.GatedFaultEngine), so what it
checks is a state the daemon reaches, whatever the machine's speed.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import time
from pathlib import Path

import pytest

from appliance import workers
from appliance.config import RasterizeConfig
from appliance.errors import DocumentError, FailureReason
from appliance.journal import Job, JobState
from appliance.pipeline.page_images import REVIEW_MEMORY_BYTES
from appliance.workers import JobRequest
from tests.fakes.engines import GatedFaultEngine, hanging_engine
from tests.polling import DaemonThread, png_bytes, wait_for
from tests.test_daemon import _config


def _engine(root: Path, fault: str, parallel_reads: int = 1) -> functools.partial[GatedFaultEngine]:
    gates = (str(root / "white"), str(root / "blue"))
    return functools.partial(GatedFaultEngine, "INVOICE 42", *gates, fault, parallel_reads)


def _job(running: DaemonThread, name: str) -> Job:
    return next(job for job in running.daemon.journal.jobs(limit=1000) if job.name == name)


def _running_names(running: DaemonThread) -> set[str]:
    return {job.name for job in running.daemon.journal.jobs(JobState.RUNNING)}


def _reasons(running: DaemonThread, name: str) -> list[str]:
    return [t.reason for t in running.daemon.journal.transitions(_job(running, name).id)]


def test_a_worker_reads_as_many_jobs_at_once_as_it_is_given(tmp_path: Path) -> None:
    config = _config(tmp_path, jobs={"per_worker": 3})
    with DaemonThread(config, _engine(tmp_path, "abort")) as running:
        inbox = config.hot_folders[0].path
        names = ("a.png", "b.png", "c.png", "d.png")
        for index, name in enumerate(names):
            (inbox / name).write_bytes(png_bytes(size=(320, 200 + index)))  # four different files

        def three_read_one_waits() -> bool:  # one worker, three jobs in flight, the fourth queued
            queued = running.daemon.journal.jobs(JobState.QUEUED)
            return len(_running_names(running)) == 3 and len(queued) == 1

        assert wait_for(three_read_one_waits)
        assert running.daemon.snapshot_status().workers_busy == 1
        (tmp_path / "white").touch()
        assert wait_for(lambda: len(running.daemon.journal.jobs(JobState.DONE)) == 4)
        assert all(_job(running, name).attempts == 1 for name in names)


@pytest.mark.parametrize("parallel_reads", [1, 2])
def test_by_default_a_worker_reads_as_many_jobs_at_once_as_its_engine_reads_well(
    tmp_path: Path, parallel_reads: int
) -> None:
    config = _config(tmp_path)  # jobs.per_worker: 0
    with DaemonThread(config, _engine(tmp_path, "abort", parallel_reads)) as running:
        inbox = config.hot_folders[0].path
        for index in range(3):
            (inbox / f"{index}.png").write_bytes(png_bytes(size=(320, 200 + index)))

        def held() -> bool:  # the gate holds every job sent: the rest wait in the queue
            queued = running.daemon.journal.jobs(JobState.QUEUED)
            return len(_running_names(running)) == parallel_reads and len(queued) == 3 - parallel_reads

        assert wait_for(held)
        (tmp_path / "white").touch()
        assert wait_for(lambda: len(running.daemon.journal.jobs(JobState.DONE)) == 3)


def test_a_worker_that_dies_reading_several_jobs_charges_only_the_one_that_kills_it(tmp_path: Path) -> None:
    config = _config(tmp_path, jobs={"per_worker": 2, "max_attempts": 2})
    with DaemonThread(config, _engine(tmp_path, "abort")) as running:
        inbox, failed = config.hot_folders[0].path, config.hot_folders[0].failed_dir
        (inbox / "segv.png").write_bytes(png_bytes(colour="blue"))
        (inbox / "fine.png").write_bytes(png_bytes())
        assert wait_for(lambda: _running_names(running) == {"segv.png", "fine.png"})
        (tmp_path / "blue").touch()  # the worker dies with both in flight
        assert wait_for(lambda: running.daemon.stats.worker_restarts >= 1)
        (tmp_path / "white").touch()
        reason_file = failed / "segv.png.error.json"
        assert wait_for(reason_file.exists, timeout=60)
        reason = json.loads(reason_file.read_text(encoding="utf-8"))
        assert reason["reason"] == "poison"
        assert "SIGABRT" in reason["message"]
        # Its first death, shared with fine.png, was not counted: it died twice more, alone.
        assert reason["attempts"] == 2
        assert wait_for(lambda: running.daemon.stats.worker_restarts == 3)  # counted after the failure
        # The results are written before the journal records the job done: wait for the journal.
        assert wait_for(lambda: _job(running, "fine.png").state is JobState.DONE, timeout=60)
        assert (config.hot_folders[0].output_dir / "fine.png.json").exists()
        assert _job(running, "fine.png").attempts == 1
        assert any(
            "while reading 2 jobs; read again alone" in reason for reason in _reasons(running, "fine.png")
        )


def test_a_job_that_overruns_is_charged_and_the_others_in_flight_are_read_again(tmp_path: Path) -> None:
    # Long enough that fine.png, sent just after hang.png, is not overdue itself when hang.png is.
    config = _config(tmp_path, jobs={"per_worker": 2, "max_attempts": 1, "timeout_seconds": 15.0})
    (tmp_path / "blue").touch()  # blue pages hang as soon as they are read
    with DaemonThread(config, _engine(tmp_path, "hang")) as running:
        inbox, failed = config.hot_folders[0].path, config.hot_folders[0].failed_dir
        (inbox / "hang.png").write_bytes(png_bytes(colour="blue"))
        assert wait_for(lambda: _running_names(running) == {"hang.png"})
        # Sent seconds apart, so a loop held up at the 15 s mark still finds hang.png overdue
        # alone (both overdue together are suspects, read again alone, and nothing is charged).
        time.sleep(5.0)
        (inbox / "fine.png").write_bytes(png_bytes())
        assert wait_for(lambda: _running_names(running) == {"hang.png", "fine.png"})
        reason_file = failed / "hang.png.error.json"
        assert wait_for(reason_file.exists, timeout=60)
        assert "timed out after 15 s" in json.loads(reason_file.read_text(encoding="utf-8"))["message"]
        # fine.png was in flight beside it: given back without an attempt counted, not failed.
        assert wait_for(lambda: any("another job timed out" in r for r in _reasons(running, "fine.png")))
        (tmp_path / "white").touch()
        out = config.hot_folders[0].output_dir
        assert wait_for((out / "fine.png.json").exists, timeout=60)
        assert _job(running, "fine.png").attempts == 1


class _RefusingLink:
    """A daemon link whose pipe cannot take the first outcome (as one that cannot be pickled)."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, message: object) -> None:
        if not self.sent:
            self.sent.append(None)
            raise TypeError("cannot pickle '_thread.lock' object")
        self.sent.append(message)


class _CorruptFileReader:
    def read(self, *_args: object, **_kwargs: object) -> object:
        raise DocumentError(FailureReason.CORRUPT, "not a page")


def test_an_outcome_that_cannot_be_sent_comes_back_as_a_failure_of_its_job() -> None:
    link = _RefusingLink()
    request = JobRequest("job-1", "/spool/x.png", "/in/x.png", "/out", "x", ("json",))
    workers._run_job(_CorruptFileReader(), request, threading.Event(), link)  # type: ignore[arg-type]
    last = link.sent[-1]
    assert isinstance(last, tuple) and last[0] == "outcome"
    outcome = last[1]
    assert isinstance(outcome, workers.JobOutcome) and outcome.job_id == "job-1"
    assert outcome.failure is FailureReason.INTERNAL
    assert "cannot pickle" in outcome.message


def test_a_worker_killed_mid_document_leaves_no_temporary_files_behind(tmp_path: Path) -> None:
    """A document's review pages beyond what it holds in memory wait in the worker's temporary folder
    while it is read; a worker killed then (a timeout, a crash) never removes them itself, so the
    daemon's handle does."""
    worker = workers.Worker("ocr-worker-scratch", hanging_engine, RasterizeConfig())
    worker.start(timeout=120)
    try:
        scratch = worker.scratch
        assert scratch is not None and scratch.is_dir()
        blue = tmp_path / "blue.png"
        # A page of more raw pixels than a document holds in memory, so it is written as PNG.
        side = math.isqrt(REVIEW_MEMORY_BYTES // 3) + 16
        blue.write_bytes(png_bytes("blue", (side, side)))
        review = tmp_path / "review"
        request = JobRequest(
            "job-1", str(blue), str(blue), str(tmp_path / "out"), "blue", ("json",), review_dir=str(review)
        )
        worker.submit(request)
        # The page's review image is kept there while the engine reads (and hangs on) the page.
        assert wait_for(lambda: any(scratch.rglob("*.png")), timeout=60)
    finally:
        worker.kill()
    assert not scratch.exists()
    assert worker.scratch is None
