"""The control API server: appliance.v1 over a unix socket, with health and reflection.

The socket is a path (not abstract), so its mode and group decide who may connect, and
PrivateNetwork=yes under systemd leaves it working. Each accepted connection's SO_PEERCRED is
checked as well, so a socket made world-writable by mistake still refuses strangers: root, the
daemon's own user and members of the configured group are served; anyone else gets
PERMISSION_DENIED on every call. Optional TCP listens on loopback only and only with TLS.
"""

from __future__ import annotations

import contextlib
import functools
import grp
import ipaddress
import logging
import os
import socket
import ssl
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from appliance.api import convert
from appliance.api.transport import Authorizer, HandlerRegistry, RpcServer
from appliance.api.v1 import appliance_pb2 as pb
from appliance.api.v1 import appliance_pb2_grpc as pb_grpc
from appliance.config import ApiConfig
from appliance.control import Control, ControlError
from appliance.errors import ConfigError

log = logging.getLogger(__name__)

SERVICE = "appliance.v1.Appliance"
MAX_WATCHERS = 32
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux 4.13+; Python names it from 3.13 on
_POLL_SECONDS = 1.0  # how long one WatchEvents long poll waits; bounds how late a disconnect is seen

P = ParamSpec("P")
R = TypeVar("R")


