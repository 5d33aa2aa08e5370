"""Sessions opened in a session server (session_server.py) that the engine runs as if they were its own.

A RemoteSession answers the calls the engine makes of an onnxruntime InferenceSession
(get_inputs, get_outputs, get_providers, run). Each thread of the client process has its own
connection and shared block, so pages read on several threads do not wait for each other here.
When the server has gone and come back (the daemon starts it again), the next run reconnects and
opens the session again from what was asked the first time; a run in flight when it went fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from appliance.engines.ppocr_onnx.session_server import (
    RemoteRunError,
    SessionServerError,
    aligned,
    key_path,
    tensor_view,
)
from appliance.errors import ModelError, ProviderError

# A thread's first shared block; it grows to twice a run's inputs when they do not fit in half,
# so that the outputs (the detector's probability map: as many floats as the page has pixels)
# come back through it too.
FIRST_BLOCK_BYTES = 32 * 1024 * 1024
_OUTPUT_SLACK = 16 * 1024 * 1024
_T = TypeVar("_T")
# The errors a server reports back that the client raises as the engine's own.
_ERRORS: dict[str, type[Exception]] = {"ModelError": ModelError, "ProviderError": ProviderError}


class NotSentError(SessionServerError):
    """The server was gone before it received a request, so the request may be sent again elsewhere."""


@dataclass(frozen=True)
class RemoteNodeArg:
    """An input or output of a remote session, as onnxruntime's NodeArg describes it."""

    name: str
    shape: list[Any]
    type: str


class Channel:
    """One thread's connection to the server and the shared block its tensors travel in."""

    def __init__(self, connection: Connection, generation: int) -> None:
        self.connection = connection
        self.generation = generation
        self.block: SharedMemory | None = None
        self.session_ids: dict[str, int] = {}
        self.readers_opened: set[str] = set()  # the served readers' keys (served_reader.py)

    def block_for(self, input_bytes: int) -> SharedMemory:
        """A block with room for `input_bytes` of inputs and, mostly, the outputs after them."""
        needed = 2 * input_bytes + _OUTPUT_SLACK
        if self.block is None or self.block.size < needed:
            self.release_block()
            self.block = SharedMemory(create=True, size=max(FIRST_BLOCK_BYTES, needed))
        return self.block

    def release_block(self) -> None:
        if self.block is not None:
            self.block.close()
            self.block.unlink()
            self.block = None

    def close(self) -> None:
        self.release_block()
        self.connection.close()


