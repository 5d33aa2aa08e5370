"""Hostile file names: bytes that are not UTF-8, names at NAME_MAX, and faults in per-file steps.

Every name the kernel accepts is either read or refused with a reason; none may stop the daemon.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from appliance import filing
from appliance.api import convert
from appliance.control import DaemonState, Status
from appliance.intake import hot_folders
from appliance.intake.claim import claim
from appliance.intake.filtering import is_candidate
from appliance.journal import JobState, Journal
from appliance.logging_setup import setup_logging
from appliance.names import NAME_MAX, display, fit_name
from appliance.outputs.atomic import write_atomic
from tests.polling import png_bytes, wait_for
from tests.test_daemon import Running, _config

# What SMB and NFS clients write for names in a legacy code page: valid for Linux, not UTF-8.
RAW_NAME = b"\xff\xfe-scan.png"
NAME = os.fsdecode(RAW_NAME)
SHOWN = "\\xff\\xfe-scan.png"
# Start and end markers in place, garbage between: complete, and failed as corrupt when read.
GARBAGE_JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 20 + b"\xff\xd9"


def _output(folder: Path, name: str, suffix: str = ".json") -> Path:
    return folder / f"{name}{suffix}"


# -- names ---------------------------------------------------------------------------------------


def test_display_escapes_bytes_that_are_not_utf8_and_never_raises() -> None:
    assert display(NAME) == SHOWN
    assert display("reçu 收据.pdf") == "reçu 收据.pdf"
    assert display("\ud800x") == "\\ud800x"  # a lone surrogate no file name makes
    display(NAME).encode("utf-8")


@pytest.mark.parametrize("length", [231, 240, 246, 247, 250, 254, 255])
@pytest.mark.parametrize("unit", ["a", "é", "收", "\udcff"])
def test_fit_name_keeps_a_prefix_at_a_character_boundary_and_a_hash(length: int, unit: str) -> None:
    width = len(os.fsencode(unit))
    name = unit * ((length - 4) // width) + ".png"
    for suffix in ("", ".json", ".alto.xml", ".error.json", ".0123456789ab.alto.xml"):
        fitted = fit_name(name, suffix)
        raw = os.fsencode(fitted)
        assert len(raw) <= NAME_MAX
        assert fitted.endswith(suffix)
        if len(os.fsencode(name + suffix)) <= NAME_MAX:
            assert fitted == name + suffix
        else:
            assert fitted == fit_name(name, suffix), "deterministic"
            prefix = fitted[: -len(suffix) or None].rsplit("~", 1)[0]
            assert name.startswith(prefix) and prefix
            if unit != "\udcff":
                raw.decode("utf-8")  # the cut never splits a UTF-8 sequence
    other = "b" + name[1:]
    assert fit_name(name, ".error.json") != fit_name(other, ".error.json")


def test_write_atomic_takes_a_name_of_255_bytes(tmp_path: Path) -> None:
    target = tmp_path / ("x" * NAME_MAX)
    write_atomic(target, b"data")
    assert target.read_bytes() == b"data"
    assert [path.name for path in tmp_path.iterdir()] == [target.name]


def test_log_lines_show_such_names_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("INFO")
        logging.getLogger("appliance.test").info("claimed %s", NAME)
        root.handlers[0].flush()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert f"claimed {SHOWN}" in stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]


def test_folders_are_not_refusals(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert is_candidate(tmp_path / "sub", tmp_path) == (False, None)


# -- the journal ---------------------------------------------------------------------------------


def test_journal_keeps_names_that_are_not_utf8_losslessly(tmp_path: Path) -> None:
    spool = tmp_path / "spool" / "job" / NAME
    with Journal(tmp_path / "journal.sqlite3") as journal:
        job = journal.add(
            sha256="0" * 64,
            source_folder=os.fsdecode(b"/in/\xe9t\xe9"),
            relative_path=f"sub/{NAME}",
            name=NAME,
            size=1,
            spool_path=str(spool),
            reason=f"claimed {NAME}",
        )
        found = journal.find_by_spool_path(str(spool))
        assert found is not None and found.id == job.id
        assert os.fsencode(found.name) == RAW_NAME
        assert found.relative_path == f"sub/{NAME}"
        assert os.fsencode(found.source_folder) == b"/in/\xe9t\xe9"
        failed = journal.finish(job.id, JobState.FAILED, f"corrupt: {NAME} cannot be read")
        assert failed.reason == f"corrupt: {SHOWN} cannot be read"
    with Journal(tmp_path / "journal.sqlite3") as journal:
        assert journal.get(job.id) == failed


_V1_JOBS = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, sha256 TEXT NOT NULL, source_folder TEXT NOT NULL,
    relative_path TEXT NOT NULL, name TEXT NOT NULL, size INTEGER NOT NULL CHECK (size >= 0),
    spool_path TEXT NOT NULL, profile TEXT NOT NULL, priority INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'review', 'failed')),
    attempts INTEGER NOT NULL CHECK (attempts >= 0), reason TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, not_before REAL NOT NULL, outputs TEXT NOT NULL, duplicate_of TEXT
);
CREATE INDEX jobs_spool ON jobs (spool_path);
CREATE TABLE transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    from_state TEXT, to_state TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
INSERT INTO jobs VALUES ('j1', 'abc', '/in', 'sub/reçu.png', 'reçu.png', 3, '/spool/j1/reçu.png',
    'default', 0, 'queued', 0, 'claimed', 1.0, 1.0, 1.0, '{}', NULL);
INSERT INTO transitions (job_id, from_state, to_state, reason, at)
    VALUES ('j1', NULL, 'queued', 'claimed', 1.0);
PRAGMA user_version = 1;
"""


