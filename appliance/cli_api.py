"""The CLI commands that talk to a running daemon over its control API.

`ocr-appliance status | jobs | job ID | watch | pause | resume | drain | reprocess | review list |
review resolve | reload | metrics`. Each finds the socket as the daemon chose it (appliance.cli_socket:
--socket, else --config's api.socket, $OCR_APPLIANCE_SOCKET, the installed and the `make run`
defaults, whichever exists). Tables for people, --json for scripts (protobuf's JSON mapping,
field names as in the .proto). The daemon's refusals exit with their own code (API_* in ExitCode).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from appliance import cli_socket
from appliance.errors import ExitCode

COMMANDS = (
    "status",
    "jobs",
    "job",
    "watch",
    "pause",
    "resume",
    "drain",
    "reprocess",
    "review",
    "reload",
    "metrics",
)
_STATES = ("queued", "running", "done", "review", "failed")
# The daemon's refusals by gRPC status code; anything else is API_FAILED (1 stays for our bugs).
_EXIT_BY_CODE = {
    "UNAVAILABLE": ExitCode.API_UNREACHABLE,
    "DEADLINE_EXCEEDED": ExitCode.API_UNREACHABLE,
    "NOT_FOUND": ExitCode.API_NOT_FOUND,
    "INVALID_ARGUMENT": ExitCode.API_INVALID_ARGUMENT,
    "PERMISSION_DENIED": ExitCode.API_PERMISSION_DENIED,
    "UNAUTHENTICATED": ExitCode.API_PERMISSION_DENIED,
    "FAILED_PRECONDITION": ExitCode.API_FAILED_PRECONDITION,
}


def exit_code_for(code: str) -> ExitCode:
    """The exit status for an API error's gRPC code name."""
    return _EXIT_BY_CODE.get(code, ExitCode.API_FAILED)


