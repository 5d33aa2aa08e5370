"""The engine cascade: the first engine reads every page, a second reader what a profile sends it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.distance import Levenshtein

from appliance.config import CascadeConfig
from appliance.document import Box, Line
from appliance.engines.base import PageText, SecondReader
from appliance.engines.details import CUT_SHORT_STOPS, CascadeRecord, ReadFigures
from appliance.engines.line_crop import VLM_LINE_MARGIN, crop_line, cut_box, is_upright, widen
from appliance.engines.text_lines import make_line
from appliance.pipeline.layout import order_page

log = logging.getLogger(__name__)

# A VLM line takes the box of the ONNX line it matches at least this well (rapidfuzz ratio, 0-100).
MIN_MATCH = 60.0
# `cascade.max_changes: auto` for a reader that names none (a VLM): on the receipts' own lines, a
# VLM read that changed four characters or more of the ONNX text made the page worse far more
# often than better (bench/README, "Corrections, not rewrites").
AUTO_MAX_CHANGES = 3
# The likeliest classes a CTC step keeps for `keep: joint` (ppocr_onnx/step_evidence.py): what
# the GPU's graph answers (best_class.TOP_CLASSES, which caps it there); what they leave of a step's
# probability is shared evenly among the other classes.
JOINT_EVIDENCE_CLASSES = 4


def decoding_totals(pages: list[dict[str, Any]]) -> dict[str, float]:
    """Sums of the VLM's decoding figures over pages' engine details (what the status API shows)."""
    totals: dict[str, float] = {}
    for details in pages:
        record = CascadeRecord.of(details)
        if record is not None and record.fallbacks:
            totals["fallbacks"] = totals.get("fallbacks", 0.0) + record.fallbacks
        figures = ReadFigures.of(details)
        if figures is None:
            continue
        totals["pages"] = totals.get("pages", 0.0) + 1
        for key, value in figures.decoding.items():
            totals[key] = totals.get(key, 0.0) + value
    return totals


def gpu_memory_peak(pages: list[dict[str, Any]]) -> int | None:
    """The highest GPU memory in use the VLM reported after any of the pages; None when none did.

    The device's memory in use (every process on the card), not the VLM's own share: see the
    engine's `GpuMemory`. A page read on the CPU reports none.
    """
    readings = [
        figures.gpu_memory_used_bytes
        for details in pages
        if (figures := ReadFigures.of(details)) is not None and figures.gpu_memory_used_bytes is not None
    ]
    return max(readings) if readings else None


def page_confidence(lines: list[Line]) -> float | None:
    characters = [c for line in lines for c in line.char_confidences]
    return sum(characters) / len(characters) if characters else None


class Cascade:
    """Decides per page whether a second reader reads it, gives it the first text as a draft, falls back.

    The second reader is any registered SecondReader (engines/factory.py): the VLM, or an ONNX
    recogniser that reads only line crops. A failure, timeout or loop never loses the page: the
    first read stands and the page says why.
    """

    def __init__(self, reader: SecondReader, config: CascadeConfig) -> None:
        self._reader = reader
        self._config = config
        # How much paper a line crop gets round the first engine's box, as a share of its height:
        # the reader's own `line_margin` where it has one (a recogniser wants the detector's crop).
        self._margin = float(getattr(reader, "line_margin", VLM_LINE_MARGIN))
        # Which read a re-read line keeps: for `auto` the reader's own `auto_keep` where it has one
        # (a recogniser keeps the second read), else the surer read, as measured for a VLM.
        self._keep = config.keep if config.keep != "auto" else getattr(reader, "auto_keep", "more_confident")
        self._max_changes = max_changes_for(config.max_changes, reader)

    @property
    def keep(self) -> str:
        """The rule a re-read line is kept by, `auto` resolved for this reader."""
        return self._keep

    def wants(self, first: PageText) -> tuple[bool, str]:
        mode = self._config.mode
        if mode == "off":
            return False, "cascade off"
        if self._config.unit == "lines" and first.lines:
            unsure = self.unsure_lines(first.lines)
            limit = self._config.min_confidence
            which = "(every line)" if mode == "always" else f"below confidence {limit:g}"
            return bool(unsure), f"{len(unsure)} of {len(first.lines)} ONNX lines {which}"
        if mode == "always":
            return True, "profile reads every page with the VLM"
        confidence = page_confidence(first.lines)
        if confidence is None:
            return True, "the ONNX engine read nothing"
        if confidence < self._config.min_confidence:
            return True, f"ONNX mean confidence {confidence:.3f} < {self._config.min_confidence:g}"
        return False, f"ONNX mean confidence {confidence:.3f} >= {self._config.min_confidence:g}"

    def unsure_lines(self, lines: list[Line]) -> list[int]:
        """Indices of the lines the VLM reads again when the unit is lines."""
        if self._config.mode == "always":
            return list(range(len(lines)))
        return [index for index, line in enumerate(lines) if line.confidence < self._config.min_confidence]

    def refiner(self, skip_reason: str | None) -> Callable[[np.ndarray, PageText], PageText]:
        """`refine` for one document, which may be one whose VLM reads must be skipped."""
        return lambda image, first: self.refine(image, first, skip_reason=skip_reason)

    def refine(self, image: np.ndarray, first: PageText, *, skip_reason: str | None = None) -> PageText:
        """The page as the cascade settles it: the VLM's read where it was wanted and succeeded.

        `skip_reason` is set when workers were lost to the VLM (vlm_breaker): this document's
        previous attempt, or several in a row. The VLM is the likeliest native crash there is, so
        this attempt keeps the ONNX read of every page it would have sent, and says why.
        """
        wanted, why = self.wants(first)
        # "vlm_used" keeps its name (the result JSON's readers know it); "reader" says which.
        record: dict[str, Any] = {"vlm_used": wanted, "why": why, "reader": self._reader.name}
        if not wanted:
            return _with(first, details={"cascade": record})
        if skip_reason is not None:
            record.update(vlm_used=False, route="onnx_fallback", error=f"VLM skipped: {skip_reason}")
            return _with(
                first,
                details={"cascade": record},
                warnings=[f"cascade: VLM skipped ({skip_reason}); the ONNX read stands"],
            )
        if self._config.unit == "lines" and first.lines:
            return self._refine_lines(image, first, record)
        hint = "\n".join(line.text for block in order_page(list(first.lines)) for line in block.lines)
        deadline = time.monotonic() + self._config.timeout_seconds
        try:
            second = self._reader.read(image, hint=hint, deadline=deadline)
        except Exception as error:  # any VLM failure (out of memory, a broken model): keep the ONNX read
            log.warning("VLM read failed, the ONNX read stands: %s", error)
            record.update(route="onnx_fallback", error=f"{type(error).__name__}: {error}")
            return _with(
                first,
                details={"cascade": record},
                warnings=[f"cascade: VLM failed ({error}); the ONNX read stands"],
            )
        figures = ReadFigures.of(second.details, self._reader.name)
        stop = figures.stop_reason if figures is not None else None
        if not second.lines and first.lines:
            # An empty answer where the ONNX engine found text is a failed read, not a blank page.
            stop = stop if stop in CUT_SHORT_STOPS else "empty answer"
        if stop in (*CUT_SHORT_STOPS, "empty answer"):
            record.update(route="onnx_fallback", error=f"VLM stopped: {stop}")
            return _with(
                first,
                details={"cascade": record, **second.details},
                warnings=[f"cascade: VLM stopped ({stop}); the ONNX read stands", *second.warnings],
                review_reasons=second.review_reasons,
                timings=second.timings_ms,
            )
        record["route"] = "vlm"
        lines = place_lines(second.lines, list(first.lines))
        return PageText(
            lines=lines,
            timings_ms={**first.timings_ms, **second.timings_ms},
            warnings=[*first.warnings, *second.warnings],
            details={**first.details, **second.details, "cascade": record},
            review_reasons=[*first.review_reasons, *second.review_reasons],
        )

    def _refine_lines(self, image: np.ndarray, first: PageText, record: dict[str, Any]) -> PageText:
        """The unsure lines read again; each failure keeps that line's ONNX read."""
        lines = list(first.lines)
        targets = self.unsure_lines(lines)
        deadline = time.monotonic() + self._config.timeout_seconds
        decoding: dict[str, float] = {}
        timings: dict[str, float] = {}
        kept: list[str] = []
        replaced = 0
        gpu_memory: int | None = None
        for index, second in self._second_reads(image, lines, targets, deadline):
            if second is None:
                left = len(targets) - targets.index(index)
                kept.append(f"{left} line(s) not sent: the page's time ran out")
                break
            if isinstance(second, Exception):
                log.warning("VLM read of a line failed, its ONNX read stands: %s", second)
                kept.append(f"line {index + 1}: {type(second).__name__}: {second}")
                continue
            line = lines[index]
            figures = ReadFigures.of(second.details, self._reader.name) or ReadFigures(decoding={})
            for key, value in figures.decoding.items():
                decoding[key] = decoding.get(key, 0.0) + value
            if figures.gpu_memory_used_bytes is not None:
                gpu_memory = max(gpu_memory or 0, figures.gpu_memory_used_bytes)
            for key, value in second.timings_ms.items():
                timings[key] = timings.get(key, 0.0) + value
            text = " ".join(vlm_line.text for vlm_line in second.lines).strip()
            stop = figures.stop_reason
            if figures.cut_short or not text:
                kept.append(f"line {index + 1}: VLM stopped: {stop if text else 'empty answer'}")
                continue
            again = line_read_again(second.lines, line, self._reader.name)
            if not takes_second(line, again, self._keep, self._max_changes, figures):
                continue  # the first read stands, and that is no failure
            lines[index] = again
            replaced += 1
        record.update(
            route="vlm_lines",
            keep=self._keep,
            max_changes=self._max_changes,
            lines_sent=len(targets),
            lines_replaced=replaced,
            lines_kept=kept,
        )
        # One entry per page, as a page read gives, so the status API's sums count pages.
        vlm_details: dict[str, Any] = {**decoding, "lines_read": len(targets)}
        if gpu_memory is not None:
            vlm_details["gpu_memory_used_bytes"] = gpu_memory
        return PageText(
            lines=lines,
            timings_ms={**first.timings_ms, **timings},
            warnings=[*first.warnings, *(f"cascade: {reason}; the ONNX read stands" for reason in kept)],
            details={**first.details, self._reader.name: vlm_details, "cascade": record},
            review_reasons=list(first.review_reasons),
        )

    def _second_reads(
        self, image: np.ndarray, lines: list[Line], targets: list[int], deadline: float
    ) -> Iterator[tuple[int, PageText | Exception | None]]:
        """Each target line's second read in order: a PageText, the error it failed with, or None.

        None comes once the page's time ran out; nothing after it is read.
        A reader that reads lines side by side (`lines_together` > 1, `read_lines`) gets them in
        groups, each line with its ONNX text as its draft; a group that fails is read again one
        line at a time, so one bad crop costs only its own line. A line alone in its group is read
        alone: side by side saves passes only where there are several.
        """
        together = int(getattr(self._reader, "lines_together", 1))
        read_lines = getattr(self._reader, "read_lines", None)
        size = together if together > 1 and read_lines is not None else 1
        for start in range(0, len(targets), size):
            group = targets[start : start + size]
            if len(group) > 1 and read_lines is not None and time.monotonic() < deadline:
                try:
                    crops = [_crop(image, lines, index, self._margin) for index in group]
                    reads = read_lines(crops, deadline=deadline, hints=[lines[i].text for i in group])
                except Exception as error:  # the group is read again line by line below
                    log.warning(
                        "VLM read of %d lines together failed, read one by one: %s", len(group), error
                    )
                else:
                    yield from zip(group, reads, strict=True)
                    continue
            for index in group:
                if time.monotonic() >= deadline:
                    yield index, None
                    return
                yield index, self._read_one(image, lines, index, deadline)

    def _read_one(
        self, image: np.ndarray, lines: list[Line], index: int, deadline: float
    ) -> PageText | Exception:
        try:
            crop = _crop(image, lines, index, self._margin)
            return self._reader.read(crop, hint=lines[index].text, deadline=deadline)
        except Exception as error:  # the VLM failing on one line keeps that line's ONNX read
            return error


