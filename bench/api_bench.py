"""Control API latency: GetStatus p50/p99 with N concurrent callers while documents are read.

Starts a real daemon (fake instant engine, so the figures are the API's and not OCR's) and its
API server on a unix socket, drops documents into the hot folder, and fires `--calls` GetStatus
calls from `--concurrency` threads, each with its own channel. Prints one line of figures.

    python -m bench.api_bench [--calls 2000] [--concurrency 200] [--documents 20]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from PIL import Image

from appliance.api.client import Client
from appliance.api.server import ApiServer
from appliance.config import ApiConfig, AppConfig, HotFolderConfig, IntakeConfig, PathsConfig, RepairConfig
from appliance.control import Control
from appliance.daemon import Daemon
from tests.fakes import engines as fakes


def _png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (640, 400), (shade, shade, shade)).save(buffer, format="PNG")
    return buffer.getvalue()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--documents", type=int, default=20)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="api-bench-"))
    try:
        folder = HotFolderConfig(
            path=root / "in",
            output_dir=root / "out",
            archive_dir=root / "archive",
            failed_dir=root / "failed",
        )
        config = AppConfig(
            paths=PathsConfig(state_dir=root / "state"),
            hot_folders=(folder,),
            intake=IntakeConfig(settle_seconds=0.2, min_free_mb=0.0),
            repair=RepairConfig(field_profile="none"),
            api=ApiConfig(socket=root / "api.sock"),
        )
        daemon = Daemon(config, fakes.fixed_text_engine)
        daemon.start()
        stop = threading.Event()
        thread = threading.Thread(target=daemon.run, args=(stop,))
        thread.start()
        api = ApiServer(Control(daemon), config.api)
        api.start()
        try:
            for index in range(args.documents):
                staged = root / f".doc{index}.png"
                staged.write_bytes(_png(index * 7 % 256))
                staged.rename(folder.path / f"doc{index}.png")
            clients = [Client(config.api.socket, timeout=30) for _ in range(args.concurrency)]
            for client in clients:
                client.status()  # connect first: the figures are calls, not connection set-up

            def one(index: int) -> float:
                started = time.perf_counter()
                clients[index % len(clients)].status()
                return time.perf_counter() - started

            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                latencies = list(pool.map(one, range(args.calls)))
            elapsed = time.perf_counter() - started
            finished = sum(clients[0].status().queue.get(s, 0) for s in ("done", "review", "failed"))
            for client in clients:
                client.close()
        finally:
            api.stop()
            stop.set()
            thread.join(timeout=60)
        print(
            f"GetStatus: {args.calls} calls from {args.concurrency} concurrent callers, "
            f"{args.documents} documents dropped ({finished} finished meanwhile): "
            f"p50 {_percentile(latencies, 0.5) * 1000:.1f} ms, "
            f"p99 {_percentile(latencies, 0.99) * 1000:.1f} ms, "
            f"mean {statistics.fmean(latencies) * 1000:.1f} ms, {args.calls / elapsed:.0f} calls/s"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
