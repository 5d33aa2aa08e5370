"""The control API server: grpcio's asyncio server on a unix socket, with health and reflection.

Who may connect is decided by the file system, as for docker.sock: the socket has mode 0660 and
the group `api.group`, inside a folder that only its owner and that group may enter (0750). The
peer's uid cannot be checked per call: grpcio's server owns the accepted sockets and does not
expose SO_PEERCRED. The server runs on its own thread and event loop, so open streams and calls
that never finish hold no thread. Optional TCP listens on loopback only and only with TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import ipaddress
import logging
import os
import socket
import ssl
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from appliance.api.service import MAX_WATCHERS, SERVICE, ApplianceServicer, handler
from appliance.config import ApiConfig
from appliance.control import Control
from appliance.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["MAX_WATCHERS", "SERVICE", "ApiServer", "prepare_socket_path"]

MAX_CALLS = 1024  # calls at once, all connections together; beyond: RESOURCE_EXHAUSTED at once
MAX_STREAMS_PER_CONNECTION = 100
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
_REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


def _options(config: ApiConfig) -> list[tuple[str, int]]:
    """The server's limits: no idle or stuck connection stays forever, no message beyond the config's."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", 64 * 1024 * 1024),  # what the client accepts
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        # HTTP/2's own count of open streams, which grpcio clients honour by queueing their calls.
        # grpcio's default also counts streams that are finished but not yet freed, and refuses
        # (REFUSED_STREAM, which the Python client does not retry) when a busy loop frees late.
        ("grpc.http.overload_protection", 0),
        ("grpc.max_metadata_size", 16 * 1024),
        # A connection without calls is closed after 5 minutes; one that does not finish its
        # HTTP/2 greeting after 10 s.
        ("grpc.max_connection_idle_ms", 5 * 60 * 1000),
        ("grpc.server_handshake_timeout_ms", 10 * 1000),
        # The server pings every connection each minute and closes it when the ping is not
        # answered within 20 s: a client that stopped reading cannot hold a stream for ever.
        ("grpc.keepalive_time_ms", 60 * 1000),
        ("grpc.keepalive_timeout_ms", 20 * 1000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Clients may ping at most every 10 s without calls; two strikes and the connection goes.
        ("grpc.http2.min_ping_interval_without_data_ms", 10 * 1000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.so_reuseport", 0),
        ("grpc.enable_retries", 0),
    ]


# -- the socket and its folder ------------------------------------------------------------------


def _serving(path: Path) -> bool:
    """Whether something answers on the unix socket at `path` (a live daemon, not a crash's leftover)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError as error:
        raise ConfigError(f"api.socket {path}: cannot tell whether it is in use: {error.strerror}") from None
    finally:
        probe.close()
    return True


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _guard_folder(path: Path, gid: int) -> None:
    """Make or check the socket's folder so that only its owner and group `gid` may enter it.

    A missing folder is made 0750 with group `gid`. A folder of the socket's own (it is ours and
    holds nothing else) is set so. Any other folder (shared, like /run or /tmp) is never changed:
    it is refused if every user may enter it.
    """
    folder = path.parent
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        pass
    else:
        try:
            os.chown(folder, -1, gid)
        except PermissionError:
            raise ConfigError(
                f"api.socket {path}: cannot give {folder} the group {_group_name(gid)}; "
                "the daemon's user must be a member of api.group"
            ) from None
        folder.chmod(0o750)
        return
    info = folder.stat()
    ours = {path.name, _temporary(path).name}
    own = info.st_uid == os.geteuid() and all(entry.name in ours for entry in folder.iterdir())
    if own and (stat.S_IMODE(info.st_mode) != 0o750 or info.st_gid != gid):
        with contextlib.suppress(PermissionError):  # not a member of the group: checked below
            os.chown(folder, -1, gid)
        folder.chmod(0o750)
        info = folder.stat()
    if info.st_mode & stat.S_IXOTH:
        raise ConfigError(
            f"api.socket {path}: every user may enter {folder} (mode {stat.S_IMODE(info.st_mode):04o}); "
            "give the socket a folder of its own (it is created with mode 0750), "
            f"or chmod o-rwx {folder}"
        )
    if info.st_gid != gid:
        log.warning(
            "api: members of group %s cannot reach %s: its folder belongs to group %s",
            _group_name(gid),
            path,
            _group_name(info.st_gid),
        )


def prepare_socket_path(path: Path, gid: int) -> Path:
    """Check the place of the socket and guard its folder; return the name to bind first."""
    if len(os.fsencode(path)) + 24 > _UNIX_PATH_MAX:  # room for the temporary name
        raise ConfigError(f"api.socket {path}: the path is too long for a unix socket (at most ~80 bytes)")
    _guard_folder(path, gid)
    if path.is_symlink() or path.exists():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ConfigError(
                f"api.socket {path}: exists and is not a socket; move it away or set api.socket"
            )
        if _serving(path):
            raise ConfigError(
                f"api.socket {path}: another process serves there (a second daemon?); "
                "stop it or set api.socket"
            )
        log.info("api: replacing the stale socket %s left by an earlier run", path)
    temporary = _temporary(path)
    temporary.unlink(missing_ok=True)
    return temporary


def _publish(temporary: Path, path: Path, mode: int, gid: int) -> None:
    """Give the bound socket its mode and group, then rename it over the final name.

    The final path never exists with the umask's mode, and a stale socket is replaced in one step.
    """
    try:
        temporary.chmod(mode)
        # Only when the group differs: under the unit's system-call filter (~@privileged holds
        # @chown) even a chown to the socket's own group fails with EPERM.
        if temporary.stat().st_gid != gid:
            os.chown(temporary, -1, gid)
        temporary.replace(path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"api.socket {path}: cannot listen there: {error.strerror}") from None


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _tls(config: ApiConfig.Tcp) -> tuple[str, grpc.ServerCredentials]:
    try:
        # ssl checks that key and certificate belong together, with a message grpcio does not give.
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(config.cert, config.key)
        key, cert = config.key.read_bytes(), config.cert.read_bytes()
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"api.tcp: cannot load the certificate {config.cert} or key {config.key}: {error}"
        ) from None
    host = "127.0.0.1" if config.host == "localhost" else config.host
    address = f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    return f"{address}:{config.port}", grpc.ssl_server_credentials([(key, cert)])


def _reflection_v1(servicer: Any) -> grpc.GenericRpcHandler:
    """Reflection v1 as well: grpcurl asks it first; its messages are v1alpha's, field for field."""
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(_REFLECTION_V1, {"ServerReflectionInfo": method})


