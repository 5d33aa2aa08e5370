"""Engine worker subprocesses: a crash, OOM kill or hang in native code costs a worker, not the daemon.

Each worker loads the engine once and then reads the jobs sent over a pipe, as many at once as
it said it takes when it was ready (`jobs.per_worker`: one thread a job, all sharing the engine);
it writes the result files itself (atomically) so a Document never crosses the pipe, and answers
with a small outcome per job. The daemon notices a dead or overdue worker, kills it, records why
in the journal and starts a fresh one.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from appliance.audit import document_record
from appliance.config import ProfileConfig, RasterizeConfig, RepairConfig
from appliance.engines.base import Engine, parallel_reads
from appliance.errors import DocumentError, EngineUnavailableError, FailureReason, ModelError
from appliance.outputs.atomic import write_atomic
from appliance.outputs.writer import write_outputs
from appliance.parent_death import die_with_parent
from appliance.pipeline.cascade import decoding_totals, gpu_memory_peak
from appliance.pipeline.read_job import JobFile, JobReader, ReadOptions
from appliance.review import review_folder, write_review_extras
from appliance.routing import Route

log = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]

# "spawn", not "fork": the daemon has threads (watchdog observers) and onnxruntime thread pools,
# and forking a threaded process can deadlock the child on a lock some other thread held.
_CONTEXT = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class JobRequest:
    """What a worker needs to read one claimed file."""

    job_id: str
    input_path: str
    source_path: str
    output_dir: str
    stem: str
    formats: tuple[str, ...]
    mode: int = 0o644
    gid: int | None = None
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    review_dir: str | None = None  # None: no routing (every document is done)
    audit_dir: str | None = None
    relative_path: str = ""
    # The reviewers' corrections file; the worker keeps it loaded and re-reads it when it changes.
    site_dictionary_path: str | None = None
    # What the journal knows of the file, so the worker neither hashes nor sniffs it again.
    sha256: str | None = None
    media_type: str | None = None
    # Why the cascade must not call the VLM this time (vlm_breaker: workers were lost to it).
    vlm_skip_reason: str | None = None
    # A shared journal: ask the daemon whether this node still holds the job before writing any
    # result, so a node that was stopped or cut off longer than its lease writes nothing stale.
    fenced: bool = False


@dataclass(frozen=True)
class JobOutcome:
    """What came of one job."""

    job_id: str
    outputs: dict[str, str] = field(default_factory=dict)
    pages: int = 0
    confidence: float | None = None
    failure: FailureReason | None = None
    message: str = ""
    transient: bool = False  # worth retrying later (out of memory)
    interrupted: bool = False  # stopped by a shutdown; the job did not fail
    seconds: float = 0.0
    route: Route = Route.DONE
    reasons: list[str] = field(default_factory=list)
    audit: dict[str, Any] | None = None  # the audit record, built here where the Document is
    decoding: dict[str, float] = field(default_factory=dict)  # VLM decoding sums (cascade.decoding_totals)
    gpu_memory_used_bytes: int | None = None  # the highest the VLM saw after a page (cascade.gpu_memory_peak)


class _DaemonLink:
    """The worker's end of the pipe, shared by its job threads.

    Messages go out one whole message at a time; the answers to "may I publish?" come back on the
    main thread, which alone reads the pipe, and are handed to the job thread that asked.
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._sending = threading.Lock()
        self._answers: dict[str, queue.SimpleQueue[bool]] = {}
        self._closed = False

    def send(self, message: object) -> None:
        with self._sending:
            self._connection.send(message)

    def may_publish(self, job_id: str) -> bool:
        """Ask the daemon whether the job is still this node's (its lease, checked and extended)."""
        answers = self._answers[job_id] = queue.SimpleQueue()
        try:
            if self._closed:
                return False
            self.send(("may_publish", job_id))
            return answers.get()
        finally:
            del self._answers[job_id]

    def answer(self, job_id: str, allowed: bool) -> None:
        answers = self._answers.get(job_id)
        if answers is not None:
            answers.put(allowed)

    def close(self) -> None:
        """The daemon is gone: every question still open is answered no."""
        self._closed = True
        for answers in list(self._answers.values()):
            answers.put(False)


