"""Benchmark the appliance's OCR pipeline against Tesseract 5 on evaluation sets with ground truth.

Usage: python -m bench.ocr_bench [--config FILE] [--limit N] [--json OUT] [--no-tesseract]
                                 [--tesseract-lang LANG] [--variant SPEC ...] [--peer NAME ...]
                                 [--no-peers] DATASET_DIR [...]

`--variant` runs the appliance several times side by side, page by page in turn, so that the
machine's load falls on all of them alike: SPEC is `int8` or `fp32` (every model), or a list
such as `det=fp32,cls=int8,rec=int8`, optionally with `+threads=1`, `+det_limit=960` or any other
engine.ppocr_onnx key (`+rec_min_width=160`, `+fold_affine=false`, `+models=ppocrv5_mobile`) or
rasterize key (`+jpeg_draft_megapixels=0`); `+second_reader=ppocrv6_small@0.9` adds a second ONNX
recogniser that reads again, through the line cascade, the lines read below 0.9 (appliance/variants.py).

Memory: each variant is also loaded in a child process of its own, which reads the first
`--rss-pages` pages of every set; its peak resident set size (VmHWM) after loading and after
those pages is printed. A child per variant, because a process's high-water mark is one for
all the variants it holds (and the first would pay for the shared libraries alone).

Each DATASET_DIR holds images/, gt/*.json (`image`, `lines` with `text` and `box`) and
scoring.json (`case_insensitive`). The data is read in place and never copied.

Every page goes through our full pipeline (engine from the configuration, rasterizer, engine,
layout) via `DocumentProcessor.process`, and through `tesseract IMG stdout -l LANG tsv` with
OMP_THREAD_LIMIT=1 (Tesseract's fastest setting on this machine, with byte-identical output).
Scoring is described in bench/scoring.py; the primary CER orders GT and hypothesis lines by the
same geometric rule; every engine is scored with and without spaces. Peers (bench/peers.py:
faster-paddle's PP-OCRv6 tiny and small) run on the same pages in the same loop. Speed: wall
time per page (ours: `process()` including rasterising; the model load and one warm-up page are
not counted; Tesseract: the whole subprocess; a peer: its call on the file's bytes), and our time
per stage from the page's `timings_ms`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import io
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from appliance.config import AppConfig, load_config
from appliance.document import Box
from appliance.engines.factory import build_engine
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from appliance.variants import variant_cascade_config, variant_engine_config, variant_rasterize_config
from bench.page_bootstrap import AgainstBest, against_best_other
from bench.peers import PEERS, Reader, build_peer
from bench.scoring import PageScore, SetScore, TextLine, micro_average, score_page

OURS = "appliance"
TESSERACT = "tesseract"
STAGES = ("rasterize", "preprocess", "det", "cls", "rec", "rec2", "layout")


@dataclass(frozen=True)
class GtPage:
    """One evaluation page: its image and its GT lines in annotation order."""

    name: str
    image: Path
    lines: list[TextLine]


@dataclass
class EngineRun:
    """Per-page results of one engine on one dataset."""

    engine: str
    seconds: list[float] = field(default_factory=list)
    scores: list[PageScore] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)
    page_names: list[str] = field(default_factory=list)


def load_dataset(folder: Path, limit: int | None) -> tuple[list[GtPage], bool]:
    """The pages of a dataset (sorted by GT file name) and whether to score case-insensitively."""
    scoring = json.loads((folder / "scoring.json").read_text(encoding="utf-8"))
    pages: list[GtPage] = []
    for gt_path in sorted((folder / "gt").glob("*.json")):
        gt = json.loads(gt_path.read_text(encoding="utf-8"))
        lines = [TextLine(item["text"], _box(item["box"])) for item in gt["lines"]]
        pages.append(GtPage(gt_path.stem, folder / gt["image"], lines))
    if limit is not None:
        pages = pages[:limit]
    return pages, bool(scoring.get("case_insensitive", False))


def _box(values: list[float]) -> Box:
    x0, y0, x1, y1 = (float(value) for value in values)
    return (x0, y0, x1, y1)


def tesseract_lang(folder: Path, override: str | None) -> str:
    if override:
        return override
    return "chi_sim" if "zh" in folder.name.lower() else "eng"


def parse_tesseract_tsv(tsv: str) -> list[TextLine]:
    """Lines from Tesseract's TSV: level-4 rows give line boxes, level-5 rows their words."""
    boxes: dict[tuple[str, ...], Box] = {}
    words: dict[tuple[str, ...], list[str]] = {}
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        key = (row["page_num"], row["block_num"], row["par_num"], row["line_num"])
        left, top = float(row["left"]), float(row["top"])
        box = (left, top, left + float(row["width"]), top + float(row["height"]))
        if row["level"] == "4":
            boxes[key] = box
        elif row["level"] == "5" and (row.get("text") or "").strip():
            words.setdefault(key, []).append(row["text"])
    return [TextLine(" ".join(words[key]), boxes[key]) for key in boxes if key in words]


