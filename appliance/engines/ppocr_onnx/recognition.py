"""PP-OCR CRNN/SVTR recognition with CTC decoding that keeps a confidence and position per character.

Written here rather than taken from RapidOCR because we need what it does not return: the
confidence of each character (for routing and review) and where along the line each character
sits (for word boxes in hOCR/ALTO), with batches grouped by width so padding stays small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from appliance.engines.ppocr_onnx.best_class import (
    BEST_OUTPUTS,
    BLANK_OUTPUT,
    EVIDENCE_OUTPUTS,
    SPACE_OUTPUT,
    TOP_CLASSES,
    TOP_INDICES,
    TOP_SCORES,
    has_best_class,
)
from appliance.engines.ppocr_onnx.sessions import ModelSession
from appliance.engines.ppocr_onnx.shapes import choose_width
from appliance.engines.ppocr_onnx.step_evidence import StepEvidence, fold_keys
from appliance.errors import ModelError

_HEIGHT = 48
_DERIVED_OUTPUTS = (*BEST_OUTPUTS, SPACE_OUTPUT, *EVIDENCE_OUTPUTS)
# PP-OCRv5's training width; narrower batches are padded to it. Measured on the first 20
# receipts (geo-ordered CER): padding only to 160 px gives 6.22%, to 64 px 6.34%, against 6.08%
# here, so the extra context is worth its cost in time.
_MIN_WIDTH = 320


@dataclass
class LineRead:
    """Text of one line crop with per-character confidences and centre positions (0..1 of width).

    `space_before[i]`: the highest probability the recogniser gave the space class on the steps
    between character i-1 and character i (0 for the first character); None where the head has
    no space class (a charset without one), or, with best_class.py's outputs, not as its last class.
    `likelihood`: how likely another reader's text of the line is to the recogniser (log P), from
    the likeliest classes it kept at each step where it was asked to (`TextRecognizer.keep_evidence`).
    """

    text: str
    confidences: list[float]
    positions: list[float]
    space_before: list[float] | None = None
    likelihood: Callable[[str], float] | None = None

    @property
    def confidence(self) -> float:
        return float(np.mean(self.confidences)) if self.confidences else 0.0


def read_keys(path: Path) -> list[str]:
    """The dictionary's entries, one per line, as the file has them (blank and space included)."""
    keys = path.read_text(encoding="utf-8").split("\n")
    if keys and keys[-1] == "":
        keys.pop()
    return [key.rstrip("\r") for key in keys]


def model_keys(path: Path) -> list[str]:
    """The dictionary a recogniser carries in its ONNX metadata, with the CTC blank and the space.

    PP-OCRv6's recognisers ship no dictionary file: the `character` entry of the model's metadata
    lists its characters, one per line, and the head adds the blank in front and a space at the
    end (18,708 characters, 18,710 classes). A model with neither a file nor this entry is refused.
    """
    import onnx  # only here: reading a model's metadata needs the protobuf, not a session

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # onnx raises protobuf's untyped errors for damaged files
        raise ModelError(f"cannot read the metadata of {path}: {error}") from None
    metadata = {entry.key: entry.value for entry in model.metadata_props}
    if "character" not in metadata:
        raise ModelError(
            f"{path} carries no `character` dictionary in its metadata and the manifest names no "
            "keys file; add the model's dictionary to the manifest as role 'keys'"
        )
    characters = metadata["character"].split("\n")
    return ["blank", *characters, " "]


def dictionary(paths: dict[str, Path]) -> list[str]:
    """A verified set's dictionary: its keys file (PP-OCRv5), else the recogniser's metadata (PP-OCRv6)."""
    return read_keys(paths["keys"]) if "keys" in paths else model_keys(paths["rec"])


