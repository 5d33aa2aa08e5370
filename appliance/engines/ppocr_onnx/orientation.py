"""Text-line orientation (0 or 180 degrees) with the PP-LCNet classifier, robust to long lines.

The classifier takes a fixed 160x80 input. Squeezing a long line into it destroys the glyphs, and
that is how RapidOCR comes to flip long upright lines (which then read as nothing and are dropped).
Here a long line is judged on up to three 2:1 windows along it and the probabilities averaged,
and the engine re-reads a flipped line both ways and keeps the better read, so a wrong verdict
costs a little time but never a line.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor

import cv2
import numpy as np

from appliance.engines.ppocr_onnx.sessions import ModelSession
from appliance.engines.ppocr_onnx.shapes import pad_rows

_INPUT_W, _INPUT_H = 160, 80
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
_WINDOWS = 3


def _windows(crop: np.ndarray) -> list[np.ndarray]:
    """Pieces of the line with the classifier's own 2:1 aspect ratio."""
    height, width = crop.shape[:2]
    window = 2 * height
    if width <= window * 1.5:
        return [crop]
    starts = np.linspace(0, width - window, _WINDOWS).astype(int)
    return [crop[:, start : start + window] for start in starts]


def _prepare(piece: np.ndarray) -> np.ndarray:
    resized = cv2.resize(piece, (_INPUT_W, _INPUT_H), interpolation=cv2.INTER_LINEAR)
    tensor = (resized[:, :, ::-1].astype(np.float32) / 255.0 - _MEAN) / _STD  # BGR -> RGB
    return tensor.transpose(2, 0, 1)


class LineOrientation:
    """Probability that each line crop is upside down."""

    def __init__(
        self,
        session: ModelSession,
        batch_size: int = 16,
        pool: Executor | None = None,
        threads: int = 1,
        *,
        fixed_batch: bool = False,
    ) -> None:
        """`pool` with `threads` threads: the windows are shared out in batches run at once.

        `fixed_batch`: every run gets exactly `batch_size` windows, filled up with blank ones whose
        outputs are dropped, so the session never sees a second shape (shapes.py).
        """
        self._session = session
        self._fixed_batch = fixed_batch
        self._input = session.get_inputs()[0].name
        self._batch_size = batch_size
        self._pool = pool
        self._threads = threads if pool is not None else 1

    def upside_down_probability(self, crops: list[np.ndarray]) -> list[float]:
        pieces: list[np.ndarray] = []
        owner: list[int] = []
        for index, crop in enumerate(crops):
            for piece in _windows(crop):
                pieces.append(_prepare(piece))
                owner.append(index)
        if not pieces:
            return []
        probabilities = np.zeros(len(crops), dtype=np.float64)
        counts = np.zeros(len(crops), dtype=np.float64)
        # Enough batches to give every thread one; each still at most batch_size windows.
        size = min(self._batch_size, math.ceil(len(pieces) / self._threads))
        if self._fixed_batch:
            size = self._batch_size
        starts = range(0, len(pieces), size)

        def run(start: int) -> np.ndarray:
            batch = np.stack(pieces[start : start + size])
            rows = len(batch)
            if self._fixed_batch:
                batch = pad_rows(batch, self._batch_size)
            output: np.ndarray = self._session.run(None, {self._input: batch})[0]
            return output[:rows]

        outputs = map(run, starts) if self._pool is None or len(starts) < 2 else self._pool.map(run, starts)
        for start, output in zip(starts, outputs, strict=True):
            for row, index in zip(output, owner[start : start + size], strict=True):
                probabilities[index] += float(row[1])
                counts[index] += 1
        return [float(value) for value in probabilities / np.maximum(counts, 1)]
