"""Where a line reader's edits fall: lines lost as a whole against single characters."""

from __future__ import annotations

import cv2
import numpy as np

from appliance.engines.vlm_gguf.line_image import LINE_HEIGHT, MAX_WIDTH, LineInput, drawn_width
from train.eval_lines import (
    by_truth_char,
    cap_band,
    cer,
    char_width_band,
    compare_by,
    compare_chars,
    compare_kinds,
    dark_share_band,
    edit_breakdown,
    edits_by_kind,
    ink_fill_band,
    length_band,
    lines_read_worse,
    split_long_line,
)
from train.render import prepare_line
from train.text_source import letter_case

PLAIN = LineInput(stretch=1.0)
AT_3 = LineInput(stretch=3.0)


def test_edits_are_counted_as_cer_counts_them_and_split_by_lost_lines() -> None:
    pairs = [
        ("TOTAL 12.50", "total 12 50"),  # case and spacing are free; the decimal point is lost
        ("CASH", "CASH"),
        ("THANK YOU", "THWR T0J"),  # more than half of 8 characters wrong: a lost line
        ("0.80", "O.80"),
    ]
    breakdown = edit_breakdown(pairs)
    truth_chars = sum(len("".join(t.split())) for t, _ in pairs)
    assert breakdown["edits"] == round(cer(pairs) * truth_chars)
    lost = breakdown["edits"] - 2  # the decimal point and the 0 -> o are the other lines' edits
    assert breakdown["edits_on_lines_over_half_wrong"] == lost
    assert breakdown["long_lines_over_half_wrong"] == 1  # THANK YOU: 8 characters, over half wrong
    assert edit_breakdown([("TAX", "T4Z")])["long_lines_over_half_wrong"] == 0  # too short to count
    common = dict(breakdown["common"])
    assert common["'.' lost"] == 1
    assert common["'0'->'o'"] == 1


def test_the_worst_lines_are_those_with_the_most_edits_case_and_spaces_aside() -> None:
    from train.eval_lines import worst_lines

    lines = [
        ("a.jpg", "TOTAL 12.50", "total 12.50"),  # case and spaces: no edit
        ("b.jpg", "CASH", "CRSH"),
        ("c.jpg", "GUARDIAN", "bUard1an"),
        ("d.jpg", "0.00", "O.OO"),
    ]
    assert worst_lines(lines, 2) == [(3, "d.jpg", "0.00", "O.OO"), (2, "c.jpg", "GUARDIAN", "bUard1an")]
    ranked = [line[:2] for line in worst_lines(lines, 9)]
    assert ranked == [(3, "d.jpg"), (2, "c.jpg"), (1, "b.jpg"), (0, "a.jpg")]  # no more than there are


def test_an_export_is_read_at_the_stretch_it_was_trained_at(tmp_path) -> None:
    import json

    import cv2
    import numpy as np

    from train.eval_lines import load_crops

    LineInput(stretch=1.5).write(tmp_path)
    crops = tmp_path / "crops"
    crops.mkdir()
    cv2.imwrite(str(crops / "a.png"), np.zeros((20, 300, 3), np.uint8))
    (crops / "labels.jsonl").write_text(json.dumps({"file": "a.png", "text": "A"}) + "\n")
    (plain,) = load_crops(crops, line_input=LineInput(stretch=1.0))
    (wide,) = load_crops(crops, line_input=LineInput.of_export(tmp_path))
    assert (plain.image[:, :420] == 0).all() and (plain.image[:, 420:] == 255).all()
    assert (wide.image[:, :630] == 0).all() and (wide.image[:, 630:] == 255).all()
    assert (plain.width, wide.width) == (420, 630)  # the line's own width, not the white padding's


def test_an_export_trained_on_taller_lines_is_read_on_lines_that_tall(tmp_path) -> None:
    import json

    from train.eval_lines import load_crops

    LineInput(stretch=1.5, height=56).write(tmp_path)
    crops = tmp_path / "crops"
    crops.mkdir()
    cv2.imwrite(str(crops / "a.png"), np.zeros((20, 200, 3), np.uint8))
    (crops / "labels.jsonl").write_text(json.dumps({"file": "a.png", "text": "A"}) + "\n")
    (tall,) = load_crops(crops, line_input=LineInput.of_export(tmp_path))
    assert tall.image.shape == (56, 840, 3) and tall.width == 840  # as wide as 28 px at stretch 3.0
    assert (tall.image == 0).all()


