"""The daemon's session server: its socket, started before the workers, restarted if it dies, stopped last."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from appliance.config import AppConfig
from appliance.control import SessionServerStatus
from appliance.engines.shared_sessions import SessionServerProcess, key_path, served_by
from appliance.errors import ModelError
from appliance.systemd import event

log = logging.getLogger(__name__)

# A server that dies at once again (a broken GPU, a model it cannot load) is started at most this
# often, so it does not take the daemon's loop and the card's memory in a tight loop.
RESTART_INTERVAL_S = 5.0
SOCKET_NAME = "sessions.sock"
# A live server is asked for its oldest run this often, on a thread of its own (a frozen server
# never answers, and the daemon's loop must not wait for it) ...
PROBE_INTERVAL_S = 10.0
# ... and is taken for hung, killed and started again, when it has not answered within this, or
# when one of its runs has been waiting or running longer than HUNG_RUN_S (or a whole job's
# jobs.timeout_seconds, if shorter). A run is one model call: milliseconds on a GPU, seconds for
# the largest line batch on a slow CPU; one that takes minutes is stuck (a hung GPU call), and the
# jobs waiting on it would otherwise time out and find the same stuck server after their retry.
# Killed, the server fails the runs in flight, so their jobs are retried at once (a transient
# engine error) on the new one.
ANSWER_TIMEOUT_S = 30.0
HUNG_RUN_S = 120.0


def choose_socket(environ: Mapping[str, str]) -> tuple[Path, Path | None]:
    """Where the server listens, and the folder made for it that is removed at stop (None: not ours).

    Under systemd, in the unit's RuntimeDirectory (private to the service, emptied by systemd when
    it stops; its first entry where there are several); elsewhere in a fresh private folder under
    the temporary directory. Either path stays far below a unix socket's 107 bytes.
    """
    runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        return Path(runtime) / "sessions" / SOCKET_NAME, None
    made = Path(tempfile.mkdtemp(prefix="ocr-sessions-"))  # mode 0700
    return made / SOCKET_NAME, made


class SessionServerKeeper:
    """Owns the session server process the daemon's workers open their ONNX sessions in.

    Started before the workers (they connect while loading their engine) and stopped after them.
    The daemon's loop calls `check()`: a server that died is reported once (log, journald event
    `session_server_died`, the status's recent errors) and started again; the workers reconnect
    at their next model run, and a job whose run was in flight is retried (a transient engine
    error).
    """

    def __init__(
        self,
        runners: int,
        report_error: Callable[[str], None],
        *,
        reader_copies: int = 1,
        serves_vlm: bool = False,
        hung_run_s: float = HUNG_RUN_S,
        environ: Mapping[str, str] = os.environ,
        restart_interval: float = RESTART_INTERVAL_S,
        probe_interval: float = PROBE_INTERVAL_S,
        answer_timeout: float = ANSWER_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runners = runners
        self.reader_copies = reader_copies  # of each reader it serves (jobs.served_vlm_copies)
        self.serves_vlm = serves_vlm  # whether the workers read their VLM in it (jobs.serve_vlm)
        self._hung_run_s = hung_run_s
        self._probe_interval = probe_interval
        self._answer_timeout = answer_timeout
        self._probe: _Probe | None = None
        self._probed_at = float("-inf")
        self.socket_path, self._made_folder = choose_socket(environ)
        self.restarts = 0
        self._report_error = report_error  # shown among the status's recent errors
        self._restart_interval = restart_interval
        self._clock = clock
        self._server: SessionServerProcess | None = None
        self._started_at = float("-inf")  # of the last start tried, whether it listened or not
        self._death_reported = False

    def served(self, config: AppConfig) -> AppConfig:
        """`config` with the workers' ONNX engine (and VLM, jobs.serve_vlm) read in this keeper's server."""
        return served_by(config, self.socket_path)

    @property
    def pid(self) -> int | None:
        return None if self._server is None else self._server.pid

    def alive(self) -> bool:
        return self._server is not None and self._server.alive()

    def status(self) -> SessionServerStatus:
        copies = self.reader_copies if self.serves_vlm else 0
        return SessionServerStatus(
            self.pid, self.alive(), self.restarts, str(self.socket_path), self.runners, copies
        )

    def start(self) -> None:
        """Start the server and wait until it listens; ModelError if it does not."""
        self._started_at = self._clock()
        server = SessionServerProcess(
            self.socket_path,
            self.runners,
            log_level=logging.getLogger().level,
            reader_copies=self.reader_copies,
        )
        self._server = server
        server.start()
        log.info(
            "session server listening on %s (pid %s, %d runner(s))",
            self.socket_path,
            server.pid,
            self.runners,
        )

    def check(self, *, now: bool = False) -> None:
        """On the daemon's loop: report a server that died, and start it again once the interval allows.

        `now`: start a dead server whatever the interval, for a worker about to load its engine
        from it (which would fail without one); a server that cannot start then raises ModelError
        as that worker's load would.
        """
        server = self._server
        if server is None:
            return
        if server.alive():
            self._watch_answers(server)
            return
        if not self._death_reported:
            self._death_reported = True
            message = f"the session server (pid {server.pid}) {_ended(server.exitcode)}"
            log.error("%s; starting it again", message, extra=event("session_server_died"))
            self._report_error(message)
        if not now and self._clock() - self._started_at < self._restart_interval:
            return
        try:
            self.start()
        except ModelError as error:
            log.error("the session server could not be started again: %s", error)
            self._report_error(f"the session server could not be started again: {error}")
            if now:
                raise
            return
        self.restarts += 1
        self._death_reported = False

    def _watch_answers(self, server: SessionServerProcess) -> None:
        """Ask a live server for its oldest run now and then; kill it when it hangs (check() restarts it)."""
        now = self._clock()
        probe = self._probe
        if probe is not None and probe.server is server:
            if not probe.done.is_set():
                if now - probe.started_at > self._answer_timeout:
                    self._kill_hung(server, f"did not answer within {self._answer_timeout:.0f} s")
                return
            self._probe = None
            oldest = probe.oldest_run_s
            if oldest is not None and oldest > self._hung_run_s:
                self._kill_hung(server, f"has had a model run waiting or running for {oldest:.0f} s")
                return
        if now - self._probed_at >= self._probe_interval:
            self._probed_at = now
            self._probe = _Probe(server, now)
            self._probe.start()

    def _kill_hung(self, server: SessionServerProcess, why: str) -> None:
        self._probe = None
        self._death_reported = True  # reported here, with the reason; check() starts it again
        message = f"the session server (pid {server.pid}) {why}: killed"
        log.error("%s; starting it again", message, extra=event("session_server_hung"))
        self._report_error(message)
        server.kill()

    def stop(self) -> None:
        """Stop the server (after the workers: they hold its sessions) and remove what it left."""
        if self._server is not None:
            self._server.stop()
        self.socket_path.unlink(missing_ok=True)
        key_path(self.socket_path).unlink(missing_ok=True)
        if self._made_folder is not None:
            shutil.rmtree(self._made_folder, ignore_errors=True)


class _Probe(threading.Thread):
    """One stats request to the server, on a thread the keeper may leave waiting if it never answers."""

    def __init__(self, server: SessionServerProcess, started_at: float) -> None:
        super().__init__(name="session-server-probe", daemon=True)
        self.server = server
        self.started_at = started_at
        self.oldest_run_s: float | None = None  # None: no answer (the server went away meanwhile)
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.oldest_run_s = float(self.server.stats()["oldest_run_s"])
        except Exception as error:  # a server that died or restarted between two checks
            log.debug("session server probe: %s", error)
        finally:
            self.done.set()


def _ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with status {exitcode}"