# -- the server ---------------------------------------------------------------------------------


class ApiServer:
    """The control API of one daemon: `start()` after the daemon has started, `stop()` after it stopped."""

    def __init__(self, control: Control, config: ApiConfig) -> None:
        self._control = control
        self._config = config
        self.socket_path = config.socket
        self.tcp_port: int | None = None
        self._inode: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._health: Any = None
        self._servicer: ApplianceServicer | None = None
        # Reads are quick journal queries; commands wait (up to 30 s) for the daemon's loop.
        self._reads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="api-read")
        self._commands = ThreadPoolExecutor(max_workers=4, thread_name_prefix="api-command")

    @property
    def watchers(self) -> int:
        """Event watchers connected now."""
        return self._servicer.watchers if self._servicer else 0

    @property
    def streaming(self) -> int:
        """Event watchers that have taken their starting point, so that every later event reaches them."""
        return self._servicer.streaming if self._servicer else 0

    def start(self) -> None:
        gid = grp.getgrnam(self._config.group).gr_gid if self._config.group else os.getgid()
        temporary = prepare_socket_path(self._config.socket, gid)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="api", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(temporary, gid), self._loop).result(timeout=60)
        except BaseException:
            self._close_loop()
            temporary.unlink(missing_ok=True)
            raise
        where = f"{self._config.socket}" + (f" and TLS on port {self.tcp_port}" if self.tcp_port else "")
        log.info("control API on %s", where)

    async def _start(self, temporary: Path, gid: int) -> None:
        config = self._config
        server = grpc.aio.server(options=_options(config), maximum_concurrent_rpcs=MAX_CALLS)
        self._servicer = ApplianceServicer(self._control, self._reads, self._commands)
        self._health = health.aio.HealthServicer()
        server.add_generic_rpc_handlers((handler(self._servicer),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        services = (
            SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
            _REFLECTION_V1,
        )
        reflection.enable_server_reflection(services, server)
        server.add_generic_rpc_handlers((_reflection_v1(reflection.aio.ReflectionServicer(services)),))
        try:
            server.add_insecure_port(f"unix:{temporary}")
        except RuntimeError as error:
            raise ConfigError(f"api.socket {config.socket}: cannot listen there: {error}") from None
        _publish(temporary, config.socket, int(config.mode, 8), gid)
        self._inode = config.socket.stat().st_ino
        if config.tcp is not None:
            address, credentials = _tls(config.tcp)
            try:
                self.tcp_port = server.add_secure_port(address, credentials)
            except RuntimeError as error:
                raise ConfigError(f"api.tcp: cannot listen on {address}: {error}") from None
        self._server = server
        await server.start()
        for name in ("", SERVICE):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 2.0) -> None:
        loop = self._loop
        if loop is None:
            return
        if self._servicer is not None:
            self._servicer.stopping = True
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(grace), loop).result(timeout=grace + 30)
        self._close_loop()
        # Remove the socket only if it is still ours: a new daemon may already have replaced it.
        with contextlib.suppress(OSError):
            if self._inode is not None and self._config.socket.stat().st_ino == self._inode:
                self._config.socket.unlink()

    async def _stop(self, grace: float) -> None:
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)

    def _close_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        if not thread.is_alive():
            loop.close()
        self._reads.shutdown(wait=False, cancel_futures=True)
        self._commands.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()
