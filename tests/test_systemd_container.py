"""The container helper's own logic, without booting anything: mirror lookup, cache key, skip reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import systemd_container


def test_mirror_from_deb822_sources_skips_other_suites(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n",
        encoding="utf-8",
    )
    assert systemd_container.debian_mirror([sources]) == "http://mirror.example/debian"


def test_mirror_from_a_one_line_list_and_the_default(tmp_path: Path) -> None:
    listing = tmp_path / "sources.list"
    listing.write_text(
        "deb [arch=amd64] https://other.example/apt stable main\n"
        "deb http://mirror.example/debian bookworm main\n",
        encoding="utf-8",
    )
    assert systemd_container.debian_mirror([listing]) == "http://mirror.example/debian"
    assert systemd_container.debian_mirror([tmp_path / "missing.list"]) == systemd_container.DEFAULT_MIRROR


def test_cache_key_follows_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    key = systemd_container.rootfs_key()
    monkeypatch.setattr(systemd_container, "PACKAGES", (*systemd_container.PACKAGES, "strace"))
    assert systemd_container.rootfs_key() != key


def test_not_root_is_a_reason_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(systemd_container.os, "geteuid", lambda: 1000)
    assert "root" in (systemd_container.unavailable_reason() or "")
