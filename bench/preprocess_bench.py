"""Ablation of page preprocessing, on the evaluation sets and on damaged copies made on the fly.

Usage: python -m bench.preprocess_bench [--limit N] [--min-megapixels MP] [--workers N] [--threads N]
                                        [--json OUT] [--variants a,b] [--configs a,b]
                                        DATASET_DIR [DATASET_DIR ...]
       python -m bench.preprocess_bench --report OUT [OUT ...]   (tables from earlier --json files)

For every page of each set (read in place, never copied) the benchmark makes variants itself:
turned 90/180/270 degrees, skewed by +-3 and +-7 degrees (on white), with Gaussian and
salt-and-pepper noise, with heavy JPEG artefacts, and with black scanner edges. Each variant is
read through `DocumentProcessor` under several preprocessing configurations: all steps off
("none"), the defaults, the defaults less one on-by-default step, and the defaults plus one
off-by-default step. The result's boxes are in the variant's pixels; the benchmark maps them back through the
inverse of the damage it applied itself and scores them against the untouched ground truth with
bench/scoring.py (geometry-ordered, whitespace-free CER), so every cell is comparable with the
upright original.

Reading order (docs_zh): the GT line order is the PDF's own flow. Each read line is matched to
the GT line its box overlaps most; the normalised Kendall tau distance between the GT indices in
output order and in GT order (the share of line pairs in the wrong order) is given for the
pipeline's order (`layout.order_rows`), for plain top-to-bottom sorting by the line's top, and
for `group_rows` rows. The same is computed on the GT boxes alone (layout without OCR errors).

Orientation: for the turned copies, on how many pages the turns applied (ink step plus the
check after the first read) undo the damage exactly, how many engine reads a page took, and what
the check cost beyond the first read.

Time: the share of each page's time spent in preprocessing (the `preprocess` stage, the extra
orientation reads included) out of the whole page.

`--json OUT` writes one JSON line per page read as it finishes, so a run stopped at a time limit
keeps what it did; `--report` prints the tables from one or more such files (runs over parts of
a set are merged).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from appliance.config import AppConfig, PreprocessConfig
from appliance.document import Box, Line
from appliance.engines.factory import build_engine
from appliance.pipeline.layout import group_rows, order_rows
from appliance.pipeline.preprocess.deskew import rotate_by, rotate_quarter
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from bench.ocr_bench import GtPage, load_dataset
from bench.scoring import PageScore, TextLine, micro_average, score_page

_OFF = PreprocessConfig(orientation=False, deskew=False, border_crop=False, seals=False)
_DEFAULT = PreprocessConfig()

CONFIGS: dict[str, PreprocessConfig] = {
    "none": _OFF,
    "default": _DEFAULT,
    "-orientation": _DEFAULT.model_copy(update={"orientation": False}),
    "-seals": _DEFAULT.model_copy(update={"seals": False}),
    "+deskew": _DEFAULT.model_copy(update={"deskew": True}),
    "+border_crop": _DEFAULT.model_copy(update={"border_crop": True}),
    "+denoise": _DEFAULT.model_copy(update={"denoise": True}),
    "+contrast": _DEFAULT.model_copy(update={"contrast": True}),
    "+binarize": _DEFAULT.model_copy(update={"binarize": True}),
    "+resize1600": _DEFAULT.model_copy(update={"resize_long_side": 1600}),
}

Damage = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _turn(turns: int) -> Damage:
    return lambda image: rotate_quarter(image, turns)


def _skew(angle: float) -> Damage:
    def apply(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        turned, matrix = rotate_by(image, angle, (255, 255, 255))
        return turned, np.vstack([matrix, [0.0, 0.0, 1.0]])

    return apply


def _noise(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    noisy = image.astype(np.float64) + rng.normal(0, 12, image.shape)
    speckle = rng.random(image.shape[:2])
    noisy[speckle < 0.005] = 0
    noisy[speckle > 0.995] = 255
    return np.clip(noisy, 0, 255).astype(np.uint8), np.eye(3)


def _jpeg(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 15])
    assert ok
    decoded: np.ndarray = cv2.imdecode(encoded, cv2.IMREAD_COLOR)  # type: ignore[assignment]
    return decoded, np.eye(3)


def _black_edges(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    height, width = image.shape[:2]
    pad = max(20, min(height, width) // 25)
    framed = cv2.copyMakeBorder(image, pad, pad // 2, pad // 2, pad, cv2.BORDER_CONSTANT, value=(15, 15, 15))
    return framed, np.array([[1.0, 0.0, pad // 2], [0.0, 1.0, pad], [0.0, 0.0, 1.0]])


VARIANTS: dict[str, Damage] = {
    "upright": lambda image: (image, np.eye(3)),
    "rot90": _turn(1),
    "rot180": _turn(2),
    "rot270": _turn(3),
    "skew+3": _skew(3.0),
    "skew-3": _skew(-3.0),
    "skew+7": _skew(7.0),
    "skew-7": _skew(-7.0),
    "noise": _noise,
    "jpeg15": _jpeg,
    "black_edges": _black_edges,
}


def _map_box(box: Box, inverse: np.ndarray) -> Box:
    x0, y0, x1, y1 = box
    corners = np.array([[x0, y0, 1], [x1, y0, 1], [x1, y1, 1], [x0, y1, 1]], dtype=np.float64) @ inverse.T
    return (
        float(corners[:, 0].min()),
        float(corners[:, 1].min()),
        float(corners[:, 0].max()),
        float(corners[:, 1].max()),
    )


def _outline_box(polygon: tuple[tuple[float, float], ...], box: Box, inverse: np.ndarray) -> Box:
    if len(polygon) < 3:
        return _map_box(box, inverse)
    points = np.array([[x, y, 1.0] for x, y in polygon]) @ inverse.T
    return (
        float(points[:, 0].min()),
        float(points[:, 1].min()),
        float(points[:, 0].max()),
        float(points[:, 1].max()),
    )


def _proxy(index: int, box: Box) -> Line:
    return Line(text=str(index), box=box, polygon=(), confidence=1.0, char_confidences=[])


def _overlap(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(0.0, width) * max(0.0, height)


def kendall_distance(sequence: list[int]) -> float:
    """Share of pairs out of order (0: same order as sorted, 1: reversed); ties count as in order."""
    pairs = wrong = 0
    for i in range(len(sequence)):
        for j in range(i + 1, len(sequence)):
            pairs += 1
            wrong += sequence[i] > sequence[j]
    return wrong / pairs if pairs else 0.0


def order_distances(gt: list[TextLine], boxes: list[Box]) -> dict[str, float]:
    """Kendall distance of three orderings of `boxes`, after matching each to a GT line."""
    matched: list[tuple[int, Box]] = []
    for box in boxes:
        overlaps = [_overlap(box, line.box) for line in gt]
        best = int(np.argmax(overlaps)) if overlaps else -1
        if best >= 0 and overlaps[best] > 0:
            matched.append((best, box))
    proxies = [_proxy(index, box) for index, (_, box) in enumerate(matched)]
    gt_index = [gt_line for gt_line, _ in matched]
    pipeline = [gt_index[int(line.text)] for row in order_rows(proxies) for line in row]
    rows = [gt_index[int(line.text)] for row in group_rows(proxies) for line in row]
    by_top = [
        gt_index[int(line.text)] for line in sorted(proxies, key=lambda item: (item.box[1], item.box[0]))
    ]
    return {
        "pipeline": kendall_distance(pipeline),
        "top_to_bottom": kendall_distance(by_top),
        "group_rows": kendall_distance(rows),
        "pairs": len(matched) * (len(matched) - 1) / 2,
    }


@dataclass(frozen=True)
class Job:
    dataset: str
    page: GtPage
    case_insensitive: bool
    variant: str
    config: str


_PROCESSORS: dict[str, DocumentProcessor] = {}


def _init_worker(threads: int) -> None:
    # OpenCV starts a thread per core in every process; with one worker per core they only fight.
    cv2.setNumThreads(max(1, threads))
    app = AppConfig()
    engine_config = app.engine.model_copy(
        update={"ppocr_onnx": app.engine.ppocr_onnx.model_copy(update={"intra_op_threads": threads})}
    )
    engine = build_engine(engine_config)
    for name, config in CONFIGS.items():
        _PROCESSORS[name] = DocumentProcessor(engine, Rasterizer(app.rasterize), preprocess=config)


def _run(job: Job) -> dict[str, Any]:
    original: np.ndarray = cv2.imread(str(job.page.image), cv2.IMREAD_COLOR)  # type: ignore[assignment]
    damaged, matrix = VARIANTS[job.variant](original)
    inverse = np.linalg.inv(matrix)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "page.png"
        buffer = io.BytesIO()
        Image.fromarray(damaged[:, :, ::-1]).save(buffer, format="PNG", compress_level=1)
        path.write_bytes(buffer.getvalue())
        started = time.perf_counter()
        document = _PROCESSORS[job.config].process(path)
        seconds = time.perf_counter() - started
    page = document.pages[0]
    # Outlines, not boxes, are mapped back: a box skewed and boxed again would grow by the line's
    # length times the angle and merge rows in the geometric ordering of the score.
    ordered_boxes = [_outline_box(line.polygon, line.box, inverse) for line in page.lines]
    lines = [TextLine(line.text, box) for line, box in zip(page.lines, ordered_boxes, strict=True)]
    score = score_page(job.page.lines, lines, job.case_insensitive)
    result: dict[str, Any] = {
        "dataset": job.dataset,
        "page": job.page.name,
        "variant": job.variant,
        "config": job.config,
        "seconds": seconds,
        "preprocess_ms": page.timings_ms.get("preprocess", 0.0),
        "page_ms": sum(v for k, v in page.timings_ms.items() if k != "rasterize"),
        "score": score.__dict__,
        "steps": page.preprocessing,
    }
    if job.variant == "upright" and job.config in ("default", "none"):
        result["order"] = order_distances(job.page.lines, ordered_boxes)
    return result


def _megapixels(path: Path) -> float:
    with Image.open(path) as image:  # the header only: the pixels are not decoded
        width, height = image.size
    return width * height / 1e6


def _cer(results: list[dict[str, Any]]) -> float:
    return micro_average([PageScore(**r["score"]) for r in results]).cer_geo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.preprocess_bench", description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", type=Path)
    parser.add_argument("--report", nargs="+", type=Path, help="print the tables of earlier --json files")
    parser.add_argument("--limit", type=int, help="first N pages of each set")
    parser.add_argument(
        "--min-megapixels", type=float, default=0.0, help="only pages at least this large (the big scans)"
    )
    parser.add_argument("--workers", type=int, default=1, help="processes, each with its own engine")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads per process (0: all)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variant names")
    parser.add_argument("--configs", default="none,default", help="configs for the variants table")
    parser.add_argument("--ablation", default=",".join(CONFIGS), help="configs for the upright ablation")
    parser.add_argument("--json", type=Path, dest="json_out")
    args = parser.parse_args(argv)
    if args.report:
        report([json.loads(line) for path in args.report for line in path.read_text("utf-8").splitlines()])
        return 0
    if not args.datasets:
        parser.error("give DATASET_DIR... or --report")

    jobs: list[Job] = []
    for folder in args.datasets:
        pages, case_insensitive = load_dataset(folder, args.limit)
        if args.min_megapixels:
            pages = [page for page in pages if _megapixels(page.image) >= args.min_megapixels]
        for page in pages:
            for config in filter(None, args.ablation.split(",")):  # --ablation "": variants only
                jobs.append(Job(folder.name, page, case_insensitive, "upright", config))
            for variant in filter(None, args.variants.split(",")):  # --variants "": ablation only
                if variant == "upright":
                    continue
                for config in args.configs.split(","):
                    jobs.append(Job(folder.name, page, case_insensitive, variant, config))
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    sink = args.json_out.open("w", encoding="utf-8") if args.json_out else None
    with ProcessPoolExecutor(args.workers, initializer=_init_worker, initargs=(args.threads,)) as pool:
        for result in pool.map(_run, jobs):
            results.append(result)
            if sink:
                sink.write(json.dumps(result, ensure_ascii=False) + "\n")
                sink.flush()
            # Progress on stderr, so a run stopped at a time limit still shows how far it got.
            score = result["score"]
            print(
                f"{len(results)}/{len(jobs)} {result['dataset']}/{result['page']} {result['variant']} "
                f"{result['config']}: {score['geo_errors']}/{score['gt_chars']} {result['seconds']:.1f}s",
                file=sys.stderr,
                flush=True,
            )
    if sink:
        sink.close()
    print(f"{len(jobs)} page reads in {time.perf_counter() - started:.0f}s ({os.cpu_count()} cores)")
    report(results)
    return 0


_TURNS = {"rot90": 1, "rot180": 2, "rot270": 3}


def _applied_turns(steps: list[dict[str, Any]]) -> int:
    """Clockwise quarter turns preprocessing applied: the ink step's, then the read check's."""
    total = 0
    for step in steps:
        if step["step"] in ("orientation", "orientation_check"):
            total += int(step["params"].get("quarter_turns", 0))
    return total % 4


def _check(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return next((step for step in steps if step["step"] == "orientation_check"), {})


def _cell(results: list[dict[str, Any]], width: int) -> str:
    """CER of the pages in a cell and their number (runs merged by --report may differ in pages)."""
    text = f"{_cer(results):.2%} ({len(results)})" if results else "-"
    return f"{text:>{width}}"


def report(results: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(r["dataset"] for r in results))

    def pick(dataset: str, variant: str, config: str) -> list[dict[str, Any]]:
        return [
            r
            for r in results
            if r["dataset"] == dataset and r["variant"] == variant and r["config"] == config
        ]

    print("\nAblation on the upright pages: CER geo (whitespace-free, micro-averaged; pages)")
    configs = list(dict.fromkeys(r["config"] for r in results if r["variant"] == "upright"))
    print(f"{'config':<14}" + "".join(f"{name:>16}" for name in names))
    for config in configs:
        print(f"{config:<14}" + "".join(_cell(pick(name, "upright", config), 16) for name in names))

    variants = list(dict.fromkeys(r["variant"] for r in results))
    var_configs = list(dict.fromkeys(r["config"] for r in results if r["variant"] != "upright"))
    print("\nDamaged copies: CER geo per variant and config (pages)")
    header = f"{'variant':<12}" + "".join(f"{f'{n[:8]} {c}':>20}" for n in names for c in var_configs)
    print(header)
    for variant in variants:
        row = f"{variant:<12}"
        for name in names:
            for config in var_configs:
                row += _cell(pick(name, variant, config), 20)
        print(row)

    print("\nOrientation (default config): pages turned right, engine reads per page, check cost")
    for name in names:
        for variant in ("upright", *_TURNS):
            rows = pick(name, variant, "default")
            if not rows:
                continue
            right = sum(1 for r in rows if (_applied_turns(r["steps"]) + _TURNS.get(variant, 0)) % 4 == 0)
            reads = [int(_check(r["steps"]).get("params", {}).get("reads", 1)) for r in rows]
            check_ms = [float(_check(r["steps"]).get("ms", 0.0)) for r in rows]
            print(
                f"{name:<12} {variant:<8} right {right}/{len(rows)}; reads mean "
                f"{statistics.mean(reads):.2f}, pages read more than once {sum(n > 1 for n in reads)}; "
                f"check ms median {statistics.median(check_ms):.0f}, mean {statistics.mean(check_ms):.0f}"
            )

    print("\nReading order vs GT order (normalised Kendall tau distance, lower is better)")
    for name in names:
        for config in ("default",):
            orders = [r["order"] for r in pick(name, "upright", config) if "order" in r]
            if not orders:
                continue
            weights = [o["pairs"] for o in orders]
            total = sum(weights) or 1.0
            line = "  ".join(
                f"{key} {sum(o[key] * w for o, w in zip(orders, weights, strict=True)) / total:.4f}"
                for key in ("pipeline", "top_to_bottom", "group_rows")
            )
            print(f"{name} ({len(orders)} pages, pair-weighted): {line}")

    print("\nPreprocessing share of page time (engine + layout + preprocess), default config")
    for name in names:
        rows = [r for r in results if r["dataset"] == name and r["config"] == "default"]
        shares = [r["preprocess_ms"] / r["page_ms"] for r in rows if r["page_ms"]]
        upright = [
            r["preprocess_ms"] / r["page_ms"] for r in rows if r["page_ms"] and r["variant"] == "upright"
        ]
        # The image steps alone, without the extra engine reads of the orientation check.
        image_only = [
            sum(step["ms"] for step in r["steps"] if step["step"] != "orientation_check") / r["page_ms"]
            for r in rows
            if r["page_ms"]
        ]
        if shares:
            upright_median = f"{statistics.median(upright):.1%}" if upright else "-"
            print(
                f"{name}: upright median {upright_median}; all variants median "
                f"{statistics.median(shares):.1%}, max {max(shares):.1%}; image steps alone (no extra "
                f"reads) median {statistics.median(image_only):.1%}, max {max(image_only):.1%}"
            )


if __name__ == "__main__":
    sys.exit(main())
