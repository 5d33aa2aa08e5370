"""A page's time on the host, with the models' own run time taken out: ms a page by stage, and where it goes.

Usage: python -m bench.host_stages [--variant SPEC] [--limit N] [--runs N] [--profile N] [--dump OUT]
       [--formats json,text,...] DIR [DIR ...]

Reads each folder's images through the whole pipeline (DocumentProcessor.process, as
bench.ocr_bench builds it: the config as it is, or bench.ocr_bench's `--variant` spec) and times
every onnxruntime `InferenceSession.run` apart, by the role its output's shape gives away (a
detector's map has four axes, the orientation classifier two classes, the rest is recognition).
Prints per folder the mean ms a page: wall, inside session.run, host (the difference), and each
stage's host part (the stage's time less its sessions' runs; "untimed" is what no stage timed,
line crops among it). `--runs N` reads the pages N times and keeps each page's least of each figure;
`--profile N` also prints cProfile's N functions of most own time over the last run, session runs
included (read them off as `run` of onnxruntime's session); `--dump OUT` writes every page's
lines (text, box, polygon, confidences, words, unrounded) as JSON, to check that a change keeps
the output identical. `--formats` also times the rendering of each named output format of each
page's document (`out:FORMAT`, all on the host; the JSON's includes its schema check), the work a
worker does after the read and before it files the result; `--review` keeps every page for a
review folder as the daemon does (`host:keep`) and makes their PNGs as a review would
(`out:review`). Measure with one line thread
(`line_parallelism=1`, as on a GPU) so that session runs do not overlap and the host figure is the
page's wall time less theirs.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import pstats
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import onnxruntime as ort

from appliance.config import AppConfig
from appliance.outputs.writer import render_formats
from appliance.pipeline.page_images import PageImages
from appliance.pipeline.process import DocumentProcessor

_SUFFIXES = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".pdf")


class SessionClock:
    """Wall ms spent in InferenceSession.run since the last `take`, by model role."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms: dict[str, float] = {}

    def add(self, role: str, ms: float) -> None:
        with self._lock:
            self._ms[role] = self._ms.get(role, 0.0) + ms

    def take(self) -> dict[str, float]:
        with self._lock:
            taken, self._ms = self._ms, {}
        return taken


def role_of(outputs: list[Any]) -> str:
    """The role of a run by its first output: a (N, 1, H, W) map is det, two classes a row cls, else rec."""
    shape: tuple[int, ...] = tuple(getattr(outputs[0], "shape", ())) if outputs else ()
    if len(shape) == 4:
        return "det"
    if len(shape) == 2 and shape[-1] == 2:
        return "cls"
    return "rec"


