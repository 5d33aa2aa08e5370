"""Greedy-reads a folder of line crops with a trained export and prints its character error rates.

    python -m train.eval_lines --hf DIR --crops DIR [--out results.json] [--limit N] [--x-scale F] [--worst N]
        [--against READS.json] [--tone GAIN OFFSET] [--levels INK PAPER]

`crops/labels.jsonl` holds `{"file": ..., "text": ...}` per crop. Every crop goes through
`train.render.prepare_line`, the same contract as in training and in the appliance's caller.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import cv2
import numpy as np
from rapidfuzz.distance import Levenshtein

from appliance.engines.vlm_gguf.line_image import (
    DEFAULT_LINE_INPUT,
    LINE_HEIGHT,
    MAX_WIDTH,
    LineInput,
    drawn_width,
)
from bench.text_forms import normalize, normalize_spaced
from train.line_shapes import grey_edge_share, prepared_looks
from train.make_crops import read_crops
from train.render import prepare_line
from train.text_source import letter_case

MAX_NEW_TOKENS = 160  # a full-width line (1,120 px) holds up to about 110 characters


def edit_count(pairs: Sequence[tuple[str, str]], spaced: bool = False) -> int:
    """Case-insensitive edits over (truth, hypothesis) pairs, whitespace-free unless `spaced`."""
    norm = normalize_spaced if spaced else normalize
    return sum(Levenshtein.distance(norm(t, True), norm(h, True)) for t, h in pairs)


def char_count(truth: str, spaced: bool = False) -> int:
    """The characters `edit_count` scores a truth over: whitespace-free unless `spaced`."""
    return len((normalize_spaced if spaced else normalize)(truth, True))


def cer(pairs: Sequence[tuple[str, str]], spaced: bool = False) -> float:
    """Micro-averaged, case-insensitive CER over (truth, hypothesis) pairs: edits / truth characters."""
    chars = sum(char_count(t, spaced) for t, _ in pairs)
    return edit_count(pairs, spaced) / max(chars, 1)


def unsure_crops(hints: Path, below: float) -> set[str]:
    """The crops the ONNX reader read with less than `below` confidence, from a --save-hints file."""
    # Here, not in train.paired: train.ensemble runs in the training environment, which has no scipy.
    return {
        read["file"] for read in json.loads(hints.read_text(encoding="utf-8")) if read["confidence"] < below
    }


def edit_breakdown(pairs: Sequence[tuple[str, str]], top: int = 12, long_line: int = 6) -> dict[str, Any]:
    """Where the whitespace-free, case-insensitive edits of `cer` fall.

    How many there are, how many of them sit on lines more than half wrong (lines misread as a
    whole, against a character here and there), how many lines of at least `long_line` characters
    are more than half wrong (the ones worth looking at: a short line is lost by one slip), and
    the most common single edits.
    """
    counts: Counter[str] = Counter()
    edits = on_lost_lines = long_lost_lines = 0
    for truth, read in pairs:
        t, r = normalize(truth, True), normalize(read, True)
        operations = Levenshtein.editops(t, r)
        edits += len(operations)
        if len(operations) > len(t) / 2:
            on_lost_lines += len(operations)
            long_lost_lines += len(t) >= long_line
        for op in operations:
            if op.tag == "replace":
                counts[f"{t[op.src_pos]!r}->{r[op.dest_pos]!r}"] += 1
            elif op.tag == "delete":
                counts[f"{t[op.src_pos]!r} lost"] += 1
            else:
                counts[f"{r[op.dest_pos]!r} added"] += 1
    return {
        "edits": edits,
        "edits_on_lines_over_half_wrong": on_lost_lines,
        "long_lines_over_half_wrong": long_lost_lines,
        "common": counts.most_common(top),
    }


# Characters whose reading `by_truth_char` reports: the receipts' marks, and the digits that
# condensed and thermal faces draw like letters or like one another.
WATCHED_CHARS = "'#@%0568"


def by_truth_char(pairs: Sequence[tuple[str, str]], chars: str = WATCHED_CHARS) -> dict[str, dict[str, int]]:
    """How each of `chars` is read: in the truths, got wrong, and added on lines that lack it.

    `in_truths`: how often the truths hold it; `wrong`: how many of those an edit replaces or
    drops; `lines_added`: on how many lines the read holds it more often than the truth. Counted
    on the whitespace-free, case-insensitive forms that `cer` scores.
    """
    counts = {char: {"in_truths": 0, "wrong": 0, "lines_added": 0} for char in chars}
    for truth, read in pairs:
        t, r = normalize(truth, True), normalize(read, True)
        for char in chars:
            counts[char]["in_truths"] += t.count(char)
            counts[char]["lines_added"] += r.count(char) > t.count(char)
        for op in Levenshtein.editops(t, r):
            if op.tag != "insert" and t[op.src_pos] in counts:
                counts[t[op.src_pos]]["wrong"] += 1
    return counts


def char_kind(char: str) -> str:
    """`digit`, `letter` or `mark`: the kinds of character whose edits `edits_by_kind` counts."""
    return "digit" if char.isdigit() else "letter" if char.isalpha() else "mark"


def edits_by_kind(pairs: Sequence[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """Each kind's characters in the truths and the edits that fall on it, as `cer` counts edits.

    A replaced or dropped character's edit is its truth character's kind; an added one's, the
    read character's: where two readers differ, digits against letters against marks.
    """
    counts = {kind: {"in_truths": 0, "edits": 0} for kind in ("digit", "letter", "mark")}
    for truth, read in pairs:
        t, r = normalize(truth, True), normalize(read, True)
        for char in t:
            counts[char_kind(char)]["in_truths"] += 1
        for op in Levenshtein.editops(t, r):
            char = r[op.dest_pos] if op.tag == "insert" else t[op.src_pos]
            counts[char_kind(char)]["edits"] += 1
    return counts


def compare_kinds(truths: Sequence[str], reads: Sequence[str], others: Sequence[str]) -> list[dict[str, Any]]:
    """`edits_by_kind` for a reader and another reader of the same lines, a row for each kind."""
    mine = edits_by_kind(list(zip(truths, reads, strict=True)))
    theirs = edits_by_kind(list(zip(truths, others, strict=True)))
    return [{"kind": kind, **counts, "edits_other": theirs[kind]["edits"]} for kind, counts in mine.items()]


def compare_chars(
    truths: Sequence[str], reads: Sequence[str], others: Sequence[str], chars: str = "0123456789"
) -> list[dict[str, Any]]:
    """`by_truth_char` for a reader and another reader of the same lines, a row for each of `chars`."""
    mine = by_truth_char(list(zip(truths, reads, strict=True)), chars)
    theirs = by_truth_char(list(zip(truths, others, strict=True)), chars)
    return [
        {
            "char": char,
            "in_truths": mine[char]["in_truths"],
            "wrong": mine[char]["wrong"],
            "wrong_other": theirs[char]["wrong"],
            "lines_added": mine[char]["lines_added"],
            "lines_added_other": theirs[char]["lines_added"],
        }
        for char in chars
    ]


LENGTH_BANDS = (0, 5, 10, 20)  # truth characters (whitespace-free): 0-4, 5-9, 10-19, 20 and more


def _band(value: float, bands: Sequence[int]) -> str:
    """The band of ascending `bands` (lower bounds, the first 0) that `value` falls in: `10-19`, `20+`."""
    low = max(band for band in bands if band <= value)
    higher = [band for band in bands if band > low]
    return f"{low}-{higher[0] - 1}" if higher else f"{low}+"


def length_band(truth: str, bands: Sequence[int] = LENGTH_BANDS) -> str:
    """The band of `bands` that the truth's whitespace-free length falls in (`10-19`, `20+`)."""
    return _band(len(normalize(truth, True)), bands)