def align_keys(keys: list[str], classes: int, source: str, kept: list[int] | None = None) -> list[str]:
    """The character table, index-aligned with the model's output classes.

    ppocr_keys_v5.txt already holds the CTC blank as line 0 and a space as its last line, so the
    file is used as is (model_keys adds both to a metadata dictionary); a table whose length
    differs from the model's classes would shift every character and is refused. `kept`: the
    entries of a head cut to a charset, in its order.
    """
    if kept is not None:
        keys = [keys[index] for index in kept]
    if len(keys) != classes:
        raise ModelError(
            f"{source} has {len(keys)} entries but the recognition model has {classes} output classes"
        )
    return keys


_NORM_MEAN = 0.5
_NORM_STD = 0.5


def normalize_into(image: np.ndarray, out: np.ndarray) -> None:
    """(image / 255 - 0.5) / 0.5 of an (H, W, C) uint8 line, written channels first into `out` (C, H, W).

    In place, in float32 like the arithmetic it replaces: the same values, without the four
    temporaries and the transposed copy (half the time a line).
    """
    np.divide(image.transpose(2, 0, 1), np.float32(255.0), out=out)
    out -= _NORM_MEAN
    out /= _NORM_STD


class TextRecognizer:
    """Reads batches of line crops."""

    def __init__(
        self,
        session: ModelSession,
        keys: list[str],
        batch_size: int,
        min_width: int = _MIN_WIDTH,
        *,
        pool: Executor | None = None,
        kept: list[int] | None = None,
        widths: Mapping[int, ModelSession] | None = None,
        classes: int | None = None,
    ) -> None:
        """`pool`: batches run on its threads at once (onnxruntime runs a session from many threads).

        `kept`: the dictionary entries of a head cut to a charset (charset.py), in the head's order.
        `widths`: one session per fixed batch width (shapes.py); each line goes to the narrowest
        width that holds it and every batch is filled up to `batch_size` rows with blank ones,
        whose reads are dropped. None: `session` runs batches of any shape.
        `classes`: the head's class count, for a graph that answers only its best class per step.
        """
        self._session = session
        self._widths = dict(sorted(widths.items())) if widths else None
        self._pool = pool
        self._min_width = min_width
        self._input = session.get_inputs()[0].name
        # A graph with best_class.append_best_class's outputs hands back one class per step.
        self._best = has_best_class([output.name for output in session.get_outputs()])
        self._batch_size = batch_size
        probabilities = [output for output in session.get_outputs() if output.name not in _DERIVED_OUTPUTS]
        head = probabilities[0].shape[-1] if probabilities else classes
        if not isinstance(head, int):
            if not probabilities:
                raise ValueError(
                    "a recogniser that answers only its best class per step needs its class count"
                )
            head = self._probe_classes()
        classes = head
        self._keys = align_keys(keys, classes, "the dictionary", kept)
        # The space class (PP-OCR heads put it last); None for a head cut to a charset without one.
        spaces = [index for index, key in enumerate(self._keys) if key == " "]
        self._space = spaces[-1] if spaces else None
        # With the best-class outputs, the graph also gives the last class's probability: the
        # space's, where the space is the last class.
        outputs = [output.name for output in session.get_outputs()]
        self._space_output = self._best and SPACE_OUTPUT in outputs and self._space == len(self._keys) - 1
        self._evidence_classes = 0
        self._folded = fold_keys(self._keys)
        # The best-class graph's own likeliest classes a step, where it has them (best_class.py).
        self._top_outputs = self._best and all(name in outputs for name in EVIDENCE_OUTPUTS)

    def keep_evidence(self, classes: int) -> bool:
        """Keep each read's `classes` likeliest classes a step (LineRead.likelihood); 0 stops it.

        A graph that answers only its best class a step (the GPU's) keeps its TOP_CLASSES where it
        has them (best_class.EVIDENCE_OUTPUTS; not a branched session's); without them nothing
        is kept, and this returns False.
        """
        if self._best:
            self._evidence_classes = min(max(0, classes), TOP_CLASSES) if self._top_outputs else 0
        else:
            self._evidence_classes = max(0, classes)
        return bool(self._evidence_classes) or classes == 0

    @property
    def keys(self) -> list[str]:
        """The characters of the output classes, in order (the blank first)."""
        return list(self._keys)

    def _probe_classes(self) -> int:
        if self._widths is not None:
            # The shape the bucket's session runs anyway: a probe must not give it a second one.
            width, session = next(iter(self._widths.items()))
            probe = np.zeros((self._batch_size, 3, _HEIGHT, width), dtype=np.float32)
            return int(session.run(None, {self._input: probe})[0].shape[-1])
        probe = np.zeros((1, 3, _HEIGHT, _MIN_WIDTH), dtype=np.float32)
        return int(self._session.run(None, {self._input: probe})[0].shape[-1])

    def recognize(self, crops: list[np.ndarray]) -> list[LineRead]:
        results: list[LineRead | None] = [None] * len(crops)
        # Sorting by aspect ratio keeps lines of similar width together, so little is padding.
        order = sorted(range(len(crops)), key=lambda i: crops[i].shape[1] / max(crops[i].shape[0], 1))
        groups = [order] if self._widths is None else self._width_groups(crops, order)
        batches = [
            group[start : start + self._batch_size]
            for group in groups
            for start in range(0, len(group), self._batch_size)
        ]

        def run(indices: list[int]) -> list[LineRead]:
            return self._run_batch([crops[i] for i in indices])

        reads = map(run, batches) if self._pool is None or len(batches) < 2 else self._pool.map(run, batches)
        for indices, batch_reads in zip(batches, reads, strict=True):
            for index, read in zip(indices, batch_reads, strict=True):
                results[index] = read
        return [read for read in results if read is not None]

    def _width_groups(self, crops: list[np.ndarray], order: list[int]) -> list[list[int]]:
        """`order` split by the width bucket each line goes to (the order kept inside each)."""
        assert self._widths is not None
        groups: dict[int, list[int]] = {}
        for index in order:
            groups.setdefault(self._bucket_of(crops[index]), []).append(index)
        return list(groups.values())

    def _bucket_of(self, crop: np.ndarray) -> int:
        assert self._widths is not None
        width = max(self._min_width, math.ceil(_HEIGHT * crop.shape[1] / max(crop.shape[0], 1)))
        return choose_width(width, list(self._widths))

    def _run_batch(self, crops: list[np.ndarray]) -> list[LineRead]:
        ratios = [crop.shape[1] / max(crop.shape[0], 1) for crop in crops]
        batch_width = max(self._min_width, math.ceil(_HEIGHT * max(ratios)))
        session = self._session
        if self._widths is not None:
            # Every line of the batch goes to one bucket (recognize groups them); a line wider
            # than the widest bucket is squeezed to it below, as a batch squeezes to its width.
            batch_width = self._bucket_of(max(crops, key=lambda crop: crop.shape[1] / max(crop.shape[0], 1)))
            session = self._widths[batch_width]
        # Under fixed shapes the batch is made at its fixed rows, the ones after the lines left
        # blank: a filled-up copy of a 3200 px batch is 15 MB for nothing.
        filled = self._batch_size if self._widths is not None else len(crops)
        tensor = np.zeros((filled, 3, _HEIGHT, batch_width), dtype=np.float32)
        widths = []
        for row, (crop, ratio) in enumerate(zip(crops, ratios, strict=True)):
            width = min(batch_width, max(1, math.ceil(_HEIGHT * ratio)))
            resized = cv2.resize(crop, (width, _HEIGHT), interpolation=cv2.INTER_LINEAR)
            normalize_into(resized, tensor[row, :, :, :width])
            widths.append(width)
        # Blank rows added to fill a fixed batch are cut off here, unread.
        rows = len(crops)
        if self._best:
            names = [*BEST_OUTPUTS, SPACE_OUTPUT] if self._space_output else list(BEST_OUTPUTS)
            if self._evidence_classes:
                names += EVIDENCE_OUTPUTS
            fetched = dict(zip(names, session.run(names, {self._input: tensor}), strict=True))
            scores, best = fetched[BEST_OUTPUTS[0]], fetched[BEST_OUTPUTS[1]]
            space = fetched.get(SPACE_OUTPUT)
            spaces = space[:rows] if space is not None else [None] * rows
            reads = [
                self._decode(row_best, row_scores, width, batch_width, row_space)
                for row_best, row_scores, width, row_space in zip(
                    best[:rows], scores[:rows], widths, spaces, strict=True
                )
            ]
            if self._evidence_classes:
                for row, (read, width) in enumerate(zip(reads, widths, strict=True)):
                    steps = _own_steps(best.shape[1], width, batch_width)
                    blank = fetched[BLANK_OUTPUT][row, :steps]
                    if space is not None:
                        blank = blank + space[row, :steps]  # the space counts as a blank (step_evidence.py)
                    read.likelihood = StepEvidence.of_top(
                        fetched[TOP_INDICES][row, :steps],
                        fetched[TOP_SCORES][row, :steps],
                        blank,
                        self._folded,
                    ).log_likelihood
            return reads
        output = session.run(None, {self._input: tensor})[0][:rows]
        reads = []
        for probs, width in zip(output, widths, strict=True):
            classes = probs.argmax(axis=1)
            space_probs = probs[:, self._space] if self._space is not None else None
            scores = probs[np.arange(len(classes)), classes]
            read = self._decode(classes, scores, width, batch_width, space_probs)
            if self._evidence_classes:
                steps = _own_steps(len(probs), width, batch_width)
                evidence = StepEvidence.of(probs[:steps], self._folded, self._evidence_classes)
                read.likelihood = evidence.log_likelihood
            reads.append(read)
        return reads

    def _decode(
        self,
        best: np.ndarray,
        scores: np.ndarray,
        width: int,
        batch_width: int,
        space: np.ndarray | None = None,
    ) -> LineRead:
        """Greedy CTC over each step's best class and its probability: repeats merged, blanks (0) dropped.

        `space`: the space class's probability at each step, kept as LineRead.space_before.
        """
        emitted = ctc_steps(best)
        # Each character's centre in the batch's pixels; its position is that share of the line's width.
        centres = (emitted + 0.5) * batch_width / len(best)
        return LineRead(
            text="".join([self._keys[index] for index in best[emitted].tolist()]),
            confidences=scores[emitted].tolist(),
            positions=np.minimum(1.0, centres / width).tolist(),
            space_before=None if space is None else gap_maxima(space, emitted),
        )


