"""train.paired: two readers' CER on the same crops, compared page by page with a paired bootstrap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train.paired import compare, load_reads, load_truths, main, page_counts

TRUTH = "TOTAL 12.50"


def _crops(root: Path, pages: int, lines_a_page: int = 3) -> Path:
    crops = root / "crops"
    crops.mkdir()
    with (crops / "labels.jsonl").open("w", encoding="utf-8") as labels:
        for page in range(pages):
            for line in range(lines_a_page):
                record = {"file": f"{page:02d}{line}.jpg", "text": TRUTH, "page": f"p{page:02d}"}
                labels.write(json.dumps(record) + "\n")
    return crops


def _eval_out(path: Path, reads: dict[str, str]) -> Path:
    lines = [{"file": name, "truth": TRUTH, "read": read} for name, read in reads.items()]
    path.write_text(json.dumps({"summary": {}, "lines": lines}), encoding="utf-8")
    return path


def test_a_reader_better_on_every_page_is_better_beyond_the_luck_of_the_pages(tmp_path: Path) -> None:
    truths = load_truths(_crops(tmp_path, pages=20))
    one_wrong = dict.fromkeys(truths, "TOTAL 12.5O")
    right = dict.fromkeys(truths, TRUTH)
    result = compare(page_counts(truths, one_wrong, right), resamples=999)
    assert result.cer_a == pytest.approx(1 / 10)  # one edit in ten characters, spaces aside
    assert result.cer_b == 0.0
    assert result.high < 0  # the whole interval says B reads better
    assert result.b_better_share == 1.0
    assert result.pages == 20


def test_a_difference_carried_by_one_receipt_is_within_the_luck_of_the_pages(tmp_path: Path) -> None:
    # The same reads on 19 pages; on one page B misreads all three lines badly. Its CER is higher,
    # but a resample that does not draw that page shows no difference at all.
    truths = load_truths(_crops(tmp_path, pages=20))
    reads_a = dict.fromkeys(truths, TRUTH)
    reads_b = {name: ("XXXXX XXXXX" if truths[name][0] == "p00" else TRUTH) for name in truths}
    result = compare(page_counts(truths, reads_a, reads_b), resamples=999)
    assert result.difference > 0
    assert result.low <= 0 < result.high
    assert result.b_better_share == 0.0  # never better: only level or worse


def test_one_page_has_nothing_to_resample(tmp_path: Path) -> None:
    truths = load_truths(_crops(tmp_path, pages=1))
    result = compare(page_counts(truths, dict.fromkeys(truths, TRUTH), dict.fromkeys(truths, "TOTAL")))
    assert result.low == result.difference == result.high > 0
    assert result.resamples == 0


def test_spaces_count_only_when_counted_spaced(tmp_path: Path) -> None:
    truths = load_truths(_crops(tmp_path, pages=4))
    run_together = dict.fromkeys(truths, "TOTAL12.50")
    right = dict.fromkeys(truths, TRUTH)
    assert compare(page_counts(truths, right, run_together), resamples=99).difference == 0.0
    spaced = compare(page_counts(truths, right, run_together, spaced=True), resamples=99)
    assert spaced.cer_b == pytest.approx(1 / 11)


def test_reads_come_from_eval_lines_or_from_saved_onnx_hints(tmp_path: Path) -> None:
    evaluated = _eval_out(tmp_path / "eval.json", {"001.jpg": "TOTAL 1"})
    hints = tmp_path / "hints.json"
    hints.write_text(json.dumps([{"file": "001.jpg", "text": "TOTAL 2", "confidence": 0.8}]))
    assert load_reads(evaluated) == {"001.jpg": "TOTAL 1"}
    assert load_reads(hints) == {"001.jpg": "TOTAL 2"}
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"summary": {}}))
    with pytest.raises(ValueError, match="neither"):
        load_reads(other)


def test_the_command_prints_both_rates_and_the_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crops = _crops(tmp_path, pages=6)
    names = list(load_truths(crops))
    a = _eval_out(tmp_path / "a.json", dict.fromkeys(names, "TOTAL 12.5O"))
    b = _eval_out(tmp_path / "b.json", dict.fromkeys(names, TRUTH))
    assert main(["--crops", str(crops), str(a), str(b), "--resamples", "99"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("10.00% / 9.09% spaced")
    assert printed[1].endswith("0.00% / 0.00% spaced")
    assert printed[2].startswith("B - A, whitespace-free: -10.00 points, 95% interval -10.00 to -10.00")
    assert "B better in 100.0%" in printed[2]


def test_the_command_refuses_reads_that_miss_crops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crops = _crops(tmp_path, pages=2)
    names = list(load_truths(crops))
    a = _eval_out(tmp_path / "a.json", dict.fromkeys(names, TRUTH))
    b = _eval_out(tmp_path / "b.json", dict.fromkeys(names[1:], TRUTH))
    with pytest.raises(SystemExit) as stopped:
        main(["--crops", str(crops), str(a), str(b)])
    assert stopped.value.code == 2
    assert "1 crops" in capsys.readouterr().err
