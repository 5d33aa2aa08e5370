"""What train.pack carries to a GPU box: every Nth receipt crop, each with its own label."""

from __future__ import annotations

import json
from pathlib import Path

from train.pack import copy_crops


def test_every_third_crop_goes_with_its_own_label(tmp_path: Path) -> None:
    source = tmp_path / "crops"
    source.mkdir()
    rows = [{"file": f"{i:04d}.jpg", "text": f"line {i}", "page": "000"} for i in range(10)]
    for row in rows:
        (source / row["file"]).write_bytes(row["text"].encode())
    (source / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    target = tmp_path / "carry" / "crops"
    target.mkdir(parents=True)
    (target / "stale.jpg").write_bytes(b"from an earlier pack")

    assert copy_crops(source, target, 3) == 4
    labels = [json.loads(line) for line in (target / "labels.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["file"] for row in labels] == ["0000.jpg", "0003.jpg", "0006.jpg", "0009.jpg"]
    for row in labels:  # each carried crop is the one its label names
        assert (target / row["file"]).read_bytes() == row["text"].encode()
    assert sorted(p.name for p in target.iterdir()) == [*(row["file"] for row in labels), "labels.jsonl"]
