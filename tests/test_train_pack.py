"""What train.pack carries to a GPU box: every Nth receipt crop, each with its own label."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fontTools.ttLib import TTFont
from PIL import Image, ImageDraw, ImageFont

from tests.rendering import LATIN_FONT
from train.pack import (
    CALL_BYTES,
    RUN_SH,
    SPLIT_FOLDER,
    copy_crops,
    download_wheels,
    over_a_call,
    split_wheels,
    subset_latin,
)


def _crop_folder(source: Path) -> None:
    source.mkdir()
    rows = [{"file": f"{i:04d}.jpg", "text": f"line {i}", "page": "000"} for i in range(10)]
    for row in rows:
        (source / row["file"]).write_bytes(row["text"].encode())
    (source / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_every_third_crop_goes_with_its_own_label(tmp_path: Path) -> None:
    source = tmp_path / "crops"
    _crop_folder(source)
    target = tmp_path / "carry" / "crops"
    target.mkdir(parents=True)
    (target / "stale.jpg").write_bytes(b"from an earlier pack")

    assert copy_crops(source, target, 3) == 4
    labels = [json.loads(line) for line in (target / "labels.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["file"] for row in labels] == ["0000.jpg", "0003.jpg", "0006.jpg", "0009.jpg"]
    for row in labels:  # each carried crop is the one its label names
        assert (target / row["file"]).read_bytes() == row["text"].encode()
    assert sorted(p.name for p in target.iterdir()) == [*(row["file"] for row in labels), "labels.jsonl"]


def test_only_the_named_crops_go_when_the_unsure_lines_are_asked_for(tmp_path: Path) -> None:
    source, target = tmp_path / "crops", tmp_path / "carry"
    _crop_folder(source)
    assert copy_crops(source, target, 1, {"0002.jpg", "0007.jpg", "0099.jpg"}) == 2
    labels = [json.loads(line) for line in (target / "labels.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(row["file"], row["text"]) for row in labels] == [("0002.jpg", "line 2"), ("0007.jpg", "line 7")]
    assert sorted(p.name for p in target.iterdir()) == ["0002.jpg", "0007.jpg", "labels.jsonl"]


def test_the_transformers_wheel_goes_in_a_folder_of_its_own(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = ["transformers-5.24.0-py3-none-any.whl", "tokenizers-0.23.3-cp310-abi3-x.whl", "tqdm-4.70.1.whl"]
    for name in names:
        (wheels / name).write_bytes(name.encode())
    target = tmp_path / SPLIT_FOLDER
    target.mkdir()
    (target / "transformers-4.0.0-py3-none-any.whl").write_bytes(b"from an earlier pack")

    assert split_wheels(wheels, target) == ["transformers-5.24.0-py3-none-any.whl"]
    assert sorted(p.name for p in target.iterdir()) == ["transformers-5.24.0-py3-none-any.whl"]
    assert (target / names[0]).read_bytes() == names[0].encode()
    assert sorted(p.name for p in wheels.iterdir()) == sorted(names[1:])


def test_run_sh_installs_both_wheel_folders(tmp_path: Path) -> None:
    for folder in ("wheels", SPLIT_FOLDER):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{folder}.whl").write_bytes(b"")
    install = next(line for line in RUN_SH.splitlines() if "pip install" in line)
    wheel_glob = install.split()[-1]  # expanded by bash as run.sh's own line is
    listed = subprocess.run(
        ["bash", "-c", f"HERE={tmp_path}; echo {wheel_glob}"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(Path(path).name for path in listed) == sorted(["wheels.whl", f"{SPLIT_FOLDER}.whl"])


def test_wheels_are_downloaded_into_an_emptied_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "httpx2-2.16.2-py3-none-any.whl").write_bytes(b"from an earlier pack")
    asked: list[list[str]] = []

    def pip(command: list[str], check: bool) -> None:  # stands in for pip download (no network here)
        asked.append(command)
        folder = Path(command[command.index("-d") + 1])
        (folder / "httpx2-2.17.0-py3-none-any.whl").write_bytes(b"new")

    download_wheels(wheels, run=pip)
    assert [p.name for p in wheels.iterdir()] == ["httpx2-2.17.0-py3-none-any.whl"]
    assert asked[0][2:4] == ["pip", "download"] and any(pin.startswith("transformers==") for pin in asked[0])


FAKE_PYTHON = """#!/bin/bash
# Stands in for the GPU box's python3: pip takes a second to install, the import check exits
# IMPORT_RC (0 unless set), the trainer does nothing.
if [ "$1 $2" = "-m pip" ]; then
    echo pip >> "$PIP_LOG"
    sleep 1
    mkdir -p "$TRAIN_SITE"