CHAR_WIDTH_BANDS = (0, 20, 26, 32)  # pixels of the model's 28-px-high image a printed character gets


def char_width_band(width: int, truth: str, bands: Sequence[int] = CHAR_WIDTH_BANDS) -> str:
    """The band of `bands` that a line drawn `width` px wide gives each of its truth's characters.

    The spaces between words count: they take room in the print. Where a reader loses on narrow
    print (condensed faces, a long line squeezed to the model's widest image), the low bands show it.
    """
    return f"{_band(width / max(1, len(truth.strip())), bands)} px a character"


def _drawn_grey(image: np.ndarray, width: int) -> np.ndarray:
    """The grey levels of a prepared line's first `width` columns (its print, the padding cut off)."""
    drawn = image[:, :width]
    return drawn.mean(axis=2) if drawn.ndim == 3 else drawn.astype(float)


INK_FILL_BANDS = (0, 75, 95)  # percent of a line image's rows from its first inked row to its last


def ink_fill_band(image: np.ndarray, width: int, bands: Sequence[int] = INK_FILL_BANDS) -> str:
    """The band of `bands` that the rows from the line image's first inked row to its last fall in.

    `image` is the prepared line (`prepare_line`: 28 rows, the line in its first `width` columns).
    A row is inked where 1% of its pixels are darker than the paper (the image's 90th percentile)
    by more than 60 of 255. Ink over the whole height is a box cut tight to the print, or one that
    took in its neighbours' ascenders and descenders; a reader that loses there is shown so.
    """
    gray = _drawn_grey(image, width)
    inked = np.flatnonzero(((np.percentile(gray, 90) - gray) > 60).mean(axis=1) >= 0.01)
    share = 0.0 if inked.size == 0 else (inked[-1] - inked[0] + 1) / gray.shape[0]
    return f"ink over {_band(100 * share, bands)}% of the height"


