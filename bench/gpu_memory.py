"""GPU memory as nvidia-smi reports it, for the GPU benchmarks: the card's, one process's, a peak."""

from __future__ import annotations

import subprocess
import threading


def _query(*arguments: str) -> str | None:
    """nvidia-smi's CSV answer (no header, no units), or None without nvidia-smi or a GPU."""
    try:
        return subprocess.run(
            ["nvidia-smi", *arguments, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def gpu_memory_mib() -> int | None:
    """memory.used of GPU 0 as nvidia-smi reports it (the whole card), or None without nvidia-smi."""
    out = _query("--query-gpu=memory.used", "-i", "0")
    return int(out.split()[0]) if out and out.strip() else None


def process_gpu_mib(pid: int) -> int | None:
    """The GPU memory process `pid` holds (0 before it has a CUDA context); None without nvidia-smi."""
    out = _query("--query-compute-apps=pid,used_memory")
    if out is None:
        return None
    for line in out.splitlines():
        found, _, used = line.partition(",")
        if found.strip() == str(pid):
            return int(used.strip())
    return 0


class MemorySampler(threading.Thread):
    """The highest memory.used nvidia-smi reports while it runs, sampled every `period` seconds."""

    def __init__(self, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.peak: int | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            used = gpu_memory_mib()
            if used is not None:
                self.peak = used if self.peak is None else max(self.peak, used)
            self._halt.wait(self.period)

    def stop(self) -> int | None:
        self._halt.set()
        self.join()
        return self.peak
