"""Typed configuration loaded from YAML; every error names the key path that is wrong."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from appliance.errors import ConfigError

OutputFormat = Literal["json", "text", "markdown", "hocr", "alto", "pdf"]


class _Strict(BaseModel):
    # extra="forbid": a misspelt key is an error, not silently ignored (a site that writes
    # `pdf_dip: 400` must hear about it). Numbers and booleans use Strict* types below so that
    # "300" or "yes" in quotes is an error too; paths stay lax because YAML gives them as str.
    model_config = ConfigDict(extra="forbid", frozen=True)


def _quoted_switch(value: object) -> object:
    # YAML 1.1 reads a bare on/off as true/false; say what to write instead of listing the literals.
    if isinstance(value, bool):
        word = "on" if value else "off"
        raise ValueError(f'write "{word}" in quotes: YAML reads a bare {word} as {str(value).lower()}')
    return value


# A setting that is on, off, or decided by the appliance; in YAML "on" and "off" go in quotes.
Switch = Annotated[Literal["auto", "on", "off"], BeforeValidator(_quoted_switch)]

Precision = Literal["fp32", "fp16", "int8"]


class PrecisionConfig(_Strict):
    """Which variant of each model the engine loads: the FP32 originals or a derived set."""

    det: Precision = "fp32"
    cls: Precision = "fp32"
    rec: Precision = "fp32"


ModelSet = Literal["ppocrv6_small", "ppocrv5_mobile"]

# The engine sections that configure a second reader, in the order `reader: null` looks for one.
SECOND_READERS = ("vlm_gguf", "onnx_reader")


class OnnxReaderConfig(_Strict):
    """An ONNX recogniser as the cascade's second reader: it reads again the line crops a profile sends it.

    Two recognisers trained apart err on different lines; a fast one reads every line and this
    one only the lines below the profile's `cascade.min_confidence` (profiles.NAME.cascade with
    `unit: lines`), so it costs time only where the first read is unsure.
    """

    models: ModelSet = "ppocrv6_small"  # the built-in set whose recogniser (and dictionary) reads again
    provider: Literal["auto", "cpu", "cuda"] = "auto"
    intra_op_threads: StrictInt = Field(default=0, ge=0)  # 0: onnxruntime's own choice (every core)
    # Narrower lines are padded to this width, as engine.ppocr_onnx.rec_min_width.
    rec_min_width: StrictInt = Field(default=320, ge=16, le=1024)
    fold_affine: StrictBool = True  # as engine.ppocr_onnx.fold_affine
    space_gap: StrictFloat = Field(default=0.8, ge=0, le=5)  # as engine.ppocr_onnx.space_gap


# cuBLAS's workspace setting that CUDA sessions get unless the site sets its own (the engine's
# sessions.create_session applies it; PpocrOnnxConfig.cublas_workspace_config says why).
DEFAULT_CUBLAS_WORKSPACE = ":4096:8"


class PpocrOnnxConfig(_Strict):
    """Settings of the PP-OCRv5 ONNX engine."""

    # A named bundle of the keys below (engines/ppocr_onnx/presets.py): accurate, fast, auto (accurate
    # with a usable CUDA provider or two cores, fast on one) or custom (none); keys set here win.
    preset: Literal["auto", "accurate", "fast", "custom"] = "auto"
    # The built-in model set (appliance/engines/manifests/NAME.json); `manifest` replaces it.
    models: ModelSet = "ppocrv6_small"
    model_dir: Path | None = None
    manifest: Path | None = None
    provider: Literal["auto", "cpu", "cuda"] = "auto"
    precision: PrecisionConfig = PrecisionConfig()
    variant_dir: Path | None = None  # DIR/int8, DIR/fp16 from quantize.onnx_int8 (none shipped)
    intra_op_threads: StrictInt = Field(default=0, ge=0)
    inter_op_threads: StrictInt = Field(default=1, ge=0)
    # Busy-waiting worker threads cost a recognition batch 316 instead of 221 ms on 2 cores.
    allow_spinning: StrictBool = False
    graph_optimization: Literal["basic", "extended", "all"] = "all"
    # Fold Paddle's scalar Mul/Add pairs into the convolutions of the FP32 models at load: the same
    # output (float rounding) with recognition about 1.3x and detection 1.15x faster on the CPU.
    fold_affine: StrictBool = True
    det_limit_side_len: StrictInt = Field(default=1280, ge=320, le=4096)
    det_threshold: StrictFloat = Field(default=0.3, gt=0, lt=1)
    det_box_threshold: StrictFloat = Field(default=0.6, gt=0, lt=1)
    det_unclip_ratio: StrictFloat = Field(default=1.5, gt=0, le=4)
    # One line per run: each line is padded only to its own width (or rec_min_width). Batches
    # pad every line to the widest of the batch, which costs time and, since the recogniser's
    # attention sees the padding, accuracy: against batches of 8, recognition took 1.2x less time
    # on 12 receipts (same CER) and 1.6x less on 5 docs_zh pages (CER 1.84% -> 1.52%).
    rec_batch_size: StrictInt = Field(default=1, ge=1, le=64)
    # Narrower lines are padded to this width (PP-OCRv5's training width): less padding is less
    # work, but the recogniser's attention sees the padding, so it changes some reads.
    rec_min_width: StrictInt = Field(default=320, ge=16, le=1024)
    # Lines (recognition runs, orientation batches) run at once, each on one thread of its own;
    # 0: intra_op_threads, or the cores this process may use when that is 0 too; 1: one at a time,
    # each run spread over intra_op_threads. A line is too small to keep two cores busy inside
    # one operator: on 2 cores the median receipt's recognition took 529 ms this way against 699 ms
    # with two threads inside each run, same reads (bench/README.md, "Run 3").
    line_parallelism: StrictInt = Field(default=0, ge=0, le=64)
    # Fixed input shapes (engines/ppocr_onnx/shapes.py): pages padded to a few detector sizes, line
    # batches to a few widths and fixed_batch_size rows, one session per shape, each warmed at load.
    # The CUDA provider sets its convolutions up again whenever a session's input shape changes
    # (1.3-2.0 s for PP-OCRv6's recogniser); the CPU does not, and wider padding changes some
    # reads. auto: on with the CUDA provider, off on the CPU.
    fixed_shapes: Switch = "auto"
    # Rows of every line batch and orientation batch under fixed shapes. On an H200 16 rows at the
    # widest bucket (3200 px) asked one attention buffer of 274 MiB and ran out of a 1 GiB arena.
    fixed_batch_size: StrictInt = Field(default=8, ge=1, le=64)
    # Line widths (px at height 48) of the fixed line batches, one session each, over rec_min_width;
    # null: shapes.py's 640, 1280, 3200. More widths are less padding (docs_zh 0.84% CER with eight
    # against 0.93%) and more sessions, each about 210 MiB of the card (bench/README.md).
    fixed_line_widths: tuple[StrictInt, ...] | None = Field(default=None, min_length=1)
    # The detector's page sizes under fixed shapes: the short side as shares of det_limit_side_len,
    # each a size both ways (a session each), with the square always; null: shapes.py's 0.5, 0.75, 1.0
    # (five sessions). Fewer shares are fewer sessions, each about 150 MiB of the card on CUDA, and
    # more padding for the pages between them (not yet measured on a GPU).
    fixed_detector_shares: tuple[Annotated[float, Field(gt=0, le=1)], ...] | None = Field(
        default=None, min_length=1
    )
    # Under fixed shapes, `per_shape`: a session for each detector bucket and line width; `one`: a
    # model's shapes share one session, its graph copied once per shape behind If nodes
    # (engines/ppocr_onnx/shape_branches.py). On an H200 `one` took the session server from 4,243
    # to 3,967 MiB at 8 workers but read 13% fewer pages a second, and one process reading alone
    # peaked higher (4,675 against 3,925 MiB): bench/README.md, "The daemon itself, and where the
    # card's memory goes".
    shape_sessions: Literal["one", "per_shape"] = "per_shape"
    # Cap of the CUDA memory arena in MiB: with gpu_arena `shared` the process's one arena, which
    # every session draws on; with `per_session` each session's own (one per fixed shape and role).
    gpu_mem_limit_mb: StrictInt = Field(default=2048, ge=64)
    gpu_arena: Literal["shared", "per_session"] = "shared"
    # The unix socket of a session server (engines/ppocr_onnx/session_server.py) to open the models
    # in instead of in this process: the worker processes then share its one set of sessions, CUDA
    # context and arena. The daemon sets it when jobs.session_server is on; null: sessions here.
    session_server: Path | None = None
    # How cuDNN picks a convolution's algorithm on the CUDA provider (paid once per fixed shape).
    cudnn_conv_algo_search: Literal["HEURISTIC", "EXHAUSTIVE", "DEFAULT"] = "HEURISTIC"
    # cuBLAS's workspace buffers (its CUBLAS_WORKSPACE_CONFIG, `:KiB:COUNT` pairs), set in the
    # process that opens CUDA sessions unless its environment already sets the variable. Every
    # CUDA session has its own cuBLAS handles: on an H200 `:4096:8` kept 64 MiB less of the card
    # per session than cuBLAS's default, at the same pages a second and with the same text (the
    # daemon at 8 workers 3,177 MiB against 4,141: bench/README.md, "cuBLAS's workspace, fewer
    # sessions, every profile"). null: cuBLAS's default.
    cublas_workspace_config: str | None = Field(
        default=DEFAULT_CUBLAS_WORKSPACE, pattern=r"^(:[0-9]+:[0-9]+)+$"
    )
    # The characters recognition may write: null for the model's whole dictionary, "latin" (ASCII,
    # Latin-1 and common typographic signs) or a UTF-8 file listing them. The other classes are
    # cut from the recogniser's head at load (engines/ppocr_onnx/charset.py).
    charset: str | None = None
    use_line_orientation: StrictBool = True
    orientation_flip_threshold: StrictFloat = Field(default=0.9, ge=0.5, le=1)
    min_line_confidence: StrictFloat = Field(default=0.5, ge=0, le=1)
    # A line's box (reading order, word boxes, the PDF text layer) is its detected quad narrowed
    # to this share of its thickness: the quad is grown past the glyphs for the recogniser's crop.
    line_box_share: StrictFloat = Field(default=0.8, gt=0, le=1)
    # A space the recogniser left out is put back where the crop shows a blank run of at least this
    # many character pitches between two Latin-script glyphs (engines/ppocr_onnx/spacing.py); 0: off.
    space_gap: StrictFloat = Field(default=0.8, ge=0, le=5)
    # A colon printed alone between a label and its value (too small for the detector) is found by
    # its two dots and written after the label (engines/ppocr_onnx/lone_colons.py).
    lone_colons: StrictBool = True
    # A list bullet at the start of a line, which recognisers skip, is found by its shape and
    # written as `•` (engines/ppocr_onnx/bullets.py).
    list_bullets: StrictBool = True

    @model_validator(mode="before")
    @classmethod
    def _second_reader_moved(cls, raw: object) -> object:
        # The second recogniser became a second reader of the cascade, beside the VLM: one role.
        # An explicit null (no second reader) still means what it meant and is dropped.
        if isinstance(raw, dict) and "second_reader" in raw:
            if raw["second_reader"] is None:
                return {key: value for key, value in raw.items() if key != "second_reader"}
            raise ValueError(
                "second_reader was replaced: set engine.onnx_reader.models to the second recogniser's "
                "set and, in each profile that should use it, cascade: {mode: below_threshold, unit: "
                "lines, min_confidence: <its old min_confidence>, reader: onnx_reader, keep: more_confident}"
            )
        return raw


VlmFamily = Literal[
    "paddleocr_vl", "lightonocr", "hunyuan_ocr", "granite_docling", "qwen2vl", "qwen2vl_line", "smolvlm"
]


class VlmDraftConfig(_Strict):
    """Speculative decoding: where drafted tokens come from and when drafting stops for a page."""

    # ocr_hint: the text the ONNX engine read on the page; model: the manifest's draft GGUF.
    source: Literal["ocr_hint", "model", "none"] = "ocr_hint"
    k: StrictInt = Field(default=4, ge=1, le=64)  # tokens drafted per step at the start of a page
    k_max: StrictInt = Field(default=16, ge=1, le=64)
    min_acceptance: StrictFloat = Field(default=0.3, ge=0, le=1)
    min_drafted: StrictInt = Field(default=32, ge=1)
    # What each token past the first adds to a verification pass, relative to one token (an H200:
    # ~0.15 up to 8 tokens; a 2-core CPU: ~0.2-0.55). None: measured as pages are written.
    extra_token_cost: StrictFloat | None = Field(default=None, ge=0)


class VlmRepetitionConfig(_Strict):
    """When a generation counts as a loop: the tail repeats one stretch of tokens back to back."""

    max_period: StrictInt = Field(default=64, ge=1, le=512)
    min_repeats: StrictInt = Field(default=4, ge=2)
    min_span: StrictInt = Field(default=96, ge=8)


class VlmGgufConfig(_Strict):
    """A GGUF OCR vision-language model (text model + mmproj [+ draft]) on llama.cpp."""

    model_dir: Path = Path("/var/lib/ocr-appliance/models/vlm")
    manifest: str = "manifest.json"  # in model_dir; written by `python -m quantize.gguf manifest`
    family: Literal["auto"] | VlmFamily = "auto"  # auto: the family the manifest names
    device: Literal["auto", "cpu", "gpu"] = "auto"  # gpu: fail unless llama.cpp can offload
    # The card's memory the VLM may use, shared equally by the jobs.workers processes (each loads it),
    # or by the session server's jobs.served_vlm_copies where it holds the line reader for them.
    vram_budget_mb: StrictInt = Field(default=8192, ge=512)
    n_ctx: StrictInt = Field(default=0, ge=0)  # 0: what one page needs (image + prompt + output)
    n_batch: StrictInt = Field(default=512, ge=32)
    kv_cache_type: Literal["auto", "f16", "q8_0"] = "auto"  # auto: f16, q8_0 when f16 does not fit
    flash_attention: StrictBool = True
    # llama.cpp's threads; 0: the cores shared equally among the copies that read at once (the
    # jobs.workers processes, or the session server's jobs.served_vlm_copies), at least one each.
    threads: StrictInt = Field(default=0, ge=0)
    image_max_tokens: StrictInt = Field(default=0, ge=0)  # 0: the family's default
    image_max_side: StrictInt = Field(default=1540, ge=0)  # pages are scaled down to this long side
    max_tokens_per_page: StrictInt = Field(default=0, ge=0)  # 0: the family's default
    timeout_seconds_per_page: StrictFloat = Field(default=300.0, ge=0)
    verify_hashes: StrictBool = True  # sha256 of every file at load (a few seconds per GB)
    # The text before the image (system turn, instruction) is the same for every page and line:
    # its keys and values are kept in the cache and not computed again (runtime.Context.keep_head).
    reuse_prompt_head: StrictBool = True
    # A line reader (qwen2vl_line) decodes this many of a page's unsure lines side by side, one pass
    # writing a token of each and checking each line's drafts (draft.source ocr_hint: its ONNX
    # text); 1: one at a time. 8 (without drafts) decoded receipt lines 1.65x faster than one by
    # one on the CPU (16: 1.77x, bench/README "Lines side by side") and keep a 17M line reader's
    # cache within the 4,096 tokens it was trained on.
    lines_together: StrictInt = Field(default=8, ge=1, le=64)
    # The unix socket of a session server that holds this line reader for every worker
    # (engines/served_readers.py): the workers send it their lines instead of each loading the model
    # with a CUDA context of its own. The daemon sets it when jobs.serve_vlm is on; null: loaded here.
    session_server: Path | None = None
    draft: VlmDraftConfig = VlmDraftConfig()
    repetition: VlmRepetitionConfig = VlmRepetitionConfig()


class EngineConfig(_Strict):
    """Which engine reads pages, and the settings of each."""

    name: Literal["ppocr_onnx"] = "ppocr_onnx"
    ppocr_onnx: PpocrOnnxConfig = PpocrOnnxConfig()
    # The second readers a profile's cascade may use (profiles.NAME.cascade.reader); None: not loaded.
    vlm_gguf: VlmGgufConfig | None = None  # a VLM; None: no VLM installed
    onnx_reader: OnnxReaderConfig | None = None  # a second ONNX recogniser, for `unit: lines`

    def second_readers(self) -> tuple[str, ...]:
        """The second readers this config loads, by section name."""
        return tuple(name for name in SECOND_READERS if getattr(self, name) is not None)


class RasterizeConfig(_Strict):
    """How input files become page images, and the limits that stop hostile files."""

    pdf_dpi: StrictInt = Field(default=300, ge=72, le=1200)
    max_file_mb: StrictFloat = Field(default=256, gt=0)
    max_pages: StrictInt = Field(default=1000, ge=1)
    max_page_megapixels: StrictFloat = Field(default=80, gt=0)
    # A JPEG page larger than this is decoded at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling,
    # several times faster than a full decode), the smallest that keeps at least this many
    # megapixels. 8 keeps an A4 page at 300 dpi or more (8.7 Mpx): the recogniser scales every
    # line to 48 pixels high, so a 600-dpi scan only costs time. 0 decodes every JPEG whole.
    jpeg_draft_megapixels: StrictFloat = Field(default=8, ge=0)


class HotFolderConfig(_Strict):
    """One watched folder, the profile its documents are read with, and where everything goes."""

    path: Path
    output_dir: Path
    archive_dir: Path
    failed_dir: Path
    review_dir: Path | None = None  # None: "review" beside output_dir
    audit_dir: Path | None = None  # None: "audit" beside output_dir
    profile: str = "default"
    watch: Literal["auto", "inotify", "poll"] = "auto"
    ignore: tuple[str, ...] = ()


class IntakeConfig(_Strict):
    """How files are noticed and when they count as complete."""

    settle_seconds: StrictFloat = Field(default=2.0, ge=0)
    incomplete_timeout_seconds: StrictFloat = Field(default=600.0, gt=0)
    rescan_seconds: StrictFloat = Field(default=300.0, gt=0)
    poll_seconds: StrictFloat = Field(default=5.0, gt=0)
    min_free_mb: StrictFloat = Field(default=500.0, ge=0)
    reprocess_duplicates: StrictBool = False
    originals: Literal["archive", "delete"] = "archive"


class JobsConfig(_Strict):
    """Worker processes, timeouts, retries and how long finished jobs are remembered."""

    workers: StrictInt = Field(default=1, ge=1, le=64)
    # Jobs one worker reads at once, each on its own thread sharing the worker's engine (and its
    # CUDA context and memory arena); 0: as many as the engine reads well (2 on CUDA with its own
    # sessions, 1 through a session server or on the CPU).
    per_worker: StrictInt = Field(default=0, ge=0, le=16)
    # One process that holds the ONNX engine's models for every worker (engines/shared_sessions.py):
    # one copy of the models and, on a GPU, one CUDA context and arena instead of one a worker
    # (about 4 GB each with the defaults, bench/README.md), so several workers fit a consumer card.
    # auto: on with more than one worker when the models would run on CUDA; on: always with the
    # ONNX engine; off: each worker its own. On an H200 with 16 cores, 4 workers through it read
    # 19.4 pages/s and 6 read 21.4, the card at 4.2 GB, against 6.4 for one worker (bench/README.md,
    # "Worker processes through one session server").
    session_server: Switch = "auto"
    # The server's threads that run the models: the GPU memory of this many runs in flight (and
    # each thread's cuDNN and cuBLAS handles), however many workers send them.
    session_server_runners: StrictInt = Field(default=1, ge=1, le=8)
    # The VLM (the cascade's second reader) held once in the session server for every worker,
    # instead of once in each (about 800 MiB of the card a worker for the line reader on an H100,
    # most of it the worker's own CUDA context). auto: whenever the session server runs and
    # engine.vlm_gguf.device is not cpu; on: whenever the session server runs; off: each worker
    # loads its own.
    serve_vlm: Switch = "auto"
    # Copies of the served VLM, each with its own llama.cpp context reading one group of a page's
    # lines (engine.vlm_gguf.lines_together) at a time, sharing engine.vlm_gguf.vram_budget_mb and
    # the cores equally as that many workers would. One by default: more read at once on threads of
    # one process, which llama.cpp's CUDA backend has been reported to fail at (CUDA errors with
    # contexts decoding on several threads: ggml-org/llama.cpp issues 3960 and 11804); not yet
    # measured on a GPU here. On the CPU two copies read as one copy in each worker does.
    served_vlm_copies: StrictInt = Field(default=1, ge=1, le=16)
    timeout_seconds: StrictFloat = Field(default=600.0, gt=0)
    max_attempts: StrictInt = Field(default=3, ge=1)
    retry_backoff_seconds: StrictFloat = Field(default=30.0, ge=0)
    retention_days: StrictFloat = Field(default=30.0, gt=0)


class OutputsConfig(_Strict):
    """Which result files are written per document, and with which permissions."""

    formats: tuple[OutputFormat, ...] = ("json", "text")
    mode: str = Field(default="0644", pattern=r"^0?[0-7]{3}$")
    group: str | None = None


class PreprocessConfig(_Strict):
    """Page preprocessing before the engine: each step on or off, with its thresholds.

    Defaults by measurement (bench/preprocess_bench.py on all 63 receipts and 25 docs_zh pages,
    tables in bench/README.md): orientation brings every page turned 90/180/270 back to its upright
    CER (receipts 4.24%, docs_zh 1.48%) and leaves upright pages as they were; seals change nothing
    on pages without red. Off because they made upright CER worse or did not clearly help: deskew
    (receipts 4.29%; the detector reads lines skewed 3-7 degrees within 0.52 points anyway),
    border crop (4.19%, docs_zh unchanged; black edges already cost only 0.01 points without it),
    denoise (5.75%, docs_zh 1.72%), contrast (5.11%), binarize (5.81%, 2.09%), resize to 1600 (4.50%).
    """

    orientation: StrictBool = True  # quarter turns from the ink, then 90/180/270 from the engine's first read
    # A page where less of the detected text than this reads confidently upright is read again
    # turned 180 (upright receipts 32-97%, upside down 0-4%); sideways pages are read turned a quarter.
    min_upright_share: StrictFloat = Field(default=0.25, gt=0, le=1)
    deskew: StrictBool = False
    deskew_max_angle: StrictFloat = Field(default=15.0, gt=0, le=45)
    deskew_min_angle: StrictFloat = Field(default=0.5, ge=0, le=45)
    border_crop: StrictBool = False
    seals: StrictBool = True
    seal_min_saturation: StrictInt = Field(default=80, ge=0, le=255)
    seal_min_size: StrictFloat = Field(default=0.05, gt=0, le=1)  # of the page's short side
    denoise: StrictBool = False
    denoise_kernel: StrictInt = Field(default=3, ge=3, le=9)
    contrast: StrictBool = False
    contrast_low_percentile: StrictFloat = Field(default=1.0, ge=0, lt=50)
    contrast_high_percentile: StrictFloat = Field(default=99.0, gt=50, le=100)
    binarize: StrictBool = False
    binarize_block: StrictInt = Field(default=31, ge=3, le=255)
    binarize_offset: StrictFloat = Field(default=10.0, ge=0, le=100)
    resize_long_side: StrictInt = Field(default=0, ge=0, le=8192)  # 0: keep the page's size


class RoutingConfig(_Strict):
    """When a document goes straight through, is sampled for audit, or goes to review."""

    min_confidence: StrictFloat = Field(default=0.85, ge=0, le=1)
    low_char_confidence: StrictFloat = Field(default=0.5, ge=0, le=1)
    max_low_char_share: StrictFloat = Field(default=0.05, ge=0, le=1)
    review_failed_checks: StrictBool = True  # a field whose checksum or cross-check failed
    review_unsure_fields: StrictBool = False  # a field below repair.review_threshold
    review_missing_fields: StrictBool = False  # True for profiles whose documents must carry them
    review_empty: StrictBool = True
    audit_rate: StrictFloat = Field(default=0.05, ge=0, le=1)


class CascadeConfig(_Strict):
    """Which pages or lines a second reader reads again after the first engine, and what it may cost."""

    # off: ONNX only; below_threshold: pages whose mean character confidence is below
    # min_confidence; always: every page. The ONNX text is the VLM's draft in every case.
    mode: Literal["off", "below_threshold", "always"] = "off"
    # page: the VLM reads the whole page again; lines: it reads only the crops of the lines below
    # min_confidence (every line with `always`), each with its ONNX text as the draft, and the
    # rest of the page keeps its ONNX read: far fewer image tokens when few lines are unsure.
    unit: Literal["page", "lines"] = "page"
    min_confidence: StrictFloat = Field(default=0.9, ge=0, le=1)
    timeout_seconds: StrictFloat = Field(default=120.0, gt=0)  # then the ONNX read stands
    # The second reader (an engine section: vlm_gguf, onnx_reader); None: the one the engine has.
    reader: Literal["vlm_gguf", "onnx_reader"] | None = None
    # second: a line read again takes the second read; more_confident: it keeps whichever read is
    # surer; joint: the second read where it is the surer and the two readers together find it
    # likelier (log P under each, summed: the VLM scores the ONNX text, the ONNX recogniser's kept
    # step probabilities the VLM's), more_confident where either keeps no scores (a branched ONNX
    # session); auto: the reader's own rule (its `auto_keep`: second for onnx_reader, joint for the
    # VLM), else the surer read. As measured on the receipts (bench/README.md): a second
    # recogniser reads best with second, train/'s line reader with joint.
    keep: Literal["auto", "second", "more_confident", "joint"] = "auto"
    # A line read again keeps its first read when the second changes more than this many characters
    # (spaces and case aside): a correction, not a rewrite. None: no limit; auto: the reader's own
    # (its `auto_max_changes`: none for onnx_reader), else 3, as measured for a VLM (bench/README.md).
    max_changes: Literal["auto"] | Annotated[StrictInt, Field(ge=0)] | None = "auto"


class ProfileConfig(_Strict):
    """How documents of one kind are handled: priority, formats, preprocessing and routing."""

    priority: StrictInt = 0
    formats: tuple[OutputFormat, ...] | None = None  # None: outputs.formats
    preprocess: PreprocessConfig = PreprocessConfig()
    routing: RoutingConfig = RoutingConfig()
    cascade: CascadeConfig = CascadeConfig()
    # Overrides of repair.field_profile and repair.receipt_min_score for this profile's folders
    # (None: the global ones): a folder that only receives receipts may take fields always (0).
    field_profile: Literal["receipt", "none"] | None = None
    receipt_min_score: StrictFloat | None = Field(default=None, ge=0, le=1)


class ServiceConfig(_Strict):
    """Behaviour under systemd: watchdog and status reporting."""

    watchdog_stall_seconds: StrictFloat = Field(default=300.0, gt=0)
    status_interval_seconds: StrictFloat = Field(default=5.0, gt=0)


class PathsConfig(_Strict):
    """Where the appliance keeps its own state: the journal and the spool of claimed files."""

    state_dir: Path = Path("/var/lib/ocr-appliance")
    # The spool of claimed files (None: state_dir/spool). Appliances that share one PostgreSQL
    # journal must share it too, on the mount their hot folders are on, so any node can read and
    # finish any job.
    spool_dir: Path | None = None

    def spool(self) -> Path:
        return self.spool_dir or self.state_dir / "spool"


class JournalConfig(_Strict):
    """Where jobs are recorded: an SQLite file for one box, or PostgreSQL shared by several appliances."""

    backend: Literal["sqlite", "postgresql"] = "sqlite"
    # A libpq connection string for postgresql, e.g. "host=/run/postgresql dbname=ocr user=ocr"
    # (a unix socket) or "host=10.0.0.5 port=5432 dbname=ocr user=ocr sslmode=verify-full". A
    # password belongs in the service's PGPASSFILE, never in this file.
    dsn: str | None = None
    # How this appliance is named in the cluster's status (None: the host name).
    node_name: str | None = Field(default=None, min_length=1, max_length=100)
    # A running job is this node's while it renews the job's lease (every third of this); once a
    # lease has run out (the node was killed, powered off or cut off) another node reads the job.
    lease_seconds: StrictFloat = Field(default=30.0, ge=3.0, le=3600.0)
    pool_size: StrictInt = Field(default=4, ge=2, le=64)
    # A claim record in the shared spool that no job names (its node died between the move and
    # the journal) is queued by any node once it is this old: longer than any claim takes
    # (hashing the largest file allowed over a slow share), so a claim in progress is left alone.
    orphan_grace_seconds: StrictFloat = Field(default=120.0, ge=10.0)

    @model_validator(mode="after")
    def _postgresql_needs_dsn(self) -> JournalConfig:
        if self.backend == "postgresql" and not self.dsn:
            raise ValueError("journal.dsn is required with journal.backend: postgresql")
        return self


class LoggingConfig(_Strict):
    """Log verbosity."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class RepairConfig(_Strict):
    """Rule-based repair of what was read, the fields extracted, and when a field needs review."""

    locale: str = Field(default="en-MY", pattern=r"^[a-zA-Z]{2,3}([-_][a-zA-Z0-9]{2,8})*$")
    field_profile: Literal["receipt", "none"] = "receipt"
    # A page set gets receipt fields only when its content scores this high as a receipt
    # (appliance/fields/classify.py: money words, amounts at line ends, short lines, a date);
    # 0 extracts them from every document, as a folder that only ever receives receipts may want.
    receipt_min_score: StrictFloat = Field(default=0.5, ge=0, le=1)
    review_threshold: StrictFloat = Field(default=0.8, ge=0, le=1)
    # "min": one unsure character makes an unsure field, whatever the field's length. "product"
    # calibrated a little better on SROIE (bench/fields_bench.py: ECE 0.13 vs 0.18) but falls with
    # length, so every address looked unsure and every receipt went to review.
    confidence_aggregate: Literal["min", "mean", "geomean", "product"] = "min"


