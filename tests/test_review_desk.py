"""The review desk takes a correction file by renaming it, so that only one node applies it."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import review_desk


def test_only_one_taker_gets_a_correction(tmp_path: Path) -> None:
    corrected = tmp_path / "corrected.json"
    corrected.write_text('{"fields": {}}', encoding="utf-8")
    first = review_desk._take(corrected)
    second = review_desk._take(corrected)
    assert first is not None and first.read_text(encoding="utf-8") == '{"fields": {}}'
    assert second is None  # another node looking at the same folder finds it taken
    assert not corrected.exists()


def test_nothing_to_take_without_a_correction(tmp_path: Path) -> None:
    assert review_desk._take(tmp_path / "corrected.json") is None


def test_a_correction_left_taken_by_a_dead_node_is_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corrected = tmp_path / "corrected.json"
    corrected.write_text("{}", encoding="utf-8")
    taken = review_desk._take(corrected)
    assert taken is not None
    assert review_desk._take(corrected) is None  # fresh: its taker is still at it
    monkeypatch.setattr(review_desk, "_TAKEN_STALE_SECONDS", -1.0)
    assert review_desk._take(corrected) == taken  # stale: taken over
