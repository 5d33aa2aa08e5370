"""The host's CPU over an interval: how busy the machine's cores were and what a process tree used.

Read from the kernel's own counters in /proc (Linux only). psutil reads the same counters; it is
not used because the benchmarks also run on an offline GPU box that has only the wheels packed
for it (bench.pack_onnx_gpu), and these are three fields of two files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSnapshot:
    """The machine's busy and total CPU ticks, every core together."""

    busy: int
    total: int


def machine_ticks(proc: Path = Path("/proc")) -> CpuSnapshot:
    """The first line of /proc/stat: idle and iowait are idle, the rest (steal included) busy."""
    fields = [int(value) for value in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest and guest_nice (fields 8 and 9) are already counted in user and nice.
    total = sum(fields[:8])
    return CpuSnapshot(busy=total - idle, total=total)


def busy_share(before: CpuSnapshot, after: CpuSnapshot) -> float | None:
    """The share of every core's time spent busy between two snapshots; None if no time passed."""
    elapsed = after.total - before.total
    return None if elapsed <= 0 else (after.busy - before.busy) / elapsed


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None  # it ended meanwhile
    # The command name (field 2) is in parentheses and may hold spaces: split after its last ')'.
    return text[text.rindex(")") + 2 :].split()


def process_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """A live process's user and system CPU seconds (its threads' included); 0.0 once it is gone."""
    fields = _stat_fields(pid, proc)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime and stime, fields 14 and 15


def tree_cpu_s(root: int, proc: Path = Path("/proc")) -> dict[int, float]:
    """CPU seconds of `root` and each live descendant, by process id."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name), proc)
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))  # ppid, field 4
    found: dict[int, float] = {}
    waiting = [root]
    while waiting:
        pid = waiting.pop()
        found[pid] = process_cpu_s(pid, proc)
        waiting += children.get(pid, [])
    return found
