"""Runs a benchmark as its users do (`python -m bench.NAME` in the repository) and reads its JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_bench(module: str, *arguments: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m bench.<module> arguments...` in the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def last_json(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON report on the last line a benchmark printed, once it has exited 0."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