class SessionServerClient:
    """The connections of this process to one session server, one per thread."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._local = threading.local()
        self._channels: list[Channel] = []
        self._lock = threading.Lock()
        # Raised whenever a channel finds the server gone: every thread's channel made before
        # then is to a server that is no more, and is replaced at its next request.
        self._generation = 0

    def _connect(self) -> Channel:
        try:
            authkey = key_path(self.socket_path).read_bytes()
            connection = Client(str(self.socket_path), family="AF_UNIX", authkey=authkey)
            connection.send(("hello",))
            connection.recv()
        except (OSError, EOFError, AuthenticationError) as error:
            raise SessionServerError(
                f"cannot reach the session server at {self.socket_path}: {error}"
            ) from None
        channel = Channel(connection, self._generation)
        with self._lock:
            self._channels.append(channel)
        return channel

    def channel(self) -> Channel:
        """The calling thread's channel, connected again if the server went away since it was made."""
        channel: Channel | None = getattr(self._local, "channel", None)
        if channel is not None and channel.generation != self._generation:
            self._forget(channel)
            channel = None
        if channel is None:
            channel = self._local.channel = self._connect()
        return channel

    def _forget(self, channel: Channel) -> None:
        if getattr(self._local, "channel", None) is channel:
            self._local.channel = None
        with self._lock:
            if channel in self._channels:
                self._channels.remove(channel)
        with contextlib.suppress(OSError):
            channel.close()

    def _lost(self, channel: Channel) -> None:
        with self._lock:
            if channel.generation == self._generation:
                self._generation += 1
        self._forget(channel)

    def request(self, channel: Channel, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """The server's answer; NotSentError if the server was gone before it got the request."""
        try:
            channel.connection.send(message)
        except OSError as error:
            self._lost(channel)
            raise NotSentError(f"the session server at {self.socket_path} is gone: {error}") from None
        try:
            answer: tuple[Any, ...] = channel.connection.recv()
        except (OSError, EOFError) as error:
            self._lost(channel)
            raise SessionServerError(
                f"the session server at {self.socket_path} went away during a request: {error or 'closed'}"
            ) from None
        if answer[0] == "error":
            _, kind, text = answer
            if message[0] == "run":
                raise RemoteRunError(f"{kind}: {text}")
            raise _ERRORS.get(kind, ModelError)(text)
        return answer

    def on_a_channel(self, use: Callable[[Channel], _T]) -> _T:
        """`use` on this thread's channel; once more on a new one if the server was gone before it got it.

        A request the server took and did not answer is not sent again: the input may be what
        brought it down.
        """
        try:
            return use(self.channel())
        except NotSentError:
            return use(self.channel())

    def stats(self) -> dict[str, Any]:
        """Sessions the server holds, clients it serves, its runner threads, its oldest run's age."""
        answer = self.request(self.channel(), ("stats",))
        return dict(answer[1])

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, []
        for channel in channels:
            with contextlib.suppress(OSError):
                channel.close()
        self._local = threading.local()


def session_key(slot: str, path: Path, model: bytes | None, options: dict[str, Any]) -> str:
    """What makes two requests the same session: the slot (one per fixed shape), the graph, the options."""
    digest = hashlib.sha256()
    digest.update(slot.encode())
    digest.update(model if model is not None else str(path.resolve()).encode())
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()


class RemoteSession:
    """A session in the server, run from this process as an InferenceSession would be."""

    def __init__(
        self,
        client: SessionServerClient,
        slot: str,
        path: Path,
        model: bytes | None,
        options: dict[str, Any],
    ) -> None:
        self._client = client
        self._path = path
        self._model = model  # kept to open the session again in a server that was started again
        self._options = options
        self._key = session_key(slot, path, model, options)
        answer = self._open(client.channel())
        _, _, inputs, outputs, self._providers, self.info, created = answer
        # Whether this open created the session in the server: a session another worker opened
        # first has had its warm-up runs (PpocrOnnxEngine._warm) from that worker already.
        self.needs_warm_up = bool(created)
        self._inputs = [RemoteNodeArg(*node) for node in inputs]
        self._outputs = [RemoteNodeArg(*node) for node in outputs]

    def _open(self, channel: Channel) -> tuple[Any, ...]:
        answer = self._client.request(
            channel, ("open", self._key, str(self._path), self._model, self._options)
        )
        channel.session_ids[self._key] = answer[1]
        return answer

    def get_inputs(self) -> list[RemoteNodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[RemoteNodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[Any]:
        """The outputs of one run; SessionServerError if the server is gone, RemoteRunError if it failed.

        A request that did not reach the server (its connection was to a server since started
        again) is sent once more on a new connection, the session opened there first; a run the
        server took and did not answer is not: the input may be what brought it down.
        """
        arrays = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
        return self._client.on_a_channel(lambda channel: self._run(channel, output_names, arrays))

    def _run(self, channel: Channel, names: list[str] | None, arrays: dict[str, np.ndarray]) -> list[Any]:
        session_id = channel.session_ids.get(self._key)
        if session_id is None:
            session_id = self._open(channel)[1]
        block = channel.block_for(sum(aligned(array.nbytes) for array in arrays.values()))
        placed: list[tuple[str, str, tuple[int, ...], int]] = []
        offset = 0
        for name, array in arrays.items():
            tensor_view(block, array.dtype.str, array.shape, offset)[...] = array
            placed.append((name, array.dtype.str, array.shape, offset))
            offset = aligned(offset + array.nbytes)
        answer = self._client.request(channel, ("run", session_id, names, block.name, placed, offset))
        outputs: list[Any] = []
        for item in answer[1]:
            if item[0] == "block":
                _, dtype, shape, start = item
                outputs.append(tensor_view(block, dtype, shape, start).copy())
            else:
                outputs.append(item[1])
        return outputs
