"""train.ensemble: the mean of exports' weights, and the vote among reads of the same crops."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from train.ensemble import average_states, closest, main, surest, voted


def test_average_states_is_the_element_wise_mean() -> None:
    first = {"a": np.array([1.0, 2.0]), "b": np.array([[0.0]])}
    second = {"a": np.array([3.0, 6.0]), "b": np.array([[4.0]])}
    mean = average_states([first, second])
    np.testing.assert_array_equal(mean["a"], [2.0, 4.0])
    np.testing.assert_array_equal(mean["b"], [[2.0]])


def test_average_states_refuses_exports_of_other_weights() -> None:
    with pytest.raises(ValueError, match="different weights"):
        average_states([{"a": np.zeros(2)}, {"b": np.zeros(2)}])


def test_the_vote_keeps_what_most_reads_agree_on_and_the_first_on_a_tie() -> None:
    assert voted(["TOTAL 1O.00", "total 10.00", "TOTAL 10.00"]) == 1  # case and spaces as CER sees them
    assert voted(["A", "B", "C"]) == 0


def test_the_surest_read_has_the_highest_mean_token_probability_and_the_first_on_a_tie() -> None:
    # The mean, not the product: a longer read is not marked down for its length.
    assert surest([[0.9, 0.9], [0.99, 0.6], [0.85, 0.85, 0.95, 0.99]]) == 2
    assert surest([[0.5], [0.5]]) == 0
    assert surest([[], [0.1]]) == 1  # an empty read counts as no confidence


def test_the_oracle_keeps_the_read_nearest_the_truth() -> None:
    assert closest("12.50", ["12.5O", "l2.5O", "12.50"]) == 2


def test_vote_prints_each_reader_the_vote_and_the_oracle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truths = {"a.jpg": "TOTAL 10.00", "b.jpg": "CASH", "c.jpg": "RM 5.00"}
    reads = [
        {"a.jpg": "TOTAL 1O.00", "b.jpg": "CASH", "c.jpg": "RM 5.00"},
        {"a.jpg": "TOTAL 10.00", "b.jpg": "CASN", "c.jpg": "RM 5.00"},
        {"a.jpg": "TOTAL 10.00", "b.jpg": "CASH", "c.jpg": "RM 6.00"},
    ]
    results = []
    for index, read in enumerate(reads):
        lines = [{"file": f, "truth": t, "read": read[f]} for f, t in truths.items()]
        results.append(tmp_path / f"r{index}.json")
        results[-1].write_text(json.dumps({"summary": {}, "lines": lines}))
    hints = tmp_path / "hints.json"
    hints.write_text(
        json.dumps([{"file": f, "text": "", "confidence": 0.5 if f == "a.jpg" else 0.99} for f in truths])
    )
    assert main(["vote", *map(str, results)]) == 0
    out = capsys.readouterr().out
    assert out.count(": 5.00%") == 3  # one edit in the 20 characters (spaces left out) for each reader
    assert "vote: 0.00% / 0.00% spaced; oracle 0.00%; 3 lines" in out  # each line's error outvoted
    assert "surest" not in out  # these files hold no probabilities
    assert main(["vote", *map(str, results), "--hints", str(hints)]) == 0
    assert "vote: 0.00% / 0.00% spaced; oracle 0.00%; 1 lines" in capsys.readouterr().out


def test_vote_prints_the_surest_reads_cer_where_the_files_hold_probabilities(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truths = {"a.jpg": "TOTAL 10.00", "b.jpg": "CASH"}
    reads = [
        {"a.jpg": ("TOTAL 1O.00", [0.6] * 11), "b.jpg": ("CASH", [0.99] * 4)},
        {"a.jpg": ("TOTAL 10.00", [0.9] * 11), "b.jpg": ("CASN", [0.7] * 4)},
    ]
    results = []
    for index, read in enumerate(reads):
        lines = [
            {"file": f, "truth": t, "read": text, "probabilities": probabilities}
            for f, t in truths.items()
            for text, probabilities in [read[f]]
        ]
        results.append(tmp_path / f"r{index}.json")
        results[-1].write_text(json.dumps({"summary": {}, "lines": lines}))
    kept = tmp_path / "surest.json"
    assert main(["vote", *map(str, results), "--out", str(kept)]) == 0
    out = capsys.readouterr().out
    assert "vote: 7.14% / 6.67% spaced" in out  # a tie on both lines: the first file's reads
    assert "surest: 0.00% / 0.00% spaced" in out  # each line's surer read is the right one
    written = json.loads(kept.read_text())["lines"]
    assert [(line["file"], line["read"]) for line in written] == [("a.jpg", "TOTAL 10.00"), ("b.jpg", "CASH")]


def test_vote_will_not_write_surest_reads_without_probabilities(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"summary": {}, "lines": [{"file": "a.jpg", "truth": "A", "read": "A"}]}))
    with pytest.raises(SystemExit, match="probabilities"):
        main(["vote", str(result), str(result), "--out", str(tmp_path / "surest.json")])
    assert not (tmp_path / "surest.json").exists()
