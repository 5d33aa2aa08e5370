"""A client of the control API for the CLI and tests: typed calls, errors that say what to do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from appliance.api.v1 import appliance_pb2 as pb
from appliance.api.v1 import appliance_pb2_grpc as pb_grpc

DEFAULT_SOCKET = Path("/run/ocr-appliance/api.sock")


class ApiError(Exception):
    """A call that failed: `code` is the gRPC status code's name (NOT_FOUND, UNAVAILABLE...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error(error: grpc.RpcError, target: str) -> ApiError:
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    if code is grpc.StatusCode.UNAVAILABLE and "failed to connect" in details:
        # Connecting failed: the daemon is not running, or the socket refuses this user.
        details = (
            f"cannot reach the appliance at {target}: {details}\n"
            "is the daemon running (systemctl status ocr-appliance)? "
            "is this user in the socket's group? (--socket PATH for another place)"
        )
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        # grpcio's own words for a request over the server's receive limit.
        details = f"{details}\nthe request is larger than the daemon accepts (api.max_message_bytes)"
    return ApiError(code.name, details)


class Client:
    """One channel to the appliance; each method is one call with a deadline of `timeout` seconds."""

    def __init__(self, socket: Path | str = DEFAULT_SOCKET, timeout: float = 10.0) -> None:
        self.target = f"unix:{socket}"
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            self.target,
            # A unix socket needs neither a proxy nor DNS.
            options=[("grpc.enable_http_proxy", 0), ("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        self.stub = pb_grpc.ApplianceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def status(self) -> pb.GetStatusResponse:
        try:
            return self.stub.GetStatus(pb.GetStatusRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def list_jobs(self, request: pb.ListJobsRequest) -> pb.ListJobsResponse:
        try:
            return self.stub.ListJobs(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def get_job(self, job_id: str) -> pb.GetJobResponse:
        try:
            return self.stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def watch(self, after_seq: int = 0, job_id: str = "", only_new: bool = False) -> EventStream:
        """Transitions as they happen, without a deadline; resume with the last `seq` seen."""
        request = pb.WatchEventsRequest(after_seq=after_seq, job_id=job_id, only_new=only_new)
        return EventStream(self.stub.WatchEvents(request), self.target)

    def reprocess(self, request: pb.ReprocessRequest) -> pb.ReprocessResponse:
        try:
            return self.stub.Reprocess(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def pause(self) -> pb.StateResponse:
        try:
            return self.stub.Pause(pb.PauseRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def resume(self) -> pb.StateResponse:
        try:
            return self.stub.Resume(pb.ResumeRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def drain(self) -> pb.StateResponse:
        try:
            return self.stub.Drain(pb.DrainRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def reload(self) -> pb.ReloadConfigResponse:
        try:
            return self.stub.ReloadConfig(pb.ReloadConfigRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def list_review(self) -> pb.ListReviewResponse:
        try:
            return self.stub.ListReview(pb.ListReviewRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def resolve_review(self, request: pb.ResolveReviewRequest) -> pb.ResolveReviewResponse:
        try:
            return self.stub.ResolveReview(request, timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None

    def metrics(self) -> pb.GetMetricsResponse:
        try:
            return self.stub.GetMetrics(pb.GetMetricsRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            raise _error(error, self.target) from None


class EventStream:
    """A running watch: iterate over it for the transitions; `cancel()` ends it.

    `cancel()` may be called from a signal handler: ending the call is how grpc's blocking
    iterator is left safely (an exception raised by a handler inside grpc's own code can leave
    the process hanging at exit), and the iteration then simply ends.
    """

    def __init__(self, call: Any, target: str) -> None:
        self._call = call
        self._target = target

    def __iter__(self) -> Iterator[pb.JobEvent]:
        try:
            yield from self._call
        except grpc.RpcError as error:
            if isinstance(error, grpc.Call) and error.code() is grpc.StatusCode.CANCELLED:
                return
            raise _error(error, self._target) from None

    def cancel(self) -> None:
        self._call.cancel()