DARK_SHARE_BANDS = (0, 13, 16, 19)  # percent of a line image's pixels nearer the ink than the paper


def dark_share_band(image: np.ndarray, width: int, bands: Sequence[int] = DARK_SHARE_BANDS) -> str:
    """The band of `bands` that the share of the prepared line's pixels darker than half-way falls in.

    `image` is the prepared line (`prepare_line`), the line in its first `width` columns; the share
    is `train.line_shapes`' dark share. Thin print and light faces fall in the low bands, bold
    faces, over-inked ribbons and smudged scans in the high ones: where a reader loses by how heavy
    the strokes are, the bands show it.
    """
    return f"{_band(100 * prepared_looks(_drawn_grey(image, width))[3], bands)}% of pixels dark"


GREY_EDGE_BANDS = (0, 10, 30, 50)  # percent of a crop's inked pixels that are grey (`grey_edge_share`)


def grey_edge_band(share: float | None, bands: Sequence[int] = GREY_EDGE_BANDS) -> str:
    """The band of `bands` that a crop's grey edge share (`train.line_shapes.grey_edge_share`) falls in.

    One-bit scans and crisp prints fall in the low bands (hard edges, no grey), blurred, resampled
    and anti-aliased print in the high ones. A blank crop (None) is a band of its own.
    """
    if share is None:
        return "no print to measure edges on"
    return f"{_band(100 * share, bands)}% of the ink grey"


def cap_band(width: int, cap: int = MAX_WIDTH) -> str:
    """Whether a line drawn `width` px wide (`drawn_width`) met the contract's cap on its width.

    A line that meets it is squeezed to it: its glyphs get fewer pixels than its neighbours' at the
    same stretch. Read with a wider cap (`--max-tokens`), the same lines are those drawn at or
    past the contract's, so both readings band the same lines.
    """
    return f"{'at or over' if width >= cap else 'under'} the {cap // LINE_HEIGHT}-token cap"


