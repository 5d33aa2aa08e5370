"""The review desk: documents waiting for a person, their corrections, and resolving them."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from appliance.control import (
    ControlError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ReviewItem,
)
from appliance.filing import Filing
from appliance.journal import Job, JobJournal, JobState
from appliance.names import display_all
from appliance.outputs.atomic import write_atomic
from appliance.outputs.writer import output_paths
from appliance.review import (
    CORRECTED_FILE,
    REASONS_FILE,
    SiteDictionary,
    apply_correction,
    parse_correction,
)
from appliance.status import DaemonStats
from appliance.systemd import event

log = logging.getLogger(__name__)

# At most this many reviews are listed and checked in one go.
_REVIEW_PAGE = 1000


class ReviewDesk:
    """Sends documents to review, lists them, and completes them with a reviewer's corrections.

    Runs on the daemon's loop thread (the API's commands reach it through call_soon).
    """

    def __init__(
        self,
        journal: JobJournal,
        filing: Filing,
        site_dictionary: SiteDictionary,
        stats: DaemonStats,
    ) -> None:
        self._journal = journal
        self._filing = filing
        self._site_dictionary = site_dictionary
        self._stats = stats

    def send(
        self,
        job: Job,
        reasons: list[str],
        outputs: dict[str, str],
        audit: dict[str, Any] | None,
        confidence: str,
    ) -> None:
        """Record a read document as waiting for review, with its audit entry; its original stays spooled."""
        joined = "; ".join(reasons)
        self._journal.finish(job.id, JobState.REVIEW, f"review: {joined}", outputs, audit=audit)
        self._stats.review += 1
        log.warning(
            "review %s: %s (confidence %s)",
            job.relative_path,
            joined,
            confidence,
            extra=event("job_done", JOB_ID=job.id, DOC_SHA256=job.sha256, STAGE="route", ROUTE="review"),
        )

    def items(self) -> list[ReviewItem]:
        items = []
        for job in self._journal.jobs(JobState.REVIEW, limit=_REVIEW_PAGE):
            folder = Path(job.outputs["json"]).parent if "json" in job.outputs else None
            reasons: list[str] = []
            fields: dict[str, Any] = {}
            if folder is not None:
                with contextlib.suppress(OSError, ValueError):
                    reasons = json.loads((folder / REASONS_FILE).read_text(encoding="utf-8"))["reasons"]
                with contextlib.suppress(OSError, ValueError):
                    fields = json.loads(Path(job.outputs["json"]).read_text(encoding="utf-8")).get(
                        "fields", {}
                    )
            items.append(ReviewItem(job, str(folder or ""), reasons, fields))
        return items

    def check_corrections(self) -> None:
        """Resolve reviews whose folder received a corrected.json."""
        for job in self._journal.jobs(JobState.REVIEW, limit=_REVIEW_PAGE):
            if "json" not in job.outputs:
                continue
            corrected = Path(job.outputs["json"]).parent / CORRECTED_FILE
            taken = _take(corrected)
            if taken is None:
                continue
            try:
                correction = parse_correction(json.loads(taken.read_text(encoding="utf-8")))
                self.resolve(job.id, correction.get("fields", {}), correction.get("text"))
            except (ValueError, ControlError) as error:
                try:
                    rejected = corrected.with_name(CORRECTED_FILE + ".rejected")
                    taken.replace(rejected)
                    write_atomic(rejected.with_name("rejected.txt"), f"{error}\n".encode())
                    log.error("correction for %s refused: %s", job.relative_path, error)
                except OSError:
                    log.exception(
                        "correction for %s refused (%s), and cannot say so in its folder", job.id, error
                    )
            except Exception:  # one review's fault must not stop the daemon
                log.exception("cannot resolve the review of job %s (%s)", job.id, job.relative_path)
                with contextlib.suppress(OSError):
                    taken.replace(corrected)  # given back: tried again at the next check

    def resolve(self, job_id: str, fields: dict[str, str], text: str | None = None) -> Job:
        """Complete a reviewed document with the reviewer's corrections; results go to the output folder."""
        job = self._journal.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}")
        if job.state is not JobState.REVIEW:
            raise FailedPreconditionError(f"job {job_id} is {job.state}, not waiting for review")
        folder_config = self._filing.folder_for(job.source_folder)
        if folder_config is None or "json" not in job.outputs:
            raise FailedPreconditionError(f"job {job_id} has no reviewable result (its hot folder is gone)")
        review_json = Path(job.outputs["json"])
        result = json.loads(review_json.read_text(encoding="utf-8"))
        try:
            corrected = apply_correction(result, fields, text)
        except ValueError as error:
            raise InvalidArgumentError(str(error)) from None
        output_dir, stem = self._filing.output_location(job, folder_config)
        targets = output_paths(output_dir, stem, [fmt for fmt in job.outputs if fmt != "original"])
        outputs: dict[str, str] = {}
        for fmt, target in targets.items():
            source = Path(job.outputs[fmt])
            data = (
                (json.dumps(corrected, ensure_ascii=False, indent=1) + "\n").encode()
                if fmt == "json"
                else (corrected["text"] + "\n").encode()
                if fmt == "text" and text is not None
                else source.read_bytes()
            )
            write_atomic(target, data, self._filing.output_mode)
            self._filing.apply_group(target)
            outputs[fmt] = str(target)
        self._site_dictionary.learn(result, fields)
        original = self._filing.archive_target(job)
        if original is not None:
            outputs["original"] = str(original)
        finished = self._journal.finish(
            job_id,
            JobState.DONE,
            f"review resolved: {len(fields)} field(s) corrected",
            outputs,
            audit=display_all(
                {
                    "job_id": job_id,
                    "document": {"name": job.name, "sha256": job.sha256},
                    "route": "review",
                    "resolution": "done",
                    "corrected_fields": dict(fields),
                    "text_corrected": text is not None,
                    "outputs": outputs,
                }
            ),
        )
        self._filing.settle_finished(finished)
        shutil.rmtree(review_json.parent, ignore_errors=True)
        self._stats.done += 1
        log.info(
            "review of %s resolved", job.relative_path, extra=event("job_done", JOB_ID=job_id, ROUTE="done")
        )
        return finished


# A correction being applied is renamed first: nodes sharing a journal all look at the review
# folders, and a rename succeeds for one of them only. One left taken by a node that died while
# applying it is taken over after this long.
_TAKEN_SUFFIX = ".taken"
_TAKEN_STALE_SECONDS = 300.0


def _take(corrected: Path) -> Path | None:
    """The correction file, renamed so that no other node applies it too; None if there is none."""
    taken = corrected.with_name(corrected.name + _TAKEN_SUFFIX)
    try:
        corrected.rename(taken)
        return taken
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        # ctime: the rename that took it set it (a rename keeps the reviewer's mtime).
        if time.time() - taken.stat().st_ctime > _TAKEN_STALE_SECONDS:
            return taken  # its taker died before finishing
    except OSError:
        pass
    return None
