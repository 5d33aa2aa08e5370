"""Review, audit sampling, the audit log, reprocessing, pause and drain on a real daemon."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.audit import verify
from appliance.config import (
    AppConfig,
    HotFolderConfig,
    IntakeConfig,
    JobsConfig,
    PathsConfig,
    ProfileConfig,
    RoutingConfig,
)
from appliance.control import (
    Control,
    DaemonState,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from appliance.journal import JobState
from appliance.workers import EngineFactory
from tests.fakes import engines as fakes
from tests.polling import DaemonThread, png_bytes, wait_for


def _config(root: Path, routing: RoutingConfig | None = None) -> AppConfig:
    folder = HotFolderConfig(
        path=root / "in",
        output_dir=root / "out",
        archive_dir=root / "archive",
        failed_dir=root / "failed",
        review_dir=root / "review",
        audit_dir=root / "audit",
    )
    profile = ProfileConfig(routing=routing or RoutingConfig(audit_rate=0.0))
    return AppConfig(
        paths=PathsConfig(state_dir=root / "state"),
        hot_folders=(folder,),
        profiles={"default": profile, "other": ProfileConfig(priority=3)},
        intake=IntakeConfig(settle_seconds=0.2, min_free_mb=0.0),
        jobs=JobsConfig(retry_backoff_seconds=0.0),
    )


class Running(DaemonThread):
    """A daemon on its own thread, with the Control the API would use."""

    def __init__(self, config: AppConfig, factory: EngineFactory) -> None:
        super().__init__(config, factory)
        self.root = config.paths.state_dir.parent
        self.control = Control(self.daemon)


@pytest.fixture
def confident(tmp_path: Path) -> Iterator[Running]:
    with Running(_config(tmp_path), fakes.fixed_text_engine) as running:
        yield running


def test_unsure_document_goes_to_review_and_a_correction_completes_it(tmp_path: Path) -> None:
    with Running(_config(tmp_path), fakes.low_confidence_receipt_engine) as running:
        (tmp_path / "in" / "receipt.png").write_bytes(png_bytes())
        assert wait_for(lambda: running.daemon.stats.review == 1)
        folders = list((tmp_path / "review").iterdir())
        assert len(folders) == 1
        folder = folders[0]
        names = sorted(path.name for path in folder.iterdir())
        assert names == ["page-001.png", "reasons.json", "receipt.png.json", "receipt.png.txt"]
        reasons = json.loads((folder / "reasons.json").read_text(encoding="utf-8"))["reasons"]
        assert any("mean character confidence 0.400" in reason for reason in reasons)
        assert not (tmp_path / "out" / "receipt.png.json").exists(), "results wait for the reviewer"
        items = running.control.list_review()
        assert [item.job.name for item in items] == ["receipt.png"]
        assert "total" in items[0].fields
        job_id = items[0].job.id
        with pytest.raises(InvalidArgumentError, match="unknown field"):
            running.control.resolve_review(job_id, {"tips": "1.00"})
        # Written whole, then moved in, as a reviewer's tool should: the desk may look at any moment.
        staged = tmp_path / "corrected.json"
        staged.write_text(json.dumps({"fields": {"total": "40.71"}}), encoding="utf-8")
        staged.replace(folder / "corrected.json")
        assert wait_for((tmp_path / "out" / "receipt.png.json").exists)
        result = json.loads((tmp_path / "out" / "receipt.png.json").read_text(encoding="utf-8"))
        assert result["fields"]["total"]["value"] == "40.71"
        assert result["routing"]["corrected"] == {"total": "40.71"}
        assert wait_for(lambda: running.daemon.journal.get(job_id).state is JobState.DONE)  # type: ignore[union-attr]
        # The review folder is removed after the job is marked done: wait for it, not for a moment.
        assert wait_for(lambda: not folder.exists())
        assert wait_for(lambda: len(list((tmp_path / "archive").rglob("receipt.png"))) == 1)
        with pytest.raises(FailedPreconditionError):
            running.control.resolve_review(job_id, {"total": "1.00"})
        dictionary = json.loads((tmp_path / "state" / "site_dictionary.json").read_text(encoding="utf-8"))
        assert dictionary["total"] == {"40.17": "40.71"}
        # The next identical reading is repaired from the dictionary.
        (tmp_path / "in" / "again.png").write_bytes(png_bytes("gray"))
        assert wait_for(lambda: running.daemon.stats.review == 2)
        again = next(item for item in running.control.list_review() if item.job.name == "again.png")
        assert again.fields["total"]["value"] == "40.71"
        assert "site.dictionary" in again.fields["total"]["rules"]
    result = verify(tmp_path / "state" / "audit.jsonl")
    assert result.ok
    assert result.entries == 3  # review, its resolution, the second review


def test_audit_sample_is_copied_and_logged(tmp_path: Path) -> None:
    with Running(_config(tmp_path, RoutingConfig(audit_rate=1.0)), fakes.fixed_text_engine) as running:
        (tmp_path / "in" / "a.png").write_bytes(png_bytes())
        assert wait_for(lambda: running.daemon.stats.done == 1)
        assert (tmp_path / "out" / "a.png.json").exists()
        audit = tmp_path / "audit"
        audited = lambda: sorted(p.name for p in audit.iterdir()) if audit.is_dir() else []  # noqa: E731
        assert wait_for(lambda: audited() == ["a.png.json", "a.png.txt"]), audited()
        job = running.daemon.journal.jobs()[0]
        assert "sampled for audit" in (job.reason or "")
    entries = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert entries[0]["record"]["route"] == "audit"
    assert entries[0]["record"]["outputs"]["json"]["sha256"]


def test_status_metrics_and_job_detail(confident: Running) -> None:
    (confident.root / "in" / "a.png").write_bytes(png_bytes())
    assert wait_for(lambda: confident.daemon.stats.done == 1)
    status = confident.control.status()
    assert status.state is DaemonState.RUNNING
    assert status.queue["done"] == 1
    assert status.workers == 1
    assert status.pages_per_second["1m"] > 0
    assert status.engines[0].name == "fake_fixed"
    detail = confident.control.get_job(confident.daemon.journal.jobs()[0].id)
    assert [t.to_state for t in detail.transitions] == [JobState.QUEUED, JobState.RUNNING, JobState.DONE]
    assert detail.route == "done"
    assert detail.page_timings_ms and "det" in detail.page_timings_ms[0]
    assert confident.control.metrics()["done_total"] == 1.0
    with pytest.raises(NotFoundError):
        confident.control.get_job("nope")


def test_pause_holds_files_and_resume_reads_them(confident: Running) -> None:
    assert confident.control.pause() is DaemonState.PAUSED
    (confident.root / "in" / "held.png").write_bytes(png_bytes())
    time.sleep(1.0)
    assert (confident.root / "in" / "held.png").exists()
    assert confident.control.status().state is DaemonState.PAUSED
    assert confident.control.resume() is DaemonState.RUNNING
    assert wait_for((confident.root / "out" / "held.png.json").exists)


def test_reprocess_reads_the_archived_original_again(confident: Running) -> None:
    (confident.root / "in" / "a.png").write_bytes(png_bytes())
    assert wait_for(lambda: confident.daemon.stats.done == 1)
    first = confident.daemon.journal.jobs()[0]
    with pytest.raises(InvalidArgumentError):
        confident.control.reprocess()
    with pytest.raises(InvalidArgumentError, match="unknown profile"):
        confident.control.reprocess(job_id=first.id, profile="nope")
    again = confident.control.reprocess(sha256=first.sha256, profile="other")
    assert again.id != first.id and again.profile == "other" and again.priority == 3
    assert wait_for(lambda: confident.daemon.stats.done == 2)
    assert confident.daemon.journal.get(again.id).reason.startswith("read 1 page")  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        confident.control.reprocess(job_id="0" * 32)


def test_drain_finishes_and_stops(confident: Running) -> None:
    (confident.root / "in" / "a.png").write_bytes(png_bytes())
    assert wait_for(lambda: confident.daemon.stats.done == 1)
    assert confident.control.drain() is DaemonState.DRAINING
    confident.thread.join(timeout=30)
    assert not confident.thread.is_alive(), "a drained daemon with nothing running stops by itself"
    with pytest.raises(FailedPreconditionError):
        confident.control.pause()


def test_reprocess_of_a_deleted_original_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config = config.model_copy(update={"intake": config.intake.model_copy(update={"originals": "delete"})})
    with Running(config, fakes.fixed_text_engine) as running:
        (tmp_path / "in" / "a.png").write_bytes(png_bytes())
        assert wait_for(lambda: running.daemon.stats.done == 1)
        job: Any = running.daemon.journal.jobs()[0]
        with pytest.raises(FailedPreconditionError, match="no longer archived"):
            running.control.reprocess(job_id=job.id)