def run_tesseract(image: Path, lang: str) -> list[TextLine]:
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    result = subprocess.run(
        ["tesseract", str(image), "stdout", "-l", lang, "tsv"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return parse_tesseract_tsv(result.stdout)


def run_ours(processor: DocumentProcessor, image: Path) -> tuple[list[TextLine], dict[str, float]]:
    document = processor.process(image)
    lines: list[TextLine] = []
    stages: dict[str, float] = {}
    for page in document.pages:
        lines.extend(TextLine(line.text, line.box) for line in page.lines)
        for stage, value in page.timings_ms.items():
            stages[stage] = stages.get(stage, 0.0) + value
    return lines, stages


def build_processor(config: AppConfig, spec: str | None) -> tuple[Any, DocumentProcessor]:
    """The engine and processor of a variant (None: the config as it is), with its line cascade."""
    if spec is None:
        engine_config, rasterize_config, cascade = config.engine, config.rasterize, None
    else:
        engine_config = variant_engine_config(config.engine, spec)
        rasterize_config = variant_rasterize_config(config.rasterize, spec)
        cascade = variant_cascade_config(spec)
    engine = build_engine(engine_config)
    return engine, DocumentProcessor(engine, Rasterizer(rasterize_config), cascade=cascade)


def _peak_rss_bytes() -> int:
    """The peak resident set size of the calling process (VmHWM), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def variant_rss(config: AppConfig, spec: str | None, images: list[Path]) -> tuple[int, int]:
    """Run in a fresh child: peak RSS after loading the variant, and after reading `images`."""
    engine, processor = build_processor(config, spec)
    loaded = _peak_rss_bytes()
    for image in images:
        processor.process(image)
    engine.close()
    # The kernel updates its high-water mark lazily (VmHWM shows max(stored mark, RSS now)), so a
    # reading taken while memory was briefly higher can exceed a later one: a peak never falls.
    return loaded, max(loaded, _peak_rss_bytes())


def measure_rss(config: AppConfig, specs: list[str | None], images: list[Path]) -> dict[str, tuple[int, int]]:
    """Each variant's peak RSS in a child process of its own (spawned: nothing inherited)."""
    peaks: dict[str, tuple[int, int]] = {}
    for spec in specs:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=get_context("spawn")) as child:
            peaks[_name(spec)] = child.submit(variant_rss, config, spec, images).result()
    return peaks


def _name(spec: str | None) -> str:
    return OURS if spec is None else f"{OURS}:{spec}"


def _p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def summarize(run: EngineRun) -> dict[str, Any]:
    score: SetScore = micro_average(run.scores)
    total = sum(run.seconds)
    return {
        "engine": run.engine,
        **asdict(score),
        "pages_per_s": len(run.seconds) / total if total else 0.0,
        "s_per_page_median": statistics.median(run.seconds) if run.seconds else 0.0,
        "s_per_page_p90": _p90(run.seconds),
        "stage_ms_median": {stage: statistics.median(v) for stage, v in run.stage_ms.items() if v},
        # Means add up to the mean page time, which pages/s is the inverse of; medians do not.
        "stage_ms_mean": {stage: statistics.fmean(v) for stage, v in run.stage_ms.items() if v},
    }


def print_against(rows: list[AgainstBest]) -> None:
    for row in rows:
        for label, difference in row.differences.items():
            described = difference.described(b="ours")
            print(f"{row.engine} - {row.against} (the lowest CER of the others), {label}: {described}")


def print_rss(peaks: dict[str, tuple[int, int]], pages: int) -> None:
    print(f"\n== peak RSS (MiB), each variant alone in a child process, {pages} page(s) read ==")
    width = max([10, *(len(name) for name in peaks)])
    print(f"{'engine':<{width}} {'loaded':>8} {'after pages':>11}")
    for name, (loaded, peak) in peaks.items():
        print(f"{name:<{width}} {loaded / 2**20:>8.0f} {peak / 2**20:>11.0f}")


def print_tables(dataset: str, summaries: list[dict[str, Any]]) -> None:
    print(f"\n== {dataset} ==")
    width = max([10, *(len(s["engine"]) for s in summaries)])
    header = (
        f"{'engine':<{width}} {'pages':>5} {'pages/s':>8} {'s/page med':>10} {'s/page p90':>10} "
        f"{'CER geo':>8} {'CER spaced':>10} {'CER annot':>9} {'bag-of-chars':>12}"
    )
    print(header)
    print("-" * len(header))
    for s in summaries:
        print(
            f"{s['engine']:<{width}} {s['pages']:>5} {s['pages_per_s']:>8.3f} "
            f"{s['s_per_page_median']:>10.3f} {s['s_per_page_p90']:>10.3f} {s['cer_geo']:>8.2%} "
            f"{s['cer_geo_spaced']:>10.2%} {s['cer_annotation']:>9.2%} {s['bag_error']:>12.2%}"
        )
    print("CER geo = primary (GT and output both in geometric row order), whitespace-free; CER spaced =")
    print("the same with spaces counted (whitespace runs as one space, lines joined by one); CER annot =")
    print("GT annotation order vs engine order; bag-of-chars = order-free lower bound. Micro-averaged.")
    for s in summaries:
        if s["stage_ms_median"]:
            stages = "  ".join(f"{k} {s['stage_ms_median'].get(k, 0.0):.0f}" for k in STAGES)
            print(f"{s['engine']} median ms/page by stage: {stages}")
            means = s["stage_ms_mean"]
            # What no stage timed (hashing the file, repair, the document record): the mean page
            # time that pages/s inverts, less the stage means.
            other = 1000.0 / s["pages_per_s"] - sum(means.values()) if s["pages_per_s"] else 0.0
            stages = "  ".join(f"{k} {means.get(k, 0.0):.0f}" for k in STAGES)
            print(f"{s['engine']} mean ms/page by stage: {stages}  untimed {other:.0f}")


def bench_dataset(
    folder: Path,
    processors: dict[str, DocumentProcessor],
    *,
    peers: dict[str, Reader] | None = None,
    limit: int | None,
    use_tesseract: bool,
    lang_override: str | None,
    verbose: bool,
) -> dict[str, Any]:
    pages, case_insensitive = load_dataset(folder, limit)
    ours_runs = {name: EngineRun(name, stage_ms={stage: [] for stage in STAGES}) for name in processors}
    tess = EngineRun(TESSERACT)
    peers = peers or {}
    peer_runs = {name: EngineRun(name) for name in peers}
    lang = tesseract_lang(folder, lang_override)
    if pages:
        for processor in processors.values():
            processor.process(pages[0].image)  # warm-up: first-run allocations are not page time
        for reader in peers.values():
            reader(pages[0].image)
    for index, page in enumerate(pages):
        # Variants take turns in a rotating order, so none always runs first after Tesseract.
        names = list(processors)
        names = names[index % len(names) :] + names[: index % len(names)]
        for name in names:
            ours = ours_runs[name]
            started = time.perf_counter()
            lines, stages = run_ours(processors[name], page.image)
            ours.seconds.append(time.perf_counter() - started)
            ours.scores.append(score_page(page.lines, lines, case_insensitive))
            ours.page_names.append(page.name)
            for stage in STAGES:
                ours.stage_ms[stage].append(stages.get(stage, 0.0))
        for name, reader in peers.items():
            started = time.perf_counter()
            peer_lines = reader(page.image)
            peer_runs[name].seconds.append(time.perf_counter() - started)
            peer_runs[name].scores.append(score_page(page.lines, peer_lines, case_insensitive))
            peer_runs[name].page_names.append(page.name)
        if use_tesseract:
            started = time.perf_counter()
            tess_lines = run_tesseract(page.image, lang)
            tess.seconds.append(time.perf_counter() - started)
            tess.scores.append(score_page(page.lines, tess_lines, case_insensitive))
            tess.page_names.append(page.name)
        if verbose:
            for ours in ours_runs.values():
                last = ours.scores[-1]
                print(
                    f"{folder.name}/{page.name} {ours.engine}: {ours.seconds[-1]:.2f}s "
                    f"geo {last.geo_errors}/{last.gt_chars}",
                    file=sys.stderr,
                )
    runs = [*ours_runs.values(), *peer_runs.values(), *([tess] if use_tesseract else [])]
    summaries = [summarize(run) for run in runs]
    print_tables(folder.name, summaries)
    against = against_best_other(
        {run.engine: run.scores for run in runs}, [run.engine for run in runs if run.engine.startswith(OURS)]
    )
    print_against(against)
    return {
        "dataset": folder.name,
        "case_insensitive": case_insensitive,
        "tesseract_lang": lang if use_tesseract else None,
        "summaries": summaries,
        "against_best_other": [asdict(row) for row in against],
        "pages": {
            run.engine: [
                {"page": name, "seconds": sec, **asdict(score)}
                for name, sec, score in zip(run.page_names, run.seconds, run.scores, strict=True)
            ]
            for run in runs
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.ocr_bench", description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path, help="dataset folders (images/, gt/, scoring.json)")
    parser.add_argument("--config", type=Path, help="appliance YAML config (default: built-in defaults)")
    parser.add_argument("--limit", type=int, help="only the first N pages of each set")
    parser.add_argument("--json", type=Path, dest="json_out", help="write all figures to this file")
    parser.add_argument("--no-tesseract", action="store_true", help="skip the Tesseract baseline")
    parser.add_argument("--tesseract-lang", help="Tesseract language for every set (default: by set name)")
    parser.add_argument("--verbose", action="store_true", help="print each page's figures to stderr")
    parser.add_argument(
        "--peer",
        action="append",
        choices=PEERS,
        help="another engine to run side by side (repeatable; default: every installed one)",
    )
    parser.add_argument("--no-peers", action="store_true", help="run no peer engine")
    parser.add_argument(
        "--rss-pages",
        type=int,
        default=3,
        help="pages of each set a variant's child process reads for its peak RSS (-1: no RSS run)",
    )
    parser.add_argument(
        "--variant", action="append", default=[], help="engine variant to run side by side (repeatable)"
    )
    args = parser.parse_args(argv)

    config = load_config(args.config) if args.config else AppConfig()
    specs: list[str | None] = list(args.variant) or [None]
    peaks: dict[str, tuple[int, int]] = {}
    if args.rss_pages >= 0:
        # Before the timed run, so that no child competes with it for the cores.
        rss_images = [
            page.image for folder in args.datasets for page in load_dataset(folder, args.rss_pages)[0]
        ]
        peaks = measure_rss(config, specs, rss_images)
        print_rss(peaks, len(rss_images))
    load_started = time.perf_counter()
    engines = {}
    processors = {}
    for spec in specs:
        engines[_name(spec)], processors[_name(spec)] = build_processor(config, spec)
    load_s = time.perf_counter() - load_started
    print(f"{len(engines)} engine(s) loaded in {load_s:.2f}s (not counted in page times)")
    peers: dict[str, Reader] = {}
    for peer in [] if args.no_peers else args.peer or list(PEERS):
        reader = build_peer(peer)
        if reader is None:
            print(f"peer {peer} is not installed (pip install faster-paddle); skipped")
        else:
            peers[peer] = reader
    results = [
        bench_dataset(
            folder,
            processors,
            peers=peers,
            limit=args.limit,
            use_tesseract=not args.no_tesseract,
            lang_override=args.tesseract_lang,
            verbose=args.verbose,
        )
        for folder in args.datasets
    ]
    for engine in engines.values():
        engine.close()
    if args.json_out:
        report = {
            "config": config.engine.model_dump(mode="json"),
            "engine_load_s": load_s,
            "cpu_count": os.cpu_count(),
            "peak_rss_bytes": {
                name: {"loaded": loaded, "after_pages": peak} for name, (loaded, peak) in peaks.items()
            },
            "rss_pages_per_set": args.rss_pages,
            "datasets": results,
        }
        args.json_out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