def compare_by(
    keys: Sequence[str], truths: Sequence[str], reads: Sequence[str], others: Sequence[str]
) -> list[dict[str, Any]]:
    """CER (as `cer`) and edits of `reads` and of `others` (another reader's text of the same crops) by key.

    Where a reader loses to another: by line length (`length_band`), by how the line is printed
    (`letter_case` of the other reader's text), ... Keys in sorted order; `edits` - `edits_other`
    is what the reader loses there.
    """
    rows = []
    for key in sorted(set(keys)):
        chosen = [i for i, line_key in enumerate(keys) if line_key == key]
        mine = [(truths[i], reads[i]) for i in chosen]
        theirs = [(truths[i], others[i]) for i in chosen]
        rows.append(
            {
                "lines": key,
                "count": len(chosen),
                "cer": round(cer(mine), 4),
                "cer_other": round(cer(theirs), 4),
                "edits": edit_count(mine),
                "edits_other": edit_count(theirs),
            }
        )
    return rows


def worst_lines(lines: Sequence[tuple[str, str, str]], count: int) -> list[tuple[int, str, str, str]]:
    """The `count` (file, truth, read) lines with the most edits as `cer` counts them, most first."""
    scored = [(edit_count([(truth, read)]), name, truth, read) for name, truth, read in lines]
    return sorted(scored, key=lambda line: -line[0])[:count]


def lines_read_worse(lines: Sequence[tuple[str, str, str, str]]) -> list[tuple[int, str, str, str, str]]:
    """Of (file, truth, read, other reader's read) lines, those read worse than the other read them.

    Each as (edits beyond the other's, file, truth, read, other's read), most beyond first: where a
    reader loses to another line by line, to look at the crops themselves.
    """
    worse = []
    for name, truth, read, other in lines:
        beyond = edit_count([(truth, read)]) - edit_count([(truth, other)])
        if beyond > 0:
            worse.append((beyond, name, truth, read, other))
    return sorted(worse, key=lambda line: -line[0])


def load_export(hf_dir: Path, device: str) -> tuple[Any, Any]:
    """The model (eval mode) and tokenizer of an export written by train.train_vlm."""
    from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = Qwen2VLForConditionalGeneration.from_pretrained(hf_dir).to(device).eval()
    return model, tokenizer


def read_lines(
    model: Any, tokenizer: Any, images: Sequence[np.ndarray], batch: int = 64, pad: bool = False
) -> list[str]:
    """Greedy text of each prepared line image, batched among lines of one width (`read_scored`)."""
    return [text for text, _ in read_scored(model, tokenizer, images, batch, pad)]


def read_scored(
    model: Any, tokenizer: Any, images: Sequence[np.ndarray], batch: int = 64, pad: bool = False
) -> list[tuple[str, list[float]]]:
    """Greedy text of each prepared line image with the probability of each token it wrote.

    The probabilities are the appliance's raw confidences (the engine gives each character its
    token's), end of text left out as the engine leaves it out.

    pad=False reads each image exactly as the appliance sends it (a batch only holds lines of the
    same width: many small batches); pad=True widens each batch of neighbouring widths with white
    to its widest, as training does, for a quick held-out figure.
    """
    import torch

    from train.data import Sample, collate_lines
    from train.model import MERGE, PATCH, PromptFormat
    from train.step import hf_inputs

    prompt = PromptFormat(tokenizer)
    device = next(model.parameters()).device
    order = sorted(range(len(images)), key=lambda i: images[i].shape[1])
    results: dict[int, tuple[str, list[float]]] = {}
    start = 0
    while start < len(order):
        group = order[start : start + batch]
        if not pad:
            group = [i for i in group if images[i].shape[1] == images[group[0]].shape[1]]
        start += len(group)
        # collate_lines widens the group to its widest line (with pad=False all are that wide).
        lines = collate_lines([Sample("", images[i]) for i in group], prompt)
        # Drop the empty answer (its <|im_end|>): the prompt ends where the answer starts.
        rows, columns = (side // (PATCH * MERGE) for side in lines["images"].shape[1:3])
        length = len(prompt.prompt_ids(rows * columns))
        feed = {k: v.to(device) for k, v in hf_inputs(lines, prompt.pad_id, prompt.image_id).items()}
        for key in ("input_ids", "attention_mask", "mm_token_type_ids"):
            feed[key] = feed[key][:, :length]
        with (
            torch.no_grad(),
            torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"),
        ):
            out = model.generate(
                **feed,
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                eos_token_id=prompt.eos_id,
                pad_token_id=prompt.pad_id,
                output_scores=True,
                return_dict_in_generate=True,
            )
        written = out.sequences[:, length:]
        chosen = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True).exp()
        for row, index in enumerate(group):
            tokens = written[row].tolist()
            end = tokens.index(prompt.eos_id) if prompt.eos_id in tokens else len(tokens)
            text = tokenizer.decode(tokens[:end], skip_special_tokens=True)
            results[index] = (text, chosen[row, :end].tolist())
    return [results[i] for i in range(len(images))]


