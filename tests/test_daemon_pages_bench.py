"""bench.daemon_pages: the real daemon reads every dropped page once and the bench reports its rate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2

from tests import rendering

REPO = Path(__file__).resolve().parent.parent


def test_every_copy_of_every_page_is_read_by_the_daemon_and_timed(tmp_path: Path) -> None:
    folder = tmp_path / "set" / "images"
    folder.mkdir(parents=True)
    for index in range(2):
        cv2.imwrite(str(folder / f"{index}.png"), rendering.receipt().bgr())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.daemon_pages",
            "--provider",
            "cpu",
            "--copies",
            "2",
            "--formats",
            "json,text",
            str(tmp_path / "set"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pages"] == 4 and report["complete"]
    assert sum(report["states"].values()) == 4 and "failed" not in report["states"]
    assert report["duplicates"] == 0  # the copies are distinct files, each read
    assert report["daemon_exit"] == 0
    assert report["pages_per_s"] > 0 and report["load_s"] >= 0
    assert report["scratch"] is None  # removed once complete
