"""Claiming moves a file out of the hot folder into the spool, with a hash, surviving crashes."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from appliance.intake import claim as claim_module
from appliance.intake import lease as lease_module
from appliance.intake.claim import CLAIM_RECORD, ClaimChangedError, claim, orphaned_claims
from appliance.intake.lease import ReadLease, WriterActiveError, take_read_lease
from tests.polling import wait_for


def _dropped(tmp_path: Path, name: str, data: bytes) -> tuple[Path, Path, Path]:
    """An inbox holding one file, and the spool beside it (not made yet): inbox, spool, the file."""
    inbox, spool = tmp_path / "in", tmp_path / "spool"
    inbox.mkdir()
    source = inbox / name
    source.write_bytes(data)
    return inbox, spool, source


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
    found = claimed.spool_path.stat()
    identity = f"{found.st_dev}:{found.st_ino}:{found.st_mtime_ns}"  # a rename keeps all three
    assert claimed.identity == identity
    assert record == {"source_folder": str(inbox), "relative_path": "sub/scan.pdf", "identity": identity}


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


def _rename_fails_for(monkeypatch: pytest.MonkeyPatch, source: Path, code: int) -> list[Path]:
    """Make rename() of `source` fail with `code` (EXDEV: the mounts a systemd sandbox makes)."""
    real_rename = os.rename
    tried: list[Path] = []

    def rename(src: object, dst: object, *args: object, **kwargs: object) -> None:
        if Path(str(src)) == source:
            tried.append(Path(str(dst)))
            raise OSError(code, os.strerror(code), str(src), None, str(dst))
        real_rename(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(claim_module.os, "rename", rename)
    return tried


def test_exdev_on_one_device_falls_back_to_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ReadWritePaths= and StateDirectory= are separate mounts of one disk: same st_dev, yet EXDEV."""
    inbox, spool, source = _dropped(tmp_path, "scan.png", b"\x89PNG data")
    assert source.stat().st_dev == tmp_path.stat().st_dev
    tried = _rename_fails_for(monkeypatch, source, errno.EXDEV)
    claimed = claim(source, inbox, spool)
    assert tried, "the rename was tried first"
    assert not source.exists()
    assert claimed.spool_path.read_bytes() == b"\x89PNG data"
    assert claimed.sha256 == hashlib.sha256(b"\x89PNG data").hexdigest()
    assert claimed.size == len(b"\x89PNG data")


def test_other_rename_errors_leave_the_file_and_no_spool_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, spool, source = _dropped(tmp_path, "scan.png", b"data")
    _rename_fails_for(monkeypatch, source, errno.EACCES)
    with pytest.raises(PermissionError):
        claim(source, inbox, spool)
    assert source.read_bytes() == b"data"
    assert list(spool.iterdir()) == []


def test_a_failure_after_the_copy_never_deletes_the_only_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, spool, source = _dropped(tmp_path, "scan.png", b"data")
    _rename_fails_for(monkeypatch, source, errno.EXDEV)
    real_fsync_directory = claim_module.fsync_directory

    def inbox_fsync_fails(directory: Path) -> None:
        if directory == inbox:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync_directory(directory)

    monkeypatch.setattr(claim_module, "fsync_directory", inbox_fsync_fails)
    with pytest.raises(OSError, match="Input/output error"):
        claim(source, inbox, spool)
    assert not source.exists()
    (found,) = orphaned_claims(spool, set())  # queued at the next start
    assert found.spool_path.read_bytes() == b"data"


def test_change_during_cross_filesystem_copy_keeps_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, spool, source = _dropped(tmp_path, "scan.png", b"first version")
    _rename_fails_for(monkeypatch, source, errno.EXDEV)
    real_copy = claim_module._copy_and_hash

    def copy_then_file_changes(src: Path, dst: Path) -> str:
        digest = real_copy(src, dst)
        # Written through a descriptor opened before the claim (a lease cannot stop that one).
        os.pwrite(early_writer, b" more", len(b"first version"))
        return digest

    monkeypatch.setattr(claim_module, "_copy_and_hash", copy_then_file_changes)
    monkeypatch.setattr(
        claim_module, "take_read_lease", lambda fd: ReadLease(fd, held=False, unavailable="test")
    )
    early_writer = os.open(source, os.O_WRONLY)
    try:
        with pytest.raises(ClaimChangedError):
            claim(source, inbox, spool)
    finally:
        os.close(early_writer)
    assert source.read_bytes() == b"first version more"
    assert list(spool.iterdir()) == []


