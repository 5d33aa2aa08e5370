"""A child that asked to die with its parent is gone once the parent is SIGKILLed, even one orphaned early."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.polling import process_gone, wait_for

REPO = Path(__file__).resolve().parent.parent

# A parent that spawns a child, as the daemon spawns its workers and session server, and prints
# the child's pid; the child asks to die with its parent once the gate file exists, then sleeps.
_PARENT = """
import multiprocessing, sys, time
from pathlib import Path

from appliance.parent_death import die_with_parent


def child(gate: str) -> None:
    while not Path(gate).exists():
        time.sleep(0.05)
    die_with_parent()
    Path(gate + ".asked").touch()
    time.sleep(600)


if __name__ == "__main__":
    process = multiprocessing.get_context("spawn").Process(target=child, args=(sys.argv[1],))
    process.start()
    print(process.pid, flush=True)
    time.sleep(600)
"""


def _start_parent(tmp_path: Path) -> tuple[subprocess.Popen[str], int, Path]:
    script = tmp_path / "parent.py"
    script.write_text(_PARENT, encoding="utf-8")
    gate = tmp_path / "gate"
    parent = subprocess.Popen(
        [sys.executable, str(script), str(gate)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    return parent, child, gate


def test_a_child_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent, child, gate = _start_parent(tmp_path)
    try:
        gate.touch()
        assert wait_for(Path(f"{gate}.asked").exists)
        assert not process_gone(child)
        parent.kill()
        parent.wait()
        assert wait_for(lambda: process_gone(child))
    finally:
        parent.kill()
        if not process_gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_whose_parent_died_before_it_asked_dies_at_once(tmp_path: Path) -> None:
    parent, child, gate = _start_parent(tmp_path)
    try:
        parent.kill()
        parent.wait()
        assert not process_gone(child)  # an orphan still: it has not asked yet
        gate.touch()
        assert wait_for(lambda: process_gone(child))
        assert not Path(f"{gate}.asked").exists()
    finally:
        if not process_gone(child):
            os.kill(child, signal.SIGKILL)
