"""The hot folders: events, rescans, settling, completeness, claims, and the disk watermark.

It hands each claimed file to a callback (the daemon journals it) and knows nothing of jobs: it
imports neither the journal nor the service around it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver

from appliance.config import AppConfig, HotFolderConfig
from appliance.errors import FailureReason
from appliance.intake.claim import CLAIM_RECORD, ClaimChangedError, Claimed, claim, orphaned_claims
from appliance.intake.completeness import check_complete
from appliance.intake.filtering import is_candidate
from appliance.intake.lease import WriterActiveError
from appliance.intake.stability import FileStabilityTracker
from appliance.intake.watch import make_observer, reports_writer_closes
from appliance.names import display
from appliance.systemd import event

log = logging.getLogger(__name__)

# A file that cannot be claimed (permissions, a full spool, an I/O error) is tried again at later
# rescans, no sooner than this, doubling up to the cap: a lasting fault is not hammered every tick.
_CLAIM_RETRY_SECONDS = 30.0
_CLAIM_RETRY_MAX_SECONDS = 3600.0


class FailedFiles(Protocol):
    """Where a file that cannot be read goes, with its reason (appliance.filing.Filing)."""

    def fail_file(self, path: Path, folder: HotFolderConfig, reason: FailureReason, message: str) -> Path: ...

    def write_reason_logged(
        self, target: Path, relative: Path, reason: FailureReason, message: str
    ) -> None: ...

    def withdraw_reason(self, target: Path) -> None: ...


class IntakeCounters(Protocol):
    """The daemon's counters that intake moves (appliance.status.DaemonStats)."""

    claimed: int
    failed: int
    intake_paused: bool


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


