"""The daemon's session server keeper: its socket, a dead server reported and started again, nothing left."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance import session_server_keeper
from appliance.config import AppConfig
from appliance.engines.ppocr_onnx.remote_session import SessionServerClient
from appliance.session_server_keeper import SessionServerKeeper, choose_socket
from appliance.systemd import MESSAGE_IDS
from tests.fakes.session_server import FakeSessionServerProcess
from tests.polling import process_gone, wait_for

REPO = Path(__file__).resolve().parent.parent


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def errors() -> list[str]:
    return []


@pytest.fixture
def keeper(clock: Clock, errors: list[str]) -> Iterator[SessionServerKeeper]:
    kept = SessionServerKeeper(1, errors.append, environ={}, clock=clock)
    yield kept
    kept.stop()


def _answers(keeper: SessionServerKeeper) -> bool:
    client = SessionServerClient(keeper.socket_path)
    try:
        return client.stats()["runners"] == keeper.runners
    finally:
        client.close()


def test_under_systemd_the_socket_is_in_the_runtime_directory() -> None:
    path, made = choose_socket({"RUNTIME_DIRECTORY": "/run/ocr-appliance:/run/other"})
    assert path == Path("/run/ocr-appliance/sessions/sessions.sock")
    assert made is None  # systemd's folder: systemd removes it


def test_elsewhere_the_socket_is_in_a_private_folder_of_its_own() -> None:
    path, made = choose_socket({})
    try:
        assert made is not None and path.parent == made
        assert made.name.startswith("ocr-sessions-")
        assert made.stat().st_mode & 0o777 == 0o700
        assert len(str(path)) < 107  # a unix socket's longest path
    finally:
        assert made is not None
        made.rmdir()


def test_the_workers_engine_is_pointed_at_the_socket(keeper: SessionServerKeeper) -> None:
    config = AppConfig()
    served = keeper.served(config)
    assert served.engine.ppocr_onnx.session_server == keeper.socket_path
    assert served.engine.ppocr_onnx.model_copy(update={"session_server": None}) == config.engine.ppocr_onnx
    assert served.jobs == config.jobs


def test_a_server_that_died_is_reported_once_and_started_again(
    keeper: SessionServerKeeper, clock: Clock, errors: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    keeper.start()
    first = keeper.pid
    assert first is not None and keeper.alive() and _answers(keeper)
    keeper.check()
    assert keeper.restarts == 0 and not errors  # alive: nothing to do

    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: not keeper.alive())
    clock.now += 1.0  # within the interval since it started: reported, not started yet
    with caplog.at_level(logging.ERROR, logger=session_server_keeper.__name__):
        keeper.check()
        keeper.check()
    assert errors == [f"the session server (pid {first}) was killed by SIGKILL"]
    died = [record for record in caplog.records if getattr(record, "MESSAGE_ID", None)]
    assert [record.MESSAGE_ID for record in died] == [MESSAGE_IDS["session_server_died"]]
    assert not keeper.alive() and keeper.restarts == 0

    clock.now += session_server_keeper.RESTART_INTERVAL_S
    keeper.check()
    assert keeper.alive() and keeper.restarts == 1
    assert keeper.pid not in (None, first)
    assert _answers(keeper)
    assert len(errors) == 1


def test_a_server_that_cannot_start_again_is_reported_and_tried_later(
    keeper: SessionServerKeeper, clock: Clock, errors: list[str]
) -> None:
    keeper.start()
    folder = keeper.socket_path.parent
    assert keeper.pid is not None
    os.kill(keeper.pid, signal.SIGKILL)
    assert wait_for(lambda: not keeper.alive())
    # A file where the socket's folder was: the new server cannot listen and exits.
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    folder.write_text("in the way")
    clock.now += session_server_keeper.RESTART_INTERVAL_S
    keeper.check()  # the daemon's loop goes on
    assert not keeper.alive() and keeper.restarts == 0
    assert "could not be started again" in errors[-1]

    folder.unlink()
    keeper.check()  # too soon after the last try
    assert not keeper.alive()
    clock.now += session_server_keeper.RESTART_INTERVAL_S
    keeper.check()
    assert keeper.alive() and keeper.restarts == 1 and _answers(keeper)


def test_stop_ends_the_server_and_removes_its_socket_key_and_folder(clock: Clock) -> None:
    keeper = SessionServerKeeper(2, lambda _message: None, environ={}, clock=clock)
    keeper.start()
    pid, folder = keeper.pid, keeper.socket_path.parent
    assert pid is not None and keeper.socket_path.exists()
    keeper.stop()
    assert not keeper.alive() and process_gone(pid)
    assert not folder.exists()


def test_the_server_holds_as_many_copies_of_a_served_reader_as_the_keeper_is_told(clock: Clock) -> None:
    keeper = SessionServerKeeper(1, lambda _message: None, reader_copies=3, environ={}, clock=clock)
    keeper.start()
    client = SessionServerClient(keeper.socket_path)
    try:
        stats = client.stats()
        assert (stats["reader_copies"], stats["readers"], stats["reads_done"]) == (3, 0, 0)
    finally:
        client.close()
        keeper.stop()


def test_under_systemd_stop_leaves_the_runtime_directory_to_systemd(clock: Clock) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="ocr-rt-"))  # short, unlike tmp_path: a socket's path
    keeper = SessionServerKeeper(
        1, lambda _message: None, environ={"RUNTIME_DIRECTORY": str(runtime)}, clock=clock
    )
    try:
        keeper.start()
        assert keeper.socket_path == runtime / "sessions" / "sessions.sock"
        assert keeper.socket_path.parent.stat().st_mode & 0o777 == 0o700
        keeper.stop()
        assert runtime.is_dir() and list(keeper.socket_path.parent.iterdir()) == []
    finally:
        keeper.stop()
        shutil.rmtree(runtime)


# A daemon stand-in: starts the keeper's server, prints its pid, and waits to be killed.
_DAEMON = """
from appliance.session_server_keeper import SessionServerKeeper
import time

