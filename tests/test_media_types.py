"""Intake and the reader tell formats apart by one signature table, so they never disagree on a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import DocumentError, FailureReason
from appliance.intake.completeness import check_complete
from appliance.media_types import SIGNATURES, WEBP, sniff
from appliance.pipeline.rasterize import sniff_media_type


@pytest.mark.parametrize(("signature", "media_type"), SIGNATURES)
def test_intake_and_reader_name_the_same_type(tmp_path: Path, signature: bytes, media_type: str) -> None:
    path = tmp_path / "scan.bin"
    path.write_bytes(signature + b"\x00" * 32)
    assert sniff_media_type(path) == media_type
    assert check_complete(path).media_type == media_type


def test_a_file_cut_in_its_signature_waits_at_intake_and_is_refused_by_the_reader(tmp_path: Path) -> None:
    assert sniff(b"%PD") == ("application/pdf", True)
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == (WEBP, False)
    path = tmp_path / "cut.pdf"
    path.write_bytes(b"%PD")
    with pytest.raises(DocumentError) as caught:
        sniff_media_type(path)
    assert caught.value.reason is FailureReason.UNSUPPORTED_FORMAT
