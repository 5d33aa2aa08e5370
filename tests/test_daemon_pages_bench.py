"""bench.daemon_pages: the real daemon reads every dropped page once and the bench reports its rate."""

from __future__ import annotations

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
        # fixed shapes are off on the CPU: the daemon only has to accept the settings
        "--preset",
        "fast",
        "--det-shares",
        "0.5",
        "--widths",
        "640,3200",
        str(tmp_path / "set"),
    )
    report = last_json(done)
    assert report["pages"] == 4 and report["complete"]
    assert sum(report["states"].values()) == 4 and "failed" not in report["states"]
    assert report["duplicates"] == 0  # the copies are distinct files, each read
    assert report["daemon_exit"] == 0
    assert (report["preset"], report["det_shares"], report["widths"]) == ("fast", "0.5", "640,3200")
    assert report["pages_per_s"] > 0 and report["load_s"] >= 0
    assert report["scratch"] is None  # removed once complete