keeper = SessionServerKeeper(1, print, environ={})
keeper.start()
print(keeper.pid, keeper.socket_path.parent, flush=True)
time.sleep(600)
"""


def test_a_killed_daemon_leaves_no_server_behind() -> None:
    daemon = subprocess.Popen([sys.executable, "-c", _DAEMON], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert daemon.stdout is not None
    pid, folder = daemon.stdout.readline().split()
    server = int(pid)
    try:
        assert not process_gone(server)
        daemon.kill()
        daemon.wait()
        assert wait_for(lambda: process_gone(server))
    finally:
        daemon.kill()
        if not process_gone(server):
            os.kill(server, signal.SIGKILL)
        shutil.rmtree(folder)  # the killed stand-in could not remove it


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): state T in /proc/PID/stat."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_a_server_that_stops_answering_is_killed_and_started_again(
    keeper: SessionServerKeeper, clock: Clock, errors: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    keeper.start()
    first = keeper.pid
    assert first is not None
    os.kill(first, signal.SIGSTOP)  # frozen: alive, but answers nothing
    assert wait_for(lambda: _stopped(first))
    with caplog.at_level(logging.ERROR, logger=session_server_keeper.__name__):
        keeper.check()  # asks, on a thread that waits
        clock.now += session_server_keeper.ANSWER_TIMEOUT_S - 1
        keeper.check()
        assert keeper.alive() and not errors  # not yet past the answer's time
        clock.now += 2
        keeper.check()
    assert errors == [f"the session server (pid {first}) did not answer within 30 s: killed"]
    hung = [record for record in caplog.records if getattr(record, "MESSAGE_ID", None)]
    assert [record.MESSAGE_ID for record in hung] == [MESSAGE_IDS["session_server_hung"]]
    assert wait_for(lambda: process_gone(first))

    keeper.check()  # its start was long enough ago: started again, its death not reported twice
    assert keeper.alive() and keeper.restarts == 1 and keeper.pid != first
    assert _answers(keeper)
    assert len(errors) == 1


def test_a_server_with_a_run_older_than_a_job_may_take_is_killed_and_one_merely_busy_is_not(
    clock: Clock, errors: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeSessionServerProcess.started = []
    monkeypatch.setattr(session_server_keeper, "SessionServerProcess", FakeSessionServerProcess)
    keeper = SessionServerKeeper(1, errors.append, hung_run_s=600.0, environ={}, clock=clock)
    keeper.start()
    first = FakeSessionServerProcess.started[0]
    first.oldest_run_s = 12.0  # runs queue behind one another: busy, not hung

    keeper.check()
    assert wait_for(lambda: first.requests == 1)
    keeper.check()
    assert first.requests == 1  # asked again only after the interval
    clock.now += session_server_keeper.PROBE_INTERVAL_S
    assert wait_for(lambda: (keeper.check(), first.requests == 2)[1])
    assert first.alive() and not errors

    first.oldest_run_s = 700.0  # a run stuck longer than the keeper allows
    clock.now += session_server_keeper.PROBE_INTERVAL_S
    assert wait_for(lambda: (keeper.check(), bool(errors))[1])
    assert errors == [
        f"the session server (pid {first.pid}) has had a model run waiting or running for 700 s: killed"
    ]
    assert not first.alive()
    keeper.check()
    assert len(FakeSessionServerProcess.started) == 2 and keeper.restarts == 1 and keeper.alive()
    keeper.stop()


def test_a_worker_about_to_load_gets_a_dead_server_started_at_once(
    keeper: SessionServerKeeper, clock: Clock, errors: list[str]
) -> None:
    keeper.start()
    first = keeper.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: not keeper.alive())
    keeper.check()  # within the interval since its start: reported, not started
    assert not keeper.alive()
    keeper.check(now=True)  # a worker is about to open its sessions in it
    assert keeper.alive() and keeper.restarts == 1 and keeper.pid != first and _answers(keeper)
    assert errors == [f"the session server (pid {first}) was killed by SIGKILL"]
