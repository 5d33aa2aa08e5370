"""One process that holds the engine's onnxruntime sessions and runs them for the worker processes.

Why a process of its own: on a GPU a page's host stages (decode, preprocess, crops, the detector's
post-processing) are Python holding the GIL for about three quarters of its time, so pages read by
threads of one process overlap the GPU, not each other (bench/README.md, "The ONNX engine on the
GPU"); and worker processes that each open the models on the GPU each hold a CUDA context, arena
and handles (about 4 GB a process) and time-slice the card. Here the workers keep the host stages,
one GIL each, and send only each model run's tensors: the sessions, their one CUDA context and
arena live once, in this process, and run on `runners` threads, so the card's memory is that of
`runners` pages in flight however many workers send.

The transport is multiprocessing.connection on a unix socket (its authkey handshake, framing and
pickling) for requests and answers, and one shared-memory block per client thread for the tensors,
so a page's inputs and the detector's probability map are copied once each way instead of pickled
through the socket. Only processes of the service's user reach the socket: its folder is private
(0700), and a peer must know the key in the 0600 file beside it.

It also holds the second readers the workers are told to read here (the VLM, jobs.serve_vlm:
engines/served_readers.py), on the same CUDA context, lent to one request at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import mmap
import os
import secrets
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from multiprocessing import AuthenticationError, get_context
from multiprocessing.connection import Client, Connection, Listener
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np

from appliance.engines.served_readers import ServedReaders, reader_key
from appliance.errors import EngineUnavailableError, ModelError
from appliance.parent_death import die_with_parent

log = logging.getLogger(__name__)

# Offsets of tensors in a shared block are multiples of this (cache lines; numpy's alignment).
ALIGN = 64
# How long a start waits for the server's socket to answer, and a client for its connection.
START_TIMEOUT_S = 60.0
SHM_FOLDER = Path("/dev/shm")


class SessionServerError(EngineUnavailableError):
    """The session server cannot be reached, or it went away while a run was in flight."""


class RemoteRunError(RuntimeError):
    """A model run failed in the session server; the message is onnxruntime's."""


def key_path(socket_path: Path) -> Path:
    """The file beside the socket that holds the connection key (readable by the service's user only)."""
    return socket_path.with_name(socket_path.name + ".key")


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class AttachedBlock:
    """A client's shared block, opened by name in this process (Linux keeps POSIX shared memory in /dev/shm).

    Not multiprocessing.shared_memory.SharedMemory: before Python 3.13 opening a block registers
    it with the resource tracker, which then unlinks it under the client when this process ends
    (CPython issue 82300), and unregistering it again removes the registration of the client when
    both share the tracker. The client that made the block owns its removal.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        with (SHM_FOLDER / name.lstrip("/")).open("r+b") as handle:
            self._map = mmap.mmap(handle.fileno(), 0)
        self.buf = memoryview(self._map)
        self.size = len(self._map)

    def close(self) -> None:
        self.buf.release()
        self._map.close()


def tensor_view(
    block: SharedMemory | AttachedBlock, dtype: str, shape: tuple[int, ...], offset: int
) -> np.ndarray:
    """An array over `block`'s bytes at `offset` (no copy)."""
    return np.ndarray(shape, dtype=np.dtype(dtype), buffer=block.buf, offset=offset)


class _OpenSession:
    """A session of the server with what a client needs to stand in for it."""

    def __init__(self, session: Any, info: Any) -> None:
        self.session = session
        self.info = info
        self.inputs = [(node.name, list(node.shape), node.type) for node in session.get_inputs()]
        self.outputs = [(node.name, list(node.shape), node.type) for node in session.get_outputs()]
        self.providers = list(session.get_providers())


