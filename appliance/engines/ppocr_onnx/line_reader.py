"""An ONNX recogniser as a second reader: reads the line crops the cascade sends it, one at a time."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from appliance.config import OnnxReaderConfig
from appliance.engines.base import PageText
from appliance.engines.line_crop import RECOGNISER_LINE_MARGIN
from appliance.engines.manifest import builtin_manifest_path, load_manifest, verify_models
from appliance.engines.ppocr_onnx.graph import folded_model
from appliance.engines.ppocr_onnx.recognition import LineRead, TextRecognizer, dictionary
from appliance.engines.ppocr_onnx.sessions import create_session
from appliance.engines.ppocr_onnx.spacing import restore_spaces
from appliance.engines.text_lines import make_line
from appliance.errors import ModelError

READER_NAME = "onnx_reader"
# Taller than wide by this much, a crop holds vertical text: turned a quarter, as crop_line does.
_VERTICAL = 1.5


def strip_read(read: LineRead) -> LineRead:
    """Drop leading and trailing spaces together with their confidences and positions."""
    start, end = 0, len(read.text)
    while start < end and read.text[start].isspace():
        start += 1
    while end > start and read.text[end - 1].isspace():
        end -= 1
    space_before = read.space_before[start:end] if read.space_before is not None else None
    if space_before:
        space_before[0] = 0.0  # nothing stands before the first character any more
    return LineRead(
        read.text[start:end],
        read.confidences[start:end],
        read.positions[start:end],
        space_before,
        read.likelihood,
    )


class OnnxLineReader:
    """A PP-OCR recogniser from a built-in, hash-checked model set, reading one line crop per call.

    The cascade gives it the first engine's line box grown by `line_margin` of its height on each
    side: about the crop the detector cut for the first recogniser (line_crop.RECOGNISER_LINE_MARGIN),
    which is what these recognisers were trained on.
    """

    name = READER_NAME
    line_margin = RECOGNISER_LINE_MARGIN
    # Under `cascade.keep: auto` a line it reads again takes its read: a second recogniser gained
    # that way on the receipts and lost keeping the surer read (bench/README.md).
    auto_keep = "second"
    # Under `cascade.max_changes: auto` its reads may change a line as much as they like: measured
    # that way (the limit was set for a VLM, whose rewrites of whole lines went wrong).
    auto_max_changes = None

    def __init__(self, config: OnnxReaderConfig) -> None:
        manifest = load_manifest(builtin_manifest_path(config.models))
        # The recogniser and its dictionary (PP-OCRv5 has a keys file; PP-OCRv6 carries it inside).
        paths = verify_models(manifest, None, roles=("rec", "keys"))
        self._entry = manifest.entry("rec")
        self._manifest = manifest.name
        model, self._folded = None, 0
        if config.fold_affine:
            try:
                folded, self._folded = folded_model(paths["rec"])
            except Exception as error:  # onnx/onnxruntime raise their own untyped errors
                raise ModelError(f"cannot fold {paths['rec']} at load: {error}") from None
            model = folded if self._folded else None
        session, self._session_info = create_session(
            paths["rec"], config.provider, config.intra_op_threads, 1, model=model
        )
        self._space_gap = config.space_gap
        self._recognizer: TextRecognizer | None = TextRecognizer(
            session, dictionary(paths), 1, config.rec_min_width
        )

    def keep_step_evidence(self, classes: int) -> bool:
        """Give each line read from now on its `likelihood`, as the engine's (0 stops it)."""
        if self._recognizer is None:
            raise RuntimeError("the onnx_reader is closed")
        return self._recognizer.keep_evidence(classes)

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        """Read one line crop (BGR) as one line; `hint` and `deadline` go unused (one run is short)."""
        if self._recognizer is None:
            raise RuntimeError("the onnx_reader is closed")
        started = time.perf_counter()
        crop = image
        if crop.shape[0] >= _VERTICAL * crop.shape[1]:
            crop = np.ascontiguousarray(np.rot90(crop))
        read = restore_spaces(strip_read(self._recognizer.recognize([crop])[0]), crop, self._space_gap)
        elapsed = (time.perf_counter() - started) * 1000
        height, width = image.shape[:2]
        lines = []
        if read.text:
            line = make_line(read.text, read.confidences, (0.0, 0.0, float(width), float(height)), self.name)
            line.likelihood = read.likelihood
            lines.append(line)
        return PageText(lines=lines, timings_ms={"rec2": elapsed}, details={self.name: {"lines_read": 1}})

    def describe(self) -> dict[str, Any]:
        info = self._session_info
        return {
            "name": self.name,
            "manifest": self._manifest,
            "models": [
                {
                    "role": "rec",
                    "name": self._entry.name,
                    "file": self._entry.file,
                    "sha256": self._entry.sha256,
                    "precision": self._entry.precision,
                    "affine_folded_at_load": self._folded,
                    "provider": info.provider,
                    "fallback_reason": info.fallback_reason,
                }
            ],
        }

    def close(self) -> None:
        self._recognizer = None  # the session goes with it
