"""Control API under hostile local clients: GetStatus latency and the daemon's memory, every limit at once.

Starts a daemon of its own (fake instant engine) with its API on a unix socket in a fresh
temporary folder, in a child process, and then opens against it at once: 32 WatchEvents watchers
(the cap; a 33rd must get RESOURCE_EXHAUSTED), 40 health Watch streams, 40 unary calls that never
half-close (raw HTTP/2: headers and part of a message, then silence), 520 idle connections (HTTP/2
preface and SETTINGS, then silence), a reflection stream that keeps sending requests but never
reads a byte nor grants flow-control window, and a few malformed requests. Then it times
GetStatus from a fresh client and reads the daemon's RSS against its idle figure. Prints the
figures; exits 1 when a call took 1 s or more, or RSS grew by 100 MB or more. Bounded: every
phase has a deadline, and the whole run stops by itself within about two minutes.

    python -m bench.api_hostile [--idle-connections 520] [--half-open 40] [--seconds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from appliance.api.client import Client
from appliance.api.v1 import appliance_pb2 as pb
from appliance.api.v1 import appliance_pb2_grpc as pb_grpc
from bench import child_process

WATCHERS = 32
HEALTH_WATCHES = 40
LATENCY_LIMIT_S = 1.0
RSS_LIMIT_MB = 100.0

# -- raw HTTP/2, just enough to misbehave -------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY, _CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x7, 0x9
_MAX_FRAME = 16384
_END_STREAM, _END_HEADERS = 0x1, 0x4
_SETTINGS_INITIAL_WINDOW_SIZE = 0x4


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113, section 4.1)."""
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541, section 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def headers_block(headers: list[tuple[bytes, bytes]]) -> bytes:
    """Literal fields without indexing or Huffman coding: valid HPACK that needs no table."""
    block = b""
    for name, value in headers:
        block += b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value
    return block


