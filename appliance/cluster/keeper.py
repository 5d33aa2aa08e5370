"""Keeps a node's leases: renews them with its heartbeat; gives the jobs of dead nodes back to the queue."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from appliance.journal import Job, JobJournal, JobState

log = logging.getLogger(__name__)


class LeaseKeeper:
    """A thread that renews this node's leases every third of the lease time.

    Its own thread, not the daemon's loop: a loop busy filing a large result must not let its
    leases run out. A node that is stopped (SIGSTOP, a frozen VM) stops this thread too, which is
    what lets the other nodes take its jobs over. Jobs whose lease ran out are requeued by
    whichever node notices first; `on_failed` hears of those that failed for good (crashed_daemon).
    """

    def __init__(
        self,
        journal: JobJournal,
        lease_seconds: float,
        stats: Callable[[], Mapping[str, Any]],
        on_failed: Callable[[Job], None],
        reading: Callable[[], Collection[str]],
    ) -> None:
        self._journal = journal
        self._reading = reading
        self._interval = lease_seconds / 3
        self._stats = stats
        self._on_failed = on_failed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def tick(self) -> None:
        """One renewal and one look for expired leases (the thread's step; tests call it directly)."""
        self._journal.renew_leases(list(self._reading()), self._stats())
        for job in self._journal.reclaim_expired():
            log.warning(
                "job %s (%s): its node stopped renewing the lease; now %s", job.id, job.name, job.state
            )
            if job.state is JobState.FAILED:
                self._on_failed(job)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.tick()
            except Exception:  # a database that is away for a moment must not end the renewals
                log.exception("cannot renew this node's leases; retrying in %.0f s", self._interval)