def test_a_long_line_is_banded_by_the_contracts_cap_however_wide_it_is_drawn(tmp_path) -> None:
    import json

    from train.eval_lines import load_crops

    cv2.imwrite(str(tmp_path / "long.png"), np.zeros((20, 1000, 3), np.uint8))  # 1,400 px at 28
    cv2.imwrite(str(tmp_path / "short.png"), np.zeros((20, 300, 3), np.uint8))  # 420 px
    (tmp_path / "labels.jsonl").write_text(
        "".join(json.dumps({"file": name, "text": "A"}) + "\n" for name in ("long.png", "short.png"))
    )
    squeezed, short = load_crops(tmp_path, line_input=PLAIN)
    unsqueezed, _ = load_crops(tmp_path, line_input=PLAIN, max_width=28 * 80)
    assert (squeezed.width, unsqueezed.width, short.width) == (1120, 1400, 420)
    assert unsqueezed.image.shape[1] == 1400
    assert cap_band(squeezed.width) == cap_band(unsqueezed.width) == "at or over the 40-token cap"
    assert cap_band(short.width) == "under the 40-token cap"
    assert cap_band(1119) == "under the 40-token cap"


def test_a_long_line_split_for_reading_is_read_in_pieces_and_its_text_joined(tmp_path) -> None:
    import json

    from train.eval_lines import joined_probabilities, joined_reads, load_crops

    long_line = np.full((40, 640, 3), 255, np.uint8)
    cv2.putText(long_line, "RECEIVED ABOVE GOODS IN GOOD ORDER", (4, 30), cv2.FONT_HERSHEY_SIMPLEX, 1.0, 0, 2)
    cv2.imwrite(str(tmp_path / "long.png"), long_line)
    cv2.imwrite(str(tmp_path / "short.png"), long_line[:, :300])
    (tmp_path / "labels.jsonl").write_text(
        "".join(json.dumps({"file": name, "text": "A"}) + "\n" for name in ("long.png", "short.png"))
    )
    whole = load_crops(tmp_path)
    split = load_crops(tmp_path, split=True)
    assert [len(crop.pieces) for crop in whole] == [1, 1]
    assert [len(crop.pieces) for crop in split] == [2, 1]
    assert split[1].pieces[0] is split[1].image  # a line not cut is not prepared twice
    # The whole line is still what the bands look at: squeezed to the cap, as the model gets it unsplit.
    assert split[0].width == whole[0].width == 1120
    assert all(piece.shape[0] == 28 for piece in split[0].pieces)
    assert joined_reads(split, ["RECEIVED ABOVE ", " GOODS IN GOOD ORDER", "RECEI"]) == [
        "RECEIVED ABOVE GOODS IN GOOD ORDER",
        "RECEI",
    ]
    assert joined_probabilities(split, [[0.9, 0.8], [0.7], [0.5]]) == [[0.9, 0.8, 0.7], [0.5]]


def test_a_tone_maps_the_crops_grey_levels_before_the_line_is_prepared(tmp_path) -> None:
    import json

    import cv2
    import numpy as np

    from train.eval_lines import load_crops

    crop = np.full((28, 224, 3), 255, np.uint8)
    crop[8:20, 20:200] = 0  # black ink on white paper
    cv2.imwrite(str(tmp_path / "a.png"), crop)
    (tmp_path / "labels.jsonl").write_text(json.dumps({"file": "a.png", "text": "A"}) + "\n")
    (plain,) = load_crops(tmp_path, line_input=PLAIN)
    (toned,) = load_crops(tmp_path, line_input=PLAIN, tone=(0.72, 45.0))
    assert (plain.image[2, 100, 0], plain.image[14, 100, 0]) == (255, 0)
    assert (toned.image[2, 100, 0], toned.image[14, 100, 0]) == (229, 45)  # 0.72 * 255 + 45, 0.72 * 0 + 45
    assert (toned.image[:, 224:] == 255).all()  # the padding stays white
    # Toned, then stretched: the stretch keeps the tone (it once stretched the untoned crop).
    (both,) = load_crops(tmp_path, x_scale=1.5, line_input=PLAIN, tone=(0.72, 45.0))
    assert (both.image[2, 150, 0], both.image[14, 150, 0]) == (229, 45)


