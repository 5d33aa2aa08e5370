"""Asks the kernel whether another process holds a file open for writing, through a read lease.

A scanner that writes a multi-page TIFF page by page leaves a valid TIFF on disk after every page,
and pauses between pages can outlast the settle time: size, mtime and the format check all say
"complete" while the writer still has the file open. The kernel knows better. A read lease
(`F_SETLEASE`, `F_RDLCK`) is refused with EAGAIN while any process has the file open for writing,
and while it is held a process that opens the file for writing is made to wait until it is given
up, and the holder can see that (`F_GETLEASE` no longer answers `F_RDLCK`).

Leases exist only for local filesystems, and only for the file's owner or a process with
CAP_LEASE (in the initial user namespace). Where one cannot be taken for another reason than a
writer, the caller falls back to settle time and format checks and is told why.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
from dataclasses import dataclass


class WriterActiveError(Exception):
    """Another process holds the file open for writing: it is not finished, try again later."""


@dataclass
class ReadLease:
    """A read lease on an open, read-only file descriptor, or why none could be taken."""

    fd: int
    held: bool
    unavailable: str | None = None  # why no lease (no writer check possible), when not held

    def broken(self) -> bool:
        """Whether a process tried to open the file for writing while the lease was held."""
        if not self.held:
            return False
        return bool(fcntl.fcntl(self.fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK)

    def release(self) -> None:
        if self.held:
            self.held = False
            fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)


def take_read_lease(fd: int) -> ReadLease:
    """Lease `fd` (opened read-only) for reading; raise WriterActiveError while a writer has it open."""
    try:
        # The kernel signals a lease break to the holder, with SIGIO unless told otherwise, and
        # SIGIO's default action ends the process: a scanner opening the file during a claim would
        # kill the daemon. SIGURG is ignored by default and unused here; the break is read back with
        # F_GETLEASE instead of from the signal.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as error:
        if error.errno == errno.EAGAIN:
            raise WriterActiveError("another process has it open for writing") from None
        # EACCES: not the file's owner and no CAP_LEASE; EINVAL/ENOSYS: no leases on this
        # filesystem (NFS, SMB, FUSE, some overlay setups).
        return ReadLease(fd, held=False, unavailable=f"no read lease ({os.strerror(error.errno or 0)})")
    return ReadLease(fd, held=True)