def _crop(image: np.ndarray, lines: list[Line], index: int, share: float = VLM_LINE_MARGIN) -> np.ndarray:
    """Line `index`'s region of the page with a margin: cut from the page, or rectified if it slants.

    A line cut from the page stops short of the lines beside it on its row (`_beside`). A line
    the first engine read upside down is turned upright: neither reader reads it turned.
    """
    line = lines[index]
    if len(line.polygon) == 4:
        quad = np.array(line.polygon, dtype=np.float64)
        if not is_upright(quad):
            # A slanted line's box also holds the ends of the lines above and below it, which a
            # VLM would read as part of this one.
            height = float(np.linalg.norm(quad[3] - quad[0]))
            return _upright(crop_line(image, widen(quad, height * share))[0], line)
    return _upright(cut_box(image, line.box, share, _beside(line, lines)), line)


def _beside(line: Line, lines: list[Line]) -> tuple[float, float]:
    """How far a crop of `line` may reach left and right: halfway to the lines beside it on its row.

    The detector grows each box past its glyphs, so the boxes of a receipt's columns touch or
    overlap, and a margin past them takes in the first glyph of the next column (`5 X` beside
    `0.60` read `5 X (`; bench/README, "Corrections, not rewrites").
    """
    x0, y0, x1, y1 = line.box
    middle = (x0 + x1) / 2
    left, right = -np.inf, np.inf
    for other in lines:
        if other is line:
            continue
        ox0, oy0, ox1, oy1 = other.box
        if min(y1, oy1) - max(y0, oy0) < 0.5 * min(y1 - y0, oy1 - oy0):
            continue  # not on this line's row
        if ox0 > middle and ox1 > x1:
            right = min(right, (x1 + ox0) / 2)
        elif ox1 < middle and ox0 < x0:
            left = max(left, (ox1 + x0) / 2)
    return float(left), float(right)


