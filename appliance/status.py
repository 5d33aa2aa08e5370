"""What a running daemon reports: counters since start, the status snapshot, metrics, the systemd line."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any

from appliance import __version__
from appliance.config import AppConfig
from appliance.control import DaemonState, EngineStatus, SessionServerStatus, Status
from appliance.journal import JobState, NodeStatus


@dataclass
class DaemonStats:
    """Counters for logs and the status line."""

    claimed: int = 0
    done: int = 0
    failed: int = 0
    duplicates: int = 0
    review: int = 0
    audited: int = 0
    worker_restarts: int = 0
    intake_paused: bool = False


@dataclass
class StatusBoard:
    """The daemon's counters since start, and the reports made from them and the loop's live state.

    The journal's counts and the loop's state are passed in by the daemon at each report, so the
    board holds only what nothing else keeps.
    """

    stats: DaemonStats = field(default_factory=DaemonStats)
    recent_errors: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=20)
    )
    started_at: float = field(default_factory=time.monotonic)
    # (when, pages) of each document read: the pages-per-second windows are taken from it.
    pages_log: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=100_000)
    )
    decoding: dict[str, float] = field(default_factory=dict)  # VLM decoding sums since start
    # The highest GPU memory in use (device-wide) the VLM reported after a page since start.
    gpu_memory_peak: int | None = None

    def error(self, job_id: str, message: str) -> None:
        """Shown among the status's recent errors."""
        self.recent_errors.append({"at": time.time(), "job_id": job_id, "message": message})

    def record_read(self, pages: int, decoding: dict[str, float], gpu_memory_used_bytes: int | None) -> None:
        """A document read: its pages, its VLM decoding figures, the GPU memory the VLM reported."""
        self.pages_log.append((time.monotonic(), pages))
        for key, value in decoding.items():
            self.decoding[key] = self.decoding.get(key, 0.0) + value
        if gpu_memory_used_bytes is not None:
            self.gpu_memory_peak = max(self.gpu_memory_peak or 0, gpu_memory_used_bytes)

    def line(self, state: DaemonState, counts: dict[JobState, int], busy: bool, pages_done: int) -> str:
        """The short line systemd shows in `systemctl status` (STATUS=)."""
        if state is not DaemonState.RUNNING:
            shown = state.value
        elif self.stats.intake_paused:
            shown = "paused (disk low)"
        else:
            shown = "busy" if busy else "idle"
        elapsed = max(time.monotonic() - self.started_at, 1e-9)
        return (
            f"{shown}; {counts[JobState.QUEUED]} queued, {counts[JobState.RUNNING]} running; "
            f"{self.stats.done} done, {self.stats.failed} failed since start; "
            f"{pages_done / elapsed * 60:.1f} pages/min"
        )

    def snapshot(
        self,
        *,
        state: DaemonState,
        counts: dict[JobState, int],
        engine: dict[str, Any],
        workers: int,
        workers_busy: int,
        gpu_memory_budget_bytes: int | None,
        vlm_disabled: str | None,
        nodes: list[NodeStatus] | None = None,
        node_id: str | None = None,
        session_server: SessionServerStatus | None = None,
    ) -> Status:
        now = time.monotonic()
        rates = {}
        # A copy first (one C call): the daemon's loop appends while an API thread reports, and a
        # deque changed while it is walked raises.
        logged = list(self.pages_log)
        for label, window in (("1m", 60.0), ("5m", 300.0), ("15m", 900.0)):
            pages = sum(count for at, count in logged if now - at <= window)
            rates[label] = pages / min(window, max(now - self.started_at, 1e-9))
        return Status(
            version=__version__,
            uptime_seconds=now - self.started_at,
            state=state,
            intake_paused_for_disk=self.stats.intake_paused,
            engines=[EngineStatus(str(engine.get("name", "")), list(engine.get("models", [])))]
            if engine
            else [],
            workers=workers,
            workers_busy=workers_busy,
            queue={job_state.value: count for job_state, count in counts.items()},
            pages_per_second=rates,
            gpu_memory_used_bytes=self.gpu_memory_peak,
            gpu_memory_budget_bytes=gpu_memory_budget_bytes,
            recent_errors=list(self.recent_errors),
            vlm_decoding=dict(self.decoding),
            vlm_disabled=vlm_disabled,
            nodes=list(nodes or []),
            node_id=node_id,
            session_server=session_server,
        )

    def metrics(
        self,
        counts: dict[JobState, int],
        watchdog_pings: int,
        intake_unclaimable: int,
        session_server: SessionServerStatus | None = None,
    ) -> dict[str, float]:
        # The session server's two only where there is one: a gauge at 0 would read as a dead server.
        served = (
            {
                "session_server_alive": float(session_server.alive),
                "session_server_restarts_total": float(session_server.restarts),
            }
            if session_server is not None
            else {}
        )
        return {
            "uptime_seconds": time.monotonic() - self.started_at,
            "claimed_total": float(self.stats.claimed),
            "done_total": float(self.stats.done),
            "failed_total": float(self.stats.failed),
            "review_total": float(self.stats.review),
            "audited_total": float(self.stats.audited),
            "duplicates_total": float(self.stats.duplicates),
            "worker_restarts_total": float(self.stats.worker_restarts),
            "watchdog_pings_total": float(watchdog_pings),
            "pages_total": float(sum(count for _, count in self.pages_log)),
            "intake_paused": float(self.stats.intake_paused),
            "intake_unclaimable": float(intake_unclaimable),
            **{f"jobs_{job_state.value}": float(count) for job_state, count in counts.items()},
            **{f"vlm_{key}_total": value for key, value in self.decoding.items()},
            **served,
        }


def gpu_memory_budget(config: AppConfig, engine_description: dict[str, Any]) -> int | None:
    """The VLM's configured VRAM budget, when it runs on a GPU (its description reports GPU memory).

    The whole budget, not a worker's share of it: the used figure beside it is the device's.
    """
    vlm_config = config.engine.vlm_gguf
    vlm = engine_description.get("vlm") or {}
    if vlm_config is None or not vlm.get("gpu_memory"):
        return None
    return vlm_config.vram_budget_mb * 2**20