def register(commands: Any) -> None:
    """Add the API commands to the `ocr-appliance` subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--socket", type=Path, default=None, help="the API socket (default: found as the daemon chose it)"
    )
    common.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="find the socket in this config's api.socket",
    )
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for an answer")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of a table")

    commands.add_parser("status", parents=[common, as_json], help="what the running daemon is doing")
    jobs = commands.add_parser("jobs", parents=[common, as_json], help="list jobs, newest first")
    jobs.add_argument("--state", choices=_STATES)
    jobs.add_argument("--folder", help="a hot folder's configured path")
    jobs.add_argument("--since", help="created at or after: ISO time (2026-11-29T10:00) or minutes ago (30m)")
    jobs.add_argument("--limit", type=int, default=50, help="jobs per page (1..1000)")
    jobs.add_argument("--page-token", default="", help="continue after an earlier page")
    job = commands.add_parser("job", parents=[common, as_json], help="one job: transitions, route, timings")
    job.add_argument("job_id", metavar="ID")
    watch = commands.add_parser("watch", parents=[common], help="follow job transitions live (Ctrl-C stops)")
    watch.add_argument(
        "--after", type=int, default=-1, help="resume after this sequence number (default: now)"
    )
    watch.add_argument("--job", default="", help="only this job")
    commands.add_parser("pause", parents=[common], help="stop starting new jobs; running ones finish")
    commands.add_parser("resume", parents=[common], help="start jobs again after pause")
    commands.add_parser("drain", parents=[common], help="finish running jobs, take no new ones, then stop")
    commands.add_parser("reload", parents=[common], help="read the config file again (kept if invalid)")
    commands.add_parser("metrics", parents=[common, as_json], help="counters and gauges")
    reprocess = commands.add_parser("reprocess", parents=[common, as_json], help="read a document again")
    reprocess.add_argument(
        "target", metavar="ID|SHA256", help="a job id, or the sha256 of the file's content"
    )
    reprocess.add_argument("--profile", default="", help="read it with this profile")
    reprocess.add_argument("--engine", default="", help="the engine (only the configured one is available)")
    review = commands.add_parser("review", help="documents waiting for a person")
    actions = review.add_subparsers(dest="review_command", required=True, metavar="ACTION")
    actions.add_parser("list", parents=[common, as_json], help="what waits in review")
    resolve = actions.add_parser("resolve", parents=[common, as_json], help="submit corrected fields")
    resolve.add_argument("job_id", metavar="ID")
    resolve.add_argument("--field", action="append", default=[], metavar="NAME=VALUE", help="(repeatable)")
    resolve.add_argument("--text-file", type=Path, help="corrected full text")


def run(args: argparse.Namespace) -> ExitCode:
    """Run one API command; errors from the daemon are printed with what to do."""
    from appliance.api.client import ApiError, Client

    places = cli_socket.candidates(args.socket, args.config)
    chosen = cli_socket.choose(places)
    if chosen is None:
        print(f"{args.command}: cannot reach the appliance: no socket exists", file=sys.stderr)
        print(cli_socket.looked_at(places), file=sys.stderr)
        print("is the daemon running? (--socket PATH or --config FILE for another place)", file=sys.stderr)
        return ExitCode.API_UNREACHABLE
    handlers: dict[str, Callable[[Client, argparse.Namespace], ExitCode]] = {
        "status": _status,
        "jobs": _jobs,
        "job": _job,
        "watch": _watch,
        "pause": lambda c, _: _state(c.pause().state),
        "resume": lambda c, _: _state(c.resume().state),
        "drain": lambda c, _: _state(c.drain().state),
        "reload": _reload,
        "metrics": _metrics,
        "reprocess": _reprocess,
        "review": _review,
    }
    with Client(chosen.path, timeout=args.timeout) as client:
        try:
            return handlers[args.command](client, args)
        except ApiError as error:
            print(f"{args.command}: {error.code}: {error.message}", file=sys.stderr)
            if error.code == "UNAVAILABLE" and len(places) > 1:
                print(cli_socket.looked_at(places), file=sys.stderr)
            if args.command == "reload" and error.code == "FAILED_PRECONDITION":
                return ExitCode.CONFIG_INVALID
            return exit_code_for(error.code)
        except ValueError as error:
            print(f"{args.command}: {error}", file=sys.stderr)
            return ExitCode.USAGE


# -- formatting ---------------------------------------------------------------------------------


def _json(message: Message) -> None:
    print(json_format.MessageToJson(message, preserving_proto_field_name=True, indent=1))


def _when(stamp: Any) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return datetime.fromtimestamp(stamp.seconds, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _bytes(value: int) -> str:
    return f"{value / 2**20:.0f} MiB"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _state_name(value: int) -> str:
    from appliance.api import convert

    return convert.daemon_state_name(value)


def _job_state_name(value: int) -> str:
    from appliance.api import convert

    return convert.job_state_name(value)


# -- commands -----------------------------------------------------------------------------------


def _status(client: Any, args: argparse.Namespace) -> ExitCode:
    status = client.status()
    if args.json:
        _json(status)
        return ExitCode.OK
    rates = status.pages_per_second
    gpu = "CPU only"
    if status.HasField("gpu_memory_used_bytes"):
        budget = status.gpu_memory_budget_bytes if status.HasField("gpu_memory_budget_bytes") else 0
        gpu = _bytes(status.gpu_memory_used_bytes) + (f" of {_bytes(budget)} budget" if budget else "")
    rows = [
        ["version", status.version],
        [
            "state",
            _state_name(status.state)
            + (" (intake paused: disk low)" if status.intake_paused_for_disk else ""),
        ],
        ["uptime", _duration(status.uptime_seconds)],
        ["workers", f"{status.workers_busy} busy of {status.workers}"],
        ["queue", ", ".join(f"{s} {status.queue.get(s, 0)}" for s in _STATES)],
        [
            "pages/s",
            f"{rates.one_minute:.2f} (1 min)  {rates.five_minutes:.2f} (5 min)  "
            f"{rates.fifteen_minutes:.2f} (15 min)",
        ],
        ["GPU memory", gpu],
    ]
    for engine in status.engines:
        models = ", ".join(f"{m.role or m.name} {m.name} on {m.provider or '?'}" for m in engine.models)
        rows.append([f"engine {engine.name}", models or "-"])
    if status.HasField("vlm_decoding"):
        vlm = status.vlm_decoding
        rows.append(
            [
                "VLM decoding",
                f"{vlm.pages} pages, {vlm.generated_tokens} tokens at {vlm.tokens_per_second:.1f} tok/s, "
                f"drafts accepted {vlm.acceptance_rate:.0%} of {vlm.drafted_tokens} "
                f"(draft cost {vlm.draft_ms / 1000:.1f} s), {vlm.fallbacks} fallbacks to ONNX",
            ]
        )
    if status.HasField("vlm_disabled"):
        rows.append(["VLM", status.vlm_disabled])
    if status.HasField("session_server"):
        server = status.session_server
        state = f"pid {server.pid}" if server.alive else "down, starting again"
        vlm = f", the VLM for the workers ({server.vlm_copies} copies)" if server.vlm_copies else ""
        rows.append(
            [
                "session server",
                f"{state}, {server.runners} runner(s){vlm}, restarted {server.restarts} time(s); "
                f"{server.socket}",
            ]
        )
    _table(rows, ["", ""])
    if status.nodes:
        print("\ncluster (one PostgreSQL journal; the queue above is all of it):")
        _table(
            [
                [
                    node.name + (" (this one)" if node.self else ""),
                    node.state or "-",
                    f"{node.seconds_since_heartbeat:.0f} s ago",
                    str(node.running),
                    str(node.done),
                    str(node.failed),
                    f"{node.pages_per_second:.2f}",
                ]
                for node in status.nodes
            ],
            ["node", "state", "heartbeat", "running", "done", "failed", "pages/s"],
        )
    if status.recent_errors:
        print("\nrecent errors:")
        _table(
            [[_when(e.at), e.job_id[:8], e.message] for e in status.recent_errors], ["when", "job", "message"]
        )
    return ExitCode.OK


def _since(text: str | None) -> float | None:
    if not text:
        return None
    if text[-1] in "mhd" and text[:-1].isdigit():
        return time.time() - int(text[:-1]) * {"m": 60, "h": 3600, "d": 86400}[text[-1]]
    moment = datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.astimezone()).timestamp()


def _jobs(client: Any, args: argparse.Namespace) -> ExitCode:
    from appliance.api import convert
    from appliance.api.v1 import appliance_pb2 as pb
    from appliance.journal import JobState

    request = pb.ListJobsRequest(folder=args.folder or "", page_size=args.limit, page_token=args.page_token)
    if args.state:
        request.state = convert.job_state(JobState(args.state))
    since = _since(args.since)
    if since is not None:
        request.since.CopyFrom(convert.timestamp(since))
    response = client.list_jobs(request)
    if args.json:
        _json(response)
        return ExitCode.OK
    rows = [
        [
            j.id[:8],
            _job_state_name(j.state),
            _when(j.created_at),
            j.profile,
            str(j.attempts),
            j.name,
            j.reason,
        ]
        for j in response.jobs
    ]
    _table(rows, ["id", "state", "created", "profile", "tries", "file", "reason"])
    if response.next_page_token:
        print(f"\nmore: --page-token {response.next_page_token}")
    return ExitCode.OK


def _job(client: Any, args: argparse.Namespace) -> ExitCode:
    detail = client.get_job(args.job_id)
    if args.json:
        _json(detail)
        return ExitCode.OK
    job = detail.job
    rows = [
        ["id", job.id],
        ["file", f"{job.source_folder}/{job.relative_path}"],
        ["sha256", job.sha256],
        ["state", _job_state_name(job.state) + (f" ({job.reason})" if job.reason else "")],
        ["profile", f"{job.profile} (priority {job.priority})"],
        ["attempts", str(job.attempts)],
        ["route", detail.route or "-"],
        ["reasons", "; ".join(detail.reasons) or "-"],
    ]
    if job.duplicate_of:
        rows.append(["duplicate of", job.duplicate_of])
    rows.extend([f"output {fmt}", path] for fmt, path in sorted(job.outputs.items()))
    _table(rows, ["", ""])
    if detail.page_timings:
        print("\npage timings (ms):")
        steps = sorted({step for page in detail.page_timings for step in page.timings_ms})
        _table(
            [[str(p.page), *(f"{p.timings_ms.get(s, 0.0):.1f}" for s in steps)] for p in detail.page_timings],
            ["page", *steps],
        )
    print("\ntransitions:")
    _table(
        [
            [
                str(t.seq),
                _when(t.at),
                f"{_job_state_name(t.from_state)} -> {_job_state_name(t.to_state)}",
                t.reason,
            ]
            for t in detail.transitions
        ],
        ["seq", "when", "change", "reason"],
    )
    return ExitCode.OK


def _progress(status: Any, started_done: int, width: int) -> str:
    """One line: a bar of finished against all jobs seen since the watch began, and throughput."""
    finished = sum(status.queue.get(s, 0) for s in ("done", "review", "failed")) - started_done
    waiting = status.queue.get("queued", 0) + status.queue.get("running", 0)
    total = max(finished + waiting, 1)
    bar_width = max(10, min(40, width - 60))
    filled = round(bar_width * finished / total)
    bar = "#" * filled + "-" * (bar_width - filled)
    return (
        f"[{bar}] {finished}/{finished + waiting} finished  {status.queue.get('running', 0)} running  "
        f"{status.queue.get('queued', 0)} queued  {status.pages_per_second.one_minute:.2f} pages/s"
    )


class _TerminatedError(Exception):
    """SIGTERM while watching: ends the watch like Ctrl-C does."""


def _on_terminate(_signum: int, _frame: object) -> None:
    raise _TerminatedError


def _watch(client: Any, args: argparse.Namespace) -> ExitCode:
    """Follow transitions until Ctrl-C or SIGTERM, either of which ends the watch with exit 0."""
    from appliance.api.client import Client

    # Until the stream runs, Ctrl-C raises KeyboardInterrupt (Python's default handler) and SIGTERM
    # _TerminatedError (it would otherwise kill the process without the last newline); once it
    # runs, both cancel it (grpc's blocking iterator wakes for signals, and ends when cancelled).
    signal.signal(signal.SIGTERM, _on_terminate)
    job_id = args.job
    if job_id and len(job_id) < 32:  # the stream filters by the full id: the daemon resolves a prefix
        job_id = client.get_job(job_id).job.id
    status = client.status()
    started_done = sum(status.queue.get(s, 0) for s in ("done", "review", "failed"))
    interactive = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns
    last_bar = 0.0
    # The stream has no deadline; a second channel answers status calls for the bar meanwhile.
    with Client(client.target.removeprefix("unix:"), timeout=args.timeout) as side:
        try:
            stream = client.watch(max(args.after, 0), job_id, only_new=args.after < 0)
            for stop in (signal.SIGINT, signal.SIGTERM):
                signal.signal(stop, lambda _signum, _frame: stream.cancel())
            for event in stream:
                line = (
                    f"{_when(event.at)}  #{event.seq}  {event.job_id[:8]}  "
                    f"{_job_state_name(event.from_state)} -> {_job_state_name(event.to_state)}"
                    + (f"  ({event.reason})" if event.reason else "")
                )
                if interactive:
                    print("\r\033[K" + line)
                    if time.monotonic() - last_bar > 0.5:
                        last_bar = time.monotonic()
                        print(_progress(side.status(), started_done, width), end="", flush=True)
                else:
                    print(line, flush=True)
        except (KeyboardInterrupt, _TerminatedError):
            pass
    if interactive:
        print()
    return ExitCode.OK


def _state(value: int) -> ExitCode:
    print(f"daemon is {_state_name(value)}")
    return ExitCode.OK


def _reload(client: Any, args: argparse.Namespace) -> ExitCode:
    response = client.reload()
    print(response.message or "configuration reloaded")
    return ExitCode.OK


def _metrics(client: Any, args: argparse.Namespace) -> ExitCode:
    response = client.metrics()
    if args.json:
        _json(response)
    else:
        _table(
            [[name, f"{value:g}"] for name, value in sorted(response.metrics.items())], ["metric", "value"]
        )
    return ExitCode.OK


def _reprocess(client: Any, args: argparse.Namespace) -> ExitCode:
    from appliance.api.v1 import appliance_pb2 as pb

    target = args.target.strip()
    is_sha = len(target) == 64 and all(c in "0123456789abcdefABCDEF" for c in target)
    request = pb.ReprocessRequest(profile=args.profile, engine=args.engine)
    if is_sha:
        request.sha256 = target.lower()
    else:
        request.job_id = target
    job = client.reprocess(request).job
    if args.json:
        _json(job)
    else:
        print(f"queued as job {job.id} ({job.name}, profile {job.profile})")
    return ExitCode.OK


def _review(client: Any, args: argparse.Namespace) -> ExitCode:
    from appliance.api.v1 import appliance_pb2 as pb

    if args.review_command == "list":
        response = client.list_review()
        if args.json:
            _json(response)
            return ExitCode.OK
        rows = [
            [
                i.job.id[:8],
                i.job.name,
                _when(i.job.updated_at),
                "; ".join(i.reasons),
                ", ".join(sorted(i.fields.keys())),
            ]
            for i in response.items
        ]
        _table(rows, ["id", "file", "since", "reasons", "fields"])
        return ExitCode.OK
    fields: dict[str, str] = {}
    for item in args.field:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--field {item!r}: write it as NAME=VALUE")
        fields[name] = value
    request = pb.ResolveReviewRequest(job_id=args.job_id, fields=fields)
    if args.text_file is not None:
        request.text = args.text_file.read_text(encoding="utf-8")
    job = client.resolve_review(request).job
    if args.json:
        _json(job)
    else:
        print(f"job {job.id} resolved: {_job_state_name(job.state)}")
    return ExitCode.OK
