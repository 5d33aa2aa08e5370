"""The PostgreSQL drop-ins: verified by systemd, exposure scored, and opening only what they say."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_systemd_units import REPO, _unit, exposure

# systemd 252 scores the unit alone 0.5, with the local drop-in 0.5 and with the TCP one 1.3 (the
# network namespace and the IP families it must give up). A little room for scoring changes.
LIMITS = {"postgresql-local": 1.0, "postgresql-tcp": 1.8}

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


def _unit_with(tmp_path: Path, dropin: str) -> Path:
    unit = _unit(tmp_path, gpu=False)  # the unit as `make install` writes it
    (tmp_path / "ocr-appliance.service.d").mkdir()
    shutil.copy(REPO / "systemd" / f"{dropin}.conf", tmp_path / "ocr-appliance.service.d" / "postgresql.conf")
    return unit


def _settings(dropin: str) -> list[str]:
    text = (REPO / "systemd" / f"{dropin}.conf").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith(("#", "["))]


@pytest.mark.parametrize("dropin", sorted(LIMITS))
def test_dropin_verifies_and_scores_within_its_limit(tmp_path: Path, dropin: str) -> None:
    unit = _unit_with(tmp_path, dropin)
    verify = subprocess.run(
        ["systemd-analyze", "verify", unit.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert verify.returncode == 0 and verify.stdout == verify.stderr == "", verify.stdout + verify.stderr
    score, report = exposure(unit)
    assert score <= LIMITS[dropin], report


def test_the_local_dropin_keeps_the_unit_offline_and_the_tcp_one_allows_one_address() -> None:
    local = _settings("postgresql-local")
    network = ("PrivateNetwork", "RestrictAddressFamilies", "IP")
    assert not [line for line in local if line.startswith(network)]
    settings = _settings("postgresql-tcp")
    assert "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" in settings
    assert [line for line in settings if line.startswith("IPAddressAllow=")] == ["IPAddressAllow=192.0.2.10"]
    assert not any(line.startswith("IPAddressDeny=") for line in settings)  # the unit's deny-all stays