# A gap this many times the crop's height, with no ink from top to bottom, is taken for the space
# between two words: wider than the white between most letters of a face, narrower than a space.
WORD_GAP = 0.25


def _blank_runs(ink_columns: np.ndarray, min_width: int) -> list[tuple[int, int]]:
    """(start, end) of each run of at least `min_width` columns without ink, the crop's own edges aside."""
    inked = np.flatnonzero(ink_columns)
    wide = np.flatnonzero(np.diff(inked) - 1 >= min_width)
    return [(int(inked[i]) + 1, int(inked[i + 1])) for i in wide]


def split_long_line(crop: np.ndarray, line_input: LineInput = DEFAULT_LINE_INPUT) -> list[np.ndarray]:
    """The crop cut at gaps between words into pieces that each fit the width cap, or the crop itself.

    `prepare_line` squeezes a line wider than MAX_WIDTH at its stretch; read in pieces, each keeps
    the stretch the model was trained at: whether the squeeze is what a reader loses on long
    lines. A crop that fits, or has no gap wide enough in its middle half, comes back whole.
    Pieces are left to right, at the crop's full height; the crop is grey or 3-channel uint8.
    """
    h, w = crop.shape[:2]
    if drawn_width(h, w, line_input, max_width=sys.maxsize) <= MAX_WIDTH:  # prepare_line's width, uncapped
        return [crop]
    # The mean of the channels: the same grey for an RGB crop and a BGR one.
    grey = _drawn_grey(crop, w).astype(np.uint8)
    _, ink = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    # A column holds ink where a twentieth of its rows do: specks and a neighbour's descender tips do not.
    runs = _blank_runs(ink.sum(axis=0) >= max(1, round(0.05 * h)), max(2, round(WORD_GAP * h)))
    # The widest gap in the middle half, so that both pieces come nearer the cap; the nearer the
    # middle among equals.
    gaps = [(right - left, -abs((left + right) / 2 - w / 2), left, right) for left, right in runs]
    gaps = [gap for gap in gaps if w / 4 <= (gap[2] + gap[3]) / 2 <= 3 * w / 4]
    if not gaps:
        return [crop]
    _, _, left, right = max(gaps)
    cut = (left + right) // 2
    return split_long_line(crop[:, :cut], line_input) + split_long_line(crop[:, cut:], line_input)


class LoadedCrop(NamedTuple):
    """A crop as `load_crops` prepares it for reading."""

    name: str
    truth: str
    image: np.ndarray  # the whole line, prepared (RGB)
    width: int  # the line's own width in `image`, the white padding aside
    pieces: list[np.ndarray]  # what is read: [image], or the prepared pieces of a split line
    line: np.ndarray  # the crop as read (BGR, after `tone` and `x_scale`), before it is prepared


