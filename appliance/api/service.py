"""appliance.v1.Appliance on asyncio: an open stream holds no thread, Control's calls run in pools.

Control's methods block (journal reads, commands that wait for the daemon's loop), so each runs
in a thread pool: reads in one, commands in another, so commands stuck behind a busy daemon
cannot delay a status call. Event watchers poll the journal between sleeps on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from appliance.api import convert
from appliance.api.v1 import appliance_pb2 as pb
from appliance.api.v1 import appliance_pb2_grpc as pb_grpc
from appliance.control import Control, ControlError

SERVICE = "appliance.v1.Appliance"
MAX_WATCHERS = 32
_POLL_SECONDS = 0.2  # how often a watcher looks for new transitions when it has sent them all

Context = grpc.aio.ServicerContext[Any, Any]
Req = TypeVar("Req")
R = TypeVar("R")


class Malformed:
    """A request body that is not the method's message: answered INVALID_ARGUMENT, not UNKNOWN."""

    def __init__(self, kind: str, error: DecodeError) -> None:
        self.message = f"the request is not a valid {kind}: {error}"


def _lenient(kind: type[Message]) -> Callable[[bytes], Message | Malformed]:
    def parse(data: bytes) -> Message | Malformed:
        try:
            return kind.FromString(data)
        except DecodeError as error:
            return Malformed(kind.DESCRIPTOR.full_name, error)

    return parse


def _mapped(
    method: Callable[[ApplianceServicer, Req, Context], Awaitable[R]],
) -> Callable[[ApplianceServicer, Req, Context], Awaitable[R]]:
    """Turn Control's errors into gRPC status codes (the message says what to do); skip expired calls."""

    @functools.wraps(method)
    async def wrapper(self: ApplianceServicer, request: Req, context: Context) -> R:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed before the call ran")
        try:
            return await method(self, request, context)
        except ControlError as error:
            await context.abort(grpc.StatusCode[error.code], str(error))
        except ValueError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        raise AssertionError("context.abort raises")  # pragma: no cover

    return wrapper


