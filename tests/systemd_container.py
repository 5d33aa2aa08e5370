"""A Debian bookworm container with systemd as PID 1 (systemd-nspawn), for running the installed unit.

The root file system is made once with debootstrap and cached under ROOTFS_CACHE, keyed by the
suite and package list; each test session works on a copy. The appliance is installed into the copy
by its own `make install` run inside it (with the host's network, which nspawn shares unless told
otherwise); the booted container gets a private network with nothing but loopback. There is no
machined (`--register=no`), so commands run inside through nsenter into the container's namespaces.

`python -m tests.systemd_container` builds (or finds) the cached root file system and prints its path.
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

SUITE = "bookworm"
# systemd as PID 1 and its bus; python3 for the system interpreter `make install` builds the venv
# with; what the Makefile's install-venv needs to build systemd-python (APT_BUILD, python3-venv) is
# included so that a cached root file system installs without apt, though apt-ensure would add it
# (python3-dev among them: Python.h, which systemd-python's C extension includes).
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "python3-dev",
    "make",
    "gcc",
    "g++",
    "cmake",
    "pkg-config",
    "libsystemd-dev",
    "ca-certificates",
)
ROOTFS_CACHE = Path(os.environ.get("OCR_APPLIANCE_ROOTFS_CACHE", "/var/cache/ocr-appliance-test-rootfs"))
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Commands inside get a clean environment: the host's PATH may name this checkout's venv.
INSIDE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
NSPAWN_RUNTIME = Path("/run/systemd/nspawn")


def unavailable_reason() -> str | None:
    """Why this machine cannot boot a systemd container, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn and debootstrap)"
    if not Path("/proc/sys/kernel").is_dir():
        return "needs /proc/sys/kernel (systemd-nspawn mounts it into the container)"
    for tool in ("systemd-nspawn", "debootstrap", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian packages systemd-container, debootstrap; `make apt-test`)"
    return None


def debian_mirror(sources: Sequence[Path] | None = None) -> str:
    """The Debian mirror apt itself uses for SUITE (deb822 .sources or one-line .list files)."""
    if sources is None:
        sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file() or not path.name.endswith((".list", ".sources")):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.+)$", stanza, flags=re.MULTILINE))
                if SUITE in fields.get("Suites", "").split() and fields.get("Types", "deb").startswith("deb"):
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                match = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s", line.strip() + " ")
                if match and match.group(2) == SUITE:
                    return match.group(1)
    return DEFAULT_MIRROR


def rootfs_key() -> str:
    return hashlib.sha256(" ".join((SUITE, *PACKAGES)).encode()).hexdigest()[:16]


def base_rootfs(log: Path) -> Path:
    """The cached root file system, built with debootstrap on first use (about 3 minutes)."""
    ROOTFS_CACHE.mkdir(parents=True, exist_ok=True)
    target = ROOTFS_CACHE / f"{SUITE}-{rootfs_key()}"
    with (ROOTFS_CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second test run waits for the first one's build
        if (target / ".complete").exists():
            return target
        staging = ROOTFS_CACHE / f"{target.name}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        command = [
            "debootstrap",
            "--variant=minbase",
            "--include=" + ",".join(PACKAGES),
            SUITE,
            str(staging),
            debian_mirror(),
        ]
        with log.open("ab") as out:
            subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=1800)
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target


def copy_rootfs(base: Path, destination: Path) -> Path:
    """A private copy of the cached root file system for one test session."""
    subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(destination)], check=True, timeout=600)
    return destination


def remove_stale_copies() -> None:
    """Copies left by test runs that were killed (run-PID, the PID gone): a GB each."""
    for copy in ROOTFS_CACHE.glob("run-*"):
        pid = copy.name.removeprefix("run-")
        if pid.isdigit() and (int(pid) == os.getpid() or not Path(f"/proc/{pid}").exists()):
            shutil.rmtree(copy, ignore_errors=True)