def _read_one(reader: JobReader, request: JobRequest, stop: threading.Event, link: _DaemonLink) -> JobOutcome:
    started = time.monotonic()
    routed = request.review_dir is not None
    options = ReadOptions(
        profile=request.profile,
        repair=request.repair,
        route=routed,
        pdf_images="pdf" in request.formats,
        review_images=routed,
        vlm_skip_reason=request.vlm_skip_reason,
        site_dictionary=Path(request.site_dictionary_path) if request.site_dictionary_path else None,
    )
    job_file = JobFile(Path(request.input_path), request.source_path, request.sha256, request.media_type)
    try:
        with reader.read(
            job_file,
            options,
            should_stop=stop.is_set,
            on_page=lambda _index: link.send(("progress", request.job_id)),
        ) as read:
            document, decision = read.document, read.decision
            if request.fenced and not link.may_publish(request.job_id):
                return JobOutcome(request.job_id, interrupted=True, message="lease lost before writing")
            target = Path(request.output_dir)
            if decision.route is Route.REVIEW and request.review_dir is not None:
                target = review_folder(Path(request.review_dir), request.relative_path, request.job_id)
            written = write_outputs(
                document,
                target,
                request.stem,
                request.formats,
                mode=request.mode,
                gid=request.gid,
                source_path=Path(request.input_path),
                page_images=read.pages.pdf_pages(),
            )
            if decision.route is Route.REVIEW:
                write_review_extras(
                    target, document, decision.reasons, request.job_id, read.pages.review_pngs()
                )
            elif decision.route is Route.AUDIT and request.audit_dir is not None:
                audit_target = Path(request.audit_dir) / Path(request.relative_path).parent
                for path in written.values():
                    write_atomic(audit_target / path.name, path.read_bytes(), request.mode)
        record = document_record(
            document,
            written,
            route=decision.route,
            reasons=decision.reasons,
            ruleset_version=document.repairs.ruleset_version if document.repairs else None,
            extra={"job_id": request.job_id},
        )
    except InterruptedError:
        return JobOutcome(request.job_id, interrupted=True, message="stopped by shutdown")
    except DocumentError as error:
        return JobOutcome(
            request.job_id, failure=error.reason, message=error.message, transient=error.transient
        )
    except OSError as error:
        return JobOutcome(
            request.job_id, failure=FailureReason.OUTPUT_ERROR, message=f"cannot write results: {error}"
        )
    except Exception as error:  # a bug on one file must cost that file, not the worker
        log.exception("unexpected error on job %s", request.job_id)
        return JobOutcome(
            request.job_id, failure=FailureReason.INTERNAL, message=f"{type(error).__name__}: {error}"
        )
    details = [page.engine_details for page in document.pages]
    return JobOutcome(
        request.job_id,
        outputs={fmt: str(path) for fmt, path in written.items()},
        pages=len(document.pages),
        confidence=document.confidence,
        seconds=time.monotonic() - started,
        route=decision.route,
        reasons=decision.reasons,
        audit=record,
        decoding=decoding_totals(details),
        gpu_memory_used_bytes=gpu_memory_peak(details),
    )


def _run_job(reader: JobReader, request: JobRequest, stop: threading.Event, link: _DaemonLink) -> None:
    outcome = _read_one(reader, request, stop, link)
    try:
        link.send(("outcome", outcome))
    except OSError:
        pass  # the daemon went away; the journal still has the job
    except Exception as error:  # an outcome that cannot be sent (pickled) must not leave the job waiting
        log.exception("job %s: its outcome cannot be sent", request.job_id)
        with contextlib.suppress(OSError):
            failed = JobOutcome(
                request.job_id, failure=FailureReason.INTERNAL, message=f"{type(error).__name__}: {error}"
            )
            link.send(("outcome", failed))


