"""A child process of the daemon asks Linux to kill it when the daemon dies, even by SIGKILL."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have this process SIGKILLed when the process that started it dies.

    Otherwise a child orphaned by a killed daemon lives on: a worker would go on reading and
    writing results beside the restarted daemon's own workers, and a session server would keep
    its models and CUDA arena on the GPU that the new daemon's server needs. prctl(PR_SET_PDEATHSIG)
    through ctypes: a few lines, where a dependency would add a compiled package for one call.

    Linux sends the signal when the *thread* that started the child ends, so a child must be
    started from a thread that lives as long as the daemon needs the child (the main thread or
    the daemon's loop, which stops its children before it ends). A parent that died before the
    prctl call sends nothing: the parent's pid, which multiprocessing knows, is compared after it.
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # not glibc Linux: systemd's KillMode=control-group still cleans up
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None and os.getppid() != parent.pid:
        os.kill(os.getpid(), signal.SIGKILL)  # already orphaned: no death signal will come
