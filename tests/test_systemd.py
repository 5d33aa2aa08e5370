"""sd_notify over a real AF_UNIX datagram socket, the watchdog, SIGHUP reloads and journald fields."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import load_config
from appliance.daemon import Daemon
from appliance.systemd import MESSAGE_IDS, Notifier, event, under_journald
from tests.fakes import engines as fakes
from tests.polling import png_bytes, wait_for


class NotifySocket:
    """A stand-in for systemd's notify socket: collects (time, message) pairs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            for line in data.decode().splitlines():
                self.messages.append((time.monotonic(), line))

    def names(self) -> list[str]:
        return [message.split("=", 1)[0] for _, message in self.messages]

    def times(self, message: str) -> list[float]:
        return [at for at, line in self.messages if line == message]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NotifySocket]:
    receiver = NotifySocket(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(receiver.path))
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # ping every 0.2 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield receiver
    receiver.close()


def _write_config(root: Path, extra: str = "") -> Path:
    path = root / "config.yaml"
    path.write_text(
        "paths: {state_dir: state}\n"
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
        "intake: {settle_seconds: 0.2, min_free_mb: 0.0}\n" + extra,
        encoding="utf-8",
    )
    return path


def test_notifier_is_silent_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    notifier = Notifier()
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    notifier.ready("idle")  # must not raise


def test_watchdog_interval_ignores_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "10000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert Notifier().watchdog_interval is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert Notifier().watchdog_interval == 5.0


def test_lifecycle_messages_arrive_in_order(tmp_path: Path, notify_socket: NotifySocket) -> None:
    config_path = _write_config(tmp_path)
    daemon = Daemon(load_config(config_path), fakes.fixed_text_engine, config_path=config_path)
    stop = threading.Event()
    thread = threading.Thread(target=daemon.run, args=(stop,))
    thread.start()
    try:
        assert wait_for(lambda: "READY" in notify_socket.names())
        (tmp_path / "in" / "a.png").write_bytes(png_bytes())
        assert wait_for((tmp_path / "out" / "a.png.json").exists)
        # the JSON is written by the worker before the main loop settles the job: wait for the line
        assert wait_for(lambda: any("1 done" in line for line in _statuses(notify_socket)))
        pings = len(notify_socket.times("WATCHDOG=1"))
        assert wait_for(lambda: len(notify_socket.times("WATCHDOG=1")) >= pings + 3)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert wait_for(lambda: "STOPPING" in notify_socket.names())
    keys = notify_socket.names()
    assert keys[0] == "EXTEND_TIMEOUT_USEC"  # asked before the models load
    assert (
        keys.index("EXTEND_TIMEOUT_USEC")
        < keys.index("READY")
        < keys.index("WATCHDOG")
        < keys.index("STOPPING")
    )
    assert keys[-1] == "STOPPING"
    assert any("queued" in line and "0 done" in line for line in _statuses(notify_socket))


def _statuses(receiver: NotifySocket) -> list[str]:
    return [line for _, line in list(receiver.messages) if line.startswith("STATUS=")]


def test_watchdog_pings_stop_while_the_engine_hangs_and_resume_after(
    tmp_path: Path, notify_socket: NotifySocket
) -> None:
    config_path = _write_config(
        tmp_path,
        "jobs: {timeout_seconds: 3.0, max_attempts: 1}\nservice: {watchdog_stall_seconds: 1.0}\n",
    )
    daemon = Daemon(load_config(config_path), fakes.hanging_engine, config_path=config_path)
    stop = threading.Event()
    thread = threading.Thread(target=daemon.run, args=(stop,))
    thread.start()
    try:
        assert wait_for(lambda: len(notify_socket.times("WATCHDOG=1")) >= 2)
        (tmp_path / "in" / "hang.png").write_bytes(png_bytes("blue"))
        # The stall clock starts when the job is sent to its worker, two journal commits after the
        # claim: wait for the loop to list the job as being read (set once it was sent).
        assert wait_for(lambda: len(daemon._reading) == 1)
        claimed_at = time.monotonic()
        assert wait_for((tmp_path / "failed" / "hang.png.error.json").exists, timeout=30)
        failed_at = time.monotonic()
        assert wait_for(lambda: any(at > failed_at for at in notify_socket.times("WATCHDOG=1")))
    finally:
        stop.set()
        thread.join(timeout=30)
    pings = notify_socket.times("WATCHDOG=1")
    during_hang = [at for at in pings if claimed_at + 1.5 < at < failed_at - 0.2]
    assert during_hang == [], "no ping while the worker showed no progress"
    assert any(at > failed_at for at in pings), "pings resume once the hung worker is replaced"


