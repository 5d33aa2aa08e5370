"""The VLM held in the session server for every worker reads lines as a worker's own copy does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.config import EngineConfig
from appliance.engines.base import PageText
from appliance.engines.factory import build_second_reader
from appliance.engines.ppocr_onnx.session_server import SessionServerError, SessionServerProcess
from appliance.engines.served_reader import ServedReader
from appliance.errors import ModelError
from tests.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "vlm"


def _config(**settings: Any) -> EngineConfig:
    """The random qwen2vl fixture read as the line reader, small enough to load quickly on two cores."""
    vlm: dict[str, Any] = {
        "model_dir": FIXTURES / "qwen2vl",
        "family": "qwen2vl_line",
        "device": "cpu",
        "threads": 1,
        "image_max_side": 0,
        "max_tokens_per_page": 24,
        "lines_together": 2,
        "draft": {"source": "none"},
        "repetition": {"min_span": 400},
    }
    vlm.update(settings)
    return EngineConfig.model_validate({"vlm_gguf": vlm})


def _crops(seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (30, width, 3), dtype=np.uint8) for width in (120, 300, 200)]


def _texts(pages: list[PageText]) -> list[list[str]]:
    return [[line.text for line in page.lines] for page in pages]


@pytest.fixture
def server(socket_path: Path) -> Iterator[SessionServerProcess]:
    started = SessionServerProcess(socket_path, reader_copies=2)
    started.start()
    yield started
    started.stop()


def test_lines_read_in_the_server_read_as_the_readers_own(
    server: SessionServerProcess, socket_path: Path
) -> None:
    config = _config()
    local: Any = build_second_reader(config, "vlm_gguf")
    served = ServedReader(socket_path, "vlm_gguf", config)
    crops, hints = _crops(), ["TOTAL 4.20", None, "CASH"]
    try:
        # What the cascade reads of a second reader comes from the copies in the server.
        for attribute in ("line_margin", "auto_keep", "lines_together"):
            assert getattr(served, attribute) == getattr(local, attribute), attribute
        assert served.lines_together == 2
        assert served.score_hints(True) is local.score_hints(True) is True
        expected = local.read_lines(crops, hints=hints)
        assert all(texts and texts[0] for texts in _texts(expected))  # each crop reads some text
        read = served.read_lines(crops, hints=hints)
        assert _texts(read) == _texts(expected)
        figures = [page.details["vlm_gguf"] for page in read]
        wanted = [page.details["vlm_gguf"] for page in expected]
        for key in ("generated_tokens", "image_tokens", "stop_reason", "lines_together"):
            assert [f[key] for f in figures] == [w[key] for w in wanted], key
        assert _texts([served.read(crops[1], hint="X")]) == _texts([local.read(crops[1], hint="X")])
        described = served.describe()
        assert described["session_server"] == str(socket_path)
        assert described["memory_plan"] == local.describe()["memory_plan"] | {"budget_mb": 8192 // 2}
        stats = server.stats()
        assert (stats["readers"], stats["reader_copies"], stats["reads_done"]) == (1, 2, 2)
    finally:
        local.close()
        served.close()


def test_workers_share_one_set_of_copies_closed_once_none_holds_them(
    server: SessionServerProcess, socket_path: Path
) -> None:
    config = _config()
    first = ServedReader(socket_path, "vlm_gguf", config)
    second = ServedReader(socket_path, "vlm_gguf", config)
    other = ServedReader(socket_path, "vlm_gguf", _config(lines_together=3))
    try:
        assert server.stats()["readers"] == 2  # one for each configuration
        crops = _crops()
        results: dict[str, list[list[str]]] = {}

        def read(name: str, reader: ServedReader) -> None:
            results[name] = _texts(reader.read_lines(crops))

        threads = [threading.Thread(target=read, args=(n, r)) for n, r in (("a", first), ("b", second))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results["a"] == results["b"] == _texts(other.read_lines(crops))
        other.close()
        assert wait_for(lambda: server.stats()["readers"] == 1)
        first.close()
        assert server.stats()["readers"] == 1  # the second still holds it
        assert _texts(second.read_lines(crops)) == results["a"]
    finally:
        first.close()
        second.close()
        other.close()
    assert wait_for(lambda: server.stats()["readers"] == 0)


def test_a_read_fails_clearly_when_the_server_is_gone_and_works_again_once_it_is_back(
    socket_path: Path,
) -> None:
    first = SessionServerProcess(socket_path)
    first.start()
    reader = ServedReader(socket_path, "vlm_gguf", _config())
    crops = _crops()
    try:
        expected = _texts(reader.read_lines(crops))
        first.stop()
        with pytest.raises(SessionServerError, match="session server"):
            reader.read_lines(crops)
        second = SessionServerProcess(socket_path)
        second.start()
        try:
            # The reader is built again in the new server from the configuration sent at first.
            assert _texts(reader.read_lines(crops)) == expected
            assert second.stats()["readers"] == 1
        finally:
            second.stop()
    finally:
        reader.close()


def test_a_reader_the_server_cannot_build_is_a_model_error(
    server: SessionServerProcess, tmp_path: Path
) -> None:
    with pytest.raises(ModelError, match="manifest"):
        ServedReader(server.socket_path, "vlm_gguf", _config(model_dir=tmp_path))
    assert server.stats()["readers"] == 0


def test_the_factory_reads_in_the_server_its_configuration_names(
    server: SessionServerProcess, socket_path: Path
) -> None:
    config = _config()
    assert config.vlm_gguf is not None
    served = config.model_copy(
        update={"vlm_gguf": config.vlm_gguf.model_copy(update={"session_server": socket_path})}
    )
    reader = build_second_reader(served, "vlm_gguf", workers=4)
    try:
        assert isinstance(reader, ServedReader)
        # The server builds it without the socket, its budget shared by its copies, not the workers.
        assert reader.describe()["memory_plan"]["budget_mb"] == 8192 // 2
        assert len(reader.read_lines(_crops())) == 3
    finally:
        reader.close()


def test_lines_whose_page_ran_out_of_time_waiting_for_a_copy_are_not_read(
    server: SessionServerProcess, socket_path: Path
) -> None:
    reader = ServedReader(socket_path, "vlm_gguf", _config())
    try:
        # A deadline is a time.monotonic() value, the same clock in the server's process.
        with pytest.raises(ModelError, match="time ran out"):
            reader.read_lines(_crops(), deadline=time.monotonic() - 1.0)
        assert server.stats()["reads_done"] == 0
        assert len(reader.read_lines(_crops(), deadline=time.monotonic() + 300.0)) == 3
    finally:
        reader.close()
