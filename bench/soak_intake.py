"""Soak test of intake and the journal: files dropped in bursts while the daemon is SIGKILLed at random.

Run by hand (it takes a few minutes), not in the test suite:

    .venv/bin/python -m bench.soak_intake --files 300 --kills 10

It starts the daemon as a child process on a scratch folder, drops files in bursts (half written
in place, half written under a temporary name and renamed), kills the daemon with SIGKILL at random
moments and restarts it, then waits until every file is accounted for and reports:
files in, results out, failed, lost (must be 0), results issued twice (must be 0), jobs that a
worker started more than once because a kill landed mid-job (allowed: reading is at-least-once,
results are written idempotently), kills and wall time.

`--engine fake` (default) reads instantly, so kills land in every phase of the pipeline;
`--engine real` uses the PP-OCRv5 engine.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


class _InstantEngine:
    """Reads one fixed line per page at once (the soak is about intake, not OCR)."""

    name = "soak_instant"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "models": []}

    def recognize(self, image: np.ndarray) -> Any:
        from appliance.document import Line
        from appliance.engines.base import PageText

        box = (0.0, 0.0, 10.0, 10.0)
        polygon = ((0.0, 0.0), (10.0, 0.0), (10.0, 10.0), (0.0, 10.0))
        line = Line(text="SOAK", box=box, polygon=polygon, confidence=1.0, char_confidences=[1.0] * 4)
        return PageText(lines=[line])

    def close(self) -> None:
        pass


def instant_engine() -> _InstantEngine:
    return _InstantEngine()


def _child(config_path: Path, engine: str) -> None:
    """The daemon process: runs until SIGTERM (or until it is killed)."""
    import functools

    from appliance.config import load_config
    from appliance.daemon import Daemon
    from appliance.engines.factory import build_engine
    from appliance.logging_setup import setup_logging

    setup_logging("WARNING")
    config = load_config(config_path)
    factory: Any = instant_engine if engine == "fake" else functools.partial(build_engine, config.engine)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    Daemon(config, factory).run(stop)


def _png(index: int) -> bytes:
    buffer = io.BytesIO()
    rng = np.random.default_rng(index)
    Image.fromarray(rng.integers(0, 256, size=(40, 60, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _start(config: Path, engine: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.soak_intake", "--child", str(config), "--engine", engine],
            stdout=handle,
            stderr=handle,
        )


def _accounted(root: Path, names: list[str]) -> tuple[dict[str, int], set[str]]:
    results: dict[str, int] = {}
    for path in (root / "out").glob("*.json"):
        original = path.name.split(".png")[0] + ".png"
        results[original] = results.get(original, 0) + 1
    failed = {path.name for path in (root / "failed").glob("*.png")}
    return results, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--engine", choices=["fake", "real"], default="fake")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.engine)
        return 0

    random.seed(args.seed)
    root = Path(tempfile.mkdtemp(prefix="ocr-soak-"))
    config = root / "config.yaml"
    config.write_text(
        "paths: {state_dir: state}\n"
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
        "intake: {settle_seconds: 0.5, rescan_seconds: 5.0, min_free_mb: 0.0}\n"
        "jobs: {workers: 2, max_attempts: 50}\n",
        encoding="utf-8",
    )
    (root / "in").mkdir()
    log = root / "daemon.log"
    names = [f"doc-{index:04d}.png" for index in range(args.files)]
    started = time.monotonic()
    daemon = _start(config, args.engine, log)
    kills = 0
    per_burst = max(1, len(names) // args.bursts)
    kill_points = set(random.sample(range(args.bursts * 4), k=min(args.kills, args.bursts * 4)))
    step = 0
    for burst_start in range(0, len(names), per_burst):
        for offset, name in enumerate(names[burst_start : burst_start + per_burst]):
            data = _png(burst_start + offset)
            if offset % 2:
                temporary = root / "in" / f"{name}.part"
                temporary.write_bytes(data)
                temporary.rename(root / "in" / name)
            else:
                (root / "in" / name).write_bytes(data)
        for _ in range(4):  # four chances per burst to kill the daemon
            time.sleep(random.uniform(0.1, 0.8))
            if step in kill_points:
                daemon.send_signal(signal.SIGKILL)
                daemon.wait()
                kills += 1
                time.sleep(random.uniform(0.0, 0.3))
                daemon = _start(config, args.engine, log)
            step += 1
    while kills < args.kills:  # kills not yet spent while files were arriving
        time.sleep(random.uniform(0.5, 1.5))
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        kills += 1
        daemon = _start(config, args.engine, log)

    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        results, failed = _accounted(root, names)
        if all(name in results or name in failed for name in names):
            break
        time.sleep(0.5)
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)
    wall = time.monotonic() - started

    results, failed = _accounted(root, names)
    lost = [name for name in names if name not in results and name not in failed]
    twice = [name for name, count in results.items() if count > 1]
    with sqlite3.connect(root / "state" / "journal.sqlite3") as journal:
        rows = journal.execute("SELECT state, attempts FROM jobs").fetchall()
    reread = sum(1 for _, attempts in rows if attempts > 1)
    report = {
        "files_in": len(names),
        "results_out": sum(results.values()),
        "failed": len(failed),
        "lost": len(lost),
        "results_issued_twice": len(twice),
        "jobs_started_more_than_once": reread,
        "journal_jobs": len(rows),
        "kills": kills,
        "wall_seconds": round(wall, 1),
        "scratch": str(root),
    }
    print(json.dumps(report, indent=1))
    if lost:
        print("lost:", ", ".join(lost[:20]), file=sys.stderr)
    if twice:
        print("twice:", ", ".join(twice[:20]), file=sys.stderr)
    return 1 if lost or twice else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
