"""The control API against a real daemon (fake engines) on a real unix socket.

Each test starts a Daemon on its own thread and an ApiServer on a socket in a short temporary
folder (unix socket paths are limited to 107 bytes, and pytest's tmp_path can be longer).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.api.client import ApiError, Client
from appliance.api.server import ApiServer, prepare_socket_path
from appliance.api.v1 import appliance_pb2 as pb
from appliance.config import (
    ApiConfig,
    AppConfig,
    HotFolderConfig,
    IntakeConfig,
    JobsConfig,
    PathsConfig,
    RepairConfig,
)
from appliance.control import Control
from appliance.daemon import Daemon
from appliance.errors import ConfigError
from tests.fakes import engines as fakes
from tests.polling import png_bytes, wait_for

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="api-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Appliance:
    """A daemon on its own thread, serving the API on `socket`."""

    def __init__(self, root: Path, socket_dir: Path, api: dict[str, object] | None = None) -> None:
        folder = HotFolderConfig(
            path=root / "in",
            output_dir=root / "out",
            archive_dir=root / "archive",
            failed_dir=root / "failed",
        )
        self.socket = socket_dir / "api.sock"
        self.config = AppConfig(
            paths=PathsConfig(state_dir=root / "state"),
            hot_folders=(folder,),
            intake=IntakeConfig(settle_seconds=0.2, min_free_mb=0.0),
            jobs=JobsConfig(retry_backoff_seconds=0.0),
            repair=RepairConfig(field_profile="none"),  # fixed text has no receipt fields to review
            api=ApiConfig(socket=self.socket, **(api or {})),  # type: ignore[arg-type]
        )
        self.config_path = root / "config.yaml"
        self.inbox = folder.path
        self.daemon = Daemon(self.config, fakes.fixed_text_engine, config_path=self.config_path)
        self.api = ApiServer(Control(self.daemon), self.config.api)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.daemon.run, args=(self.stop,))

    def __enter__(self) -> Appliance:
        self.daemon.start()
        self.thread.start()
        self.api.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.api.stop()
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()

    def client(self, timeout: float = 10.0) -> Client:
        return Client(self.socket, timeout=timeout)

    def drop(self, name: str, data: bytes | None = None) -> None:
        staged = self.inbox.parent / f".{name}"
        staged.write_bytes(data if data is not None else png_bytes())
        staged.rename(self.inbox / name)


@pytest.fixture
def appliance(tmp_path: Path, short_dir: Path) -> Iterator[Appliance]:
    with Appliance(tmp_path, short_dir) as running:
        yield running


def _done(client: Client, count: int) -> Callable[[], bool]:
    return lambda: client.status().queue.get("done", 0) >= count


def _finished(client: Client, count: int) -> Callable[[], bool]:
    return lambda: sum(client.status().queue.get(s, 0) for s in ("done", "review", "failed")) >= count


# -- reads --------------------------------------------------------------------------------------


def test_status_jobs_and_job_over_the_socket(appliance: Appliance) -> None:
    with appliance.client() as client:
        status = client.status()
        assert status.version
        assert status.state == pb.DAEMON_STATE_RUNNING
        assert [engine.name for engine in status.engines] == ["fake_fixed"]
        appliance.drop("a.png")
        assert wait_for(_done(client, 1))
        jobs = client.list_jobs(pb.ListJobsRequest()).jobs
        assert [job.name for job in jobs] == ["a.png"]
        assert jobs[0].state == pb.JOB_STATE_DONE
        detail = client.get_job(jobs[0].id)
        assert Path(detail.job.outputs["json"]).exists()
        assert [t.to_state for t in detail.transitions][-1] == pb.JOB_STATE_DONE
        assert detail.page_timings and detail.page_timings[0].page == 1
        done_only = client.list_jobs(pb.ListJobsRequest(state=pb.JOB_STATE_FAILED)).jobs
        assert done_only == []
        with pytest.raises(ApiError) as missing:
            client.get_job("no-such-job")
        assert missing.value.code == "NOT_FOUND"
        assert "ocr-appliance jobs" in missing.value.message
        for request in (pb.ListJobsRequest(page_size=5000), pb.ListJobsRequest(page_token="x")):
            with pytest.raises(ApiError) as bad:
                client.list_jobs(request)
            assert bad.value.code == "INVALID_ARGUMENT"


def test_paging_and_folder_filter(appliance: Appliance) -> None:
    with appliance.client() as client:
        for index in range(3):
            appliance.drop(f"p{index}.png", png_bytes(["white", "gray", "black"][index]))
        assert wait_for(_done(client, 3))
        first = client.list_jobs(pb.ListJobsRequest(page_size=2))
        assert len(first.jobs) == 2 and first.next_page_token
        second = client.list_jobs(pb.ListJobsRequest(page_size=2, page_token=first.next_page_token))
        assert len(second.jobs) == 1 and not second.next_page_token
        assert {j.id for j in first.jobs}.isdisjoint({j.id for j in second.jobs})
        other = client.list_jobs(pb.ListJobsRequest(folder="/elsewhere"))
        assert other.jobs == []


def test_health_and_reflection(appliance: Appliance) -> None:
    with appliance.client() as client:
        channel = client._channel
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "appliance.v1.Appliance"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="appliance.v1.Appliance"),
        ]
        listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=5))
        names = {service.name for service in listed.list_services_response.service}
        assert {
            "appliance.v1.Appliance",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
        } <= names
        assert described.file_descriptor_response.file_descriptor_proto


# -- commands -----------------------------------------------------------------------------------


def test_pause_holds_new_work_and_resume_releases_it(appliance: Appliance) -> None:
    with appliance.client() as client:
        assert client.pause().state == pb.DAEMON_STATE_PAUSED
        assert client.status().state == pb.DAEMON_STATE_PAUSED
        appliance.drop("held.png")
        time.sleep(1.0)
        assert client.status().queue.get("done", 0) == 0
        assert client.resume().state == pb.DAEMON_STATE_RUNNING
        assert wait_for(_done(client, 1))


def test_reprocess_by_job_id_and_sha256(appliance: Appliance) -> None:
    with appliance.client() as client:
        appliance.drop("r.png")
        assert wait_for(_done(client, 1))
        original = client.list_jobs(pb.ListJobsRequest()).jobs[0]
        again = client.reprocess(pb.ReprocessRequest(job_id=original.id)).job
        assert again.id != original.id and again.sha256 == original.sha256
        assert wait_for(_done(client, 2))
        by_hash = client.reprocess(pb.ReprocessRequest(sha256=original.sha256.upper())).job
        assert by_hash.sha256 == original.sha256
        for request, code in [
            (pb.ReprocessRequest(), "INVALID_ARGUMENT"),
            (pb.ReprocessRequest(job_id=original.id, engine="vlm"), "INVALID_ARGUMENT"),
            (pb.ReprocessRequest(job_id="nope"), "NOT_FOUND"),
        ]:
            with pytest.raises(ApiError) as refused:
                client.reprocess(request)
            assert refused.value.code == code, refused.value.message


def test_reload_with_a_broken_config_keeps_the_running_one(appliance: Appliance) -> None:
    appliance.config_path.write_text("engine: [unclosed\n", encoding="utf-8")
    with appliance.client() as client:
        with pytest.raises(ApiError) as refused:
            client.reload()
        assert refused.value.code == "FAILED_PRECONDITION"
        # What was wrong comes from Daemon.reload_with_message (the daemon's log has it in full).
        assert refused.value.message.strip()
        assert "running configuration is kept" in refused.value.message
        assert client.status().state == pb.DAEMON_STATE_RUNNING
        assert any("reload failed" in error.message for error in client.status().recent_errors)
        appliance.drop("after.png")
        assert wait_for(_done(client, 1))
    cli = subprocess.run(
        [sys.executable, "-m", "appliance", "reload", "--socket", str(appliance.socket)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli.returncode == 4, cli.stderr
    assert "FAILED_PRECONDITION" in cli.stderr


def test_drain_finishes_and_stops_the_daemon(appliance: Appliance) -> None:
    with appliance.client() as client:
        assert client.drain().state == pb.DAEMON_STATE_DRAINING
    appliance.thread.join(timeout=30)
    assert not appliance.thread.is_alive(), "a drained daemon with nothing running stops"


# -- events -------------------------------------------------------------------------------------


def test_watch_streams_transitions_and_resumes_after_a_sequence_number(appliance: Appliance) -> None:
    with appliance.client() as client:
        appliance.drop("w.png")
        assert wait_for(_done(client, 1))
        call = client.stub.WatchEvents(pb.WatchEventsRequest(after_seq=0))
        first = next(call)
        second = next(call)
        call.cancel()  # the client goes away mid-stream
        assert second.seq > first.seq
        resumed = client.stub.WatchEvents(pb.WatchEventsRequest(after_seq=first.seq))
        assert next(resumed).seq == second.seq
        resumed.cancel()
        # Both streams' watchers see the disconnect and free their slots.
        assert wait_for(lambda: appliance.api.watchers == 0, timeout=30)
        assert appliance.api.streaming == 0
        live = client.stub.WatchEvents(pb.WatchEventsRequest(only_new=True), timeout=60)
        # The stream takes its starting point when its handler runs: drop the file only after.
        assert wait_for(lambda: appliance.api.streaming == 1, timeout=30)
        appliance.drop("later.png", png_bytes("gray"))
        event = next(live)
        assert event.seq > second.seq and event.from_state == pb.JOB_STATE_UNSPECIFIED
        live.cancel()


def test_a_deadline_ends_a_stream_on_time(appliance: Appliance) -> None:
    with appliance.client() as client:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as ended:
            list(client.stub.WatchEvents(pb.WatchEventsRequest(only_new=True), timeout=0.5))
        assert ended.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 3


# -- load ---------------------------------------------------------------------------------------


def test_200_concurrent_status_calls_while_documents_are_read(appliance: Appliance) -> None:
    colours = ["white", "gray", "black", "red", "blue", "green", "yellow", "cyan"]
    with appliance.client() as client:
        for index, colour in enumerate(colours):
            appliance.drop(f"load{index}.png", png_bytes(colour))

        def one(_: int) -> float:
            started = time.perf_counter()
            assert client.status().version
            return time.perf_counter() - started

        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            latencies = sorted(pool.map(one, range(200)))
        assert len(latencies) == 200
        assert latencies[int(0.99 * 200) - 1] < 5.0
        assert wait_for(_finished(client, len(colours)), timeout=60)


# -- the socket ---------------------------------------------------------------------------------


def test_socket_mode_and_a_stale_socket_from_a_crash(tmp_path: Path, short_dir: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(short_dir / "api.sock"))
    stale.close()  # a crashed daemon leaves the file behind, with nobody listening
    short_dir.chmod(0o755)  # a folder of the socket's own is closed to others at start
    with Appliance(tmp_path, short_dir) as running:
        mode = running.socket.stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660
        assert running.socket.stat().st_gid == os.getgid()
        folder = short_dir.stat()
        assert stat.S_IMODE(folder.st_mode) == 0o750 and folder.st_gid == os.getgid()
        assert sorted(p.name for p in short_dir.iterdir()) == ["api.sock"], "no temporary name left"
        with running.client() as client:
            assert client.status().version
        with pytest.raises(ConfigError, match="another process serves there"):
            prepare_socket_path(running.socket, os.getgid())
    assert not running.socket.exists(), "the socket is removed on stop"
    (short_dir / "api.sock").write_text("not a socket", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a socket"):
        prepare_socket_path(short_dir / "api.sock", os.getgid())


def test_no_chown_when_the_socket_has_its_group_already(
    tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The unit's system-call filter (~@privileged holds @chown) fails every chown with EPERM.
    def refused(*_args: object, **_kwargs: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "chown", refused)
    with Appliance(tmp_path, short_dir) as running, running.client() as client:
        assert client.status().version
        assert stat.S_IMODE(running.socket.stat().st_mode) == 0o660


def test_a_shared_folder_open_to_everyone_is_refused_and_left_alone(short_dir: Path) -> None:
    (short_dir / "someone-else").write_text("", encoding="utf-8")  # not the socket's own folder
    short_dir.chmod(0o755)
    with pytest.raises(ConfigError, match="every user may enter"):
        prepare_socket_path(short_dir / "api.sock", os.getgid())
    assert stat.S_IMODE(short_dir.stat().st_mode) == 0o755
    made = short_dir / "run" / "api.sock"
    prepare_socket_path(made, os.getgid())  # a missing folder is made 0750
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o750


_CONNECT = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(sys.argv[1])
except OSError as error:
    print("refused", error.errno)
    raise SystemExit(0)
from appliance.api.client import ApiError, Client
try:
    Client(sys.argv[1], timeout=5).status()
except ApiError as error:
    print(error.code, error.message)
else:
    print("OK")
"""


