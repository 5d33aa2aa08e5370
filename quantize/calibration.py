"""Calibration and validation inputs for the quantizer: rendered pages or a folder of page images.

The pages are turned into the exact tensors each model sees in the engine by running the FP32
engine's own pre-processing (detector resize, line crops, orientation windows, width-sorted
recognition batches) with sessions that record their feeds. So the activation ranges are
measured on real engine inputs, including upside-down lines for the orientation classifier.

Rendered pages use Debian fonts (fonts-dejavu-core, fonts-wqy-microhei) and a seeded random
generator: receipt-like Latin lines (upper case, digits, prices, dates) in sans and mono faces,
and Chinese lines of characters drawn from the recogniser's own dictionary, with grey paper,
blur and JPEG artefacts like scans. Calibration and validation use different seeds, and neither
touches the evaluation sets under ../shared/data.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from appliance.engines.line_crop import crop_line
from appliance.engines.ppocr_onnx.detection import TextDetector
from appliance.engines.ppocr_onnx.orientation import LineOrientation
from appliance.engines.ppocr_onnx.recognition import TextRecognizer

FONT_DIR = Path("/usr/share/fonts/truetype")
LATIN_FONTS = ("dejavu/DejaVuSans.ttf", "dejavu/DejaVuSansMono.ttf", "dejavu/DejaVuSans-Bold.ttf")
CJK_FONT = "wqy/wqy-microhei.ttc"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}

_WORDS = [
    "TOTAL",
    "SUBTOTAL",
    "CASH",
    "CHANGE",
    "TAX",
    "GST",
    "SST",
    "INVOICE",
    "RECEIPT",
    "DATE",
    "TIME",
    "QTY",
    "PRICE",
    "AMOUNT",
    "ITEM",
    "SDN",
    "BHD",
    "JALAN",
    "TAMAN",
    "ROAD",
    "STREET",
    "STORE",
    "MART",
    "BAKERY",
    "COFFEE",
    "TEA",
    "RICE",
    "NOODLE",
    "CHICKEN",
    "THANK",
    "YOU",
    "PLEASE",
    "COME",
    "AGAIN",
    "CASHIER",
    "MEMBER",
    "DISCOUNT",
    "ROUNDING",
    "BALANCE",
    "TEL",
    "FAX",
    "NO",
    "REG",
    "VISA",
    "MASTER",
    "CARD",
]


@dataclass
class Feeds:
    """Input tensors recorded per model role (det, cls, rec)."""

    by_role: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"det": [], "cls": [], "rec": []})
    pages: int = 0
    lines: int = 0


class _Recorder:
    """Stands in for an InferenceSession and keeps a copy of every input it is given."""

    def __init__(self, session: ort.InferenceSession, sink: list[np.ndarray]) -> None:
        self._session = session
        self._sink = sink

    def get_inputs(self) -> Any:
        return self._session.get_inputs()

    def get_outputs(self) -> Any:
        return self._session.get_outputs()

    def get_providers(self) -> list[str]:
        return list(self._session.get_providers())

    def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
        self._sink.append(next(iter(feeds.values())).copy())
        return self._session.run(names, feeds)


def _latin_line(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
        return f"{words} {rng.randint(1, 9)} x {rng.uniform(0.5, 99):.2f}  {rng.uniform(1, 500):.2f}"
    if kind < 0.6:
        day, month, year = rng.randint(1, 28), rng.randint(1, 12), rng.randint(10, 26)
        return f"DATE: {day:02d}/{month:02d}/20{year} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    if kind < 0.8:
        street, town = rng.choice(_WORDS), rng.choice(_WORDS)
        return f"NO. {rng.randint(1, 999)}, JALAN {street} {rng.randint(10000, 99999)} {town}"
    words = " ".join(rng.choice(_WORDS).capitalize() for _ in range(rng.randint(2, 6)))
    return f"{words}: {rng.randint(100, 99999)}"


def _cjk_line(rng: random.Random, alphabet: list[str]) -> str:
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 28)))
    if rng.random() < 0.3:
        text += f" {rng.randint(1, 2026)} " + rng.choice(_WORDS).lower()
    return text + rng.choice(["。", "，", "：", ""])


def render_page(rng: random.Random, alphabet: list[str]) -> np.ndarray:
    """One scan-like page (BGR) of receipt or document lines."""
    chinese = rng.random() < 0.5
    width = rng.choice([800, 1000, 1400]) if not chinese else rng.choice([1200, 1600])
    size = rng.randint(20, 40)
    rows = rng.randint(8, 22)
    height = int(60 + rows * size * 1.9)
    paper = rng.randint(205, 255)
    image = Image.new("L", (width, height), paper)
    draw = ImageDraw.Draw(image)
    latin = ImageFont.truetype(str(FONT_DIR / rng.choice(LATIN_FONTS)), size)
    cjk = ImageFont.truetype(str(FONT_DIR / CJK_FONT), size)
    for row in range(rows):
        y = 30 + row * size * 1.9
        if chinese and rng.random() < 0.8:
            text, font = _cjk_line(rng, alphabet), cjk
        else:
            text, font = _latin_line(rng), latin
        draw.text((rng.randint(10, 120), y), text, font=font, fill=rng.randint(0, 90))
    if rng.random() < 0.6:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=rng.randint(40, 90))
    decoded = cv2.imdecode(np.frombuffer(buffer.getvalue(), np.uint8), cv2.IMREAD_COLOR)
    if decoded is None:  # pragma: no cover - Pillow always writes a decodable JPEG
        raise RuntimeError("rendered page did not decode")
    return decoded


def cjk_alphabet(keys_path: Path, count: int = 3500) -> list[str]:
    """The first `count` CJK ideographs of the recogniser's dictionary (it lists common ones first)."""
    keys = keys_path.read_text(encoding="utf-8").split("\n")
    return [key for key in keys if len(key) == 1 and "\u4e00" <= key <= "\u9fff"][:count]


