"""Pages a second through the whole daemon: its hot folder, workers, session server and outputs.

Usage:
    python -m bench.daemon_pages [--workers N] [--provider cpu|cuda|auto] [--preset auto|accurate|fast]
        [--session-server auto|on|off] [--runners N] [--gpu-mem-limit-mb N] [--widths W,W]
        [--det-shares S,S] [--cublas-workspace :KiB:N|null] [--formats json,text] [--copies N]
        [--vlm-model-dir DIR [--cascade-mode always|below_threshold] [--cascade-keep RULE]
         [--cascade-min-confidence C] [--lines-together N] [--serve-vlm auto|on|off] [--vlm-copies N]
         [--vlm-threads N]]
        [--timeout S] DATA_DIR [DATA_DIR ...]

Every image of the DATA_DIRs (their `images/` folder when they have one) is copied into the hot
folder of a scratch appliance before it starts, so the daemon finds them all at its first scan,
which comes after its workers (and session server) have loaded. The daemon runs as `python -m
appliance run` in a child process; the bench waits until the journal holds every file in a final
state, stops it with SIGTERM and prints one JSON line: pages a second from the first job's claim to
the last job's end (loading left out), the states the jobs ended in, the time the daemon took to
load, and the peak GPU memory that `nvidia-smi` saw while it ran (absent without one). Each image
is one page. `cpu` says where the host's time went over the same span: how busy the machine's
cores were, the CPU milliseconds a page of the daemon's main process, of its workers and of its
session server, and how busy the server's runners were (the share of their time inside a model
run): runners near 1.0 bound the pages a second, cores near 1.0 the host's work does.

`--vlm-model-dir` loads a GGUF line reader (`engine.vlm_gguf`: each worker its own, or
`--vlm-copies` of it held in the session server for all of them, `jobs.serve_vlm` as `--serve-vlm`
says; `cpu` then also has how busy those copies were) and gives the folder's profile a line
cascade (`unit: lines`; `--cascade-mode`: every line unless told `below_threshold`;
`--cascade-keep`): the report then also sums, over the documents' JSON results
(filed or sent to review), the pages the cascade sent lines from, the lines it sent and the lines
whose VLM read stands (`cascade`).

`--copies N` drops each JPEG or PNG image N times, each copy made a distinct file by a comment in
it (a JPEG COM segment, a PNG tEXt chunk; the pixels are untouched), because the daemon issues the
result of a file it has already read without reading it again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, get_args

from appliance.config import CascadeConfig, JobsConfig, VlmGgufConfig
from appliance.engines.ppocr_onnx.remote_session import SessionServerClient
from appliance.session_server_keeper import SOCKET_NAME
from bench import child_process
from bench.engine_options import add_engine_options, engine_settings
from bench.gpu_memory import MemorySampler, gpu_memory_mib
from bench.host_cpu import CpuSnapshot, busy_share, machine_ticks, tree_cpu_s

_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}
_FINAL = ("done", "review", "failed")


def source_images(folders: list[Path]) -> list[Path]:
    """The images of each data folder (its `images/` folder when it has one), in name order."""
    found: list[Path] = []
    for folder in folders:
        images = folder / "images" if (folder / "images").is_dir() else folder
        found += sorted(path for path in images.iterdir() if path.suffix.lower() in _SUFFIXES)
    return found


def distinct_copy(data: bytes, suffix: str, copy: int) -> bytes:
    """The image with a comment naming its copy (none for copy 0): same pixels, another sha256.

    Written here because it is one segment or chunk put in whole, which no library does without
    decoding and encoding the pixels again (lossy for a JPEG).
    """
    if copy == 0:
        return data
    note = f"copy {copy}".encode()
    if suffix in (".jpg", ".jpeg"):  # a COM segment right after the start-of-image marker
        return data[:2] + b"\xff\xfe" + struct.pack(">H", 2 + len(note)) + note + data[2:]
    if suffix == ".png":  # a tEXt chunk before the closing IEND chunk (its last 12 bytes)
        body = b"tEXt" + b"Comment\0" + note
        chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
        return data[:-12] + chunk + data[-12:]
    raise SystemExit(f"--copies takes JPEG and PNG images only, not {suffix}")


def config_text(root: Path, args: argparse.Namespace) -> str:
    """The scratch appliance's configuration: one hot folder, the engine and workers asked for."""
    onnx: dict[str, Any] = {"provider": args.provider, "preset": args.preset}
    if args.gpu_mem_limit_mb:
        onnx["gpu_mem_limit_mb"] = args.gpu_mem_limit_mb
    onnx.update(engine_settings(args))
    engine = {"name": "ppocr_onnx", "ppocr_onnx": onnx}
    config: dict[str, Any] = {
        "version": 1,
        "paths": {"state_dir": str(root / "state")},
        "hot_folders": [
            {
                "path": str(root / "in"),
                "output_dir": str(root / "out"),
                "archive_dir": str(root / "archive"),
                "failed_dir": str(root / "failed"),
                "review_dir": str(root / "review"),
                "audit_dir": str(root / "audit"),
            }
        ],
        "intake": {"settle_seconds": 0.2, "min_free_mb": 0.0},
        "jobs": {
            "workers": args.workers,
            "session_server": args.session_server,
            "session_server_runners": args.runners,
            "serve_vlm": args.serve_vlm,
            "served_vlm_copies": args.vlm_copies,
            "timeout_seconds": args.timeout,
        },
        "engine": engine,
        "api": {"socket": str(root / "api.sock")},
    }
    if args.per_worker:
        config["jobs"]["per_worker"] = args.per_worker
    if args.formats:
        config["outputs"] = {"formats": args.formats.split(",")}
    if args.vlm_model_dir:
        vlm: dict[str, Any] = {"model_dir": str(args.vlm_model_dir), "lines_together": args.lines_together}
        if args.vlm_threads:
            vlm["threads"] = args.vlm_threads
        engine["vlm_gguf"] = vlm
        cascade = {
            "mode": args.cascade_mode,
            "unit": "lines",
            "keep": args.cascade_keep,
            "min_confidence": args.cascade_min_confidence,
        }
        config["profiles"] = {"default": {"cascade": cascade}}
    return json.dumps(config, indent=1)  # JSON is YAML


