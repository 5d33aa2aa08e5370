"""Engines that crash, run out of memory, or read a fixed text, for tests of everything around them."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import AppConfig, EngineConfig
from appliance.document import Line, Word
from appliance.engines.base import PageText


class FixedTextEngine:
    """Reads one line with the given text and confidence on every page, instantly."""

    name = "fake_fixed"

    def __init__(self, text: str = "HELLO WORLD", confidence: float = 0.97) -> None:
        self.text = text
        self.confidence = confidence
        self.pages_seen = 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "models": []}

    def recognize(self, image: np.ndarray) -> PageText:
        self.pages_seen += 1
        height, width = image.shape[:2]
        box = (10.0, 10.0, min(width - 1, 200.0), min(height - 1, 40.0))
        line = Line(
            text=self.text,
            box=box,
            polygon=((box[0], box[1]), (box[2], box[1]), (box[2], box[3]), (box[0], box[3])),
            confidence=self.confidence,
            char_confidences=[self.confidence] * len(self.text),
            words=[Word(text=word, box=box, confidence=self.confidence) for word in self.text.split()],
            engine=self.name,
        )
        return PageText(lines=[line], timings_ms={"det": 0.1, "rec": 0.1})

    def close(self) -> None:
        pass


def _is_blue(image: np.ndarray) -> bool:
    """Whether a page is mostly pure blue: the trigger of the failing fakes.

    Judged on the whole image, not one pixel, so it survives preprocessing (turns, crops,
    scaling); blue, because the seal step lifts red ink off pages before the engine sees them.
    """
    blue, green, red = (float(image[..., channel].mean()) for channel in range(3))
    return blue > 200 and green < 60 and red < 60


class CrashingEngine(FixedTextEngine):
    """Raises an unexpected exception on mostly blue pages."""

    name = "fake_crashing"

    def recognize(self, image: np.ndarray) -> PageText:
        if _is_blue(image):
            raise RuntimeError("native code failed")
        return super().recognize(image)


class OutOfMemoryEngine(FixedTextEngine):
    """Runs out of memory on every page."""

    name = "fake_oom"

    def recognize(self, image: np.ndarray) -> PageText:
        raise MemoryError


class AbortingEngine(FixedTextEngine):
    """Kills its own process with SIGABRT on blue pages, as a segfault in native code would."""

    name = "fake_aborting"

    def recognize(self, image: np.ndarray) -> PageText:
        if _is_blue(image):
            os.abort()
        return super().recognize(image)


class HangingEngine(FixedTextEngine):
    """Never returns on blue pages, as a deadlocked GPU kernel would."""

    name = "fake_hanging"

    def recognize(self, image: np.ndarray) -> PageText:
        if _is_blue(image):
            while True:
                time.sleep(3600)
        return super().recognize(image)


class FlakyOutOfMemoryEngine(FixedTextEngine):
    """Runs out of memory on blue pages (a transient failure the daemon retries)."""

    name = "fake_flaky_oom"

    def recognize(self, image: np.ndarray) -> PageText:
        if _is_blue(image):
            raise MemoryError
        return super().recognize(image)


class ServerGoneOnceEngine(FixedTextEngine):
    """Loses its session server in the middle of the first blue page, as when the server is killed.

    The error is the one a RemoteSession raises; a later attempt (the server started again) reads.
    """

    name = "fake_server_gone"

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.lost = False

    def recognize(self, image: np.ndarray) -> PageText:
        if _is_blue(image) and not self.lost:
            from appliance.engines.ppocr_onnx.session_server import SessionServerError

            self.lost = True
            raise SessionServerError("the session server at /run/s.sock went away during a request: closed")
        return super().recognize(image)


# Module-level factories: the daemon's worker processes are spawned, and a factory must be
# importable by name there.
def fixed_text_engine() -> FixedTextEngine:
    return FixedTextEngine("INVOICE 42")


def crashing_engine() -> CrashingEngine:
    return CrashingEngine("INVOICE 42")


def aborting_engine() -> AbortingEngine:
    return AbortingEngine("INVOICE 42")


def hanging_engine() -> HangingEngine:
    return HangingEngine("INVOICE 42")


def flaky_oom_engine() -> FlakyOutOfMemoryEngine:
    return FlakyOutOfMemoryEngine("INVOICE 42")


def server_gone_once_engine() -> ServerGoneOnceEngine:
    return ServerGoneOnceEngine("INVOICE 42")


def unreachable_server_engine() -> FixedTextEngine:
    from appliance.engines.ppocr_onnx.session_server import SessionServerError

    raise SessionServerError("cannot reach the session server at /run/s.sock: [Errno 2] No such file")


class ServedEngine(FixedTextEngine):
    """Reads a fixed text and describes the session server its configuration points at."""

    name = "fake_served"

    def __init__(self, text: str, session_server: str | None) -> None:
        super().__init__(text)
        self.session_server = session_server

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "session_server": self.session_server}


def served_engine(config: EngineConfig) -> ServedEngine:
    """The workers' engine as built from the configuration (a partial of this is a worker's factory)."""
    socket = config.ppocr_onnx.session_server
    return ServedEngine("INVOICE 42", None if socket is None else str(socket))


def served_engine_factory(config: AppConfig) -> Callable[[], ServedEngine]:
    """The daemon's `factory_for`: the workers' engine built from the configuration it is given."""
    return functools.partial(served_engine, config.engine)


def failing_to_load_engine() -> FixedTextEngine:
    from appliance.errors import ModelError

    raise ModelError("model file ppocrv5_det.onnx is missing")


def engine_loaded_with_others(folder: str, workers: int, patience_s: float = 120.0) -> FixedTextEngine:
    """Loads only while `workers` workers are loading at once: fails to load if they load one by one.

    Each load leaves its process id in `folder` and waits until `workers` have done so.
    """
    from appliance.errors import ModelError

    Path(folder, str(os.getpid())).touch()
    deadline = time.monotonic() + patience_s
    while len(list(Path(folder).iterdir())) < workers:
        if time.monotonic() > deadline:
            raise ModelError(f"the other workers did not load within {patience_s:.0f} s of this one")
        time.sleep(0.05)
    return FixedTextEngine()


def low_confidence_receipt_engine() -> FixedTextEngine:
    """Reads a receipt total, unsure of every character: what routing sends to review."""
    return FixedTextEngine("TOTAL 40.17", confidence=0.4)


class FakeVlmReader:
    """A second reader for the cascade: writes given lines, fails, or stops the way a VLM can.

    `outcome` is "ok", "crash" (raises), "abort" (kills its process, as a native crash in
    llama.cpp does), "timeout", "repetition" or "max_tokens" (a stopped generation, as the vlm_gguf
    engine reports it). It records the hint and image size it was given. `answers` maps a hint to
    the lines written for it (None: that read crashes), for line-by-line reads; other hints get
    `lines`.
    """

    name = "vlm_gguf"

    def __init__(
        self,
        lines: list[str],
        outcome: str = "ok",
        confidence: float = 0.99,
        answers: dict[str, list[str] | None] | None = None,
    ) -> None:
        self.lines = lines
        self.outcome = outcome
        self.confidence = confidence
        self.answers = answers or {}
        self.hints: list[str | None] = []
        self.shapes: list[tuple[int, int]] = []

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "models": {}}

    def read(self, image: np.ndarray, hint: str | None = None, deadline: float | None = None) -> PageText:
        from appliance.engines.vlm_gguf.output import make_line  # the VLM engine's own line builder

        self.hints.append(hint)
        height, width = image.shape[:2]
        self.shapes.append((height, width))
        texts = self.answers.get(hint, self.lines) if hint is not None else self.lines
        if self.outcome == "abort":
            os.abort()
        if self.outcome == "crash" or texts is None:
            raise RuntimeError("llama_decode failed with status -3")
        count = max(len(texts), 1)
        lines = [
            make_line(
                text,
                [self.confidence] * len(text),
                (0.0, i * height / count, float(width), (i + 1) * height / count),
            )
            for i, text in enumerate(texts)
        ]
        stop = "end" if self.outcome == "ok" else self.outcome
        reasons = [] if self.outcome == "ok" else [f"vlm_gguf: stopped ({self.outcome})"]
        return PageText(
            lines=lines,
            timings_ms={"vlm_decode": 1.0},
            details={
                self.name: {"stop_reason": stop, "acceptance_rate": 0.8, "generated_tokens": len(texts)}
            },
            review_reasons=reasons,
        )

    def recognize(self, image: np.ndarray) -> PageText:
        return self.read(image)

    def close(self) -> None:
        pass


def unsure_engine_with_vlm() -> Any:
    """An ONNX stand-in that reads with low confidence, paired with a VLM stand-in that corrects it."""
    from appliance.engines.factory import EnginePair

    return EnginePair(FixedTextEngine("INV0ICE 42", confidence=0.5), FakeVlmReader(["INVOICE 42"]))


def unsure_engine_with_crashing_vlm() -> Any:
    """As above, with a VLM that fails on every page (the ONNX read must stand)."""
    from appliance.engines.factory import EnginePair

    return EnginePair(FixedTextEngine("INV0ICE 42", confidence=0.5), FakeVlmReader([], outcome="crash"))


def unsure_engine_with_aborting_vlm() -> Any:
    """As above, with a VLM that takes its worker process down on every page (SIGABRT)."""
    from appliance.engines.factory import EnginePair

    return EnginePair(FixedTextEngine("INV0ICE 42", confidence=0.5), FakeVlmReader([], outcome="abort"))


class FixedCostEngine(FixedTextEngine):
    """Spends a fixed CPU time on every page (a stand-in reader for throughput measurements)."""

    name = "fake_fixed_cost"

    def __init__(self, text: str, cost_ms: float) -> None:
        super().__init__(text)
        self.cost_ms = cost_ms

    def recognize(self, image: np.ndarray) -> PageText:
        # CPU time, not a sleep: nodes sharing a machine compete for it as real readers do.
        until = time.thread_time() + self.cost_ms / 1000
        while time.thread_time() < until:
            pass
        return super().recognize(image)


class GatedEngine(FixedTextEngine):
    """Reads each page only once a gate file exists (a job held mid-read as long as a test wants)."""

    name = "fake_gated"

    def __init__(self, text: str, gate: str) -> None:
        super().__init__(text)
        self.gate = gate

    def recognize(self, image: np.ndarray) -> PageText:
        while not Path(self.gate).exists():
            time.sleep(0.05)
        return super().recognize(image)


class GatedFaultEngine(FixedTextEngine):
    """White pages wait for one gate file; blue pages wait for another, then abort or hang.

    Holds several jobs in flight in one worker for as long as a test wants, then fails one of
    them the way native code does (SIGABRT, or a call that never returns).
    """

    name = "fake_gated_fault"

    def __init__(
        self, text: str, white_gate: str, blue_gate: str, fault: str, parallel_reads: int = 1
    ) -> None:
        super().__init__(text)
        self.gates = {False: Path(white_gate), True: Path(blue_gate)}
        self.fault = fault
        self.parallel_reads = parallel_reads  # engines.base.parallel_reads: what jobs.per_worker 0 takes

    def recognize(self, image: np.ndarray) -> PageText:
        blue = _is_blue(image)
        while not self.gates[blue].exists():
            time.sleep(0.05)
        if blue and self.fault == "abort":
            os.abort()
        while blue:
            time.sleep(3600)
        return super().recognize(image)