def _leases_work(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        lease = take_read_lease(fd)
        lease.release()
        return lease.unavailable is None
    finally:
        os.close(fd)


def test_a_file_open_for_writing_is_not_claimed_until_closed(tmp_path: Path) -> None:
    inbox, spool = tmp_path / "in", tmp_path / "spool"
    inbox.mkdir()
    spool.mkdir()
    source = inbox / "scan.tif"
    source.write_bytes(b"")
    if not _leases_work(source):
        pytest.skip("no read leases here (needs the file's owner or CAP_LEASE, and a local filesystem)")
    with source.open("ab") as writer:
        writer.write(b"page 1")
        writer.flush()
        with pytest.raises(WriterActiveError):
            claim(source, inbox, spool)
        assert source.read_bytes() == b"page 1"
        assert list(spool.iterdir()) == []
        writer.write(b" page 2")
    claimed = claim(source, inbox, spool)
    assert claimed.spool_path.read_bytes() == b"page 1 page 2"
    assert claimed.sha256 == hashlib.sha256(b"page 1 page 2").hexdigest()
    assert claimed.writer_check_unavailable is None


def test_a_file_under_another_write_lease_is_not_waited_for(tmp_path: Path) -> None:
    """A file server holding a write lease (a client writing): the claim answers at once, not later."""
    inbox, spool = tmp_path / "in", tmp_path / "spool"
    inbox.mkdir()
    spool.mkdir()
    source = inbox / "scan.tif"
    source.write_bytes(b"page 1")
    if not _leases_work(source):
        pytest.skip("no leases here")
    holder = os.open(source, os.O_RDONLY)
    try:
        # Its break is signalled to this process: with SIGURG (ignored), not SIGIO (fatal).
        fcntl.fcntl(holder, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(holder, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        started = time.monotonic()
        with pytest.raises(WriterActiveError):
            claim(source, inbox, spool)
        assert time.monotonic() - started < 5, "did not wait for the lease to be broken"
    finally:
        fcntl.fcntl(holder, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        os.close(holder)
    assert source.read_bytes() == b"page 1"
    assert list(spool.iterdir()) == []


def test_a_writer_opening_the_file_during_the_claim_puts_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, spool, source = _dropped(tmp_path, "scan.tif", b"page 1")
    if not _leases_work(source):
        pytest.skip("no read leases here")
    real_hash = claim_module._hash_unchanged
    late_writer: list[threading.Thread] = []

    def hash_while_a_writer_opens(fd: int, relative: str) -> tuple[str, int]:
        result = real_hash(fd, relative)
        spooled = next(spool.glob("*/scan.tif"))

        def append() -> None:
            with spooled.open("ab") as handle:  # waits for the lease to be given up
                handle.write(b" page 2")

        late_writer.append(threading.Thread(target=append))
        late_writer[0].start()
        assert wait_for(lambda: fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK, timeout=10)
        return result

    monkeypatch.setattr(claim_module, "_hash_unchanged", hash_while_a_writer_opens)
    with pytest.raises(ClaimChangedError, match="opened for writing"):
        claim(source, inbox, spool)
    late_writer[0].join(timeout=10)
    assert source.read_bytes() == b"page 1 page 2", "back in the inbox, where the writer finished it"
    assert list(spool.iterdir()) == []


def test_without_leases_the_claim_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inbox, spool, source = _dropped(tmp_path, "scan.png", b"data")
    real_fcntl = fcntl.fcntl

    def no_leases(fd: int, command: int, arg: int = 0) -> int:
        if command == fcntl.F_SETLEASE and arg != fcntl.F_UNLCK:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_fcntl(fd, command, arg)

    monkeypatch.setattr(lease_module.fcntl, "fcntl", no_leases)
    claimed = claim(source, inbox, spool)
    assert claimed.spool_path.read_bytes() == b"data"
    assert claimed.writer_check_unavailable is not None
    assert "Invalid argument" in claimed.writer_check_unavailable


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
