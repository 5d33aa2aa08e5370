"""bench.daemon_pages: the real daemon reads every dropped page once and the bench reports its rate."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2

from tests import rendering
from tests.bench_runs import last_json, run_bench


def test_every_copy_of_every_page_is_read_by_the_daemon_and_timed(tmp_path: Path) -> None:
    folder = tmp_path / "set" / "images"
    folder.mkdir(parents=True)
    for index in range(2):
        cv2.imwrite(str(folder / f"{index}.png"), rendering.receipt().bgr())
    done = run_bench(
        "daemon_pages",
        "--provider",
        "cpu",
        "--copies",
        "2",
        "--formats",
        "json,text",
        str(tmp_path / "set"),
    )
    report = last_json(done)
    assert report["pages"] == 4 and report["complete"]
    assert sum(report["states"].values()) == 4 and "failed" not in report["states"]
    assert report["duplicates"] == 0  # the copies are distinct files, each read
    assert report["daemon_exit"] == 0
    assert report["pages_per_s"] > 0 and report["load_s"] >= 0
    assert report["scratch"] is None  # removed once complete


def test_the_engine_options_reach_the_daemon_it_starts(tmp_path: Path) -> None:
    folder = tmp_path / "set" / "images"
    folder.mkdir(parents=True)
    cv2.imwrite(str(folder / "0.png"), rendering.receipt().bgr())
    options = (
        "--preset",
        "fast",
        "--det-shares",
        "0.5",
        "--widths",
        "640,3200",
        "--cublas-workspace",
        ":16:8",
    )
    report = last_json(
        run_bench(
            "daemon_pages", "--provider", "cpu", "--formats", "json", "--keep", *options, str(folder.parent)
        )
    )
    scratch = Path(report["scratch"])
    try:
        assert report["complete"]
        onnx = json.loads((scratch / "config.yaml").read_text(encoding="utf-8"))["engine"]["ppocr_onnx"]
        assert onnx["fixed_detector_shares"] == [0.5] and onnx["fixed_line_widths"] == [640, 3200]
        assert onnx["cublas_workspace_config"] == ":16:8"
        (result,) = (scratch / "out").glob("*.json")
        # the daemon read with the preset asked for (fixed shapes and cuBLAS are CUDA's alone)
        assert json.loads(result.read_text(encoding="utf-8"))["engine"]["preset"] == "fast"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_host_report_says_how_busy_the_session_servers_runner_was(tmp_path: Path) -> None:
    folder = tmp_path / "set" / "images"
    folder.mkdir(parents=True)
    cv2.imwrite(str(folder / "0.png"), rendering.receipt().bgr())
    report = last_json(
        run_bench(
            "daemon_pages",
            "--provider",
            "cpu",
            "--workers",
            "2",
            "--session-server",
            "on",
            "--copies",
            "3",
            "--formats",
            "json",
            str(folder.parent),
        )
    )
    assert report["complete"]
    cpu = report["cpu"]
    assert 0.0 < cpu["busy_share"] <= 1.0 and cpu["cores"] == os.cpu_count()
    # The models run in the server: its runner was busy and the workers sent it several runs a page.
    # (A run in flight at the span's start counts whole: the share may pass 1.0 by part of a run.)
    assert 0.0 < cpu["runner_busy_share"] < 1.5
    assert cpu["runs_per_page"] >= 2 and cpu["ms_per_run"] > 0
    assert cpu["server_ms_per_page"] > 0 and cpu["workers_ms_per_page"] > 0


def test_a_line_readers_cascade_reaches_the_daemon_and_its_lines_are_counted(tmp_path: Path) -> None:
    folder = tmp_path / "set" / "images"
    folder.mkdir(parents=True)
    cv2.imwrite(str(folder / "0.png"), rendering.receipt().bgr())
    model = Path(__file__).parent / "fixtures" / "vlm" / "qwen2vl"
    report = last_json(
        run_bench(
            "daemon_pages",
            "--provider",
            "cpu",
            "--formats",
            "json",
            "--keep",
            "--vlm-model-dir",
            str(model),
            "--cascade-mode",
            "always",
            "--cascade-keep",
            "more_confident",
            "--lines-together",
            "2",
            str(folder.parent),
        )
    )
    scratch = Path(report["scratch"])
    try:
        assert report["complete"] and sum(report["states"].values()) == 1 and "failed" not in report["states"]
        config = json.loads((scratch / "config.yaml").read_text(encoding="utf-8"))
        assert config["engine"]["vlm_gguf"] == {"model_dir": str(model), "lines_together": 2}
        assert config["profiles"]["default"]["cascade"]["mode"] == "always"
        # The document's JSON result: filed in out/, or in its review folder if sent to people.
        reviewed = [path for path in (scratch / "review").glob("*/*.json") if path.name != "reasons.json"]
        (path,) = [*(scratch / "out").glob("*.json"), *reviewed]
        (page,) = json.loads(path.read_text(encoding="utf-8"))["pages"]
        read = page["engine_details"]["cascade"]
        # Every line went to the VLM (mode always), and the report sums what the page's JSON says.
        assert read["route"] == "vlm_lines" and read["lines_sent"] == len(
            [line for block in page["blocks"] for line in block["lines"]]
        )
        cascade = report["cascade"]
        assert cascade["pages_sending"] == 1 and cascade["lines_sent"] == read["lines_sent"] > 0
        assert cascade["lines_replaced"] == read["lines_replaced"]
        assert cascade["keep"] == "more_confident" and cascade["lines_together"] == 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