def _upright(crop: np.ndarray, line: Line) -> np.ndarray:
    return np.ascontiguousarray(crop[::-1, ::-1] if line.rotated_180 else crop)


def max_changes_for(setting: Literal["auto"] | int | None, reader: object) -> int | None:
    """`cascade.max_changes` for this reader: `auto` is its `auto_max_changes`, else AUTO_MAX_CHANGES."""
    if setting == "auto":
        return getattr(reader, "auto_max_changes", AUTO_MAX_CHANGES)
    return setting


def changed_characters(first: str, second: str) -> int:
    """Character edits between two reads of a line, spaces and letter case aside."""
    return Levenshtein.distance("".join(first.split()).casefold(), "".join(second.split()).casefold())


def takes_second(
    line: Line, again: Line, keep: str, max_changes: int | None, figures: ReadFigures | None = None
) -> bool:
    """Whether a line read again takes its second read (`cascade.keep`, `cascade.max_changes`).

    `more_confident` keeps the first read when it is at least as sure. `joint` keeps it then too,
    and also when the two readers together find it at least as likely (`joint_scores`; where either
    left no score, `joint` is `more_confident`). A second reader out of its depth (a receipt line
    reader on Chinese lines) finds the first read very unlikely and can carry the sum alone: its own
    surer read is then still needed (bench/README.md). `max_changes` keeps it when
    the second read changes more characters than that: it may correct a line, not rewrite it. A
    second read that disagrees with most of a line was mostly reading something its crop does not
    hold well (a fragment of a word, decoration, another script), where the first read had the
    whole page round it (bench/README, "Corrections, not rewrites").
    """
    if keep in ("more_confident", "joint") and again.confidence <= line.confidence:
        return False
    if keep == "joint":
        scores = joint_scores(line, again, figures)
        if scores is not None and scores[1] <= scores[0]:
            return False
    return max_changes is None or changed_characters(line.text, again.text) <= max_changes


