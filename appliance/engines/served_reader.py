"""A second reader read in the session server (served_readers.py), to the cascade as one of its own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import EngineConfig
from appliance.engines.base import PageText
from appliance.engines.ppocr_onnx.remote_session import Channel, SessionServerClient
from appliance.engines.served_readers import reader_key


class ServedReader:
    """Reader `name` of `config`, built and held in the session server at `socket_path`.

    `config` is the configuration the server builds it from (without the socket). Each thread of
    this process has its own connection; a connection opens the reader once before its first
    read, so a server started again after it died builds it anew on the next read. A read the
    server took and did not answer fails (SessionServerError): the cascade then keeps the first
    engine's text of those lines.
    """

    # Lines the served reader reads side by side; set from the server's copies, as are the other
    # attributes the cascade reads of a second reader that they have (line_margin, auto_keep...).
    lines_together: int = 1

    def __init__(self, socket_path: Path, name: str, config: EngineConfig) -> None:
        self.name = name
        self.socket_path = socket_path
        self._config_json = config.model_dump_json()
        self._key = reader_key(name, self._config_json)
        self._client = SessionServerClient(socket_path)
        self._score_hints = False
        try:
            attributes = self._open(self._client.channel())
        except BaseException:
            self._client.close()
            raise
        self._scores_hints = bool(attributes.pop("scores_hints", False))
        attributes.pop("name", None)
        for attribute, value in attributes.items():
            setattr(self, attribute, value)

    def _open(self, channel: Channel) -> dict[str, Any]:
        answer = self._client.request(channel, ("reader_open", self.name, self._config_json))
        channel.readers_opened.add(answer[1])
        return dict(answer[2])

    def _ask(self, message: tuple[Any, ...]) -> Any:
        """The answer on this thread's connection; sent again once if the server was gone before it."""
        return self._client.on_a_channel(lambda channel: self._ask_on(channel, message))

    def _ask_on(self, channel: Channel, message: tuple[Any, ...]) -> Any:
        if self._key not in channel.readers_opened:
            self._open(channel)
        return self._client.request(channel, message)[1]

    def score_hints(self, on: bool = True) -> bool:
        """As the reader's own (`keep: joint`): sent with every read, since the server's copies are shared."""
        self._score_hints = on and self._scores_hints
        return self._score_hints or not on

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        # deadline is a time.monotonic() value: Linux's monotonic clock is the same in every process.
        args = {"image": image, "hint": hint, "deadline": deadline}
        page: PageText = self._ask(("reader_call", self._key, "read", args, self._score_hints))
        return page

    def read_lines(
        self,
        images: Sequence[np.ndarray],
        deadline: float | None = None,
        hints: Sequence[str | None] | None = None,
    ) -> list[PageText]:
        args = {"images": list(images), "deadline": deadline, "hints": None if hints is None else list(hints)}
        pages: list[PageText] = self._ask(("reader_call", self._key, "read_lines", args, self._score_hints))
        return pages

    def describe(self) -> dict[str, Any]:
        """The served reader's own description, and the server it is read in."""
        described: dict[str, Any] = self._ask(("reader_describe", self._key))
        return {**described, "session_server": str(self.socket_path)}

    def close(self) -> None:
        """Close this process's connections: the server closes the reader once no connection holds it."""
        self._client.close()
