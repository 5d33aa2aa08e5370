"""Field exact-match and routing on SROIE receipts, and confidence calibration (fields and lines).

Run: .venv/bin/python -m bench.fields_bench [RECEIPTS_DIR] [--cache /tmp/fields.pkl] [--config FILE]
     [--limit N] [--half even|odd]
(RECEIPTS_DIR defaults to ../shared/data/receipts_en; without it, --data ../shared/data also reads
docs_zh for line calibration unless --skip-zh). `--cache FILE` keeps each page's OCR read (before
repair) in FILE, keyed by the image's sha256 and the engine's description, so a second run
re-applies only the rules: seconds instead of minutes. Keep FILE outside the repository, and
delete it after changing what the engine's description does not show (preprocessing, layout).
FIELDS_BENCH_VERBOSE=1 prints each receipt's route, reasons, wrong fields and raw fields.
The data folder is evaluation-only: it is read by path and nothing from it is copied.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import pickle
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.config import AppConfig, RepairConfig, RoutingConfig, load_config
from appliance.document import Box, Document
from appliance.engines.factory import build_engine
from appliance.fields.model import FieldValue
from appliance.hashing import sha256_file
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from appliance.repair.amounts import parse_amount
from appliance.repair.confidence import Aggregate, aggregate, with_checks
from appliance.repair.dates import parse_date
from appliance.repair.step import repair_document
from appliance.routing import REVIEW, decide

FIELDS = ("company", "date", "address", "total")
BINS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 0.95), (0.95, 1.0001))
METHODS: tuple[Aggregate, ...] = ("min", "mean", "geomean", "product")
LOCALE = "en-MY"


def sroie_norm(text: str) -> str:
    """SROIE task 3 compares case-insensitively with whitespace collapsed."""
    return re.sub(r"\s+", " ", text).strip().upper()


def no_space(text: str) -> str:
    return re.sub(r"\s+", "", text).upper()


def value_of(name: str, text: str) -> str | None:
    """The normalised value of a ground-truth string, read by the same rules as a field."""
    if name == "date":
        date = parse_date(text, LOCALE)
        return date.iso if date else None
    if name == "total":
        amount = parse_amount(text, LOCALE)
        return f"{amount.value:f}" if amount else None
    return sroie_norm(text)


def reliability(samples: Sequence[tuple[float, bool]]) -> list[str]:
    rows = ["  bin         count  mean_conf  accuracy"]
    ece = 0.0
    for low, high in BINS:
        inside = [(c, ok) for c, ok in samples if low <= c < high]
        if not inside:
            rows.append(f"  {low:.2f}-{min(high, 1):.2f}  {0:5d}          -         -")
            continue
        mean = sum(c for c, _ in inside) / len(inside)
        accuracy = sum(ok for _, ok in inside) / len(inside)
        ece += len(inside) / len(samples) * abs(mean - accuracy)
        rows.append(f"  {low:.2f}-{min(high, 1):.2f}  {len(inside):5d}  {mean:9.3f}  {accuracy:8.3f}")
    rows.append(f"  ECE {ece:.3f} over {len(samples)}")
    return rows


def field_confidence(field: FieldValue, method: Aggregate) -> float:
    chars = [value for span in field.spans for value in span.confidences]
    return with_checks(aggregate(chars, method), [check.passed for check in field.checks])


class Reader:
    """Reads a page once with the engine; with a cache file, each read is kept for later runs."""

    def __init__(
        self, processor: DocumentProcessor, engine: object, repair: RepairConfig, cache: Path | None
    ) -> None:
        self._processor = processor
        self._repair = repair
        self._cache = cache
        self._reads: dict[str, Document] = {}
        if cache is not None and cache.exists():
            try:
                self._reads = pickle.loads(cache.read_bytes())
            except (pickle.UnpicklingError, EOFError, AttributeError, ImportError):
                self._reads = {}  # written by another version of the Document model: read again
        self._key = hashlib.sha256(json.dumps(engine, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def read(self, path: Path) -> Document:
        """The document with this run's rules applied to the engine's (possibly cached) read."""
        key = f"{sha256_file(path)}:{self._key}"
        if key not in self._reads:
            self._reads[key] = self._processor.process(path)
            if self._cache is not None:
                self._cache.write_bytes(pickle.dumps(self._reads))
        document = copy.deepcopy(self._reads[key])
        repair_document(document, self._repair)
        return document


def run_receipts(
    reader: Reader, folder: Path, limit: int | None, routing: RoutingConfig, half: str | None = None
) -> None:
    hits: dict[str, list[int]] = {name: [0, 0, 0] for name in FIELDS}  # strict raw, value, whitespace-free
    samples: dict[str, list[tuple[float, bool]]] = {method: [] for method in METHODS}
    review = {True: [0, 0], False: [0, 0]}  # review flag -> [correct, total]
    # (routed to review, total or date wrong) -> receipts
    routes: dict[tuple[bool, bool], int] = {(r, w): 0 for r in (True, False) for w in (True, False)}
    gts = sorted((folder / "gt").glob("*.json"))
    if half is not None:
        # Every other receipt in name order: a rule tuned to some pages shows as one half gaining
        # while the other does not.
        gts = gts[{"even": 0, "odd": 1}[half] :: 2]
    gts = gts[:limit]
    started = time.perf_counter()
    for gt_path in gts:
        gt = json.loads(gt_path.read_text(encoding="utf-8"))
        document = reader.read(folder / gt["image"])
        wrong_money = False
        wrong: list[str] = []
        for name in FIELDS:
            truth = gt["key_fields"].get(name, "")
            field = document.fields.get(name)
            raw = field.raw if field else ""
            strict = sroie_norm(raw) == sroie_norm(truth)
            by_value = (
                field is not None
                and field.value is not None
                and (
                    (field.value == value_of(name, truth))
                    if name in {"date", "total"}
                    else sroie_norm(field.value) == sroie_norm(truth)
                )
            )
            loose = no_space(raw) == no_space(truth) or by_value
            hits[name][0] += int(strict)
            hits[name][1] += int(by_value)
            hits[name][2] += int(loose)
            if not by_value:
                wrong.append(name)
                wrong_money = wrong_money or name in {"date", "total"}
            if field is not None and field.spans:
                for method in METHODS:
                    samples[method].append((field_confidence(field, method), bool(by_value)))
                review[field.review][0] += bool(by_value)
                review[field.review][1] += 1
        decision = decide(document, routing)
        routes[(decision.route == REVIEW, wrong_money)] += 1
        if os.environ.get("FIELDS_BENCH_VERBOSE"):
            got = {name: (document.fields[name].raw if name in document.fields else None) for name in FIELDS}
            print(
                gt_path.stem,
                decision.route,
                "wrong:",
                wrong,
                decision.reasons,
                json.dumps(got, ensure_ascii=False),
            )
    elapsed = time.perf_counter() - started
    count = len(gts)
    print(
        f"receipts_en: {count} receipts{f' ({half} half)' if half else ''}, {elapsed:.0f} s, locale {LOCALE}"
    )
    print("  field     raw exact (SROIE)  normalised value  whitespace-free")
    for name in FIELDS:
        cells = [f"{hit:3d}/{count} {hit / count:6.1%}" for hit in hits[name]]
        print(f"  {name:8s}  {cells[0]}    {cells[1]}   {cells[2]}")
    print("\n".join(routing_rows(routes)))
    for flag, (correct, total) in review.items():
        if total:
            print(f"  review={flag!s:5s}: {total} fields, {correct / total:.1%} correct")
    for method in METHODS:
        print(f"fields, confidence = {method} of characters, checks applied (correct = normalised value):")
        print("\n".join(reliability(samples[method])))


def routing_rows(routes: dict[tuple[bool, bool], int]) -> list[str]:
    """The default routing against the truth: a receipt needs a person when its total or date is wrong."""
    count = sum(routes.values())
    reviewed = routes[(True, True)] + routes[(True, False)]
    wrong = routes[(True, True)] + routes[(False, True)]
    done = count - reviewed
    caught = routes[(True, True)]
    precision = caught / reviewed if reviewed else 1.0
    recall = routes[(True, True)] / wrong if wrong else 1.0
    slipped = routes[(False, True)]
    return [
        f"  routing (default profile): {done}/{count} done without review ({done / count:.1%}),"
        f" {reviewed} to review",
        f"    review for a wrong total or date: precision {precision:.1%} ({caught}/{reviewed}),"
        f" recall {recall:.1%} ({caught}/{wrong}); review for nothing: {routes[(True, False)]}",
        f"    done with a wrong total or date: {slipped}/{done}"
        + (f" ({slipped / done:.1%})" if done else ""),
    ]


def _overlap(a: Box, b: Sequence[float]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def run_lines(processor: DocumentProcessor, folder: Path, limit: int | None) -> None:
    measures: dict[str, Callable[[list[float]], float]] = {
        "mean (engine line confidence)": lambda c: sum(c) / len(c),
        "min": min,
    }
    samples: dict[str, list[tuple[float, bool]]] = {name: [] for name in measures}
    gts = sorted((folder / "gt").glob("*.json"))[:limit]
    started = time.perf_counter()
    for gt_path in gts:
        gt = json.loads(gt_path.read_text(encoding="utf-8"))
        image = folder / "images" / f"{gt_path.stem}.png"
        document: Document = processor.process(image)
        for line in (line for page in document.pages for line in page.lines):
            if not line.char_confidences:
                continue
            best = max(gt["lines"], key=lambda g: _overlap(line.box, g["box"]), default=None)
            matched = best is not None and _overlap(line.box, best["box"]) > 0.3
            correct = matched and best is not None and no_space(best["text"]) == no_space(line.text)
            for name, measure in measures.items():
                samples[name].append((measure(line.char_confidences), correct))
    print(f"docs_zh: {len(gts)} pages, {time.perf_counter() - started:.0f} s; a line is correct when its "
          "whitespace-free text equals the GT line it overlaps most (IoU > 0.3)")  # fmt: skip
    for name in measures:
        print(f"lines, confidence = {name}:")
        print("\n".join(reliability(samples[name])))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "receipts", type=Path, nargs="?", default=None, help="a receipts folder (gt/, images/)"
    )
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--limit", type=int, default=None, help="documents per set (default: all)")
    parser.add_argument("--skip-zh", action="store_true")
    parser.add_argument(
        "--half", choices=("even", "odd"), default=None, help="only every other receipt in name order"
    )
    parser.add_argument("--config", type=Path, default=None, help="appliance YAML (engine, repair, routing)")
    parser.add_argument(
        "--cache", type=Path, default=None, help="keep OCR reads here (outside the repository)"
    )
    args = parser.parse_args()
    config = load_config(args.config) if args.config else AppConfig()
    # The cache holds the engine's read before any field rule, so rule changes show on the next run.
    engine = build_engine(config.engine)
    processor = DocumentProcessor(engine, Rasterizer(config.rasterize), RepairConfig(field_profile="none"))
    reader = Reader(processor, engine.describe(), config.repair, args.cache)
    routing = config.profiles["default"].routing if "default" in config.profiles else RoutingConfig()
    run_receipts(reader, args.receipts or args.data / "receipts_en", args.limit, routing, args.half)
    if args.receipts is None and not args.skip_zh:
        run_lines(processor, args.data / "docs_zh", args.limit)


if __name__ == "__main__":
    main()
