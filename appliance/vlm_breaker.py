"""Decides whether a document's attempt may call the VLM, from the worker crashes that followed it.

The VLM runs native code (llama.cpp, CUDA) in the worker process: a crash there takes the whole
worker, and with it the ONNX read of the document. So an attempt that lost its worker while it
could call the VLM is followed by one without it, and after `limit` such losses in a row the VLM
is left out of every attempt until the daemon restarts: the pages keep their ONNX reads, each one
saying why, and the service goes on at the ONNX engine's speed instead of losing a worker a file.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class VlmBreaker:
    """Per job: may this attempt call the VLM? Counts worker losses of attempts that could."""

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.disabled: str | None = None  # why the VLM is out of every attempt, once it is
        self._suspects: dict[str, str] = {}  # job id -> why its next attempt goes without the VLM
        self._with_vlm: set[str] = set()  # jobs running now that may call the VLM
        self._lost_in_a_row = 0

    def skip_reason(self, job_id: str) -> str | None:
        """Why this attempt goes without the VLM; None: it may call it (and is counted as such)."""
        suspect = self._suspects.pop(job_id, None)
        if self.disabled is not None:
            return self.disabled
        if suspect is not None:
            return suspect
        self._with_vlm.add(job_id)
        return None

    def worker_lost(self, job_id: str, reason: str, *, requeued: bool) -> None:
        """The job's worker died or hung; `requeued`: the job will be tried again."""
        if job_id in self._with_vlm:
            self._with_vlm.discard(job_id)
            self._lost_in_a_row += 1
            if self._lost_in_a_row >= self.limit and self.disabled is None:
                self.disabled = (
                    f"VLM disabled until restart: {self._lost_in_a_row} documents in a row lost their"
                    f" worker while they could call it (last: {reason})"
                )
                log.error("%s", self.disabled)
        if requeued:
            self._suspects[job_id] = f"the previous attempt lost its worker: {reason}"

    def finished(self, job_id: str) -> None:
        """The job's attempt came back (read, failed or interrupted): its worker survived it."""
        if job_id in self._with_vlm:
            self._with_vlm.discard(job_id)
            self._lost_in_a_row = 0
