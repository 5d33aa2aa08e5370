"""A session server process stand-in whose answers the test sets: busy, hung on a run, or gone."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any


class FakeSessionServerProcess:
    """Answers SessionServerProcess's calls; `oldest_run_s` is what its stats report."""

    started: list[FakeSessionServerProcess] = []  # noqa: RUF012 - every one the test's keeper made

    def __init__(
        self, socket_path: Path, runners: int = 1, log_level: int = 0, reader_copies: int = 1
    ) -> None:
        self.socket_path = socket_path
        self.runners = runners
        self.reader_copies = reader_copies
        self.oldest_run_s = 0.0
        self.pid = 4242 + len(FakeSessionServerProcess.started)
        self.exitcode: int | None = None
        self.requests = 0  # stats requests answered

    def start(self) -> None:
        FakeSessionServerProcess.started.append(self)

    def alive(self) -> bool:
        return self.exitcode is None

    def stats(self) -> dict[str, Any]:
        self.requests += 1
        return {"sessions": 0, "clients": 0, "runners": self.runners, "oldest_run_s": self.oldest_run_s}

    def kill(self) -> None:
        self.exitcode = -signal.SIGKILL

    def stop(self) -> None:
        self.exitcode = self.exitcode if self.exitcode is not None else 0
