"""The benchmarks' figures for second readers: peak RSS per variant and the confidence threshold rule."""

from __future__ import annotations

import os

from appliance.config import AppConfig
from bench.confidence_errors import ReadLine, judge, threshold
from bench.ocr_bench import measure_rss
from bench.scoring import TextLine


def test_each_variant_is_measured_alone_in_a_child_process() -> None:
    before = os.getpid()
    peaks = measure_rss(AppConfig(), ["det=int8+preset=fast+second_reader=ppocrv6_small@0.95"], [])
    assert os.getpid() == before
    loaded, after = peaks["appliance:det=int8+preset=fast+second_reader=ppocrv6_small@0.95"]
    # Two recognisers and a detector on onnxruntime: far more than a bare interpreter's ~10 MiB.
    assert loaded > 100 * 2**20 and after >= loaded


def test_a_line_is_right_when_its_text_appears_whole_in_the_truth_it_overlaps() -> None:
    truth = [
        TextLine("TOTAL 40.17", (10.0, 100.0, 300.0, 120.0)),
        TextLine("CASH", (10.0, 130.0, 80.0, 150.0)),
    ]
    assert judge("total", (10.0, 101.0, 90.0, 121.0), truth, fold=True)
    assert judge("40. 17", (200.0, 99.0, 300.0, 119.0), truth, fold=True), "spaces do not count"
    assert not judge("TOTAL 40.71", (10.0, 100.0, 300.0, 120.0), truth, fold=True)
    assert not judge("CASH", (10.0, 100.0, 80.0, 120.0), truth, fold=True), "CASH is on the next row"
    assert not judge("total", (10.0, 101.0, 90.0, 121.0), truth, fold=False)


def test_the_threshold_is_the_highest_confidence_below_which_half_the_lines_are_wrong() -> None:
    lines = [ReadLine(0.6, False), ReadLine(0.8, False), ReadLine(0.85, True), ReadLine(0.99, True)]
    # Below 1.0 two of four lines are wrong (half); below 0.99 two of three; below 0.85 both.
    assert threshold(lines, 0.5) == 1.0
    assert threshold(lines, 0.6) == 0.99
    assert threshold(lines, 0.7) == 0.85
    assert threshold([ReadLine(0.9, True)], 0.5) is None