def load_crops(
    folder: Path,
    limit: int | None = None,
    x_scale: float = 1.0,
    line_input: LineInput = DEFAULT_LINE_INPUT,
    tone: tuple[float, float] = (1.0, 0.0),
    *,
    max_width: int = MAX_WIDTH,
    split: bool = False,
) -> list[LoadedCrop]:
    """Each line of folder/labels.jsonl, prepared as `prepare_line` gives it to the model.

    The folder is train.make_crops' output. x_scale != 1 stretches each crop horizontally first:
    how much the reading depends on the glyphs' width, which differs from font to font. `tone`
    (gain, offset) maps each grey level v to gain * v + offset first: how much the reading
    depends on the paper's and the ink's levels (0.72, 45 greys white paper to 229 and black ink
    to 45). `line_input` is the model's own (`LineInput.of_export`; levels on a model trained
    without them are a probe of how it reads levelled lines). `max_width` other than the
    contract's draws long lines wider than the model was trained to read them (a probe). `split`
    cuts a line over the cap at gaps between words (`split_long_line`), to be read in pieces.
    """
    out = []
    for name, crop, text in read_crops(folder, limit):
        line = crop
        if tone != (1.0, 0.0):
            line = np.clip(np.rint(line.astype(np.float32) * tone[0] + tone[1]), 0, 255).astype(np.uint8)
        if x_scale != 1.0:
            width = max(1, round(line.shape[1] * x_scale))
            line = cv2.resize(line, (width, line.shape[0]), interpolation=cv2.INTER_CUBIC)
        rgb = cv2.cvtColor(line, cv2.COLOR_BGR2RGB)
        image = prepare_line(rgb, line_input, max_width)
        parts = split_long_line(rgb, line_input) if split else [rgb]
        # A line that is not cut is read as the image already prepared, not prepared again.
        pieces = [image] if len(parts) == 1 else [prepare_line(part, line_input, max_width) for part in parts]
        width = drawn_width(line.shape[0], line.shape[1], line_input, max_width)
        out.append(LoadedCrop(name, text, image, width, pieces, line))
    return out


def joined_reads(crops: Sequence[LoadedCrop], piece_texts: Sequence[str]) -> list[str]:
    """Each crop's text from the reads of its pieces, in `load_crops` order: joined by one space."""
    texts = iter(piece_texts)
    return [" ".join(next(texts).strip() for _ in crop.pieces) for crop in crops]


