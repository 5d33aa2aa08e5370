"""Renders a text line as a scanner and detector would crop it; `prepare_line` is the model's input contract.

PIL draws the text, numpy/OpenCV degrade it (dot-matrix and faded thermal looks, blur, JPEG,
noise, skew, perspective, paper) and cut a detector-like box around it. No torch: the appliance's
test env imports this module. `prepare_line` is the appliance's own (engines/vlm_gguf/line_image.py).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

# The model-input contract lives with the engine that sends lines to the model; training lines go
# through the same function. Re-exported for train/'s callers.
from appliance.engines.line_crop import RECOGNISER_LINE_MARGIN, cut_box
from appliance.engines.vlm_gguf.line_image import (
    DEFAULT_LINE_INPUT,
    LINE_HEIGHT,
    LINE_STRETCH,
    MAX_WIDTH,
    MIN_WIDTH,
    LineInput,
    prepare_line,
)
from train.text_source import common_chinese, letter_case

__all__ = [
    "DEFAULT_LINE_INPUT",
    "LINE_HEIGHT",
    "LINE_STRETCH",
    "MAX_WIDTH",
    "MIN_WIDTH",
    "LineInput",
    "LineRenderer",
    "load_fonts",
    "prepare_line",
]

_FONT_SUFFIXES = (".ttf", ".otf", ".ttc")
# Lines cut to the detector's box alone, with no margin: what another caller may send. The rest
# get the margin the appliance gives a line reader; with half of all lines cut tight, the ink
# filled a median 82% of a rendered crop's height, against 68% on receipt crops cut the
# appliance's way (`python -m train.line_shapes`).
TIGHT_CROP_SHARE = 0.15
# Lines printed by a head with a dead pin: a row without ink through every letter (`_dead_pins`).
DEAD_PIN_SHARE = 0.04
# Lines printed by a thermal head with dead dots: columns without ink down the line (`_dead_dots`).
DEAD_DOT_SHARE = 0.05
# Lines with a barcode's bars just above or below them (`_barcode`).
BARCODE_SHARE = 0.03
# Lines whose strokes spread into their counters, mottled: over-inked ribbons and double strikes (`_bleed`).
BLEED_SHARE = 0.06
# Lines drawn in a face whose zero is its letter O and whose one is its letter l, as many receipt
# printers' faces nearly are (`drawn_as_homoglyphs`): the reader then has only the neighbours to
# tell them apart. With every training face drawing them distinctly, it read a receipt's
# `12/03/2018 10:25` as `12/O3/2O1B 1O:25`, `MALL` as `Ma11` and `JUMBO` as `JUMB0`.
HOMOGLYPH_SHARE = 0.06
# The lines above and below a line are mostly in its case: a paragraph of terms in small letters
# has small letters round it, whose descenders and ascenders reach further into a crop than
# capitals' flat feet and tops. With capitals and digits alone drawn as neighbours, the receipt
# lines of such a paragraph were among the worst read (`is not made within the prescribed` read
# `19 rigt made within the presoribed`, `tax invoice must be made` read `i9X 1DVO1Ce must be made`).
NEIGHBOUR_CASE_SHARE = 0.85
# Of the Latin lines that hold a zero, the share drawn in a face whose zero is marked (a dot or a
# slash inside: 14 of the 37 Latin faces, most of the monospaced ones). The receipt crops' zeros
# are mostly plain, and blurred at the reader's 28 px a marked zero looks like an eight: with every face
# drawn alike, 38 of the 542 eights of the receipt crops were misread (19 of them as a zero) against
# 37 of 2,545 zeros (`train.eval_lines`: `by_truth_char`, `common`).
MARKED_ZERO_SHARE = 0.12
# Lines on crumpled or curled paper: the baseline rises and falls along the line (`_crumple`).
# Rotation alone stays under a degree on long lines, so the reader had never seen one bent, and
# receipt lines printed on such paper were among its worst reads where the ONNX reader read them
# right (`Total Sales (Excluding GST) :` read `Yatal Sales (Excluding 99.11 :`, `Total Sales
# (Inclusive of GST) :` read `gatal sates (notuston ot 9,)`).
CRUMPLE_SHARE = 0.1
# Lines marked by a pen after printing: part of a ring round a total or a word, or a steep tick
# over the print, in ink paler or as dark as the print (`_pen_stroke`). Receipts reach the
# scanner so marked; lines under such marks were among the reader's worst where the ONNX reader
# read them right (`Thank You...Please Come Again...` under an arc read `... Againr*.`, `Points
# Missed:` under a loop `Points Hissid'S`, `GOODS SOLD ARE NOT RETURNABLE OR` under an arc lost
# its `OR`). Off for now: every run trained with marks on 4% of lines read the receipts worse
# than N, the same command without them (four of the five beyond the luck of the receipts drawn),
# and dropped more hyphens, ticks as well as flat strokes (train/README.md, "Two blocks more a
# tower"), and four runs with them read worse than four without from the same start and command,
# every one (+0.20 points, "Pen marks again"). train_vlm's `--pen-share` draws them for a run.
PEN_SHARE = 0.0
# Faces in this subfolder of the fonts folder (train.pack's MORE_FONTS, cut down to Latin) are
# drawn on MORE_FACE_SHARE of the Latin lines (`pick_font`), the receipt faces on the rest: 123
# general faces drawn as often as each receipt face would otherwise crowd out the 37 picked
# after receipt misreads. Off by default: four runs with them on 35% of the Latin lines read the
# receipts no better than six without (+0.05 points, within the luck of the receipts drawn) and
# read lines in the receipt faces worse (train/README.md, "A hundred more faces").
# train_vlm's `--more-face-share` draws them for a run.
MORE_FOLDER = "more"
MORE_FACE_SHARE = 0.0
# A scanner's automatic levels: the paper pushed to white, clipped with its grain, and the ink
# darkened, as most receipt scans are. The renderer's own paper (170-255) and ink (0-90) left the
# lines greyer and flatter than the receipt crops: at the model's input the median crop's paper is
# 255 and its contrast 193 of 255, the median rendered line's paper 212 and contrast 126 without
# levels, 255 and 192 with them on 75% of lines (`python -m train.line_shapes --crops DIR --looks
# --count 3430 --levels-share S`). Four runs on from the kept reader with them read the receipts
# 0.16 points better as a group than two of the same command without them (-0.35 to -0.01 over
# the receipts drawn; train/README.md, "Levels against none, and two blocks more, on the H200").
# Drawn after the scan's blur and noise and before its JPEG; train_vlm's `--levels-share` sets the
# share for a run.
SCANNER_LEVELS_SHARE = 0.75
# A bilevel scan: a document scanner's black-and-white mode (or a fax) keeps one bit a pixel, so
# every pixel is paper or ink and a stroke's edge is a staircase with no grey. Many receipts reach
# the appliance so: the share of a crop's inked pixels that are grey, at its own resolution, is 0
# at the receipt crops' 10th percentile and 0.32 at their 25th, against 0.31 and 0.42 for lines
# rendered without this step, 0 and 0.34 with it on 15% of lines (`python -m train.line_shapes
# --crops DIR --looks`, "grey edge share"). The kept reader reads the crisp receipt lines worse
# than the ONNX reader does, by more than elsewhere (`train.eval_lines --against`, the grey edge
# bands).
# Off by default all the same: four runs on from it with one-bit scans on 15% of lines read the
# receipts as four without (-0.01 points, -0.09 to +0.06), and their soup read the crisp lines
# worse, not better (train/README.md, "One-bit scans"): what the reader lacks there is not the
# hard edges. Drawn after the scan's blur, noise and levels and before the JPEG; train_vlm's
# `--bilevel-share` draws them for a run.
BILEVEL_SHARE = 0.0


@dataclass(frozen=True)
class Shares:
    """How often the renderer takes its optional steps: LineRenderer's keyword arguments as one object.

    A trainer passes it through its data loader: `LineRenderer(fonts, seed, **asdict(shares))`.
    """

    pen_share: float = PEN_SHARE
    more_share: float = MORE_FACE_SHARE
    levels_share: float = SCANNER_LEVELS_SHARE
    bilevel_share: float = BILEVEL_SHARE


DEFAULT_SHARES = Shares()


_NEIGHBOUR_CAPITALS = "ABCDEFGHKLMNPRSTUWXY0123456789 .:-"
_NEIGHBOUR_SMALL = "abcdefghijklmnopqrstuvwxyz    .,"


@dataclass(frozen=True)
class FontInfo:
    """One font file (face index for .ttc collections) and the characters its cmap covers."""

    path: Path
    index: int
    chars: frozenset[int]
    cjk: bool  # made for Chinese (`made_for_chinese`): Latin lines are drawn in it less often
    marked_zero: bool = False  # its zero has a dot or a slash inside (`zero_is_marked`)
    more: bool = False  # one of the faces in MORE_FOLDER, drawn on MORE_FACE_SHARE of Latin lines


# A face is made for Chinese when it has this share of the common characters.
CHINESE_FACE_COVERAGE = 0.9


@functools.lru_cache(maxsize=1)
def _common_chinese_codes() -> frozenset[int]:
    return frozenset(ord(char) for char in common_chinese())


def made_for_chinese(chars: frozenset[int]) -> bool:
    """Whether a face with these characters is a Chinese one, not a Latin one with some Chinese.

    A Japanese dot face (DotGothic16) has 64% of the common Chinese characters and Latin glyphs
    drawn on a thermal head's grid: it draws Latin lines as often as the receipt faces do, where a
    Chinese face's Latin glyphs are not what receipts print.
    """
    common = _common_chinese_codes()
    return len(chars & common) >= CHINESE_FACE_COVERAGE * len(common)


def zero_is_marked(path: Path, index: int = 0) -> bool:
    """Whether the face draws its zero with a dot or a slash inside: ink between the walls mid-height."""
    font = ImageFont.truetype(str(path), 64, index=index)
    canvas = Image.new("L", (128, 128), 0)
    ImageDraw.Draw(canvas).text((32, 16), "0", font=font, fill=255)
    ink = np.asarray(canvas) > 127
    rows = np.flatnonzero(ink.any(axis=1))
    if rows.size == 0:
        return False
    middle = ink[(rows[0] + rows[-1]) // 2]
    # Runs of ink along the middle row: a plain zero's two walls, or a mark between them as well.
    starts = np.count_nonzero(np.diff(np.concatenate(([0], middle.astype(np.int8), [0]))) == 1)
    return bool(starts >= 3)


def drawn_as_homoglyphs(text: str) -> str:
    """What a face that shares glyphs draws for `text`: the label stays `text`, the ink is this.

    Only where the neighbours decide: a zero beside no letter in a field that holds another digit
    (`2018`, `0.80`, not the `01` of a code like `SH01`, which no face tells apart) is drawn as the
    letter O; in a field of letters alone, the letter O is drawn as a zero and a lower-case l as
    a one.
    """
    fields = []
    for field in text.split(" "):
        chars = list(field)
        digits = sum(char.isdigit() for char in chars)
        if digits == 0 and sum(char.isalpha() for char in chars) >= 2:
            chars = ["0" if char == "O" else "1" if char == "l" else char for char in chars]
        elif digits >= 2:
            for i, char in enumerate(field):
                beside = field[max(0, i - 1) : i] + field[i + 1 : i + 2]
                if char == "0" and not any(other.isalpha() for other in beside):
                    chars[i] = "O"
        fields.append("".join(chars))
    return " ".join(fields)


def load_fonts(folder: Path) -> list[FontInfo]:
    """Every font in `folder` (recursively) with its character coverage, read by fontTools."""
    from fontTools.ttLib import TTCollection, TTFont

    fonts = []
    for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() in _FONT_SUFFIXES):
        faces = TTCollection(str(path)).fonts[:1] if path.suffix.lower() == ".ttc" else [TTFont(str(path))]
        for index, face in enumerate(faces):
            chars = frozenset(face.getBestCmap() or {})
            marked = ord("0") in chars and zero_is_marked(path, index)
            more = MORE_FOLDER in path.relative_to(folder).parts[:-1]
            fonts.append(
                FontInfo(path, index, chars, cjk=made_for_chinese(chars), marked_zero=marked, more=more)
            )
    if not fonts:
        raise FileNotFoundError(f"no fonts in {folder}")
    return fonts


def _middle_band(size: int) -> slice:
    """The canvas rows of the line being read (drawn from 1.1 x size down), not of its neighbours."""
    return slice(size, int(size * 2.3))


def _paper_and_ink(image: np.ndarray) -> tuple[float, float] | None:
    """A drawn line's paper and ink levels (its 75th and 2nd percentiles of grey), as a scanner sees them.

    None where the paper is not lighter than the ink by 24 levels: light print on a dark band
    (most of the crop is the band), or no print.
    """
    paper, ink = (float(level) for level in np.percentile(image, (75, 2)))
    return None if paper - ink < 24 else (paper, ink)


@functools.lru_cache(maxsize=512)
def _font(path: Path, index: int, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), size=size, index=index)


class LineRenderer:
    """Seeded renderer: `render(text)` returns an RGB uint8 crop of that line, degraded at random."""

    def __init__(
        self,
        fonts: list[FontInfo],
        seed: int,
        *,
        pen_share: float = PEN_SHARE,
        more_share: float = MORE_FACE_SHARE,
        levels_share: float = SCANNER_LEVELS_SHARE,
        bilevel_share: float = BILEVEL_SHARE,
    ) -> None:
        self.fonts = fonts
        self.levels_share = levels_share  # the share of lines given a scanner's levels (`_scanner_levels`)
        self.bilevel_share = bilevel_share  # the share of lines scanned one bit a pixel (`_bilevel_scan`)
        self.pen_share = pen_share  # the share of lines marked by a pen (`_pen_stroke`)
        self.more_share = more_share  # the share of Latin lines drawn in a MORE_FOLDER face
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)

    def pick_font(self, text: str) -> FontInfo:
        needed = {ord(c) for c in text if not c.isspace()}
        usable = [f for f in self.fonts if needed <= f.chars]
        if not usable:
            raise ValueError(f"no font covers {text!r}")
        # Latin lines prefer the non-CJK (receipt) fonts; the CJK font still draws some of them.
        latin = [f for f in usable if not f.cjk]
        if latin and self.rng.random() < 0.85:
            return self.rng.choice(self._by_zero(text, self._by_pool(latin)))
        return self.rng.choice(self._by_zero(text, [f for f in usable if not f.more] or usable))

    def _chance(self, share: float) -> bool:
        """True on `share` of calls, with no random draw at a share of 0.

        So a step added off by default leaves the random stream, and every line a run draws, as
        they were before the step existed.
        """
        return share > 0 and self.rng.random() < share

    def _by_pool(self, faces: list[FontInfo]) -> list[FontInfo]:
        """The MORE_FOLDER faces on `more_share` of the lines, the others on the rest."""
        more = [face for face in faces if face.more]
        chosen = [face for face in faces if not face.more]
        if more and chosen and self._chance(self.more_share):
            chosen = more
        return chosen or more

    def _by_zero(self, text: str, faces: list[FontInfo]) -> list[FontInfo]:
        """The faces to draw `text` in: for a line with a zero, those with a marked zero only sometimes."""
        if "0" not in text:
            return faces
        marked = [face for face in faces if face.marked_zero]
        plain = [face for face in faces if not face.marked_zero]
        if not marked or not plain:
            return faces
        return marked if self.rng.random() < MARKED_ZERO_SHARE else plain

    def render(self, text: str) -> np.ndarray:
        rng = self.rng
        info = self.pick_font(text)
        size = rng.randint(18, 44)
        font = _font(info.path, info.index, size)
        spacing = rng.choice([0.0, 0.0, 0.0, rng.uniform(-0.06, 0.25)]) * size
        drawn = drawn_as_homoglyphs(text) if rng.random() < HOMOGLYPH_SHARE else text
        neighbours = self.neighbour_text(text, info) if rng.random() < 0.5 else None
        ink = self._ink_mask(drawn, font, size, spacing, neighbours)
        if rng.random() < DEAD_PIN_SHARE:
            ink = self._dead_pins(ink, size)
        if rng.random() < DEAD_DOT_SHARE:
            ink = self._dead_dots(ink, size)
        if rng.random() < 0.3:
            ink = self._faint_marks(ink, size, rng.uniform(0.3, 0.7))
        look = rng.random()
        if look < 0.2:
            ink = self._dot_matrix(ink, size)
        if rng.random() < 0.2:
            kernel = np.ones((2, 2), np.uint8)
            ink = cv2.dilate(ink, kernel) if rng.random() < 0.6 else cv2.erode(ink, kernel)
        if rng.random() < BLEED_SHARE:
            ink = self._bleed(ink, size)
        if rng.random() < self.pen_share:
            ink = self._pen_stroke(ink, size)
        if rng.random() < CRUMPLE_SHARE:
            ink = self._crumple(ink, size)
        paper = rng.uniform(170, 255)
        ink_level = rng.uniform(0, 90)
        if look > 0.8:  # faded thermal paper: low contrast, light streaks along the feed direction
            ink_level = rng.uniform(70, max(75, paper - 45))
            streaks = np.ones(ink.shape[1], np.float32)
            for _ in range(rng.randint(0, 4)):
                x = rng.randrange(ink.shape[1])
                streaks[x : x + rng.randint(1, 4)] = rng.uniform(0.2, 0.8)
            ink = ink * streaks[None, :]
        if rng.random() < 0.03:  # light print on a dark band: a receipt's shop name or heading
            paper, ink_level = rng.uniform(0, 80), rng.uniform(180, 255)
        image = paper - ink * (paper - ink_level)
        image = self._geometry(image, paper)
        image = self._crop_box(image, paper, size, loose=rng.random() < 0.06)
        # The paper's grain on the crop only: two thirds of the canvas are margin that the box
        # cuts away, and drawing the noise on all of it was 23% of the renderer's time (9% now:
        # `python -m cProfile -s tottime -m train.render FONTS WORDS DIR 1000`, `_paper_texture`).
        image = image + self._paper_texture(image.shape)
        image = self._glyph_width(image)
        image = self._degrade(image)
        rgb = np.repeat(image[:, :, None], 3, axis=2)
        if rng.random() < 0.15:  # tinted paper or ink
            rgb = rgb * self.np_rng.uniform(0.85, 1.0, size=3)
        return np.clip(rgb, 0, 255).astype(np.uint8)

    def neighbour_text(self, text: str, info: FontInfo) -> str:
        """Filler for the lines above and below `text`: in its case mostly, in characters the face has."""
        small = letter_case(text) == "mostly lower"
        if self.rng.random() >= NEIGHBOUR_CASE_SHARE:
            small = not small
        alphabet = [
            char
            for char in (_NEIGHBOUR_SMALL if small else _NEIGHBOUR_CAPITALS)
            if char == " " or ord(char) in info.chars
        ] or [" "]
        return "".join(self.rng.choice(alphabet) for _ in range(len(text) + 8))

    # --- drawing --------------------------------------------------------------------------------
    def _ink_mask(
        self, text: str, font: ImageFont.FreeTypeFont, size: int, spacing: float, neighbours: str | None
    ) -> np.ndarray:
        # Per-character advances only where letters are spaced out: one measure of the whole text
        # otherwise (measuring each glyph was a fifth of the renderer's time).
        advance = [font.getlength(c) + spacing for c in text] if spacing else []
        width = int((sum(advance) if spacing else font.getlength(text)) + 2 * size + 8)
        height = int(size * 3.2)
        canvas = Image.new("L", (width, height), 0)
        draw = ImageDraw.Draw(canvas)
        top = int(size * 1.1)
        x = float(size)
        left, upper, right, lower = draw.textbbox((x, top), text, font=font)
        if spacing == 0.0:
            draw.text((x, top), text, font=font, fill=255)
        else:
            for char, step in zip(text, advance, strict=True):
                draw.text((x, top), char, font=font, fill=255)
                x += step
            right = max(left + 1, round(x))
        if self.rng.random() < 0.15:
            self._rule(draw, (left, upper, right, lower), size)
        if self.rng.random() < BARCODE_SHARE:
            self._barcode(draw, (left, upper, right, lower), size)
        if neighbours:  # parts of the lines above and below that a loose detector box takes in
            shift = self.rng.uniform(-0.5, 0.5) * size
            draw.text((shift, top - size * self.rng.uniform(1.05, 1.3)), neighbours, font=font, fill=255)
            draw.text((shift, top + size * self.rng.uniform(1.05, 1.3)), neighbours, font=font, fill=255)
        ink = np.asarray(canvas, dtype=np.float32) / 255.0
        if self.rng.random() < 0.08:
            ink = self._slant(ink, top + size * 0.5)
        return ink

    def _rule(self, draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float], size: int) -> None:
        # Receipts underline headings and box totals, and a detector's box around such a line
        # takes the rule in (a SROIE crop of an underlined `Tax (RM)` was read `Tax:Eur`).
        rng = self.rng
        left, upper, right, lower = box
        width = max(1, round(size * rng.uniform(0.04, 0.1)))
        gap = size * rng.uniform(0.05, 0.25)
        left -= round(size * rng.uniform(0, 0.5))
        right += round(size * rng.uniform(0, 0.5))
        kind = rng.random()
        if kind < 0.6:
            draw.line([(left, lower + gap), (right, lower + gap)], fill=255, width=width)
        elif kind < 0.8:
            draw.line([(left, upper - gap), (right, upper - gap)], fill=255, width=width)
        else:
            draw.rectangle([left, upper - gap, right, lower + gap], outline=255, width=width)

    def _barcode(self, draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float], size: int) -> None:
        # A barcode's bars just above its digits (or below a line), as receipts print an item's
        # or the receipt's code: a detector's box round the digits takes in the bars' ends (a
        # SROIE `6605505001880000255018` under its bars was read `swoostsuppliest`).
        rng = self.rng
        left, upper, right, lower = box
        height = size * rng.uniform(0.5, 1.2)
        gap = size * rng.uniform(0.03, 0.3)
        y0, y1 = (
            (upper - gap - height, upper - gap)
            if rng.random() < 0.75
            else (lower + gap, lower + gap + height)
        )
        module = max(1, round(size * rng.uniform(0.03, 0.07)))
        x = left - size * rng.uniform(0, 0.3)
        end = right + size * rng.uniform(0, 0.3)
        while x < end:
            width = module * rng.randint(1, 4)
            draw.rectangle([round(x), round(y0), round(x) + width - 1, round(y1)], fill=255)
            x += width + module * rng.randint(1, 4)

    def _slant(self, ink: np.ndarray, middle: float) -> np.ndarray:
        # Oblique print (`TAX INVOICE` in italics heads many receipts): a shear about the text's
        # middle row, for fonts that have no italic face of their own.
        shear = self.rng.uniform(0.12, 0.3)
        matrix = np.array([[1.0, -shear, shear * middle], [0.0, 1.0, 0.0]], dtype=np.float32)
        slanted: np.ndarray = cv2.warpAffine(
            ink, matrix, (ink.shape[1], ink.shape[0]), flags=cv2.INTER_LINEAR, borderValue=0.0
        )
        return slanted

    @staticmethod
    def _faint_marks(ink: np.ndarray, size: int, strength: float) -> np.ndarray:
        # A thermal head heats an isolated dot less than a stroke, so a receipt's ':' and '.' (and
        # ',', '-', the dot of an 'i') often print paler than the letters round them: a SROIE
        # `Date:` with a pale colon was read `Date`, and ':' or '.' lost were 202 of the model's
        # 7,641 edits on the receipt crops. Marks whose area is a few percent of the size squared
        # keep `strength` of their ink; a letter's strokes are larger and stay as they are.
        count, labels, stats, _ = cv2.connectedComponentsWithStats(
            (ink > 0.5).astype(np.uint8), connectivity=8
        )
        small = stats[:, cv2.CC_STAT_AREA] < 0.04 * size * size
        small[0] = False  # the background
        if count < 2 or not small.any():
            return ink
        # Grown by a pixel so that the mark's anti-aliased rim fades with it.
        marks = cv2.dilate(small[labels].astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
        faint: np.ndarray = np.where(marks, ink * np.float32(strength), ink)
        return faint

    def _dead_pins(self, ink: np.ndarray, size: int) -> np.ndarray:
        # A print head with a dead pin (dot-matrix) leaves a row without ink through every letter
        # of the line at the same height; worn heads lose the top row most often. One SROIE
        # receipt prints every line so, the capitals' tops missing (`GUARDIAN` read `bUard1an`,
        # `ROUNDING ADJUSTMENTS` read `KIMPI HN RIJUUS1MEJ`): 13 of the 50 worst-read lines.
        band = _middle_band(size)
        rows = np.where((ink[band] > 0.5).any(axis=1))[0]
        if rows.size < 4:
            return ink
        first, last = int(rows[0]) + band.start, int(rows[-1]) + band.start
        out = ink.copy()
        for _ in range(1 if self.rng.random() < 0.7 else 2):
            thickness = max(1, round(size * self.rng.uniform(0.05, 0.12)))
            at_top = self.rng.random() < 0.5
            start = first if at_top else self.rng.randint(first, max(first, last - thickness))
            out[start : start + thickness] = 0.0
        return out

    def _dead_dots(self, ink: np.ndarray, size: int) -> np.ndarray:
        # A thermal head is a row of dots across the paper, which feeds past it: a dead dot leaves
        # a column without ink down every line. Between a letter's stems it cuts only what joins
        # them, so an `n` prints as `ri` and an `m` as `rn` (`Bacon` read `Bacori`, `Homemade`
        # `Hornemade`, `missed` `inissed` on one SROIE printer's receipts).
        columns = np.where((ink > 0.5).any(axis=0))[0]
        if columns.size < 4:
            return ink
        out = ink.copy()
        for _ in range(self.rng.randint(1, max(1, round(columns.size / size)))):
            width = max(1, round(size * self.rng.uniform(0.03, 0.08)))
            start = self.rng.randint(int(columns[0]), max(int(columns[0]), int(columns[-1]) - width))
            out[:, start : start + width] = 0.0
        return out

    def _bleed(self, ink: np.ndarray, size: int) -> np.ndarray:
        # An over-inked ribbon or a double strike spreads every stroke into its letter's counters,
        # and the spread ink is mottled, lighter in flecks: receipts print totals and headings so
        # (`Total Amt Payable :` read `TateJ Aurit Peyphb r`). The 2-pixel dilation above thickens
        # a stroke by a tenth of a small glyph's; this fills most of an `a`'s bowl.
        radius = max(1, round(size * self.rng.uniform(0.03, 0.08)))
        kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
        spread = cv2.dilate(ink, kernel)
        noise = self.np_rng.uniform(0.0, 1.0, size=ink.shape).astype(np.float32)
        blurred = cv2.GaussianBlur(noise, (0, 0), max(0.7, size * 0.03))
        flecks = (blurred - blurred.min()) / max(float(np.ptp(blurred)), 1e-6)
        mottled: np.ndarray = spread * (1.0 - self.rng.uniform(0.3, 0.7) * flecks)
        return mottled

    def _pen_stroke(self, ink: np.ndarray, size: int) -> np.ndarray:
        # Drawn within the text's own columns (it starts at `size` and ends `size` + 8 before the
        # canvas's edge, `_ink_mask`), so the box found round the print stays the print's; up and
        # down it reaches past the line, as a ring round a word does.
        rng = self.rng
        width = ink.shape[1]
        left, right = size, max(size + 2, width - size - 8)
        band = _middle_band(size)
        middle = (band.start + band.stop) // 2
        marks = np.zeros_like(ink)
        thickness = max(1, round(size * rng.uniform(0.04, 0.1)))
        if rng.random() < 0.6:  # part of a ring round a stretch of the line
            centre = rng.uniform(left, right)
            half_width = min(rng.uniform(1.0, 5.0) * size, max(centre - left, right - centre))
            half_height = rng.uniform(0.55, 0.9) * size
            start = rng.uniform(0.0, 360.0)
            cv2.ellipse(
                marks,
                (round(centre), middle),
                (max(1, round(half_width)), round(half_height)),
                rng.uniform(-8.0, 8.0),
                start,
                start + rng.uniform(120.0, 330.0),
                1.0,
                thickness,
                cv2.LINE_AA,
            )
        else:
            # A tick: a short stroke down and a longer one up, both steep. A stroke drawn flat across
            # the print in its own ink is a hyphen not to be read: runs on such strokes learnt to
            # drop hyphens (train/README, run T: `-TAX INVOICE-` read `-TAX INVOICE`).
            bottom = middle + rng.uniform(0.2, 0.8) * size
            down, up = rng.uniform(0.3, 0.8) * size, rng.uniform(1.0, 2.0) * size
            x0 = rng.uniform(left, right)
            x1 = min(right, x0 + down * rng.uniform(0.3, 0.8))  # clipping only makes it steeper
            x2 = min(right, x1 + up * rng.uniform(0.4, 0.9))
            points = [(x0, bottom - down), (x1, bottom), (x2, bottom - up)]
            polyline = np.array([[round(x), round(y)] for x, y in points], np.int32)
            cv2.polylines(marks, [polyline], False, 1.0, thickness, cv2.LINE_AA)
        marked: np.ndarray = np.maximum(ink, marks * rng.uniform(0.5, 1.0))
        return marked

    def _crumple(self, ink: np.ndarray, size: int) -> np.ndarray:
        # Paper bent along the line moves each column of print up or down by a smooth wave (one
        # or two bends across a long line) and a slow drift: the line and its neighbours alike,
        # as the paper carries both. Up to a seventh of the size either way, so the line stays in its band.
        height, width = ink.shape
        amplitude = size * self.rng.uniform(0.04, 0.12)
        period = size * self.rng.uniform(4.0, 16.0)
        phase = self.rng.uniform(0.0, 2.0 * np.pi)
        drift = size * self.rng.uniform(-0.05, 0.05) / max(width, 1)
        columns = np.arange(width, dtype=np.float32)
        shift = amplitude * np.sin(2.0 * np.pi * columns / period + phase) + drift * (columns - width / 2)
        map_x = np.tile(columns, (height, 1))
        map_y = np.arange(height, dtype=np.float32)[:, None] + shift[None, :]
        bent: np.ndarray = cv2.remap(ink, map_x, map_y, cv2.INTER_LINEAR, borderValue=0.0)
        return bent

    def _dot_matrix(self, ink: np.ndarray, size: int) -> np.ndarray:
        # Dot-matrix/thermal heads print a grid of round dots: keep the ink only where a dot sits.
        pitch = max(2, round(size / self.rng.uniform(7, 11)))
        yy, xx = np.mgrid[0 : ink.shape[0], 0 : ink.shape[1]]
        dy, dx = (yy % pitch) - pitch / 2 + 0.5, (xx % pitch) - pitch / 2 + 0.5
        dots = (dy * dy + dx * dx <= (pitch * self.rng.uniform(0.35, 0.55)) ** 2).astype(np.float32)
        sampled = (cv2.blur(ink, (pitch, pitch)) > 0.4).astype(np.float32) * dots
        blurred: np.ndarray = cv2.GaussianBlur(sampled, (0, 0), 0.5)
        return blurred

    def _paper_texture(self, shape: tuple[int, ...]) -> np.ndarray:
        # float32 draws directly: a float64 field made and converted cost as much as drawing the text.
        texture = self.np_rng.standard_normal(size=shape, dtype=np.float32) * np.float32(
            self.rng.uniform(0, 6)
        )
        # Two rows of slow shading across the crop: the four that spanned the whole canvas put
        # one and a half across the line's box.
        low = cv2.resize(
            self.np_rng.normal(0, self.rng.uniform(0, 10), size=(2, 8)).astype(np.float32),
            (shape[1], shape[0]),
            interpolation=cv2.INTER_CUBIC,
        )
        return texture + low

    def _geometry(self, image: np.ndarray, paper: float) -> np.ndarray:
        h, w = image.shape
        # At most ±3°, and less on long lines, so the line's ends do not leave the detector's box.
        limit = min(3.0, float(np.degrees(np.arctan(0.25 * h / 3.2 / max(w, 1)))))
        angle = self.rng.uniform(-limit, limit) if self.rng.random() < 0.5 else 0.0
        matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
        image = cv2.warpAffine(image, matrix, (w, h), borderValue=paper, flags=cv2.INTER_LINEAR)
        if self.rng.random() < 0.3:
            j = 0.04 * h
            src = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=np.float32)
            dst = src + self.np_rng.uniform(-j, j, size=(4, 2)).astype(np.float32)
            image = cv2.warpPerspective(
                image, cv2.getPerspectiveTransform(src, dst), (w, h), borderValue=paper
            )
        return image

    def _crop_box(self, image: np.ndarray, paper: float, size: int, loose: bool = False) -> np.ndarray:
        # A detector's box around the middle line, found from the ink of the central band, then
        # cut as the appliance's cascade cuts a line for its reader: grown by
        # RECOGNISER_LINE_MARGIN of the box's height on every side (`line_crop.cut_box`), so the
        # ink never fills the crop's height. `loose`: a box that takes in up to half of the lines
        # above and below (some receipts' boxes are that loose; the worst-read receipt lines of
        # the 30,082-step fine-tuned model included such crops, read as garbage).
        h, w = image.shape
        band = _middle_band(size)
        inked = np.abs(image[band] - paper) > 30  # darker print, or lighter on a dark band
        cols = np.where(inked.any(axis=0))[0]
        rows = np.where(inked.any(axis=1))[0]
        if cols.size == 0 or rows.size == 0:
            x0, x1, y0, y1 = size, w - size, int(size * 1.1), int(size * 2.2)
        else:
            x0, x1 = int(cols[0]), int(cols[-1]) + 1
            y0, y1 = int(rows[0]) + band.start, int(rows[-1]) + band.start + 1

        def slack(scale: float) -> int:
            # A text detector's box is the ink's give or take a pixel, or a little looser (DB's
            # unclipped polygons): up to `scale` of the size.
            return (
                self.rng.choice([-1, 0, 0, 1, 2, 3])
                if self.rng.random() < 0.5
                else int(self.rng.uniform(0, scale))
            )

        left, right = max(0, x0 - slack(size * 0.3)), min(w, x1 + slack(size * 0.3))
        top, bottom = max(0, y0 - slack(size * 0.3)), min(h, y1 + slack(size * 0.3))
        if loose:
            top = max(0, y0 - int(self.rng.uniform(0.6, 1.05) * size))
            bottom = min(h, y1 + int(self.rng.uniform(0.6, 1.05) * size))
        # Clipping both sides of a one-pixel mark ('.', '|') would leave nothing: keep the ink's box.
        if right - left < 2:
            left, right = x0, max(x1, x0 + 2)
        if bottom - top < 2:
            top, bottom = y0, max(y1, y0 + 2)
        if self.rng.random() < TIGHT_CROP_SHARE:
            return image[top:bottom, left:right]
        return cut_box(image, (left, top, right, bottom), RECOGNISER_LINE_MARGIN)

    def _glyph_width(self, image: np.ndarray) -> np.ndarray:
        # Receipt printers use condensed faces, and a cap-height font with narrow advances is
        # common: a SROIE crop is a median 0.43 of its height wide per character, against 0.62 for
        # lines drawn with the Debian fonts. A model trained on one width reads others badly (the
        # same model's CER on receipt lines: 25.5% as they are, 16.7% widened by 1.2, 50.4%
        # narrowed by 0.8), so most lines are squeezed or stretched, more often narrower than wider.
        if self.rng.random() < 0.3:
            return image
        factor = float(np.exp(self.rng.uniform(np.log(0.5), np.log(1.25))))
        width = max(2, round(image.shape[1] * factor))
        interpolation = cv2.INTER_AREA if factor < 1 else cv2.INTER_LINEAR
        return cv2.resize(image, (width, image.shape[0]), interpolation=interpolation)

    def _scanner_levels(self, image: np.ndarray) -> np.ndarray:
        """Stretches the grey levels as a scanner's auto-levels do: paper to white, ink towards black."""
        rng = self.rng
        levels = _paper_and_ink(image)
        if levels is None:  # nothing to stretch
            return image
        paper, ink = levels
        # The white point sits at or a little under the paper, so the paper clips to 255 (its
        # grain and the noise with it); the black point from well under the ink (which then stays
        # a dark grey) to a little over it (its darkest strokes clip to black, as in many scans).
        white = paper - rng.uniform(0.0, 0.15) * (paper - ink)
        black = max(0.0, ink + rng.uniform(-0.6, 0.3) * (paper - ink))
        return np.asarray((image - black) * (255.0 / (white - black)), np.float32)

    def _bilevel_scan(self, image: np.ndarray) -> np.ndarray:
        """Each pixel to black or white at a threshold between paper and ink, as a one-bit scan keeps it.

        Half of such scans are taken at a lower resolution than the print is drawn (a fax's or an
        office scanner's 200 dpi), so the staircase of a stroke's edge is coarser than a pixel.
        """
        rng = self.rng
        levels = _paper_and_ink(image)
        if levels is None:  # a threshold would lose the print
            return image
        paper, ink = levels
        # Where between the two the threshold sits thins the strokes (near the ink) or thickens
        # them (near the paper), as a scanner's brightness setting does.
        threshold = ink + rng.uniform(0.35, 0.65) * (paper - ink)
        height, width = image.shape
        scale = rng.uniform(0.5, 1.0) if rng.random() < 0.5 else 1.0
        seen = image
        if scale < 1.0:
            size = (max(2, round(width * scale)), max(2, round(height * scale)))
            seen = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        bits = np.where(seen < threshold, np.float32(0.0), np.float32(255.0))
        if scale < 1.0:
            bits = cv2.resize(bits, (width, height), interpolation=cv2.INTER_NEAREST)
        return bits

    def _degrade(self, image: np.ndarray) -> np.ndarray:
        rng = self.rng
        if rng.random() < 0.4:  # scanned at a lower resolution than drawn
            scale = rng.uniform(0.4, 0.9)
            small = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
            image = cv2.resize(small, (image.shape[1], image.shape[0]), interpolation=cv2.INTER_LINEAR)
        if rng.random() < 0.4:
            image = cv2.GaussianBlur(image, (0, 0), rng.uniform(0.3, 1.2))
        if rng.random() < 0.5:
            image = image + self.np_rng.normal(0, rng.uniform(2, 14), size=image.shape)
        if self._chance(self.levels_share):
            image = self._scanner_levels(image)
        if self._chance(self.bilevel_share):
            image = self._bilevel_scan(image)
        image = np.clip(image, 0, 255).astype(np.uint8)
        if rng.random() < 0.4:
            ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, rng.randint(25, 85)])
            decoded = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE) if ok else None
            if decoded is not None:
                image = decoded
        return image.astype(np.float32)


