"""Fixed input shapes for the CUDA provider: detector page buckets, line-width buckets, padded batches.

onnxruntime's CUDA provider sets a convolution up again (cuDNN algorithm choice, plans) whenever a
session's input shape differs from its previous run: 1.3-2.0 s for PP-OCRv6's recogniser, the same
for shapes it has seen before (bench/README.md, "The ONNX engine on the GPU"). A page or a line
batch is therefore padded to one of a few fixed shapes, and each shape gets a session of its own,
so that no session ever sees a second shape and each pays its setup once, at load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

# Shares of the detector's long-side limit that a page's short side is padded up to. A page is
# resized (as without buckets) so its long side is at most the limit; most scans are larger, so
# their long side is the limit and only the short side varies: padding it to the next share wastes
# at most a third of the detector's work on a page, with five sessions in all.
DET_SHORT_SHARES = (0.5, 0.75, 1.0)
# Line widths (pixels at the recogniser's height of 48) a line batch is padded to. A wider line is
# squeezed to the largest, as a batch already squeezes a line to its batch width (3200 px is a
# 67:1 line, longer than a full-width line of docs_zh at 200 dpi). Four widths, not the eight
# (320, 480, 640, 960, 1280, 1920, 2560, 3200) measured first: on an H200 each recogniser session
# held about 210 MiB more of the card (peak 4,555 MiB with eight, 3,709 with four), four were
# faster (5.4 against 4.5 receipts/s, 4.6 against 3.3 docs_zh pages/s) and read receipts the same
# (2.63% CER) but docs_zh a little worse (0.93% against 0.84%): bench/README.md.
REC_WIDTHS = (320, 640, 1280, 3200)


def _multiple_of_32(value: float) -> int:
    return max(32, math.ceil(value / 32) * 32)


def detector_buckets(
    limit_side_len: int, shares: Sequence[float] | None = None
) -> tuple[tuple[int, int], ...]:
    """The (height, width) sizes a detector input is padded to, smallest area first.

    The largest side is the limit rounded up to a multiple of 32, the most the detector's resize
    can produce, so every resized page fits a bucket. `shares`: the short sides as shares of the
    limit (None: DET_SHORT_SHARES); 1.0 is always among them, so that a square page fits.
    """
    full = _multiple_of_32(limit_side_len)
    chosen = {*(DET_SHORT_SHARES if shares is None else shares), 1.0}
    shorts = sorted({_multiple_of_32(limit_side_len * share) for share in chosen})
    sizes = {(full, short) for short in shorts} | {(short, full) for short in shorts}
    return tuple(sorted(sizes, key=lambda size: (size[0] * size[1], size)))


def choose_bucket(height: int, width: int, buckets: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """The smallest bucket that holds a height x width input; ValueError if none does."""
    fitting = [size for size in buckets if size[0] >= height and size[1] >= width]
    if not fitting:
        raise ValueError(f"no detector bucket holds a {height}x{width} input (buckets {list(buckets)})")
    return min(fitting, key=lambda size: (size[0] * size[1], size))


def paper_colour(image: np.ndarray) -> tuple[int, ...]:
    """The page's paper colour: the 90th percentile of each channel of a sample of the page.

    The same rule the preprocessing fills the canvas of a deskew rotation with, so the padding a
    bucket adds looks like more of the page's margin to the detector.
    """
    step_y, step_x = max(1, image.shape[0] // 200), max(1, image.shape[1] // 200)
    sample = image[::step_y, ::step_x].reshape(-1, image.shape[2] if image.ndim == 3 else 1)
    return tuple(int(value) for value in np.percentile(sample, 90, axis=0))


def pad_page(image: np.ndarray, size: tuple[int, int], fill: tuple[int, ...]) -> np.ndarray:
    """The image in the top-left corner of a `size` canvas of colour `fill` (nothing is resized)."""
    height, width = image.shape[:2]
    if height > size[0] or width > size[1]:
        raise ValueError(f"a {height}x{width} image does not fit a {size[0]}x{size[1]} bucket")
    if image.ndim == 2 or image.shape[2] in (2, 3, 4):  # (H, W, 1) would come back as (H, W)
        # OpenCV fills the border in one pass: 1.5 ms for a 1280x1280 colour page against 23 ms
        # for numpy's broadcast fill and copy on the 2-core development machine.
        return cv2.copyMakeBorder(
            image, 0, size[0] - height, 0, size[1] - width, cv2.BORDER_CONSTANT, value=fill
        )
    canvas = np.empty((size[0], size[1], *image.shape[2:]), dtype=image.dtype)
    canvas[...] = np.array(fill, dtype=image.dtype)
    canvas[:height, :width] = image
    return canvas


def line_widths(min_width: int, widths: Sequence[int] | None = None) -> tuple[int, ...]:
    """The width buckets of line batches: `min_width`, then those of `widths` above it (None: REC_WIDTHS)."""
    chosen = sorted(set(REC_WIDTHS if widths is None else widths))
    return (min_width, *(width for width in chosen if width > min_width))


def choose_width(width: int, widths: Sequence[int]) -> int:
    """The narrowest bucket at least `width` wide; the widest bucket for a wider line (squeezed)."""
    return next((bucket for bucket in widths if bucket >= width), widths[-1])


def pad_rows(batch: np.ndarray, rows: int) -> np.ndarray:
    """A batch filled up to `rows` with zero rows (blank input); callers discard their outputs."""
    if len(batch) > rows:
        raise ValueError(f"a batch of {len(batch)} does not fit {rows} rows")
    if len(batch) == rows:
        return batch
    padded = np.zeros((rows, *batch.shape[1:]), dtype=batch.dtype)
    padded[: len(batch)] = batch
    return padded
