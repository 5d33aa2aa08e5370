"""The daemon with a real session server: two workers read real pages through one set of models.

The real PP-OCR models on the CPU provider (the GPU's path differs in where the sessions run, not
in what the daemon does with the server): what comes out is what the engine reads on its own;
a server killed with SIGKILL is started again and the next document is read through it; once
the daemon stops, no server process is left.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from appliance.api import convert
from appliance.config import (
    AppConfig,
    CascadeConfig,
    EngineConfig,
    PpocrOnnxConfig,
    ProfileConfig,
    VlmGgufConfig,
)
from appliance.control import SessionServerStatus
from appliance.engines.factory import build_engine
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx.remote_session import SessionServerClient
from appliance.pipeline.read_job import JobFile, JobReader, ReadOptions
from appliance.workers import EngineFactory
from tests import rendering
from tests.polling import process_gone, wait_for
from tests.test_daemon import Running, _config

# Generous: two workers and the server share two loaded cores with the other tests.
_READ_TIMEOUT = 300.0


def _factory_for(config: AppConfig) -> EngineFactory:
    """As `ocr-appliance run` builds the workers' engine from a configuration."""
    return functools.partial(build_engine, config.engine, config.jobs.workers)


@pytest.fixture
def pages(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "pages"
    folder.mkdir()
    rendered = {
        "receipt.png": rendering.receipt(),
        "chinese.png": rendering.chinese_page(),
        "long.png": rendering.long_chinese_lines(),
    }
    for name, page in rendered.items():
        page.image.save(folder / name)
    return {name: folder / name for name in rendered}


def _read_here(engine: PpocrOnnxEngine, config: AppConfig, path: Path) -> str:
    """The text the engine reads in this process, with sessions of its own (no server)."""
    options = ReadOptions(profile=config.profile("default"), repair=config.repair_for("default"), route=False)
    with JobReader(engine, config.rasterize).read(JobFile(path), options) as read:
        return read.document.text


def _server(running: Running) -> SessionServerStatus:
    status = running.daemon.snapshot_status().session_server
    assert status is not None
    return status


def _text(running: Running, name: str) -> str:
    result = json.loads((running.folders.out / f"{name}.json").read_text(encoding="utf-8"))
    text: str = result["text"]
    return text


def test_two_workers_read_through_one_server_that_is_started_again_when_killed(
    tmp_path: Path, pages: dict[str, Path], engine: PpocrOnnxEngine
) -> None:
    # The session `engine` fixture's own configuration, so that both read alike.
    base = _config(tmp_path / "daemon", jobs={"workers": 2, "session_server": "on"})
    config = base.model_copy(update={"engine": EngineConfig(ppocr_onnx=PpocrOnnxConfig(provider="cpu"))})
    expected = {name: _read_here(engine, config, path) for name, path in pages.items()}
    assert "TOTAL" in expected["receipt.png"] and all(expected.values())

    with Running(config, _factory_for(config), _factory_for) as running:
        first = _server(running)
        assert first.alive and first.pid is not None and first.restarts == 0
        assert first.vlm_copies == 0  # no VLM configured
        description = running.daemon.engine_description
        assert description["session_server"] == first.socket
        assert {model["provider"] for model in description["models"]} == {"CPUExecutionProvider"}

        for name in ("receipt.png", "chinese.png"):
            shutil.copyfile(pages[name], running.folders.inbox / name)
        assert wait_for(lambda: running.daemon.stats.done == 2, timeout=_READ_TIMEOUT), running.daemon.stats
        for name in ("receipt.png", "chinese.png"):
            assert _text(running, name) == expected[name]

        os.kill(first.pid, signal.SIGKILL)
        assert wait_for(lambda: _server(running).alive and _server(running).restarts == 1, timeout=120)
        second = _server(running)
        assert second.pid not in (None, first.pid)
        assert process_gone(first.pid)

        # The workers reconnect to the new server and open their sessions there again.
        shutil.copyfile(pages["long.png"], running.folders.inbox / "long.png")
        assert wait_for(lambda: running.daemon.stats.done == 3, timeout=_READ_TIMEOUT), running.daemon.stats
        assert _text(running, "long.png") == expected["long.png"]
        # Read at the first attempt: a request on a connection to the dead server is sent again
        # on a new one (remote_session.NotSentError), not failed.
        long = next(job for job in running.daemon.journal.jobs() if job.name == "long.png")
        assert long.attempts == 1
        assert running.daemon.stats.failed == 0
        assert running.daemon.stats.worker_restarts == 0  # the workers lived through it

    assert second.pid is not None and process_gone(second.pid)
    assert not Path(second.socket).parent.exists()


def test_the_workers_read_their_lines_again_with_one_vlm_held_in_the_server(
    tmp_path: Path, pages: dict[str, Path]
) -> None:
    jobs = {"workers": 2, "session_server": "on", "serve_vlm": "on", "served_vlm_copies": 2}
    base = _config(tmp_path / "daemon", jobs=jobs)
    vlm = VlmGgufConfig.model_validate(
        {
            "model_dir": Path(__file__).parent / "fixtures" / "vlm" / "qwen2vl",
            "family": "qwen2vl_line",
            "device": "cpu",
            "threads": 1,
            "lines_together": 4,
            "repetition": {"min_span": 400},
        }
    )
    cascade = CascadeConfig(mode="always", unit="lines")
    config = base.model_copy(
        update={
            "engine": EngineConfig(ppocr_onnx=PpocrOnnxConfig(provider="cpu"), vlm_gguf=vlm),
            "profiles": {"default": ProfileConfig(cascade=cascade)},
        }
    )
    with Running(config, _factory_for(config), _factory_for) as running:
        socket = _server(running).socket
        assert _server(running).vlm_copies == 2
        assert convert.status(running.daemon.snapshot_status()).session_server.vlm_copies == 2
        # Each worker's VLM is the server's: its description is the served copy's, with the socket.
        assert running.daemon.engine_description["vlm"]["session_server"] == socket
        for name in ("receipt.png", "chinese.png"):
            shutil.copyfile(pages[name], running.folders.inbox / name)
        assert wait_for(lambda: running.daemon.stats.done == 2, timeout=_READ_TIMEOUT), running.daemon.stats
        results = [*running.folders.out.glob("*.json"), *(tmp_path / "daemon").glob("review/*/*.png.json")]
        sent = [
            page["engine_details"]["cascade"]["lines_sent"]
            for path in results
            for page in json.loads(path.read_text(encoding="utf-8"))["pages"]
        ]
        assert len(sent) == 2 and all(count > 0 for count in sent)
        client = SessionServerClient(Path(socket))
        try:
            stats = client.stats()
        finally:
            client.close()
        # One set of copies for both workers, and every page's lines were read with it.
        assert (stats["readers"], stats["reader_copies"]) == (1, 2)
        assert stats["reads_done"] >= 2