def worker_main(
    connection: Connection,
    engine_factory: EngineFactory,
    rasterize: RasterizeConfig,
    per_worker: int = 0,
    scratch: str | None = None,
) -> None:
    """Body of a worker process: load the engine, then read the jobs the daemon sends until told to stop.

    `scratch`: the folder its temporary files go to (Python's tempfile and TMPDIR), which the
    daemon removes once the process has ended, however it ended.
    """
    die_with_parent()
    if scratch is not None:
        os.environ["TMPDIR"] = scratch
        tempfile.tempdir = scratch
    stop = threading.Event()
    # Ctrl-C reaches the whole process group; only the daemon decides when a worker stops. SIGTERM
    # from the daemon asks for a stop between pages.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        engine = engine_factory()
    except (ModelError, EngineUnavailableError) as error:  # the latter: no session server to load in
        connection.send(("load_failed", str(error)))
        return
    # One reader for the worker's life: its processors and site dictionary are built once.
    reader = JobReader(engine, rasterize)
    capacity = per_worker or parallel_reads(engine)
    link = _DaemonLink(connection)
    jobs = ThreadPoolExecutor(capacity, thread_name_prefix="ocr-job")
    try:
        link.send(("ready", (engine.describe(), capacity)))
        while True:
            # A job sent after a stop was asked for comes back interrupted from its first page.
            message = connection.recv()
            if message is None:
                break
            if isinstance(message, JobRequest):
                jobs.submit(_run_job, reader, message, stop, link)
            else:
                _, job_id, allowed = message  # ("publish", job_id, allowed): a lease answer
                link.answer(job_id, allowed)
    except (EOFError, OSError):
        stop.set()  # the daemon went away; nothing is lost, the journal still has the jobs
    finally:
        link.close()
        jobs.shutdown(wait=True)
        engine.close()