def copy_source(repo: Path, destination: Path) -> None:
    """The working tree's files (tracked and untracked, not ignored), as `make install` sees them."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = repo / os.fsdecode(name)
        if not source.is_file():
            continue  # deleted in the working tree but still in the index
        target = destination / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def host_pip_settings() -> tuple[list[str], dict[str, str]]:
    """nspawn binds and environment that give pip inside the host's pip settings, read-only.

    The install step reaches the package registries as the host does: through the host's pip
    configuration files, PIP_* variables, CA bundle (a proxy may present its own CA) and any local
    wheel folders or file:// indexes those name.
    """
    env = {key: value for key, value in os.environ.items() if key.startswith("PIP_")}
    env.pop("PIP_CACHE_DIR", None)  # the install binds its own cache
    files = [Path("/etc/pip.conf"), Path.home() / ".config/pip/pip.conf", Path.home() / ".pip/pip.conf"]
    if "PIP_CONFIG_FILE" in env:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    named: list[str] = [env.get("PIP_CERT", ""), os.environ.get("SSL_CERT_FILE", "")]
    named += env.get("PIP_FIND_LINKS", "").split() + env.get("PIP_EXTRA_INDEX_URL", "").split()
    named.append(env.get("PIP_INDEX_URL", ""))
    binds = []
    for config_file in files:
        if config_file.is_file():
            binds.append(f"{config_file}:{config_file}")
            parser = configparser.ConfigParser()
            parser.read(config_file)
            for section in parser.sections():
                for key in ("cert", "find-links", "index-url", "extra-index-url"):
                    named += parser.get(section, key, fallback="").split()
    for value in named:
        path = Path(value.removeprefix("file://"))
        if path.name == "simple":
            path = path.parent  # a local index's pages link to ../../files/
        if value and path.is_absolute() and path.exists():
            binds.append(f"{path}:{path}")
    return list(dict.fromkeys(binds)), env


def run_unbooted(
    root: Path, command: Sequence[str], log: Path, timeout: float, binds: Sequence[str] = ()
) -> None:
    """Runs one command in the root file system without booting it, on the host's network."""
    _nspawn_runtime()
    args = ["systemd-nspawn", "--quiet", "-D", str(root), "--register=no", "--keep-unit", "--pipe"]
    args += [f"--bind={bind}" for bind in binds]
    pip_binds, pip_env = host_pip_settings()
    args += [f"--bind-ro={bind}" for bind in pip_binds]
    args += [f"--setenv={key}={value}" for key, value in {**INSIDE_ENV, "HOME": "/root", **pip_env}.items()]
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        finished = subprocess.run(
            [*args, *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=timeout,
        )
    if finished.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:])
        raise RuntimeError(f"{' '.join(command)} exited with {finished.returncode} in {root}:\n{tail}")


def _nspawn_runtime() -> None:
    """nspawn keeps its per-container state under /run/systemd/nspawn and refuses a /run on disk."""
    NSPAWN_RUNTIME.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mountpoint", "-q", str(NSPAWN_RUNTIME)], check=False).returncode == 0
    if not mounted and not _on_tmpfs(NSPAWN_RUNTIME):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(NSPAWN_RUNTIME)], check=True)


def _on_tmpfs(path: Path) -> bool:
    found = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", str(path)], capture_output=True, text=True, check=False
    )
    return found.stdout.strip() == "tmpfs"


class Booted:
    """A container booted with systemd as PID 1, its network private (loopback only)."""

    def __init__(self, root: Path, log: Path) -> None:
        _nspawn_runtime()
        self._log = log.open("ab")  # closed in stop()
        self.process = subprocess.Popen(
            [
                "systemd-nspawn",
                "-D",
                str(root),
                "--boot",
                "--register=no",
                "--keep-unit",
                "--pipe",
                "--private-network",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.leader = 0

    def wait_running(self, timeout: float) -> str:
        """Waits for the container's systemd to finish booting; returns `is-system-running`'s answer."""
        deadline = time.monotonic() + timeout
        while not self.leader:
            if self.process.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError("the container's PID 1 did not appear")
            self.leader = _container_init(self.process.pid)
            time.sleep(0.2)  # polls the process table: nspawn forks PID 1 after setting up mounts
        while True:
            remaining = max(deadline - time.monotonic(), 1.0)
            # --wait blocks until boot has finished, whatever the outcome (running or degraded).
            result = self.run(["systemctl", "is-system-running", "--wait"], timeout=remaining)
            if result.stdout.strip():
                return result.stdout.strip()
            # PID 1 is up before its bus socket is: on a loaded machine systemctl can come first
            # and find no bus, which is a boot not yet far enough along, not a failure.
            if "Failed to connect to bus" not in result.stderr or time.monotonic() > deadline:
                raise RuntimeError(
                    f"is-system-running gave no state (exit {result.returncode}): {result.stderr}"
                )
            time.sleep(0.2)

    def run(
        self, command: Sequence[str], timeout: float = 60.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs a command inside the booted container (all its namespaces and its root)."""
        return subprocess.run(
            ["nsenter", "--target", str(self.leader), "--all", "--", *command],
            env=INSIDE_ENV,
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )

    def stop(self, timeout: float = 60.0) -> int:
        """Powers the container off; kills it if it does not stop in time."""
        if self.process.poll() is None and self.leader:
            self.run(["systemctl", "poweroff", "--no-block"], timeout=10)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.terminate()  # nspawn asks the container's init to stop, then gives up
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def _container_init(nspawn_pid: int) -> int:
    """The container's PID 1 as the host sees it: the child nspawn starts with CLONE_PARENT."""
    children = Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children")
    try:
        pids = [int(pid) for pid in children.read_text().split()]
    except OSError:
        return 0
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                return pid
        except OSError:
            continue
    return 0


if __name__ == "__main__":
    reason = unavailable_reason()
    if reason:
        sys.exit(reason)
    print(base_rootfs(Path("/dev/stderr")))
