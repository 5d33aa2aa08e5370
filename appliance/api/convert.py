"""Control's dataclasses to appliance.v1 messages, and request fields back to Control's arguments."""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from appliance.api.v1 import appliance_pb2 as pb
from appliance.control import DaemonState, JobDetail, ReviewItem, Status
from appliance.journal import Job, JobState, Transition
from appliance.names import display

_JOB_STATES: dict[JobState, pb.JobState.ValueType] = {
    JobState.QUEUED: pb.JOB_STATE_QUEUED,
    JobState.RUNNING: pb.JOB_STATE_RUNNING,
    JobState.DONE: pb.JOB_STATE_DONE,
    JobState.REVIEW: pb.JOB_STATE_REVIEW,
    JobState.FAILED: pb.JOB_STATE_FAILED,
}
_JOB_STATES_BACK = {value: key for key, value in _JOB_STATES.items()}
_DAEMON_STATES: dict[DaemonState, pb.DaemonState.ValueType] = {
    DaemonState.RUNNING: pb.DAEMON_STATE_RUNNING,
    DaemonState.PAUSED: pb.DAEMON_STATE_PAUSED,
    DaemonState.DRAINING: pb.DAEMON_STATE_DRAINING,
    DaemonState.STOPPING: pb.DAEMON_STATE_STOPPING,
}
_INT64_MAX = 2**63 - 1


