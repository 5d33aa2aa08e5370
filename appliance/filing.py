"""Where a job's results, its archived original and a failed file (with its reason) go."""

from __future__ import annotations

import collections
import contextlib
import grp
import json
import logging
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import jsonschema

from appliance.config import AppConfig, HotFolderConfig, OutputFormat
from appliance.errors import FailureReason
from appliance.journal import Job, JobJournal, JobState
from appliance.names import NAME_MAX, display, fit_name, name_bytes
from appliance.outputs.atomic import fsync_directory, write_atomic
from appliance.outputs.reissue import reissue
from appliance.outputs.writer import output_paths
from appliance.systemd import event

log = logging.getLogger(__name__)

# Bytes the longest result suffix (".alto.xml") adds to a stem: a stem is cut to leave room for it.
_RESULT_SUFFIX_BYTES = max(
    name_bytes(path.name) for path in output_paths(Path(), "", get_args(OutputFormat)).values()
)
_REASON_SUFFIX = ".error.json"
# A "suffix" longer than this is most of a name ("a.<240 bytes>"), not an extension to keep.
_MAX_SUFFIX_BYTES = 32


def unique_path(path: Path) -> Path:
    """`path`, or `name-1.ext`, `name-2.ext`... if taken: an earlier file is never overwritten.

    A counter that would take a long name past NAME_MAX shortens its stem instead (fit_name).
    """
    stem, suffix = path.stem, path.suffix
    if name_bytes(suffix) > _MAX_SUFFIX_BYTES:
        stem, suffix = path.name, ""
    candidate, counter = path, 0
    while candidate.exists():
        counter += 1
        candidate = path.with_name(fit_name(stem, f"-{counter}{suffix}"))
    return candidate


def reason_path(target: Path) -> Path:
    """Where the reason for `target` (a file in failed/) goes: `NAME.error.json`, cut to fit NAME_MAX."""
    return target.with_name(fit_name(target.name, _REASON_SUFFIX))


def result_stem(name: str, tag: str = "") -> str:
    """The stem of `name`'s results (`name` + `tag`), cut so that every result suffix fits NAME_MAX.

    A cut stem keeps a prefix and a hash of the full name; the JSON result's source name keeps
    the whole name.
    """
    return fit_name(name, tag, limit=NAME_MAX - _RESULT_SUFFIX_BYTES)


