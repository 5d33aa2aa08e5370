"""The installed unit under a real systemd (PID 1 of a container): readiness, API, intake, reload, watchdog.

One container serves the module: a cached Debian bookworm root file system (debootstrap, built once),
the appliance installed into a copy by its own `make install PREFIX=/usr ORT=cpu`, then booted with
a loopback-only network. The tests run in file order; the watchdog test restarts the service and
comes last. Each phase's time is printed at the end of the module.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import rendering, systemd_container
from tests.systemd_container import Booted

REPO = Path(__file__).resolve().parent.parent
UNIT = "ocr-appliance.service"
INBOX = Path("srv/ocr/inbox")
OUT = Path("srv/ocr/out")
CONFIG = Path("etc/ocr-appliance/config.yaml")
# The watchdog test's settings, as a drop-in and a config section: pings every 10 s, withheld once a
# busy worker has read nothing for 10 s. Long enough that a receipt read on a loaded 2-core machine
# never looks stalled; short enough that a hang restarts the service within a minute.
WATCHDOG_DROPIN = "[Service]\nWatchdogSec=20s\n"
STALL_SECONDS = 10
# Upper bounds on each phase (measured on the 2-core machine: see the README's systemd section).
INSTALL_TIMEOUT = 1500
BOOT_TIMEOUT = 300
READ_TIMEOUT = 300

# Under `make test`'s parallel workers this module goes whole to one worker, first (tests/scheduling.py).
pytestmark = pytest.mark.systemd

_phases: dict[str, float] = {}
_drops = itertools.count()


def _skip_or_fail(reason: str) -> None:
    # On CI the machine is ours as root: not running these tests there is a failure, not a skip.
    if os.environ.get("CI"):
        pytest.fail(f"the systemd tests cannot run on this CI machine: {reason}")
    pytest.skip(reason)


def _poll(condition: Callable[[], bool], timeout: float) -> bool:
    """Like tests.polling.wait_for, once a second: each check starts nsenter and systemctl."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(1.0)
    return condition()


class _Timer:
    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        _phases[self.name] = time.monotonic() - self.start


@pytest.fixture(scope="module")
def root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A copy of the cached root file system with the appliance installed by `make install`."""
    reason = systemd_container.unavailable_reason()
    if reason:
        _skip_or_fail(reason)
    # Beside the cache, not under pytest's basetemp, which other pytest runs on the box rotate away.
    logs = systemd_container.ROOTFS_CACHE / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    started = time.monotonic()
    with _Timer("root file system (debootstrap, or the cache)"):
        base = systemd_container.base_rootfs(logs / "debootstrap.log")
    systemd_container.remove_stale_copies()
    work = systemd_container.ROOTFS_CACHE / f"run-{os.getpid()}"
    work.mkdir()
    try:
        with _Timer("copy of the root file system"):
            rootfs = systemd_container.copy_rootfs(base, work / "root")
        with _Timer("make install inside"):
            _install(rootfs, logs / "install.log")
        yield rootfs
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _phases["whole module"] = time.monotonic() - started
        _report(request, f"systemd container phases (logs in {logs}):")
        for name, seconds in _phases.items():
            _report(request, f"  {seconds:7.1f} s  {name}")


def _report(request: pytest.FixtureRequest, line: str) -> None:
    """A line on the terminal, past pytest's capture: the phase times are the point of the run."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capture is None or reporter is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


