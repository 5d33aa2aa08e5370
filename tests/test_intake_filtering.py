"""Junk names are ignored; symlinks, FIFOs and paths leaving the folder are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.intake.filtering import is_candidate, is_ignored


@pytest.mark.parametrize(
    "name",
    [
        ".DS_Store",
        ".hidden.pdf",
        "~$report.docx",
        "scan.pdf.tmp",
        "scan.pdf.part",
        "x.crdownload",
        "Thumbs.db",
    ],
)
def test_junk_names_are_ignored(name: str) -> None:
    assert is_ignored(Path(name))


@pytest.mark.parametrize("folder", ["@eaDir", "#recycle", ".sync"])
def test_files_in_metadata_folders_are_ignored(folder: str) -> None:
    assert is_ignored(Path(folder) / "scan.pdf")


def test_documents_and_configured_patterns() -> None:
    assert not is_ignored(Path("branch/scan.pdf"))
    assert is_ignored(Path("cover.txt"), ["*.txt"])


def test_refusals(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "doc.pdf").write_bytes(b"%PDF-1.7")
    assert is_candidate(root / "doc.pdf", root) == (True, None)
    (root / "link.pdf").symlink_to("/etc/passwd")
    assert is_candidate(root / "link.pdf", root) == (False, "symbolic links are not followed")
    os.mkfifo(root / "pipe.pdf")
    assert is_candidate(root / "pipe.pdf", root)[1] == "not a regular file (FIFO, socket or device)"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pdf").write_bytes(b"%PDF-1.7")
    (root / "shared").symlink_to(outside)
    ok, reason = is_candidate(root / "shared" / "secret.pdf", root)
    assert not ok and reason is not None and "outside the hot folder" in reason
    assert is_candidate(tmp_path / "elsewhere.pdf", root) == (False, "outside the hot folder")
    assert is_candidate(root / "vanished.pdf", root) == (False, None)