def test_two_readers_are_compared_line_length_by_line_length_and_by_the_case_of_the_print() -> None:
    truths = ["TAX", "RM 1.00", "TOTAL AMOUNT DUE", "GOODS SOLD ARE NOT RETURNABLE"]
    reads = ["TAX", "RM 1.00", "TOTAL AMOUNT DUE", "GOODS SOLD ARE NOT RETURNABLE THANK"]
    others = ["TAK", "RM 1.00", "Total amount due", "Goods sold are not returnable"]
    rows = compare_by([length_band(truth) for truth in truths], truths, reads, others)
    bands = [(row["lines"], row["count"]) for row in rows]
    assert bands == [("0-4", 1), ("10-19", 1), ("20+", 1), ("5-9", 1)]
    assert rows[0]["cer"] == 0 and rows[0]["cer_other"] == round(1 / 3, 4)
    assert rows[2]["cer"] == round(5 / 25, 4) and rows[2]["cer_other"] == 0
    assert (rows[2]["edits"], rows[2]["edits_other"]) == (5, 0)
    by_case = compare_by([letter_case(text) for text in others], truths, reads, others)
    assert [(row["lines"], row["count"]) for row in by_case] == [("mostly lower", 2), ("upper", 2)]
    assert by_case[0]["cer"] == round(5 / (14 + 25), 4)
    assert letter_case("0.00") == "no letters" and letter_case("RM Tax") == "some lower"


def test_narrow_print_is_told_by_the_pixels_each_printed_character_gets() -> None:
    # 18 characters (the spaces between count) in 360 px: 20 px each; spaces round the line do not.
    assert char_width_band(360, " RM 12.50 CASH 1.00 ") == "20-25 px a character"
    assert char_width_band(359, "RM 12.50 CASH 1.00 ") == "0-19 px a character"
    assert char_width_band(26 * 4, "TOTA") == "26-31 px a character"
    assert char_width_band(1120, "5") == "32+ px a character"


def _crop(rows: int, paper: int = 255, ink: int = 0) -> np.ndarray:
    """A 3-channel crop `rows` tall holding TOTAL 12.50, about rows 30 to 52 (cap tops to baseline)."""
    crop = np.full((rows, 240, 3), paper, dtype=np.uint8)
    cv2.putText(crop, "TOTAL 12.50", (4, 50), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (ink, ink, ink), 2)
    return crop


def _band_of(crop: np.ndarray) -> str:
    width = drawn_width(crop.shape[0], crop.shape[1], AT_3)
    return ink_fill_band(prepare_line(crop, AT_3), width)


def test_the_ink_fill_band_tells_tight_and_neighboured_crops_from_loose_ones() -> None:
    loose = _crop(80)  # the print's rows (about 30-52) take little more than a quarter of 80
    assert _band_of(loose) == "ink over 0-74% of the height"
    ink_rows = np.flatnonzero((loose < 128).any(axis=(1, 2)))
    tight = loose[ink_rows[0] : ink_rows[-1] + 1]
    assert _band_of(tight) == "ink over 95+% of the height"
    neighboured = loose.copy()
    neighboured[:3, 20:200:9] = 0  # the descenders of the line above, cut by the box's top
    neighboured[-3:, 30:210:11] = 0  # and the ascenders of the line below
    assert _band_of(neighboured) == "ink over 95+% of the height"
    # A dark scan: ink is told by its distance from the paper, not by a level (the paper, 110, is
    # darker than half of 255 everywhere).
    grey = _crop(80, paper=110, ink=20)
    grey_rows = np.flatnonzero((grey < 65).any(axis=(1, 2)))
    assert _band_of(grey[grey_rows[0] - 3 : grey_rows[-1] + 4]) == "ink over 75-94% of the height"
    assert _band_of(np.full((40, 240, 3), 255, dtype=np.uint8)) == "ink over 0-74% of the height"