class Worker:
    """The daemon's handle on one worker process and the jobs it is reading."""

    def __init__(
        self, name: str, engine_factory: EngineFactory, rasterize: RasterizeConfig, per_worker: int = 0
    ) -> None:
        self.name = name
        self._factory = engine_factory
        self._rasterize = rasterize
        self._per_worker = per_worker
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._launched_at = 0.0
        # The process's temporary files (a document's review PNGs while it is read, ...): a worker
        # killed mid-document never removes its own, so the daemon removes the folder.
        self._scratch: Path | None = None
        # The jobs it is reading, in the order they were sent: job id -> when it was sent.
        self.jobs: dict[str, float] = {}
        self.capacity = 1  # jobs it reads at once, as the worker said when ready
        self.last_progress = time.monotonic()
        self.pages_done = 0
        self.description: dict[str, Any] = {}
        self.restart_when_idle = False
        # Answers a fenced job's "may I write its results?" (JobRequest.fenced); the daemon's.
        self.publish_gate: Callable[[str], bool] = lambda job_id: True

    def start(self, timeout: float = 300.0) -> None:
        """Start the process and wait until its engine is loaded; raise ModelError if it cannot load."""
        self.launch()
        self.wait_loaded(timeout)

    def launch(self) -> None:
        """Start the process, which loads its engine; `wait_loaded` waits for it.

        Apart from `start` so that a daemon's workers all load at once: each one's load is mostly
        its own process's work (imports, the models' graphs), which spreads over the machine's
        cores instead of queueing (12 workers on a 16-core GPU box: 28-36 s against 67 s one after
        another; bench/README.md).
        """
        self._remove_scratch()  # a worker that died idle is started again without a kill
        self._scratch = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        parent, child = _CONTEXT.Pipe()
        process = _CONTEXT.Process(
            target=worker_main,
            args=(child, self._factory, self._rasterize, self._per_worker, str(self._scratch)),
            name=self.name,
            daemon=True,
        )
        process.start()
        child.close()
        self._process, self._connection = process, parent
        self.jobs = {}
        self._launched_at = time.monotonic()

    def wait_loaded(self, timeout: float = 300.0) -> None:
        """Wait until the engine launched is loaded, `timeout` seconds from its launch at most.

        Raises ModelError if it cannot load, dies meanwhile or takes longer (it is then killed).
        """
        parent = self._connection
        if parent is None:
            raise RuntimeError(f"{self.name}: wait_loaded() before launch()")
        if not parent.poll(max(0.0, self._launched_at + timeout - time.monotonic())):
            self.kill()
            raise ModelError(f"{self.name}: the engine did not load within {timeout:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            self.kill()
            raise ModelError(f"{self.name}: the worker died while loading the engine") from None
        if kind != "ready":
            self.kill()
            raise ModelError(str(payload))
        self.description, self.capacity = payload

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def busy(self) -> bool:
        return bool(self.jobs)

    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def exit_description(self) -> str:
        code = None if self._process is None else self._process.exitcode
        if code is None:
            return "worker is still running"
        if code < 0:
            return f"worker killed by {signal.Signals(-code).name}"
        return f"worker exited with status {code}"

    def submit(self, request: JobRequest) -> None:
        assert self._connection is not None and len(self.jobs) < self.capacity
        self._connection.send(request)
        now = time.monotonic()
        if not self.jobs:
            self.last_progress = now
        self.jobs[request.job_id] = now

    def poll(self) -> list[JobOutcome]:
        """The outcomes of the jobs that are finished, without waiting."""
        outcomes: list[JobOutcome] = []
        if self._connection is None or not self.jobs:
            return outcomes
        try:
            while self._connection.poll():
                kind, payload = self._connection.recv()
                if kind == "progress":
                    self.last_progress = time.monotonic()
                    self.pages_done += 1
                elif kind == "may_publish":
                    job_id = str(payload)
                    self._connection.send(("publish", job_id, self.publish_gate(job_id)))
                elif kind == "outcome":
                    assert isinstance(payload, JobOutcome)
                    self.jobs.pop(payload.job_id, None)
                    self.last_progress = time.monotonic()
                    outcomes.append(payload)
        except (EOFError, OSError):
            pass  # died mid-job: the caller sees alive() is False
        return outcomes

    def stalled_for(self) -> float:
        """Seconds since this worker last showed progress (a page read), 0 when idle."""
        return time.monotonic() - self.last_progress if self.jobs else 0.0

    def overdue(self, limit_seconds: float) -> list[str]:
        """The jobs it has been reading for longer than `limit_seconds`."""
        now = time.monotonic()
        return [job_id for job_id, sent in self.jobs.items() if now - sent > limit_seconds]

    def replace_factory(
        self, engine_factory: EngineFactory, rasterize: RasterizeConfig, per_worker: int
    ) -> None:
        """Use a new engine from the next (re)start; the daemon restarts the worker once idle."""
        self._factory = engine_factory
        self._rasterize = rasterize
        self._per_worker = per_worker
        self.restart_when_idle = True

    @property
    def connection(self) -> Connection | None:
        """The pipe an outcome arrives on (to wait on several workers at once)."""
        return self._connection

    def request_stop(self) -> None:
        """Ask the worker to stop between pages (its jobs come back as interrupted)."""
        if self._process is not None and self._process.is_alive() and self._process.pid:
            self._process.terminate()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Let an idle worker exit, or kill it if it does not."""
        if self._connection is not None and self._process is not None and self._process.is_alive():
            with contextlib.suppress(OSError):
                self._connection.send(None)
            self._process.join(timeout)
        self.kill()

    def kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        if self._connection is not None:
            self._connection.close()
        self._connection = None
        self.jobs = {}
        if self._process is None or not self._process.is_alive():
            self._remove_scratch()

    @property
    def scratch(self) -> Path | None:
        """The folder of the process's temporary files, while it has one."""
        return self._scratch

    def _remove_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
