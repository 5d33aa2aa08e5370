"""Logging: structured journald records under systemd, readable lines on stderr otherwise."""

from __future__ import annotations

import logging
import sys

from appliance.systemd import journal_handler, under_journald


def setup_logging(level: str = "INFO") -> None:
    if under_journald():
        handler = journal_handler()
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