def _dark_band(
    stroke: int, paper: int = 255, ink: int = 0, text: str = "TOTAL 12.50", width: int = 240
) -> str:
    crop = np.full((40, width, 3), paper, dtype=np.uint8)
    cv2.putText(crop, text, (4, 32), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (ink, ink, ink), stroke)
    return dark_share_band(prepare_line(crop, AT_3), drawn_width(40, width, AT_3))


def test_the_dark_share_band_tells_thin_print_from_bold() -> None:
    assert _dark_band(1) == "0-12% of pixels dark"
    assert _dark_band(5) == "19+% of pixels dark"
    # Told by the distance from the paper, not by a level: the same bold print on a dark scan.
    assert _dark_band(5, paper=120, ink=30) == "19+% of pixels dark"
    # A short line is padded with white to the model's narrowest image (126 of 224 columns here):
    # the padding is not print, and counted it would put this bold line in 16-18%.
    assert _dark_band(5, text="88", width=60) == "19+% of pixels dark"


def test_marks_are_counted_where_the_truth_has_them_and_where_the_read_adds_them() -> None:
    pairs = [
        ("CUSTOMER'S COPY", "customers copy"),  # the apostrophe dropped
        ("GST@6%", "GST06%"),  # the at sign read as a zero
        ("TRI SHAAS", "TRI '3HAAS"),  # an apostrophe where there is none
        ("Z = 0%", "Z = 0%"),
    ]
    counts = by_truth_char(pairs, "'@%0")
    assert counts["'"] == {"in_truths": 1, "wrong": 1, "lines_added": 1}
    assert counts["@"] == {"in_truths": 1, "wrong": 1, "lines_added": 0}
    assert counts["%"] == {"in_truths": 2, "wrong": 0, "lines_added": 0}
    assert counts["0"] == {"in_truths": 1, "wrong": 0, "lines_added": 1}  # GST06% holds a zero more


def test_the_lines_read_worse_than_another_reader_are_listed_by_the_edits_beyond_its() -> None:
    lines = [
        ("a.jpg", "TOTAL 12.50", "total 12 50", "TOTAL 12.50"),  # one edit; the other none
        ("b.jpg", "CASH", "CASH", "CA5H"),  # read better than the other: not listed
        ("c.jpg", "GUARDIAN", "bUard1an", "GUARD1AN"),  # two edits against one (case aside)
        ("d.jpg", "0.00", "O.OO", "O.OO"),  # as wrong as the other: not listed
        ("e.jpg", "POINTS MISSED:", "Points Hissid'S", "Points Missed:"),  # four against none
    ]
    assert lines_read_worse(lines) == [
        (4, "e.jpg", "POINTS MISSED:", "Points Hissid'S", "Points Missed:"),
        (1, "a.jpg", "TOTAL 12.50", "total 12 50", "TOTAL 12.50"),
        (1, "c.jpg", "GUARDIAN", "bUard1an", "GUARD1AN"),
    ]


def _printed(text: str, width: int, height: int = 40) -> np.ndarray:
    """A white crop `height` px tall with `text` in black across `width` px, as a receipt line."""
    crop = np.full((height, width, 3), 255, np.uint8)
    cv2.putText(crop, text, (4, height - 10), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (0, 0, 0), 2)
    return crop


def _fits(piece: np.ndarray) -> bool:
    return piece.shape[1] * 3.0 * LINE_HEIGHT / piece.shape[0] <= MAX_WIDTH


def test_a_line_within_the_cap_is_read_whole() -> None:
    crop = _printed("TOTAL 12.50", 400)  # 840 px at the stretch of 3.0
    (whole,) = split_long_line(crop, AT_3)
    assert whole is crop


def test_a_line_over_the_cap_is_cut_at_a_gap_between_words_into_pieces_that_fit() -> None:
    crop = _printed("RECEIVED ABOVE GOODS IN GOOD ORDER", 640)  # 1,344 px at 3.0: over the 1,120 cap
    pieces = split_long_line(crop, AT_3)
    assert len(pieces) == 2 and all(_fits(piece) for piece in pieces)
    assert sum(piece.shape[1] for piece in pieces) == crop.shape[1]
    cut = pieces[0].shape[1]
    ink = crop.min(axis=2) < 128
    # The cut runs through white a word space wide, not through a letter or between two of them.
    assert not ink[:, cut - 5 : cut + 5].any()
    assert np.array_equal(np.hstack(pieces), crop)
    # Drawn two rows of tokens high at half the stretch, the line is as wide: cut the same way.
    tall = split_long_line(crop, LineInput(stretch=1.5, height=2 * LINE_HEIGHT))
    assert [piece.shape for piece in tall] == [piece.shape for piece in pieces]