def joint_scores(line: Line, again: Line, figures: ReadFigures | None) -> tuple[float, float] | None:
    """The log-probabilities of the first and second reads, each summed over both readers, or None.

    The first engine scores both texts with its `likelihood` (a CTC recogniser's kept step
    probabilities), the second reader both with its own and its hint's log P (`score_hints`).
    A product of the two readers' probabilities: each reader vouches for what it sees clearly, and
    a text both find likely is chosen over one that only its own reader likes.
    """
    if line.likelihood is None or figures is None:
        return None
    own, hint = figures.read_log_likelihood, figures.hint_log_likelihood
    if own is None or hint is None:
        return None
    return hint + line.likelihood(line.text), own + line.likelihood(again.text)


def prepare_joint(first: object, reader: object) -> bool:
    """Ask the first engine to keep step evidence and the second reader to score hints (`keep: joint`).

    False when either cannot: lines are then kept by `more_confident`.
    """
    keep_evidence = getattr(first, "keep_step_evidence", None)
    score_hints = getattr(reader, "score_hints", None)
    if keep_evidence is None or score_hints is None:
        return False
    evidence, scores = keep_evidence(JOINT_EVIDENCE_CLASSES), score_hints(True)
    return bool(evidence and scores)


def line_read_again(vlm_lines: list[Line], onnx_line: Line, engine: str) -> Line:
    """The VLM's text of one line crop, in the ONNX line's box (pieces joined by spaces)."""
    text_parts: list[str] = []
    confidences: list[float] = []
    for vlm_line in vlm_lines:
        if not vlm_line.text:
            continue
        if text_parts:
            text_parts.append(" ")
            confidences.append(min(vlm_line.char_confidences, default=0.0))
        text_parts.append(vlm_line.text)
        confidences.extend(vlm_line.char_confidences)
    text, confidences = single_spaced("".join(text_parts), confidences)
    placed = make_line(text, confidences, onnx_line.box, engine)
    placed.polygon = onnx_line.polygon
    return placed


