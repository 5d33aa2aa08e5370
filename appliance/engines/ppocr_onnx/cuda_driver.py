"""The NVIDIA driver's version, read on this box, and whether it can run a CUDA 13 onnxruntime build."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# onnxruntime-gpu 1.31.1 is built for CUDA 13; CUDA 13.x runs on Linux drivers of the r580 branch and
# newer (CUDA's minor-version compatibility), so any older driver cannot start the CUDA provider.
MIN_DRIVER_MAJOR = 580
PROC_VERSION = Path("/proc/driver/nvidia/version")

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan ..." or, for the open modules,
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ...".
_PROC_LINE = re.compile(r"Kernel Module.*?\s(\d+)\.(\d+)(?:\.(\d+))?(?:\s|$)")
# `nvidia-smi --query-gpu=driver_version --format=csv,noheader`: one "580.159.04" per GPU.
_SMI_LINE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$")


@dataclass(frozen=True, order=True)
class DriverVersion:
    """An NVIDIA driver version such as 580.159.04."""

    major: int
    minor: int
    patch: int | None = None

    def __str__(self) -> str:
        tail = "" if self.patch is None else f".{self.patch:02d}"
        return f"{self.major}.{self.minor:02d}{tail}"


def _version(match: re.Match[str]) -> DriverVersion:
    major, minor, patch = match.groups()
    return DriverVersion(int(major), int(minor), None if patch is None else int(patch))


def parse_proc_version(text: str) -> DriverVersion | None:
    """The kernel module's version from /proc/driver/nvidia/version's text, None if not found."""
    for line in text.splitlines():
        if line.startswith("NVRM version:") and (match := _PROC_LINE.search(line)):
            return _version(match)
    return None


def parse_smi_version(text: str) -> DriverVersion | None:
    """The first GPU's driver version from nvidia-smi's `driver_version` CSV query, None if not found."""
    for line in text.splitlines():
        if match := _SMI_LINE.match(line):
            return _version(match)
    return None


def _query_smi() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        # A local tool talking to the local driver; a wedged GPU can make it hang, hence the timeout.
        result = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def read_driver_version(proc_path: Path = PROC_VERSION) -> DriverVersion | None:
    """The NVIDIA driver version here: the kernel module's file first, nvidia-smi where it is absent.

    Some sandboxes and containers hide /proc/driver/nvidia while nvidia-smi still answers.
    """
    try:
        version = parse_proc_version(proc_path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        version = None
    if version is None and (output := _query_smi()) is not None:
        version = parse_smi_version(output)
    return version


def driver_problem(version: DriverVersion | None) -> str | None:
    """Why this driver cannot run the CUDA 13 provider, or None when it can."""
    if version is None:
        return (
            "no NVIDIA driver found (no /proc/driver/nvidia/version and nvidia-smi did not answer); "
            "the CUDA provider needs driver 580 or newer"
        )
    if version.major < MIN_DRIVER_MAJOR:
        return (
            f"NVIDIA driver {version} is older than {MIN_DRIVER_MAJOR}, the oldest that runs CUDA 13 "
            f"(onnxruntime-gpu's build); install driver {MIN_DRIVER_MAJOR} or newer, or set provider: cpu"
        )
    return None