def test_a_very_long_line_is_cut_as_often_as_it_takes_and_one_without_gaps_is_not() -> None:
    crop = _printed("NO 18 20 22 JALAN BUNGA TANJONG 2/16 TAMAN MALURI CHERAS KL", 1100)
    pieces = split_long_line(crop, AT_3)
    assert len(pieces) >= 3 and all(_fits(piece) for piece in pieces)
    solid = np.full((40, 640, 3), 255, np.uint8)
    solid[8:32, 10:630] = 0  # a bar of ink: no gap to cut at
    (whole,) = split_long_line(solid, AT_3)
    assert whole is solid


def test_edits_fall_on_digits_letters_or_marks_by_the_character_they_change() -> None:
    pairs = [("RM 5.80", "RM S.8O"), ("TOTAL", "TOTAL."), ("ABC", "AC")]
    counts = edits_by_kind(pairs)
    # 5 read S and 0 read O are the digits' edits, though the reads are letters.
    assert counts["digit"] == {"in_truths": 3, "edits": 2}
    assert counts["letter"] == {"in_truths": 2 + 5 + 3, "edits": 1}  # the B dropped
    assert counts["mark"] == {"in_truths": 1, "edits": 1}  # the full stop added
    truths, reads = [truth for truth, _ in pairs], [read for _, read in pairs]
    rows = compare_kinds(truths, reads, ["RM 5.80", "TOTA", "ABC"])
    assert rows[0] == {"kind": "digit", "in_truths": 3, "edits": 2, "edits_other": 0}
    assert rows[1] == {"kind": "letter", "in_truths": 10, "edits": 1, "edits_other": 1}  # the L dropped
    assert rows[2]["kind"] == "mark" and rows[2]["edits_other"] == 0


def test_each_digit_is_compared_between_two_readers_of_the_same_lines() -> None:
    rows = {row["char"]: row for row in compare_chars(["58", "60"], ["S8", "60"], ["56", "80"], "568")}
    assert (rows["5"]["wrong"], rows["5"]["wrong_other"]) == (1, 0)
    assert (rows["8"]["wrong"], rows["8"]["wrong_other"]) == (0, 1)
    assert (rows["6"]["wrong"], rows["6"]["wrong_other"]) == (0, 1)  # the other read 60 as 80
    assert (rows["6"]["lines_added"], rows["6"]["lines_added_other"]) == (0, 1)  # 58 read 56
    assert rows["8"]["lines_added_other"] == 1 and rows["8"]["in_truths"] == 1


def test_the_grey_edge_band_tells_one_bit_scans_from_smooth_print(tmp_path) -> None:
    import json

    from train.eval_lines import grey_edge_band, load_crops
    from train.line_shapes import grey_edge_share

    hard = np.full((40, 240, 3), 255, np.uint8)
    cv2.putText(hard, "TOTAL 12.50", (4, 32), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 2)  # no anti-aliasing
    smooth = cv2.GaussianBlur(hard, (0, 0), 1.5)
    cv2.imwrite(str(tmp_path / "hard.png"), hard)
    cv2.imwrite(str(tmp_path / "smooth.png"), smooth)
    cv2.imwrite(str(tmp_path / "blank.png"), np.full((40, 240, 3), 250, np.uint8))
    names = ("hard", "smooth", "blank")
    (tmp_path / "labels.jsonl").write_text(
        "".join(json.dumps({"file": f"{name}.png", "text": "A"}) + "\n" for name in names)
    )
    bands = [grey_edge_band(grey_edge_share(crop.line)) for crop in load_crops(tmp_path)]
    assert bands == ["0-9% of the ink grey", "50+% of the ink grey", "no print to measure edges on"]
    assert grey_edge_band(0.1) == "10-29% of the ink grey"
    assert grey_edge_band(0.2999) == "10-29% of the ink grey"
    assert grey_edge_band(0.3) == "30-49% of the ink grey"