def single_spaced(text: str, confidences: list[float]) -> tuple[str, list[float]]:
    """`text` with one space between words and none at its ends, its confidences kept in step.

    A line reader writes the gaps of aligned receipt columns as runs of spaces (its training labels
    do), where the first engine writes one space a gap: a line's text must not depend on which
    engine wrote it, and an archive search for `RM Tax` must find `RM   Tax`. The gaps' widths
    stay in the words' boxes. Confidences that do not match the text one to one are left as they are.
    """
    aligned = len(confidences) == len(text)
    kept_text: list[str] = []
    kept_confidences: list[float] = []
    for index, char in enumerate(text):
        if char.isspace() and (not kept_text or kept_text[-1] == " "):
            continue
        kept_text.append(" " if char.isspace() else char)  # a tab is written as one space too
        if aligned:
            kept_confidences.append(confidences[index])
    if kept_text and kept_text[-1] == " ":
        kept_text.pop()
        if aligned:
            kept_confidences.pop()
    return "".join(kept_text), kept_confidences if aligned else confidences


def _with(
    page: PageText,
    details: dict[str, Any],
    warnings: list[str] | None = None,
    review_reasons: list[str] | None = None,
    timings: dict[str, float] | None = None,
) -> PageText:
    return PageText(
        lines=page.lines,
        timings_ms={**page.timings_ms, **(timings or {})},
        warnings=[*page.warnings, *(warnings or [])],
        details={**page.details, **details},
        review_reasons=[*page.review_reasons, *(review_reasons or [])],
    )


def place_lines(vlm_lines: list[Line], onnx_lines: list[Line]) -> list[Line]:
    """Give each VLM line the box of the ONNX line it matches; lines with no match sit between neighbours.

    The VLM writes text without boxes; the ONNX engine found where each line is. Matching is by
    text similarity, preferring ONNX lines after the last match so a repeated line ("TOTAL") lands
    in order. Unmatched lines share the band between the matched lines around them.
    """
    ordered = [line for block in order_page(list(onnx_lines)) for line in block.lines]
    used: set[int] = set()
    boxes: list[Line | None] = []
    last = -1
    for line in vlm_lines:
        best, best_score = None, MIN_MATCH
        for index, candidate in enumerate(ordered):
            if index in used:
                continue
            score = fuzz.ratio(line.text, candidate.text) + (0.5 if index > last else 0.0)
            if score > best_score:
                best, best_score = index, score
        if best is None:
            boxes.append(None)
        else:
            used.add(best)
            last = best
            boxes.append(ordered[best])
    if not vlm_lines:
        return []
    page_box = _page_box(onnx_lines, vlm_lines)
    placed: list[Line] = []
    index = 0
    while index < len(vlm_lines):
        match = boxes[index]
        if match is not None:
            placed.append(_moved(vlm_lines[index], match.box, match.polygon))
            index += 1
            continue
        run_end = index
        while run_end < len(vlm_lines) and boxes[run_end] is None:
            run_end += 1
        before = boxes[index - 1] if index > 0 else None
        after = boxes[run_end] if run_end < len(vlm_lines) else None
        above = before.box[3] if before is not None else page_box[1]
        below = after.box[1] if after is not None else page_box[3]
        if below <= above:
            below = above + (page_box[3] - page_box[1]) / max(len(vlm_lines), 1)
        step = (below - above) / (run_end - index)
        for offset in range(run_end - index):
            y0 = above + offset * step
            box = (page_box[0], y0, page_box[2], y0 + step)
            placed.append(_moved(vlm_lines[index + offset], box, None))
        index = run_end
    return placed


def _page_box(onnx_lines: list[Line], vlm_lines: list[Line]) -> Box:
    source = onnx_lines or vlm_lines
    return (
        min(line.box[0] for line in source),
        min(line.box[1] for line in source),
        max(line.box[2] for line in source),
        max(line.box[3] for line in source),
    )


def _moved(line: Line, box: Box, polygon: tuple[tuple[float, float], ...] | None) -> Line:
    """The line placed in `box`, its words spread along it in proportion to their characters."""
    placed = make_line(line.text, line.char_confidences, box, line.engine)
    if polygon is not None:
        placed.polygon = polygon
    return placed
