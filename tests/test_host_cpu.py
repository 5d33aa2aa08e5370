"""bench.host_cpu: the machine's busy share and a process tree's CPU seconds, from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.host_cpu import busy_share, machine_ticks, process_cpu_s, tree_cpu_s
from tests.polling import wait_for


def _burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_cpu_this_process_spends_is_counted() -> None:
    before_process, before_machine = process_cpu_s(os.getpid()), machine_ticks()
    _burn(0.3)
    # The kernel counts in ticks (10 ms): 0.3 s of CPU shows as at least 0.2 s.
    assert process_cpu_s(os.getpid()) - before_process >= 0.2
    share = busy_share(before_machine, machine_ticks())
    assert share is not None and 0.0 < share <= 1.0


def test_a_tree_holds_the_children_and_their_cpu() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nu = time.thread_time() + 0.3\nwhile time.thread_time() < u: pass\ntime.sleep(120)",
        ]
    )
    try:
        assert wait_for(lambda: tree_cpu_s(os.getpid()).get(child.pid, 0.0) >= 0.2)
        assert os.getpid() in tree_cpu_s(os.getpid())
        assert os.getpid() not in tree_cpu_s(child.pid)  # a tree goes down from its root, not up
    finally:
        child.kill()
        child.wait()
    assert process_cpu_s(child.pid) == 0.0  # gone


def test_no_time_passed_gives_no_share() -> None:
    snapshot = machine_ticks()
    assert busy_share(snapshot, snapshot) is None
