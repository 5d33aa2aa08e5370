"""The engine cascade: which pages the VLM reads again, its draft, its boxes, and every way it falls back."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from appliance.config import CascadeConfig
from appliance.document import Line
from appliance.engines.base import PageText
from appliance.engines.vlm_gguf.output import make_line
from appliance.pipeline.cascade import (
    Cascade,
    changed_characters,
    decoding_totals,
    place_lines,
    prepare_joint,
    single_spaced,
)
from tests.fakes.engines import FakeVlmReader

PAGE = np.full((400, 300, 3), 255, dtype=np.uint8)


def _onnx_line(text: str, y: float, confidence: float) -> Line:
    line = make_line(text, [confidence] * len(text), (20.0, y, 220.0, y + 20.0), engine="ppocr_onnx")
    return line


def _first_read(confidence: float) -> PageText:
    return PageText(
        lines=[
            _onnx_line("TOTAL 12.5O", 200.0, confidence),
            _onnx_line("ACME STORE", 20.0, confidence),
            _onnx_line("TEA 3.00", 100.0, confidence),
        ],
        timings_ms={"det": 5.0},
    )


def test_off_and_confident_pages_keep_the_onnx_read_without_calling_the_vlm() -> None:
    reader = FakeVlmReader(["X"])
    for config, confidence in (
        (CascadeConfig(mode="off"), 0.5),
        (CascadeConfig(mode="below_threshold"), 0.95),
    ):
        result = Cascade(reader, config).refine(PAGE, _first_read(confidence))
        assert [line.engine for line in result.lines] == ["ppocr_onnx"] * 3
        assert result.details["cascade"]["vlm_used"] is False
    assert reader.hints == []


def test_an_unsure_page_is_read_again_with_the_onnx_text_in_reading_order_as_the_draft() -> None:
    reader = FakeVlmReader(["ACME STORE", "TEA 3.00", "TOTAL 12.50"])
    result = Cascade(reader, CascadeConfig(mode="below_threshold", min_confidence=0.9)).refine(
        PAGE, _first_read(0.6)
    )
    assert reader.hints == ["ACME STORE\nTEA 3.00\nTOTAL 12.5O"]
    assert [line.text for line in result.lines] == ["ACME STORE", "TEA 3.00", "TOTAL 12.50"]
    assert all(line.engine == "vlm_gguf" for line in result.lines)
    # Each VLM line sits where the ONNX engine found it (the corrected total included).
    assert [line.box[1] for line in result.lines] == [20.0, 100.0, 200.0]
    assert result.details["cascade"]["route"] == "vlm"
    assert result.details["vlm_gguf"]["acceptance_rate"] == 0.8
    assert result.timings_ms["det"] == 5.0 and result.timings_ms["vlm_decode"] == 1.0


def test_always_reads_confident_pages_too() -> None:
    reader = FakeVlmReader(["ACME STORE"])
    result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, _first_read(0.99))
    assert result.details["cascade"]["vlm_used"] is True
    assert len(reader.hints) == 1


def test_a_vlm_failure_keeps_the_onnx_read_and_says_why() -> None:
    reader = FakeVlmReader([], outcome="crash")
    first = _first_read(0.5)
    result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, first)
    assert [line.text for line in result.lines] == [line.text for line in first.lines]
    assert result.details["cascade"]["route"] == "onnx_fallback"
    assert "llama_decode failed" in result.details["cascade"]["error"]
    assert any("the ONNX read stands" in warning for warning in result.warnings)


def test_a_stopped_generation_keeps_the_onnx_read_and_sends_the_page_to_review() -> None:
    for outcome in ("timeout", "repetition", "max_tokens"):
        reader = FakeVlmReader(["ACME"], outcome=outcome)
        result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, _first_read(0.5))
        assert all(line.engine == "ppocr_onnx" for line in result.lines)
        assert result.details["cascade"]["route"] == "onnx_fallback"
        assert result.review_reasons, outcome


def test_unmatched_vlm_lines_sit_between_their_matched_neighbours() -> None:
    onnx = [_onnx_line("FIRST LINE", 10.0, 0.9), _onnx_line("LAST LINE", 110.0, 0.9)]
    vlm = [
        make_line(text, [0.9] * len(text), (0, 0, 1, 1))
        for text in ("FIRST LINE", "something the onnx engine missed", "and more", "LAST LINE")
    ]
    placed = place_lines(vlm, onnx)
    assert [line.box[1] for line in placed] == [10.0, 30.0, 70.0, 110.0]
    assert placed[1].box[3] == 70.0  # the two missed lines share the gap 30..110 evenly
    assert [line.text for line in placed] == [line.text for line in vlm]


def test_a_repeated_line_matches_in_order() -> None:
    onnx = [
        _onnx_line("SUBTOTAL", 10.0, 0.9),
        _onnx_line("TAX", 40.0, 0.9),
        _onnx_line("SUBTOTAL", 70.0, 0.9),
    ]
    vlm = [make_line(t, [0.9] * len(t), (0, 0, 1, 1)) for t in ("SUBTOTAL", "TAX", "SUBTOTAL")]
    assert [line.box[1] for line in place_lines(vlm, onnx)] == [10.0, 40.0, 70.0]


def test_an_empty_vlm_answer_on_a_page_with_text_keeps_the_onnx_read() -> None:
    reader = FakeVlmReader([])
    result = Cascade(reader, CascadeConfig(mode="always")).refine(PAGE, _first_read(0.5))
    assert [line.engine for line in result.lines] == ["ppocr_onnx"] * 3
    assert result.details["cascade"] == {
        "vlm_used": True,
        "why": "profile reads every page with the VLM",
        "reader": "vlm_gguf",
        "route": "onnx_fallback",
        "error": "VLM stopped: empty answer",
    }


def _mixed_read() -> PageText:
    """A page read confidently but for its total."""
    return PageText(
        lines=[
            _onnx_line("ACME STORE", 20.0, 0.99),
            _onnx_line("TEA 3.00", 100.0, 0.97),
            _onnx_line("TOTAL 12.5O", 200.0, 0.6),
        ]
    )


def test_line_by_line_only_the_unsure_lines_go_to_the_vlm_each_with_its_own_draft() -> None:
    reader = FakeVlmReader([], answers={"TOTAL 12.5O": ["TOTAL 12.50"]})
    config = CascadeConfig(mode="below_threshold", unit="lines", min_confidence=0.9)
    result = Cascade(reader, config).refine(PAGE, _mixed_read())
    assert reader.hints == ["TOTAL 12.5O"]
    # The crop is the line's box (200 x 20 at 20, 200) with a quarter of its height round it.
    assert reader.shapes == [(30, 210)]
    assert [line.text for line in result.lines] == ["ACME STORE", "TEA 3.00", "TOTAL 12.50"]
    assert [line.engine for line in result.lines] == ["ppocr_onnx", "ppocr_onnx", "vlm_gguf"]
    assert result.lines[2].box == (20.0, 200.0, 220.0, 220.0)
    assert [word.text for word in result.lines[2].words] == ["TOTAL", "12.50"]
    cascade = result.details["cascade"]
    assert cascade["route"] == "vlm_lines" and cascade["lines_sent"] == 1 and cascade["lines_replaced"] == 1
    assert cascade["why"] == "1 of 3 ONNX lines below confidence 0.9"
    assert result.details["vlm_gguf"]["lines_read"] == 1


def test_line_by_line_a_confident_page_is_not_sent_and_always_sends_every_line() -> None:
    reader = FakeVlmReader(["X"])
    confident = Cascade(reader, CascadeConfig(mode="below_threshold", unit="lines")).refine(
        PAGE, _first_read(0.95)
    )
    assert confident.details["cascade"]["vlm_used"] is False and reader.hints == []
    # Every read taken, however much it changes: what was sent is what is counted.
    every_line = CascadeConfig(mode="always", unit="lines", keep="second", max_changes=None)
    every = Cascade(reader, every_line).refine(PAGE, _mixed_read())
    assert sorted(str(hint) for hint in reader.hints) == ["ACME STORE", "TEA 3.00", "TOTAL 12.5O"]
    assert every.details["cascade"]["lines_replaced"] == 3


def test_line_by_line_each_failed_line_keeps_its_onnx_read_and_is_counted() -> None:
    first = PageText(
        lines=[_onnx_line(text, 20.0 + 40 * i, 0.5) for i, text in enumerate(["A1", "B2", "C3"])]
    )
    reader = FakeVlmReader([], answers={"A1": None, "B2": [], "C3": ["C8"]})
    result = Cascade(reader, CascadeConfig(mode="always", unit="lines")).refine(PAGE, first)
    assert [line.text for line in result.lines] == ["A1", "B2", "C8"]
    assert [line.engine for line in result.lines] == ["ppocr_onnx", "ppocr_onnx", "vlm_gguf"]
    kept = result.details["cascade"]["lines_kept"]
    assert len(kept) == 2 and "RuntimeError" in kept[0] and "empty answer" in kept[1]
    assert sum("the ONNX read stands" in warning for warning in result.warnings) == 2
    totals = decoding_totals([result.details])
    assert totals["pages"] == 1 and totals["fallbacks"] == 2 and totals["generated_tokens"] == 1


def test_line_by_line_stops_sending_when_the_page_time_runs_out() -> None:
    reader = FakeVlmReader([], answers={"A1": ["A7"]})
    first = PageText(lines=[_onnx_line("A1", 20.0, 0.5), _onnx_line("B2", 60.0, 0.5)])
    config = CascadeConfig(mode="always", unit="lines", timeout_seconds=1e-9)
    result = Cascade(reader, config).refine(PAGE, first)
    assert reader.hints == [] and [line.text for line in result.lines] == ["A1", "B2"]
    assert result.details["cascade"]["lines_kept"] == ["2 line(s) not sent: the page's time ran out"]


class _SureReader(FakeVlmReader):
    """A VLM line reader whose answers come with their own confidence."""

    def __init__(self, answers: dict[str, tuple[str, float]]) -> None:
        super().__init__([])
        self.sure = answers
        self.crops: list[np.ndarray] = []

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        self.crops.append(image)
        self.hints.append(hint)
        self.shapes.append(image.shape[:2])
        text, confidence = self.sure[str(hint)]
        height, width = image.shape[:2]
        line = make_line(text, [confidence] * len(text), (0.0, 0.0, float(width), float(height)))
        return PageText(lines=[line], timings_ms={"rec2": 2.0}, details={self.name: {"lines_read": 1}})


class _SurenessReader(_SureReader):
    """A recogniser-like second reader: its own crop margin, and the second read kept under `auto`."""

    name = "onnx_reader"
    line_margin = 0.125
    auto_keep = "second"
    auto_max_changes = None


def test_a_line_read_again_is_single_spaced_like_the_first_engines_lines() -> None:
    reader = FakeVlmReader([], answers={"TOTAL 12.5O": ["  TOTAL   12.50\t "]})
    config = CascadeConfig(mode="below_threshold", unit="lines", min_confidence=0.9)
    result = Cascade(reader, config).refine(PAGE, _mixed_read())
    again = result.lines[2]
    assert again.engine == "vlm_gguf" and again.text == "TOTAL 12.50"
    assert len(again.char_confidences) == len(again.text)
    assert [word.text for word in again.words] == ["TOTAL", "12.50"]


def test_single_spacing_keeps_each_character_with_its_own_confidence() -> None:
    text, confidences = single_spaced(" A  B\tC ", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert (text, confidences) == ("A B C", [0.2, 0.3, 0.5, 0.6, 0.7])
    # Confidences that are not one a character are left alone rather than misassigned.
    assert single_spaced("A  B", [0.9]) == ("A B", [0.9])


def test_keep_more_confident_lets_a_surer_first_read_stand_and_the_second_replace_the_rest() -> None:
    first = PageText(lines=[_onnx_line("A1", 20.0, 0.6), _onnx_line("B2", 60.0, 0.8)])
    answers = {"A1": ("A7", 0.95), "B2": ("B8", 0.7)}
    config = CascadeConfig(mode="always", unit="lines", reader="onnx_reader", keep="more_confident")
    result = Cascade(_SurenessReader(answers), config).refine(PAGE, first)
    assert [line.text for line in result.lines] == ["A7", "B2"]
    assert [line.engine for line in result.lines] == ["onnx_reader", "ppocr_onnx"]
    cascade = result.details["cascade"]
    assert (
        cascade["reader"] == "onnx_reader" and cascade["lines_replaced"] == 1 and cascade["lines_kept"] == []
    )
    assert result.timings_ms["rec2"] == 4.0 and result.details["onnx_reader"]["lines_read"] == 2
    # keep: auto is second for a recogniser: the second read is taken even where it is less sure.
    second = Cascade(_SurenessReader(answers), CascadeConfig(mode="always", unit="lines")).refine(PAGE, first)
    assert [line.text for line in second.lines] == ["A7", "B8"]
    assert second.details["cascade"]["keep"] == "second"


def test_keep_auto_lets_a_vlm_replace_only_the_lines_it_is_surer_of() -> None:
    # Measured with train/'s line reader: the surer read reads the receipts better than the ONNX
    # text alone, the VLM's read on every unsure line worse (bench/README.md).
    first = PageText(lines=[_onnx_line("A1", 20.0, 0.6), _onnx_line("B2", 60.0, 0.8)])
    answers = {"A1": ("A7", 0.95), "B2": ("B8", 0.7)}
    result = Cascade(_SureReader(answers), CascadeConfig(mode="always", unit="lines")).refine(PAGE, first)
    assert [line.text for line in result.lines] == ["A7", "B2"]
    assert result.details["cascade"]["keep"] == "more_confident"
    assert result.details["cascade"]["lines_replaced"] == 1
    config = CascadeConfig(mode="always", unit="lines", keep="second")
    second = Cascade(_SureReader(answers), config).refine(PAGE, first)
    assert [line.text for line in second.lines] == ["A7", "B8"]


def test_characters_changed_between_reads_leave_spaces_and_case_aside() -> None:
    assert changed_characters("Tota1  12.5O", "total 12.50") == 2
    assert changed_characters("A B", "ab") == 0
    assert changed_characters("", "SR") == 2


def test_a_vlm_read_may_correct_a_line_but_not_rewrite_it() -> None:
    # Seen on receipts: a surer VLM read that rewrites most of an unsure line (a fragment, another
    # script, decoration) made the page worse far more often than better; small fixes gained.
    first = PageText(
        lines=[_onnx_line("TOTAL 12.5O", 20.0, 0.6), _onnx_line("Totel Amt Peyable :", 60.0, 0.6)]
    )
    answers = {"TOTAL 12.5O": ("TOTAL 12.50", 0.95), "Totel Amt Peyable :": ("Table Ant Payment :", 0.95)}
    config = CascadeConfig(mode="always", unit="lines")
    result = Cascade(_SureReader(answers), config).refine(PAGE, first)
    assert [line.text for line in result.lines] == ["TOTAL 12.50", "Totel Amt Peyable :"]
    cascade = result.details["cascade"]
    assert cascade["max_changes"] == 3 and cascade["lines_replaced"] == 1 and cascade["lines_kept"] == []
    unlimited = CascadeConfig(mode="always", unit="lines", max_changes=None)
    anything = Cascade(_SureReader(answers), unlimited).refine(PAGE, first)
    assert [line.text for line in anything.lines] == ["TOTAL 12.50", "Table Ant Payment :"]
    none = CascadeConfig(mode="always", unit="lines", max_changes=0)
    assert [line.text for line in Cascade(_SureReader(answers), none).refine(PAGE, first).lines] == [
        "TOTAL 12.5O",
        "Totel Amt Peyable :",
    ]
    # A second recogniser names no limit of its own: under auto its rewrites are taken.
    recogniser = Cascade(_SurenessReader(answers), config).refine(PAGE, first)
    assert [line.text for line in recogniser.lines] == ["TOTAL 12.50", "Table Ant Payment :"]
    assert recogniser.details["cascade"]["max_changes"] is None


def test_max_changes_takes_auto_a_count_or_null_only() -> None:
    for value in ("auto", None, 0, 5):
        assert CascadeConfig.model_validate({"max_changes": value}).max_changes == value
    for wrong in (-1, "many", 2.5, True):
        with pytest.raises(ValidationError):
            CascadeConfig.model_validate({"max_changes": wrong})


def test_a_reader_gets_its_own_margin_and_an_upside_down_line_turned_upright() -> None:
    page = np.full((400, 300, 3), 255, dtype=np.uint8)
    page[200:210, 20:120] = 0  # ink in the top-left half of the line's box
    line = _onnx_line("TOTAL 12.5O", 200.0, 0.5)
    line.rotated_180 = True
    reader = _SurenessReader({"TOTAL 12.5O": ("TOTAL 12.50", 0.99)})
    Cascade(reader, CascadeConfig(mode="always", unit="lines")).refine(PAGE, PageText(lines=[line]))
    # The box (200 x 20) with an eighth of its height (2.5 px, rounded outwards) round it, not the
    # VLM's quarter (30 x 210).
    assert reader.shapes == [(26, 206)]
    Cascade(reader, CascadeConfig(mode="always", unit="lines")).refine(page, PageText(lines=[line]))
    crop = reader.crops[-1]
    assert crop[-10:, -100:].mean() < crop[:10, :100].mean(), "the ink is now bottom right: turned 180"


class _SideBySideReader(FakeVlmReader):
    """A line reader that reads lines together: each group's answers are scripted in order."""

    lines_together = 2

    def __init__(self, groups: list[list[list[str]] | None], answers: dict[str, list[str] | None]) -> None:
        super().__init__([], answers=answers)
        self.groups = groups
        self.group_sizes: list[int] = []
        self.group_hints: list[list[str | None] | None] = []

    def read_lines(
        self, images: list[np.ndarray], deadline: float | None = None, hints: list[str | None] | None = None
    ) -> list[PageText]:
        self.group_sizes.append(len(images))
        self.group_hints.append(hints)
        script = self.groups.pop(0)
        if script is None:
            raise RuntimeError("llama_decode failed with status -3")
        lines, self.lines = self.lines, []
        try:
            read = []
            for texts in script:
                self.lines = texts
                read.append(self.read(images[len(read)], hint=(hints or [None] * len(images))[len(read)]))
            return read
        finally:
            self.lines = lines