def main() -> None:
    """Writes sample crops and says what rendering cost: `python -m train.render FONTS WORDS OUT [N [more]]`.

    With `more`, every line is drawn in the faces of FONTS/more/ alone (lines none of them can
    draw, the Chinese ones, are skipped): how a reader does on faces it was not trained on.
    """
    import json
    import sys
    import time

    from train.text_source import TextSource, label_of

    fonts, words, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    if sys.argv[5:] not in ([], ["more"]):
        raise SystemExit("usage: python -m train.render FONTS WORDS OUT [N [more]]")
    faces = load_fonts(fonts)
    if sys.argv[5:] == ["more"]:
        faces = [face for face in faces if face.more]
    out.mkdir(parents=True, exist_ok=True)
    cv2.setNumThreads(1)  # as in a training data worker
    source, renderer = TextSource(1, words), LineRenderer(faces, 1)
    seconds, drawn = 0.0, 0
    with (out / "labels.jsonl").open("w", encoding="utf-8") as labels:
        for i in range(n):
            text = source.line()
            started = time.perf_counter()
            try:
                crop = renderer.render(text)
            except ValueError:  # no face of the set has the line's characters
                continue
            prepare_line(crop)
            seconds += time.perf_counter() - started
            drawn += 1
            Image.fromarray(crop).save(out / f"{i:04d}.png")
            label = {"file": f"{i:04d}.png", "text": label_of(text)}
            labels.write(json.dumps(label, ensure_ascii=False) + "\n")
    print(f"{drawn} lines, {1000 * seconds / max(drawn, 1):.2f} ms a line to render and prepare (one thread)")


if __name__ == "__main__":
    main()