class ApplianceServicer(pb_grpc.ApplianceServicer):
    """appliance.v1.Appliance on top of `Control`; every method runs on the API's event loop."""

    def __init__(self, control: Control, reads: Executor, commands: Executor) -> None:
        self._control = control
        self._reads = reads
        self._commands = commands
        self.watchers = 0  # only touched on the event loop, so no lock
        self.streaming = 0  # watchers whose starting point is taken: events after it reach them
        self.stopping = False  # set when the server stops: watchers end their streams cleanly

    async def _read(self, function: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        call = functools.partial(function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._reads, call)

    async def _command(self, function: Callable[[], R]) -> R:
        return await asyncio.get_running_loop().run_in_executor(self._commands, function)

    @_mapped
    async def GetStatus(self, request: pb.GetStatusRequest, context: Context) -> pb.GetStatusResponse:
        return convert.status(await self._read(self._control.status))

    @_mapped
    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        page_size = request.page_size or 100
        if not 1 <= page_size <= 1000:
            raise ValueError(f"page_size must be 1..1000 (got {request.page_size})")
        offset = 0
        if request.page_token:
            if not request.page_token.isdigit() or len(request.page_token) > 12:
                raise ValueError("page_token is not one this server gave; start again without it")
            offset = int(request.page_token)
        since = convert.seconds(request.since) if request.HasField("since") else None
        jobs = await self._read(
            self._control.list_jobs,
            state=convert.job_state_from(request.state),
            folder=request.folder or None,
            since=since,
            limit=page_size,
            offset=offset,
        )
        next_token = str(offset + len(jobs)) if len(jobs) == page_size else ""
        return pb.ListJobsResponse(jobs=[convert.job(j) for j in jobs], next_page_token=next_token)

    @_mapped
    async def GetJob(self, request: pb.GetJobRequest, context: Context) -> pb.GetJobResponse:
        if not request.job_id:
            raise ValueError("job_id is required; list jobs with `ocr-appliance jobs`")
        return convert.job_detail(await self._read(self._control.get_job, request.job_id))

    async def WatchEvents(
        self, request: pb.WatchEventsRequest, context: Context
    ) -> AsyncIterator[pb.JobEvent]:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        if request.after_seq < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "after_seq must not be negative")
        # A watcher holds no thread, but each one polls the journal: bound them.
        if self.watchers >= MAX_WATCHERS:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{MAX_WATCHERS} event watchers are connected; close one and retry",
            )
        self.watchers += 1
        started = False
        try:
            after = await self._read(self._control.latest_seq) if request.only_new else request.after_seq
            self.streaming += 1
            started = True
            # The deadline and a client that goes away cancel this coroutine at its next await.
            while not self.stopping:
                batch = await self._read(self._control.events, after, 0.0, 500)
                for transition in batch:
                    after = transition.seq
                    if not request.job_id or transition.job_id == request.job_id:
                        yield convert.event(transition)
                if not batch:
                    await asyncio.sleep(_POLL_SECONDS)
        finally:
            self.streaming -= started
            self.watchers -= 1

    @_mapped
    async def Reprocess(self, request: pb.ReprocessRequest, context: Context) -> pb.ReprocessResponse:
        target = request.WhichOneof("target")
        if target is None or not getattr(request, target):
            raise ValueError("give a job_id or a sha256 of the document to read again")
        if request.engine:
            status = await self._read(self._control.status)
            engines = sorted(engine.name for engine in status.engines)
            if request.engine not in engines:
                raise ValueError(
                    f"engine {request.engine!r} is not running here (running: {', '.join(engines)}); "
                    "change engine.name in the config and reload to use another"
                )
        job = await self._command(
            functools.partial(
                self._control.reprocess,
                job_id=request.job_id if target == "job_id" else None,
                sha256=request.sha256.lower() if target == "sha256" else None,
                profile=request.profile or None,
            )
        )
        return pb.ReprocessResponse(job=convert.job(job))

    @_mapped
    async def Pause(self, request: pb.PauseRequest, context: Context) -> pb.StateResponse:
        return pb.StateResponse(state=convert.daemon_state(await self._command(self._control.pause)))

    @_mapped
    async def Resume(self, request: pb.ResumeRequest, context: Context) -> pb.StateResponse:
        return pb.StateResponse(state=convert.daemon_state(await self._command(self._control.resume)))

    @_mapped
    async def Drain(self, request: pb.DrainRequest, context: Context) -> pb.StateResponse:
        return pb.StateResponse(state=convert.daemon_state(await self._command(self._control.drain)))

    @_mapped
    async def ReloadConfig(
        self, request: pb.ReloadConfigRequest, context: Context
    ) -> pb.ReloadConfigResponse:
        applied, message = await self._command(self._control.reload)
        if not applied:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{message}\nthe running configuration is kept; fix the file and reload again",
            )
        return pb.ReloadConfigResponse(applied=True, message=message)

    @_mapped
    async def ListReview(self, request: pb.ListReviewRequest, context: Context) -> pb.ListReviewResponse:
        items = await self._read(self._control.list_review)
        return pb.ListReviewResponse(items=[convert.review_item(i) for i in items])

    @_mapped
    async def ResolveReview(
        self, request: pb.ResolveReviewRequest, context: Context
    ) -> pb.ResolveReviewResponse:
        if not request.job_id:
            raise ValueError("job_id is required; list what waits with `ocr-appliance review list`")
        text = request.text if request.HasField("text") else None
        fields = dict(request.fields)
        job = await self._command(lambda: self._control.resolve_review(request.job_id, fields, text))
        return pb.ResolveReviewResponse(job=convert.job(job))

    @_mapped
    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Context) -> pb.GetMetricsResponse:
        metrics = await self._read(self._control.metrics)
        return pb.GetMetricsResponse(metrics={str(k): float(v) for k, v in metrics.items()})


def handler(servicer: ApplianceServicer) -> grpc.GenericRpcHandler:
    """The service's methods, built from the .proto's descriptor, with lenient request parsing."""
    methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in pb.DESCRIPTOR.services_by_name["Appliance"].methods:
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        build = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        methods[method.name] = build(
            getattr(servicer, method.name),
            request_deserializer=_lenient(request),
            response_serializer=response.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE, methods)
