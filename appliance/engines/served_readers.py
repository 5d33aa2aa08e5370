"""Second readers (the VLM) held once in the session server and lent, one request at a time, to the workers.

Why: a worker that loads the VLM on a GPU holds a CUDA context of its own beside the model (on an
H100 about 800 MiB a worker for the 17M line reader, most of it the context), so eight workers
took 9.7 GB of the card with the ONNX engine (bench/README.md, "The daemon with every line read
again"), more than the 8 GB cards sites own. Here the copies live in the session server's process,
on its one CUDA context: `copies` readers, each with its own llama.cpp context, each reading one
request (a group of a page's lines, or a page) at a time, however many workers send. The requests and their
answers are small (line crops, text and figures) and travel pickled on the server's connection.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from appliance.config import EngineConfig
from appliance.engines.base import SecondReader

log = logging.getLogger(__name__)

# What a client learns of a reader when it opens it: the attributes the cascade reads of a second
# reader (engines/base.SecondReader), where the reader has them.
READER_ATTRIBUTES = ("line_margin", "auto_keep", "auto_max_changes", "lines_together")


def reader_key(name: str, config_json: str) -> str:
    """What makes two clients' readers the same: the reader's name and the whole engine configuration."""
    return hashlib.sha256(f"{name}\n{config_json}".encode()).hexdigest()


class _Pool:
    """The copies of one reader; each is lent to one request at a time."""

    def __init__(self, readers: list[SecondReader], scores_hints: bool) -> None:
        self.readers = readers
        self._free: queue.SimpleQueue[SecondReader] = queue.SimpleQueue()
        for reader in readers:
            self._free.put(reader)
        first = readers[0]
        self.attributes: dict[str, Any] = {
            "name": first.name,
            "scores_hints": scores_hints,
            **{name: getattr(first, name) for name in READER_ATTRIBUTES if hasattr(first, name)},
        }

    @contextmanager
    def lent(self) -> Iterator[SecondReader]:
        reader = self._free.get()
        try:
            yield reader
        finally:
            self._free.put(reader)

    def close(self) -> None:
        """Close every copy, each once it is back: reads in flight on other connections finish first."""
        for _ in self.readers:
            self._free.get().close()


class ServedReaders:
    """The readers clients opened, shared by key, closed once no client holds them."""

    def __init__(self, copies: int = 1) -> None:
        self.copies = copies
        self._pools: dict[str, _Pool] = {}
        self._holders: dict[str, int] = {}
        self._lock = threading.Lock()  # the two dicts above, held only to look up or change them
        # One build at a time, without holding _lock: a build takes seconds (models loaded and
        # checked), and the other readers' requests go on meanwhile.
        self._build_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self.reads_done = 0
        self.read_busy_s = 0.0

    def open(self, name: str, config_json: str) -> tuple[str, dict[str, Any]]:
        """The key of reader `name` built from an engine configuration (JSON), and what a client needs of it.

        The first request builds `copies` of it, sharing the VLM's VRAM budget as that many workers
        would; later ones with the same configuration get the same copies.
        """
        key = reader_key(name, config_json)
        with self._build_lock:
            with self._lock:
                pool = self._pools.get(key)
                if pool is not None:
                    self._holders[key] += 1
                    return key, dict(pool.attributes)
            pool = self._build(name, EngineConfig.model_validate_json(config_json))
            with self._lock:
                self._pools[key] = pool
                self._holders[key] = 1
                log.info("served reader %s opened, %d copies (%d open)", name, self.copies, len(self._pools))
            return key, dict(pool.attributes)

    def _build(self, name: str, config: EngineConfig) -> _Pool:
        from appliance.engines.factory import build_second_reader  # llama.cpp loads only when served

        readers: list[SecondReader] = []
        try:
            for _ in range(self.copies):
                readers.append(build_second_reader(config, name, self.copies))
        except BaseException:
            for reader in readers:
                reader.close()
            raise
        score_hints = getattr(readers[0], "score_hints", None)
        return _Pool(readers, bool(score_hints(True)) if score_hints is not None else False)

    def attributes(self, key: str) -> dict[str, Any]:
        return dict(self._pool(key).attributes)

    def release(self, keys: set[str]) -> None:
        """A connection that opened these readers is gone; close those no connection holds any more."""
        closing: list[_Pool] = []
        with self._lock:
            for key in keys:
                self._holders[key] -= 1
                if self._holders[key] == 0:
                    del self._holders[key]
                    closing.append(self._pools.pop(key))
        for pool in closing:
            pool.close()
            log.info("served reader closed, no client holds it")

    def _pool(self, key: str) -> _Pool:
        with self._lock:
            pool = self._pools.get(key)
        if pool is None:
            raise ValueError(f"no served reader {key[:12]}")
        return pool

    def describe(self, key: str) -> dict[str, Any]:
        """The first copy's description (its memory plan, and the card's memory where it samples it)."""
        return self._pool(key).readers[0].describe()

    def call(self, key: str, method: str, args: dict[str, Any], score_hints: bool) -> Any:
        """`read` or `read_lines` on a free copy (waiting for one), hints scored as the client asks."""
        if method not in ("read", "read_lines"):
            raise ValueError(f"a served reader does not answer {method!r}")
        pool = self._pool(key)
        with pool.lent() as reader:
            deadline = args.get("deadline")
            if deadline is not None and time.monotonic() >= deadline:
                # Waited for a copy past the time the page had (every copy busy): nothing is read,
                # and the cascade keeps the first engine's text of these lines.
                raise TimeoutError("the page's time ran out while every copy of the reader was busy")
            started = time.perf_counter()
            try:
                setter = getattr(reader, "score_hints", None)
                if setter is not None:
                    setter(score_hints)
                return getattr(reader, method)(**args)
            finally:
                with self._stats_lock:
                    self.reads_done += 1
                    self.read_busy_s += time.perf_counter() - started

    def stats(self) -> dict[str, Any]:
        with self._lock:
            readers = len(self._pools)
        return {
            "readers": readers,
            "reader_copies": self.copies,
            "reads_done": self.reads_done,
            "read_busy_s": self.read_busy_s,
        }