def timestamp(unix_seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    if math.isfinite(unix_seconds):
        stamp.FromNanoseconds(int(unix_seconds * 1e9))
    return stamp


def seconds(stamp: timestamp_pb2.Timestamp) -> float:
    return stamp.seconds + stamp.nanos / 1e9


def job_state(state: JobState) -> pb.JobState.ValueType:
    return _JOB_STATES[state]


def job_state_from(value: int) -> JobState | None:
    """The journal's state for a message's enum value; None for unspecified (no filter)."""
    if value == pb.JOB_STATE_UNSPECIFIED:
        return None
    try:
        return _JOB_STATES_BACK[value]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown job state {value}") from None


def job_state_name(value: int) -> str:
    state = _JOB_STATES_BACK.get(value)  # type: ignore[call-overload]
    return state.value if state is not None else "unspecified"


def daemon_state(state: DaemonState) -> pb.DaemonState.ValueType:
    return _DAEMON_STATES[state]


def daemon_state_name(value: int) -> str:
    for state, number in _DAEMON_STATES.items():
        if number == value:
            return state.value
    return "unspecified"


def job(item: Job) -> pb.Job:
    # Protobuf strings must be UTF-8 and a file name need not be: names and paths shown escaped.
    return pb.Job(
        id=item.id,
        sha256=item.sha256,
        source_folder=display(item.source_folder),
        relative_path=display(item.relative_path),
        name=display(item.name),
        size=min(item.size, _INT64_MAX),
        profile=item.profile,
        priority=item.priority,
        state=job_state(item.state),
        attempts=item.attempts,
        reason=display(item.reason or ""),
        created_at=timestamp(item.created_at),
        updated_at=timestamp(item.updated_at),
        outputs={display(str(k)): display(str(v)) for k, v in item.outputs.items()},
        duplicate_of=item.duplicate_of or "",
    )


def event(transition: Transition) -> pb.JobEvent:
    return pb.JobEvent(
        seq=transition.seq,
        job_id=transition.job_id,
        from_state=pb.JOB_STATE_UNSPECIFIED
        if transition.from_state is None
        else job_state(transition.from_state),
        to_state=job_state(transition.to_state),
        reason=display(transition.reason),
        at=timestamp(transition.at),
    )


def _model(model: dict[str, Any]) -> pb.Model:
    return pb.Model(**{key: str(model.get(key) or "") for key in pb.Model.DESCRIPTOR.fields_by_name})


def status(item: Status) -> pb.GetStatusResponse:
    rates = item.pages_per_second
    message = pb.GetStatusResponse(
        version=item.version,
        uptime_seconds=item.uptime_seconds,
        state=daemon_state(item.state),
        intake_paused_for_disk=item.intake_paused_for_disk,
        engines=[pb.Engine(name=e.name, models=[_model(m) for m in e.models]) for e in item.engines],
        workers=item.workers,
        workers_busy=item.workers_busy,
        queue={str(k): int(v) for k, v in item.queue.items()},
        pages_per_second=pb.PagesPerSecond(
            one_minute=rates.get("1m", 0.0),
            five_minutes=rates.get("5m", 0.0),
            fifteen_minutes=rates.get("15m", 0.0),
        ),
        recent_errors=[
            pb.RecentError(
                at=timestamp(float(error.get("at") or 0.0)),
                job_id=str(error.get("job_id") or ""),
                message=display(str(error.get("message") or "")),  # may quote a file name
            )
            for error in item.recent_errors
        ],
    )
    if item.gpu_memory_used_bytes is not None:
        message.gpu_memory_used_bytes = item.gpu_memory_used_bytes
    if item.gpu_memory_budget_bytes is not None:
        message.gpu_memory_budget_bytes = item.gpu_memory_budget_bytes
    if item.vlm_decoding:
        message.vlm_decoding.CopyFrom(vlm_decoding(item.vlm_decoding))
    if item.vlm_disabled is not None:
        message.vlm_disabled = item.vlm_disabled
    if item.session_server is not None:
        server = item.session_server
        message.session_server.CopyFrom(
            pb.SessionServer(
                pid=server.pid or 0,
                alive=server.alive,
                restarts=server.restarts,
                socket=server.socket,
                runners=server.runners,
                vlm_copies=server.vlm_copies,
            )
        )
    for node in item.nodes:
        stats = node.stats
        message.nodes.append(
            pb.Node(
                id=node.id,
                name=node.name,
                pid=node.pid,
                seconds_since_heartbeat=node.seconds_since_heartbeat,
                running=node.running,
                state=str(stats.get("state", "")),
                done=int(stats.get("done", 0)),
                failed=int(stats.get("failed", 0)),
                review=int(stats.get("review", 0)),
                pages_per_second=float(stats.get("pages_per_second_1m", 0.0)),
                self=node.id == item.node_id,
            )
        )
    return message


def vlm_decoding(totals: dict[str, float]) -> pb.VlmDecoding:
    """The daemon's decoding sums as the API's message, with the rates derived from them."""
    drafted = totals.get("drafted_tokens", 0.0)
    generated = totals.get("generated_tokens", 0.0)
    seconds = (totals.get("draft_ms", 0.0) + totals.get("target_ms", 0.0)) / 1000
    return pb.VlmDecoding(
        pages=int(totals.get("pages", 0)),
        generated_tokens=int(generated),
        drafted_tokens=int(drafted),
        accepted_tokens=int(totals.get("accepted_tokens", 0)),
        acceptance_rate=totals.get("accepted_tokens", 0.0) / drafted if drafted else 0.0,
        tokens_per_second=generated / seconds if seconds else 0.0,
        draft_ms=totals.get("draft_ms", 0.0),
        target_ms=totals.get("target_ms", 0.0),
        fallbacks=int(totals.get("fallbacks", 0)),
    )


def job_detail(detail: JobDetail) -> pb.GetJobResponse:
    timings = []
    for number, page in enumerate(detail.page_timings_ms, start=1):
        values = {str(k): float(v) for k, v in page.items() if isinstance(v, int | float)}
        timings.append(pb.PageTiming(page=number, timings_ms=values))
    return pb.GetJobResponse(
        job=job(detail.job),
        transitions=[event(t) for t in detail.transitions],
        route=detail.route or "",
        reasons=[r for r in detail.reasons if r],
        page_timings=timings,
    )


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    # Struct holds JSON values only; anything else (a date object, bytes) is shown as text.
    message.update({str(k): _jsonable(v) for k, v in values.items()})
    return message


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def review_item(item: ReviewItem) -> pb.ReviewItem:
    return pb.ReviewItem(
        job=job(item.job),
        folder=display(item.folder),
        reasons=[display(reason) for reason in item.reasons],
        fields=_struct(item.fields),
    )