def results(root: Path) -> list[dict[str, Any]]:
    """The JSON results the daemon wrote: in out/, and in review/ for the documents sent to people."""
    found = [*(root / "out").glob("*.json"), *(root / "review").glob("*/*.json")]
    loaded = [json.loads(path.read_text(encoding="utf-8")) for path in found]
    return [result for result in loaded if isinstance(result, dict) and "pages" in result]


def cascade_totals(root: Path) -> dict[str, int]:
    """Pages the cascade sent lines from, lines sent and lines whose second read stands, over every result."""
    totals = {"pages_sending": 0, "lines_sent": 0, "lines_replaced": 0}
    for result in results(root):
        for page in result["pages"]:
            record = page.get("engine_details", {}).get("cascade", {})
            sent = int(record.get("lines_sent", 0))
            totals["pages_sending"] += sent > 0
            totals["lines_sent"] += sent
            totals["lines_replaced"] += int(record.get("lines_replaced", 0))
    return totals


def journal_rows(journal: Path) -> list[tuple[str, float, float, int, bool]]:
    """(state, created_at, updated_at, attempts, issued as a duplicate) of each job; [] before any."""
    if not journal.exists():
        return []
    try:
        with sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5.0) as connection:
            return connection.execute(
                "SELECT state, created_at, updated_at, attempts, duplicate_of IS NOT NULL FROM jobs"
            ).fetchall()
    except sqlite3.OperationalError:  # created but not yet given its tables
        return []


def accounted(rows: list[tuple[str, float, float, int, bool]], failed: Path) -> int:
    """Files that reached an end: jobs done or in review, and each reason in the failed folder.

    A reason is a failed job's or that of a file intake refused, which never became a job.
    """
    reasons = len(list(failed.glob("*.error.json"))) if failed.is_dir() else 0
    return sum(1 for row in rows if row[0] in ("done", "review")) + reasons