@contextmanager
def timed_sessions(clock: SessionClock) -> Iterator[None]:
    """Every InferenceSession.run of the process timed into `clock` while the context lasts."""
    original: Callable[..., Any] = ort.InferenceSession.run

    def run(session: ort.InferenceSession, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        outputs = original(session, *args, **kwargs)
        clock.add(role_of(outputs), (time.perf_counter() - started) * 1000)
        return outputs

    ort.InferenceSession.run = run
    try:
        yield
    finally:
        ort.InferenceSession.run = original


def images_of(folder: Path, limit: int | None) -> list[Path]:
    """The folder's page images (those of its images/ folder where it has one), sorted, at most `limit`."""
    images = folder / "images" if (folder / "images").is_dir() else folder
    return sorted(path for path in images.iterdir() if path.suffix.lower() in _SUFFIXES)[:limit]


def build_processor(spec: str | None) -> DocumentProcessor:
    """The pipeline bench.ocr_bench runs for a variant (None: the default config)."""
    from bench.ocr_bench import build_processor as bench_processor

    return bench_processor(AppConfig(), spec)[1]


def page_figures(
    processor: DocumentProcessor, path: Path, clock: SessionClock, review: bool = False
) -> tuple[dict[str, float], Any]:
    """One read of `path`: wall, session and host ms, each stage's host ms; and the document read.

    With `review`, the pages are kept for a review folder as the daemon keeps them (`host:keep`,
    inside the wall time) and their PNGs made as a review would ask for them (`out:review`).
    """
    clock.take()
    kept = PageImages(pdf=False, review=review)
    keep_ms = 0.0

    def keep(raster: Any, media_type: str) -> None:
        nonlocal keep_ms
        started = time.perf_counter()
        kept.keep(raster, media_type)
        keep_ms += (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    with kept:
        document = processor.process(path, on_raster=keep if review else None)
        wall = (time.perf_counter() - started) * 1000
        sessions = clock.take()
        started = time.perf_counter()
        pngs = sum(len(png) for _index, png in kept.review_pngs())
        review_ms = (time.perf_counter() - started) * 1000
    stages: dict[str, float] = {}
    for page in document.pages:
        for stage, ms in page.timings_ms.items():
            stages[stage] = stages.get(stage, 0.0) + ms
    session_ms = sum(sessions.values())
    figures = {"wall": wall, "session": session_ms, "host": wall - session_ms}
    for stage, ms in stages.items():
        # The det, cls and rec stages are named as the roles of the sessions that run in them.
        figures[f"host:{stage}"] = ms - sessions.get(stage, 0.0)
    figures["host:untimed"] = wall - sum(stages.values()) - document.timings_ms.get("repair", 0.0)
    figures["host:repair"] = document.timings_ms.get("repair", 0.0)
    if review:
        figures["host:keep"] = keep_ms
        figures["host:untimed"] -= keep_ms
        figures["out:review"] = review_ms
        figures["review_png_kb"] = pngs / 1000
    return figures, document


def output_figures(document: Any, path: Path, formats: list[str]) -> dict[str, float]:
    """The ms to render each output format of a document read from `path` (the PDF from the source)."""
    figures = {}
    for fmt in formats:
        started = time.perf_counter()
        render_formats(document, [fmt], source_path=path)
        figures[f"out:{fmt}"] = (time.perf_counter() - started) * 1000
    return figures


def page_lines(document: Any) -> list[list[dict[str, Any]]]:
    """Every page's lines as plain values, unrounded: what an identity check compares."""
    return [[dataclasses.asdict(line) for line in page.lines] for page in document.pages]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--variant", help="bench.ocr_bench's variant spec; none: the default config")
    parser.add_argument("--limit", type=int, help="pages of each folder")
    parser.add_argument("--runs", type=int, default=1, help="reads of each page; each figure's least is kept")
    parser.add_argument("--profile", type=int, default=0, help="cProfile's N functions of most own time")
    parser.add_argument("--dump", type=Path, help="write every page's lines here as JSON")
    parser.add_argument("--review", action="store_true", help="keep the pages for review and time it")
    parser.add_argument(
        "--formats", default="", help="comma-separated output formats to time as well (json,text,pdf,...)"
    )
    args = parser.parse_args()
    formats = [fmt for fmt in args.formats.split(",") if fmt]
    clock = SessionClock()
    processor = build_processor(args.variant)
    folders = {folder: images_of(folder, args.limit) for folder in args.folders}
    profiler = cProfile.Profile()
    dump: dict[str, Any] = {}
    with timed_sessions(clock):
        processor.process(next(iter(folders.values()))[0])  # untimed, as the OCR benchmark does
        for folder, paths in folders.items():
            best: dict[Path, dict[str, float]] = {}
            for run in range(args.runs):
                for path in paths:
                    if args.profile and run == args.runs - 1:
                        profiler.enable()
                    figures, document = page_figures(processor, path, clock, args.review)
                    figures.update(output_figures(document, path, formats))
                    profiler.disable()
                    # Each figure's least over the runs: the host's share is a small difference
                    # of two large times, and the least is the one other work disturbed least.
                    kept = best.setdefault(path, figures)
                    for key, ms in figures.items():
                        kept[key] = min(kept.get(key, ms), ms)
                    dump[f"{folder.name}/{path.name}"] = page_lines(document)
            keys = sorted({key for figures in best.values() for key in figures}, key=_order)
            means = {key: round(statistics.fmean(f.get(key, 0.0) for f in best.values()), 1) for key in keys}
            print(json.dumps({"folder": folder.name, "pages": len(paths), "mean_ms": means}), flush=True)
    if args.dump:
        args.dump.write_text(json.dumps(dump, sort_keys=True))
    if args.profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


def _order(key: str) -> tuple[int, str]:
    return (0 if ":" not in key else 2 if key.startswith("out:") else 1, key)


if __name__ == "__main__":
    main()