class SessionServer:
    """The sessions every client opened, shared by key, and the threads that run them."""

    def __init__(self, socket_path: Path, runners: int = 1, reader_copies: int = 1) -> None:
        self.socket_path = socket_path
        self.instance = uuid.uuid4().hex
        self.runners = runners
        self._by_key: dict[str, int] = {}
        # By id; None once no client holds it (a worker restarted on a new engine configuration
        # opens new sessions, and the old ones' memory goes back to the arena for them).
        self._sessions: list[_OpenSession | None] = []
        self._holders: dict[int, int] = {}  # session id -> connections that opened it
        self._open_lock = threading.Lock()
        # A fixed pool: onnxruntime's CUDA provider keeps cuDNN and cuBLAS handles per thread that
        # runs, so the runners bound that memory whatever the number of clients.
        self._pool = ThreadPoolExecutor(runners, thread_name_prefix="session-run")
        self._listener: Listener | None = None
        self._stopping = threading.Event()
        self._clients_lock = threading.Lock()
        self.clients = 0
        # When each run asked for now began (queued or running): the daemon's keeper reads the
        # oldest to tell a server whose runner hangs (a stuck GPU call) from a busy one.
        self._runs: dict[int, float] = {}
        self._runs_lock = threading.Lock()
        self._run_ids = itertools.count()
        # Runs finished and the seconds runners spent in them: how busy the runners are, for
        # telling a server that bounds the pages a second from workers that do.
        self.runs_done = 0
        self.run_busy_s = 0.0
        # Second readers (the VLM) the workers read in this process too (jobs.serve_vlm).
        self.readers = ServedReaders(reader_copies)

    def open(self, key: str, path: str, model: bytes | None, options: dict[str, Any]) -> tuple[int, bool]:
        """The id of the session `key` names, opened from `path` (or `model`) on the first request.

        And whether this request created it: only its first opener warms it up.
        """
        from appliance.engines.ppocr_onnx.sessions import create_session

        with self._open_lock:
            found = self._by_key.get(key)
            if found is not None:
                self._holders[found] += 1
                return found, False
            session, info = create_session(Path(path), model=model, **options)
            self._sessions.append(_OpenSession(session, info))
            session_id = self._by_key[key] = len(self._sessions) - 1
            self._holders[session_id] = 1
            log.info("session %s opened for %s (%d open)", key[:12], Path(path).name, len(self._holders))
            return session_id, True

    def release(self, session_ids: set[int]) -> None:
        """A connection that opened these sessions is gone; close those no connection holds any more."""
        with self._open_lock:
            for session_id in session_ids:
                self._holders[session_id] -= 1
                if self._holders[session_id] == 0:
                    del self._holders[session_id]
                    self._sessions[session_id] = None
                    for key in [key for key, found in self._by_key.items() if found == session_id]:
                        del self._by_key[key]
                    open_now = len(self._holders)
                    log.info("session %d closed, no client holds it (%d open)", session_id, open_now)

    def opened(self, session_id: int) -> _OpenSession:
        found = self._sessions[session_id] if 0 <= session_id < len(self._sessions) else None
        if found is None:
            raise ValueError(f"no open session {session_id}")
        return found

    def run(self, session_id: int, names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[Any]:
        """One run of a session on a runner thread; the caller waits for its outputs."""
        session = self.opened(session_id).session
        with self._asked():
            return list(self._pool.submit(self._timed_run, session, names, feeds).result())

    @contextlib.contextmanager
    def _asked(self) -> Iterator[None]:
        """A run or a served read counted from when it is asked until it is answered (oldest_run_s)."""
        run_id = next(self._run_ids)
        with self._runs_lock:
            self._runs[run_id] = time.monotonic()
        try:
            yield
        finally:
            with self._runs_lock:
                del self._runs[run_id]

    def _timed_run(self, session: Any, names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[Any]:
        started = time.perf_counter()
        try:
            return list(session.run(names, feeds))
        finally:
            with self._runs_lock:
                self.runs_done += 1
                self.run_busy_s += time.perf_counter() - started

    def oldest_run_s(self) -> float:
        """Seconds since the oldest run now asked for (waiting or running) began; 0 with none."""
        with self._runs_lock:
            first = min(self._runs.values(), default=None)
        return 0.0 if first is None else time.monotonic() - first

    def serve_forever(self) -> None:
        """Accept clients until stop(); each client is served on a thread of its own."""
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket_path.parent.chmod(0o700)
        authkey = secrets.token_bytes(32)
        key_file = key_path(self.socket_path)
        key_file.unlink(missing_ok=True)
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(authkey)
        self.socket_path.unlink(missing_ok=True)
        self._listener = Listener(str(self.socket_path), family="AF_UNIX", authkey=authkey)
        log.info("session server listening on %s with %d runner(s)", self.socket_path, self.runners)
        try:
            while not self._stopping.is_set():
                try:
                    connection = self._listener.accept()
                except Exception as error:  # a peer without the key (AuthenticationError), or stop()'s
                    if not self._stopping.is_set():
                        log.warning("session server refused a connection: %s", error)
                    continue
                threading.Thread(
                    target=self._serve_client, args=(connection,), name="session-client", daemon=True
                ).start()
        finally:
            self._listener.close()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """End serve_forever: accept() does not wake when its socket is closed, a connection does."""
        self._stopping.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as poke:
            poke.connect(str(self.socket_path))

    def _count_client(self, change: int) -> None:
        with self._clients_lock:
            self.clients += change

    def _serve_client(self, connection: Connection) -> None:
        self._count_client(1)
        blocks: dict[str, AttachedBlock] = {}
        held: set[int] = set()  # the sessions this connection opened
        held_readers: set[str] = set()  # and the served readers
        try:
            while True:
                try:
                    request = connection.recv()
                except (EOFError, OSError):
                    return
                try:
                    if str(request[0]).startswith("reader_"):
                        answer = self._reader_answer(request, held_readers)
                    else:
                        answer = self._answer(request, blocks, held)
                except Exception as error:  # reported to the client, which raises it there
                    answer = ("error", type(error).__name__, str(error))
                try:
                    connection.send(answer)
                except (OSError, ValueError):
                    return
        finally:
            self._count_client(-1)
            self.release(held)
            self.readers.release(held_readers)
            for block in blocks.values():
                block.close()
            connection.close()

    def _answer(
        self, request: tuple[Any, ...], blocks: dict[str, AttachedBlock], held: set[int]
    ) -> tuple[Any, ...]:
        kind = request[0]
        if kind == "hello":
            return ("ok", self.instance)
        if kind == "open":
            _, key, path, model, options = request
            if key in self._by_key and self._by_key[key] in held:
                session_id, created = self._by_key[key], False  # this connection holds it already
            else:
                session_id, created = self.open(key, path, model, options)
                held.add(session_id)
            opened = self.opened(session_id)
            info = asdict(opened.info)
            return ("ok", session_id, opened.inputs, opened.outputs, opened.providers, info, created)
        if kind == "run":
            _, session_id, names, block_name, inputs, output_offset = request
            block = blocks.get(block_name)
            if block is None:
                for old in blocks.values():  # a client only ever grows into a new block
                    old.close()
                blocks.clear()
                block = blocks[block_name] = AttachedBlock(block_name)
            feeds = {name: tensor_view(block, dtype, shape, offset) for name, dtype, shape, offset in inputs}
            outputs = self.run(session_id, names, feeds)
            del feeds
            return ("ok", _place_outputs(outputs, block, output_offset))
        if kind == "stats":
            return (
                "ok",
                {
                    "sessions": len(self._holders),
                    "clients": self.clients,
                    "runners": self.runners,
                    "oldest_run_s": self.oldest_run_s(),
                    "runs_done": self.runs_done,
                    "run_busy_s": self.run_busy_s,
                    "pid": os.getpid(),
                    **self.readers.stats(),
                },
            )
        raise ValueError(f"unknown request {kind!r}")

    def _reader_answer(self, request: tuple[Any, ...], held: set[str]) -> tuple[Any, ...]:
        """Served readers: `reader_open` one, `reader_call` a read with it, `reader_describe` it."""
        kind = request[0]
        if kind == "reader_open":
            _, name, config_json = request
            key = reader_key(name, config_json)
            if key in held:  # this connection holds it already
                return ("ok", key, self.readers.attributes(key))
            key, attributes = self.readers.open(name, config_json)
            held.add(key)
            return ("ok", key, attributes)
        if kind == "reader_call":
            _, key, method, args, score_hints = request
            with self._asked():
                return ("ok", self.readers.call(key, method, args, score_hints))
        if kind == "reader_describe":
            return ("ok", self.readers.describe(request[1]))
        raise ValueError(f"unknown request {kind!r}")


def _place_outputs(outputs: list[Any], block: AttachedBlock, offset: int) -> list[tuple[Any, ...]]:
    """Each output written into the block from `offset` while it fits, else sent in the answer."""
    placed: list[tuple[Any, ...]] = []
    for output in outputs:
        if isinstance(output, np.ndarray) and output.dtype != object:
            start = aligned(offset)
            if start + output.nbytes <= block.size:
                tensor_view(block, output.dtype.str, output.shape, start)[...] = output
                placed.append(("block", output.dtype.str, output.shape, start))
                offset = start + output.nbytes
                continue
        placed.append(("inline", output))
    return placed


def serve(socket_path: Path, runners: int, log_level: int = logging.INFO, reader_copies: int = 1) -> None:
    """The session server process's body: serve until SIGTERM or SIGINT."""
    # A killed daemon (or benchmark) must not leave a server holding the models and GPU memory.
    die_with_parent()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=log_level, format="%(name)s: %(message)s")
    server = SessionServer(socket_path, runners, reader_copies)

    def stop(_signal: int, _frame: object) -> None:
        threading.Thread(target=server.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


class SessionServerProcess:
    """A session server started as a child process of this one."""

    def __init__(
        self, socket_path: Path, runners: int = 1, log_level: int = logging.INFO, reader_copies: int = 1
    ) -> None:
        self.socket_path = socket_path
        # spawn: the server must not inherit this process's threads or onnxruntime state.
        self._process = get_context("spawn").Process(
            target=serve,
            args=(socket_path, runners, log_level, reader_copies),
            name="ocr-session-server",
            daemon=True,
        )

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the process and wait until a client can connect; ModelError if it never listens."""
        self._process.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._process.is_alive():
                raise ModelError(
                    f"the session server exited with code {self._process.exitcode} before listening "
                    f"on {self.socket_path}"
                )
            if self._answers():
                return
            time.sleep(0.05)
        self.stop()
        raise ModelError(f"the session server did not listen on {self.socket_path} within {timeout:.0f} s")

    def _ask(self, request: tuple[Any, ...]) -> tuple[Any, ...]:
        """One request on a connection of its own, with the server's key; blocks until it answers."""
        authkey = key_path(self.socket_path).read_bytes()
        with Client(str(self.socket_path), family="AF_UNIX", authkey=authkey) as connection:
            connection.send(request)
            answer: tuple[Any, ...] = connection.recv()
        return answer

    def _answers(self) -> bool:
        """Whether the server takes a connection with its key and answers a hello."""
        try:
            return bool(self._ask(("hello",))[0] == "ok")
        except (OSError, EOFError, AuthenticationError):
            return False

    def stats(self) -> dict[str, Any]:
        """The server's sessions, clients, runners and oldest run's age (`oldest_run_s`), on a new connection.

        Blocks for as long as the server takes to answer, for ever if it is frozen: ask from a
        thread that may be left waiting (session_server_keeper's probe).
        """
        answer = self._ask(("stats",))
        if answer[0] != "ok":
            raise SessionServerError(f"the session server answered {answer!r} to stats")
        return dict(answer[1])

    def kill(self) -> None:
        """SIGKILL: for a server that no longer answers, which SIGTERM would not end."""
        if self._process.pid is not None:
            self._process.kill()
            self._process.join()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.is_alive()

    @property
    def exitcode(self) -> int | None:
        """How it ended: its exit status, minus the signal that killed it, None while it runs."""
        return self._process.exitcode

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`."""
        if self._process.pid is None:
            return
        self._process.terminate()
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
