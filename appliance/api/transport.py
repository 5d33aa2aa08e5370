"""gRPC over HTTP/2 in pure Python (h2), on sockets this module accepts itself.

Why not grpcio's server: its C core probes SO_REUSEPORT with a throwaway AF_INET socket whenever a
server port is added, even a unix one, and no channel argument or experiment turns that off; the
appliance promises (and tests/test_offline.py checks with strace) that a daemon run opens only
AF_UNIX sockets. Accepting the connections here also gives us the accepted socket, so the peer's
SO_PEERCRED can be checked per connection, which grpcio's server does not expose.

The servicers are ordinary grpcio servicers: the generated `add_*_to_server` functions register
their method handlers on a `HandlerRegistry`, and each call gets a `grpc.ServicerContext`. Unary and
server-streaming methods are what the appliance serves; client-streaming and bidirectional ones
are supported too, because server reflection (what `grpcurl` uses) is bidirectional.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">BI")  # gRPC message framing: compressed flag, big-endian length
_RECV_BYTES = 65536
_WINDOW_WAIT_SECONDS = 30.0  # a client that reads nothing for this long loses the stream
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# Who may call: returns None for an allowed peer, or the message a refused one receives.
Authorizer = Callable[[socket.socket], str | None]


class HandlerRegistry:
    """Stands in for `grpc.Server` where generated code registers method handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        self.services: list[str] = []

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.services.append(service_name)
        for method, handler in method_handlers.items():
            self.handlers[f"/{service_name}/{method}"] = handler

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        # Generated code calls both this and add_registered_method_handlers with the same
        # handlers; the registered ones are what we look up, so this one has nothing to add.
        pass

    def alias(self, service_name: str, alias: str) -> None:
        """Serve a service under a second name (wire-identical versions, e.g. reflection v1alpha/v1)."""
        self.services.append(alias)
        prefix = f"/{service_name}/"
        for path, handler in list(self.handlers.items()):
            if path.startswith(prefix):
                self.handlers[f"/{alias}/{path[len(prefix) :]}"] = handler


class _Abort(Exception):  # noqa: N818 - control flow, not an error
    """Raised by `context.abort` to end the handler; grpcio's servers do the same."""


def _percent_encode(text: str) -> str:
    # grpc-message is percent-encoded UTF-8 (gRPC over HTTP/2 spec), so any message survives HPACK.
    out = []
    for byte in text.encode("utf-8"):
        out.append(chr(byte) if 0x20 <= byte <= 0x7E and byte != 0x25 else f"%{byte:02X}")
    return "".join(out)


def _parse_timeout(value: str) -> float | None:
    if len(value) < 2 or value[-1] not in _TIMEOUT_UNITS or not value[:-1].isdigit() or len(value) > 9:
        return None
    return int(value[:-1]) * _TIMEOUT_UNITS[value[-1]]


@dataclass
class _Call:
    stream_id: int
    method: str
    metadata: tuple[tuple[str, str], ...]
    deadline: float | None
    handler: grpc.RpcMethodHandler[Any, Any]
    requests: queue.SimpleQueue[bytes | None] = field(default_factory=queue.SimpleQueue)
    buffer: bytearray = field(default_factory=bytearray)
    received: int = 0
    headers_sent: bool = False
    finished: bool = False
    cancelled: threading.Event = field(default_factory=threading.Event)
    callbacks: list[Callable[[], None]] = field(default_factory=list)


