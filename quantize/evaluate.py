"""How far a quantized model's outputs move from the FP32 model's, per role, on recorded inputs.

- rec: character error rate of the INT8 greedy CTC reading against the FP32 reading (class
  indices, so no dictionary is needed): the share of characters that change.
- cls: share of windows whose 0/180 verdict (p >= 0.5) changes, and the mean |p - p_fp32|.
- det: 1 - IoU of the text masks (probability > 0.3, the engine's threshold).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

DET_THRESHOLD = 0.3


@dataclass(frozen=True)
class Drift:
    """Output drift of one model against FP32 (lower is better) and its run time on the inputs."""

    role: str
    loss: float
    detail: dict[str, float]
    seconds: float


def cpu_session(
    model: Path | str | bytes, threads: int = 1, *, profile_prefix: Path | None = None
) -> ort.InferenceSession:
    """A CPU session on a model file or serialized model; onnxruntime profiles it given a prefix."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])


def _ctc_indices(probs: np.ndarray) -> list[int]:
    best = probs.argmax(axis=-1).tolist()
    out: list[int] = []
    previous = -1
    for index in best:
        if index not in (0, previous):
            out.append(index)
        previous = index
    return out


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance of two sequences (two-row dynamic programme)."""
    previous = list(range(len(b) + 1))
    for i, item in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, other in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (item != other))
        previous = current
    return previous[-1]


def run_all(session: ort.InferenceSession, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
    name = session.get_inputs()[0].name
    outputs = []
    started = time.perf_counter()
    for tensor in inputs:
        outputs.append(session.run(None, {name: tensor})[0])
    return outputs, time.perf_counter() - started


def drift(role: str, reference: list[np.ndarray], candidate: list[np.ndarray], seconds: float) -> Drift:
    """Compare a candidate's outputs with the FP32 reference outputs of the same inputs."""
    if role == "rec":
        errors = chars = 0
        for ref_batch, cand_batch in zip(reference, candidate, strict=True):
            for ref, cand in zip(ref_batch, cand_batch, strict=True):
                truth = _ctc_indices(ref)
                errors += edit_distance(truth, _ctc_indices(cand))
                chars += max(len(truth), 1)
        cer = errors / max(chars, 1)
        return Drift(role, cer, {"cer_vs_fp32": cer, "chars": float(chars)}, seconds)
    if role == "cls":
        ref_p = np.concatenate([batch[:, 1] for batch in reference])
        cand_p = np.concatenate([batch[:, 1] for batch in candidate])
        flips = float(np.mean((ref_p >= 0.5) != (cand_p >= 0.5)))
        mean_abs = float(np.mean(np.abs(ref_p - cand_p)))
        return Drift(role, flips + mean_abs, {"verdict_flips": flips, "mean_abs_p": mean_abs}, seconds)
    inter = union = 0
    for ref, cand in zip(reference, candidate, strict=True):
        ref_mask, cand_mask = ref > DET_THRESHOLD, cand > DET_THRESHOLD
        inter += int(np.logical_and(ref_mask, cand_mask).sum())
        union += int(np.logical_or(ref_mask, cand_mask).sum())
    miou = 1.0 - inter / max(union, 1)
    return Drift(role, miou, {"mask_1_minus_iou": miou}, seconds)