class ApiConfig(_Strict):
    """The local control API: a unix socket, and optionally TLS on loopback TCP (off by default)."""

    class Tcp(_Strict):
        """Loopback TCP with TLS, for a local tool that cannot use a unix socket."""

        host: str = "127.0.0.1"
        port: StrictInt = Field(ge=0, le=65535)  # 0: a free port (tests)
        cert: Path
        key: Path

        @field_validator("host")
        @classmethod
        def _loopback_only(cls, value: str) -> str:
            # The appliance never listens on the network: TCP is for local tools only.
            if value != "localhost":
                try:
                    loopback = ipaddress.ip_address(value).is_loopback
                except ValueError:
                    loopback = False
                if not loopback:
                    raise ValueError(f"{value!r} is not a loopback address (127.0.0.1, ::1 or localhost)")
            return value

    socket: Path = Path("/run/ocr-appliance/api.sock")
    group: str | None = None  # None: the daemon's own group
    mode: str = Field(default="0660", pattern=r"^0?[0-7]{3}$")
    max_message_bytes: StrictInt = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    tcp: Tcp | None = None


class AppConfig(_Strict):
    """The whole configuration file."""

    version: Literal[1] = 1
    paths: PathsConfig = PathsConfig()
    hot_folders: tuple[HotFolderConfig, ...] = ()
    profiles: dict[str, ProfileConfig] = Field(default_factory=lambda: {"default": ProfileConfig()})
    engine: EngineConfig = EngineConfig()
    rasterize: RasterizeConfig = RasterizeConfig()
    outputs: OutputsConfig = OutputsConfig()
    intake: IntakeConfig = IntakeConfig()
    jobs: JobsConfig = JobsConfig()
    service: ServiceConfig = ServiceConfig()
    repair: RepairConfig = RepairConfig()
    logging: LoggingConfig = LoggingConfig()
    api: ApiConfig = ApiConfig()
    journal: JournalConfig = JournalConfig()

    @model_validator(mode="after")
    def _shared_journal_shares_the_spool(self) -> AppConfig:
        if self.journal.backend == "postgresql" and self.paths.spool_dir is None:
            raise ValueError(
                "paths.spool_dir must be set with journal.backend: postgresql (a folder every node "
                "shares, on the hot folders' mount): any node must be able to read any claimed file"
            )
        return self

    @model_validator(mode="after")
    def _folders_name_known_profiles(self) -> AppConfig:
        if "default" not in self.profiles:
            self.profiles["default"] = ProfileConfig()
        for index, folder in enumerate(self.hot_folders):
            if folder.profile not in self.profiles:
                known = ", ".join(sorted(self.profiles))
                raise ValueError(
                    f"hot_folders[{index}].profile {folder.profile!r} is not a profile ({known})"
                )
        for name, profile in self.profiles.items():
            cascade = profile.cascade
            if cascade.mode == "off":
                continue
            loaded = self.engine.second_readers()
            key = f"profiles.{name}.cascade"
            if cascade.reader is not None and cascade.reader not in loaded:
                raise ValueError(f"{key}.reader is {cascade.reader!r} but engine.{cascade.reader} is not set")
            if cascade.reader is None and not loaded:
                raise ValueError(
                    f"{key}.mode is {cascade.mode!r} but no second reader is set "
                    "(engine.vlm_gguf or engine.onnx_reader)"
                )
            if cascade.reader is None and len(loaded) > 1:
                raise ValueError(f"{key}.reader must name one of {', '.join(loaded)}: the engine has both")
            if (cascade.reader or loaded[0]) == "onnx_reader" and cascade.unit != "lines":
                raise ValueError(f"{key}.unit must be 'lines' with the onnx_reader: it reads line crops")
        return self

    def profile(self, name: str) -> ProfileConfig:
        """The named profile, or the default one for a name this configuration no longer has."""
        return self.profiles.get(name, self.profiles["default"])

    def repair_for(self, profile: str) -> RepairConfig:
        """The repair settings of a profile: the global ones with its field overrides."""
        chosen = self.profile(profile)
        changes = {
            key: value
            for key, value in (
                ("field_profile", chosen.field_profile),
                ("receipt_min_score", chosen.receipt_min_score),
            )
            if value is not None
        }
        return self.repair.model_copy(update=changes) if changes else self.repair

    def formats_for(self, profile: str) -> tuple[OutputFormat, ...]:
        """Result formats of a profile (its own, or the global ones)."""
        return self.profiles[profile].formats or self.outputs.formats


