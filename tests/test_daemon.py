"""The daemon with real files, real inotify, real SQLite and real worker processes.

Engines are fakes from tests/fakes (instant, or failing on purpose on blue pages) so that
these tests are about intake, the journal and the workers, not about OCR.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from PIL import Image

from appliance import daemon as daemon_module
from appliance.api import convert
from appliance.config import AppConfig, HotFolderConfig, IntakeConfig, JobsConfig, PathsConfig
from appliance.daemon import Daemon
from appliance.errors import ModelError
from appliance.intake import hot_folders
from appliance.intake.claim import claim
from appliance.journal import JobState, Journal
from appliance.workers import EngineFactory
from tests.fakes import engines as fakes
from tests.polling import DaemonThread, jpeg_bytes, png_bytes, process_gone, wait_for


class Folders(NamedTuple):
    inbox: Path
    out: Path
    archive: Path
    failed: Path
    state: Path


def _config(
    root: Path, intake: dict[str, Any] | None = None, jobs: dict[str, Any] | None = None
) -> AppConfig:
    folder = HotFolderConfig(
        path=root / "in", output_dir=root / "out", archive_dir=root / "archive", failed_dir=root / "failed"
    )
    return AppConfig(
        paths=PathsConfig(state_dir=root / "state"),
        hot_folders=(folder,),
        intake=IntakeConfig(**{"settle_seconds": 0.3, "min_free_mb": 0.0, **(intake or {})}),
        jobs=JobsConfig(**{"retry_backoff_seconds": 0.0, **(jobs or {})}),
    )


class Running(DaemonThread):
    """A daemon on its own thread, with its folders at hand."""

    def __init__(
        self,
        config: AppConfig,
        factory: EngineFactory = fakes.fixed_text_engine,
        factory_for: Callable[[AppConfig], EngineFactory] | None = None,
    ) -> None:
        super().__init__(config, factory, factory_for)
        folder = config.hot_folders[0]
        self.folders = Folders(
            folder.path, folder.output_dir, folder.archive_dir, folder.failed_dir, config.paths.state_dir
        )

    def archived(self, name: str) -> list[Path]:
        return list(self.folders.archive.glob(f"*/*/{name}"))


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    with Running(_config(tmp_path)) as daemon:
        yield daemon


def test_dropped_file_is_read_once_journalled_and_archived(running: Running) -> None:
    (running.folders.inbox / "scan.png").write_bytes(png_bytes())
    result = running.folders.out / "scan.png.json"
    # Every output is in place once the job is done (the JSON is written first, the text after).
    assert wait_for(lambda: running.daemon.stats.done == 1)
    assert json.loads(result.read_text(encoding="utf-8"))["text"] == "INVOICE 42"
    assert (running.folders.out / "scan.png.txt").read_text(encoding="utf-8") == "INVOICE 42\n"
    assert wait_for(lambda: len(running.archived("scan.png")) == 1)
    assert not (running.folders.inbox / "scan.png").exists()
    time.sleep(0.8)  # more ticks: nothing is read twice
    assert running.daemon.stats.done == 1
    job = running.daemon.journal.jobs()[0]
    assert job.state is JobState.DONE
    assert job.outputs["json"] == str(result)
    assert job.relative_path == "scan.png"
    assert [t.to_state for t in running.daemon.journal.transitions(job.id)] == [
        JobState.QUEUED,
        JobState.RUNNING,
        JobState.DONE,
    ]
    assert wait_for(lambda: list((running.folders.state / "spool").iterdir()) == [])


def test_subfolders_are_mirrored(running: Running) -> None:
    (running.folders.inbox / "branch-7").mkdir()
    (running.folders.inbox / "branch-7" / "a.png").write_bytes(png_bytes())
    assert wait_for((running.folders.out / "branch-7" / "a.png.json").exists)
    assert wait_for(lambda: len(list(running.folders.archive.glob("*/*/branch-7/a.png"))) == 1)


def test_slow_writer_is_never_read_early(running: Running) -> None:
    """A JPEG written in chunks with pauses shorter than the settle time is read once, whole."""
    data = jpeg_bytes(size=(1200, 1200))
    target = running.folders.inbox / "slow.jpg"
    chunk = max(1, len(data) // 10)
    with target.open("wb") as handle:
        for start in range(0, len(data), chunk):
            handle.write(data[start : start + chunk])
            handle.flush()
            time.sleep(0.2)
    assert wait_for((running.folders.out / "slow.jpg.json").exists)
    result = json.loads((running.folders.out / "slow.jpg.json").read_text(encoding="utf-8"))
    assert result["source"]["size"] == len(data)
    assert wait_for(lambda: running.daemon.stats.done == 1)
    assert running.daemon.stats.failed == 0


def test_scanner_that_creates_an_empty_file_then_writes(running: Running) -> None:
    target = running.folders.inbox / "scan.jpg"
    target.touch()
    time.sleep(1.0)  # well past the settle time: an empty file is never taken
    assert target.exists()
    assert running.daemon.stats.claimed == 0
    target.write_bytes(jpeg_bytes())
    assert wait_for((running.folders.out / "scan.jpg.json").exists)


def test_paused_writer_is_reported_incomplete_then_taken_when_complete(tmp_path: Path) -> None:
    with Running(_config(tmp_path, intake={"incomplete_timeout_seconds": 1.0})) as running:
        data = jpeg_bytes()
        target = running.folders.inbox / "half.jpg"
        target.write_bytes(data[: len(data) // 2])
        reason_file = running.folders.failed / "half.jpg.error.json"
        assert wait_for(reason_file.exists)
        assert json.loads(reason_file.read_text(encoding="utf-8"))["reason"] == "incomplete"
        assert target.exists(), "an incomplete file stays where its writer may still be writing"
        with target.open("ab") as handle:
            handle.write(data[len(data) // 2 :])
        assert wait_for((running.folders.out / "half.jpg.json").exists)
        assert not reason_file.exists()


def test_temporary_name_then_rename(running: Running) -> None:
    temporary = running.folders.inbox / "upload.png.tmp"
    temporary.write_bytes(png_bytes())
    time.sleep(0.8)
    assert temporary.exists()
    temporary.rename(running.folders.inbox / "upload.png")
    assert wait_for((running.folders.out / "upload.png.json").exists)


def test_junk_names_are_left_alone(running: Running) -> None:
    junk = (".hidden.png", "~$lock.png", "Thumbs.db", "part.pdf.part", "x.crdownload")
    for name in junk:
        (running.folders.inbox / name).write_bytes(png_bytes())
    (running.folders.inbox / "@eaDir").mkdir()
    (running.folders.inbox / "@eaDir" / "meta.png").write_bytes(png_bytes())
    (running.folders.inbox / "real.png").write_bytes(png_bytes())
    assert wait_for((running.folders.out / "real.png.json").exists)
    time.sleep(0.5)
    for name in junk:
        assert (running.folders.inbox / name).exists()
    assert running.daemon.stats.claimed == 1


def test_symlink_and_fifo_are_refused(
    running: Running, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import os

    caplog.set_level(logging.WARNING, logger="appliance.daemon")
    (running.folders.inbox / "passwd.png").symlink_to("/etc/passwd")
    os.mkfifo(running.folders.inbox / "pipe.png")
    assert wait_for(
        lambda: "symbolic links are not followed" in caplog.text and "not a regular file" in caplog.text
    )
    time.sleep(0.5)
    assert running.daemon.stats.claimed == 0
    assert (running.folders.inbox / "passwd.png").is_symlink()


def test_file_that_vanishes_before_it_is_claimed(running: Running) -> None:
    target = running.folders.inbox / "gone.png"
    target.write_bytes(png_bytes())
    target.unlink()
    (running.folders.inbox / "next.png").write_bytes(png_bytes())
    assert wait_for((running.folders.out / "next.png.json").exists)
    assert running.daemon.stats.failed == 0


def test_unreadable_file_goes_to_failed_and_the_daemon_goes_on(running: Running) -> None:
    """A complete file (start and end markers in place) whose content is garbage."""
    garbage = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 20 + b"\xff\xd9"
    (running.folders.inbox / "broken.jpg").write_bytes(garbage)
    reason_file = running.folders.failed / "broken.jpg.error.json"
    assert wait_for(reason_file.exists)
    reason = json.loads(reason_file.read_text(encoding="utf-8"))
    assert reason["reason"] == "corrupt"
    assert reason["file"] == "broken.jpg"
    assert reason["attempts"] == 1
    assert (running.folders.failed / "broken.jpg").read_bytes() == garbage
    (running.folders.inbox / "after.png").write_bytes(png_bytes())
    assert wait_for((running.folders.out / "after.png.json").exists)


def test_engine_exception_fails_only_that_file(tmp_path: Path) -> None:
    with Running(_config(tmp_path), fakes.crashing_engine) as running:
        (running.folders.inbox / "poison.png").write_bytes(png_bytes(colour="blue"))
        assert wait_for((running.folders.failed / "poison.png.error.json").exists)
        reason = json.loads((running.folders.failed / "poison.png.error.json").read_text(encoding="utf-8"))
        assert reason["reason"] == "internal"
        assert "native code failed" in reason["message"]
        (running.folders.inbox / "fine.png").write_bytes(png_bytes())
        assert wait_for((running.folders.out / "fine.png.json").exists)


def test_worker_that_aborts_is_replaced_and_the_file_failed_as_poison(tmp_path: Path) -> None:
    with Running(_config(tmp_path, jobs={"max_attempts": 2}), fakes.aborting_engine) as running:
        (running.folders.inbox / "segv.png").write_bytes(png_bytes(colour="blue"))
        reason_file = running.folders.failed / "segv.png.error.json"
        assert wait_for(reason_file.exists, timeout=40)
        reason = json.loads(reason_file.read_text(encoding="utf-8"))
        assert reason["reason"] == "poison"
        assert "SIGABRT" in reason["message"]
        assert reason["attempts"] == 2
        assert wait_for(lambda: running.daemon.stats.worker_restarts == 2)
        (running.folders.inbox / "fine.png").write_bytes(png_bytes())
        assert wait_for((running.folders.out / "fine.png.json").exists, timeout=40)


def test_hung_worker_is_killed_after_the_job_timeout(tmp_path: Path) -> None:
    config = _config(tmp_path, jobs={"max_attempts": 1, "timeout_seconds": 1.5})
    with Running(config, fakes.hanging_engine) as running:
        (running.folders.inbox / "hang.png").write_bytes(png_bytes(colour="blue"))
        reason_file = running.folders.failed / "hang.png.error.json"
        assert wait_for(reason_file.exists, timeout=40)
        assert "timed out after 2 s" in json.loads(reason_file.read_text(encoding="utf-8"))["message"]
        (running.folders.inbox / "fine.png").write_bytes(png_bytes())
        assert wait_for((running.folders.out / "fine.png.json").exists, timeout=40)


def test_out_of_memory_is_retried_then_given_up(tmp_path: Path) -> None:
    with Running(_config(tmp_path, jobs={"max_attempts": 3}), fakes.flaky_oom_engine) as running:
        (running.folders.inbox / "big.png").write_bytes(png_bytes(colour="blue"))
        reason_file = running.folders.failed / "big.png.error.json"
        assert wait_for(reason_file.exists)
        reason = json.loads(reason_file.read_text(encoding="utf-8"))
        assert reason["reason"] == "gave_up"
        assert reason["attempts"] == 3
        job = running.daemon.journal.jobs()[0]
        states = [t.to_state for t in running.daemon.journal.transitions(job.id)]
        assert states.count(JobState.RUNNING) == 3


def test_a_session_server_lost_mid_job_is_retried_not_failed(tmp_path: Path) -> None:
    with Running(_config(tmp_path, jobs={"max_attempts": 3}), fakes.server_gone_once_engine) as running:
        (running.folders.inbox / "scan.png").write_bytes(png_bytes(colour="blue"))
        assert wait_for(lambda: running.daemon.stats.done == 1)
        job = running.daemon.journal.jobs()[0]
        assert job.state is JobState.DONE and job.attempts == 2
        transitions = running.daemon.journal.transitions(job.id)
        assert [t.to_state for t in transitions] == [
            JobState.QUEUED,
            JobState.RUNNING,
            JobState.QUEUED,
            JobState.RUNNING,
            JobState.DONE,
        ]
        assert "engine_error: scan.png page 1: the session server" in transitions[2].reason
        assert running.daemon.stats.failed == 0
        assert not list(running.folders.failed.iterdir())


def test_the_workers_session_server_is_kept_and_shown_in_the_status_and_metrics(tmp_path: Path) -> None:
    config = _config(tmp_path, jobs={"workers": 2, "session_server": "on", "session_server_runners": 2})
    with Running(config, fakes.fixed_text_engine, fakes.served_engine_factory) as running:
        first = running.daemon.snapshot_status().session_server
        assert first is not None and first.alive and first.pid and first.restarts == 0
        assert first.runners == 2
        # The workers' engine was built from the configuration with the server's socket in it.
        assert running.daemon.engine_description["session_server"] == first.socket
        metrics = running.daemon.metrics()
        assert (metrics["session_server_alive"], metrics["session_server_restarts_total"]) == (1.0, 0.0)

        os.kill(first.pid, signal.SIGKILL)

        def started_again() -> bool:
            now = running.daemon.snapshot_status().session_server
            return now is not None and now.alive and now.restarts == 1

        assert wait_for(started_again, timeout=60)
        second = running.daemon.snapshot_status()
        assert second.session_server is not None and second.session_server.pid not in (None, first.pid)
        assert any("was killed by SIGKILL" in error["message"] for error in second.recent_errors)
        assert running.daemon.metrics()["session_server_restarts_total"] == 1.0
        shown = convert.status(second).session_server
        assert (shown.alive, shown.restarts, shown.runners, shown.socket) == (True, 1, 2, first.socket)
        assert shown.pid == second.session_server.pid
        (running.folders.inbox / "scan.png").write_bytes(png_bytes())
        assert wait_for(lambda: running.daemon.stats.done == 1)
    # Stopped with the daemon, after its workers, and its private folder removed.
    assert process_gone(shown.pid)
    assert not Path(first.socket).parent.exists()


def test_without_a_session_server_the_status_and_metrics_show_none(running: Running) -> None:
    assert running.daemon.snapshot_status().session_server is None
    assert not convert.status(running.daemon.snapshot_status()).HasField("session_server")
    assert not any(name.startswith("session_server") for name in running.daemon.metrics())


def test_duplicate_content_gets_the_earlier_result_without_reading_again(running: Running) -> None:
    data = png_bytes()
    (running.folders.inbox / "first.png").write_bytes(data)
    # Outputs are written before the job is marked done: only a done job is found as the original.
    assert wait_for(lambda: running.daemon.stats.done == 1)
    (running.folders.inbox / "second.png").write_bytes(data)
    assert wait_for((running.folders.out / "second.png.json").exists)
    # The result is issued again before the journal records the job done: wait for the record.
    assert wait_for(
        lambda: any(
            job.name == "second.png" and job.state is JobState.DONE for job in running.daemon.journal.jobs()
        )
    )
    first, second = sorted(running.daemon.journal.jobs(), key=lambda job: job.created_at)
    assert second.duplicate_of == first.id
    assert second.attempts == 0, "a duplicate is never sent to a worker"
    # The JSON result is written first and the text after it: wait for the one read here.
    assert wait_for((running.folders.out / "second.png.txt").exists)
    assert (running.folders.out / "second.png.txt").read_bytes() == (
        running.folders.out / "first.png.txt"
    ).read_bytes()
    assert wait_for(lambda: len(running.archived("second.png")) == 1)


def test_same_name_different_content_keeps_both_results(running: Running) -> None:
    (running.folders.inbox / "scan.png").write_bytes(png_bytes("white"))
    assert wait_for(lambda: len(running.archived("scan.png")) == 1)
    (running.folders.inbox / "scan.png").write_bytes(png_bytes("gray"))
    assert wait_for(lambda: len(running.archived("scan*.png")) == 2)
    assert len(list(running.folders.out.glob("scan.png*.json"))) == 2


def test_intake_pauses_when_disk_is_low_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    free = {"bytes": 10 * 1024 * 1024}
    real = daemon_module.shutil.disk_usage

    def fake_disk_usage(path: Any) -> Any:
        usage = real(path)
        return type(usage)(usage.total, usage.used, free["bytes"])

    monkeypatch.setattr(daemon_module.shutil, "disk_usage", fake_disk_usage)
    with Running(_config(tmp_path, intake={"min_free_mb": 100.0})) as running:
        (running.folders.inbox / "waiting.png").write_bytes(png_bytes())
        assert wait_for(lambda: running.daemon.stats.intake_paused)
        time.sleep(0.8)
        assert (running.folders.inbox / "waiting.png").exists()
        free["bytes"] = 10 * 1024 * 1024 * 1024
        assert wait_for((running.folders.out / "waiting.png.json").exists)
        assert not running.daemon.stats.intake_paused


def test_files_present_at_start_are_read(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "early.png").write_bytes(png_bytes())
    with Running(_config(tmp_path)) as running:
        assert wait_for((running.folders.out / "early.png.json").exists)


def test_restart_resumes_running_jobs_and_orphaned_claims(tmp_path: Path) -> None:
    """State a SIGKILL can leave: a job marked running, and a file claimed but never journalled."""
    config = _config(tmp_path)
    inbox = config.hot_folders[0].path
    inbox.mkdir(parents=True)
    spool = config.paths.state_dir / "spool"
    (inbox / "was-running.png").write_bytes(png_bytes())
    (inbox / "orphan.png").write_bytes(png_bytes("gray"))
    running_claim = claim(inbox / "was-running.png", inbox, spool)
    claim(inbox / "orphan.png", inbox, spool)
    with Journal(config.paths.state_dir / "journal.sqlite3") as journal:
        job = journal.add(
            sha256=running_claim.sha256,
            source_folder=str(inbox),
            relative_path="was-running.png",
            name="was-running.png",
            size=running_claim.size,
            spool_path=str(running_claim.spool_path),
        )
        journal.start_next()
    with Running(config) as running:
        assert wait_for((running.folders.out / "was-running.png.json").exists)
        assert wait_for((running.folders.out / "orphan.png.json").exists)
        resumed = running.daemon.journal.get(job.id)
        assert resumed is not None
        assert wait_for(lambda: running.daemon.journal.get(job.id).state is JobState.DONE)  # type: ignore[union-attr]
        # The daemon's crash is not the file's fault: only the attempt that finished counts.
        assert running.daemon.journal.get(job.id).attempts == 1  # type: ignore[union-attr]


def test_engine_that_cannot_load_stops_start_up(tmp_path: Path) -> None:
    daemon = Daemon(_config(tmp_path), fakes.failing_to_load_engine)
    with pytest.raises(ModelError, match=r"ppocrv5_det\.onnx is missing"):
        daemon.start()


def test_workers_load_their_engines_at_the_same_time(tmp_path: Path) -> None:
    # Each engine loads only once all three are loading: started one after another, the first
    # would wait for the others for ever and the daemon would never be ready.
    loading = tmp_path / "loading"
    loading.mkdir()
    factory = functools.partial(fakes.engine_loaded_with_others, str(loading), 3)
    with Running(_config(tmp_path, jobs={"workers": 3}), factory) as running:
        (running.folders.inbox / "page.png").write_bytes(png_bytes())
        assert wait_for((running.folders.out / "page.png.json").exists)
    assert len(list(loading.iterdir())) == 3


def test_a_worker_that_cannot_load_among_others_stops_start_up(tmp_path: Path) -> None:
    # Three are asked for and only two ever load: the third's wait for the others runs out.
    loading = tmp_path / "loading"
    loading.mkdir()
    # 20 s: all three must have begun loading before the first gives up, and spawning three
    # processes on a loaded 2-core machine can spread their starts over seconds.
    factory = functools.partial(fakes.engine_loaded_with_others, str(loading), 4, 20.0)
    daemon = Daemon(_config(tmp_path, jobs={"workers": 3}), factory)
    with pytest.raises(ModelError, match="did not load within 20 s"):
        daemon.start()
    assert len(list(loading.iterdir())) == 3


def test_a_session_server_that_cannot_be_reached_stops_start_up(tmp_path: Path) -> None:
    daemon = Daemon(_config(tmp_path), fakes.unreachable_server_engine)
    with pytest.raises(ModelError, match="cannot reach the session server"):
        daemon.start()


def test_thousand_files_at_once_are_each_read_exactly_once(ram_path: Path) -> None:
    # In RAM: what is tested is intake and the journal under a burst, not the disk's fsync latency.
    with Running(_config(ram_path, jobs={"workers": 2})) as running:
        names = [f"doc-{index:04d}.png" for index in range(1000)]
        for index, name in enumerate(names):
            # Distinct content, so none is a duplicate of another.
            (running.folders.inbox / name).write_bytes(png_bytes(size=(64 + index % 50, 48 + index // 50)))
        assert wait_for(lambda: running.daemon.stats.done == 1000, timeout=240), running.daemon.stats
        time.sleep(1.0)
        assert running.daemon.stats.done == 1000
        assert sorted(p.name for p in running.folders.out.glob("*.json")) == [f"{n}.json" for n in names]
        assert list(running.folders.inbox.iterdir()) == []
        jobs = running.daemon.journal.jobs(limit=5000)
        assert len(jobs) == 1000
        assert all(job.state is JobState.DONE and job.attempts == 1 for job in jobs)


def test_unreadable_file_is_logged_and_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Root reads any file, so the permission error is injected where the daemon first reads it."""
    real_check = hot_folders.check_complete

    def check(path: Path) -> Any:
        if path.name == "locked.png":
            raise PermissionError(13, "Permission denied", str(path))
        return real_check(path)

    monkeypatch.setattr(hot_folders, "check_complete", check)
    caplog.set_level(logging.ERROR, logger="appliance.daemon")
    with Running(_config(tmp_path)) as running:
        (running.folders.inbox / "locked.png").write_bytes(png_bytes())
        (running.folders.inbox / "open.png").write_bytes(png_bytes("gray"))
        assert wait_for((running.folders.out / "open.png.json").exists)
        assert wait_for(lambda: "cannot read" in caplog.text and "Permission denied" in caplog.text)
        assert (running.folders.inbox / "locked.png").exists()
        assert caplog.text.count("cannot read") == 1


