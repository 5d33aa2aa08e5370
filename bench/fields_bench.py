"""Field exact-match on SROIE receipts and confidence calibration (fields and lines) on ../shared/data.

Run: .venv/bin/python -m bench.fields_bench [--data ../shared/data] [--limit N]
The data folder is evaluation-only: it is read by path and nothing from it is copied.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.config import AppConfig
from appliance.document import Box, Document
from appliance.engines.factory import build_engine
from appliance.fields.model import FieldValue
from appliance.pipeline.process import DocumentProcessor
from appliance.pipeline.rasterize import Rasterizer
from appliance.repair.amounts import parse_amount
from appliance.repair.confidence import Aggregate, aggregate, with_checks
from appliance.repair.dates import parse_date

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


def run_receipts(processor: DocumentProcessor, folder: Path, limit: int | None) -> None:
    hits: dict[str, list[int]] = {name: [0, 0, 0] for name in FIELDS}  # strict raw, value, whitespace-free
    samples: dict[str, list[tuple[float, bool]]] = {method: [] for method in METHODS}
    review = {True: [0, 0], False: [0, 0]}  # review flag -> [correct, total]
    gts = sorted((folder / "gt").glob("*.json"))[:limit]
    started = time.perf_counter()
    for gt_path in gts:
        gt = json.loads(gt_path.read_text(encoding="utf-8"))
        document = processor.process(folder / gt["image"])
        for name in FIELDS:
            truth = gt["key_fields"].get(name, "")
            field = document.fields.get(name)
            raw = field.raw if field else ""
            strict = sroie_norm(raw) == sroie_norm(truth)
            by_value = (
                field is not None
                and field.value is not None
                and ((field.value == value_of(name, truth)) if name in {"date", "total"} else strict)
            )
            loose = no_space(raw) == no_space(truth) or by_value
            hits[name][0] += int(strict)
            hits[name][1] += int(by_value)
            hits[name][2] += int(loose)
            if field is not None and field.spans:
                for method in METHODS:
                    samples[method].append((field_confidence(field, method), bool(by_value)))
                review[field.review][0] += bool(by_value)
                review[field.review][1] += 1
    elapsed = time.perf_counter() - started
    count = len(gts)
    print(f"receipts_en: {count} receipts, {elapsed:.0f} s, locale {LOCALE}")
    print("  field     raw exact (SROIE)  normalised value  whitespace-free")
    for name in FIELDS:
        cells = [f"{hit:3d}/{count} {hit / count:6.1%}" for hit in hits[name]]
        print(f"  {name:8s}  {cells[0]}    {cells[1]}   {cells[2]}")
    for flag, (correct, total) in review.items():
        if total:
            print(f"  review={flag!s:5s}: {total} fields, {correct / total:.1%} correct")
    for method in METHODS:
        print(f"fields, confidence = {method} of characters, checks applied (correct = normalised value):")
        print("\n".join(reliability(samples[method])))


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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--limit", type=int, default=None, help="documents per set (default: all)")
    parser.add_argument("--skip-zh", action="store_true")
    args = parser.parse_args()
    config = AppConfig()
    processor = DocumentProcessor(build_engine(config.engine), Rasterizer(config.rasterize), config.repair)
    run_receipts(processor, args.data / "receipts_en", args.limit)
    if not args.skip_zh:
        run_lines(processor, args.data / "docs_zh", args.limit)


if __name__ == "__main__":
    main()
