"""Offline by construction: the whole pipeline works without a network and opens only unix sockets."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import rendering

# Installed as sitecustomize in every Python process of the run (the daemon and its spawned
# workers): records the address family of every socket Python creates.
AUDIT_HOOK = """
import os, sys
_log = os.environ["SOCKET_AUDIT_LOG"]
def _hook(event, args):
    if event == "socket.__new__":
        with open(_log, "a") as handle:
            handle.write(f"{os.getpid()} {int(args[1])}\\n")
sys.addaudithook(_hook)
"""


def _config(root: Path) -> Path:
    path = root / "config.yaml"
    path.write_text(
        "paths: {state_dir: state}\n"
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
        "intake: {settle_seconds: 0.3, min_free_mb: 0.0}\n"
        # Its own control socket: tests running side by side must not meet at the installed path.
        f"api: {{socket: {root / 'api.sock'}}}\n",
        encoding="utf-8",
    )
    return path


def _full_run(root: Path, prefix: list[str], env: dict[str, str]) -> str:
    """Start the daemon, drop a receipt, wait for its result, stop with SIGTERM; return stderr."""
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "appliance", "run", "--config", str(_config(root))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    try:
        # A limit for states to be reached, not a duration: generous for a loaded 2-core machine.
        deadline = time.monotonic() + 300
        lock = root / "state" / "daemon.lock"
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        staged = root / "receipt.png"
        rendering.receipt().image.save(staged)
        (root / "in").mkdir(exist_ok=True)
        staged.rename(root / "in" / "receipt.png")
        result = root / "out" / "receipt.png.txt"
        while not result.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not result.exists():
            process.kill()
            _, stderr = process.communicate()
            raise AssertionError(f"no result; the daemon said:\n{stderr[-4000:]}")
        assert "TOTAL 40.17" in result.read_text(encoding="utf-8")
        time.sleep(0.5)
        # The daemon's own pid (from its lock file): signalling a wrapper such as strace would
        # only detach the wrapper and leave the daemon running.
        daemon_pid = int((root / "state" / "daemon.lock").read_text().strip())
        os.kill(daemon_pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    return stderr


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare -n (root or user namespaces)")
def test_whole_pipeline_in_a_network_namespace_without_interfaces(tmp_path: Path) -> None:
    links = subprocess.run(["unshare", "-n", "ip", "-o", "link"], capture_output=True, text=True, check=False)
    if links.returncode == 0:
        assert all(" lo:" in line for line in links.stdout.splitlines()), links.stdout
    _full_run(tmp_path, ["unshare", "-n"], {})


def test_python_opens_only_unix_sockets_during_a_full_run(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK, encoding="utf-8")
    log = tmp_path / "sockets.log"
    log.touch()
    pythonpath = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH", "")]))
    _full_run(tmp_path, [], {"PYTHONPATH": pythonpath, "SOCKET_AUDIT_LOG": str(log)})
    entries = [line.split() for line in log.read_text().splitlines()]
    assert entries, "the hook saw no socket at all (the daemon talks to its workers over socketpairs)"
    assert len({pid for pid, _ in entries}) >= 1
    families = {int(family) for _, family in entries}
    assert families == {1}, f"socket families other than AF_UNIX (1): {families}"


# No socket other than AF_UNIX may be bound, connected, listened on or used to send or receive.
# One exception is allowed and checked: grpcio's server, when it adds its unix port, creates two
# AF_INET sockets to probe for SO_REUSEPORT support and closes them without binding, connecting or
# listening (under systemd's RestrictAddressFamilies=AF_UNIX their socket() fails, and the server
# still serves the unix socket). Those may only be created and have options set or read.
_PROBE_CALLS = {"setsockopt", "getsockopt"}
_CALL = re.compile(r"^\d+\s+(?P<call>\w+)\((?P<args>.*)$")
# With -yy strace prints a socket descriptor as 7<UNIX-STREAM:[inode...]> or 8<TCP:[inode]>; it
# falls back to 8<socket:[inode]> where it cannot ask the kernel, hence the inodes as well.
_DESCRIPTOR = re.compile(r"^\d+<(?P<kind>[A-Za-z0-9]+)[^:]*:\[(?P<inode>\d+)")


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_native_code_uses_only_unix_sockets_during_a_full_run(tmp_path: Path) -> None:
    """strace sees sockets that native libraries (onnxruntime, pdfium, grpcio) open; audit hooks miss them."""
    trace = tmp_path / "trace"
    _full_run(tmp_path, ["strace", "-f", "-qq", "-yy", "-e", "trace=%network", "-o", str(trace)], {})
    calls = [match for line in trace.read_text().splitlines() if (match := _CALL.match(line))]
    created = [
        (m["call"], m["args"].split(",", 1)[0]) for m in calls if m["call"] in ("socket", "socketpair")
    ]
    assert created, "strace recorded no socket calls"
    assert {family for call, family in created if call == "socketpair"} == {"AF_UNIX"}, created
    probes = [family for call, family in created if call == "socket" and family != "AF_UNIX"]
    assert set(probes) <= {"AF_INET", "AF_INET6"} and len(probes) <= 4, f"more than grpcio's probes: {probes}"
    # The inodes of the probe sockets that socket() returned (-1 under a seccomp filter: none).
    probe_inodes = {
        found[1]
        for m in calls
        if m["call"] == "socket" and not m["args"].startswith("AF_UNIX")
        if (found := re.search(r"= \d+<\w+:\[(\d+)\]>", m["args"]))
    }
    for match in calls:
        if match["call"] in ("socket", "socketpair"):
            continue
        line = match[0]
        assert not re.search(r"sa_family=AF_(?!UNIX)", match["args"]), f"a non-unix address: {line}"
        described = _DESCRIPTOR.match(match["args"])
        if described is None:
            continue  # no descriptor decoded: the address check above still applies
        if described["kind"] != "UNIX" and (
            described["kind"] != "socket" or described["inode"] in probe_inodes
        ):
            assert match["call"] in _PROBE_CALLS, f"a non-unix socket was used: {line}"
