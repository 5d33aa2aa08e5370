"""The daemon: hot folders in, the journal in the middle, worker processes reading, results out.

`Daemon` keeps the loop, start and stop, reload, hot-folder intake, and dispatching jobs to the
worker pool; filing results and originals (filing.py), the review desk (review_desk.py) and the
status (status.py) are collaborators it wires together.

One thread owns the journal and every decision; watchdog's observer threads only forward events
into a queue, and engines run in worker subprocesses. Every file goes through the same steps:
seen → settled (size and mtime stable) → complete (format check) → claimed into the spool and
journalled → read by a worker → results written → original archived. A crash at any point leaves
the journal and the spool in a state that the next start resumes from, without losing a file or
reading one twice.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import grp
import json
import logging
import multiprocessing.connection
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver

from appliance.audit import AuditLog
from appliance.config import AppConfig, HotFolderConfig, ProfileConfig, load_config
from appliance.control import (
    DaemonState,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ReviewItem,
    Status,
)
from appliance.errors import ConfigError, FailureReason
from appliance.filing import Filing, reason_path
from appliance.intake.claim import ClaimChangedError, Claimed, claim, orphaned_claims
from appliance.intake.completeness import check_complete
from appliance.intake.filtering import is_candidate
from appliance.intake.lease import WriterActiveError
from appliance.intake.stability import FileStabilityTracker
from appliance.intake.watch import make_observer, reports_writer_closes
from appliance.journal import Job, JobState, Journal
from appliance.names import display, display_all
from appliance.outputs.atomic import write_atomic
from appliance.review import SiteDictionary
from appliance.review_desk import ReviewDesk
from appliance.status import StatusBoard, gpu_memory_budget
from appliance.systemd import Notifier, event
from appliance.vlm_breaker import VlmBreaker
from appliance.workers import EngineFactory, JobOutcome, JobRequest, Worker

log = logging.getLogger(__name__)

_TICK_SECONDS = 0.2
_PRUNE_EVERY_SECONDS = 3600.0
_STOP_GRACE_SECONDS = 30.0
_WORKER_START_SECONDS = 300.0
_REVIEW_CHECK_SECONDS = 2.0
# A file that cannot be claimed (permissions, a full spool, an I/O error) is tried again at later
# rescans, no sooner than this, doubling up to the cap: a lasting fault is not hammered every tick.
_CLAIM_RETRY_SECONDS = 30.0
_CLAIM_RETRY_MAX_SECONDS = 3600.0


class _EventForwarder(FileSystemEventHandler):
    """Forwards watchdog events to the daemon's thread; does no work on the observer's thread."""

    def __init__(
        self,
        folder: HotFolderConfig,
        events: queue.SimpleQueue[tuple[HotFolderConfig, Path]],
        writes: queue.SimpleQueue[tuple[HotFolderConfig, Path, bool]] | None = None,
    ) -> None:
        self._folder = folder
        self._events = events
        self._writes = writes  # (folder, path, closed) for a write or a writer's close, where seen

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            if event.event_type in ("created", "moved"):
                # A folder moved in whole brings files no event will mention: scan it.
                target = getattr(event, "dest_path", "") or event.src_path
                self._events.put((self._folder, Path(str(target))))
            return
        target = getattr(event, "dest_path", "") or event.src_path
        # os.fsdecode: a name that is not UTF-8 must reach intake (as surrogate escapes), not raise here.
        path = Path(os.fsdecode(target))
        if self._writes is not None and event.event_type in ("modified", "closed"):
            self._writes.put((self._folder, path, event.event_type == "closed"))
        self._events.put((self._folder, path))


def _tracker(config: AppConfig) -> FileStabilityTracker:
    # A file marked as being written whose close was never seen settles after the time an
    # incomplete file is reported after: by then it is looked at, written or not.
    return FileStabilityTracker(
        config.intake.settle_seconds, writer_grace_seconds=config.intake.incomplete_timeout_seconds
    )


@dataclass
class _ClaimFailure:
    """A file that could not be claimed: said once per reason, then retried with a growing delay."""

    reason: str
    failures: int
    next_try: float


@dataclass
class _FolderState:
    config: HotFolderConfig
    tracker: FileStabilityTracker
    observer: BaseObserver | None = None
    refused: set[Path] = field(default_factory=set)
    incomplete_reported: dict[Path, tuple[int, int]] = field(default_factory=dict)
    last_check: dict[Path, float] = field(default_factory=dict)
    unclaimable: dict[Path, _ClaimFailure] = field(default_factory=dict)
    writer_open: set[Path] = field(default_factory=set)
    writer_check_noted: bool = False


class Daemon:
    """Runs until `stop` is set; `start()` raises ModelError or ConfigError if it cannot start."""

    def __init__(
        self,
        config: AppConfig,
        engine_factory: EngineFactory,
        *,
        notifier: Notifier | None = None,
        config_path: Path | None = None,
        factory_for: Callable[[AppConfig], EngineFactory] | None = None,
    ) -> None:
        self._config = config
        self._engine_factory = engine_factory
        self._notifier = notifier or Notifier()
        self._config_path = config_path
        self._factory_for = factory_for
        self._next_watchdog = 0.0
        self._stall_logged = False
        self._next_status = 0.0
        self.watchdog_pings = 0
        self.state = DaemonState.RUNNING
        self._commands: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._board = StatusBoard()
        self.stats = self._board.stats
        self.recent_errors = self._board.recent_errors
        self._audit = AuditLog(config.paths.state_dir / "audit.jsonl")
        self._site_dictionary = SiteDictionary(config.paths.state_dir / "site_dictionary.json")
        self._next_review_check = 0.0
        self.last_reload_error = ""
        state_dir = config.paths.state_dir
        self._spool = state_dir / "spool"
        self._journal_path = state_dir / "journal.sqlite3"
        self._journal: Journal | None = None
        self._events: queue.SimpleQueue[tuple[HotFolderConfig, Path]] = queue.SimpleQueue()
        self._writes: queue.SimpleQueue[tuple[HotFolderConfig, Path, bool]] = queue.SimpleQueue()
        self._folders = {folder.path: _FolderState(folder, _tracker(config)) for folder in config.hot_folders}
        self._workers = [
            Worker(f"ocr-worker-{index}", engine_factory, config.rasterize)
            for index in range(config.jobs.workers)
        ]
        self._jobs_by_worker: dict[str, Job] = {}
        # Which attempts may call the VLM, after workers lost to it (kept in memory: after a restart
        # every job may try the VLM again).
        self._vlm_breaker = VlmBreaker()
        self.engine_description: dict[str, Any] = {}
        self.ready = threading.Event()
        self._lock_handle: TextIO | None = None
        # Collaborators, made at start once the journal they share is open.
        self._filing: Filing
        self._review: ReviewDesk

    @property
    def journal(self) -> Journal:
        assert self._journal is not None, "the daemon has not started"
        return self._journal

    # -- start and stop -------------------------------------------------------------------------

    def start(self, notify_ready: bool = True) -> None:
        """Open the journal, resume after a crash, load the engine in the workers, start watching.

        With notify_ready=False the caller sends READY=1 (notify_ready()) once its own parts, the
        control API, are up: systemd reports the unit active at READY=1.
        """
        for folder in self._config.hot_folders:
            for directory in (folder.path, folder.output_dir, folder.archive_dir, folder.failed_dir):
                directory.mkdir(parents=True, exist_ok=True)
        self._spool.mkdir(parents=True, exist_ok=True)
        self._take_instance_lock()
        self._journal = Journal(self._journal_path, max_attempts=self._config.jobs.max_attempts)
        self._filing = Filing(self._config, self._journal, self.recent_errors)
        self._review = ReviewDesk(
            self._journal, self._filing, self._site_dictionary, self.stats, self._append_audit
        )
        for job in self.journal.recover():
            log.warning("job %s (%s) was running when the daemon stopped: %s", job.id, job.name, job.state)
            if job.state is JobState.FAILED:
                self._filing.settle_finished(job)
        self._reconcile_spool()
        for worker in self._workers:
            # Loading models can outlast TimeoutStartSec on a slow disk; ask for more time first.
            self._notifier.extend_timeout(_WORKER_START_SECONDS)
            worker.start(timeout=_WORKER_START_SECONDS)
        self.engine_description = self._workers[0].description
        for state in self._folders.values():
            observer = make_observer(state.config.path, state.config.watch, self._config.intake.poll_seconds)
            observer.schedule(self._forwarder(state.config, observer), str(state.config.path), recursive=True)
            observer.start()
            state.observer = observer
        self._rescan()
        self.ready.set()
        log.info(
            "ready: watching %s with %d worker(s)",
            ", ".join(str(path) for path in self._folders) or "nothing",
            len(self._workers),
            extra=event("started", MODEL_ID=self._model_ids()),
        )
        if notify_ready:
            self.notify_ready()

    def notify_ready(self) -> None:
        """READY=1 to systemd, with the first status line."""
        self._notifier.ready(self.status_line())

    def _take_instance_lock(self) -> None:
        """Refuse to start while another daemon uses the same state folder.

        Recovery treats every running job as abandoned; with two daemons on one journal the second
        would take live jobs away from the first and read them twice.
        """
        lock_path = self._config.paths.state_dir / "daemon.lock"
        handle = lock_path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ConfigError(
                f"another ocr-appliance daemon uses {self._config.paths.state_dir} ({lock_path} is locked)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock_handle = handle

    def _model_ids(self) -> str:
        models = self.engine_description.get("models", [])
        return ",".join(f"{model['name']}@{model['sha256'][:12]}" for model in models if model.get("sha256"))

    def status_line(self) -> str:
        """The short line systemd shows in `systemctl status` (STATUS=)."""
        return self._board.line(
            self.state,
            self.journal.counts(),
            busy=bool(self._jobs_by_worker),
            pages_done=sum(worker.pages_done for worker in self._workers),
        )

    def workers_progressing(self) -> bool:
        """False while any busy worker has shown no progress for the stall limit (a hung engine)."""
        limit = self._config.service.watchdog_stall_seconds
        return all(worker.stalled_for() < limit for worker in self._workers if worker.busy)

    def _heartbeat(self) -> None:
        """Status line and watchdog ping, from the main loop only.

        A ping from a side thread would keep systemd happy while the loop (or an engine) is stuck;
        from here, and only while workers progress, a hang stops the pings and systemd restarts us.
        """
        now = time.monotonic()
        if now >= self._next_status:
            self._notifier.status(self.status_line())
            self._next_status = now + self._config.service.status_interval_seconds
        interval = self._notifier.watchdog_interval
        if interval is None or now < self._next_watchdog:
            return
        if self.workers_progressing():
            self._notifier.watchdog()
            self.watchdog_pings += 1
            self._next_watchdog = now + interval
            self._stall_logged = False
        elif not self._stall_logged:
            # At the first ping withheld: systemd's watchdog fires one interval later (the interval
            # is half of WatchdogSec), and the reason must reach the journal before it does.
            log.error(
                "a worker has shown no progress for %.0f s: watchdog pings withheld",
                self._config.service.watchdog_stall_seconds,
                extra=event("watchdog_stalled"),
            )
            self._stall_logged = True

    def run(self, stop: threading.Event, reload: threading.Event | None = None) -> None:
        """Start (if not started) and work until `stop` is set, then shut down cleanly.

        Setting `reload` (SIGHUP) re-reads the config file; an invalid one is reported and the
        running configuration kept.
        """
        if not self.ready.is_set():
            self.start()
        next_rescan = time.monotonic() + self._config.intake.rescan_seconds
        next_prune = time.monotonic()
        try:
            while not stop.is_set():
                self._drain_events()
                now = time.monotonic()
                if now >= next_rescan:
                    self._rescan()  # safety net for events lost on network mounts or under load
                    next_rescan = now + self._config.intake.rescan_seconds
                if now >= next_prune:
                    self._prune()
                    next_prune = now + _PRUNE_EVERY_SECONDS
                if reload is not None and reload.is_set():
                    reload.clear()
                    self.reload()
                self._run_commands()
                if self.state is DaemonState.RUNNING:
                    self._intake()
                self._collect()
                if self.state is DaemonState.RUNNING:
                    self._dispatch()
                if self.state is DaemonState.DRAINING and not self._jobs_by_worker:
                    log.info("drained: every running job has finished")
                    break
                if now >= self._next_review_check:
                    self._review.check_corrections()
                    self._next_review_check = now + _REVIEW_CHECK_SECONDS
                self._heartbeat()
                self._wait_for_work(stop)
        finally:
            self._shutdown()

    def reload(self) -> bool:
        """Re-read the config file (SIGHUP); keep the running configuration if the new one is invalid.

        Folders, profiles, intake, jobs and output settings apply at once; a changed engine or
        rasterizer restarts each worker when it is idle. The state folder cannot move while running.
        """
        if self._config_path is None:
            log.warning("reload requested, but the daemon was not started from a config file")
            return False
        self._notifier.reloading()
        try:
            new = load_config(self._config_path)
            if new.paths.state_dir != self._config.paths.state_dir:
                raise ConfigError(f"{self._config_path}: paths.state_dir cannot change without a restart")
            if new.outputs.group:
                grp.getgrnam(new.outputs.group)
        except (ConfigError, KeyError) as error:
            message = str(error) if isinstance(error, ConfigError) else f"unknown group {new.outputs.group!r}"
            self.last_reload_error = message
            # `systemctl reload` cannot tell its caller; `ocr-appliance status` shows it here.
            kept = f"reload failed, running configuration kept: {message}"
            self._board.error("", kept)
            log.error(
                "reload failed, keeping the running configuration: %s", message, extra=event("reload_failed")
            )
            self._notifier.ready(self.status_line())
            return False
        old, self._config = self._config, new
        self._apply_folders(old, new)
        self.journal.max_attempts = new.jobs.max_attempts
        self._filing.reconfigure(new)
        logging.getLogger().setLevel(new.logging.level)
        if (new.engine, new.rasterize) != (old.engine, old.rasterize):
            if self._factory_for is None:
                log.warning("engine settings changed; they take effect after a restart")
            else:
                factory = self._factory_for(new)
                for worker in self._workers:
                    worker.replace_factory(factory, new.rasterize)
        while len(self._workers) < new.jobs.workers:
            worker = Worker(
                f"ocr-worker-{len(self._workers)}",
                self._factory_for(new) if self._factory_for else self._engine_factory,
                new.rasterize,
            )
            self._notifier.extend_timeout(_WORKER_START_SECONDS)
            worker.start(timeout=_WORKER_START_SECONDS)
            self._workers.append(worker)
        for worker in self._workers[new.jobs.workers :]:
            worker.restart_when_idle = True  # retired below once idle
        log.info("configuration reloaded from %s", self._config_path, extra=event("reloaded"))
        self._notifier.ready(self.status_line())
        return True

    def _apply_folders(self, old: AppConfig, new: AppConfig) -> None:
        wanted = {folder.path: folder for folder in new.hot_folders}
        for path in list(self._folders):
            if path not in wanted or wanted[path] != self._folders[path].config:
                state = self._folders.pop(path)
                if state.observer is not None:
                    state.observer.stop()
                    state.observer.join(timeout=5)
        for path, folder in wanted.items():
            for directory in (folder.path, folder.output_dir, folder.archive_dir, folder.failed_dir):
                directory.mkdir(parents=True, exist_ok=True)
            if path not in self._folders:
                state = _FolderState(folder, _tracker(new))
                observer = make_observer(folder.path, folder.watch, new.intake.poll_seconds)
                observer.schedule(self._forwarder(folder, observer), str(folder.path), recursive=True)
                observer.start()
                state.observer = observer
                self._folders[path] = state
            else:
                self._folders[path].tracker.settle_seconds = new.intake.settle_seconds
                self._folders[path].tracker.writer_grace_seconds = new.intake.incomplete_timeout_seconds
        self._rescan()

    def _wait_for_work(self, stop: threading.Event) -> None:
        """Sleep one tick, waking as soon as a worker reports, so throughput is not tick-bound."""
        pipes = [
            worker.connection for worker in self._workers if worker.busy and worker.connection is not None
        ]
        if pipes:
            multiprocessing.connection.wait(pipes, timeout=_TICK_SECONDS)
        else:
            stop.wait(_TICK_SECONDS)

    def _shutdown(self) -> None:
        self.state = DaemonState.STOPPING
        self._notifier.stopping()
        for state in self._folders.values():
            if state.observer is not None:
                state.observer.stop()
        busy = [worker for worker in self._workers if worker.busy]
        for worker in busy:
            worker.request_stop()  # the worker stops between pages and reports the job interrupted
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        while any(worker.busy for worker in self._workers) and time.monotonic() < deadline:
            self._collect(restart=False)
            time.sleep(0.05)
        for worker in self._workers:
            if worker.busy:
                job = self._jobs_by_worker.pop(worker.name)
                worker.kill()
                self.journal.release(job.id, "daemon stopped while the job was running")
            worker.shutdown()
        for state in self._folders.values():
            if state.observer is not None:
                state.observer.join(timeout=5)
        self._fail_pending_commands()
        if self._journal is not None:
            self._journal.close()
        if self._lock_handle is not None:
            self._lock_handle.close()  # closing releases the flock
        log.info(
            "stopped: %d done, %d failed, %d duplicate(s) re-issued",
            self.stats.done,
            self.stats.failed,
            self.stats.duplicates,
            extra=event("stopped"),
        )

    # -- intake ---------------------------------------------------------------------------------

    def _rescan(self) -> None:
        for state in self._folders.values():
            state.refused.clear()  # say it again if still refused: the log should show it persists
            for path in sorted(state.config.path.rglob("*")):
                self._events.put((state.config, path))

    def _forwarder(self, folder: HotFolderConfig, observer: BaseObserver) -> _EventForwarder:
        """Events of `folder` to this thread; writes and closes too where the observer reports them."""
        writes = self._writes if reports_writer_closes(observer) else None
        return _EventForwarder(folder, self._events, writes)

    def _drain_writes(self) -> None:
        """Tell the trackers which files a writer changed, and which it closed, in the order seen."""
        while True:
            try:
                folder, path, closed = self._writes.get_nowait()
            except queue.Empty:
                return
            state = self._folders.get(folder.path)
            if state is None or not is_candidate(path, folder.path, folder.ignore)[0]:
                continue
            if closed:
                state.tracker.closed_after_write(path)
            else:
                state.tracker.written(path)

    def _drain_events(self) -> None:
        self._drain_writes()
        while True:
            try:
                folder, path = self._events.get_nowait()
            except queue.Empty:
                return
            try:
                if path.is_dir() and not path.is_symlink():
                    for child in sorted(path.rglob("*")):
                        self._observe(folder, child)
                else:
                    self._observe(folder, path)
            except Exception:  # one path's fault must not stop the daemon
                log.exception("cannot look at %s", path)

    def _observe(self, folder: HotFolderConfig, path: Path) -> None:
        state = self._folders[folder.path]
        ok, reason = is_candidate(path, folder.path, folder.ignore)
        if not ok:
            state.tracker.forget(path)
            if reason and path not in state.refused:
                state.refused.add(path)
                log.warning("refused %s: %s", path, reason)
            return
        state.tracker.observe(path)

    def _disk_is_low(self) -> bool:
        """Whether free space is under the watermark where claims, results or archives would land."""
        limit = self._config.intake.min_free_mb * 1024 * 1024
        places = {self._spool} | {folder.output_dir for folder in self._config.hot_folders}
        low = [place for place in places if shutil.disk_usage(place).free < limit]
        if low and not self.stats.intake_paused:
            log.warning(
                "intake paused: less than %.0f MB free on %s; files wait in the hot folders",
                self._config.intake.min_free_mb,
                ", ".join(map(str, low)),
                extra=event("intake_paused"),
            )
        elif not low and self.stats.intake_paused:
            log.info("intake resumed: disk space is back above the watermark")
        self.stats.intake_paused = bool(low)
        return bool(low)

    def _intake(self) -> None:
        if self._disk_is_low():
            return
        for state in self._folders.values():
            for path in state.tracker.settled():
                try:
                    self._consider(state, path)
                except Exception as error:  # one file's fault must cost that file, not the daemon
                    self._file_fault(state, path, error)

    def _file_fault(self, state: _FolderState, path: Path, error: Exception) -> None:
        """An unexpected error on a file in a hot folder: said, and the file moved to failed/ with it."""
        message = f"{type(error).__name__}: {error}"
        log.error("unexpected error on %s: %s", path, message, exc_info=error)
        self._board.error("", display(f"{path}: {message}"))
        state.tracker.forget(path)
        state.last_check.pop(path, None)
        try:
            if path.is_symlink() or not path.is_file():
                return  # claimed or gone already: the spool and the journal account for it
            self._filing.fail_file(path, state.config, FailureReason.INTERNAL, message)
        except Exception:
            log.exception(
                "cannot move %s to %s either; it stays in the hot folder", path, state.config.failed_dir
            )
            state.refused.add(path)
            return
        self.stats.failed += 1

    def _consider(self, state: _FolderState, path: Path) -> None:
        """A settled file: claim it if complete; otherwise wait, and report it after the timeout."""
        now = time.monotonic()
        if now - state.last_check.get(path, 0.0) < max(self._config.intake.settle_seconds, 0.5):
            return  # checked a moment ago and unchanged since: do not re-read its tail every tick
        failure = state.unclaimable.get(path)
        if failure is not None and now < failure.next_try:
            state.tracker.forget(path)  # backing off; a later rescan (or event) brings it back
            state.last_check.pop(path, None)
            return
        state.last_check[path] = now
        try:
            result = check_complete(path)
        except FileNotFoundError:
            self._forget_candidate(state, path)  # vanished; a later event brings it back if it returns
            return
        except OSError as error:
            # Unreadable (permissions, I/O error on a share): left where it is, said once, shown in
            # the status, and tried again at later rescans in case someone fixes it.
            state.tracker.forget(path)
            state.last_check.pop(path, None)
            self._claim_failed(state, path, error, now, doing="read")
            return
        if not result.complete:
            waited = now - (state.tracker.waiting_since(path) or now)
            if waited >= self._config.intake.incomplete_timeout_seconds:
                self._report_incomplete(state, path, result.reason or "incomplete", result.failure)
            return
        self._claim(state, path)

    def _report_incomplete(
        self, state: _FolderState, path: Path, reason: str, failure: FailureReason = FailureReason.INCOMPLETE
    ) -> None:
        """Write a reason file once per version of the file; the file stays where it is.

        It is not moved: a scanner may still hold it open, and moving it would break the upload.
        If it changes later it goes through settling again and is claimed once complete.
        """
        info = path.stat()
        version = (info.st_size, info.st_mtime_ns)
        if state.incomplete_reported.get(path) == version:
            return
        state.incomplete_reported[path] = version
        relative = path.relative_to(state.config.path)
        log.error(
            "%s is still %s after %.0f s: %s",
            relative,
            failure.value,
            self._config.intake.incomplete_timeout_seconds,
            reason,
        )
        self._filing.write_reason_logged(state.config.failed_dir / relative, relative, failure, reason)

    def _claim(self, state: _FolderState, path: Path) -> None:
        """Claim a complete file; one that cannot be claimed stays, is reported once, and is retried."""
        now = time.monotonic()
        failure = state.unclaimable.get(path)
        try:
            claimed = claim(path, state.config.path, self._spool)
        except WriterActiveError:
            # Still being written (a scanner adding pages): keep tracking it; tried again after the
            # settle time, and at once claimed after the writer closes it.
            if path not in state.writer_open:
                state.writer_open.add(path)
                log.info("%s is still open for writing by another process: waiting", path)
            return
        except ClaimChangedError as error:
            log.warning("%s; it settles again", error)
            state.tracker.forget(path)
            state.last_check.pop(path, None)
            state.tracker.observe(path)  # restarts its settle time
            return
        except FileNotFoundError:
            self._forget_candidate(state, path)
            return  # vanished between the check and the claim: nothing to do
        except OSError as error:
            state.tracker.forget(path)
            state.last_check.pop(path, None)
            self._claim_failed(state, path, error, now)
            return
        self._forget_candidate(state, path)
        if failure is not None:
            log.info("claimed %s after %d failed attempt(s)", path, failure.failures)
        if claimed.writer_check_unavailable and not state.writer_check_noted:
            state.writer_check_noted = True  # once per folder: it holds for every file there
            log.warning(
                "%s: cannot ask the kernel whether a file is still open for writing (%s); claims "
                "there rest on the settle time and the format check",
                state.config.path,
                claimed.writer_check_unavailable,
            )
        relative = Path(claimed.relative_path)
        stale_reason = reason_path(state.config.failed_dir / relative)
        if state.incomplete_reported.pop(path, None) is not None:
            with contextlib.suppress(FileNotFoundError):
                stale_reason.unlink()  # it completed after all
        self.stats.claimed += 1
        self._next_status = 0.0
        try:
            job = self._journal_add(claimed, state.config)
        except Exception:
            # The claim record in the spool lets the next start queue it (an orphan), as after a crash.
            log.exception("claimed %s but cannot journal it; it is queued at the next start", relative)
            return
        log.info(
            "claimed %s as job %s (%d bytes, sha256 %s)",
            relative,
            job.id,
            job.size,
            job.sha256[:12],
            extra=event("job_claimed", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="claim"),
        )
        try:
            if self._filing.reissue_if_duplicate(job):
                self.stats.duplicates += 1
        except Exception:  # the job stays queued and is read like any other
            log.exception("cannot issue the earlier result for %s again; it is read instead", relative)

    def _forget_candidate(self, state: _FolderState, path: Path) -> None:
        state.tracker.forget(path)
        state.last_check.pop(path, None)
        state.writer_open.discard(path)
        state.unclaimable.pop(path, None)

    def _claim_failed(
        self, state: _FolderState, path: Path, error: OSError, now: float, doing: str = "claim"
    ) -> None:
        """Say why once (again only if the reason changes), show it in the status, back off."""
        reason = f"{error.strerror or error}" if error.errno else str(error)
        for gone in [known for known in state.unclaimable if not known.exists()]:
            del state.unclaimable[gone]  # removed by someone: nothing left to report
        earlier = state.unclaimable.get(path)
        failures = 1 if earlier is None else earlier.failures + 1
        delay = min(_CLAIM_RETRY_SECONDS * 2 ** (failures - 1), _CLAIM_RETRY_MAX_SECONDS)
        state.unclaimable[path] = _ClaimFailure(reason, failures, now + delay)
        if earlier is not None and earlier.reason == reason:
            return
        message = f"cannot {doing} {path}: {reason}; it stays in the hot folder and is tried again"
        log.error("%s", message)
        self._board.error("", message)

    def _journal_add(self, claimed: Claimed, folder: HotFolderConfig) -> Job:
        return self.journal.add(
            sha256=claimed.sha256,
            source_folder=claimed.source_folder,
            relative_path=claimed.relative_path,
            name=Path(claimed.relative_path).name,
            size=claimed.size,
            spool_path=str(claimed.spool_path),
            profile=folder.profile,
            priority=self._config.profiles[folder.profile].priority,
        )

    def _reconcile_spool(self) -> None:
        """Queue claimed files the journal never heard of; finish archiving finished jobs' files."""
        known: set[str] = set()
        for job_dir in sorted(self._spool.iterdir()) if self._spool.is_dir() else []:
            try:
                for path in job_dir.iterdir():
                    job = self.journal.find_by_spool_path(str(path))
                    if job is None:
                        continue
                    known.add(str(path))
                    if job.state in (JobState.DONE, JobState.FAILED):
                        self._filing.settle_finished(job)  # a crash came between the journal and the archive
            except Exception:  # one spool folder must not stop every start from here on
                log.exception("cannot reconcile the spool folder %s; left as it is", job_dir)
        try:
            orphans = orphaned_claims(self._spool, known)
        except Exception:
            log.exception("cannot look for orphaned claims in %s", self._spool)
            orphans = []
        for orphan in orphans:
            folder = self._filing.folder_for(orphan.source_folder)
            if folder is None:
                log.error(
                    "spooled file %s came from %s, which is no longer configured; left in the spool",
                    orphan.spool_path,
                    orphan.source_folder,
                )
                continue
            try:
                job = self._journal_add(orphan, folder)
            except Exception:
                log.exception("cannot queue %s from the spool; left there", orphan.spool_path)
                continue
            log.warning(
                "queued %s, claimed before a crash but never journalled, as job %s",
                orphan.relative_path,
                job.id,
            )

    # -- jobs -----------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        for worker in list(self._workers):
            if worker.restart_when_idle and not worker.busy:
                worker.shutdown()
                if self._workers.index(worker) >= self._config.jobs.workers:
                    self._workers.remove(worker)
                    continue
                worker.restart_when_idle = False
                self._notifier.extend_timeout(_WORKER_START_SECONDS)
                worker.start(timeout=_WORKER_START_SECONDS)
            if worker.busy or not worker.alive():
                continue
            job = self.journal.start_next()
            if job is None:
                return
            folder = self._filing.folder_for(job.source_folder)
            if folder is None:
                finished = self.journal.finish(
                    job.id, JobState.FAILED, "its hot folder is no longer configured"
                )
                log.error("job %s: %s", job.id, finished.reason)
                continue
            try:
                output_dir, stem = self._filing.output_location(job, folder)
            except Exception as error:  # e.g. an output folder that cannot be looked at
                self._finish_fault(job, error)
                continue
            profile = self._config.profile(job.profile)
            request = JobRequest(
                job_id=job.id,
                input_path=job.spool_path,
                source_path=str(folder.path / job.relative_path),
                output_dir=str(output_dir),
                stem=stem,
                formats=self._config.formats_for(job.profile),
                mode=self._filing.output_mode,
                gid=self._filing.output_gid,
                profile=profile,
                repair=self._config.repair_for(job.profile),
                review_dir=str(self._filing.review_dir(folder)),
                audit_dir=str(self._filing.audit_dir(folder)),
                relative_path=job.relative_path,
                site_dictionary=self._site_dictionary.load(),
                vlm_skip_reason=self._vlm_breaker.skip_reason(job.id) if _calls_vlm(profile) else None,
            )
            if request.vlm_skip_reason:
                log.warning("job %s (%s): no VLM this time, %s", job.id, job.name, request.vlm_skip_reason)
            worker.submit(request)
            self._jobs_by_worker[worker.name] = job
            log.debug("job %s (%s) started on %s, attempt %d", job.id, job.name, worker.name, job.attempts)

    def _collect(self, restart: bool = True) -> None:
        """Take finished outcomes; deal with workers that died or overran their time."""
        for worker in self._workers:
            if not worker.busy:
                continue
            job = self._jobs_by_worker[worker.name]
            outcome = worker.poll()
            if outcome is not None:
                self._jobs_by_worker.pop(worker.name)
                self._vlm_breaker.finished(job.id)
                try:
                    self._finish(job, outcome)
                except Exception as error:  # one file's fault must cost that file, not the daemon
                    self._finish_fault(job, error)
                continue
            if not worker.alive():
                reason = worker.exit_description()
            elif worker.running_for() > self._config.jobs.timeout_seconds:
                reason = f"timed out after {self._config.jobs.timeout_seconds:.0f} s"
            else:
                continue
            self._jobs_by_worker.pop(worker.name)
            worker.kill()
            updated = self.journal.worker_died(job.id, reason)
            if _calls_vlm(self._config.profile(job.profile)):
                self._vlm_breaker.worker_lost(job.id, reason, requeued=updated.state is JobState.QUEUED)
            log.error(
                "job %s (%s): %s; now %s",
                job.id,
                job.relative_path,
                reason,
                updated.state,
                extra=event("worker_died", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="read"),
            )
            if updated.state is JobState.FAILED:
                self.stats.failed += 1
                self._filing.settle_finished(updated)
            if restart:
                self.stats.worker_restarts += 1
                worker.start()

    def _finish(self, job: Job, outcome: JobOutcome) -> None:
        self._next_status = 0.0  # the status line changed: send it with the next heartbeat
        if outcome.interrupted:
            self.journal.release(job.id, outcome.message)
            return
        if outcome.failure is None:
            confidence = "n/a" if outcome.confidence is None else f"{outcome.confidence:.3f}"
            self._board.record_read(outcome.pages, outcome.decoding, outcome.gpu_memory_used_bytes)
            if outcome.route == "review":
                self._review.send(job, outcome.reasons, outcome.outputs, outcome.audit, confidence)
                return
            outputs = dict(outcome.outputs)
            original = self._filing.archive_target(job)
            if original is not None:
                outputs["original"] = str(original)  # where reprocessing finds it later
            summary = f"read {outcome.pages} page(s), confidence {confidence}"
            if outcome.route == "audit":
                summary += "; sampled for audit"
                self.stats.audited += 1
            finished = self.journal.finish(job.id, JobState.DONE, summary, outputs)
            self._append_audit(outcome.audit)
            self.stats.done += 1
            log.info(
                "done %s: %d page(s), confidence %s, %.1f s",
                job.relative_path,
                outcome.pages,
                confidence,
                outcome.seconds,
                extra=event(
                    "job_done",
                    JOB_ID=job.id,
                    DOC_SHA256=job.sha256,
                    STAGE="done",
                    ROUTE=outcome.route,
                    CONFIDENCE=None if outcome.confidence is None else f"{outcome.confidence:.4f}",
                    MODEL_ID=self._model_ids(),
                ),
            )
            self._filing.settle_finished(finished)
            return
        if outcome.transient:
            delay = self._config.jobs.retry_backoff_seconds * 2 ** (job.attempts - 1)
            updated = self.journal.retry_later(job.id, f"{outcome.failure}: {outcome.message}", delay)
            if updated.state is JobState.QUEUED:
                log.warning(
                    "job %s: %s; retrying in %.0f s",
                    job.id,
                    outcome.message,
                    delay,
                    extra=event("job_retry", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="read"),
                )
                return
        else:
            updated = self.journal.finish(job.id, JobState.FAILED, f"{outcome.failure}: {outcome.message}")
        self.stats.failed += 1
        self._board.error(job.id, updated.reason or "")
        log.error(
            "failed %s: %s",
            job.relative_path,
            updated.reason,
            extra=event("job_failed", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="read", ROUTE="failed"),
        )
        self._filing.settle_finished(updated)

    def _finish_fault(self, job: Job, error: Exception) -> None:
        """An unexpected error while finishing a job: said, and the job failed with it if still open."""
        message = f"{type(error).__name__}: {error}"
        log.error("job %s (%s): unexpected error: %s", job.id, job.relative_path, message, exc_info=error)
        self._board.error(job.id, display(message))
        try:
            current = self.journal.get(job.id)
            if current is None or current.state not in (JobState.QUEUED, JobState.RUNNING):
                return
            failed = self.journal.finish(
                job.id, JobState.FAILED, f"{FailureReason.INTERNAL.value}: {message}"
            )
            self.stats.failed += 1
            self._filing.settle_finished(failed)
        except Exception:
            log.exception("job %s: cannot record its failure; the next start recovers it", job.id)

    def _append_audit(self, record: dict[str, Any] | None) -> None:
        if record is None:
            return
        try:
            self._audit.append(display_all(record))  # UTF-8 JSON: names shown escaped
        except Exception:  # the audit log must not stop reading; say so loudly
            log.exception("cannot append to the audit log %s", self._audit.path)

    # -- review -------------------------------------------------------------------------------------

    def review_items(self) -> list[ReviewItem]:
        return self._review.items()

    def resolve_review(self, job_id: str, fields: dict[str, str], text: str | None = None) -> Job:
        """Complete a reviewed document with the reviewer's corrections; results go to the output folder."""
        return self._review.resolve(job_id, fields, text)

    # -- control (run on the loop through call_soon) ------------------------------------------------

    def call_soon(self, function: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
        """Run `function` on the daemon's loop and put its result (or error) into `future`."""
        if self.state is DaemonState.STOPPING:
            future.set_exception(FailedPreconditionError("the daemon is stopping"))
            return
        self._commands.put((function, future))

    def _run_commands(self) -> None:
        while True:
            try:
                function, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function())
            except Exception as error:  # handed to the caller, who maps it to a status code
                future.set_exception(error)

    def _fail_pending_commands(self) -> None:
        while True:
            try:
                _, future = self._commands.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(FailedPreconditionError("the daemon stopped"))

    def pause(self) -> DaemonState:
        if self.state is DaemonState.RUNNING:
            self.state = DaemonState.PAUSED
            log.info("paused: files wait in the hot folders and queued jobs wait; running jobs finish")
        self._next_status = 0.0
        return self.state

    def resume(self) -> DaemonState:
        if self.state is DaemonState.DRAINING:
            raise FailedPreconditionError("the daemon is draining and will stop; start it again instead")
        self.state = DaemonState.RUNNING
        self._next_status = 0.0
        return self.state

    def drain(self) -> DaemonState:
        self.state = DaemonState.DRAINING
        self._notifier.stopping()
        log.info("draining: no new work; the daemon stops once running jobs have finished")
        return self.state

    def reload_with_message(self) -> tuple[bool, str]:
        ok = self.reload()
        return ok, "configuration reloaded" if ok else self.last_reload_error

    def reprocess(
        self, job_id: str | None = None, sha256: str | None = None, profile: str | None = None
    ) -> Job:
        """Queue a finished document again from its archived original (optionally under another profile)."""
        if job_id is not None:
            earlier = self.journal.get(job_id)
        else:
            candidates = [job for job in self.journal.jobs(limit=1000) if job.sha256 == sha256]
            earlier = candidates[0] if candidates else None
        if earlier is None:
            raise NotFoundError(f"no job with {'id ' + str(job_id) if job_id else 'sha256 ' + str(sha256)}")
        if profile is not None and profile not in self._config.profiles:
            raise InvalidArgumentError(
                f"unknown profile {profile!r}; known: {', '.join(sorted(self._config.profiles))}"
            )
        if earlier.state in (JobState.QUEUED, JobState.RUNNING, JobState.REVIEW):
            raise FailedPreconditionError(
                f"job {earlier.id} is {earlier.state}; reprocess it once it has finished"
            )
        original = Path(earlier.outputs.get("original", ""))
        if not earlier.outputs.get("original") or not original.is_file():
            raise FailedPreconditionError(
                f"the original of job {earlier.id} is no longer archived (intake.originals: delete, or moved)"
            )
        job_dir = self._spool / f"re-{earlier.id[:8]}-{int(time.time() * 1000)}"
        job_dir.mkdir(parents=True)
        record = {"source_folder": earlier.source_folder, "relative_path": earlier.relative_path}
        write_atomic(job_dir / "claim.json", json.dumps(record).encode())
        target = job_dir / earlier.name
        shutil.copyfile(original, target)
        job = self.journal.add(
            sha256=earlier.sha256,
            source_folder=earlier.source_folder,
            relative_path=earlier.relative_path,
            name=earlier.name,
            size=target.stat().st_size,
            spool_path=str(target),
            profile=profile or earlier.profile,
            priority=self._config.profiles[profile or earlier.profile].priority,
            reason=f"reprocess of job {earlier.id}",
        )
        log.info("queued %s again as job %s (reprocess of %s)", earlier.relative_path, job.id, earlier.id)
        return job

    def snapshot_status(self) -> Status:
        return self._board.snapshot(
            state=self.state,
            counts=self.journal.counts(),
            engine=self.engine_description,
            workers=len(self._workers),
            workers_busy=len(self._jobs_by_worker),
            gpu_memory_budget_bytes=gpu_memory_budget(self._config, self.engine_description),
            vlm_disabled=self._vlm_breaker.disabled,
        )

    def metrics(self) -> dict[str, float]:
        return self._board.metrics(
            self.journal.counts(),
            self.watchdog_pings,
            sum(len(state.unclaimable) for state in self._folders.values()),
        )

    def _prune(self) -> None:
        removed = self.journal.prune(self._config.jobs.retention_days * 86400)
        for job in removed:
            shutil.rmtree(Path(job.spool_path).parent, ignore_errors=True)
        if removed:
            log.info(
                "pruned %d finished job(s) older than %g days", len(removed), self._config.jobs.retention_days
            )


def _calls_vlm(profile: ProfileConfig) -> bool:
    """Whether this profile's documents may be read by the VLM.

    AppConfig's validation makes a cascade that is not off imply that engine.vlm_gguf is set.
    """
    return profile.cascade.mode != "off"
