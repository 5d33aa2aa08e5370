"""A throwaway PostgreSQL server for tests and the cluster soak: initdb into a temp folder, unix socket only.

Uses Debian's PostgreSQL binaries (`make test` installs the `postgresql` package). The server runs
as an unprivileged user (PostgreSQL refuses root: as root it runs as `postgres`, which Debian's
package creates), listens on no TCP address, and is removed with its folder when stopped.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server binaries here (install Debian's `postgresql` package)."""


def _bin_dir() -> Path:
    override = os.environ.get("OCR_TEST_PG_BIN")  # PostgreSQL's binaries unpacked elsewhere
    if override:
        return Path(override)
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda path: int(path.parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise PostgresUnavailableError("initdb not found: install the postgresql package (make apt-test)")


class ThrowawayPostgres:
    """One PostgreSQL cluster in a temporary folder; `dsn(db)` connects over its unix socket."""

    def __init__(self, *, durable: bool = False) -> None:
        self._bin = _bin_dir()
        self._as_user: list[str] = []
        self.folder = Path(tempfile.mkdtemp(prefix="ocr-pg-"))
        self.data = self.folder / "data"
        owner = os.getuid()
        if owner == 0:
            # initdb and postgres refuse to run as root; the folder must be the server user's
            # (Debian's package makes `postgres`; elsewhere the unprivileged `nobody` does).
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                account = pwd.getpwnam("nobody")
            owner = account.pw_uid
            os.chown(self.folder, owner, account.pw_gid)
            self._as_user = ["runuser", "-u", account.pw_name, "--"]
        self.user = pwd.getpwuid(owner).pw_name
        # Tests want speed, not durability; the soak measures with the server's defaults.
        self._settings = [] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off"]
        self._started = False

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> ThrowawayPostgres:
        self._run(
            str(self._bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8"
        )
        self.resume()
        self._started = True
        return self

    def halt(self) -> None:
        """Stop the server and keep its data: a database that goes away for a while."""
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the server (again) on its data and socket folder."""
        settings = ["-c listen_addresses=''", "-c max_connections=200", *self._pair(self._settings)]
        options = " ".join([f"-k {self.folder}", *settings])
        log = str(self.folder / "log")
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-l", log, "-w", "-o", options, "start")

    @staticmethod
    def _pair(settings: list[str]) -> list[str]:
        return [f"{flag} {value}" for flag, value in zip(settings[::2], settings[1::2], strict=True)]

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.folder} user={self.user} dbname={dbname}"

    def create_database(self) -> str:
        """A new, empty database; returns its connection string."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        if self._started:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
            self._started = False
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def throwaway_postgres(*, durable: bool = False) -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(durable=durable)
    try:
        yield server.start()
    finally:
        server.stop()