def test_a_journal_of_the_first_schema_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with sqlite3.connect(path) as old:
        old.executescript(_V1_JOBS)
    old.close()
    with Journal(path) as journal:
        job = journal.find_by_spool_path("/spool/j1/reçu.png")
        assert job is not None and job.id == "j1"
        assert (job.name, job.relative_path, job.source_folder) == ("reçu.png", "sub/reçu.png", "/in")
        assert journal.start_next() is not None
        other = journal.add(
            sha256="f" * 64,
            source_folder="/in",
            relative_path=NAME,
            name=NAME,
            size=1,
            spool_path=f"/s/{NAME}",
        )
        assert journal.find_by_spool_path(f"/s/{NAME}") == other
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] >= 2
    raw.close()


def test_api_messages_show_such_names_escaped(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.sqlite3") as journal:
        job = journal.add(
            sha256="0" * 64,
            source_folder="/in",
            relative_path=NAME,
            name=NAME,
            size=1,
            spool_path=f"/spool/{NAME}",
        )
        job = journal.start_next() or job
        job = journal.finish(job.id, JobState.DONE, "read", {"json": f"/out/{NAME}.json"})
    message = convert.job(job)
    assert message.name == SHOWN
    errors = convert.status(
        Status(
            version="0",
            uptime_seconds=1.0,
            state=DaemonState.RUNNING,
            intake_paused_for_disk=False,
            engines=[],
            workers=1,
            workers_busy=0,
            queue={},
            pages_per_second={},
            gpu_memory_used_bytes=None,
            gpu_memory_budget_bytes=None,
            recent_errors=[{"at": 1.0, "job_id": "", "message": f"cannot claim /in/{NAME}"}],
        )
    ).recent_errors
    assert errors[0].message == f"cannot claim /in/{SHOWN}"
    assert message.relative_path == SHOWN
    assert message.outputs["json"] == f"/out/{SHOWN}.json"
    message.SerializeToString()


# -- the daemon ----------------------------------------------------------------------------------


def test_name_that_is_not_utf8_is_read_and_the_daemon_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with Running(_config(tmp_path)) as running:
        (running.folders.inbox / NAME).write_bytes(png_bytes())
        result = _output(running.folders.out, NAME)
        assert wait_for(result.exists)
        assert os.fsencode(result.name) == RAW_NAME + b".json"
        source = json.loads(result.read_text(encoding="utf-8"))["source"]
        assert source["name"] == SHOWN
        # The text is written after the JSON result: wait for it rather than read it at once.
        assert wait_for(_output(running.folders.out, NAME, ".txt").exists)
        assert _output(running.folders.out, NAME, ".txt").read_text(encoding="utf-8") == "INVOICE 42\n"
        assert wait_for(lambda: len(running.archived(NAME)) == 1)
        # A failing one too: its reason file names it escaped.
        (running.folders.inbox / os.fsdecode(b"bad-\xe9.jpg")).write_bytes(GARBAGE_JPEG)
        reason_file = running.folders.failed / os.fsdecode(b"bad-\xe9.jpg.error.json")
        assert wait_for(reason_file.exists)
        reason = json.loads(reason_file.read_text(encoding="utf-8"))
        assert reason["file"] == "bad-\\xe9.jpg"
        assert reason["reason"] == "corrupt"
        # Subfolders (one of them named in bytes that are not UTF-8) are mirrored, not refused.
        nested = running.folders.inbox / "branch" / os.fsdecode(b"caf\xe9")
        nested.mkdir(parents=True)
        (nested / "after.png").write_bytes(png_bytes("gray"))
        assert wait_for(_output(running.folders.out / "branch" / nested.name, "after.png").exists)
        assert running.thread.is_alive()
        jobs = {os.fsencode(job.name): job for job in running.daemon.journal.jobs()}
        assert jobs[RAW_NAME].state is JobState.DONE
    assert "not a regular file" not in caplog.text


def test_restart_with_such_a_name_left_in_the_spool(tmp_path: Path) -> None:
    """A claim never journalled (a crash after the move) and a queued job, both with such names."""
    config = _config(tmp_path)
    inbox = config.hot_folders[0].path
    inbox.mkdir(parents=True)
    spool = config.paths.state_dir / "spool"
    queued_name = os.fsdecode(b"queued-\x81.png")
    (inbox / NAME).write_bytes(png_bytes())
    (inbox / queued_name).write_bytes(png_bytes("gray"))
    claim(inbox / NAME, inbox, spool)
    queued = claim(inbox / queued_name, inbox, spool)
    with Journal(config.paths.state_dir / "journal.sqlite3") as journal:
        journal.add(
            sha256=queued.sha256,
            source_folder=str(inbox),
            relative_path=queued_name,
            name=queued_name,
            size=queued.size,
            spool_path=str(queued.spool_path),
        )
    with Running(config) as running:
        assert wait_for(_output(running.folders.out, NAME).exists)
        assert wait_for(_output(running.folders.out, queued_name).exists)
        assert running.thread.is_alive()


def _long_names() -> list[str]:
    names = [f"{'a' * (length - 4)}.png" for length in (231, 240, 246, 250, 255)]
    names.append(f"{'é' * 125}.png")  # 254 bytes
    names.append(f"{'收' * 83}.png")  # 253 bytes
    return names


def test_names_of_231_to_255_bytes_are_read_archived_and_failed_with_reasons(tmp_path: Path) -> None:
    config = _config(tmp_path)
    inbox = config.hot_folders[0].path
    inbox.mkdir(parents=True)
    good = _long_names()
    for index, name in enumerate(good):
        (inbox / name).write_bytes(png_bytes(size=(320 + index, 200)))  # distinct content: each read
    bad = f"{'b' * 251}.jpg"
    (inbox / bad).write_bytes(GARBAGE_JPEG)
    with Running(config) as running:
        out, archive = running.folders.out, running.folders.archive
        assert wait_for(lambda: running.daemon.journal.counts()[JobState.DONE] == len(good), 60)
        for name in good:
            result = out / f"{filing.result_stem(name)}.json"
            assert result.exists(), name
            assert json.loads(result.read_text(encoding="utf-8"))["source"]["name"] == name
            assert (out / f"{filing.result_stem(name)}.txt").exists()
        assert wait_for(lambda: {path.name for path in archive.rglob("*.png")} == set(good))
        reason_file = running.folders.failed / fit_name(bad, ".error.json")
        assert wait_for(reason_file.exists)
        reason = json.loads(reason_file.read_text(encoding="utf-8"))
        assert (reason["file"], reason["reason"]) == (bad, "corrupt")
        assert (running.folders.failed / bad).exists()
        # The longest name again with other content: its result gets the content hash, its archived
        # original a counter, both cut to fit.
        longest = good[4]
        data = png_bytes("gray")
        (inbox / longest).write_bytes(data)
        assert wait_for(lambda: running.daemon.journal.counts()[JobState.DONE] == len(good) + 1)
        tag = "." + hashlib.sha256(data).hexdigest()[:12]
        assert (out / f"{filing.result_stem(longest, tag)}.json").exists()
        stem, suffix = longest[:-4], longest[-4:]
        assert wait_for((next(archive.glob("*/*")) / fit_name(stem, f"-1{suffix}")).exists)
        assert running.thread.is_alive()


def test_long_name_in_review_and_audit_folders(tmp_path: Path) -> None:
    from appliance.config import ProfileConfig, RoutingConfig

    config = _config(tmp_path)
    review_profile = ProfileConfig(routing=RoutingConfig(min_confidence=0.999))
    audit_profile = ProfileConfig(routing=RoutingConfig(audit_rate=1.0))
    folder = config.hot_folders[0].model_copy(update={"profile": "review"})
    second = folder.model_copy(
        update={"path": tmp_path / "in2", "profile": "audit", "output_dir": tmp_path / "out2"}
    )
    config = config.model_copy(
        update={
            "hot_folders": (folder, second),
            "profiles": {**config.profiles, "review": review_profile, "audit": audit_profile},
        }
    )
    name = f"{'r' * 250}.png"
    stem = filing.result_stem(name)
    with Running(config) as running:
        (folder.path / name).write_bytes(png_bytes())
        (second.path / name).write_bytes(png_bytes("gray"))
        assert wait_for(lambda: running.daemon.journal.counts()[JobState.REVIEW] == 1, 60)
        (job,) = running.daemon.journal.jobs(JobState.REVIEW)
        review = tmp_path / "review" / fit_name(name, f".{job.id[:8]}")
        assert (review / f"{stem}.json").exists()
        assert (review / "reasons.json").exists()
        assert wait_for((tmp_path / "audit" / f"{stem}.json").exists, 60)
        assert wait_for((second.output_dir / f"{stem}.json").exists)
        assert running.thread.is_alive()


# -- faults in per-file steps --------------------------------------------------------------------


def test_a_fault_while_writing_a_reason_does_not_stop_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_reason(*_: object, **__: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(filing.Filing, "write_reason", broken_reason)
    with Running(_config(tmp_path)) as running:
        (running.folders.inbox / "broken.jpg").write_bytes(GARBAGE_JPEG)
        assert wait_for((running.folders.failed / "broken.jpg").exists)
        (running.folders.inbox / "after.png").write_bytes(png_bytes())
        assert wait_for(_output(running.folders.out, "after.png").exists)
        assert running.thread.is_alive()


def test_a_fault_while_moving_to_failed_does_not_stop_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_move = filing.move_file
    calls: list[Path] = []

    def move_failing_once(source: Path, target: Path) -> Path:
        calls.append(target)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_move(source, target)

    monkeypatch.setattr(filing, "move_file", move_failing_once)
    with Running(_config(tmp_path)) as running:
        (running.folders.inbox / "broken.jpg").write_bytes(GARBAGE_JPEG)
        assert wait_for(lambda: len(calls) >= 1)
        (running.folders.inbox / "after.png").write_bytes(png_bytes())
        assert wait_for(_output(running.folders.out, "after.png").exists)
        assert running.thread.is_alive()
    # The next start finishes moving it, with its reason.
    monkeypatch.setattr(filing, "move_file", real_move)
    with Running(_config(tmp_path)) as running:
        assert wait_for((running.folders.failed / "broken.jpg.error.json").exists)


def test_an_unexpected_error_on_a_file_in_the_hot_folder_fails_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_check = hot_folders.check_complete

    def check(path: Path):  # type: ignore[no-untyped-def]
        if path.name == "trouble.png":
            raise RuntimeError("a bug in a format check")
        return real_check(path)

    monkeypatch.setattr(hot_folders, "check_complete", check)
    with Running(_config(tmp_path)) as running:
        (running.folders.inbox / "trouble.png").write_bytes(png_bytes())
        reason_file = running.folders.failed / "trouble.png.error.json"
        assert wait_for(reason_file.exists)
        assert json.loads(reason_file.read_text(encoding="utf-8"))["reason"] == "internal"
        assert (running.folders.failed / "trouble.png").exists()
        (running.folders.inbox / "after.png").write_bytes(png_bytes("gray"))
        assert wait_for(_output(running.folders.out, "after.png").exists)
        assert running.thread.is_alive()


def test_an_empty_file_that_never_grows_is_reported_empty(tmp_path: Path) -> None:
    with Running(_config(tmp_path, intake={"incomplete_timeout_seconds": 1.0})) as running:
        (running.folders.inbox / "blank.pdf").touch()
        reason_file = running.folders.failed / "blank.pdf.error.json"
        assert wait_for(reason_file.exists)
        assert json.loads(reason_file.read_text(encoding="utf-8"))["reason"] == "empty"
        assert (running.folders.inbox / "blank.pdf").exists(), "its writer may still fill it"
