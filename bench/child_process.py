"""Ending a daemon a benchmark started: SIGTERM, as systemd stops it, then SIGKILL if it will not go."""

from __future__ import annotations

import signal
import subprocess


def stop(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """Ask `child` to stop with SIGTERM; kill it if it has not ended within `grace_s` seconds."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
