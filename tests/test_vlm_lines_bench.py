"""bench.vlm_lines without a VLM: the ONNX reads of a crop folder saved as drafts for a later run."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from appliance.engines.line_crop import RECOGNISER_LINE_MARGIN, cut_box
from tests import rendering
from tests.bench_runs import last_json, run_bench


def _crop_folder(folder: Path) -> list[dict[str, str]]:
    """Line crops of the rendered receipt with a labels.jsonl, cut and listed as train.make_crops does."""
    page = rendering.receipt()
    image = cv2.cvtColor(np.asarray(page.image), cv2.COLOR_RGB2BGR)
    folder.mkdir()
    rows = []
    for index, line in enumerate(page.lines[:6]):
        name = f"line{index:02d}.png"
        cv2.imwrite(str(folder / name), cut_box(image, line.box, RECOGNISER_LINE_MARGIN))
        rows.append({"file": name, "text": line.text})
    (folder / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return rows


def test_the_onnx_reads_are_saved_per_crop_file_without_a_model(tmp_path: Path) -> None:
    rows = _crop_folder(tmp_path / "crops")
    hints = tmp_path / "hints.json"
    report = last_json(
        run_bench(
            "vlm_lines",
            "--crops",
            str(tmp_path / "crops"),
            "--save-hints",
            str(hints),
            "--limit",
            "5",
            "--max-changes",
            "none",  # taken, though only the cascade rows of a run with a model use it
        )
    )
    saved = json.loads(hints.read_text(encoding="utf-8"))
    assert report["crops"] == 5
    assert [read["file"] for read in saved] == [row["file"] for row in rows[:5]]
    assert all(0.0 < read["confidence"] <= 1.0 for read in saved)
    # Clean print: the recogniser's text is the line's own, spaces aside.
    assert [read["text"].replace(" ", "") for read in saved] == [
        row["text"].replace(" ", "") for row in rows[:5]
    ]


def test_without_a_model_only_saving_the_reads_is_accepted(tmp_path: Path) -> None:
    _crop_folder(tmp_path / "crops")
    done = run_bench("vlm_lines", "--crops", str(tmp_path / "crops"))
    assert done.returncode == 2 and "--model-dir is needed" in done.stderr


def test_unsure_only_keeps_the_lines_below_the_threshold_and_saves_every_read(tmp_path: Path) -> None:
    _crop_folder(tmp_path / "crops")
    hints = tmp_path / "hints.json"
    first = last_json(run_bench("vlm_lines", "--crops", str(tmp_path / "crops"), "--save-hints", str(hints)))
    confidences = sorted(read["confidence"] for read in json.loads(hints.read_text(encoding="utf-8")))
    threshold = (confidences[1] + confidences[2]) / 2  # two lines fall below it
    assert confidences[1] < threshold < confidences[2]

    report = last_json(
        run_bench(
            "vlm_lines",
            "--crops",
            str(tmp_path / "crops"),
            "--save-hints",
            str(tmp_path / "again.json"),
            "--unsure-only",
            "--min-confidence",
            repr(threshold),
        )
    )
    assert (first["crops"], report["crops"], report["unsure"]) == (6, 6, 2)
    assert len(json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))) == 6


def test_max_changes_is_auto_none_or_a_count() -> None:
    for wrong in ("-1", "many"):
        done = run_bench("vlm_lines", "--crops", "unused", "--max-changes", wrong)
        assert done.returncode == 2 and "--max-changes" in done.stderr