def move_file(source: Path, target: Path) -> Path:
    """Move `source` to `target`, or beside it under a free name (unique_path); the move is synced."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target = unique_path(target)
    shutil.move(str(source), target)
    fsync_directory(target.parent)
    return target


class Filing:
    """Output locations, archive targets, failed files and their reasons, duplicates issued again.

    Every method runs on the daemon's loop thread; `reconfigure` takes a reloaded configuration.
    """

    def __init__(
        self, config: AppConfig, journal: JobJournal, recent_errors: collections.deque[dict[str, Any]]
    ) -> None:
        self._journal = journal
        self._recent_errors = recent_errors
        # Jobs claimed from a folder a reload removed still finish into its old folders.
        self._folder_by_source: dict[str, HotFolderConfig] = {}
        self.reconfigure(config)

    def reconfigure(self, config: AppConfig) -> None:
        self._config = config
        self._folder_by_source.update({str(folder.path): folder for folder in config.hot_folders})
        self.output_gid = grp.getgrnam(config.outputs.group).gr_gid if config.outputs.group else None
        self.output_mode = int(config.outputs.mode, 8)

    def sources(self) -> list[str]:
        """Every hot folder this appliance has settings for (also ones a reload removed since)."""
        return sorted(self._folder_by_source)

    def folder_for(self, source_folder: str) -> HotFolderConfig | None:
        """The hot folder a job came from, also one a reload removed since; None if never known."""
        return self._folder_by_source.get(source_folder)

    def output_location(self, job: Job, folder: HotFolderConfig) -> tuple[Path, str]:
        """Output folder and file stem for a job: deterministic, so a retried job overwrites its own.

        The stem is the original name unless results of *other* content already carry it; then the
        content hash is added (`scan.pdf.3f2a9c1b0d4e.json`). A result of the same content (this job
        interrupted by a crash, or a duplicate) is simply replaced.
        """
        relative = Path(job.relative_path)
        output_dir = folder.output_dir / relative.parent
        stem = result_stem(relative.name)
        formats = self._config.formats_for(job.profile)
        existing = [path for path in output_paths(output_dir, stem, formats).values() if path.exists()]
        if existing:
            json_path = output_dir / f"{stem}.json"
            try:
                same = json.loads(json_path.read_text(encoding="utf-8"))["source"]["sha256"] == job.sha256
            except (OSError, ValueError, KeyError, TypeError):
                same = False
            if not same:
                stem = result_stem(relative.name, f".{job.sha256[:12]}")
        return output_dir, stem

    @staticmethod
    def review_dir(folder: HotFolderConfig) -> Path:
        return folder.review_dir or folder.output_dir.parent / "review"

    @staticmethod
    def audit_dir(folder: HotFolderConfig) -> Path:
        return folder.audit_dir or folder.output_dir.parent / "audit"

    def archive_target(self, job: Job) -> Path | None:
        """Where a done job's original will be archived (None when originals are deleted)."""
        folder = self._folder_by_source.get(job.source_folder)
        if folder is None or self._config.intake.originals == "delete":
            return None
        month = datetime.now(UTC).strftime("%Y/%m")
        return unique_path(folder.archive_dir / month / job.relative_path)

    def apply_group(self, path: Path) -> None:
        if self.output_gid is not None:
            shutil.chown(path, group=self.output_gid)

    # -- failed files -------------------------------------------------------------------------------

    def write_reason(
        self, target: Path, relative: Path, reason: FailureReason, message: str, job: Job | None = None
    ) -> None:
        # Names shown escaped (valid UTF-8 JSON); `file` is the full name even when the reason
        # file's own name had to be cut to fit NAME_MAX.
        record = {
            "file": display(relative.as_posix()),
            "reason": reason.value,
            "message": display(message),
            "failed_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "job_id": job.id if job else None,
            "sha256": job.sha256 if job else None,
            "attempts": job.attempts if job else 0,
        }
        write_atomic(reason_path(target), (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode())

    def write_reason_logged(
        self, target: Path, relative: Path, reason: FailureReason, message: str, job: Job | None = None
    ) -> None:
        """write_reason, with a fault said rather than raised: the file is already where it belongs."""
        try:
            self.write_reason(target, relative, reason, message, job)
        except Exception:
            log.exception("cannot write the reason file for %s (%s: %s)", target, reason.value, message)

    def withdraw_reason(self, target: Path) -> None:
        """Remove the reason file written for `target` (a file that was complete after all)."""
        with contextlib.suppress(FileNotFoundError):
            reason_path(target).unlink()

    def fail_file(self, path: Path, folder: HotFolderConfig, reason: FailureReason, message: str) -> Path:
        """Move a file of a hot folder to its failed/ folder, with its reason; a failed move raises."""
        relative = path.relative_to(folder.path)
        moved = move_file(path, folder.failed_dir / relative)
        self.write_reason_logged(moved, relative, reason, message)
        return moved

    # -- finished jobs ------------------------------------------------------------------------------

    def settle_finished(self, job: Job) -> None:
        """Move a finished job's original out of the spool; a fault here is said, never raised.

        The journal already holds the outcome, so a file left in the spool by a failed move is
        moved at the next start (spool reconciliation).
        """
        try:
            self._settle(job)
        except Exception as error:
            message = (
                f"cannot move the original of job {job.id} ({job.relative_path}) out of the spool: {error}"
            )
            log.error("%s; it is moved at the next start", message, exc_info=error)
            self._recent_errors.append({"at": time.time(), "job_id": job.id, "message": display(message)})

    def _settle(self, job: Job) -> None:
        """Move a finished job's original out of the spool: archived, deleted, or to failed/."""
        spool_file = Path(job.spool_path)
        folder = self._folder_by_source.get(job.source_folder)
        if not spool_file.exists() or folder is None:
            return
        relative = Path(job.relative_path)
        if job.state is JobState.REVIEW:
            return  # the original waits in the spool until a person resolves the review
        if job.state is JobState.FAILED:
            moved = move_file(spool_file, folder.failed_dir / relative)
            failure = job.failure or FailureReason.INTERNAL
            self.write_reason_logged(moved, relative, failure, job.reason or "", job)
        elif self._config.intake.originals == "delete":
            spool_file.unlink()
        else:
            recorded = job.outputs.get("original")
            target = Path(recorded) if recorded else self.archive_target(job)
            if target is not None:
                move_file(spool_file, target)
        shutil.rmtree(spool_file.parent, ignore_errors=True)

    def reissue_if_duplicate(self, job: Job) -> bool:
        """The same content read before: issue the earlier result again instead of reading it twice.

        True when it was issued again (the job is then done and its original settled).
        """
        if self._config.intake.reprocess_duplicates:
            return False
        earlier = self._journal.find_done_by_sha256(job.sha256)
        if earlier is None or earlier.id == job.id:
            return False
        stored = earlier.outputs.get("json")
        if not stored or not Path(stored).is_file():
            return False  # no stored result to issue again: read it again
        folder = self._folder_by_source[job.source_folder]
        output_dir, stem = self.output_location(job, folder)
        # Under the new file's name, in every format the profile asks for now, rendered from the
        # stored result (the searchable PDF from this file's own pages: the same bytes).
        try:
            targets = reissue(
                Path(stored),
                Path(job.spool_path),
                name=job.name,
                source_path=str(folder.path / job.relative_path),
                output_dir=output_dir,
                stem=stem,
                formats=self._config.formats_for(job.profile),
                mode=self.output_mode,
            )
        except (OSError, ValueError, KeyError, TypeError, jsonschema.ValidationError) as error:
            log.warning(
                "%s: the result of job %s cannot be issued again (%s); reading it",
                job.name,
                earlier.id,
                error,
            )
            return False
        for target in targets.values():
            self.apply_group(target)
        finished = self._journal.finish(
            job.id,
            JobState.DONE,
            f"duplicate of job {earlier.id}: its result was issued again",
            {fmt: str(path) for fmt, path in targets.items()},
            duplicate_of=earlier.id,
        )
        log.info(
            "%s is a duplicate of job %s: result issued again",
            job.relative_path,
            earlier.id,
            extra=event("job_done", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="duplicate", ROUTE="done"),
        )
        self.settle_finished(finished)
        return True
