"""Which observer a hot folder gets, from the mount it lives on."""

from __future__ import annotations

from pathlib import Path

import pytest
from watchdog.observers.polling import PollingObserver

from appliance.intake.watch import make_observer, mount_of

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /srv/scans rw,relatime shared:20 - cifs //nas/scans rw,vers=3.0
41 22 0:36 / /mnt/nfs rw,relatime shared:21 - nfs4 nas:/export rw
42 22 0:37 / /mnt/fuse rw,nosuid shared:22 - fuse.sshfs host:/x rw
43 40 8:2 / /srv/scans/local rw,relatime shared:23 - xfs /dev/sdb1 rw
44 22 8:3 / /mnt/with\\040space rw,relatime shared:24 - cifs //nas/other rw
"""


@pytest.fixture
def mountinfo(tmp_path: Path) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTINFO, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("folder", "fs_type", "polls"),
    [
        ("/srv/scans/inbox", "cifs", True),
        ("/srv/scans/local/inbox", "xfs", False),
        ("/mnt/nfs/a/b", "nfs4", True),
        ("/mnt/fuse", "fuse.sshfs", True),
        ("/var/lib/inbox", "ext4", False),
        ("/srv/scansmore", "ext4", False),
        ("/mnt/with space/in", "cifs", True),
    ],
)
def test_mount_of_finds_the_longest_mount_point(
    mountinfo: Path, folder: str, fs_type: str, polls: bool
) -> None:
    mount = mount_of(Path(folder), mountinfo)
    assert mount is not None
    assert mount.fs_type == fs_type
    assert mount.needs_polling is polls


def test_missing_mountinfo_gives_none(tmp_path: Path) -> None:
    assert mount_of(tmp_path, tmp_path / "absent") is None


def test_forced_modes(tmp_path: Path) -> None:
    assert isinstance(make_observer(tmp_path, "poll", 1.0), PollingObserver)
    assert not isinstance(make_observer(tmp_path, "inotify", 1.0), PollingObserver)
    # tmp_path is on a local filesystem here, so auto picks inotify.
    assert not isinstance(make_observer(tmp_path, "auto", 1.0), PollingObserver)