def _format_validation_error(source: str, error: ValidationError) -> str:
    lines = [f"{source}: {error.error_count()} invalid setting(s)"]
    for item in error.errors():
        path = ""
        for part in item["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        path = path or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key (check its spelling and its place in the file)"
        elif item["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


def _resolve_paths(raw: dict[str, object], base: Path) -> dict[str, object]:
    """Make relative folder paths relative to the config file, so a unit can run from anywhere."""
    folders = raw.get("hot_folders")
    if isinstance(folders, list):
        for folder in folders:
            if isinstance(folder, dict):
                for key in ("path", "output_dir", "archive_dir", "failed_dir", "review_dir", "audit_dir"):
                    value = folder.get(key)
                    if isinstance(value, str):
                        folder[key] = base / value
    paths = raw.get("paths")
    if isinstance(paths, dict):
        for key in ("state_dir", "spool_dir"):
            if isinstance(paths.get(key), str):
                paths[key] = base / paths[key]
    engine = raw.get("engine")
    if isinstance(engine, dict) and isinstance(engine.get("ppocr_onnx"), dict):
        ppocr = engine["ppocr_onnx"]
        for key in ("model_dir", "manifest", "variant_dir"):
            if isinstance(ppocr.get(key), str):
                ppocr[key] = base / ppocr[key]
    api = raw.get("api")
    if isinstance(api, dict):
        if isinstance(api.get("socket"), str):
            api["socket"] = base / api["socket"]
        tcp = api.get("tcp")
        if isinstance(tcp, dict):
            for key in ("cert", "key"):
                if isinstance(tcp.get(key), str):
                    tcp[key] = base / tcp[key]
    return raw


def parse_config(raw: object, source: str = "<config>", base_dir: Path | None = None) -> AppConfig:
    """Validate an already-parsed YAML document; raise ConfigError naming each bad key path."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, not {type(raw).__name__}")
    raw = _resolve_paths(raw, base_dir or Path.cwd())
    try:
        return AppConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(source, error)) from None


def load_config(path: Path) -> AppConfig:
    """Read and validate a YAML config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config file: {error.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    return parse_config(raw, str(path), path.resolve().parent)