def _as_uid_65534(socket_path: Path, groups: str) -> str:
    result = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            groups,
            sys.executable,
            "-c",
            _CONNECT,
            str(socket_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=60,
    )
    return result.stdout.strip() + result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
@pytest.mark.parametrize("mode", ["0660", "0666"])
def test_a_uid_outside_the_group_cannot_even_connect(tmp_path: Path, short_dir: Path, mode: str) -> None:
    """The folder (0750) keeps strangers out even when the socket itself is made 0666 by mistake."""
    with Appliance(tmp_path, short_dir, api={"mode": mode}) as running:
        stranger = _as_uid_65534(running.socket, "--clear-groups")
        assert stranger.startswith(f"refused {errno.EACCES}"), stranger
        member = _as_uid_65534(running.socket, f"--groups={os.getgid()}")
        assert member.startswith("OK"), member
        with running.client() as client:  # root still is served
            assert client.status().version


# -- hostile clients ----------------------------------------------------------------------------


def _raw(path: Path, payload: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        sock.connect(str(path))
        sock.sendall(payload)
        with contextlib.suppress(OSError):
            sock.recv(4096)


def test_garbage_and_oversized_requests_never_crash_the_server(appliance: Appliance) -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    for payload in (
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00" * 1000,
        preface + b"\xff" * 64,
        preface + b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x7f\xff\xff\xff",  # window update overflow
        preface,
    ):
        _raw(appliance.socket, payload)
    with appliance.client() as client:
        big = pb.ResolveReviewRequest(job_id="x", fields={"note": "x" * (5 * 1024 * 1024)})
        with pytest.raises(ApiError) as refused:
            client.resolve_review(big)
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        assert "api.max_message_bytes" in refused.value.message
        assert client.status().version


_METHODS = [
    "GetStatus",
    "ListJobs",
    "GetJob",
    "Reprocess",
    "ListReview",
    "ResolveReview",
    "GetMetrics",
    "NoSuchMethod",
]
_ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNIMPLEMENTED,
}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(method=st.sampled_from(_METHODS), body=st.binary(max_size=512))
def test_fuzzed_request_bodies_get_a_status_not_a_crash(
    appliance: Appliance, method: str, body: bytes
) -> None:
    with appliance.client() as client:
        call = client._channel.unary_unary(f"/appliance.v1.Appliance/{method}")
        try:
            call(body, timeout=5)
            code = grpc.StatusCode.OK
        except grpc.RpcError as error:
            code = error.code()  # type: ignore[attr-defined]
        assert code in _ALLOWED, (method, body, code)
        assert client.status().version


# -- TCP ----------------------------------------------------------------------------------------


def test_tcp_refuses_addresses_beyond_loopback() -> None:
    with pytest.raises(ValueError, match="not a loopback address"):
        ApiConfig.Tcp(host="0.0.0.0", port=7443, cert=Path("c"), key=Path("k"))
    assert ApiConfig().tcp is None


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_tls_on_loopback_when_configured(tmp_path: Path, short_dir: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    tcp = {"host": "127.0.0.1", "port": 0, "cert": cert, "key": key}
    with Appliance(tmp_path, short_dir, api={"tcp": tcp}) as running:
        port = running.api.tcp_port
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"localhost:{port}", credentials) as channel:
            from appliance.api.v1 import appliance_pb2_grpc as pb_grpc

            status = pb_grpc.ApplianceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
            assert status.state == pb.DAEMON_STATE_RUNNING
        with socket.create_connection(("127.0.0.1", port), timeout=2) as plain:
            plain.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # no TLS: dropped
