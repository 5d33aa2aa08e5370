"""Soak of appliances sharing one hot folder, spool and PostgreSQL journal, nodes killed and frozen.

Run by hand (minutes), not in the test suite; it starts its own throwaway PostgreSQL (Debian's
`postgresql` package, as `make test` installs it):

    .venv/bin/python -m bench.soak_cluster soak --nodes 3 --files 600 --kills-per-node 5 --stops 2
    .venv/bin/python -m bench.soak_cluster throughput --files 120 --cost-ms 200
    .venv/bin/python -m bench.soak_cluster journal-cost --jobs 300
    .venv/bin/python -m bench.soak_cluster scaling --nodes 1,2,4,8 --cost-ms 200

`soak`: the nodes (daemons with a stand-in engine that spends `--cost-ms` of CPU a page, so
kills land in every phase and stops often find a job mid-read) take files dropped in bursts; each
node is SIGKILLed at random moments and restarted, and some are frozen (SIGSTOP) for longer than
their lease, then woken. It reports files in, results out, lost (must be 0), results issued twice
(must be 0: two result files for one input, or two audit entries), good files failed (must be 0),
files not in the audit chain exactly once (must be 0), whether the chain verifies, kills, stops,
stale results a woken node refused to write, and wall time.

`throughput`: the same pages read by one node with W workers, then by W nodes with one worker
each, on the same CPUs, with a stand-in reader that spends a fixed CPU time per page: pages/s of
each and their ratio.

`scaling`: the same comparison for several worker counts (on a machine with more cores).

`journal-cost`: the journal's own work per job (claim, start, lease renewal, fence, finish with
its audit entry) in one process, on SQLite (the audit chain a file) and on PostgreSQL (the chain
in the database), with the servers' default durability (fsync on).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from appliance.journal import JobState
from appliance.journals import NODE_ID_FILE
from tests.pg_server import ThrowawayPostgres, throwaway_postgres

ROOT = Path(__file__).resolve().parent.parent


def _png(index: int) -> bytes:
    buffer = io.BytesIO()
    rng = np.random.default_rng(index)
    # Grey noise: distinct content per file, and no red that the seal step would send to review.
    Image.fromarray(rng.integers(0, 256, size=(40, 60), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_config(root: Path, dsn: str, node: str, workers: int, lease: float) -> Path:
    path = root / f"{node}.yaml"
    path.write_text(
        f"paths: {{state_dir: {node}, spool_dir: spool}}\n"
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
        "intake: {settle_seconds: 0.5, rescan_seconds: 5.0, min_free_mb: 0.0}\n"
        f"jobs: {{workers: {workers}, max_attempts: 50}}\n"
        f"journal: {{backend: postgresql, dsn: '{dsn}', node_name: {node}, lease_seconds: {lease}}}\n",
        encoding="utf-8",
    )
    return path


class _Node:
    """One daemon process (tests/cluster_node.py), restartable."""

    def __init__(
        self, root: Path, dsn: str, name: str, *, workers: int, lease: float, extra: list[str]
    ) -> None:
        self.name = name
        self.config = _write_config(root, dsn, name, workers, lease)
        self.log = root / f"{name}.log"
        self.extra = extra
        self.kills = 0
        self.stops = 0
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as handle:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.cluster_node",
                    str(self.config),
                    "--log-level",
                    "WARNING",
                    *self.extra,
                ],
                cwd=ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )

    def kill_and_restart(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.kills += 1
        time.sleep(random.uniform(0.0, 0.5))
        self.process = self._start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _reading_now(observer: Any, nodes: list[_Node], wait: float = 5.0) -> _Node | None:
    """A node that holds a running job now (so that freezing it strands a job mid-read), if any."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        holders = {job.lease_node for job in observer.jobs(JobState.RUNNING, limit=50)}
        for node in nodes:
            node_id = node.config.parent / node.name / NODE_ID_FILE
            if node_id.exists() and node_id.read_text(encoding="ascii").strip() in holders:
                return node
        time.sleep(0.05)
    return None


def _accounted(root: Path) -> tuple[Counter[str], set[str]]:
    results: Counter[str] = Counter()
    for path in (root / "out").glob("*.json"):
        results[path.name.split(".png")[0] + ".png"] += 1
    failed = {path.name for path in (root / "failed").glob("*.png")}
    return results, failed


