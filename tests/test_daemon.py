"""The minimal hot-folder loop with real files and inotify, and engines that misbehave."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

from appliance.config import AppConfig, DaemonConfig, HotFolderConfig
from appliance.daemon import HotFolderDaemon
from appliance.engines.base import Engine
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from tests.fakes.engines import CrashingEngine, FixedTextEngine


def _png_bytes(colour: str = "white", size: tuple[int, int] = (320, 200)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _wait(condition: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Running:
    """A daemon on its own thread over folders under tmp_path."""

    def __init__(self, root: Path, engine: Engine, settle: float = 0.3) -> None:
        self.folder = HotFolderConfig(
            path=root / "in",
            output_dir=root / "out",
            archive_dir=root / "archive",
            failed_dir=root / "failed",
        )
        config = AppConfig(hot_folders=(self.folder,), daemon=DaemonConfig(settle_seconds=settle))
        self.daemon = HotFolderDaemon(config, DocumentProcessor(engine, Rasterizer(config.rasterize)))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.daemon.run, args=(self.stop,))

    def __enter__(self) -> Running:
        self.thread.start()
        assert _wait(self.folder.path.exists)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def fixed_engine() -> FixedTextEngine:
    return FixedTextEngine("INVOICE 42")


@pytest.fixture
def running(tmp_path: Path, fixed_engine: FixedTextEngine) -> Iterator[Running]:
    with Running(tmp_path, fixed_engine) as daemon:
        yield daemon


def test_dropped_file_is_read_once_and_archived(running: Running, fixed_engine: FixedTextEngine) -> None:
    (running.folder.path / "scan.png").write_bytes(_png_bytes())
    result = running.folder.output_dir / "scan.png.json"
    assert _wait(result.exists)
    assert json.loads(result.read_text(encoding="utf-8"))["text"] == "INVOICE 42"
    assert (running.folder.output_dir / "scan.png.txt").read_text(encoding="utf-8") == "INVOICE 42\n"
    assert _wait((running.folder.archive_dir / "scan.png").exists)
    time.sleep(0.8)  # several more ticks and a rescan-free period: nothing is read twice
    assert fixed_engine.pages_seen == 1
    assert running.daemon.processed == 1


def test_subfolders_are_mirrored(running: Running) -> None:
    (running.folder.path / "branch-7").mkdir()
    (running.folder.path / "branch-7" / "a.png").write_bytes(_png_bytes())
    assert _wait((running.folder.output_dir / "branch-7" / "a.png.json").exists)


def test_growing_file_is_not_read_before_it_settles(running: Running, fixed_engine: FixedTextEngine) -> None:
    data = _png_bytes(size=(900, 900))
    target = running.folder.path / "slow.png"
    with target.open("wb") as handle:
        for start in range(0, len(data), max(1, len(data) // 8)):
            handle.write(data[start : start + max(1, len(data) // 8)])
            handle.flush()
            time.sleep(0.15)  # half the settle time between writes
    assert _wait((running.folder.output_dir / "slow.png.json").exists)
    assert fixed_engine.pages_seen == 1
    assert not (running.folder.failed_dir / "slow.png").exists()


def test_temporary_name_then_rename(running: Running) -> None:
    temporary = running.folder.path / "upload.png.tmp"
    temporary.write_bytes(_png_bytes())
    time.sleep(0.8)
    assert not (running.folder.output_dir / "upload.png.tmp.json").exists()
    assert temporary.exists()
    temporary.rename(running.folder.path / "upload.png")
    assert _wait((running.folder.output_dir / "upload.png.json").exists)


def test_junk_names_are_left_alone(running: Running) -> None:
    for name in (".hidden.png", "~$lock.png", "Thumbs.db", "part.pdf.part"):
        (running.folder.path / name).write_bytes(_png_bytes())
    (running.folder.path / "real.png").write_bytes(_png_bytes())
    assert _wait((running.folder.output_dir / "real.png.json").exists)
    for name in (".hidden.png", "~$lock.png", "Thumbs.db", "part.pdf.part"):
        assert (running.folder.path / name).exists()
    assert running.daemon.processed == 1


def test_symlink_is_refused_not_followed(
    running: Running, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png_bytes())
    caplog.set_level(logging.WARNING, logger="appliance.daemon")
    (running.folder.path / "link.png").symlink_to(secret)
    assert _wait(lambda: "symbolic links are not followed" in caplog.text)
    time.sleep(0.6)
    assert not (running.folder.output_dir / "link.png.json").exists()
    assert secret.exists()
    assert running.daemon.processed == 0


def test_bad_file_goes_to_failed_with_a_reason_and_the_daemon_goes_on(running: Running) -> None:
    (running.folder.path / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf")
    reason_file = running.folder.failed_dir / "broken.pdf.error.json"
    assert _wait(reason_file.exists)
    reason = json.loads(reason_file.read_text(encoding="utf-8"))
    assert reason["reason"] == "corrupt"
    assert reason["file"] == "broken.pdf"
    assert (running.folder.failed_dir / "broken.pdf").read_bytes() == b"%PDF-1.4\nnot really a pdf"
    (running.folder.path / "after.png").write_bytes(_png_bytes())
    assert _wait((running.folder.output_dir / "after.png.json").exists)


def test_engine_crash_fails_only_that_file(tmp_path: Path) -> None:
    with Running(tmp_path, CrashingEngine()) as running:
        (running.folder.path / "poison.png").write_bytes(_png_bytes(colour="red"))
        assert _wait((running.folder.failed_dir / "poison.png.error.json").exists)
        reason = json.loads((running.folder.failed_dir / "poison.png.error.json").read_text(encoding="utf-8"))
        assert reason["reason"] == "internal"
        assert "native code failed" in reason["message"]
        (running.folder.path / "fine.png").write_bytes(_png_bytes())
        assert _wait((running.folder.output_dir / "fine.png.json").exists)
        assert running.daemon.failed == 1


def test_same_name_twice_keeps_both_results(running: Running) -> None:
    (running.folder.path / "scan.png").write_bytes(_png_bytes("white"))
    assert _wait((running.folder.archive_dir / "scan.png").exists)
    (running.folder.path / "scan.png").write_bytes(_png_bytes("gray"))
    assert _wait((running.folder.archive_dir / "scan-1.png").exists)
    results = sorted(p.name for p in running.folder.output_dir.glob("scan.png*.json"))
    assert len(results) == 2


def test_files_present_at_start_are_read(tmp_path: Path, fixed_engine: FixedTextEngine) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "early.png").write_bytes(_png_bytes())
    with Running(tmp_path, fixed_engine) as running:
        assert _wait((running.folder.output_dir / "early.png.json").exists)