def _own_steps(steps: int, width: int, batch_width: int) -> int:
    """How many of a batch's CTC steps fall on the line itself, not on the padding to its right."""
    return max(1, math.ceil(steps * width / batch_width))


def ctc_steps(best: np.ndarray) -> np.ndarray:
    """The steps where greedy CTC writes a character: not the blank (0), not a repeat of the step before.

    Whole arrays, not a loop over the steps: a docs_zh line has up to 400 (batch width / 8).
    """
    previous = np.empty_like(best)
    previous[:1] = -1
    previous[1:] = best[:-1]
    return np.flatnonzero((best != 0) & (best != previous))


def gap_maxima(values: np.ndarray, emitted: np.ndarray) -> list[float]:
    """Per character, the highest of `values` on the steps strictly between it and the one before.

    0 for the first character and where two characters sit on neighbouring steps; one entry (0) for
    a line without characters, as LineRead.space_before always had. The maxima of all gaps come from
    one reduceat over the bounds (after the previous character, at this one) interleaved with the
    one-step spans between them, whose results are dropped.
    """
    maxima = [0.0] * max(1, len(emitted))
    if len(emitted) > 1:
        bounds = np.empty(2 * len(emitted) - 2, dtype=np.intp)
        bounds[0::2] = emitted[:-1] + 1
        bounds[1::2] = emitted[1:]
        reduced = np.maximum.reduceat(values, bounds)[0::2]
        maxima[1:] = np.where(np.diff(emitted) > 1, reduced, 0.0).tolist()
    return maxima