class _Context(grpc.ServicerContext):
    """What a handler sees of its call."""

    def __init__(self, connection: _Connection, call: _Call) -> None:
        self._connection = connection
        self._call = call
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()

    # RpcContext
    def is_active(self) -> bool:
        return not self._call.cancelled.is_set() and not self._connection.closed.is_set()

    def time_remaining(self) -> float | None:  # type: ignore[override]  # grpcio: None without a deadline
        return None if self._call.deadline is None else max(0.0, self._call.deadline - time.monotonic())

    def cancel(self) -> bool:
        self._connection.reset(self._call, cancel=True)
        return True

    def add_callback(self, callback: Callable[[], None]) -> bool:
        if not self.is_active():
            return False
        self._call.callbacks.append(callback)
        return True

    # ServicerContext
    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._call.metadata

    def peer(self) -> str:
        return self._connection.peer

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def auth_context(self) -> dict[str, bytes]:
        return {}

    def set_compression(self, compression: grpc.Compression) -> None:
        pass  # responses are never compressed

    def send_initial_metadata(self, initial_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        pass

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailing

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        if code is grpc.StatusCode.OK:
            code = grpc.StatusCode.UNKNOWN  # as grpcio: aborting with OK is a handler bug
        self._code, self._details = code, details
        raise _Abort

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        self.abort(status.code, status.details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details

    def disable_next_message_compression(self) -> None:
        pass


class _Connection:
    """One accepted HTTP/2 connection: a reader thread; handlers run on the server's pool."""

    def __init__(self, server: RpcServer, sock: socket.socket, peer: str, refusal: str | None) -> None:
        self._server = server
        self._sock = sock
        self.peer = peer
        self._refusal = refusal
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False, header_encoding="utf-8", validate_inbound_headers=True
            )
        )
        self._lock = threading.Condition()  # guards _h2 and the socket's send side
        self._calls: dict[int, _Call] = {}
        self.closed = threading.Event()

    # -- reading --------------------------------------------------------------------------------

    def serve(self) -> None:
        try:
            with self._lock:
                self._h2.initiate_connection()
                self._flush()
            while not self.closed.is_set():
                try:
                    data = self._sock.recv(_RECV_BYTES)
                except TimeoutError:
                    continue
                if not data:
                    break
                with self._lock:
                    events = self._h2.receive_data(data)
                for event in events:
                    self._on_event(event)
                with self._lock:
                    self._flush()
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError) as error:
            # A client that speaks broken HTTP/2 loses its connection, never the server.
            log.debug("api connection %s closed: %s", self.peer, error)
        finally:
            self.close()

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._on_request(event.stream_id, event.headers or [], event.stream_ended is not None)
        elif isinstance(event, h2.events.DataReceived):
            # Give the window back at once: requests are bounded by max_message_bytes below.
            with self._lock, contextlib.suppress(h2.exceptions.StreamClosedError):
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            call = self._calls.get(event.stream_id)
            if call is not None:
                self._on_data(call, event.data or b"")
        elif isinstance(event, h2.events.StreamEnded):
            call = self._calls.get(event.stream_id)
            if call is not None:
                if call.buffer:
                    self._refuse(call, grpc.StatusCode.INTERNAL, "the request ended inside a message")
                call.requests.put(None)
        elif isinstance(event, h2.events.StreamReset):
            call = self._calls.pop(event.stream_id, None)
            if call is not None:
                self._cancelled(call)
        elif isinstance(event, h2.events.WindowUpdated):
            with self._lock:
                self._lock.notify_all()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed.set()

    def _on_request(self, stream_id: int, raw_headers: list[tuple[Any, Any]], ended: bool) -> None:
        headers = [(str(k), str(v)) for k, v in raw_headers]
        pseudo = {k: v for k, v in headers if k.startswith(":")}
        metadata = tuple((k, v) for k, v in headers if not k.startswith(":"))
        values = dict(metadata)
        path = pseudo.get(":path", "")
        if self._refusal is not None:
            self._trailers_only(stream_id, grpc.StatusCode.PERMISSION_DENIED, self._refusal)
            return
        if pseudo.get(":method") != "POST" or not values.get("content-type", "").startswith(
            "application/grpc"
        ):
            self._trailers_only(
                stream_id, grpc.StatusCode.INTERNAL, "expected a gRPC request (POST application/grpc)"
            )
            return
        handler = self._server.handlers.get(path)
        if handler is None:
            self._trailers_only(
                stream_id, grpc.StatusCode.UNIMPLEMENTED, f"no method {path!r} on this server"
            )
            return
        deadline = None
        if "grpc-timeout" in values:
            timeout = _parse_timeout(values["grpc-timeout"])
            if timeout is None:
                self._trailers_only(
                    stream_id, grpc.StatusCode.INVALID_ARGUMENT, "malformed grpc-timeout header"
                )
                return
            deadline = time.monotonic() + timeout
        if not self._server.admit():
            self._trailers_only(
                stream_id,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the server is handling {self._server.max_concurrent_rpcs} calls; retry in a moment",
            )
            return
        call = _Call(stream_id, path, metadata, deadline, handler)
        self._calls[stream_id] = call
        if ended:
            call.requests.put(None)
        try:
            self._server.pool.submit(self._run, call)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._server.release()
            self._finish(call, grpc.StatusCode.UNAVAILABLE, "the appliance is stopping")

    def _on_data(self, call: _Call, data: bytes) -> None:
        if call.finished:
            return
        call.buffer += data
        limit = self._server.max_message_bytes
        while len(call.buffer) >= _PREFIX.size:
            compressed, length = _PREFIX.unpack_from(call.buffer)
            if length > limit:
                self._refuse(
                    call,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"request message of {length} bytes is over the limit of {limit} (api.max_message_bytes)",
                )
                return
            if compressed:
                self._refuse(call, grpc.StatusCode.UNIMPLEMENTED, "compressed requests are not accepted")
                return
            if len(call.buffer) < _PREFIX.size + length:
                break
            call.requests.put(bytes(call.buffer[_PREFIX.size : _PREFIX.size + length]))
            del call.buffer[: _PREFIX.size + length]

    def _refuse(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        """Answer a request that cannot be read, and stop its handler."""
        self._finish(call, code, details)
        call.cancelled.set()
        call.requests.put(None)

    # -- running a handler ----------------------------------------------------------------------

    def _requests(self, call: _Call, deserialize: Callable[[bytes], Any] | None) -> Iterator[Any]:
        while not call.cancelled.is_set():
            if call.deadline is not None and call.deadline <= time.monotonic():
                raise _DeadlineError
            try:
                raw = call.requests.get(timeout=0.5)
            except queue.Empty:
                continue
            if raw is None:
                return
            yield deserialize(raw) if deserialize else raw

    def _run(self, call: _Call) -> None:
        context = _Context(self, call)
        handler = call.handler
        code, details = grpc.StatusCode.OK, ""
        try:
            if call.deadline is not None and call.deadline <= time.monotonic():
                raise _DeadlineError
            requests = self._requests(call, handler.request_deserializer)
            if handler.request_streaming:
                argument: Any = requests
            else:
                argument = self._single(requests)
            behaviour = {
                (False, False): handler.unary_unary,
                (False, True): handler.unary_stream,
                (True, False): handler.stream_unary,
                (True, True): handler.stream_stream,
            }[(handler.request_streaming, handler.response_streaming)]
            assert behaviour is not None
            result: Any = behaviour(argument, context)
            responses = result if handler.response_streaming else [result]
            for response in responses:
                if not context.is_active():
                    return
                if call.deadline is not None and call.deadline <= time.monotonic():
                    raise _DeadlineError
                payload: bytes = (
                    handler.response_serializer(response) if handler.response_serializer else response
                )
                self._send_message(call, payload)
            code = context.code() or grpc.StatusCode.OK
            details = context.details() or ""
        except _Abort:
            code = context.code() or grpc.StatusCode.UNKNOWN
            details = context.details() or ""
        except _DeadlineError:
            code, details = grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed"
        except _BadRequest as error:
            code, details = grpc.StatusCode.INVALID_ARGUMENT, str(error)
        except Exception:
            log.exception("api: %s failed", call.method)
            code, details = grpc.StatusCode.INTERNAL, "internal error; the daemon's log has the details"
        finally:
            self._server.release()
        self._finish(call, code, details)

    @staticmethod
    def _single(requests: Iterator[Any]) -> Any:
        try:
            first = next(requests)
        except StopIteration:
            raise _BadRequest("the request has no message") from None
        except (_DeadlineError, _BadRequest):
            raise
        except Exception as error:  # protobuf's DecodeError and relatives
            raise _BadRequest(f"the request is not a valid message: {error}") from None
        if next(requests, None) is not None:
            raise _BadRequest("this method takes exactly one request message")
        return first

    # -- writing --------------------------------------------------------------------------------

    def _response_headers(self, call: _Call) -> None:
        if not call.headers_sent:
            self._h2.send_headers(call.stream_id, [(":status", "200"), ("content-type", "application/grpc")])
            call.headers_sent = True

    def _send_message(self, call: _Call, payload: bytes) -> None:
        data = memoryview(_PREFIX.pack(0, len(payload)) + payload)
        with self._lock:
            self._response_headers(call)
            while data:
                if not self.closed.is_set() and not call.cancelled.is_set():
                    window = min(
                        self._h2.local_flow_control_window(call.stream_id), self._h2.max_outbound_frame_size
                    )
                else:
                    raise _Abort
                if window <= 0:
                    # The client has not read what we sent; wait for its WINDOW_UPDATE.
                    if not self._lock.wait(timeout=_WINDOW_WAIT_SECONDS):
                        self.reset(call, cancel=True)
                        raise _Abort
                    continue
                self._h2.send_data(call.stream_id, bytes(data[:window]))
                data = data[window:]
                self._flush()

    def _finish(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        with self._lock:
            if call.finished or call.cancelled.is_set() or self.closed.is_set():
                return
            call.finished = True
            trailers = [("grpc-status", str(code.value[0]))]
            if details:
                trailers.append(("grpc-message", _percent_encode(details)))
            try:
                if not call.headers_sent:
                    # Trailers-only response: one HEADERS frame that ends the stream.
                    trailers = [(":status", "200"), ("content-type", "application/grpc"), *trailers]
                self._h2.send_headers(call.stream_id, trailers, end_stream=True)
                call.headers_sent = True
                self._flush()
            except (h2.exceptions.ProtocolError, OSError) as error:
                log.debug("api: could not finish stream %d: %s", call.stream_id, error)
        self._calls.pop(call.stream_id, None)

    def _trailers_only(self, stream_id: int, code: grpc.StatusCode, details: str) -> None:
        headers = [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", str(code.value[0])),
            ("grpc-message", _percent_encode(details)),
        ]
        with self._lock:
            try:
                self._h2.send_headers(stream_id, headers, end_stream=True)
                self._flush()
            except (h2.exceptions.ProtocolError, OSError) as error:
                log.debug("api: could not answer stream %d: %s", stream_id, error)

    def reset(self, call: _Call, cancel: bool = False) -> None:
        with self._lock, contextlib.suppress(h2.exceptions.ProtocolError, OSError):
            self._h2.reset_stream(call.stream_id, error_code=8 if cancel else 2)
            self._flush()
        self._calls.pop(call.stream_id, None)
        self._cancelled(call)

    def _cancelled(self, call: _Call) -> None:
        call.cancelled.set()
        call.requests.put(None)
        for callback in call.callbacks:
            try:
                callback()
            except Exception:
                log.exception("api: a cancellation callback failed")

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data:
            self._sock.sendall(data)

    def close(self) -> None:
        if self.closed.is_set() and self._sock.fileno() < 0:
            return
        self.closed.set()
        with self._lock:
            self._lock.notify_all()
        for call in list(self._calls.values()):
            self._cancelled(call)
        self._calls.clear()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._server.forget(self)

    def go_away(self) -> None:
        with self._lock, contextlib.suppress(h2.exceptions.ProtocolError, OSError):
            self._h2.close_connection()
            self._flush()


class _DeadlineError(Exception):
    pass


class _BadRequest(Exception):  # noqa: N818 - control flow
    pass


@dataclass
class _Listener:
    sock: socket.socket
    ssl_context: ssl.SSLContext | None
    authorize: Authorizer | None
    thread: threading.Thread | None = None


class RpcServer:
    """A gRPC server over sockets the caller binds: unix (with a peer check) or TLS on loopback TCP."""

    def __init__(
        self,
        registry: HandlerRegistry,
        *,
        max_message_bytes: int = 4 * 1024 * 1024,
        max_concurrent_rpcs: int = 256,
        workers: int = 32,
        max_connections: int = 512,
    ) -> None:
        self.handlers = registry.handlers
        self.max_message_bytes = max_message_bytes
        self.max_concurrent_rpcs = max_concurrent_rpcs
        self.max_connections = max_connections
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="api")
        self._listeners: list[_Listener] = []
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._active = 0
        self._stopping = threading.Event()

    def add_listener(
        self,
        sock: socket.socket,
        ssl_context: ssl.SSLContext | None = None,
        authorize: Authorizer | None = None,
    ) -> None:
        """Serve on a bound, listening socket; `authorize` is asked about each accepted peer."""
        sock.settimeout(0.5)  # so the accept loop notices a stop
        self._listeners.append(_Listener(sock, ssl_context, authorize))

    def start(self) -> None:
        for listener in self._listeners:
            listener.thread = threading.Thread(
                target=self._accept_loop, args=(listener,), name="api-accept", daemon=True
            )
            listener.thread.start()

    def admit(self) -> bool:
        with self._lock:
            if self._active >= self.max_concurrent_rpcs:
                return False
            self._active += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._active -= 1

    def forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _accept_loop(self, listener: _Listener) -> None:
        while not self._stopping.is_set():
            try:
                sock, address = listener.sock.accept()
            except TimeoutError:
                continue
            except OSError as error:
                if self._stopping.is_set():
                    return
                log.warning("api: accept failed: %s", error)  # EMFILE and the like: back off
                time.sleep(0.5)
                continue
            threading.Thread(
                target=self._open, args=(listener, sock, address), name="api-conn", daemon=True
            ).start()

    def _open(self, listener: _Listener, sock: socket.socket, address: Any) -> None:
        try:
            sock.settimeout(1.0)
            refusal = listener.authorize(sock) if listener.authorize else None
            if listener.ssl_context is not None:
                sock.settimeout(10.0)  # a handshake that does not finish does not hold a thread
                sock = listener.ssl_context.wrap_socket(sock, server_side=True)
                sock.settimeout(1.0)
            peer = f"ipv4:{address[0]}:{address[1]}" if isinstance(address, tuple) else "unix:"
        except (OSError, ssl.SSLError) as error:
            log.info("api: connection refused before HTTP/2: %s", error)
            sock.close()
            return
        connection = _Connection(self, sock, peer, refusal)
        with self._lock:
            if len(self._connections) >= self.max_connections or self._stopping.is_set():
                sock.close()
                return
            self._connections.add(connection)
        connection.serve()

    def stop(self, grace: float = 2.0) -> None:
        """Refuse new calls, let running ones finish for `grace` seconds, then close everything."""
        self._stopping.set()
        for listener in self._listeners:
            if listener.thread is not None:
                listener.thread.join(timeout=2)
            listener.sock.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.go_away()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with self._lock:
                if self._active == 0:
                    break
            time.sleep(0.05)
        for connection in connections:
            connection.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