def test_lines_read_together_go_in_groups_and_a_failed_or_lone_line_is_read_alone() -> None:
    first = PageText(
        lines=[_onnx_line(text, 20.0 + 40 * i, 0.5) for i, text in enumerate(["A1", "B2", "C3"])]
    )
    first.lines.append(_onnx_line("D4", 140.0, 0.5))
    first.lines.append(_onnx_line("E5", 180.0, 0.5))
    reader = _SideBySideReader([[["A7"], ["B8"]], None], answers={"C3": ["C9"], "D4": ["D0"], "E5": ["E6"]})
    result = Cascade(reader, CascadeConfig(mode="always", unit="lines")).refine(PAGE, first)
    # Groups of two: the second fails and its lines are read one by one; the fifth line, alone
    # in its group, is read alone too.
    assert reader.group_sizes == [2, 2]
    assert [line.text for line in result.lines] == ["A7", "B8", "C9", "D0", "E6"]
    # Every line gets its ONNX text as its draft, read together or alone.
    assert reader.group_hints == [["A1", "B2"], ["C3", "D4"]]
    assert reader.hints == ["A1", "B2", "C3", "D4", "E5"]
    assert result.details["cascade"]["lines_replaced"] == 5 and result.details["cascade"]["lines_kept"] == []


def test_lines_read_together_are_not_sent_once_the_page_time_runs_out() -> None:
    first = PageText(
        lines=[_onnx_line(text, 20.0 + 40 * i, 0.5) for i, text in enumerate(["A1", "B2", "C3"])]
    )
    reader = _SideBySideReader([[["A7"], ["B8"]]], answers={})
    config = CascadeConfig(mode="always", unit="lines", timeout_seconds=1e-9)
    result = Cascade(reader, config).refine(PAGE, first)
    assert reader.group_sizes == [] and reader.hints == []
    assert [line.text for line in result.lines] == ["A1", "B2", "C3"]
    assert result.details["cascade"]["lines_kept"] == ["3 line(s) not sent: the page's time ran out"]