class HostSnapshot:
    """The host's counters at one moment: the machine's ticks, the daemon's processes, its server's runs."""

    def __init__(self, daemon_pid: int, socket: Path, finished: int) -> None:
        self.at = time.monotonic()
        self.finished = finished
        self.machine: CpuSnapshot = machine_ticks()
        self.processes = tree_cpu_s(daemon_pid)
        self.server: dict[str, Any] | None = None
        if socket.exists():
            try:
                self.server = SessionServerClient(socket).stats()
            except Exception:  # gone or restarting: the report says no server figures
                self.server = None


def host_report(first: HostSnapshot, last: HostSnapshot, daemon_pid: int) -> dict[str, Any]:
    """Where the host's time went between two snapshots, a page at a time."""
    pages = max(1, last.finished - first.finished)
    used = {pid: seconds - first.processes.get(pid, 0.0) for pid, seconds in last.processes.items()}
    server_pid = (last.server or {}).get("pid")
    workers = sum(seconds for pid, seconds in used.items() if pid not in (daemon_pid, server_pid))
    report: dict[str, Any] = {
        "cores": os.cpu_count(),
        "busy_share": round(busy_share(first.machine, last.machine) or 0.0, 3),
        "pages": pages,
        "main_ms_per_page": round(1000 * used.get(daemon_pid, 0.0) / pages, 1),
        "workers_ms_per_page": round(1000 * workers / pages, 1),
    }
    if first.server is not None and last.server is not None and server_pid is not None:
        span = last.at - first.at
        busy = last.server["run_busy_s"] - first.server["run_busy_s"]
        runs = last.server["runs_done"] - first.server["runs_done"]
        report["server_ms_per_page"] = round(1000 * used.get(server_pid, 0.0) / pages, 1)
        report["runner_busy_share"] = round(busy / (span * last.server["runners"]), 3) if span > 0 else None
        report["runs_per_page"] = round(runs / pages, 2)
        report["ms_per_run"] = round(1000 * busy / runs, 2) if runs else None
        if last.server.get("readers"):  # the VLM read in the server (jobs.serve_vlm)
            reading = last.server["read_busy_s"] - first.server["read_busy_s"]
            copies = last.server["reader_copies"]
            report["reader_busy_share"] = round(reading / (span * copies), 3) if span > 0 else None
            reads = last.server["reads_done"] - first.server["reads_done"]
            report["reads_per_page"] = round(reads / pages, 2)
    return report