def test_slow_writer_at_10_kb_per_second_for_30_seconds(tmp_path: Path) -> None:
    """A network scanner trickling a 300 KB JPEG at about 10 KB/s is read once, when complete."""
    import numpy as np

    noise = np.random.default_rng(7).integers(0, 256, size=(420, 600, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, format="JPEG", quality=95)
    data = buffer.getvalue()
    assert 250_000 < len(data) < 400_000
    with Running(_config(tmp_path, intake={"settle_seconds": 2.0})) as running:
        target = running.folders.inbox / "trickle.jpg"
        step = len(data) // 30
        with target.open("wb") as handle:
            for start in range(0, len(data), step):
                handle.write(data[start : start + step])
                handle.flush()
                time.sleep(1.0)
                assert running.daemon.stats.claimed == 0
        assert wait_for(lambda: running.daemon.stats.done == 1)
        result = json.loads((running.folders.out / "trickle.jpg.json").read_text(encoding="utf-8"))
        assert result["source"]["size"] == len(data)
        assert running.daemon.stats.failed == 0


def test_polling_watch_mode_sees_new_files(tmp_path: Path) -> None:
    config = _config(tmp_path, intake={"poll_seconds": 0.3, "rescan_seconds": 3600.0})
    folder = config.hot_folders[0].model_copy(update={"watch": "poll"})
    with Running(config.model_copy(update={"hot_folders": (folder,)})) as running:
        (running.folders.inbox / "polled.png").write_bytes(png_bytes())
        assert wait_for((running.folders.out / "polled.png.json").exists)


def test_each_folder_uses_its_profile(tmp_path: Path) -> None:
    from appliance.config import ProfileConfig

    base = _config(tmp_path)
    first = base.hot_folders[0]
    second = HotFolderConfig(
        path=tmp_path / "in-text",
        output_dir=tmp_path / "out-text",
        archive_dir=tmp_path / "archive",
        failed_dir=tmp_path / "failed",
        profile="text-only",
    )
    profiles = {"default": ProfileConfig(), "text-only": ProfileConfig(priority=5, formats=("text",))}
    config = base.model_copy(update={"hot_folders": (first, second), "profiles": profiles})
    with Running(config) as running:
        (second.path / "note.png").write_bytes(png_bytes())
        (first.path / "scan.png").write_bytes(png_bytes("gray"))
        assert wait_for((second.output_dir / "note.png.txt").exists)
        assert wait_for((first.output_dir / "scan.png.json").exists)
        assert not (second.output_dir / "note.png.json").exists()
        by_name = {job.name: job for job in running.daemon.journal.jobs()}
        assert by_name["note.png"].priority == 5
        assert by_name["note.png"].profile == "text-only"
        assert by_name["scan.png"].priority == 0


def test_output_permissions_and_deleting_originals(tmp_path: Path) -> None:
    import grp
    import os
    import stat as stat_module

    from appliance.config import OutputsConfig

    group = grp.getgrgid(os.getgid()).gr_name
    config = _config(tmp_path, intake={"originals": "delete"}).model_copy(
        update={"outputs": OutputsConfig(mode="0640", group=group)}
    )
    with Running(config) as running:
        (running.folders.inbox / "scan.png").write_bytes(png_bytes())
        result = running.folders.out / "scan.png.json"
        assert wait_for(result.exists)
        assert stat_module.S_IMODE(result.stat().st_mode) == 0o640
        assert result.stat().st_gid == os.getgid()
        assert wait_for(lambda: running.daemon.stats.done == 1)
        # The original is deleted from the spool after the job is counted done: wait for that.
        assert wait_for(lambda: not list((running.folders.state / "spool").iterdir()))
        assert list(running.folders.archive.rglob("*.png")) == []


def test_second_daemon_on_the_same_state_is_refused(running: Running) -> None:
    from appliance.errors import ConfigError

    with pytest.raises(ConfigError, match="another ocr-appliance daemon"):
        Daemon(running.config, fakes.fixed_text_engine).start()
