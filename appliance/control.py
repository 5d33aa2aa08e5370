"""The thread-safe face of a running daemon that the control API serves: reads and commands.

Reads (status, jobs, events) go straight to the journal, which serialises its own access.
Commands that change the daemon (pause, drain, reprocess, reload, resolve a review) are queued
and run on the daemon's own loop, so the loop stays the single owner of its state; the caller
waits for the result with a deadline.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from appliance.journal import Job, JobJournal, JobState, NodeStatus, Transition

T = TypeVar("T")

# Job ids are 32 hex digits (uuid4); people copy the 8 that `jobs` and `review list` print.
JOB_ID_LENGTH = 32
MIN_PREFIX = 4
_HEX = frozenset("0123456789abcdef")
_SHOWN_CANDIDATES = 10


class ControlError(Exception):
    """A request the daemon refuses; `code` maps to a gRPC status code."""

    code = "INTERNAL"


class NotFoundError(ControlError):
    """The job, review or file asked for does not exist."""

    code = "NOT_FOUND"


class InvalidArgumentError(ControlError):
    """The request is malformed (bad id, unknown field or profile)."""

    code = "INVALID_ARGUMENT"


class FailedPreconditionError(ControlError):
    """The request is valid but not now (the job is still running, the original is gone)."""

    code = "FAILED_PRECONDITION"


class UnavailableError(ControlError):
    """The daemon could not answer in time."""

    code = "UNAVAILABLE"


class DaemonState(StrEnum):
    """What the daemon is doing with new work."""

    RUNNING = "running"  # claiming files and starting jobs
    PAUSED = "paused"  # files wait in the hot folders, queued jobs wait; running jobs finish
    DRAINING = "draining"  # like paused, and the daemon stops once running jobs have finished
    STOPPING = "stopping"


@dataclass(frozen=True)
class EngineStatus:
    """One engine and the provider each of its models runs on."""

    name: str
    models: list[dict[str, Any]]  # role, name, file, sha256, provider, fallback_reason


@dataclass(frozen=True)
class SessionServerStatus:
    """The process that holds the ONNX models for every worker (jobs.session_server), as last seen."""

    pid: int | None
    alive: bool
    restarts: int  # times it was started again after it died, since the daemon started
    socket: str
    runners: int
    vlm_copies: int = 0  # copies of the VLM it holds for the workers (jobs.serve_vlm); 0: none


@dataclass(frozen=True)
class Status:
    """Everything `ocr-appliance status` shows."""

    version: str
    uptime_seconds: float
    state: DaemonState
    intake_paused_for_disk: bool
    engines: list[EngineStatus]
    workers: int
    workers_busy: int
    queue: dict[str, int]  # job state -> count
    pages_per_second: dict[str, float]  # "1m", "5m", "15m"
    gpu_memory_used_bytes: int | None  # None on the CPU
    gpu_memory_budget_bytes: int | None
    recent_errors: list[dict[str, Any]]  # {"at": unix time, "job_id": ..., "message": ...}
    # Sums of the VLM's decoding since start (pages, generated/drafted/accepted tokens, draft_ms,
    # target_ms, fallbacks); empty while no page went to the VLM.
    vlm_decoding: dict[str, float] = field(default_factory=dict)
    # Why the VLM is left out of every attempt until restart (vlm_breaker); None while it is not.
    vlm_disabled: str | None = None
    # The cluster sharing a PostgreSQL journal, and which of its nodes answered; empty on SQLite.
    nodes: list[NodeStatus] = field(default_factory=list)
    node_id: str | None = None
    # The workers' shared session server; None while each worker opens its own sessions.
    session_server: SessionServerStatus | None = None


@dataclass(frozen=True)
class JobDetail:
    """One job with its history, route and per-page timings."""

    job: Job
    transitions: list[Transition]
    route: str | None
    reasons: list[str]
    page_timings_ms: list[dict[str, float]] = field(default_factory=list)


@dataclass(frozen=True)
class ReviewItem:
    """A document waiting for a person."""

    job: Job
    folder: str
    reasons: list[str]
    fields: dict[str, Any]


class Controlled(Protocol):
    """What Control needs of a running daemon (appliance.daemon.Daemon has it); control never imports it."""

    @property
    def journal(self) -> JobJournal: ...

    def snapshot_status(self) -> Status: ...

    def metrics(self) -> dict[str, float]: ...

    def review_items(self) -> list[ReviewItem]: ...

    def call_soon(self, function: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None: ...

    # Commands: Control runs them on the daemon's loop through call_soon.
    def pause(self) -> DaemonState: ...

    def resume(self) -> DaemonState: ...

    def drain(self) -> DaemonState: ...

    def reload_with_message(self) -> tuple[bool, str]: ...

    def reprocess(
        self, job_id: str | None = None, sha256: str | None = None, profile: str | None = None
    ) -> Job: ...

    def resolve_review(self, job_id: str, fields: dict[str, str], text: str | None = None) -> Job: ...


class Control:
    """What the API may ask of a running daemon."""

    def __init__(self, daemon: Controlled, command_timeout: float = 30.0) -> None:
        self._daemon = daemon
        self._timeout = command_timeout

    # -- reads ----------------------------------------------------------------------------------

    def status(self) -> Status:
        return self._daemon.snapshot_status()

    def list_jobs(
        self,
        state: JobState | None = None,
        folder: str | None = None,
        since: float | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Job]:
        """Jobs newest first, filtered by state, hot folder (its configured path) and creation time."""
        if limit < 1 or limit > 1000 or offset < 0:
            raise InvalidArgumentError("limit must be 1..1000 and offset >= 0")
        journal = self._daemon.journal
        if folder is None and since is None:
            return journal.jobs(state, limit=limit, offset=offset)
        matched: list[Job] = []
        skipped = 0
        page = 0
        while len(matched) < limit:
            batch = journal.jobs(state, limit=500, offset=page * 500)
            if not batch:
                break
            for job in batch:
                if (folder is None or job.source_folder == folder) and (
                    since is None or job.created_at >= since
                ):
                    if skipped < offset:
                        skipped += 1
                    elif len(matched) < limit:
                        matched.append(job)
            page += 1
        return matched

    def resolve_job_id(self, job_id: str) -> str:
        """The full id of the one job whose id starts with `job_id` (at least 4 hex digits).

        NotFoundError when no job matches; InvalidArgumentError, listing the candidates, when
        several do, or when the prefix is too short to mean anything.
        """
        text = job_id.strip().lower()
        if not set(text) <= _HEX or len(text) > JOB_ID_LENGTH:
            return job_id  # text no id starts with: the lookup says NOT_FOUND
        if len(text) == JOB_ID_LENGTH:
            return text
        if len(text) < MIN_PREFIX:
            raise InvalidArgumentError(
                f"{job_id!r} is too short: give the job id or its first {MIN_PREFIX} or more digits"
            )
        matches = self._jobs_with_prefix(text)
        if not matches:
            raise NotFoundError(f"no job id starts with {text!r}; list jobs with `ocr-appliance jobs`")
        if len(matches) > 1:
            shown = "; ".join(
                f"{job.id} ({job.name}, {job.state.value})" for job in matches[:_SHOWN_CANDIDATES]
            )
            more = len(matches) - _SHOWN_CANDIDATES
            raise InvalidArgumentError(
                f"{len(matches)} jobs start with {text!r}, give more digits: {shown}"
                + (f"; and {more} more" if more > 0 else "")
            )
        return matches[0].id

    def _jobs_with_prefix(self, prefix: str) -> list[Job]:
        # The journal has no prefix query; a page at a time keeps its lock short. Only ids shorter
        # than 32 digits come here, so a script that passes full ids never pays for the scan.
        journal = self._daemon.journal
        matches: list[Job] = []
        offset = 0
        while batch := journal.jobs(limit=1000, offset=offset):
            matches.extend(job for job in batch if job.id.startswith(prefix))
            offset += len(batch)
        return matches

    def get_job(self, job_id: str) -> JobDetail:
        job_id = self.resolve_job_id(job_id)
        job = self._daemon.journal.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}; list jobs with `ocr-appliance jobs`")
        transitions = self._daemon.journal.transitions(job_id)
        route, reasons, timings = _result_summary(job)
        return JobDetail(job, transitions, route, reasons, timings)

    def events(self, after_seq: int = 0, wait_seconds: float = 0.0, limit: int = 1000) -> list[Transition]:
        """Transitions after `after_seq`; waits up to `wait_seconds` for the first one (long poll)."""
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            found = self._daemon.journal.transitions(after_seq=after_seq, limit=limit)
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.1)

    def latest_seq(self) -> int:
        """Seq of the newest transition, for watchers that want only what happens from now on."""
        return self._daemon.journal.latest_seq()

    def list_review(self) -> list[ReviewItem]:
        return self._daemon.review_items()

    def metrics(self) -> dict[str, float]:
        return self._daemon.metrics()

    # -- commands (run on the daemon's loop) ----------------------------------------------------

    def pause(self) -> DaemonState:
        return self._call(self._daemon.pause)

    def resume(self) -> DaemonState:
        return self._call(self._daemon.resume)

    def drain(self) -> DaemonState:
        return self._call(self._daemon.drain)

    def reload(self) -> tuple[bool, str]:
        return self._call(self._daemon.reload_with_message)

    def reprocess(
        self, job_id: str | None = None, sha256: str | None = None, profile: str | None = None
    ) -> Job:
        if (job_id is None) == (sha256 is None):
            raise InvalidArgumentError("give exactly one of a job id or a sha256")
        if job_id is not None:
            job_id = self.resolve_job_id(job_id)
        return self._call(lambda: self._daemon.reprocess(job_id=job_id, sha256=sha256, profile=profile))

    def resolve_review(self, job_id: str, fields: dict[str, str], text: str | None = None) -> Job:
        job_id = self.resolve_job_id(job_id)
        return self._call(lambda: self._daemon.resolve_review(job_id, fields, text))

    def _call(self, function: Callable[[], T]) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._daemon.call_soon(function, future)
        try:
            return future.result(timeout=self._timeout)
        except concurrent.futures.TimeoutError:
            raise UnavailableError(
                "the daemon did not answer in time; it may be busy starting a worker"
            ) from None


def _result_summary(job: Job) -> tuple[str | None, list[str], list[dict[str, float]]]:
    """Route, reasons and per-page timings from the job's JSON result, where there is one."""
    path = job.outputs.get("json")
    if not path:
        return (job.state.value if job.state in (JobState.FAILED,) else None), [job.reason or ""], []
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, [], []
    routing = result.get("routing") or {}
    timings = [page.get("timings_ms", {}) for page in result.get("pages", [])]
    return routing.get("route"), list(routing.get("reasons", [])), timings
