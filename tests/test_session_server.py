"""The session server: real sessions run in another process read a page as the engine's own do."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from appliance.config import PpocrOnnxConfig
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.engines.ppocr_onnx.remote_session import RemoteSession, SessionServerClient
from appliance.engines.ppocr_onnx.session_server import (
    SessionServer,
    SessionServerError,
    SessionServerProcess,
    _OpenSession,
    key_path,
)
from appliance.errors import ModelError
from tests import rendering
from tests.polling import wait_for

# The CPU engine under fixed shapes, the GPU's path (padded pages and line batches, one session a
# shape), small so that it loads quickly on two cores.
_CONFIG = PpocrOnnxConfig(provider="cpu", fixed_shapes="on", fixed_batch_size=4, det_limit_side_len=640)


@pytest.fixture
def server(socket_path: Path) -> Iterator[SessionServerProcess]:
    started = SessionServerProcess(socket_path, runners=1)
    started.start()
    yield started
    started.stop()


def _lines(engine: PpocrOnnxEngine, image: np.ndarray) -> list[tuple[str, tuple[float, ...], float]]:
    return [(line.text, tuple(line.box), round(line.confidence, 5)) for line in engine.recognize(image).lines]


def test_a_page_read_through_the_server_is_read_as_by_sessions_of_its_own(
    server: SessionServerProcess, socket_path: Path
) -> None:
    page = rendering.receipt().bgr()
    local = PpocrOnnxEngine(_CONFIG)
    remote = PpocrOnnxEngine(_CONFIG.model_copy(update={"session_server": socket_path}))
    try:
        expected = _lines(local, page)
        assert expected and any("TOTAL" in text for text, _, _ in expected)
        assert _lines(remote, page) == expected
        assert remote.describe()["session_server"] == str(socket_path)
        assert {model["provider"] for model in remote.describe()["models"]} == {"CPUExecutionProvider"}
    finally:
        local.close()
        remote.close()


def test_engines_of_several_processes_share_one_set_of_sessions(
    server: SessionServerProcess, socket_path: Path
) -> None:
    config = _CONFIG.model_copy(update={"session_server": socket_path})
    first = PpocrOnnxEngine(config)
    opened = SessionServerClient(socket_path).stats()["sessions"]
    warm_ups = SessionServerClient(socket_path).stats()["runs_done"]
    second = PpocrOnnxEngine(config)
    try:
        # 5 detector buckets, 4 line widths, orientation: each opened once, the second engine
        # (as a second worker's) finds them open.
        assert opened == 5 + 4 + 1
        assert SessionServerClient(socket_path).stats()["sessions"] == opened
        # The first engine warmed each one up; the second finds them warm and runs none again.
        assert warm_ups == opened
        assert SessionServerClient(socket_path).stats()["runs_done"] == warm_ups
        assert second.describe()["warm_up_ms"] < first.describe()["warm_up_ms"]
        page = rendering.chinese_page().bgr()
        assert _lines(second, page) == _lines(first, page)
    finally:
        first.close()
        second.close()


def test_sessions_no_engine_holds_any_more_are_closed(
    server: SessionServerProcess, socket_path: Path
) -> None:
    """A worker restarted on a new engine configuration leaves its old sessions to be closed."""
    watcher = SessionServerClient(socket_path)
    first = PpocrOnnxEngine(_CONFIG.model_copy(update={"session_server": socket_path}))
    first.recognize(rendering.receipt().bgr())  # the line threads open the sessions on their own channels
    assert watcher.stats()["sessions"] == 5 + 4 + 1
    other = PpocrOnnxEngine(_CONFIG.model_copy(update={"session_server": socket_path, "fixed_batch_size": 2}))
    try:
        # Batches of 2 rows are other shapes: recogniser and orientation sessions of their own;
        # the detector's buckets are the same and shared.
        assert watcher.stats()["sessions"] == 5 + 4 + 1 + 4 + 1
        first.close()
        assert wait_for(lambda: watcher.stats()["sessions"] == 5 + 4 + 1, timeout=60)
        assert other.recognize(rendering.receipt().bgr()).lines
    finally:
        other.close()
        watcher.close()


def test_pages_read_on_several_threads_at_once_come_back_each_to_its_own(
    server: SessionServerProcess, socket_path: Path
) -> None:
    engine = PpocrOnnxEngine(_CONFIG.model_copy(update={"session_server": socket_path}))
    pages = [rendering.receipt().bgr(), rendering.chinese_page().bgr()] * 3
    try:
        expected = [_lines(engine, page) for page in pages[:2]] * 3
        results: list[object] = [None] * len(pages)

        def read(index: int) -> None:
            results[index] = _lines(engine, pages[index])

        threads = [threading.Thread(target=read, args=(index,)) for index in range(len(pages))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == expected
    finally:
        engine.close()


def test_a_run_fails_clearly_when_the_server_is_gone_and_works_again_once_it_is_back(
    socket_path: Path,
) -> None:
    first = SessionServerProcess(socket_path)
    first.start()
    engine = PpocrOnnxEngine(_CONFIG.model_copy(update={"session_server": socket_path}))
    page = rendering.receipt().bgr()
    try:
        expected = _lines(engine, page)
        first.stop()
        with pytest.raises(SessionServerError, match="session server"):
            engine.recognize(page)
        second = SessionServerProcess(socket_path)
        second.start()
        try:
            # The sessions are opened again in the new server from what the engine asked at load.
            assert _lines(engine, page) == expected
        finally:
            second.stop()
    finally:
        engine.close()


def test_a_client_without_the_key_is_refused(server: SessionServerProcess, socket_path: Path) -> None:
    key = key_path(socket_path)
    assert key.stat().st_mode & 0o777 == 0o600
    assert socket_path.parent.stat().st_mode & 0o777 == 0o700
    real = key.read_bytes()
    key.write_bytes(b"not the key")
    try:
        with pytest.raises(SessionServerError, match="cannot reach"):
            SessionServerClient(socket_path).stats()
    finally:
        key.write_bytes(real)
    assert SessionServerClient(socket_path).stats()["runners"] == 1


def test_a_model_the_server_cannot_load_is_the_engines_model_error(
    server: SessionServerProcess, socket_path: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a graph")
    with pytest.raises(ModelError, match="cannot load"):
        RemoteSession(SessionServerClient(socket_path), "det", broken, None, {"provider": "cpu"})
    assert server.alive()


def test_a_server_that_cannot_listen_says_so(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the socket's folder should be")
    with pytest.raises(ModelError, match="session server"):
        SessionServerProcess(blocked / "sessions.sock").start(timeout=30)


class _HeldSession:
    """A session whose run waits until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def get_inputs(self) -> list[object]:
        return []

    def get_outputs(self) -> list[object]:
        return []

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]

    def run(self, _names: object, _feeds: object) -> list[np.ndarray]:
        self.entered.set()
        self.release.wait(60)
        return [np.zeros(1, dtype=np.float32)]


