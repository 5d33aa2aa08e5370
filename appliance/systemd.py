"""systemd integration: sd_notify readiness, status, watchdog and reload messages, and journald logging.

Uses systemd-python (`systemd.daemon.notify`, `systemd.journal.JournalHandler`), which talks to the
path-based notify socket that keeps working under PrivateNetwork=yes. Outside systemd (no
NOTIFY_SOCKET, no JOURNAL_STREAM) every call is a cheap no-op and logs go to stderr.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from typing import Any

log = logging.getLogger(__name__)

SYSLOG_IDENTIFIER = "ocr-appliance"

# Stable MESSAGE_IDs, one per event type, so `journalctl MESSAGE_ID=...` finds every occurrence
# across versions. Generated once with `journalctl --new-id128`; never change them.
MESSAGE_IDS = {
    "started": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a60",
    "stopped": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a61",
    "reloaded": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a62",
    "reload_failed": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a63",
    "job_claimed": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a64",
    "job_done": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a65",
    "job_failed": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a66",
    "job_retry": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a67",
    "worker_died": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a68",
    "intake_paused": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a69",
    "watchdog_stalled": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a6a",
    "lease_lost": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a6b",  # a shared journal gave a running job to another node
    "session_server_died": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a6c",  # the workers' session server, started again
    "session_server_hung": "8f1c0e2a4b6d4f0e9a7c3b5d1e2f4a6d",  # it stopped answering: killed, started again
}


def event(name: str, **fields: Any) -> dict[str, Any]:
    """`extra=` for a log call: the event's MESSAGE_ID plus structured fields (JOB_ID, ROUTE ...).

    Field names follow journald's rules (upper case, digits, underscore); None values are left out.
    Handlers other than journald ignore them, so call sites need not know where logs go.
    """
    extra = {"MESSAGE_ID": MESSAGE_IDS[name]}
    extra.update({key: str(value) for key, value in fields.items() if value is not None})
    return extra


class Notifier:
    """Sends sd_notify messages when running under systemd (NOTIFY_SOCKET set)."""

    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        watchdog_usec = os.environ.get("WATCHDOG_USEC", "")
        watchdog_pid = os.environ.get("WATCHDOG_PID", "")
        mine = not watchdog_pid or watchdog_pid == str(os.getpid())
        # Ping at half the interval, as systemd recommends, so one late tick is not a restart.
        self.watchdog_interval = int(watchdog_usec) / 2e6 if watchdog_usec.isdigit() and mine else None
        self._last_status = ""

    def _send(self, message: str) -> None:
        if not self.enabled:
            return
        # Imported by name: the repository's own systemd/ folder (unit files) would otherwise shadow
        # the systemd-python package for type checkers run from the checkout.
        importlib.import_module("systemd.daemon").notify(message)

    def ready(self, status: str | None = None) -> None:
        self._send("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def status(self, line: str) -> None:
        if line != self._last_status:  # STATUS only when it changes: the notify socket is not free
            self._last_status = line
            self._send(f"STATUS={line}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def extend_timeout(self, seconds: float) -> None:
        self._send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def stopping(self) -> None:
        self._send("STOPPING=1")

    def reloading(self) -> None:
        # MONOTONIC_USEC lets systemd match this reload to the request (needed by notify-reload).
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send(f"RELOADING=1\nMONOTONIC_USEC={usec}")


def under_journald() -> bool:
    """Whether stderr is connected to the journal (systemd sets JOURNAL_STREAM to its device:inode)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    if not stream or ":" not in stream:
        return False
    try:
        info = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    device, _, inode = stream.partition(":")
    return f"{info.st_dev}" == device and f"{info.st_ino}" == inode


def journal_handler() -> logging.Handler:
    """A handler that sends records with their structured fields to journald."""
    journal = importlib.import_module("systemd.journal")
    handler: logging.Handler = journal.JournalHandler(SYSLOG_IDENTIFIER=SYSLOG_IDENTIFIER)
    return handler