def joined_probabilities(
    crops: Sequence[LoadedCrop], piece_probabilities: Sequence[list[float]]
) -> list[list[float]]:
    """Each crop's token probabilities from those of its pieces, in `load_crops` order."""
    pieces = iter(piece_probabilities)
    return [[p for _ in crop.pieces for p in next(pieces)] for crop in crops]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.eval_lines", description=__doc__.splitlines()[0])
    parser.add_argument("--hf", type=Path, required=True, help="export folder (train_vlm's DIR/hf)")
    parser.add_argument("--crops", type=Path, required=True, help="train.make_crops output")
    parser.add_argument(
        "--out",
        type=Path,
        help="per-line results JSON: each line's truth, read and the probability of each token of the read "
        "(default: CROPS/../eval_results.json)",
    )
    parser.add_argument("--limit", type=int, help="read only the first N lines")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--pad", action="store_true", help="widen batches with white (quick, not exact)")
    parser.add_argument("--device", default=None, help="default: cuda when available")
    parser.add_argument("--x-scale", type=float, default=1.0, help="stretch crops horizontally first")
    parser.add_argument(
        "--tone",
        type=float,
        nargs=2,
        default=(1.0, 0.0),
        metavar=("GAIN", "OFFSET"),
        help="map the crops' grey levels v to GAIN * v + OFFSET first",
    )
    parser.add_argument(
        "--levels",
        type=int,
        nargs=2,
        metavar=("INK", "PAPER"),
        help="level each line's ink and paper to these grey levels (default: as the model was trained, "
        "its export's line_input.json; none if it does not say)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_WIDTH // LINE_HEIGHT,
        help="draw a line at most this many 28-px tokens wide (default: the contract's cap; a wider one "
        "shows how the model reads long lines unsqueezed, which it was not trained on)",
    )
    parser.add_argument(
        "--split-long",
        action="store_true",
        help="read a line over the width cap in pieces cut at gaps between words (split_long_line)",
    )
    parser.add_argument("--worst", type=int, default=0, help="print the N lines with the most edits")
    parser.add_argument(
        "--against",
        type=Path,
        help="another reader's text of the crops (bench.vlm_lines --save-hints): CER of both by line length, "
        "by how the line is printed (its case in that text), by the pixels a character gets, by "
        "how much of the line image's height its ink spans, by the share of its pixels that are dark, "
        "by whether it meets the width cap and by how much of its ink is grey (none on a one-bit "
        "scan); edits on digits, letters and marks, and each digit's",
    )
    parser.add_argument(
        "--lost",
        action="store_true",
        help="with --against: print every line read worse than the other reader read it, with its bands",
    )
    args = parser.parse_args(argv)
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_export(args.hf, args.device)
    line_input = LineInput.of_export(args.hf)
    if args.levels is not None:
        line_input = replace(line_input, levels=(args.levels[0], args.levels[1]))
    crops = load_crops(
        args.crops,
        args.limit,
        args.x_scale,
        line_input,
        tuple(args.tone),
        max_width=args.max_tokens * LINE_HEIGHT,
        split=args.split_long,
    )
    started = time.perf_counter()
    pieces = [piece for crop in crops for piece in crop.pieces]
    scored = read_scored(model, tokenizer, pieces, args.batch, args.pad)
    texts = joined_reads(crops, [text for text, _ in scored])
    probabilities = joined_probabilities(crops, [p for _, p in scored])
    seconds = time.perf_counter() - started
    pairs = [(c.truth, t) for c, t in zip(crops, texts, strict=True)]
    breakdown = edit_breakdown(pairs)
    report = {
        "lines": len(pairs),
        "cer_nospace_ci": round(cer(pairs), 4),
        "cer_spaced_ci": round(cer(pairs, spaced=True), 4),
        "exact_lines": sum(normalize_spaced(t, True) == normalize_spaced(h, True) for t, h in pairs),
        "seconds": round(seconds, 2),
        "edits": breakdown,
        "by_truth_char": by_truth_char(pairs),
    }
    print(json.dumps(report, ensure_ascii=False))
    if args.worst:
        worst = worst_lines([(c.name, c.truth, t) for c, t in zip(crops, texts, strict=True)], args.worst)
        for edits, name, truth, read in worst:
            print(f"{edits:4d} {name} {truth!r} read {read!r}")
        print(f"{sum(line[0] for line in worst)} of {breakdown['edits']} edits on these {len(worst)} lines")
    if args.against:
        others = {read["file"]: read["text"] for read in json.loads(args.against.read_text(encoding="utf-8"))}
        missing = [c.name for c in crops if c.name not in others]
        if missing:
            parser.error(f"--against has no read for {len(missing)} crops (the first: {missing[0]})")
        truths, other_texts = [c.truth for c in crops], [others[c.name] for c in crops]
        splits = (
            [length_band(truth) for truth in truths],
            [letter_case(text) for text in other_texts],
            [char_width_band(c.width, c.truth) for c in crops],
            [ink_fill_band(c.image, c.width) for c in crops],
            [dark_share_band(c.image, c.width) for c in crops],
            [cap_band(c.width) for c in crops],
            [grey_edge_band(grey_edge_share(c.line)) for c in crops],
        )
        for keys in splits:
            for row in compare_by(keys, truths, texts, other_texts):
                print(json.dumps(row))
        for row in compare_kinds(truths, texts, other_texts) + compare_chars(truths, texts, other_texts):
            print(json.dumps(row))
        if args.lost:
            bands = {c.name: "; ".join(keys[i] for keys in splits) for i, c in enumerate(crops)}
            lost = lines_read_worse(
                [(c.name, c.truth, t, others[c.name]) for c, t in zip(crops, texts, strict=True)]
            )
            for beyond, name, truth, read, other in lost:
                print(f"{beyond:4d} {name} [{bands[name]}] {truth!r} read {read!r}, the other {other!r}")
            beyond_all = sum(line[0] for line in lost)
            print(f"{len(lost)} lines read worse than the other reader, {beyond_all} edits beyond its")
    out = args.out or args.crops.parent / "eval_results.json"
    per_line = [
        {"file": c.name, "truth": c.truth, "read": t, "probabilities": [round(x, 5) for x in p]}
        for c, t, p in zip(crops, texts, probabilities, strict=True)
    ]
    out.write_text(
        json.dumps({"summary": report, "lines": per_line}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
