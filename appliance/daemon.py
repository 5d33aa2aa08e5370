"""The foreground daemon: watches the hot folders, reads each settled file, writes its results.

This is the minimal loop: in-process reading, a settle time, originals archived after the
outputs are durable, failures moved aside with a JSON reason. The crash-safe journal, spool and
worker subprocesses replace the in-memory `pending` map and the direct `process` call.
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from appliance.config import AppConfig, HotFolderConfig
from appliance.errors import DocumentError, FailureReason
from appliance.intake.filtering import is_candidate
from appliance.outputs.atomic import write_atomic
from appliance.outputs.writer import output_paths, write_outputs
from appliance.pipeline.process import DocumentProcessor

log = logging.getLogger(__name__)

_TICK_SECONDS = 0.25


@dataclass
class _Pending:
    """A file seen but not yet settled: taken once size and mtime stop changing."""

    folder: HotFolderConfig
    size: int
    mtime_ns: int
    stable_since: float


class _EventForwarder(FileSystemEventHandler):
    """Forwards watchdog events to the daemon's thread; does no work on the observer's thread."""

    def __init__(self, folder: HotFolderConfig, events: queue.Queue[tuple[HotFolderConfig, Path]]) -> None:
        self._folder = folder
        self._events = events

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        target = getattr(event, "dest_path", "") or event.src_path
        path = Path(target if isinstance(target, str) else target.decode())
        self._events.put((self._folder, path))


def _unique_path(path: Path) -> Path:
    """`path`, or `name-1.ext`, `name-2.ext`... if it exists: never overwrite an earlier file."""
    candidate, counter = path, 0
    while candidate.exists():
        counter += 1
        candidate = path.with_name(f"{path.stem}-{counter}{path.suffix}")
    return candidate


class HotFolderDaemon:
    """Watches every configured hot folder until `stop` is set."""

    def __init__(self, config: AppConfig, processor: DocumentProcessor) -> None:
        self._config = config
        self._processor = processor
        self._events: queue.Queue[tuple[HotFolderConfig, Path]] = queue.Queue()
        self._pending: dict[Path, _Pending] = {}
        self._refused: set[Path] = set()
        self.processed = 0
        self.failed = 0

    def run(self, stop: threading.Event) -> None:
        observer = Observer()
        for folder in self._config.hot_folders:
            for directory in (folder.path, folder.output_dir, folder.archive_dir, folder.failed_dir):
                directory.mkdir(parents=True, exist_ok=True)
            observer.schedule(_EventForwarder(folder, self._events), str(folder.path), recursive=True)
        observer.start()
        log.info(
            "watching %s", ", ".join(str(folder.path) for folder in self._config.hot_folders) or "nothing"
        )
        try:
            self._rescan()
            next_rescan = time.monotonic() + self._config.daemon.rescan_seconds
            while not stop.is_set():
                self._drain_events()
                if time.monotonic() >= next_rescan:
                    self._rescan()  # safety net for events lost on network mounts or under load
                    next_rescan = time.monotonic() + self._config.daemon.rescan_seconds
                for path in self._settled():
                    if stop.is_set():
                        break
                    self._handle(path, stop)
                stop.wait(_TICK_SECONDS)
        finally:
            observer.stop()
            observer.join(timeout=5)
            log.info("stopped: %d processed, %d failed", self.processed, self.failed)

    def _rescan(self) -> None:
        for folder in self._config.hot_folders:
            for path in sorted(folder.path.rglob("*")):
                self._events.put((folder, path))

    def _drain_events(self) -> None:
        while True:
            try:
                folder, path = self._events.get_nowait()
            except queue.Empty:
                return
            self._observe(folder, path)

    def _observe(self, folder: HotFolderConfig, path: Path) -> None:
        try:
            path.relative_to(folder.path)
        except ValueError:
            return  # moved out of the folder
        ok, reason = is_candidate(path, folder.path)
        if not ok:
            self._pending.pop(path, None)
            if reason and path not in self._refused:
                self._refused.add(path)
                log.warning("refused %s: %s", path, reason)
            return
        try:
            info = path.stat()
        except FileNotFoundError:
            self._pending.pop(path, None)
            return
        known = self._pending.get(path)
        if known is None or (known.size, known.mtime_ns) != (info.st_size, info.st_mtime_ns):
            self._pending[path] = _Pending(folder, info.st_size, info.st_mtime_ns, time.monotonic())

    def _settled(self) -> list[Path]:
        """Files whose size and mtime have not changed for the settle time (re-checked on disk)."""
        now = time.monotonic()
        ready = []
        for path, pending in list(self._pending.items()):
            self._observe(pending.folder, path)
            current = self._pending.get(path)
            if current is None:
                continue
            if current.size > 0 and now - current.stable_since >= self._config.daemon.settle_seconds:
                ready.append(path)
        return sorted(ready)

    def _handle(self, path: Path, stop: threading.Event) -> None:
        pending = self._pending.pop(path)
        folder = pending.folder
        relative = path.relative_to(folder.path)
        started = time.monotonic()
        try:
            document = self._processor.process(path, should_stop=stop.is_set)
        except InterruptedError:
            log.info("left %s in the inbox: stopping", path.name)
            return
        except DocumentError as error:
            self._fail(folder, path, relative, error.reason, error.message)
            return
        except Exception as error:  # a bug or a native failure must not stop the watcher
            log.exception("unexpected error while reading %s", path)
            self._fail(folder, path, relative, FailureReason.INTERNAL, f"{type(error).__name__}: {error}")
            return
        output_dir = folder.output_dir / relative.parent
        stem = relative.name
        if any(p.exists() for p in output_paths(output_dir, stem, self._config.outputs.formats).values()):
            stem = f"{relative.name}.{document.source.sha256[:12]}"
        try:
            written = write_outputs(document, output_dir, stem, self._config.outputs.formats)
        except OSError as error:
            self._fail(folder, path, relative, FailureReason.OUTPUT_ERROR, f"cannot write results: {error}")
            return
        archived = self._move(path, folder.archive_dir / relative)
        self.processed += 1
        log.info(
            "read %s: %d page(s), %d line(s), confidence %s, %.1f s -> %s (original in %s)",
            relative,
            len(document.pages),
            sum(len(page.lines) for page in document.pages),
            "n/a" if document.confidence is None else f"{document.confidence:.3f}",
            time.monotonic() - started,
            ", ".join(str(p) for p in written.values()),
            archived,
        )

    def _fail(
        self, folder: HotFolderConfig, path: Path, relative: Path, reason: FailureReason, message: str
    ) -> None:
        self.failed += 1
        log.error("failed %s: %s (%s)", relative, message, reason.value)
        try:
            moved = self._move(path, folder.failed_dir / relative)
        except OSError as error:
            log.error("cannot move %s to the failed folder: %s", path, error)
            return
        record = {
            "file": relative.as_posix(),
            "reason": reason.value,
            "message": message,
            "failed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        write_atomic(
            moved.with_name(moved.name + ".error.json"), (json.dumps(record, indent=1) + "\n").encode()
        )

    @staticmethod
    def _move(path: Path, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        target = _unique_path(target)
        shutil.move(str(path), target)
        return target