def _mapped(method: Callable[P, R]) -> Callable[P, R]:
    """Turn Control's errors into gRPC status codes; the message says what to do."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        context = args[2]
        assert isinstance(context, grpc.ServicerContext)
        try:
            return method(*args, **kwargs)
        except ControlError as error:
            context.abort(grpc.StatusCode[error.code], str(error))
        except ValueError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))

    return wrapper


class ApplianceServicer(pb_grpc.ApplianceServicer):
    """appliance.v1.Appliance on top of `Control`."""

    def __init__(self, control: Control, stopping: threading.Event) -> None:
        self._control = control
        self._stopping = stopping
        self._watchers = threading.BoundedSemaphore(MAX_WATCHERS)

    @_mapped
    def GetStatus(self, request: pb.GetStatusRequest, context: grpc.ServicerContext) -> pb.GetStatusResponse:
        return convert.status(self._control.status())

    @_mapped
    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsResponse:
        page_size = request.page_size or 100
        if not 1 <= page_size <= 1000:
            raise ValueError(f"page_size must be 1..1000 (got {request.page_size})")
        offset = 0
        if request.page_token:
            if not request.page_token.isdigit() or len(request.page_token) > 12:
                raise ValueError("page_token is not one this server gave; start again without it")
            offset = int(request.page_token)
        since = convert.seconds(request.since) if request.HasField("since") else None
        jobs = self._control.list_jobs(
            state=convert.job_state_from(request.state),
            folder=request.folder or None,
            since=since,
            limit=page_size,
            offset=offset,
        )
        next_token = str(offset + len(jobs)) if len(jobs) == page_size else ""
        return pb.ListJobsResponse(jobs=[convert.job(j) for j in jobs], next_page_token=next_token)

    @_mapped
    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.GetJobResponse:
        if not request.job_id:
            raise ValueError("job_id is required; list jobs with `ocr-appliance jobs`")
        return convert.job_detail(self._control.get_job(request.job_id))

    def WatchEvents(
        self, request: pb.WatchEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.JobEvent]:
        if request.after_seq < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "after_seq must not be negative")
        # Each watcher holds a server thread while it waits: bound them, so watchers cannot starve
        # status calls.
        if not self._watchers.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{MAX_WATCHERS} event watchers are connected; close one and retry",
            )
        try:
            after = self._newest_seq() if request.only_new else request.after_seq
            while context.is_active() and not self._stopping.is_set():
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    return
                wait = _POLL_SECONDS if remaining is None else min(_POLL_SECONDS, remaining)
                for transition in self._control.events(after, wait_seconds=wait, limit=500):
                    after = transition.seq
                    if not request.job_id or transition.job_id == request.job_id:
                        yield convert.event(transition)
        finally:
            self._watchers.release()

    def _newest_seq(self) -> int:
        return self._control.latest_seq()

    @_mapped
    def Reprocess(self, request: pb.ReprocessRequest, context: grpc.ServicerContext) -> pb.ReprocessResponse:
        target = request.WhichOneof("target")
        if target is None or not getattr(request, target):
            raise ValueError("give a job_id or a sha256 of the document to read again")
        if request.engine:
            engines = sorted(engine.name for engine in self._control.status().engines)
            if request.engine not in engines:
                raise ValueError(
                    f"engine {request.engine!r} is not running here (running: {', '.join(engines)}); "
                    "change engine.name in the config and reload to use another"
                )
        job = self._control.reprocess(
            job_id=request.job_id if target == "job_id" else None,
            sha256=request.sha256.lower() if target == "sha256" else None,
            profile=request.profile or None,
        )
        return pb.ReprocessResponse(job=convert.job(job))

    @_mapped
    def Pause(self, request: pb.PauseRequest, context: grpc.ServicerContext) -> pb.StateResponse:
        return pb.StateResponse(state=convert.daemon_state(self._control.pause()))

    @_mapped
    def Resume(self, request: pb.ResumeRequest, context: grpc.ServicerContext) -> pb.StateResponse:
        return pb.StateResponse(state=convert.daemon_state(self._control.resume()))

    @_mapped
    def Drain(self, request: pb.DrainRequest, context: grpc.ServicerContext) -> pb.StateResponse:
        return pb.StateResponse(state=convert.daemon_state(self._control.drain()))

    @_mapped
    def ReloadConfig(
        self, request: pb.ReloadConfigRequest, context: grpc.ServicerContext
    ) -> pb.ReloadConfigResponse:
        applied, message = self._control.reload()
        if not applied:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{message}\nthe running configuration is kept; fix the file and reload again",
            )
        return pb.ReloadConfigResponse(applied=True, message=message)

    @_mapped
    def ListReview(
        self, request: pb.ListReviewRequest, context: grpc.ServicerContext
    ) -> pb.ListReviewResponse:
        return pb.ListReviewResponse(items=[convert.review_item(i) for i in self._control.list_review()])

    @_mapped
    def ResolveReview(
        self, request: pb.ResolveReviewRequest, context: grpc.ServicerContext
    ) -> pb.ResolveReviewResponse:
        if not request.job_id:
            raise ValueError("job_id is required; list what waits with `ocr-appliance review list`")
        text = request.text if request.HasField("text") else None
        job = self._control.resolve_review(request.job_id, dict(request.fields), text)
        return pb.ResolveReviewResponse(job=convert.job(job))

    @_mapped
    def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.ServicerContext
    ) -> pb.GetMetricsResponse:
        return pb.GetMetricsResponse(metrics={str(k): float(v) for k, v in self._control.metrics().items()})


# -- who may connect ----------------------------------------------------------------------------


def _peer_groups(sock: socket.socket, pid: int) -> set[int]:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, 1024)
        return set(struct.unpack(f"{len(raw) // 4}I", raw))
    except OSError:
        pass  # more than 256 groups (ERANGE) or an old kernel: ask /proc instead
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Groups:"):
                return {int(value) for value in line.split()[1:]}
    return set()


def peer_authorizer(group: str | None) -> Authorizer:
    """Root, the daemon's own user and members of `group` (default: the daemon's group) may call."""
    gid = grp.getgrnam(group).gr_gid if group else os.getgid()
    name = group or _group_name(gid)
    own_uid = os.getuid()

    def authorize(sock: socket.socket) -> str | None:
        pid, uid, primary = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid in (0, own_uid) or primary == gid or gid in _peer_groups(sock, pid):
            return None
        log.warning("api: refused uid %d (pid %d): not in group %s", uid, pid, name)
        return (
            f"permission denied: uid {uid} is not in group {name!r}; "
            f"add the user to it (usermod -aG {name} USER, then log in again) or run as root"
        )

    return authorize


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# -- sockets ------------------------------------------------------------------------------------


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


def bind_unix_socket(path: Path, mode: int, gid: int | None) -> socket.socket:
    """A listening unix socket at `path` with `mode` and group, replacing a stale one atomically."""
    if len(os.fsencode(path)) + 24 > _UNIX_PATH_MAX:  # room for the temporary name below
        raise ConfigError(f"api.socket {path}: the path is too long for a unix socket (at most ~80 bytes)")
    path.parent.mkdir(parents=True, exist_ok=True)
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
    # Bound under a temporary name, given its mode and group, then renamed over the final name:
    # the final path never exists with the umask's mode, and a stale socket is replaced in one step.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(temporary))
        temporary.chmod(mode)
        if gid is not None:
            os.chown(temporary, -1, gid)
        sock.listen(128)
        temporary.replace(path)
    except OSError as error:
        sock.close()
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"api.socket {path}: cannot listen there: {error.strerror}") from None
    return sock


def _tcp_socket(config: ApiConfig.Tcp) -> tuple[socket.socket, ssl.SSLContext]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    try:
        context.load_cert_chain(config.cert, config.key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"api.tcp: cannot load the certificate {config.cert} or key {config.key}: {error}"
        ) from None
    host = "127.0.0.1" if config.host == "localhost" else config.host
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, config.port))
    except OSError as error:
        sock.close()
        raise ConfigError(f"api.tcp: cannot listen on {host}:{config.port}: {error.strerror}") from None
    sock.listen(128)
    return sock, context


class ApiServer:
    """The control API of one daemon: `start()` after the daemon has started, `stop()` after it stopped."""

    def __init__(self, control: Control, config: ApiConfig) -> None:
        self._config = config
        self._stopping = threading.Event()
        self._health = health.HealthServicer()
        registry = HandlerRegistry()
        pb_grpc.add_ApplianceServicer_to_server(ApplianceServicer(control, self._stopping), registry)  # type: ignore[arg-type]
        health_pb2_grpc.add_HealthServicer_to_server(self._health, registry)  # type: ignore[arg-type]
        services = (
            SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
            "grpc.reflection.v1.ServerReflection",
        )
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # type: ignore[no-untyped-call]
            reflection.ReflectionServicer(services), registry
        )
        # grpcurl asks reflection v1 first; its messages are v1alpha's, field for field.
        registry.alias(reflection.SERVICE_NAME, "grpc.reflection.v1.ServerReflection")
        self._server = RpcServer(registry, max_message_bytes=config.max_message_bytes)
        self.socket_path = config.socket
        self.tcp_port: int | None = None
        self._inode: int | None = None

    def start(self) -> None:
        gid = grp.getgrnam(self._config.group).gr_gid if self._config.group else None
        unix = bind_unix_socket(self._config.socket, int(self._config.mode, 8), gid)
        self._inode = self._config.socket.stat().st_ino
        self._server.add_listener(unix, authorize=peer_authorizer(self._config.group))
        if self._config.tcp is not None:
            tcp, context = _tcp_socket(self._config.tcp)
            self.tcp_port = int(tcp.getsockname()[1])
            self._server.add_listener(tcp, ssl_context=context)
        for name in ("", SERVICE):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server.start()
        where = f"{self._config.socket}" + (f" and TLS on port {self.tcp_port}" if self.tcp_port else "")
        log.info("control API on %s", where)

    def stop(self, grace: float = 2.0) -> None:
        self._stopping.set()
        self._health.enter_graceful_shutdown()
        self._server.stop(grace)
        # Remove the socket only if it is still ours: a new daemon may already have replaced it.
        with contextlib.suppress(OSError):
            if self._inode is not None and self._config.socket.stat().st_ino == self._inode:
                self._config.socket.unlink()

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()