class HotFolders:
    """Watches the configured hot folders and claims each complete file into the spool.

    Watchdog's observer threads only queue events; everything else runs on the daemon's loop
    thread: `drain_events` and `intake` each tick, `rescan` as a safety net for lost events.
    """

    def __init__(
        self,
        config: AppConfig,
        spool: Path,
        failed: FailedFiles,
        stats: IntakeCounters,
        *,
        on_claimed: Callable[[Claimed, HotFolderConfig], None],
        report_error: Callable[[str], None],
    ) -> None:
        self._config = config
        self._spool = spool
        self._failed = failed
        self._stats = stats
        self._on_claimed = on_claimed  # journals the claim; a fault there is its own to handle
        self._report_error = report_error  # shown among the status's recent errors
        self._events: queue.SimpleQueue[tuple[HotFolderConfig, Path]] = queue.SimpleQueue()
        self._writes: queue.SimpleQueue[tuple[HotFolderConfig, Path, bool]] = queue.SimpleQueue()
        self._folders = {folder.path: _FolderState(folder, _tracker(config)) for folder in config.hot_folders}

    @property
    def paths(self) -> list[Path]:
        return list(self._folders)

    def unclaimable(self) -> int:
        """How many files are left in the hot folders because they cannot be claimed."""
        return sum(len(state.unclaimable) for state in self._folders.values())

    def start(self) -> None:
        """Start watching every folder, and look at what is already there."""
        for state in self._folders.values():
            self._watch(state)
        self.rescan()

    def _watch(self, state: _FolderState) -> None:
        folder = state.config
        observer = make_observer(folder.path, folder.watch, self._config.intake.poll_seconds)
        observer.schedule(self._forwarder(folder, observer), str(folder.path), recursive=True)
        observer.start()
        state.observer = observer

    def stop(self) -> None:
        """Stop the observers (join them with `join`, once the rest of shutdown is under way)."""
        for state in self._folders.values():
            if state.observer is not None:
                state.observer.stop()

    def join(self) -> None:
        for state in self._folders.values():
            if state.observer is not None:
                state.observer.join(timeout=5)

    def reconfigure(self, new: AppConfig) -> None:
        """Apply a reloaded configuration: folders added, changed or removed; new settle times."""
        self._config = new
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
                self._watch(state)
                self._folders[path] = state
            else:
                self._folders[path].tracker.settle_seconds = new.intake.settle_seconds
                self._folders[path].tracker.writer_grace_seconds = new.intake.incomplete_timeout_seconds
        self.rescan()

    def reconcile_spool(
        self,
        settle_known: Callable[[Path], bool],
        folder_for: Callable[[str], HotFolderConfig | None],
        queue_orphan: Callable[[Claimed, HotFolderConfig], str],
    ) -> None:
        """Queue claimed files the journal never heard of; hand the known ones to `settle_known`.

        `settle_known(spool_file)` says whether a job holds the file (and moves a finished job's
        file out of the spool); `queue_orphan` journals an orphan and returns its job id.
        """
        # A spool shared by nodes of one PostgreSQL journal holds their claims in progress too: a
        # claim record is an orphan only once older than any claim can take, and younger folders
        # are not looked at (nor asked about in the journal) at all.
        shared = self._config.journal.backend == "postgresql"
        min_age = self._config.journal.orphan_grace_seconds if shared else 0.0
        known: set[str] = set()
        for job_dir in sorted(self._spool.iterdir()) if self._spool.is_dir() else []:
            try:
                if min_age and _younger_than(job_dir / CLAIM_RECORD, min_age):
                    continue
                for path in job_dir.iterdir():
                    if settle_known(path):
                        known.add(str(path))
            except Exception:  # one spool folder must not stop every start from here on
                log.exception("cannot reconcile the spool folder %s; left as it is", job_dir)
        try:
            orphans = orphaned_claims(self._spool, known, min_age)
        except Exception:
            log.exception("cannot look for orphaned claims in %s", self._spool)
            orphans = []
        for orphan in orphans:
            folder = folder_for(orphan.source_folder)
            if folder is None:
                log.error(
                    "spooled file %s came from %s, which is no longer configured; left in the spool",
                    orphan.spool_path,
                    orphan.source_folder,
                )
                continue
            try:
                job_id = queue_orphan(orphan, folder)
            except Exception:
                log.exception("cannot queue %s from the spool; left there", orphan.spool_path)
                continue
            log.warning(
                "queued %s, claimed before a crash but never journalled, as job %s",
                orphan.relative_path,
                job_id,
            )

    def rescan(self) -> None:
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

    def drain_events(self) -> None:
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
        if low and not self._stats.intake_paused:
            log.warning(
                "intake paused: less than %.0f MB free on %s; files wait in the hot folders",
                self._config.intake.min_free_mb,
                ", ".join(map(str, low)),
                extra=event("intake_paused"),
            )
        elif not low and self._stats.intake_paused:
            log.info("intake resumed: disk space is back above the watermark")
        self._stats.intake_paused = bool(low)
        return bool(low)

    def intake(self) -> None:
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
        self._report_error(display(f"{path}: {message}"))
        state.tracker.forget(path)
        state.last_check.pop(path, None)
        try:
            if path.is_symlink() or not path.is_file():
                return  # claimed or gone already: the spool and the journal account for it
            self._failed.fail_file(path, state.config, FailureReason.INTERNAL, message)
        except Exception:
            log.exception(
                "cannot move %s to %s either; it stays in the hot folder", path, state.config.failed_dir
            )
            state.refused.add(path)
            return
        self._stats.failed += 1

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
        self._claim(state, path, result.media_type)

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
        self._failed.write_reason_logged(state.config.failed_dir / relative, relative, failure, reason)

    def _claim(self, state: _FolderState, path: Path, media_type: str | None) -> None:
        """Claim a complete file; one that cannot be claimed stays, is reported once, and is retried."""
        now = time.monotonic()
        failure = state.unclaimable.get(path)
        try:
            claimed = dataclasses.replace(claim(path, state.config.path, self._spool), media_type=media_type)
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
        if state.incomplete_reported.pop(path, None) is not None:
            self._failed.withdraw_reason(state.config.failed_dir / relative)  # it completed after all
        self._stats.claimed += 1
        self._on_claimed(claimed, state.config)

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
        self._report_error(message)


def _younger_than(path: Path, seconds: float) -> bool:
    """Whether the file was written less than `seconds` ago (False when it cannot be looked at)."""
    try:
        return time.time() - path.stat().st_mtime < seconds
    except OSError:
        return False
