"""scripts/apt-ensure waits for a dpkg lock held by another apt instead of failing at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.polling import wait_for

REPO = Path(__file__).resolve().parent.parent
LOCK = Path("/var/lib/dpkg/lock-frontend")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("apt-get") is None or not LOCK.exists(),
    reason="holds dpkg's real lock: needs root on Debian",
)

# Holds the lock as apt and dpkg take it (an fcntl lock, not flock) until its stdin closes.
HOLDER = f"""
import fcntl, sys
lock = open({str(LOCK)!r}, "w")
fcntl.lockf(lock, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def _children(pid: int) -> list[str]:
    """Command lines of the processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_waits_for_the_dpkg_lock_then_succeeds(tmp_path: Path) -> None:
    # dpkg-query reports the (installed) package missing, so apt-ensure goes through apt-get,
    # whose install of an installed package changes nothing. apt reads no sources and keeps its
    # lists and caches in tmp_path, so nothing is fetched and the machine's own lists stay.
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (shims / "dpkg-query").chmod(0o755)
    for folder in ("lists/partial", "cache/archives/partial", "parts"):
        (tmp_path / folder).mkdir(parents=True)
    apt_config = tmp_path / "apt.conf"
    apt_config.write_text(
        'Dir::Etc::SourceList "/dev/null";\n'
        f'Dir::Etc::SourceParts "{tmp_path / "parts"}";\n'
        f'Dir::State::Lists "{tmp_path / "lists"}";\n'
        f'Dir::Cache "{tmp_path / "cache"}";\n'
    )
    env = {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "APT_CONFIG": str(apt_config),
        "APT_LOCK_TIMEOUT": "120",
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        ensure = subprocess.Popen(
            [str(REPO / "scripts" / "apt-ensure"), "apt"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        assert ensure.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(ensure.stdout or []), daemon=True)
        reader.start()
        assert wait_for(lambda: any("waiting up to 120s" in line for line in lines), timeout=60), lines
        # apt-get install has started and waits on the held lock; before, it failed at once.
        assert wait_for(
            lambda: ensure.poll() is not None or any(" install " in cmd for cmd in _children(ensure.pid)),
            timeout=60,
        )
        assert ensure.poll() is None, lines
    finally:
        holder.communicate(timeout=30)  # closing stdin releases the lock
    assert ensure.wait(timeout=180) == 0, lines
    reader.join(timeout=10)
    assert not any("Could not get lock" in line for line in lines), lines
