"""The daemon: hot folders in, the journal in the middle, worker processes reading, results out.

`Daemon` conducts: it keeps the loop, start and stop, reload, and dispatching jobs to the worker
pool; hot-folder intake (intake/hot_folders.py), filing results and originals (filing.py), the
review desk (review_desk.py) and the status (status.py) are collaborators it wires together.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from appliance.audit import AuditLog
from appliance.cluster.keeper import LeaseKeeper
from appliance.config import AppConfig, HotFolderConfig, ProfileConfig, load_config
from appliance.control import (
    DaemonState,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ReviewItem,
    Status,
)
from appliance.engines.shared_sessions import serves_vlm, wants_session_server
from appliance.errors import ConfigError, FailureReason
from appliance.filing import Filing
from appliance.intake.claim import Claimed
from appliance.intake.hot_folders import HotFolders
from appliance.journal import (
    AlreadyClaimedError,
    Job,
    JobJournal,
    JobState,
    JournalUnavailableError,
    LeaseLostError,
)
from appliance.journals import open_journal
from appliance.names import display, display_all
from appliance.outputs.atomic import write_atomic
from appliance.review import SiteDictionary
from appliance.review_desk import ReviewDesk
from appliance.session_server_keeper import HUNG_RUN_S, SessionServerKeeper
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
        # One session server holding the ONNX models for every worker, where jobs.session_server
        # wants one; the workers' engines then open their sessions in it.
        self._sessions = self._session_server_keeper(config)
        if self._sessions is not None and factory_for is not None:  # a keeper comes only with factory_for
            engine_factory = factory_for(self._served(config))
        self._engine_factory = engine_factory
        self._audit = AuditLog(config.paths.state_dir / "audit.jsonl")
        self._site_dictionary = SiteDictionary(config.paths.state_dir / "site_dictionary.json")
        self._next_review_check = 0.0
        self.last_reload_error = ""
        self._spool = config.paths.spool()
        self._journal: JobJournal | None = None
        self._lease_keeper: LeaseKeeper | None = None
        self._workers = [
            Worker(f"ocr-worker-{index}", engine_factory, config.rasterize, config.jobs.per_worker)
            for index in range(config.jobs.workers)
        ]
        self._running: dict[str, Job] = {}  # job id -> job, for every job a worker is reading
        # The ids of the jobs in `_running`, replaced whole once a tick so that the lease keeper's
        # thread reads a consistent set without a lock.
        self._reading: frozenset[str] = frozenset()
        # Jobs that were in flight together when their worker died: which of them killed it is not
        # known, so none had an attempt counted, and each is read alone until it is settled.
        self._suspects: set[str] = set()
        # What the node tells the cluster with its heartbeat, made on the loop (the counters are
        # the loop's) and read by the lease keeper's thread; replaced whole, never changed.
        self._heartbeat_stats: dict[str, Any] = {}
        self._journal_down_since: float | None = None
        self._last_counts: dict[JobState, int] = dict.fromkeys(JobState, 0)
        # Files claimed while a shared journal's server was away, journalled once it is back.
        self._unjournalled: list[tuple[Claimed, HotFolderConfig]] = []
        # Which attempts may call the VLM, after workers lost to it (kept in memory: after a restart
        # every job may try the VLM again).
        self._vlm_breaker = VlmBreaker()
        self.engine_description: dict[str, Any] = {}
        self.ready = threading.Event()
        self._lock_handle: TextIO | None = None
        # Collaborators, made at start once the journal they share is open.
        self._filing: Filing
        self._review: ReviewDesk
        self._hot_folders: HotFolders

    @property
    def journal(self) -> JobJournal:
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
        self._config.paths.state_dir.mkdir(parents=True, exist_ok=True)
        self._spool.mkdir(parents=True, exist_ok=True)
        self._take_instance_lock()
        self._journal = open_journal(self._config, self._append_audit)
        self._filing = Filing(self._config, self._journal, self.recent_errors)
        self._review = ReviewDesk(self._journal, self._filing, self._site_dictionary, self.stats)
        for job in self.journal.recover():
            log.warning("job %s (%s) was running when the daemon stopped: %s", job.id, job.name, job.state)
            if job.state is JobState.FAILED:
                self._filing.settle_finished(job)
        if self._config.journal.backend == "postgresql":
            self._lease_keeper = LeaseKeeper(
                self.journal,
                self._config.journal.lease_seconds,
                lambda: self._heartbeat_stats,
                self._settle_on_loop,
                lambda: self._reading,
            )
            self._lease_keeper.start()
        self._hot_folders = HotFolders(
            self._config,
            self._spool,
            self._filing,
            self.stats,
            on_claimed=self._claimed,
            report_error=lambda message: self._board.error("", message),
        )
        self._reconcile_spool()
        try:
            if self._sessions is not None:
                self._notifier.extend_timeout(_WORKER_START_SECONDS)
                self._sessions.start()  # first: the workers open their sessions in it as they load
            # Every worker loads at once (most of a load is its own process's work); each gets
            # its time from its launch.
            for worker in self._workers:
                worker.launch()
            for worker in self._workers:
                # Loading models can outlast TimeoutStartSec on a slow disk; ask for more time first.
                self._notifier.extend_timeout(_WORKER_START_SECONDS)
                worker.wait_loaded(timeout=_WORKER_START_SECONDS)
        except BaseException:
            for worker in self._workers:
                worker.kill()
            if self._sessions is not None:
                self._sessions.stop()  # so a daemon that cannot start leaves no server behind
            raise
        self.engine_description = self._workers[0].description
        self._hot_folders.start()
        self.ready.set()
        log.info(
            "ready: watching %s with %d worker(s)",
            ", ".join(str(path) for path in self._hot_folders.paths) or "nothing",
            len(self._workers),
            extra=event("started", MODEL_ID=self._model_ids()),
        )
        if notify_ready:
            self.notify_ready()

    def notify_ready(self) -> None:
        """READY=1 to systemd, with the first status line."""
        self._notifier.ready(self.status_line())

    def _session_server_keeper(self, config: AppConfig) -> SessionServerKeeper | None:
        """The keeper of the workers' session server, or None where each worker opens its own sessions."""
        if self._factory_for is None:
            # An engine factory given whole (tests' fakes) cannot be pointed at a socket.
            if config.jobs.session_server == "on":
                log.warning("jobs.session_server: the workers' engine is not built from the configuration")
            return None
        if not wants_session_server(config):
            return None
        return SessionServerKeeper(
            config.jobs.session_server_runners,
            reader_copies=config.jobs.served_vlm_copies,
            serves_vlm=serves_vlm(config),
            report_error=lambda message: self._board.error("", message),
            hung_run_s=min(HUNG_RUN_S, config.jobs.timeout_seconds),
        )

    def _served(self, config: AppConfig) -> AppConfig:
        """The configuration the workers' engines are built from: with the session server's socket, if any."""
        return config if self._sessions is None else self._sessions.served(config)

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

    def _node_stats(self) -> dict[str, Any]:
        """What this node tells the cluster with its heartbeat (`ocr-appliance status` on any node)."""
        status = self._board.snapshot(
            state=self.state,
            counts=dict.fromkeys(JobState, 0),
            engine={},
            workers=len(self._workers),
            workers_busy=self._workers_busy(),
            gpu_memory_budget_bytes=None,
            vlm_disabled=None,
        )
        return {
            "state": self.state.value,
            "done": self.stats.done,
            "failed": self.stats.failed,
            "review": self.stats.review,
            "duplicates": self.stats.duplicates,
            "workers": len(self._workers),
            "workers_busy": self._workers_busy(),
            "pages_per_second_1m": round(status.pages_per_second.get("1m", 0.0), 3),
            "pages_per_second_15m": round(status.pages_per_second.get("15m", 0.0), 3),
        }

    def _settle_on_loop(self, job: Job) -> None:
        """Move a job's file out of the spool from the loop thread (asked from another thread)."""
        self._commands.put((lambda: self._filing.settle_finished(job), concurrent.futures.Future()))

    def _model_ids(self) -> str:
        models = self.engine_description.get("models", [])
        return ",".join(f"{model['name']}@{model['sha256'][:12]}" for model in models if model.get("sha256"))

    def status_line(self) -> str:
        """The short line systemd shows in `systemctl status` (STATUS=)."""
        # A shared journal's server that is away: the last counts (the watchdog is still pinged).
        with contextlib.suppress(JournalUnavailableError):
            self._last_counts = self.journal.counts()
        return self._board.line(
            self.state,
            self._last_counts,
            busy=bool(self._running),
            pages_done=sum(worker.pages_done for worker in self._workers),
        )

    def _workers_busy(self) -> int:
        return sum(1 for worker in self._workers if worker.busy)

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
        next_reconcile = time.monotonic() + self._config.journal.orphan_grace_seconds / 2
        next_stats = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                try:
                    self._hot_folders.drain_events()
                    if now >= next_rescan:
                        # The safety net for events lost on network mounts or under load.
                        self._hot_folders.rescan()
                        next_rescan = now + self._config.intake.rescan_seconds
                    if self._lease_keeper is not None and now >= next_reconcile:
                        # Another node may have died between a claim and its journal entry
                        # (alone, the next start finds such a claim); half the grace apart.
                        self._reconcile_spool()
                        next_reconcile = now + self._config.journal.orphan_grace_seconds / 2
                    if now >= next_prune:
                        self._prune()
                        next_prune = now + _PRUNE_EVERY_SECONDS
                    if reload is not None and reload.is_set():
                        reload.clear()
                        self.reload()
                    self._run_commands()
                    if self.state is DaemonState.RUNNING:
                        self._hot_folders.intake()
                    if self._sessions is not None:
                        self._sessions.check()  # before the workers: one restarted loads from it
                    self._collect()
                    if self.state is DaemonState.RUNNING:
                        self._dispatch()
                    if self.state is DaemonState.DRAINING and not self._running:
                        log.info("drained: every running job has finished")
                        break
                    if now >= self._next_review_check:
                        self._review.check_corrections()
                        self._next_review_check = now + _REVIEW_CHECK_SECONDS
                    self._journal_back()
                except JournalUnavailableError as error:
                    self._journal_away(error)
                self._reading = frozenset(self._running)
                if self._lease_keeper is not None and now >= next_stats:
                    self._heartbeat_stats = self._node_stats()
                    next_stats = now + self._config.journal.lease_seconds / 6
                self._heartbeat()
                self._wait_for_work(stop)
        finally:
            self._shutdown()

    def _journal_away(self, error: JournalUnavailableError) -> None:
        """A shared journal's server is unreachable: say so once, keep the loop alive, try again.

        Nothing is recorded meanwhile; files stay in the hot folders or the spool. A job whose
        result could not be recorded is let go (`_not_recorded`) and read again.
        """
        if self._journal_down_since is None:
            self._journal_down_since = time.monotonic()
            self._board.error("", str(error))
            log.error("%s; retrying every tick, files wait", error)
        time.sleep(1.0)  # at most one attempt a second while the server is away

    def _not_recorded(self, job: Job, error: JournalUnavailableError) -> None:
        """The journal went away before a finished job was recorded: let the job go, to be read again.

        Not failed: the file did nothing wrong, and the server may be back a moment later. Its
        lease is no longer renewed, so once the server is back `reclaim_expired` gives it back to
        the queue, as it does a dead node's job; outputs already written are written again. The
        journal is not marked away here: the loop's next call to it finds out whether it still is.
        """
        self._board.error(job.id, f"result not recorded, read again later: {error}")
        log.warning(
            "job %s (%s): result not recorded, read again later: %s", job.id, job.relative_path, error
        )

    def _journal_back(self) -> None:
        while self._unjournalled:
            claimed, folder = self._unjournalled[0]
            self._claimed(claimed, folder, retrying=True)  # raises while the server is still away
            self._unjournalled.pop(0)
        if self._journal_down_since is not None:
            log.warning(
                "the journal is reachable again after %.0f s", time.monotonic() - self._journal_down_since
            )
            self._journal_down_since = None

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
        self._filing.reconfigure(new)  # first: jobs from a folder a reload removed still finish
        self._hot_folders.reconfigure(new)
        self.journal.max_attempts = new.jobs.max_attempts
        logging.getLogger().setLevel(new.logging.level)
        if (new.engine, new.rasterize, new.jobs.per_worker) != (
            old.engine,
            old.rasterize,
            old.jobs.per_worker,
        ):
            if self._factory_for is None:
                log.warning("engine settings changed; they take effect after a restart")
            else:
                factory = self._factory_for(self._served(new))
                for worker in self._workers:
                    worker.replace_factory(factory, new.rasterize, new.jobs.per_worker)
        server_settings = ("session_server", "session_server_runners", "serve_vlm", "served_vlm_copies")
        if any(getattr(new.jobs, name) != getattr(old.jobs, name) for name in server_settings):
            log.warning("jobs.session_server settings changed; they take effect after a restart")
        while len(self._workers) < new.jobs.workers:
            worker = Worker(
                f"ocr-worker-{len(self._workers)}",
                self._factory_for(self._served(new)) if self._factory_for else self._engine_factory,
                new.rasterize,
                new.jobs.per_worker,
            )
            self._notifier.extend_timeout(_WORKER_START_SECONDS)
            self._start_worker(worker)
            self._workers.append(worker)
        for worker in self._workers[new.jobs.workers :]:
            worker.restart_when_idle = True  # retired below once idle
        log.info("configuration reloaded from %s", self._config_path, extra=event("reloaded"))
        self._notifier.ready(self.status_line())
        return True

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
        self._hot_folders.stop()
        busy = [worker for worker in self._workers if worker.busy]
        # Leases are renewed until the running jobs are finished or released below.
        for worker in busy:
            worker.request_stop()  # the worker stops between pages and reports the job interrupted
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        while any(worker.busy for worker in self._workers) and time.monotonic() < deadline:
            self._collect(restart=False)
            time.sleep(0.05)
        for worker in self._workers:
            if worker.busy:
                in_flight = list(worker.jobs)
                worker.kill()
                for job_id in in_flight:
                    self._release(self._running.pop(job_id), "daemon stopped while the job was running")
            worker.shutdown()
        if self._sessions is not None:
            self._sessions.stop()  # after the workers, which hold its sessions to the end
        self._hot_folders.join()
        self._fail_pending_commands()
        if self._lease_keeper is not None:
            self._lease_keeper.stop()
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

    def _reconcile_spool(self) -> None:
        self._hot_folders.reconcile_spool(
            self._settle_spooled,
            self._filing.folder_for,
            self._queue_orphan,
        )

    def _queue_orphan(self, orphan: Claimed, folder: HotFolderConfig) -> str:
        try:
            return self._journal_add(orphan, folder).id
        except AlreadyClaimedError as error:  # another node queued it a moment before
            return error.job.id

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
            identity=claimed.identity,
            media_type=claimed.media_type,
        )

    # -- intake: the hot folders hand each claim here --------------------------------------------------

    def _claimed(self, claimed: Claimed, folder: HotFolderConfig, *, retrying: bool = False) -> None:
        """Journal a file intake claimed; its earlier result is issued again if it is a duplicate.

        `retrying`: a claim made while the journal's server was away; it is already waiting in
        `_unjournalled`, so an unreachable server is raised to the loop instead.
        """
        relative = Path(claimed.relative_path)
        self._next_status = 0.0
        try:
            job = self._journal_add(claimed, folder)
        except AlreadyClaimedError as error:
            # Another node journalled this very file first (a shared mount seen by both).
            log.info("claimed %s, but %s", relative, error)
            return
        except JournalUnavailableError as error:
            if retrying:
                raise
            # Journalled as soon as the server answers again (the claim record in the spool
            # covers a crash meanwhile, as for any orphan).
            self._unjournalled.append((claimed, folder))
            log.warning("claimed %s; %s: journalled when it answers again", relative, error)
            return
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

    def _settle_spooled(self, spool_file: Path) -> bool:
        """Whether a job holds this spooled file; a finished job's is moved out of the spool."""
        job = self.journal.find_by_spool_path(str(spool_file))
        if job is None:
            return False
        if (
            self._lease_keeper is not None
            and time.time() - job.updated_at < self._config.journal.orphan_grace_seconds
        ):
            return True  # sharing the spool: the node that just finished it is moving it out
        if job.state in (JobState.DONE, JobState.FAILED):
            self._filing.settle_finished(job)  # a crash came between the journal and the archive
        return True

    # -- jobs -----------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        self._check_suspects()
        for worker in list(self._workers):
            if worker.restart_when_idle and not worker.busy:
                worker.shutdown()
                if self._workers.index(worker) >= self._config.jobs.workers:
                    self._workers.remove(worker)
                    continue
                worker.restart_when_idle = False
                self._notifier.extend_timeout(_WORKER_START_SECONDS)
                self._start_worker(worker)
            if worker.restart_when_idle or not worker.alive():
                continue  # a worker waiting for its restart takes no more jobs, so it gets idle
            # While suspects remain every worker reads one job at a time, so that a suspect is
            # read alone and a worker that dies on it has one job to blame.
            room = (1 if self._suspects else worker.capacity) - len(worker.jobs)
            for _ in range(room):
                if not self._start_next(worker):
                    return

    def _start_next(self, worker: Worker) -> bool:
        """Claim the next job and send it to `worker`; False when no job is waiting."""
        while True:
            # Sharing a journal, a node takes only jobs of folders it has settings for; another node
            # may serve a folder this one does not (alone, such a job is failed below, as before).
            sources = self._filing.sources() if self._lease_keeper is not None else None
            job = self.journal.start_next(sources=sources)
            if job is None:
                return False
            folder = self._filing.folder_for(job.source_folder)
            if folder is None:
                finished = self.journal.finish(
                    job.id,
                    JobState.FAILED,
                    "its hot folder is no longer configured",
                    failure=FailureReason.INTERNAL,
                )
                log.error("job %s: %s", job.id, finished.reason)
                continue
            try:
                output_dir, stem = self._filing.output_location(job, folder)
            except Exception as error:  # e.g. an output folder that cannot be looked at
                self._finish_fault(job, error)
                continue
            profile = self._config.profile(job.profile)
            vlm = _calls_vlm(self._config, profile)
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
                site_dictionary_path=str(self._site_dictionary.path),
                sha256=job.sha256,
                media_type=job.media_type,
                vlm_skip_reason=self._vlm_breaker.skip_reason(job.id) if vlm else None,
                fenced=self._lease_keeper is not None,
            )
            if request.vlm_skip_reason:
                log.warning("job %s (%s): no VLM this time, %s", job.id, job.name, request.vlm_skip_reason)
            worker.publish_gate = self._may_publish
            worker.submit(request)
            self._running[job.id] = job
            log.debug("job %s (%s) started on %s, attempt %d", job.id, job.name, worker.name, job.attempts)
            return True

    def _collect(self, restart: bool = True) -> None:
        """Take finished outcomes; deal with workers that died or overran their time."""
        for worker in self._workers:
            if not worker.busy:
                continue
            for outcome in worker.poll():
                job = self._running.pop(outcome.job_id)
                self._suspects.discard(job.id)
                self._vlm_breaker.finished(job.id)
                try:
                    self._finish(job, outcome)
                except LeaseLostError as error:
                    self._lease_lost(job, error)
                except JournalUnavailableError as error:
                    self._not_recorded(job, error)
                except Exception as error:  # one file's fault must cost that file, not the daemon
                    self._finish_fault(job, error)
            if not worker.busy:
                continue
            if worker.alive():
                culprits = worker.overdue(self._config.jobs.timeout_seconds)
                if not culprits:
                    continue
                reason = f"timed out after {self._config.jobs.timeout_seconds:.0f} s"
            else:
                culprits, reason = list(worker.jobs), worker.exit_description()
            in_flight = [self._running.pop(job_id) for job_id in worker.jobs]
            worker.kill()
            if len(culprits) > 1:
                # Any one of them may be to blame, so none is charged an attempt; each is read
                # alone next (_suspects) and charged if its worker dies on it then.
                log.error(
                    "%s: %s while reading %d jobs at once; each is read again alone",
                    worker.name,
                    reason,
                    len(culprits),
                )
                self._suspects.update(culprits)
            for job in in_flight:
                if len(culprits) > 1 and job.id in culprits:
                    self._release(job, f"{reason} while reading {len(culprits)} jobs; read again alone")
                elif job.id in culprits:
                    self._worker_lost(job, reason)
                else:  # its worker was stopped for another job's overrun
                    self._release(job, f"its worker was stopped: another job {reason}")
            if restart:
                self.stats.worker_restarts += 1
                self._start_worker(worker)

    def _start_worker(self, worker: Worker, timeout: float = _WORKER_START_SECONDS) -> None:
        """Start a worker, new or again; a dead session server is started first, whatever its interval."""
        if self._sessions is not None:
            self._sessions.check(now=True)  # the worker's engine opens its sessions in it as it loads
        worker.start(timeout=timeout)

    def _worker_lost(self, job: Job, reason: str) -> None:
        """The job its worker died on (or overran its time): an attempt counted, poison after the last."""
        try:
            updated = self.journal.worker_died(job.id, reason)
        except LeaseLostError as error:
            self._suspects.discard(job.id)
            self._lease_lost(job, error)
            return
        if _calls_vlm(self._config, self._config.profile(job.profile)):
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
            self._suspects.discard(job.id)
            self.stats.failed += 1
            self._filing.settle_finished(updated)

    def _release(self, job: Job, reason: str) -> None:
        """Give a running job back to the queue without counting the attempt (it did nothing wrong)."""
        try:
            self.journal.release(job.id, reason)
        except LeaseLostError as error:
            log.warning("%s; another node reads it", error)
        except JournalUnavailableError as error:  # its lease runs out; another node reads it
            log.warning("job %s not released: %s", job.id, error)

    def _check_suspects(self) -> None:
        """Forget suspects that are settled some other way (cancelled, pruned, taken by another node)."""
        for job_id in list(self._suspects):
            if job_id in self._running:
                continue
            job = self.journal.get(job_id)
            if job is None or job.state is not JobState.QUEUED:
                self._suspects.discard(job_id)

    def _may_publish(self, job_id: str) -> bool:
        """A worker asks before writing a fenced job's results: only while this node holds its lease."""
        try:
            self.journal.fence(job_id)
        except LeaseLostError as error:
            log.warning("%s: its worker writes nothing", error)
            return False
        except Exception:  # the database is away: write nothing now; the job is read again later
            log.exception("job %s: cannot check its lease; its worker writes nothing", job_id)
            return False
        return True

    def _lease_lost(self, job: Job, error: LeaseLostError) -> None:
        """A running job was lost (stopped or cut off longer than its lease): drop what it has."""
        self._board.error(job.id, str(error))
        log.warning(
            "%s (%s); this node's result is dropped, another node reads it",
            error,
            job.relative_path,
            extra=event("lease_lost", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="finish"),
        )

    def _finish(self, job: Job, outcome: JobOutcome) -> None:
        self._next_status = 0.0  # the status line changed: send it with the next heartbeat
        if outcome.interrupted:
            self.journal.release(job.id, outcome.message)
            return
        # A shared journal: prove this node still holds the job before recording anything of it.
        self.journal.fence(job.id)
        if outcome.failure is None:
            confidence = "n/a" if outcome.confidence is None else f"{outcome.confidence:.3f}"
            self._board.record_read(outcome.pages, outcome.decoding, outcome.gpu_memory_used_bytes)
            if outcome.route == "review":
                self._review.send(
                    job, outcome.reasons, outcome.outputs, _audit_record(outcome.audit), confidence
                )
                return
            outputs = dict(outcome.outputs)
            original = self._filing.archive_target(job)
            if original is not None:
                outputs["original"] = str(original)  # where reprocessing finds it later
            summary = f"read {outcome.pages} page(s), confidence {confidence}"
            if outcome.route == "audit":
                summary += "; sampled for audit"
                self.stats.audited += 1
            finished = self.journal.finish(
                job.id, JobState.DONE, summary, outputs, audit=_audit_record(outcome.audit)
            )
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
            updated = self.journal.finish(
                job.id,
                JobState.FAILED,
                f"{outcome.failure}: {outcome.message}",
                failure=_failure_code(outcome.failure),
            )
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
                job.id,
                JobState.FAILED,
                f"{FailureReason.INTERNAL.value}: {message}",
                failure=FailureReason.INTERNAL,
            )
            self.stats.failed += 1
            self._filing.settle_finished(failed)
        except Exception:
            log.exception("job %s: cannot record its failure; the next start recovers it", job.id)

    def _append_audit(self, record: Mapping[str, Any]) -> None:
        """The SQLite journal's audit sink: the hash-chained file in the state folder."""
        try:
            self._audit.append(record)
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
            media_type=earlier.media_type,
        )
        log.info("queued %s again as job %s (reprocess of %s)", earlier.relative_path, job.id, earlier.id)
        return job

    def snapshot_status(self) -> Status:
        return self._board.snapshot(
            state=self.state,
            counts=self.journal.counts(),
            engine=self.engine_description,
            workers=len(self._workers),
            workers_busy=self._workers_busy(),
            gpu_memory_budget_bytes=gpu_memory_budget(self._config, self.engine_description),
            vlm_disabled=self._vlm_breaker.disabled,
            nodes=self.journal.nodes(),
            node_id=self.journal.node_id,
            session_server=None if self._sessions is None else self._sessions.status(),
        )

    def metrics(self) -> dict[str, float]:
        return self._board.metrics(
            self.journal.counts(),
            self.watchdog_pings,
            self._hot_folders.unclaimable(),
            None if self._sessions is None else self._sessions.status(),
        )

    def _prune(self) -> None:
        removed = self.journal.prune(self._config.jobs.retention_days * 86400)
        for job in removed:
            shutil.rmtree(Path(job.spool_path).parent, ignore_errors=True)
        if removed:
            log.info(
                "pruned %d finished job(s) older than %g days", len(removed), self._config.jobs.retention_days
            )


def _audit_record(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A document's audit record as chained: UTF-8 JSON, so file names are shown escaped."""
    return None if record is None else display_all(record)


def _failure_code(value: str) -> FailureReason:
    """A worker's failure code (a FailureReason value); one this version does not know is internal."""
    try:
        return FailureReason(value)
    except ValueError:
        return FailureReason.INTERNAL


def _calls_vlm(config: AppConfig, profile: ProfileConfig) -> bool:
    """Whether this profile's documents may be read by the VLM (not an ONNX second reader).

    AppConfig's validation makes a cascade without a named reader imply that exactly one second
    reader is configured: the VLM when engine.vlm_gguf is set.
    """
    if profile.cascade.mode == "off":
        return False
    if profile.cascade.reader is None:
        return config.engine.vlm_gguf is not None
    return profile.cascade.reader == "vlm_gguf"
