"""Cuts every ground-truth line of a page set into a crop folder (evaluation only); scores the ONNX reader.

    python -m train.make_crops --data ../shared/data/receipts_en --out DIR [--onnx] [--through-height H]

Writes DIR/NNNN.jpg and DIR/labels.jsonl (`{"file", "text", "page"}`), the layout train.eval_lines
reads. The crops come from evaluation data whose licence forbids copying it: write DIR outside the
repository (or under the ignored .train-carry/) and never commit it. `--onnx` also reads the same
crops with the appliance's second-reader recogniser (PP-OCRv6 small, CPU) and prints its CER: the
bar a trained model has to beat.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np

from appliance.engines.line_crop import RECOGNISER_LINE_MARGIN, VLM_LINE_MARGIN, cut_box


def make_crops(
    data: Path, out: Path, margin: float = RECOGNISER_LINE_MARGIN, through_height: int | None = None
) -> int:
    """Writes the crops (boxes grown by `margin` x their height) and labels.jsonl; returns the count.

    `through_height`: each crop taller than that is shrunk to it and enlarged back to its own size,
    so a reader sees only what that many rows of pixels hold (the line reader's input is 28 rows).
    """
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    with (out / "labels.jsonl").open("w", encoding="utf-8") as labels:
        for gt_path in sorted((data / "gt").glob("*.json")):
            gt = json.loads(gt_path.read_text(encoding="utf-8"))
            # Grey: the scans are grey receipts, and grey JPEGs keep the set small enough to carry.
            page = cv2.imread(str(data / "images" / Path(gt["image"]).name), cv2.IMREAD_GRAYSCALE)
            if page is None:
                raise FileNotFoundError(f"cannot read the image of {gt_path}")
            for line in gt["lines"]:
                text = line["text"].strip()
                x0, y0, x1, y1 = line["box"]
                crop = cut_box(page, (x0, y0, x1, y1), margin)  # as the appliance's cascade cuts it
                if not text or crop.size == 0:
                    continue
                if through_height is not None and crop.shape[0] > through_height:
                    crop = _through_height(crop, through_height)
                name = f"{count:04d}.jpg"
                # JPEG at quality 92: the pages are JPEG scans already; PNG crops of one set pass 60 MB.
                cv2.imwrite(str(out / name), crop, [cv2.IMWRITE_JPEG_QUALITY, 92])
                record = {"file": name, "text": text, "page": gt_path.stem}
                labels.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    return count


def _through_height(crop: np.ndarray, height: int) -> np.ndarray:
    """The crop shrunk to `height` rows (its aspect kept) and enlarged back to its own size."""
    rows, columns = crop.shape[:2]
    small = cv2.resize(crop, (max(1, round(columns * height / rows)), height), interpolation=cv2.INTER_AREA)
    return cv2.resize(small, (columns, rows), interpolation=cv2.INTER_CUBIC)


def read_crops(folder: Path, limit: int | None = None) -> list[tuple[str, np.ndarray, str]]:
    """(file, crop as BGR, truth) for each line of folder/labels.jsonl, in order; the first `limit`."""
    rows = [
        json.loads(line)
        for line in (folder / "labels.jsonl").read_text(encoding="utf-8").splitlines()
        if line
    ]
    crops = []
    for row in rows[:limit] if limit else rows:
        crop = cv2.imread(str(folder / row["file"]), cv2.IMREAD_COLOR)
        if crop is None:
            raise SystemExit(f"cannot read {folder / row['file']}")
        crops.append((row["file"], crop, row["text"]))
    return crops


def onnx_cer(crops: Path) -> dict[str, float]:
    """CER of the appliance's ONNX second reader (PP-OCRv6 small on CPU, one thread) on the crops."""
    from appliance.config import OnnxReaderConfig
    from appliance.engines.ppocr_onnx.line_reader import OnnxLineReader
    from train.eval_lines import cer

    reader = OnnxLineReader(OnnxReaderConfig(provider="cpu", intra_op_threads=1))
    pairs = [(text, " ".join(x.text for x in reader.read(crop).lines)) for _, crop, text in read_crops(crops)]
    reader.close()
    return {
        "lines": len(pairs),
        "cer_nospace_ci": round(cer(pairs), 4),
        "cer_spaced_ci": round(cer(pairs, True), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.make_crops", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a page set with images/ and gt/*.json")
    parser.add_argument("--out", type=Path, required=True, help="crop folder (outside the repository)")
    parser.add_argument("--onnx", action="store_true", help="also print the ONNX reader's CER on the crops")
    parser.add_argument(
        "--margin",
        type=float,
        default=RECOGNISER_LINE_MARGIN,
        help="paper round each box, as a share of its height (the cascade gives a recogniser or a "
        f"line reader {RECOGNISER_LINE_MARGIN}, a page VLM {VLM_LINE_MARGIN})",
    )
    parser.add_argument(
        "--through-height",
        type=int,
        help="shrink each crop to this many rows of pixels and back: what a reader that tall can see",
    )
    args = parser.parse_args(argv)
    print(f"{make_crops(args.data, args.out, args.margin, args.through_height)} lines in {args.out}")
    if args.onnx:
        print(json.dumps({"onnx_reader": onnx_cer(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
