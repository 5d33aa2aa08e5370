"""Helpers the daemon tests share: waiting for a condition, and small images to drop in a hot folder."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from PIL import Image

from appliance.config import AppConfig
from appliance.daemon import Daemon
from appliance.workers import EngineFactory


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def process_gone(pid: int) -> bool:
    """No process has this pid, or a zombie its new parent has not reaped yet (dead all the same).

    A child orphaned by a killed parent is reaped by PID 1, which in a container may never do it.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except FileNotFoundError:
        return True
    return any(line.split()[1] in ("Z", "X") for line in status.splitlines() if line.startswith("State:"))


def image_bytes(colour: str = "white", size: tuple[int, int] = (320, 200), fmt: str = "PNG") -> bytes:
    """A plain image, encoded: colours give distinct content (and trigger the failing fakes)."""
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=fmt)
    return buffer.getvalue()


def png_bytes(colour: str = "white", size: tuple[int, int] = (320, 200)) -> bytes:
    return image_bytes(colour, size, "PNG")


def jpeg_bytes(colour: str = "white", size: tuple[int, int] = (320, 200)) -> bytes:
    return image_bytes(colour, size, "JPEG")


class DaemonThread:
    """A real Daemon started in the test's process and run on its own thread until the block ends.

    `factory_for` builds the workers' engine from a configuration, as `ocr-appliance run` does:
    the daemon needs it to point the engine at its session server.
    """

    def __init__(
        self,
        config: AppConfig,
        factory: EngineFactory,
        factory_for: Callable[[AppConfig], EngineFactory] | None = None,
    ) -> None:
        self.config = config
        self.daemon = Daemon(config, factory, factory_for=factory_for)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.daemon.run, args=(self.stop,))

    def __enter__(self) -> Self:
        self.daemon.start()
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