def _install(rootfs: Path, log: Path) -> None:
    source = rootfs / "usr/src/ocr-appliance"
    systemd_container.copy_source(REPO, source)
    pip_cache = systemd_container.ROOTFS_CACHE / "pip"
    pip_cache.mkdir(exist_ok=True)
    systemd_container.run_unbooted(
        rootfs,
        ["make", "-C", "/usr/src/ocr-appliance", "install", "PREFIX=/usr", "ORT=cpu"],
        log,
        timeout=INSTALL_TIMEOUT,
        binds=[f"{pip_cache}:/root/.cache/pip"],
    )
    systemd_container.run_unbooted(rootfs, ["systemctl", "enable", UNIT], log, timeout=60)
    dropin = rootfs / "etc/systemd/system" / f"{UNIT}.d" / "test-watchdog.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(WATCHDOG_DROPIN, encoding="utf-8")
    config = rootfs / CONFIG
    config.write_text(
        config.read_text(encoding="utf-8") + f"\nservice:\n  watchdog_stall_seconds: {STALL_SECONDS}\n",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def container(root: Path) -> Iterator[Booted]:
    """The root file system booted: systemd as PID 1, the unit enabled for multi-user.target."""
    booted = Booted(root, systemd_container.ROOTFS_CACHE / "logs" / "console.log")
    try:
        with _Timer("boot until is-system-running answers"):
            state = booted.wait_running(BOOT_TIMEOUT)
        assert state in ("running", "degraded"), state
        yield booted
    finally:
        if booted.leader:  # the whole boot's journal, for whoever reads a failure
            journal = booted.run(["journalctl", "-b", "--no-pager"], timeout=60).stdout
            (systemd_container.ROOTFS_CACHE / "logs" / "journal.txt").write_text(journal, encoding="utf-8")
        with _Timer("power off"):
            booted.stop()


def _show(container: Booted, *properties: str) -> dict[str, str]:
    result = container.run(["systemctl", "show", UNIT, "-p", ",".join(properties)])
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def _journal(container: Booted) -> str:
    return container.run(["journalctl", "-u", UNIT, "--no-pager", "-o", "cat"]).stdout


def _active(container: Booted) -> bool:
    return _show(container, "ActiveState", "SubState") == {"ActiveState": "active", "SubState": "running"}


def _drop(root: Path, name: str) -> None:
    """A receipt arrives in the hot folder at once (renamed into it, as a careful scanner does)."""
    staging = root / "srv" / f".{name}"
    image = rendering.receipt().image
    # Bytes of their own: the same bytes again would be a duplicate, its result issued unread.
    image.putpixel((next(_drops), 0), 0)
    image.save(staging)
    staging.rename(root / INBOX / name)


def _read(root: Path, name: str) -> dict[str, object] | None:
    result = root / OUT / f"{name}.json"  # results keep the file's whole name
    try:
        return json.loads(result.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None  # not yet there, or not yet complete


def test_service_becomes_active_with_ready(container: Booted) -> None:
    with _Timer("service active (READY=1)"):
        assert _poll(lambda: _active(container), READ_TIMEOUT), _show(
            container, "ActiveState", "SubState", "Result"
        )
    shown = _show(container, "ActiveState", "SubState", "StatusText", "Type", "NRestarts", "WatchdogUSec")
    assert shown["Type"] == "notify"
    assert shown["NRestarts"] == "0"
    # STATUS= from the daemon's main loop: state, queue and throughput.
    assert re.match(r"(idle|busy); \d+ queued, \d+ running;", shown["StatusText"]), shown
    assert shown["WatchdogUSec"] == "20s"


def test_status_answers_over_the_socket(container: Booted) -> None:
    with _Timer("ocr-appliance status"):
        result = container.run(["ocr-appliance", "status", "--json"])
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["state"] == "DAEMON_STATE_RUNNING", status
    socket = container.run(["stat", "-c", "%F %a %U", "/run/ocr-appliance/api.sock"])
    assert socket.stdout.split() == ["socket", "660", "ocr-appliance"], socket.stdout


def test_receipt_in_the_inbox_is_read(root: Path, container: Booted) -> None:
    with _Timer("receipt read (inbox to out)"):
        _drop(root, "receipt.png")
        assert _poll(lambda: _read(root, "receipt.png") is not None, READ_TIMEOUT), _journal(container)
    assert "CORNER BAKERY" in json.dumps(_read(root, "receipt.png")).upper()
    assert not (root / INBOX / "receipt.png").exists()
    journal = _journal(container)
    assert "cannot claim" not in journal
    # What a sandbox line that breaks something looks like from inside (the filter's errno).
    assert "Operation not permitted" not in journal, journal


def test_invalid_reload_keeps_the_running_config(root: Path, container: Booted) -> None:
    config = root / CONFIG
    valid = config.read_text(encoding="utf-8")
    with _Timer("invalid reload"):
        config.write_text(valid + "\nhot_folders: not a list\n", encoding="utf-8")
        try:
            reloaded = container.run(["systemctl", "reload", UNIT], timeout=120)
            assert reloaded.returncode == 0, reloaded.stderr
            # systemd 252 ends the reload job when ExecReload's kill returns; the unit is
            # "reloading" from the daemon's RELOADING=1 until its READY=1: wait for that state.
            assert _poll(lambda: _active(container), 60), _show(container, "ActiveState", "SubState")
            assert _poll(lambda: "reload failed" in _journal(container), 60), _journal(container)
            status = container.run(["ocr-appliance", "status"])
            assert status.returncode == 0, status.stderr
            assert "reload failed" in status.stdout, status.stdout
            # The running folders still work.
            _drop(root, "after-reload.png")
            assert _poll(lambda: _read(root, "after-reload.png") is not None, READ_TIMEOUT), _journal(
                container
            )
        finally:
            config.write_text(valid, encoding="utf-8")
    assert _show(container, "NRestarts")["NRestarts"] == "0"


def test_security_exposure_is_as_the_readme_states(container: Booted) -> None:
    result = container.run(["systemd-analyze", "security", "--no-pager", UNIT])
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", result.stdout)
    assert match, result.stdout + result.stderr
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stated = re.search(
        r"security ocr-appliance\.service`\s+scores\s+the\s+unit\s+(\d+\.\d+)\s+\(CPU\)", readme
    )
    assert stated, "the README's systemd section states the running unit's exposure"
    assert (match.group(1), match.group(2)) == (stated.group(1), "SAFE"), result.stdout


def test_watchdog_restarts_a_hung_worker(root: Path, container: Booted) -> None:
    main_pid = _show(container, "MainPID")["MainPID"]
    workers = _spawned_children(container, main_pid)
    assert workers, f"no worker process under the main process {main_pid}"
    with _Timer("watchdog restart after a hang"):
        # SIGSTOP is a realistic hang: the worker neither reads nor dies, so only the stall shows.
        for pid in workers:
            stopped = container.run(["sh", "-c", f"kill -STOP {pid}"])
            assert stopped.returncode == 0, stopped.stderr
        _drop(root, "hung.png")
        restarted = _poll(lambda: _show(container, "NRestarts")["NRestarts"] != "0", 180)
        assert restarted, _journal(container)
        assert _poll(lambda: _active(container), READ_TIMEOUT), _journal(container)
    journal = _journal(container)
    # The daemon's reason reaches the journal before systemd's watchdog fires.
    assert "watchdog pings withheld" in journal and "Watchdog timeout" in journal, journal
    assert journal.index("watchdog pings withheld") < journal.index("Watchdog timeout"), journal
    assert _show(container, "MainPID")["MainPID"] != main_pid
    # The job the hung worker held is read again after the restart.
    with _Timer("hung receipt read after the restart"):
        assert _poll(lambda: _read(root, "hung.png") is not None, READ_TIMEOUT), _journal(container)


def _spawned_children(container: Booted, pid: str) -> list[str]:
    """The main process's worker processes (multiprocessing spawn children, not its resource tracker)."""
    listing = container.run(
        [
            "sh",
            "-c",
            f"for c in $(cat /proc/{pid}/task/*/children); do "
            'printf "%s " "$c"; tr "\\0" " " </proc/$c/cmdline; echo; done',
        ]
    )
    return [line.split()[0] for line in listing.stdout.splitlines() if "spawn_main" in line]