def test_stats_give_the_age_of_the_oldest_run_waiting_or_running(socket_path: Path) -> None:
    """What the daemon's keeper reads to tell a hung runner from a busy one."""
    server = SessionServer(socket_path, runners=1)
    held = _HeldSession()
    server._sessions.append(_OpenSession(held, None))  # as open() would, without a model file

    def stats() -> dict[str, float]:
        return dict(server._answer(("stats",), {}, set())[1])

    assert stats()["oldest_run_s"] == 0.0
    assert (stats()["runs_done"], stats()["run_busy_s"]) == (0, 0.0)
    runs = [threading.Thread(target=server.run, args=(0, None, {})) for _ in range(2)]
    for run in runs:
        run.start()  # the second waits for the one runner
    try:
        assert held.entered.wait(30)
        entered = time.perf_counter()  # the first run began before this
        first = stats()["oldest_run_s"]
        assert wait_for(lambda: stats()["oldest_run_s"] > first)  # it grows while the run is held
        assert stats()["runs_done"] == 0  # a run counts once it has returned
    finally:
        held_for = time.perf_counter() - entered  # the first run ends after this
        held.release.set()
        for run in runs:
            run.join()
    assert stats()["oldest_run_s"] == 0.0  # none left once both returned
    assert stats()["runs_done"] == 2
    assert stats()["run_busy_s"] >= held_for > 0.0
    assert stats()["pid"] == os.getpid()
    server._pool.shutdown()