def soak(args: argparse.Namespace, server: ThrowawayPostgres) -> dict[str, Any]:
    from appliance.cluster import audit as chain
    from appliance.cluster.journal import PostgresJournal

    random.seed(args.seed)
    root = Path(tempfile.mkdtemp(prefix="ocr-soak-cluster-"))
    (root / "in").mkdir()
    dsn = server.create_database()
    # A stand-in reader with a cost per page, so that kills and stops often find a job mid-read.
    extra = ["--cost-ms", str(args.cost_ms)] if args.cost_ms else []
    nodes = [
        _Node(root, dsn, f"node{index}", workers=args.workers, lease=args.lease, extra=extra)
        for index in range(args.nodes)
    ]
    names = [f"doc-{index:04d}.png" for index in range(args.files)]
    observer = PostgresJournal(dsn, node_id="soak-observer", node_name="soak-observer")
    started = time.monotonic()
    # Kill and stop moments spread over the bursts: each node killed kills_per_node times.
    events = [("kill", node) for node in nodes for _ in range(args.kills_per_node)]
    events += [("stop", random.choice(nodes)) for _ in range(args.stops)]
    random.shuffle(events)
    per_burst = max(1, len(names) // args.bursts)
    bursts = [names[start : start + per_burst] for start in range(0, len(names), per_burst)]
    per_gap = -(-len(events) // len(bursts))
    for index, burst in enumerate(bursts):
        for offset, name in enumerate(burst):
            data = _png(index * per_burst + offset)
            if offset % 2:  # half written under a temporary name and renamed, as many scanners do
                temporary = root / "in" / f"{name}.part"
                temporary.write_bytes(data)
                temporary.rename(root / "in" / name)
            else:
                (root / "in" / name).write_bytes(data)
        for kind, node in events[index * per_gap : (index + 1) * per_gap]:
            time.sleep(random.uniform(0.2, 1.0))
            if kind == "kill":
                node.kill_and_restart()
            else:  # frozen past its lease: the others take its jobs; woken, it must write nothing
                frozen = _reading_now(observer, nodes) or node
                frozen.process.send_signal(signal.SIGSTOP)
                time.sleep(args.lease * 1.5)
                frozen.process.send_signal(signal.SIGCONT)
                frozen.stops += 1
    observer.close()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        results, failed = _accounted(root)
        if all(name in results or name in failed for name in names):
            break
        time.sleep(0.5)
    # Let the last finishes commit before counting the chain.
    time.sleep(2.0)
    wall = time.monotonic() - started
    for node in nodes:
        node.stop()
    results, failed = _accounted(root)
    entries = chain.entries(dsn)
    audited = Counter(str(entry["record"].get("document", {}).get("name")) for entry in entries)
    verified = chain.verify(dsn)
    stale = sum(node.log.read_text(errors="replace").count("its worker writes nothing") for node in nodes)
    return {
        "files": len(names),
        "results": sum(1 for name in names if results[name]),
        "lost": sum(1 for name in names if not results[name] and name not in failed),
        "results_issued_twice": sum(1 for name in names if results[name] > 1 or audited[name] > 1),
        "good_files_failed": len(failed),
        "not_audited_once": sum(1 for name in names if audited[name] != 1),
        "audit_entries": len(entries),
        "audit_chain_intact": verified.ok,
        "kills": sum(node.kills for node in nodes),
        "kills_per_node": [node.kills for node in nodes],
        "stops": sum(node.stops for node in nodes),
        "stale_results_refused": stale,
        "wall_s": round(wall, 1),
        "folder": str(root),
    }


def _read_all(root: Path, dsn: str, *, nodes: int, workers: int, files: int, cost_ms: float) -> float:
    """Seconds from the first drop until every file has a result, with `nodes` nodes of `workers`."""
    for index in range(files):
        (root / "in" / f"doc-{index:04d}.png").write_bytes(_png(index))
    extra = ["--cost-ms", str(cost_ms)]
    started = time.monotonic()
    running = [
        _Node(root, dsn, f"node{index}", workers=workers, lease=30.0, extra=extra) for index in range(nodes)
    ]
    try:
        while len(list((root / "out").glob("*.json"))) < files:
            time.sleep(0.2)
        return time.monotonic() - started
    finally:
        for node in running:
            node.stop()


def throughput(args: argparse.Namespace, server: ThrowawayPostgres) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "files": args.files,
        "cost_ms_per_page": args.cost_ms,
        "workers_in_all": args.workers,
    }
    for label, nodes, workers in (("one_node", 1, args.workers), ("nodes", args.workers, 1)):
        root = Path(tempfile.mkdtemp(prefix=f"ocr-throughput-{label}-"))
        (root / "in").mkdir()
        # Start-up (model load stand-in, intake's first scan) is in both runs alike.
        dsn = server.create_database()
        seconds = _read_all(root, dsn, nodes=nodes, workers=workers, files=args.files, cost_ms=args.cost_ms)
        figures[f"{label}_pages_per_s"] = round(args.files / seconds, 3)
    figures["ratio"] = round(figures["nodes_pages_per_s"] / figures["one_node_pages_per_s"], 3)
    return figures


def scaling(args: argparse.Namespace, server: ThrowawayPostgres) -> dict[str, Any]:
    """Pages/s of N nodes of one worker against one node of N workers, for each N, on the same CPUs."""
    curve = []
    for count in (int(value) for value in args.nodes.split(",")):
        files = args.pages_per_worker * count
        point: dict[str, Any] = {"workers": count, "files": files}
        for label, nodes, workers in (("one_node", 1, count), ("nodes", count, 1)):
            root = Path(tempfile.mkdtemp(prefix=f"ocr-scaling-{label}-{count}-"))
            (root / "in").mkdir()
            dsn = server.create_database()
            seconds = _read_all(root, dsn, nodes=nodes, workers=workers, files=files, cost_ms=args.cost_ms)
            point[f"{label}_pages_per_s"] = round(files / seconds, 3)
        point["ratio"] = round(point["nodes_pages_per_s"] / point["one_node_pages_per_s"], 3)
        curve.append(point)
        print(json.dumps(point), flush=True)
    return {"cost_ms_per_page": args.cost_ms, "cpus": os.cpu_count(), "curve": curve}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 3),
    }


