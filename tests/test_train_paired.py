"""train.paired: two readers' CER on the same crops, compared page by page with a paired bootstrap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.page_bootstrap import compare
from train.paired import load_reads, load_truths, main, receipt_counts

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


def test_a_receipts_crops_are_counted_together(tmp_path: Path) -> None:
    truths = load_truths(_crops(tmp_path, pages=2))  # p00 and p01, three crops each
    reads_a = {name: ("TOTAL 12.5O" if page == "p00" else TRUTH) for name, (page, _) in truths.items()}
    counts = receipt_counts(truths, [reads_a], [dict.fromkeys(truths, TRUTH)])
    assert counts.edits_a.tolist() == [3, 0]
    assert counts.edits_b.tolist() == [0, 0]
    assert counts.chars.tolist() == [30, 30]


def test_spaces_count_only_when_counted_spaced(tmp_path: Path) -> None:
    truths = load_truths(_crops(tmp_path, pages=4))
    run_together = dict.fromkeys(truths, "TOTAL12.50")
    right = dict.fromkeys(truths, TRUTH)
    assert compare(receipt_counts(truths, [right], [run_together]), resamples=99).difference == 0.0
    spaced = compare(receipt_counts(truths, [right], [run_together], spaced=True), resamples=99)
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


def test_a_group_of_reads_counts_their_mean_edits_on_each_receipt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crops = _crops(tmp_path, pages=4)
    names = list(load_truths(crops))
    one_wrong = _eval_out(tmp_path / "one.json", dict.fromkeys(names, "TOTAL 12.5O"))  # 1 edit a line
    three_wrong = _eval_out(tmp_path / "three.json", dict.fromkeys(names, "TOTAI 1Z.5O"))  # 3 a line
    right = _eval_out(tmp_path / "right.json", dict.fromkeys(names, TRUTH))
    truths = load_truths(crops)
    group = [load_reads(one_wrong), load_reads(three_wrong)]
    counts = receipt_counts(truths, [load_reads(right)], group)
    assert counts.edits_b.tolist() == [6.0] * 4  # (3 + 9) / 2 on each receipt's three lines
    assert main(["--crops", str(crops), str(right), f"{one_wrong},{three_wrong}", "--resamples", "99"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].endswith("20.00% / 18.18% spaced")  # the two reads' 10% and 30%, averaged
    assert printed[2].startswith("B - A, whitespace-free: +20.00 points")


def test_hints_restrict_the_comparison_to_the_lines_the_onnx_reader_was_unsure_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crops = _crops(tmp_path, pages=4)
    names = list(load_truths(crops))
    unsure = set(names[::3])  # the first line of each receipt
    hints = tmp_path / "hints.json"
    hints.write_text(
        json.dumps([{"file": n, "text": "", "confidence": 0.5 if n in unsure else 0.97} for n in names])
    )
    # A reads the unsure lines wrong and the rest right; B the other way round.
    a = _eval_out(tmp_path / "a.json", {n: ("TOTAL 12.5O" if n in unsure else TRUTH) for n in names})
    b = _eval_out(tmp_path / "b.json", {n: (TRUTH if n in unsure else "TOTAL 12.5O") for n in names})
    assert main(["--crops", str(crops), str(a), str(b), "--hints", str(hints), "--resamples", "99"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("10.00% / 9.09% spaced")  # A on the unsure lines only
    assert printed[1].endswith("0.00% / 0.00% spaced")
    assert main(["--crops", str(crops), str(a), str(b), "--resamples", "99"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("3.33% / 3.03% spaced")  # all lines
    with pytest.raises(SystemExit):
        main(["--crops", str(crops), str(a), str(b), "--hints", str(hints), "--below", "0.1"])


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


def test_max_changes_splits_the_edits_saved_and_added_against_the_onnx_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crops = _crops(tmp_path, pages=2, lines_a_page=2)
    names = list(load_truths(crops))
    hints = tmp_path / "hints.json"
    onnx = ["TOTAL 12.5O", TRUTH, "TOTAI 1Z.5O", TRUTH]  # 1, 0, 3 and 0 edits
    hints.write_text(
        json.dumps([{"file": n, "text": t, "confidence": 0.5} for n, t in zip(names, onnx, strict=True)])
    )
    # B mends the first line (1 change), breaks the second by 2, rewrites the third whole and
    # mends it (3 changes), and reads the fourth as another line (9 changes, 9 edits added).
    b_reads = [TRUTH, "TOTAL 12.", TRUTH, "CASH"]
    a = _eval_out(tmp_path / "a.json", dict(zip(names, onnx, strict=True)))
    b = _eval_out(tmp_path / "b.json", dict(zip(names, b_reads, strict=True)))
    args = ["--crops", str(crops), str(a), str(b), "--hints", str(hints), "--resamples", "99"]
    assert main([*args, "--max-changes", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2] == (
        "A against the ONNX reads: reads changing at most 2 characters save 0 edits and add 0; "
        "larger changes save 0 and add 0"
    )
    assert printed[-1] == (
        "B against the ONNX reads: reads changing at most 2 characters save 1 edits and add 2; "
        "larger changes save 3 and add 9"
    )
    assert main([*args, "--max-changes", "3"]) == 0  # the rewrite of the third line is within 3 now
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .endswith("save 4 edits and add 2; larger changes save 0 and add 9")
    )
    group = ["--crops", str(crops), str(a), f"{b},{a}", "--hints", str(hints), "--resamples", "99"]
    assert main([*group, "--max-changes", "2"]) == 0  # B's counts and A's none, averaged
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .endswith("save 0.5 edits and add 1; larger changes save 1.5 and add 4.5")
    )
    with pytest.raises(SystemExit):
        main(["--crops", str(crops), str(a), str(b), "--max-changes", "3"])