def test_reload_applies_a_valid_config_and_keeps_the_running_one_on_error(
    tmp_path: Path, notify_socket: NotifySocket, caplog: pytest.LogCaptureFixture
) -> None:
    config_path = _write_config(tmp_path)
    daemon = Daemon(load_config(config_path), fakes.fixed_text_engine, config_path=config_path)
    stop, reload = threading.Event(), threading.Event()
    thread = threading.Thread(target=daemon.run, args=(stop, reload))
    thread.start()
    caplog.set_level(logging.INFO, logger="appliance.daemon")
    try:
        assert wait_for(daemon.ready.is_set)
        config_path.write_text(
            "paths: {state_dir: state}\n"
            "hot_folders:\n"
            "  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
            "  - {path: in2, output_dir: out2, archive_dir: archive, failed_dir: failed}\n"
            "intake: {settle_seconds: 0.2, min_free_mb: 0.0}\n",
            encoding="utf-8",
        )
        reload.set()
        assert wait_for(lambda: "configuration reloaded" in caplog.text)
        (tmp_path / "in2" / "new.png").write_bytes(png_bytes())
        assert wait_for((tmp_path / "out2" / "new.png.json").exists)
        config_path.write_text("hot_folders: [oops\n", encoding="utf-8")
        reload.set()
        assert wait_for(lambda: "reload failed, keeping the running configuration" in caplog.text)
        (tmp_path / "in" / "still.png").write_bytes(png_bytes("gray"))
        assert wait_for((tmp_path / "out" / "still.png.json").exists)
    finally:
        stop.set()
        thread.join(timeout=30)
    keys = notify_socket.names()
    assert keys.count("RELOADING") == 2
    reloading = [line for _, line in notify_socket.messages if line.startswith("MONOTONIC_USEC=")]
    assert len(reloading) == 2 and all(line.split("=")[1].isdigit() for line in reloading)
    first_reload = keys.index("RELOADING")
    assert "READY" in keys[first_reload + 1 :], "READY=1 again after a reload"


def test_cli_daemon_under_a_notify_socket(tmp_path: Path, notify_socket: NotifySocket) -> None:
    """The real command: READY, SIGHUP with a broken config keeps it running, SIGTERM exits 0."""
    api_socket = Path(tempfile.mkdtemp(prefix="api-")) / "api.sock"  # short: a unix socket's path
    config_path = _write_config(tmp_path, f"api: {{socket: {api_socket}}}\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "appliance", "run", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert wait_for(lambda: "READY" in notify_socket.names(), timeout=90)
        # READY=1 makes `systemctl start` return: the control API answers by then.
        assert api_socket.exists()
        config_path.write_text("surprise: 1\n", encoding="utf-8")
        process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: notify_socket.names().count("READY") >= 2)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "surprise: unknown key" in stderr
    # The receiver thread may take the last datagram a moment after the process exits.
    assert wait_for(lambda: notify_socket.names()[-1] == "STOPPING", timeout=10)
    api_socket.parent.rmdir()  # the socket went with the daemon


def test_job_events_carry_structured_fields(tmp_path: Path) -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    logging.getLogger("appliance.daemon").addHandler(handler)
    logging.getLogger("appliance.daemon").setLevel(logging.INFO)
    try:
        config_path = _write_config(tmp_path)
        daemon = Daemon(load_config(config_path), fakes.fixed_text_engine)
        daemon.start()
        stop = threading.Event()
        thread = threading.Thread(target=daemon.run, args=(stop,))
        thread.start()
        (tmp_path / "in" / "a.png").write_bytes(png_bytes())
        assert wait_for(lambda: daemon.stats.done == 1)
        stop.set()
        thread.join(timeout=30)
    finally:
        logging.getLogger("appliance.daemon").removeHandler(handler)
    done = [r for r in records if getattr(r, "MESSAGE_ID", None) == MESSAGE_IDS["job_done"]]
    assert len(done) == 1
    fields = done[0].__dict__
    assert fields["ROUTE"] == "done"
    assert len(fields["DOC_SHA256"]) == 64
    assert fields["JOB_ID"]
    assert float(fields["CONFIDENCE"]) == pytest.approx(0.97)
    claimed = [r for r in records if getattr(r, "MESSAGE_ID", None) == MESSAGE_IDS["job_claimed"]]
    assert claimed and claimed[0].__dict__["STAGE"] == "claim"


def test_event_fields_follow_journald_naming() -> None:
    fields = event("job_done", JOB_ID="abc", CONFIDENCE=None, ROUTE="done")
    assert "CONFIDENCE" not in fields
    assert all(key.isupper() and not key.startswith("_") and len(key) <= 64 for key in fields)
    assert len(set(MESSAGE_IDS.values())) == len(MESSAGE_IDS)
    assert all(len(value) == 32 and int(value, 16) >= 0 for value in MESSAGE_IDS.values())


def test_journald_is_detected_from_journal_stream(tmp_path: Path) -> None:
    """JOURNAL_STREAM names stderr's device and inode when systemd connected it to the journal."""
    log_file = tmp_path / "stderr"
    code = "from appliance.systemd import under_journald; print(under_journald())"
    with log_file.open("w") as stderr:
        info = os.fstat(stderr.fileno())
        for stream, expected in ((f"{info.st_dev}:{info.st_ino}", "True"), ("1:2", "False")):
            result = subprocess.run(
                [sys.executable, "-c", code],
                stderr=stderr,
                capture_output=False,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "JOURNAL_STREAM": stream},
                check=True,
            )
            assert result.stdout.strip() == expected
    assert under_journald() is False or "JOURNAL_STREAM" in os.environ
