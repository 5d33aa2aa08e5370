"""The daemon's claims under real writers and real mounts: open writers, EXDEV, files it cannot take."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from PIL.TiffImagePlugin import AppendingTiffWriter

from appliance.intake import claim as claim_module
from appliance.intake import hot_folders
from appliance.intake.claim import Claimed
from appliance.intake.lease import ReadLease, WriterActiveError
from appliance.intake.stability import FileStabilityTracker
from appliance.journal import JobState
from tests.polling import png_bytes, wait_for
from tests.test_daemon import Running, _config


def _rename_from(inbox: Path, monkeypatch: pytest.MonkeyPatch, code: Callable[[], int | None]) -> list[str]:
    """rename() out of `inbox` fails with errno `code()` (none: it works); returns the tries."""
    real_rename = os.rename
    tried: list[str] = []

    def rename(src: object, dst: object, *args: object, **kwargs: object) -> None:
        if Path(str(src)).parent == inbox:
            tried.append(str(src))
            failure = code()
            if failure is not None:
                raise OSError(failure, os.strerror(failure), str(src), None, str(dst))
        real_rename(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(claim_module.os, "rename", rename)
    return tried


def _write_tiff_page_by_page(target: Path, pause: Callable[[], None]) -> bytes:
    """Write a 3-page TIFF into `target` a page at a time, held open throughout; `pause` after each."""
    pages = [Image.new("RGB", (320, 200), colour) for colour in ("white", "gainsboro", "lightgray")]
    with target.open("w+b") as handle:
        with AppendingTiffWriter(handle) as writer:
            for page in pages:
                page.save(writer, format="TIFF")
                writer.newFrame()
                handle.flush()
                pause()
        handle.seek(0)
        return handle.read()


def test_exdev_at_the_rename_is_claimed_by_copy_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ProtectSystem=strict the inbox and the spool are separate mounts: rename gives EXDEV."""
    config = _config(tmp_path)
    inbox = config.hot_folders[0].path
    inbox.mkdir(parents=True)
    tried = _rename_from(inbox, monkeypatch, lambda: errno.EXDEV)
    data = png_bytes()
    with Running(config) as running:
        (inbox / "scan.png").write_bytes(data)
        assert wait_for(lambda: running.daemon.stats.done == 1)
        (job,) = running.daemon.journal.jobs()
        assert job.state is JobState.DONE
        assert (job.size, job.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        result = json.loads((running.folders.out / "scan.png.json").read_text(encoding="utf-8"))
        assert result["text"] == "INVOICE 42"
    assert tried == [str(inbox / "scan.png")]
    assert not (inbox / "scan.png").exists()


@pytest.mark.parametrize("where", ["rename", "read"])
def test_a_file_that_cannot_be_claimed_is_reported_once_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """Permission denied on the move into the spool, or on reading the file at all (as a non-root service)."""
    monkeypatch.setattr(hot_folders, "_CLAIM_RETRY_SECONDS", 0.1)
    config = _config(tmp_path, intake={"rescan_seconds": 0.2})
    inbox = config.hot_folders[0].path
    inbox.mkdir(parents=True)
    denied = [True]
    if where == "rename":
        tried = _rename_from(inbox, monkeypatch, lambda: errno.EACCES if denied[0] else None)
    else:
        tried = []
        real_check = hot_folders.check_complete

        def check_complete(path: Path) -> object:
            if path.parent == inbox and denied[0]:
                tried.append(str(path))
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real_check(path)

        monkeypatch.setattr(hot_folders, "check_complete", check_complete)
    caplog.set_level(logging.ERROR, logger="appliance.daemon")
    with Running(config) as running:
        (inbox / "scan.png").write_bytes(png_bytes())
        assert wait_for(lambda: len(tried) >= 4), "tried again at later rescans"
        assert (inbox / "scan.png").exists(), "it stays where it is"
        said = [record for record in caplog.records if "scan.png" in record.getMessage()]
        assert len(said) == 1, "the reason is logged once, not at every rescan"
        assert "Permission denied" in said[0].getMessage()
        errors = list(running.daemon.recent_errors)
        assert [error["message"] for error in errors] == [said[0].getMessage()]
        assert running.daemon.metrics()["intake_unclaimable"] == 1.0
        assert running.daemon.stats.claimed == 0
        denied[0] = False  # someone fixed the permissions
        assert wait_for(lambda: running.daemon.stats.done == 1)
        assert running.daemon.metrics()["intake_unclaimable"] == 0.0
    assert not (inbox / "scan.png").exists()


def test_a_tiff_written_page_by_page_is_claimed_only_after_its_writer_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page leaves a valid TIFF, and the writer pauses longer than the settle time between pages."""
    real_claim = hot_folders.claim
    refused: list[float] = []
    claims: list[Claimed] = []

    def claim(path: Path, hot_folder: Path, spool_dir: Path) -> Claimed:
        try:
            claimed = real_claim(path, hot_folder, spool_dir)
        except WriterActiveError:
            refused.append(time.monotonic())
            raise
        claims.append(claimed)
        return claimed

    monkeypatch.setattr(hot_folders, "claim", claim)
    # The lease alone: inotify's view of writes and closes (the other guard, below) switched off.
    monkeypatch.setattr(hot_folders, "reports_writer_closes", lambda observer: False)
    config = _config(tmp_path)  # settle_seconds 0.3
    with Running(config) as running:
        target = running.folders.inbox / "multi.tif"

        def pause() -> None:
            # Until the daemon has found this prefix settled and complete, and tried.
            seen = len(refused)
            assert wait_for(lambda: len(refused) > seen or bool(claims), timeout=20)
            assert claims == [], "claimed while its writer still had it open"

        written = _write_tiff_page_by_page(target, pause)
        closed_at = time.time()
        assert wait_for(lambda: running.daemon.stats.done == 1)
        assert not target.exists()
        (job,) = running.daemon.journal.jobs()
        assert job.created_at >= closed_at
        assert (job.size, job.sha256) == (len(written), hashlib.sha256(written).hexdigest())
        (archived,) = running.archived("multi.tif")
        assert archived.read_bytes() == written
        with Image.open(archived) as image:
            assert image.n_frames == 3
        assert len(refused) >= 3


def test_without_leases_inotify_holds_a_page_by_page_tiff_until_its_writer_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox's files belong to another user (a scanner's share): no lease, but inotify sees writes."""
    monkeypatch.setattr(
        claim_module, "take_read_lease", lambda fd: ReadLease(fd, held=False, unavailable="not the owner")
    )
    real_being_written = FileStabilityTracker.being_written
    held: list[float] = []  # when a settled-looking file was held back for its open writer

    def being_written(self: FileStabilityTracker, path: Path) -> bool:
        result: bool = real_being_written(self, path)
        if result:
            held.append(time.monotonic())
        return result

    monkeypatch.setattr(FileStabilityTracker, "being_written", being_written)
    real_claim = hot_folders.claim
    claims: list[Claimed] = []

    def claim(path: Path, hot_folder: Path, spool_dir: Path) -> Claimed:
        claimed = real_claim(path, hot_folder, spool_dir)
        claims.append(claimed)
        return claimed

    monkeypatch.setattr(hot_folders, "claim", claim)
    with Running(_config(tmp_path)) as running:
        target = running.folders.inbox / "multi.tif"

        def pause() -> None:
            # Until the settle time has passed since this page and the file was held.
            written_at = time.monotonic()
            assert wait_for(lambda: any(at > written_at for at in held) or bool(claims), timeout=20)
            assert claims == [], "claimed while its writer still had it open"

        written = _write_tiff_page_by_page(target, pause)
        assert wait_for(lambda: running.daemon.stats.done == 1)
        (job,) = running.daemon.journal.jobs()
        assert (job.size, job.sha256) == (len(written), hashlib.sha256(written).hexdigest())
    assert claims[0].writer_check_unavailable == "not the owner"
