"""The control API keeps answering while local clients hold every documented limit open at once.

A smaller version of bench/api_hostile.py: no timing beyond "answers before its 10 s deadline".
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from appliance.api.server import MAX_WATCHERS
from appliance.api.v1 import appliance_pb2 as pb
from appliance.api.v1 import appliance_pb2_grpc as pb_grpc
from bench import api_hostile as hostile
from tests.polling import wait_for
from tests.test_api import Appliance


@pytest.fixture
def appliance(tmp_path: Path) -> Iterator[Appliance]:
    socket_dir = Path(tempfile.mkdtemp(prefix="api-"))
    try:
        with Appliance(tmp_path, socket_dir) as running:
            yield running
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@contextlib.contextmanager
def _channel(appliance: Appliance) -> Iterator[grpc.Channel]:
    # A connection of its own, not one shared with every other channel to the same socket.
    options = [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"unix:{appliance.socket}", options=options) as channel:
        yield channel


def _status_answers(appliance: Appliance) -> bool:
    with appliance.client(timeout=10) as client:
        return client.status().state == pb.DAEMON_STATE_RUNNING


def test_status_answers_with_watchers_health_watches_and_half_open_calls_all_open(
    appliance: Appliance,
) -> None:
    held: list[Any] = []
    with contextlib.ExitStack() as stack:
        for _ in range(MAX_WATCHERS):
            channel = stack.enter_context(_channel(appliance))
            call = pb_grpc.ApplianceStub(channel).WatchEvents(pb.WatchEventsRequest(only_new=True))
            stack.callback(call.cancel)
        assert wait_for(lambda: appliance.api.watchers == MAX_WATCHERS, timeout=30)
        channel = stack.enter_context(_channel(appliance))
        with pytest.raises(grpc.RpcError) as refused:
            next(pb_grpc.ApplianceStub(channel).WatchEvents(pb.WatchEventsRequest(), timeout=10))
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]

        health = health_pb2_grpc.HealthStub(stack.enter_context(_channel(appliance)))
        for _ in range(40):
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
            stack.callback(watch.cancel)
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING  # and now it waits
        for _ in range(40):
            held.append(stack.enter_context(hostile.half_open_unary(appliance.socket)))
        for _ in range(50):
            held.append(stack.enter_context(hostile.connect(appliance.socket)))

        assert _status_answers(appliance)
        # The calls left open did not end: the half-open ones still wait for their message.
        for sock in held[:40]:
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while sock.recv(65536):
                    pass
        assert appliance.api.watchers == MAX_WATCHERS


def test_status_answers_while_a_reflection_stream_is_never_read(appliance: Appliance) -> None:
    flood, sent = hostile.reflection_flood(appliance.socket, seconds=3, max_bytes=16 * 1024 * 1024)
    with flood:
        assert sent > 0
        assert _status_answers(appliance)


def test_malformed_requests_leave_the_server_serving(appliance: Appliance) -> None:
    sockets = hostile.malformed(appliance.socket)
    try:
        assert len(sockets) == 3
        endings = [hostile.stream_ended(sock) for sock in sockets]
        # A path with a trailing space or of 70 KB names no method: that call alone ends, with a
        # status; a header value that is not UTF-8 resets that stream alone.
        assert endings == ["trailers", "trailers", "reset"], endings
        assert _status_answers(appliance)
    finally:
        for sock in sockets:
            sock.close()
    assert _status_answers(appliance)


def test_a_client_that_pauses_reading_keeps_its_connection(appliance: Appliance) -> None:
    # A raw client asks for status, reads nothing while others are served, then reads its answer.
    request = hostile.grpc_headers(b"/appliance.v1.Appliance/GetStatus") + hostile.grpc_message(
        b"", end_stream=True
    )
    with hostile.connect(appliance.socket, request) as sock:
        for _ in range(5):
            assert _status_answers(appliance)
        assert hostile.stream_ended(sock) == "trailers"