def measure(args: argparse.Namespace) -> dict[str, Any]:
    images = source_images(args.data)
    if not images:
        raise SystemExit("no images in " + ", ".join(map(str, args.data)))
    root = Path(tempfile.mkdtemp(prefix="ocr-daemon-pages-"))
    (root / "in").mkdir()
    for image in images:  # the set's name keeps 000.jpg of two sets apart
        data = image.read_bytes()
        for copy in range(args.copies):
            name = f"{image.parent.parent.name}-{copy}-{image.name}"
            (root / "in" / name).write_bytes(distinct_copy(data, image.suffix.lower(), copy))
    pages = len(images) * args.copies
    config = root / "config.yaml"
    config.write_text(config_text(root, args), encoding="utf-8")
    before = gpu_memory_mib()
    sampler = MemorySampler(period=0.5)
    sampler.start()
    log = root / "daemon.log"
    # The session server listens in the runtime folder, as under systemd: the bench asks it how
    # busy its runners were.
    (root / "run").mkdir(mode=0o700)
    socket = root / "run" / "sessions" / SOCKET_NAME
    environment = {**os.environ, "RUNTIME_DIRECTORY": str(root / "run")}
    launched = time.time()
    with log.open("wb") as handle:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "appliance", "run", "--config", str(config)],
            stdout=handle,
            stderr=handle,
            env=environment,
        )
    journal = root / "state" / "journal.sqlite3"
    deadline = time.monotonic() + args.timeout
    first: HostSnapshot | None = None
    last: HostSnapshot | None = None
    try:
        while time.monotonic() < deadline and daemon.poll() is None:
            rows = journal_rows(journal)
            if first is None and rows:  # the first claim: the span pages a second are counted over
                first = HostSnapshot(daemon.pid, socket, sum(1 for row in rows if row[0] in _FINAL))
            ended = accounted(rows, root / "failed")
            if ended >= pages:
                last = HostSnapshot(daemon.pid, socket, ended)
                break
            time.sleep(0.5)
    finally:
        child_process.stop(daemon, grace_s=120)
        peak = sampler.stop()
    rows = journal_rows(journal)
    finished = [row for row in rows if row[0] in _FINAL]
    states = {state: sum(1 for row in rows if row[0] == state) for state in sorted({row[0] for row in rows})}
    report: dict[str, Any] = {
        "pages": pages,
        "workers": args.workers,
        "provider": args.provider,
        "preset": args.preset,
        "session_server": args.session_server,
        "runners": args.runners,
        "gpu_mem_limit_mb": args.gpu_mem_limit_mb,
        "widths": args.widths,
        "det_shares": args.det_shares,
        "cublas_workspace": args.cublas_workspace,
        "states": states,
        "retried": sum(1 for row in rows if row[3] > 1),
        "duplicates": sum(1 for row in rows if row[4]),  # results issued without a read
        "refused_at_intake": accounted(rows, root / "failed") - len(finished),
        "complete": len(finished) == pages,
        "daemon_exit": daemon.returncode,
        "scratch": str(root),
    }
    if finished:
        first_claim = min(row[1] for row in rows)
        span = max(row[2] for row in finished) - first_claim
        report["load_s"] = round(first_claim - launched, 1)
        report["span_s"] = round(span, 2)
        report["pages_per_s"] = round(len(finished) / span, 2) if span > 0 else None
    if first is not None and last is not None:
        report["cpu"] = host_report(first, last, daemon.pid)
    if args.vlm_model_dir:
        report["cascade"] = {
            "mode": args.cascade_mode,
            "keep": args.cascade_keep,
            "min_confidence": args.cascade_min_confidence,
            "lines_together": args.lines_together,
            "serve_vlm": args.serve_vlm,
            "vlm_copies": args.vlm_copies,
            "vlm_threads": args.vlm_threads,
            **cascade_totals(root),
        }
    if peak is not None:
        report["gpu_mib_before"] = before
        report["gpu_mib_peak"] = peak
    if not args.keep and report["complete"]:
        shutil.rmtree(root, ignore_errors=True)
        report["scratch"] = None
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="+", help="folders of page images (or with images/)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--provider", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--session-server", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--runners", type=int, default=1, help="the session server's model-running threads")
    parser.add_argument(
        "--per-worker", type=int, default=0, help="jobs a worker reads at once (0: the engine's)"
    )
    parser.add_argument(
        "--gpu-mem-limit-mb", type=int, default=0, help="the ONNX arena's cap (0: the default)"
    )
    parser.add_argument("--preset", choices=["auto", "accurate", "fast"], default="auto")
    add_engine_options(parser)
    parser.add_argument(
        "--formats", default="", help="output formats, comma-separated (default: the config's)"
    )
    parser.add_argument("--copies", type=int, default=1, help="distinct copies of each image dropped")
    parser.add_argument(
        "--vlm-model-dir", type=Path, help="a GGUF line reader: the profile gets a line cascade"
    )
    parser.add_argument("--cascade-mode", choices=["below_threshold", "always"], default="always")
    keep_rules = get_args(CascadeConfig.model_fields["keep"].annotation)
    parser.add_argument("--cascade-keep", choices=keep_rules, default=CascadeConfig().keep)
    parser.add_argument("--cascade-min-confidence", type=float, default=CascadeConfig().min_confidence)
    parser.add_argument(
        "--lines-together",
        type=int,
        default=VlmGgufConfig().lines_together,
        help="engine.vlm_gguf.lines_together",
    )
    parser.add_argument(
        "--serve-vlm",
        choices=["auto", "on", "off"],
        default=JobsConfig().serve_vlm,
        help="jobs.serve_vlm: the line reader held once in the session server for every worker",
    )
    parser.add_argument(
        "--vlm-copies", type=int, default=JobsConfig().served_vlm_copies, help="jobs.served_vlm_copies"
    )
    parser.add_argument("--vlm-threads", type=int, default=0, help="engine.vlm_gguf.threads (0: its default)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every page")
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch folder (it is kept if incomplete)"
    )
    report = measure(parser.parse_args())
    print(json.dumps(report))
    if not report["complete"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