fi
if [ "$1" = "-c" ] && [[ "$2" == import* ]]; then
    exit "${IMPORT_RC:-0}"
fi
exit 0
"""


def _fake_box(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A carry with run.sh and one wheel, and the environment that runs it with FAKE_PYTHON."""
    carry = tmp_path / "repo" / ".train-carry"
    (carry / "wheels").mkdir(parents=True)
    (carry / "wheels" / "a.whl").write_bytes(b"")
    (carry / "run.sh").write_text(RUN_SH, encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PIP_LOG": str(tmp_path / "pip.log"),
        "TRAIN_SITE": str(tmp_path / "site"),
    }
    env.pop("OUT", None)
    env.pop("IMPORT_RC", None)
    return carry, env


def test_an_install_whose_packages_do_not_import_is_not_kept(tmp_path: Path) -> None:
    # Wheels from part of the carry install without error but leave a package out; marked done,
    # that install would fail every later run on the box at import.
    carry, env = _fake_box(tmp_path)
    site = tmp_path / "site"
    run_sh = ["bash", str(carry / "run.sh")]
    first = subprocess.run(run_sh, env={**env, "IMPORT_RC": "1"}, capture_output=True, text=True, check=False)
    assert first.returncode == 3
    assert "do not all install" in first.stderr
    assert not site.exists()
    again = subprocess.run(run_sh, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert (site / ".installed").exists()
    assert (tmp_path / "pip.log").read_text().splitlines() == ["pip", "pip"]  # installed afresh


def test_runs_started_side_by_side_install_the_wheels_once(tmp_path: Path) -> None:
    carry, env = _fake_box(tmp_path)
    pip_log = tmp_path / "pip.log"
    runs = [
        subprocess.Popen(["bash", str(carry / "run.sh")], env={**env, "RUN_DIR": str(tmp_path / f"run{n}")})
        for n in range(2)
    ]
    assert [run.wait(timeout=60) for run in runs] == [0, 0]
    assert pip_log.read_text().splitlines() == ["pip"]  # the second waited, then found it installed


def test_a_latin_cut_keeps_every_latin_glyph_as_drawn_and_drops_the_rest(tmp_path: Path) -> None:
    if not LATIN_FONT.exists():
        pytest.skip("fonts-dejavu-core is not installed")
    cut = tmp_path / "DejaVuSansLatin.ttf"
    subset_latin(LATIN_FONT, cut)

    chars = TTFont(str(cut)).getBestCmap()
    assert all(code in chars for code in range(0x20, 0x7F))
    assert ord("¥") in chars
    assert ord("Ж") in TTFont(str(LATIN_FONT)).getBestCmap() and ord("Ж") not in chars
    assert cut.stat().st_size < LATIN_FONT.stat().st_size / 4

    def drawn(path: Path) -> np.ndarray:
        canvas = Image.new("L", (640, 64), 0)
        ImageDraw.Draw(canvas).text(
            (4, 8), "TOTAL (Incl. GST) : RM12.50", font=ImageFont.truetype(str(path), 32), fill=255
        )
        return np.asarray(canvas)

    assert np.array_equal(drawn(cut), drawn(LATIN_FONT))


def test_a_part_too_large_is_one_that_does_not_fit_a_call_beside_the_checkout() -> None:
    checkout = 38_000_000
    room = CALL_BYTES - checkout
    sizes = {"fonts, words, run.sh": room, "wheels": room + 1, "crops": 1_000}
    # Each part goes in a call of its own: their sum is over a call, and only the one past it counts.
    assert over_a_call(sizes, checkout) == ["wheels"]