def journal_cost(args: argparse.Namespace, server: ThrowawayPostgres) -> dict[str, Any]:
    from appliance.audit import AuditLog
    from appliance.cluster.journal import PostgresJournal
    from appliance.journal import JobState, Journal

    folder = Path(tempfile.mkdtemp(prefix="ocr-journal-cost-"))
    audit = AuditLog(folder / "audit.jsonl")
    backends: dict[str, Any] = {
        "sqlite": Journal(folder / "journal.sqlite3", audit_sink=audit.append),
        "postgresql": PostgresJournal(server.create_database(), node_id="bench", node_name="bench"),
    }
    figures: dict[str, Any] = {"jobs": args.jobs}
    for name, journal in backends.items():
        per_job: list[float] = []
        for index in range(args.jobs):
            began = time.perf_counter()
            job = journal.add(
                sha256=f"{index:064x}",
                source_folder="/in",
                relative_path=f"doc-{index}.png",
                name=f"doc-{index}.png",
                size=1000,
                spool_path=f"/spool/{index}/doc-{index}.png",
                identity=f"1:{index}:0",
            )
            started = journal.start_next()
            assert started is not None and started.id == job.id
            # A renewal every third of a 30 s lease, over a one-second read: a tenth of one per job.
            if index % 10 == 0:
                journal.renew_leases([job.id], {"done": index})
            journal.fence(job.id)
            record = {"job_id": job.id, "document": {"name": job.name, "sha256": job.sha256}, "route": "done"}
            journal.finish(job.id, JobState.DONE, "read 1 page(s)", {"json": "/out/x.json"}, audit=record)
            per_job.append(time.perf_counter() - began)
        figures[name] = _percentiles(per_job)
        journal.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("soak")
    run.add_argument("--nodes", type=int, default=3)
    run.add_argument("--files", type=int, default=600)
    run.add_argument("--bursts", type=int, default=12)
    run.add_argument("--kills-per-node", type=int, default=5)
    run.add_argument("--stops", type=int, default=2)
    run.add_argument("--workers", type=int, default=1)
    run.add_argument("--lease", type=float, default=6.0)
    run.add_argument("--cost-ms", type=float, default=100.0, help="CPU time per page of the stand-in reader")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--timeout", type=float, default=900.0)
    speed = commands.add_parser("throughput")
    speed.add_argument("--files", type=int, default=120)
    speed.add_argument("--cost-ms", type=float, default=200.0)
    speed.add_argument("--workers", type=int, default=3)
    curve = commands.add_parser("scaling")
    curve.add_argument("--nodes", default="1,2,4,8", help="comma-separated worker counts")
    curve.add_argument("--cost-ms", type=float, default=200.0)
    curve.add_argument("--pages-per-worker", type=int, default=60)
    cost = commands.add_parser("journal-cost")
    cost.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    # The soak measures with the server's own durability settings (fsync on).
    with throwaway_postgres(durable=True) as server:
        if args.command == "soak":
            figures = soak(args, server)
            failed = figures["lost"] or figures["results_issued_twice"] or figures["good_files_failed"]
            failed = failed or figures["not_audited_once"] or not figures["audit_chain_intact"]
        elif args.command == "throughput":
            figures, failed = throughput(args, server), False
        elif args.command == "scaling":
            figures, failed = scaling(args, server), False
        else:
            figures, failed = journal_cost(args, server), False
    print(json.dumps(figures, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