class _ScoringReader(_SureReader):
    """A VLM line reader that also says how likely it finds its own read and its hint (`score_hints`)."""

    def __init__(self, answers: dict[str, tuple[str, float]], scores: dict[str, tuple[float, float]]) -> None:
        super().__init__(answers)
        self.scores = scores
        self.scoring = False

    def score_hints(self, on: bool = True) -> bool:
        self.scoring = on
        return True

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        page = super().read(image, hint, deadline)
        own, of_hint = self.scores[str(hint)]
        figures = {"lines_read": 1, "stop_reason": "end", "read_log_likelihood": own}
        figures["hint_log_likelihood"] = of_hint
        return PageText(lines=page.lines, timings_ms=page.timings_ms, details={self.name: figures})


def _scored_line(text: str, y: float, confidence: float, log_p: dict[str, float] | None) -> Line:
    line = _onnx_line(text, y, confidence)
    line.likelihood = None if log_p is None else log_p.__getitem__
    return line


def test_keep_joint_takes_the_surer_read_only_where_both_readers_together_find_it_likelier() -> None:
    first = PageText(
        lines=[
            # The VLM is surer of A7, but the ONNX recogniser finds it far less likely than A1.
            _scored_line("A1", 20.0, 0.6, {"A1": -0.1, "A7": -9.0}),
            # Surer, and both readers together find B8 likelier.
            _scored_line("B2", 60.0, 0.6, {"B2": -3.0, "B8": -0.5}),
            # Likelier together, but the VLM is less sure of D9 than the ONNX engine of D4.
            _scored_line("D4", 140.0, 0.8, {"D4": -3.0, "D9": -0.5}),
            # No evidence kept for this line (a GPU graph's): the surer read.
            _scored_line("C3", 100.0, 0.5, None),
        ]
    )
    answers = {"A1": ("A7", 0.95), "B2": ("B8", 0.9), "D4": ("D9", 0.7), "C3": ("C5", 0.9)}
    scores = {"A1": (-0.5, -2.0), "B2": (-0.2, -6.0), "D4": (-0.2, -6.0), "C3": (-0.1, -0.3)}
    config = CascadeConfig(mode="always", unit="lines", keep="joint")
    result = Cascade(_ScoringReader(answers, scores), config).refine(PAGE, first)
    assert [line.text for line in result.lines] == ["A1", "B8", "D4", "C5"]
    assert result.details["cascade"]["keep"] == "joint"
    more_confident = CascadeConfig(mode="always", unit="lines", keep="more_confident")
    surer = Cascade(_ScoringReader(answers, scores), more_confident).refine(PAGE, first)
    assert [line.text for line in surer.lines] == ["A7", "B8", "D4", "C5"]


def test_keep_joint_asks_both_readers_for_their_scores_and_says_when_one_cannot() -> None:
    class _First:
        def __init__(self) -> None:
            self.classes = 0

        def keep_step_evidence(self, classes: int) -> bool:
            self.classes = classes
            return True

    first, reader = _First(), _ScoringReader({}, {})
    assert prepare_joint(first, reader)
    assert first.classes > 0 and reader.scoring
    assert not prepare_joint(object(), _ScoringReader({}, {}))
    assert not prepare_joint(_First(), _SureReader({}))
