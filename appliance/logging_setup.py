"""Logging: structured journald records under systemd, readable lines on stderr otherwise."""

from __future__ import annotations

import logging
import sys

from appliance.names import display
from appliance.systemd import journal_handler, under_journald


def _escape_names(record: logging.LogRecord) -> bool:
    """Show a file name that is not UTF-8 escaped: journald and UTF-8 streams refuse it as it is."""
    message = record.getMessage()
    escaped = display(message)
    if escaped != message:
        record.msg, record.args = escaped, None
    return True


def setup_logging(level: str = "INFO") -> None:
    if under_journald():
        handler = journal_handler()
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(_escape_names)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
