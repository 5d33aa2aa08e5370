"""The ppocr_onnx engine on the CUDA provider: load and warm-up time, pages/s, ms by stage, peak GPU memory.

Usage: python -m bench.onnx_gpu_shapes [--variant SPEC] [--workers N] [--threads N] [--full]
       [--session-server [--runners N]] DIR [DIR ...]

Reads every image of the folders with `--workers` processes, each loading its own engine as the
daemon's `jobs.workers` processes do, taking pages from one queue once all have loaded (with
`--threads N`, N pages at a time in each process, sharing its engine: not what the daemon does, a
measure of pages in flight in one process; with `--session-server`, the workers' models run in one
session server process on `--runners` threads, as the daemon runs them with jobs.session_server);
prints one JSON line: load and warm-up ms, pages/s over
all workers, mean ms of each stage, and the peak of nvidia-smi's memory.used for the card, sampled
every 0.2 s from before the first load to the end (the processes' CUDA contexts included). Without
`--full` a worker runs the engine alone on decoded images; with it, the whole pipeline a job runs
(DocumentProcessor: rasterize, preprocess, engine, layout). `--variant` is bench.ocr_bench's spec
(default `fp32+provider=cuda`); `--widths 320,640` sets engine.ppocr_onnx.fixed_line_widths
and `--det-shares 0.5,1.0` fixed_detector_shares;
`--cuda-option` sets a CUDA provider option for every session (`cudnn_conv_use_max_workspace=0`);
`--no-best-class` runs the recogniser without the TopK of best_class.py; `--cuda-graph` also times
one recogniser shape with and without onnxruntime's CUDA graph, afterwards, in this process.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine_options import add_engine_options, engine_settings
from bench.gpu_memory import MemorySampler, gpu_memory_mib

_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".pdf")


def time_cuda_graph(path: Path, shape: tuple[int, ...], runs: int = 50) -> dict[str, float]:
    """Mean ms of one fixed-shape run through an IO binding, with and without the CUDA graph.

    Each session has an arena of its own: a captured graph replays fixed device addresses, which a
    shared arena would hand to other sessions between replays.
    """
    import onnxruntime as ort

    from appliance.engines.ppocr_onnx.sessions import create_session

    result = {}
    for graph in ("0", "1"):
        session, _ = create_session(path, "cuda", cuda_options={"enable_cuda_graph": graph})
        name = session.get_inputs()[0].name
        host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        device_input = ort.OrtValue.ortvalue_from_numpy(host, "cuda", 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input(name, device_input)
        binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
        session.run_with_iobinding(binding)  # the first run captures the graph
        started = time.perf_counter()
        for _ in range(runs):
            device_input.update_inplace(host)
            session.run_with_iobinding(binding)
            binding.copy_outputs_to_cpu()
        result[f"cuda_graph_{graph}_ms"] = (time.perf_counter() - started) * 1000 / runs
    return result


def _engine_config(args: argparse.Namespace) -> Any:
    from appliance.config import AppConfig
    from appliance.variants import variant_engine_config

    config = variant_engine_config(AppConfig().engine, args.variant)
    update = engine_settings(args)
    if args.socket:
        update["session_server"] = Path(args.socket)
    if update:
        config = config.model_copy(update={"ppocr_onnx": config.ppocr_onnx.model_copy(update=update)})
    return config


def _without_best_class(model: bytes | Path) -> bytes:
    return model if isinstance(model, bytes) else model.read_bytes()


def _worker(args: argparse.Namespace, pages: Any, results: Any, ready: Any, go: Any) -> None:
    """One worker process: load the engine, say so, wait for the others, read pages until none is left."""
    import cv2

    from appliance.engines.factory import build_engine
    from appliance.engines.ppocr_onnx import engine as engine_module
    from appliance.engines.ppocr_onnx import sessions

    for item in args.cuda_option:
        name, value = item.split("=", 1)
        sessions.CUDA_OPTIONS[name] = value  # every session this process opens takes it
    if args.no_best_class:
        # The graph as loaded, without the TopK: every class's probability comes back again.
        engine_module.append_best_class = _without_best_class  # type: ignore[attr-defined]
    if args.cv_threads:
        cv2.setNumThreads(args.cv_threads)
    started = time.perf_counter()
    engine = build_engine(_engine_config(args))
    load_ms = (time.perf_counter() - started) * 1000
    processor = None
    if args.full:
        from appliance.config import AppConfig
        from appliance.pipeline.process import DocumentProcessor
        from appliance.pipeline.rasterize import Rasterizer
        from appliance.variants import variant_rasterize_config

        processor = DocumentProcessor(
            engine, Rasterizer(variant_rasterize_config(AppConfig().rasterize, args.variant))
        )
    first = Path(args.first)

    def read(path: Path) -> dict[str, float]:
        if processor is not None:
            stages: dict[str, float] = {}
            for page in processor.process(path).pages:
                for stage, ms in page.timings_ms.items():
                    stages[stage] = stages.get(stage, 0.0) + ms
            return stages
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise SystemExit(f"OpenCV cannot read {path}")
        return dict(engine.recognize(image).timings_ms)

    read(first)  # untimed, as the OCR benchmark does
    ready.put((load_ms, engine.describe(), str(getattr(engine, "model_paths", {}).get("rec", ""))))
    go.wait()

    def drain() -> list[dict[str, float]]:
        # A blocking get up to the end marker: multiprocessing's get_nowait raises Empty whenever
        # another reader holds the queue's lock at that instant, which ended workers early.
        read_pages: list[dict[str, float]] = []
        while (path := pages.get()) is not None:
            read_pages.append(read(Path(path)))
        return read_pages

    # --threads: pages in flight in this one process, sharing its engine and CUDA context (a
    # session may be run from several threads), as the daemon's worker reads `jobs.per_worker` jobs.
    with ThreadPoolExecutor(args.threads) as pool:
        per_thread = list(pool.map(lambda _: drain(), range(args.threads)))
    stages: dict[str, list[float]] = {}
    for page_stages in (page for pages_read in per_thread for page in pages_read):
        for stage, ms in page_stages.items():
            stages.setdefault(stage, []).append(ms)
    results.put((sum(map(len, per_thread)), time.perf_counter(), stages))


def _collect(answers: Any, workers: list[Any]) -> list[Any]:
    """One answer from each worker; exits (ending the others) as soon as one has died without answering.

    A worker that fails (the arena's out-of-memory error at warm-up) would otherwise leave this
    process waiting for ever.
    """
    received: list[Any] = []
    while len(received) < len(workers):
        try:
            received.append(answers.get(timeout=1.0))
        except queue.Empty:
            failed = [worker.exitcode for worker in workers if worker.exitcode not in (None, 0)]
            if failed:
                for worker in workers:
                    worker.kill()
                raise SystemExit(
                    f"a worker process failed with exit code {failed[0]}; its error is above"
                ) from None
    return received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--variant", default="fp32+provider=cuda")
    add_engine_options(parser)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="pages in flight in each worker process")
    parser.add_argument("--full", action="store_true", help="the whole pipeline, not the engine alone")
    parser.add_argument("--limit", type=int, help="pages of each folder")
    parser.add_argument("--cuda-option", action="append", default=[], help="CUDA provider KEY=VALUE")
    parser.add_argument("--no-best-class", action="store_true")
    parser.add_argument("--cuda-graph", action="store_true")
    parser.add_argument("--session-server", action="store_true", help="the models in one server process")
    parser.add_argument("--runners", type=int, default=1, help="the session server's run threads")
    parser.add_argument("--cv-threads", type=int, default=0, help="cv2.setNumThreads in each worker")
    args = parser.parse_args()
    args.socket = None
    paths: list[Path] = []
    for folder in args.folders:
        images = folder / "images" if (folder / "images").is_dir() else folder
        paths += sorted(p for p in images.iterdir() if p.suffix.lower() in _SUFFIXES)[: args.limit]
    args.first = str(paths[0])
    context = mp.get_context("spawn")  # no CUDA state or onnxruntime threads inherited
    pages, results, ready, go = context.Queue(), context.Queue(), context.Queue(), context.Event()
    for path in paths:
        pages.put(str(path))
    for _ in range(args.workers * args.threads):
        pages.put(None)  # one end marker for each reading thread
    before = gpu_memory_mib()
    sampler = MemorySampler()
    sampler.start()
    server = None
    if args.session_server:
        from appliance.engines.ppocr_onnx.session_server import SessionServerProcess

        args.socket = str(Path(tempfile.mkdtemp(prefix="ocr-bench-")) / "sessions.sock")
        server = SessionServerProcess(Path(args.socket), runners=args.runners)
        server.start()
    workers = [
        context.Process(target=_worker, args=(args, pages, results, ready, go)) for _ in range(args.workers)
    ]
    try:
        for worker in workers:
            worker.start()
        loads = _collect(ready, workers)
        loaded_mib = gpu_memory_mib()
        started = time.perf_counter()
        go.set()
        done = _collect(results, workers)
        elapsed = max(finished for _, finished, _ in done) - started
        for worker in workers:
            worker.join()
    finally:
        if server is not None:
            server.stop()  # also when a worker failed: it would hold this command's output open
    peak = sampler.stop()
    stages: dict[str, list[float]] = {}
    for _, _, worker_stages in done:
        for stage, values in worker_stages.items():
            stages.setdefault(stage, []).extend(values)
    count = sum(n for n, _, _ in done)
    describe = loads[0][1]
    report: dict[str, Any] = {
        "variant": args.variant,
        "widths": args.widths,
        "det_shares": args.det_shares,
        "cublas_workspace": args.cublas_workspace,
        "cuda_options": args.cuda_option,
        "no_best_class": args.no_best_class,
        "full": args.full,
        "workers": args.workers,
        "threads": args.threads,
        "session_server_runners": args.runners if args.session_server else None,
        "cv_threads": args.cv_threads or None,
        "pages": count,
        "pages_by_worker": [n for n, _, _ in done],
        "load_ms": [round(ms) for ms, _, _ in loads],
        "warm_up_ms": describe.get("warm_up_ms"),
        "shared_cuda_arena": describe.get("shared_cuda_arena"),
        "providers": sorted({model.get("provider") for model in describe.get("models", [])} - {None}),
        "pages_per_s": round(count / elapsed, 2),
        "stage_mean_ms": {stage: round(statistics.fmean(v), 1) for stage, v in stages.items()},
        "gpu_mib_before": before,
        "gpu_mib_loaded": loaded_mib,
        "gpu_mib_peak": peak,
    }
    if args.cuda_graph:
        report.update(time_cuda_graph(Path(loads[0][2]), (8, 3, 48, 640)))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