def grpc_headers(path: bytes, stream: int = 1, end_stream: bool = False) -> bytes:
    block = headers_block(
        [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path),
            (b":authority", b"localhost"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
    )
    return header_frames(block, stream, end_stream)


def header_frames(block: bytes, stream: int = 1, end_stream: bool = False) -> bytes:
    """HEADERS and as many CONTINUATION frames as the block needs at the default 16 KiB frame size."""
    pieces = [block[start : start + _MAX_FRAME] for start in range(0, len(block), _MAX_FRAME)] or [b""]
    out = b""
    for index, piece in enumerate(pieces):
        flags = _END_HEADERS if index == len(pieces) - 1 else 0
        if index == 0:
            out += frame(_HEADERS, flags | (_END_STREAM if end_stream else 0), stream, piece)
        else:
            out += frame(_CONTINUATION, flags, stream, piece)
    return out


def grpc_message(body: bytes, stream: int = 1, end_stream: bool = False) -> bytes:
    """A DATA frame holding one length-prefixed gRPC message."""
    payload = b"\x00" + struct.pack(">I", len(body)) + body
    return frame(_DATA, _END_STREAM if end_stream else 0, stream, payload)


def connect(path: Path, greeting: bytes = b"") -> socket.socket:
    """A unix connection that has sent the HTTP/2 preface, an empty SETTINGS and `greeting`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(path))
    sock.sendall(PREFACE + frame(_SETTINGS, 0, 0, b"") + greeting)
    return sock


def read_frames(sock: socket.socket, seconds: float = 10.0) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each frame the server sends, until EOF or `seconds` pass."""
    buffer = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
            yield kind, flags, stream, buffer[9 : 9 + length]
            buffer = buffer[9 + length :]
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return
        if not chunk:
            return
        buffer += chunk


def stream_ended(sock: socket.socket, stream: int = 1, seconds: float = 10.0) -> str:
    """How the server ended `stream`: "trailers", "reset", "goaway" or "" (nothing, or EOF)."""
    for kind, flags, number, _ in read_frames(sock, seconds):
        if kind == _HEADERS and number == stream and flags & _END_STREAM:
            return "trailers"
        if kind == _RST_STREAM and number == stream:
            return "reset"
        if kind == _GOAWAY:
            return "goaway"
    return ""


def half_open_unary(path: Path) -> socket.socket:
    """GetStatus whose request message never arrives in full and whose stream never ends."""
    # A DATA frame that announces a 100-byte gRPC message but carries its first 5 bytes only.
    partial = frame(_DATA, 0, 1, b"\x00" + struct.pack(">I", 100))
    return connect(path, grpc_headers(b"/appliance.v1.Appliance/GetStatus") + partial)


def reflection_flood(path: Path, seconds: float, max_bytes: int) -> tuple[socket.socket, int]:
    """A reflection stream that sends requests for `seconds` but never reads and grants no window.

    The server may answer each request with a few KB of descriptors it cannot send; returns the
    socket (kept open) and how many bytes of requests went out before the socket stopped taking
    them or the time or byte budget ran out.
    """
    zero_window = struct.pack(">HI", _SETTINGS_INITIAL_WINDOW_SIZE, 0)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # never read, so keep it small
    sock.settimeout(5)
    sock.connect(str(path))
    sock.sendall(
        PREFACE
        + frame(_SETTINGS, 0, 0, zero_window)
        + grpc_headers(b"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    )
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="appliance.v1.Appliance")
    chunk = grpc_message(request.SerializeToString()) * 64
    sent = 0
    deadline = time.monotonic() + seconds
    sock.settimeout(0.5)
    while time.monotonic() < deadline and sent < max_bytes:
        try:
            sock.sendall(chunk)
        except TimeoutError:
            break  # the server stopped reading: flow control holds the stream
        sent += len(chunk)
    return sock, sent


def malformed(path: Path) -> list[socket.socket]:
    """Requests that crashed or dropped connections of the old server: each on its own connection."""
    empty = grpc_message(b"", end_stream=True)  # an empty GetStatusRequest, and the end of the call
    cases = [
        grpc_headers(b"/appliance.v1.Appliance/GetStatus ") + empty,  # a trailing space
        grpc_headers(b"/" + b"x" * 70_000) + empty,  # 70 KB, over the metadata limit
        header_frames(
            headers_block(
                [
                    (b":method", b"POST"),
                    (b":scheme", b"http"),
                    (b":path", b"/appliance.v1.Appliance/GetStatus"),
                    (b"content-type", b"application/grpc"),
                    (b"x-junk", b"\xff\xfe\xfd"),  # not UTF-8
                ]
            )
        )
        + empty,
    ]
    sockets = []
    for greeting in cases:
        with contextlib.suppress(OSError):
            sockets.append(connect(path, greeting))
    return sockets


# -- the daemon under test ----------------------------------------------------------------------


def serve(root: Path) -> None:
    """The child: a daemon with the fake engine and its API, until SIGTERM."""
    from appliance.api.server import ApiServer
    from appliance.config import (
        ApiConfig,
        AppConfig,
        HotFolderConfig,
        IntakeConfig,
        PathsConfig,
        RepairConfig,
    )
    from appliance.control import Control
    from appliance.daemon import Daemon
    from tests.fakes import engines as fakes

    folder = HotFolderConfig(
        path=root / "in", output_dir=root / "out", archive_dir=root / "archive", failed_dir=root / "failed"
    )
    config = AppConfig(
        paths=PathsConfig(state_dir=root / "state"),
        hot_folders=(folder,),
        intake=IntakeConfig(settle_seconds=0.2, min_free_mb=0.0),
        repair=RepairConfig(field_profile="none"),
        api=ApiConfig(socket=root / "run" / "api.sock"),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    daemon = Daemon(config, fakes.fixed_text_engine)
    daemon.start()
    api = ApiServer(Control(daemon), config.api)
    api.start()
    try:
        daemon.run(stop)
    finally:
        api.stop()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def daemon_process(root: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    socket_path = root / "run" / "api.sock"
    child = subprocess.Popen([sys.executable, "-m", "bench.api_hostile", "--serve", str(root)])
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the daemon did not start")
            time.sleep(0.1)
        yield child, socket_path
    finally:
        child_process.stop(child, grace_s=30)


def _latencies(socket_path: Path, calls: int) -> list[float]:
    """GetStatus on a new connection each time (the connection's set-up counts), deadline 10 s."""
    latencies = []
    for _ in range(calls):
        started = time.perf_counter()
        with Client(socket_path, timeout=10) as client:
            client.status()
        latencies.append(time.perf_counter() - started)
    return latencies


def _options() -> list[tuple[str, Any]]:
    return [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]


def run(args: argparse.Namespace) -> int:
    for limit in (resource.RLIMIT_NOFILE,):  # 520 connections and more, on both sides
        soft, hard = resource.getrlimit(limit)
        resource.setrlimit(limit, (max(soft, min(hard, 8192)), hard))
    root = Path(tempfile.mkdtemp(prefix="api-hostile-"))
    held: list[Any] = []  # everything kept open until the figures are taken
    try:
        with daemon_process(root) as (child, socket_path):
            target = f"unix:{socket_path}"
            idle_latency = statistics.median(_latencies(socket_path, 20))
            idle_rss = rss_mb(child.pid)

            # 32 watchers on channels of their own; the 33rd is refused.
            for _ in range(WATCHERS):
                channel = grpc.insecure_channel(target, options=_options())
                held += [
                    channel,
                    pb_grpc.ApplianceStub(channel).WatchEvents(pb.WatchEventsRequest(only_new=True)),
                ]
            refused = ""
            deadline = time.monotonic() + 30
            with grpc.insecure_channel(target, options=_options()) as channel:
                stub = pb_grpc.ApplianceStub(channel)
                while not refused and time.monotonic() < deadline:
                    extra = stub.WatchEvents(pb.WatchEventsRequest(only_new=True), timeout=1)
                    with contextlib.suppress(grpc.RpcError):
                        next(extra)
                    code = extra.code()
                    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
                        refused = code.name
            # 40 health watches over one channel.
            channel = grpc.insecure_channel(target, options=_options())
            health: Any = health_pb2_grpc.HealthStub(channel)  # the stubs do not type its methods
            watches = [health.Watch(health_pb2.HealthCheckRequest(service="")) for _ in range(HEALTH_WATCHES)]
            held += [channel, *watches]
            for watch in watches:  # each answers SERVING first, then waits for a change
                next(watch)
            held += [half_open_unary(socket_path) for _ in range(args.half_open)]
            held += [connect(socket_path) for _ in range(args.idle_connections)]
            held += malformed(socket_path)
            flood, flooded = reflection_flood(socket_path, args.seconds, 64 * 1024 * 1024)
            held.append(flood)

            latencies = _latencies(socket_path, 20)
            loaded_rss = rss_mb(child.pid)
            with Client(socket_path, timeout=10) as client:
                status = client.status()
            worst = max(latencies)
            grown = loaded_rss - idle_rss
            print(
                f"hostile clients: {WATCHERS} watchers (33rd: {refused or 'NOT REFUSED'}), "
                f"{HEALTH_WATCHES} health watches, {args.half_open} half-open unary calls, "
                f"{args.idle_connections} idle connections, 3 malformed requests, a reflection stream "
                f"that never reads ({flooded / 1024:.0f} KiB of requests sent before the server "
                "stopped taking them)"
            )
            print(
                f"GetStatus on a fresh connection: idle p50 {idle_latency * 1000:.1f} ms; under load "
                f"p50 {statistics.median(latencies) * 1000:.1f} ms, max {worst * 1000:.1f} ms "
                f"(limit {LATENCY_LIMIT_S * 1000:.0f} ms); daemon state {pb.DaemonState.Name(status.state)}"
            )
            print(
                f"daemon RSS: idle {idle_rss:.0f} MB, under load {loaded_rss:.0f} MB "
                f"(+{grown:.0f} MB, limit +{RSS_LIMIT_MB:.0f} MB)"
            )
            ok = worst < LATENCY_LIMIT_S and grown < RSS_LIMIT_MB and bool(refused)
            print("PASS" if ok else "FAIL")
            return 0 if ok else 1
    finally:
        for thing in held:
            with contextlib.suppress(Exception):
                thing.cancel() if hasattr(thing, "cancel") else thing.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-connections", type=int, default=520)
    parser.add_argument("--half-open", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the reflection stream sends")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    raise SystemExit(run(args))


if __name__ == "__main__":
    main()
