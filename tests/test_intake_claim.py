"""Claiming moves a file out of the hot folder into the spool, with a hash, surviving crashes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from appliance.intake import claim as claim_module
from appliance.intake.claim import CLAIM_RECORD, ClaimChangedError, claim, orphaned_claims


def test_same_filesystem_claim_is_a_rename(tmp_path: Path) -> None:
    inbox, spool = tmp_path / "in", tmp_path / "spool"
    (inbox / "sub").mkdir(parents=True)
    source = inbox / "sub" / "scan.pdf"
    source.write_bytes(b"%PDF-1.7 content")
    inode = source.stat().st_ino
    claimed = claim(source, inbox, spool)
    assert not source.exists()
    assert claimed.spool_path.read_bytes() == b"%PDF-1.7 content"
    assert claimed.spool_path.stat().st_ino == inode
    assert claimed.spool_path.name == "scan.pdf"
    assert claimed.sha256 == hashlib.sha256(b"%PDF-1.7 content").hexdigest()
    assert claimed.relative_path == "sub/scan.pdf"
    record = json.loads((claimed.spool_path.parent / CLAIM_RECORD).read_text(encoding="utf-8"))
    assert record == {"source_folder": str(inbox), "relative_path": "sub/scan.pdf"}


def test_other_filesystem_claim_copies_checks_and_unlinks(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a second filesystem (/dev/shm)")
    inbox = shm / f"ocr-appliance-test-{os.getpid()}"
    inbox.mkdir()
    try:
        source = inbox / "scan.png"
        source.write_bytes(b"\x89PNG data")
        claimed = claim(source, inbox, tmp_path / "spool")
        assert not source.exists()
        assert claimed.spool_path.read_bytes() == b"\x89PNG data"
    finally:
        for path in inbox.iterdir():
            path.unlink()
        inbox.rmdir()


def test_change_during_cross_filesystem_copy_keeps_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, spool = tmp_path / "in", tmp_path / "spool"
    inbox.mkdir()
    source = inbox / "scan.png"
    source.write_bytes(b"first version")
    real_stat = Path.stat

    def other_device(self: Path, **kwargs: bool) -> os.stat_result:
        result = real_stat(self, **kwargs)
        if self == source:
            values = list(result)
            values[2] = result.st_dev + 1  # pretend the inbox is on another filesystem
            return os.stat_result(values)
        return result

    real_copy = claim_module._copy_and_hash

    def copy_then_writer_appends(src: Path, dst: Path) -> str:
        digest = real_copy(src, dst)
        with src.open("ab") as handle:
            handle.write(b" more")
        return digest

    monkeypatch.setattr(Path, "stat", other_device)
    monkeypatch.setattr(claim_module, "_copy_and_hash", copy_then_writer_appends)
    with pytest.raises(ClaimChangedError):
        claim(source, inbox, spool)
    assert source.read_bytes() == b"first version more"
    assert list(spool.iterdir()) == []


def test_orphans_are_found_and_half_claims_cleaned(tmp_path: Path) -> None:
    inbox, spool = tmp_path / "in", tmp_path / "spool"
    inbox.mkdir()
    (inbox / "a.png").write_bytes(b"a")
    (inbox / "b.png").write_bytes(b"b")
    known = claim(inbox / "a.png", inbox, spool)
    orphan = claim(inbox / "b.png", inbox, spool)
    half = spool / "half"
    half.mkdir()
    (half / CLAIM_RECORD).write_text(json.dumps({"source_folder": str(inbox), "relative_path": "c.png"}))
    found = orphaned_claims(spool, {str(known.spool_path)})
    assert [item.spool_path for item in found] == [orphan.spool_path]
    assert found[0].sha256 == orphan.sha256
    assert not half.exists()