def rendered_pages(count: int, seed: int, keys_path: Path) -> list[np.ndarray]:
    rng = random.Random(seed)
    alphabet = cjk_alphabet(keys_path)
    return [render_page(rng, alphabet) for _ in range(count)]


def folder_pages(folder: Path, limit: int | None = None) -> list[np.ndarray]:
    """Page images of a folder, sorted by name (a calibration set given by path)."""
    paths = sorted(path for path in folder.iterdir() if path.suffix.lower() in IMAGE_SUFFIXES)
    pages = []
    for path in paths[:limit]:
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is not None:
            pages.append(image)
    if not pages:
        raise ValueError(f"{folder} holds no readable page images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return pages


def collect_feeds(
    pages: list[np.ndarray],
    sessions: dict[str, ort.InferenceSession],
    keys: list[str],
    *,
    det_limit_side_len: int = 1280,
    rec_batch_size: int = 8,
    max_lines_per_page: int = 48,
) -> Feeds:
    """Run the FP32 engine steps on the pages and record what each model is fed."""
    feeds = Feeds()
    detector = TextDetector(
        _Recorder(sessions["det"], feeds.by_role["det"]),
        limit_side_len=det_limit_side_len,
        threshold=0.3,
        box_threshold=0.6,
        unclip_ratio=1.5,
    )
    recognizer = TextRecognizer(
        _Recorder(sessions["rec"], feeds.by_role["rec"]),
        keys,
        rec_batch_size,
    )
    orientation = LineOrientation(_Recorder(sessions["cls"], feeds.by_role["cls"]))
    for page in pages:
        quads = detector.detect(page)[:max_lines_per_page]
        crops = [crop_line(page, quad)[0] for quad in quads]
        if not crops:
            continue
        # Upside-down copies of a quarter of the lines: the classifier must see both classes,
        # and the engine re-reads flipped lines, so the recogniser sees them too.
        turned = [np.ascontiguousarray(crop[::-1, ::-1]) for crop in crops[::4]]
        recognizer.recognize(crops + turned)
        orientation.upside_down_probability(crops[::2] + turned)
        feeds.pages += 1
        feeds.lines += len(crops)
    return feeds
