"""The one module that talks to llama.cpp (through llama-cpp-python's ctypes API) and libmtmd."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import llama_cpp
import llama_cpp.llama_cpp
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment
from llama_cpp import mtmd_cpp
from llama_cpp._ctypes_extensions import load_shared_library

from appliance.engines.vlm_gguf.memory import ModelShape
from appliance.errors import ModelError

log = logging.getLogger(__name__)

# ggml's levels (ggml.h): NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line).
_LOG_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_last_level = [logging.DEBUG]


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
def _forward_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # llama.cpp writes to stderr by default; route it through logging (journald), its info lines
    # (tensor listings, hyperparameters) at debug level so a service log is not flooded.
    python_level = _last_level[0] if level == 5 else _LOG_LEVELS.get(level, logging.DEBUG)
    _last_level[0] = python_level
    if log.isEnabledFor(python_level):
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            log.log(python_level, "llama.cpp: %s", message)


llama_cpp.llama_log_set(_forward_log, ctypes.c_void_p(0))
# Once per process, before any model: loads the ggml backends (CUDA where built) and fills ggml's
# fp16 tables, as llama-cpp-python's own `Llama` does.
llama_cpp.llama_backend_init()
# libmtmd (the vision side) has its own log hooks; without these it prints to stdout.
mtmd_cpp.mtmd_log_set(_forward_log, ctypes.c_void_p(0))
mtmd_cpp.mtmd_helper_log_set(_forward_log, ctypes.c_void_p(0))


class OutOfMemoryError(ModelError):
    """llama.cpp could not allocate a buffer (model, KV cache or compute) with the chosen settings."""


def supports_gpu() -> bool:
    """Whether this llama.cpp build can offload layers (a CUDA build on a machine with a GPU)."""
    return bool(llama_cpp.llama_supports_gpu_offload())


DeviceKind = Literal["cpu", "gpu", "igpu", "accel", "meta", "unknown"]
# enum ggml_backend_dev_type (ggml/include/ggml-backend.h of the llama.cpp vendored by
# llama-cpp-python 0.3.36), in declaration order: CPU, GPU (dedicated memory), IGPU (integrated,
# host memory), ACCEL (BLAS/AMX beside the CPU), META (wraps other devices for tensor parallelism).
_DEVICE_KINDS: dict[int, DeviceKind] = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


@dataclass(frozen=True)
class DeviceMemory:
    """One ggml device and its memory as its backend reports it (CUDA: cudaMemGetInfo).

    For a GPU this is the whole card: memory in use by every process on it, not only this one.
    """

    name: str
    kind: DeviceKind
    free_bytes: int
    total_bytes: int

    @property
    def used_bytes(self) -> int:
        return max(self.total_bytes - self.free_bytes, 0)


@functools.cache
def _ggml_devices() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """The device registry (libggml) and the device calls (libggml-base), with their signatures.

    Hand-written because llama-cpp-python 0.3.36 binds none of ggml's backend-device API. The
    libraries are loaded from the folder llama_cpp loaded libllama from (its `_base_path`, which
    honours LLAMA_CPP_LIB_PATH): dlopen of the same file returns the handle already loaded, so these
    calls see the registry llama.cpp itself filled (llama_backend_init above), not a second copy.
    """
    folder = Path(getattr(llama_cpp.llama_cpp, "_base_path", Path(llama_cpp.__file__).parent / "lib"))
    registry = load_shared_library("ggml", folder)
    base = load_shared_library("ggml-base", folder)
    registry.ggml_backend_dev_count.argtypes = []
    registry.ggml_backend_dev_count.restype = ctypes.c_size_t
    registry.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    registry.ggml_backend_dev_get.restype = ctypes.c_void_p
    base.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_name.restype = ctypes.c_char_p
    base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_type.restype = ctypes.c_int
    base.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    base.ggml_backend_dev_memory.restype = None
    return registry, base


def device_memory() -> list[DeviceMemory]:
    """Every device ggml registered (the CPU always; GPUs on a CUDA build) with its free and total memory.

    On a CUDA device this makes a CUDA context in this process if there is none yet (hundreds of
    MiB on the card): call it only where the process uses the GPU anyway.
    """
    registry, base = _ggml_devices()
    devices: list[DeviceMemory] = []
    for index in range(int(registry.ggml_backend_dev_count())):
        device = registry.ggml_backend_dev_get(index)
        if not device:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        base.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        name = base.ggml_backend_dev_name(device) or b""
        devices.append(
            DeviceMemory(
                name=name.decode("utf-8", errors="replace"),
                kind=_DEVICE_KINDS.get(int(base.ggml_backend_dev_type(device)), "unknown"),
                free_bytes=int(free.value),
                total_bytes=int(total.value),
            )
        )
    return devices


def gpu_memory_used() -> int | None:
    """Bytes in use on the GPUs (dedicated and integrated) summed, or None when ggml has no GPU device.

    Device-wide: every process's allocations on the cards, this one's among them.
    """
    gpus = [device for device in device_memory() if device.kind in ("gpu", "igpu")]
    return sum(device.used_bytes for device in gpus) if gpus else None


class TextModel:
    """A GGUF text model loaded by llama.cpp."""

    def __init__(self, path: Path, n_gpu_layers: int, vocab_only: bool = False) -> None:
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        # Memory-mapped, as `Llama` loads (the default, AUTO, picks per device).
        params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
        params.vocab_only = vocab_only
        self.path = path
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            kind = OutOfMemoryError if n_gpu_layers else ModelError
            raise kind(f"llama.cpp could not load {path.name} with n_gpu_layers={n_gpu_layers} (see the log)")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.n_layer = int(llama_cpp.llama_model_n_layer(self.model))
        self.n_embd = int(llama_cpp.llama_model_n_embd(self.model))

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(1 << 16)
        length = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", errors="replace") if length >= 0 else None

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        tokens = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, False, special)
        if count < 0:  # the buffer was too small: llama.cpp says how large it must be
            capacity = -count
            tokens = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, False, special)
        return list(tokens[:count])

    def piece(self, token: int) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        length = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        if length < 0:
            buffer = ctypes.create_string_buffer(-length)
            length = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        return buffer.raw[:length]

    def is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None


def model_shape(path: Path, projector: Path, draft: Path | None) -> ModelShape:
    """Layer and head counts from the model's header (llama.cpp loads only the vocabulary).

    From the metadata, not llama_model_n_layer: a vocabulary-only load leaves the layer count 0.
    """
    model = TextModel(path, n_gpu_layers=0, vocab_only=True)
    try:
        architecture = model.metadata("general.architecture") or ""
        n_layer = int(model.metadata(f"{architecture}.block_count") or 0)
        if n_layer <= 0:
            raise ModelError(f"{path.name} does not say how many layers it has ({architecture}.block_count)")
        n_head = int(model.metadata(f"{architecture}.attention.head_count") or 1)
        head_kv = int(model.metadata(f"{architecture}.attention.head_count_kv") or n_head)
        key_length = model.metadata(f"{architecture}.attention.key_length")
        n_embd = int(model.metadata(f"{architecture}.embedding_length") or 0)
        head_dim = int(key_length) if key_length else n_embd // max(n_head, 1)
        return ModelShape(
            weights_bytes=path.stat().st_size,
            projector_bytes=projector.stat().st_size,
            draft_bytes=draft.stat().st_size if draft else 0,
            n_layer=n_layer,
            n_head_kv=head_kv,
            head_dim=head_dim,
            n_vocab=model.n_vocab,
        )
    finally:
        model.close()


@dataclass(frozen=True)
class ContextSettings:
    """What a llama.cpp context is created with."""

    n_ctx: int
    n_batch: int
    n_threads: int
    kv_type: str  # "f16" or "q8_0"
    flash_attention: bool
    # Sequences decoded side by side in one pass (a line reader's lines read together); they share
    # the n_ctx cells of one cache (kv_unified) rather than a slice each.
    n_seq_max: int = 1


_KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}


class Context:
    """A llama.cpp context: feeds tokens, returns logits, forgets the newest tokens.

    Sequence 0 is the one a page or line is read on, its position tracked here, not derived from
    the token count: after an image, M-RoPE models (Qwen2-VL) advance the position by the image's
    grid size, not by its token count. With `n_seq_max` > 1, lines read together take sequences
    0..n-1 (`feed_sequences`, `evaluate_line_prompts`), each with its own positions.
    """

    def __init__(self, model: TextModel, settings: ContextSettings) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = settings.n_batch
        params.n_threads = settings.n_threads
        params.n_threads_batch = settings.n_threads
        params.type_k = _KV_TYPES[settings.kv_type]
        params.type_v = _KV_TYPES[settings.kv_type]
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if settings.flash_attention
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        )
        params.no_perf = True
        params.n_seq_max = settings.n_seq_max
        params.kv_unified = settings.n_seq_max > 1
        self.model = model
        self.settings = settings
        self.ctx = llama_cpp.llama_init_from_model(model.model, params)
        if not self.ctx:
            raise OutOfMemoryError(
                f"llama.cpp could not create a context of {settings.n_ctx} tokens ({settings.kv_type} cache)"
            )
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(self.ctx))
        self.n_seq_max = settings.n_seq_max
        self._batch = llama_cpp.llama_batch_init(settings.n_batch, 0, settings.n_seq_max)
        self.position = 0
        self._positions: list[int] = []  # start position of every appended token since the last reset
        # The text tokens at the head of the cache (positions 0..n-1) that a later prompt may reuse.
        self.head: list[int] = []

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)
        self.position = 0
        self._positions = []
        self.head = []

    def keep_head(self, tokens: Sequence[int]) -> bool:
        """Keep the cache's head when it holds exactly `tokens`, dropping everything after it.

        A line-by-line reader sends the same system turn and instruction before every image: its
        keys and values are computed once and kept, so each line costs only its image and the few
        tokens after it. Returns False (and keeps nothing) when the head differs.
        """
        if not tokens or self.head != list(tokens):
            return False
        llama_cpp.llama_memory_seq_rm(self.memory, 0, len(tokens), -1)
        self.position = len(tokens)
        self._positions = []
        return True

    def append(self, tokens: Sequence[int], logits: bool | None = None) -> np.ndarray:
        """Feed tokens; return their logits rows (all rows by default, else only the last)."""
        want_all = True if logits is None else logits
        rows: list[np.ndarray] = []
        n_batch = self.settings.n_batch
        for start in range(0, len(tokens), n_batch):
            part = tokens[start : start + n_batch]
            last_part = start + n_batch >= len(tokens)
            if self.position + len(part) > self.n_ctx:
                raise OutOfMemoryError(f"the page needs more than the context's {self.n_ctx} tokens")
            last = len(part) - 1
            self._decode(
                [
                    (0, self.position + index, token, want_all or (last_part and index == last))
                    for index, token in enumerate(part)
                ],
                f"at position {self.position}",
            )
            for index in range(len(part)):
                self._positions.append(self.position + index)
            self.position += len(part)
            # llama.cpp keeps the requested rows side by side in batch order: one copy of the block
            # (a 152k vocabulary makes each row 0.6 MB; a verification batch has up to k+1 of them).
            if want_all:
                pointer, count = llama_cpp.llama_get_logits(self.ctx), len(part)
            elif last_part:
                pointer, count = llama_cpp.llama_get_logits_ith(self.ctx, len(part) - 1), 1
            else:
                continue
            rows.append(np.ctypeslib.as_array(pointer, shape=(count, self.model.n_vocab)).copy())
        if not rows:
            return np.empty((0, self.model.n_vocab), dtype=np.float32)
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def feed_sequences(
        self, parts: Sequence[tuple[int, int, Sequence[int]]], every_row: bool = False
    ) -> list[np.ndarray]:
        """Feed tokens to several sequences in one pass: `(sequence, first position, tokens)` each.

        Returns each part's last logits row, in the order given; with `every_row`, each part's rows
        of all its tokens (tokens x n_vocab: a line's drafts being checked). Sequence 0's own
        position (`position`, `rewind`) is not moved: the caller tracks every sequence's position.
        """
        entries = [
            (sequence, first + offset, token, every_row or offset == len(tokens) - 1)
            for sequence, first, tokens in parts
            for offset, token in enumerate(tokens)
        ]
        if len(entries) > self.n_ctx:
            raise OutOfMemoryError(f"the lines need more than the context's {self.n_ctx} tokens")
        rows: list[np.ndarray] = []
        n_batch = self.settings.n_batch
        for start in range(0, len(entries), n_batch):
            chunk = entries[start : start + n_batch]
            self._decode(chunk, f"on {len(parts)} lines")
            if every_row:  # every row asked for: llama.cpp keeps them side by side, one copy
                pointer = llama_cpp.llama_get_logits(self.ctx)
                rows.append(np.ctypeslib.as_array(pointer, shape=(len(chunk), self.model.n_vocab)).copy())
                continue
            for index, entry in enumerate(chunk):
                if entry[3]:
                    pointer = llama_cpp.llama_get_logits_ith(self.ctx, index)
                    rows.append(np.ctypeslib.as_array(pointer, shape=(self.model.n_vocab,)).copy())
        if not every_row:
            return rows
        block = rows[0] if len(rows) == 1 else np.concatenate(rows)
        ends = np.cumsum([len(tokens) for _, _, tokens in parts])
        return np.split(block, ends[:-1])

    def forget(self, sequence: int, position: int) -> None:
        """Drop `sequence`'s cells from `position` on (its rejected drafts)."""
        llama_cpp.llama_memory_seq_rm(self.memory, sequence, position, -1)

    def _decode(self, entries: Sequence[tuple[int, int, int, bool]], where: str) -> None:
        """One llama_decode of `(sequence, position, token, wants logits)` entries, n_batch at most."""
        batch = self._batch
        batch.n_tokens = len(entries)
        for index, (sequence, position, token, wanted) in enumerate(entries):
            batch.token[index] = token
            batch.pos[index] = position
            batch.n_seq_id[index] = 1
            batch.seq_id[index][0] = sequence
            batch.logits[index] = wanted
        status = llama_cpp.llama_decode(self.ctx, batch)
        if status != 0:
            raise OutOfMemoryError(f"llama_decode failed with status {status} {where}")

    def share_head(self, sequence: int) -> None:
        """Give `sequence` the cells of sequence 0 (its head): a unified cache tags them, no copy."""
        llama_cpp.llama_memory_seq_cp(self.memory, 0, sequence, -1, -1)

    def end_sequences(self) -> None:
        """Forget every sequence but the head of sequence 0, which the next prompt may keep."""
        for sequence in range(1, self.n_seq_max):
            llama_cpp.llama_memory_seq_rm(self.memory, sequence, -1, -1)
        llama_cpp.llama_memory_seq_rm(self.memory, 0, len(self.head), -1)
        self.position = len(self.head)
        self._positions = []

    def seal(self) -> None:
        """Make everything fed so far permanent: rewinding never reaches before this point."""
        self._positions = []

    def rewind(self, count: int) -> None:
        if count <= 0:
            return
        keep = len(self._positions) - count
        cut = self._positions[keep]
        llama_cpp.llama_memory_seq_rm(self.memory, 0, cut, -1)
        del self._positions[keep:]
        self.position = cut

    def is_end(self, token: int) -> bool:
        return self.model.is_end(token)

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None


class Projector:
    """The mmproj (vision encoder + projector) through libmtmd, bound to its text model."""

    def __init__(
        self, path: Path, model: TextModel, n_threads: int, use_gpu: bool, image_max_tokens: int
    ) -> None:
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = n_threads
        params.warmup = False
        params.image_max_tokens = image_max_tokens
        self.ctx = mtmd_cpp.mtmd_init_from_file(str(path).encode(), model.model, params)
        if not self.ctx:
            raise ModelError(
                f"libmtmd could not load the projector {path.name} for {model.path.name} (see the log)"
            )
        if not mtmd_cpp.mtmd_support_vision(self.ctx):
            self.close()
            raise ModelError(f"{path.name} is not a vision projector")
        self.marker = (mtmd_cpp.mtmd_default_marker() or b"<__media__>").decode()

    def close(self) -> None:
        if self.ctx:
            mtmd_cpp.mtmd_free(self.ctx)
            self.ctx = None


@dataclass
class PromptResult:
    """The logits after the prompt and what the prompt cost."""

    logits: np.ndarray
    prompt_tokens: int
    image_tokens: int
    text_tokens: list[int]  # the prompt's text tokens (what a text-only draft model is fed)
    reused_tokens: int = 0  # of prompt_tokens, those kept in the cache from the previous prompt
    image_ms: float = 0.0  # of the prompt's time, encoding the image and feeding its embeddings


def render_prompt(model: TextModel, messages: list[dict[str, Any]]) -> str:
    """The model's own chat template (GGUF `tokenizer.chat_template`) applied to the messages."""
    template = model.metadata("tokenizer.chat_template")
    if not template:
        raise ModelError(f"{model.path.name} has no chat template (tokenizer.chat_template)")
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message: str) -> None:
        raise ModelError(f"chat template of {model.path.name}: {message}")

    return environment.from_string(template).render(
        messages=messages,
        add_generation_prompt=True,
        bos_token=model.piece(llama_cpp.llama_vocab_bos(model.vocab)).decode("utf-8", errors="replace"),
        eos_token=model.piece(llama_cpp.llama_vocab_eos(model.vocab)).decode("utf-8", errors="replace"),
        raise_exception=raise_exception,
    )


@contextlib.contextmanager
def prompt_chunks(projector: Projector, prompt: str, image_rgb: np.ndarray) -> Iterator[Any]:
    """The input chunks (libmtmd) of a prompt holding one image marker and the page; freed on exit."""
    height, width = image_rgb.shape[:2]
    pixels = np.ascontiguousarray(image_rgb, dtype=np.uint8)
    bitmap = mtmd_cpp.mtmd_bitmap_init(width, height, pixels.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)))
    if not bitmap:
        raise ModelError("libmtmd could not take the page image")
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    try:
        text = mtmd_cpp.mtmd_input_text()
        encoded = prompt.encode("utf-8")
        text.text = encoded
        text.text_len = len(encoded)
        text.add_special = True
        text.parse_special = True
        bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
        status = mtmd_cpp.mtmd_tokenize(projector.ctx, chunks, ctypes.byref(text), bitmaps, 1)
        if status != 0:
            raise ModelError(
                f"libmtmd could not tokenize the prompt (status {status}):"
                " does the prompt hold exactly one image marker?"
            )
        yield chunks
    finally:
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        mtmd_cpp.mtmd_bitmap_free(bitmap)


def evaluate_prompt(
    projector: Projector, context: Context, prompt: str, image_rgb: np.ndarray, reuse_head: bool = False
) -> PromptResult:
    """Tokenize text + image into chunks (libmtmd) and feed them; the image is encoded here.

    With `reuse_head`, text before the image that the context already holds from the previous
    prompt is not fed again (Context.keep_head); `PromptResult.reused_tokens` counts it.
    """
    with prompt_chunks(projector, prompt, image_rgb) as chunks:
        count = mtmd_cpp.mtmd_input_chunks_size(chunks)
        logits: np.ndarray | None = None
        prompt_tokens = image_tokens = reused = 0
        image_ms = 0.0
        text_tokens: list[int] = []
        for index in range(count):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, index)
            kind = mtmd_cpp.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                tokens = _chunk_tokens(chunk)
                text_tokens.extend(tokens)
                prompt_tokens += len(tokens)
                # Only a head that an image follows is worth keeping for the next prompt.
                if index == 0 and count > 1:
                    reused = _feed_head(context, tokens, reuse_head)
                    continue
                if index == 0:
                    context.reset()
                rows = context.append(tokens, logits=False)
                logits = rows[-1] if len(rows) else None
            else:
                if index == 0:
                    context.reset()
                n_tokens_chunk = int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk))
                if context.position + n_tokens_chunk > context.n_ctx:
                    raise OutOfMemoryError(
                        f"the page image needs {n_tokens_chunk} tokens;"
                        f" the context has {context.n_ctx - context.position} left"
                    )
                context.position, milliseconds = _feed_image(projector, context, chunk, context.position, 0)
                image_ms += milliseconds
                image_tokens += n_tokens_chunk
                prompt_tokens += n_tokens_chunk
                logits = None
        if logits is None:
            raise ModelError("the prompt ends with the image: the family's template must add text after it")
        context.seal()
        return PromptResult(
            logits=logits,
            prompt_tokens=prompt_tokens,
            image_tokens=image_tokens,
            text_tokens=text_tokens,
            reused_tokens=reused,
            image_ms=image_ms,
        )


@dataclass
class SequencePrompt:
    """One line's prompt fed on its own sequence: the logits after it and where the sequence stands."""

    sequence: int
    position: int  # the next token's position on this sequence
    logits: np.ndarray
    prompt_tokens: int
    image_tokens: int
    reused_tokens: int  # of prompt_tokens, the head kept in the cache (not fed again)
    image_ms: float  # encoding this line's image and feeding its embeddings


def evaluate_line_prompts(
    projector: Projector,
    context: Context,
    prompt: str,
    images_rgb: Sequence[np.ndarray],
    reuse_head: bool = False,
) -> list[SequencePrompt]:
    """Feed one prompt per image, image i on sequence i, for decoding them side by side.

    The prompt must be text, the image, text (a line reader's). Its head, the text before the
    image, is fed once on sequence 0 (or kept from the previous prompt, with `reuse_head`) and shared
    by the others;
    each image is encoded and fed on its own sequence, then every tail in one pass. The caller
    ends with `Context.end_sequences`, also when this raises.
    """
    if len(images_rgb) > context.n_seq_max:
        raise ValueError(f"{len(images_rgb)} lines, but the context holds {context.n_seq_max} sequences")
    with contextlib.ExitStack() as stack:
        chunk_lists = [stack.enter_context(prompt_chunks(projector, prompt, image)) for image in images_rgb]
        layout = (
            mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT,
            mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE,
            mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT,
        )
        chunks = []
        for chunk_list in chunk_lists:
            parts = [
                mtmd_cpp.mtmd_input_chunks_get(chunk_list, index)
                for index in range(mtmd_cpp.mtmd_input_chunks_size(chunk_list))
            ]
            if tuple(mtmd_cpp.mtmd_input_chunk_get_type(part) for part in parts) != layout:
                raise ModelError("lines are read together only with a prompt of text, one image, text")
            chunks.append(parts)
        head = _chunk_tokens(chunks[0][0])
        reused = _feed_head(context, head, reuse_head)
        # Every sequence takes the head before any image goes on sequence 0 (a later copy would
        # take that image along).
        for sequence in range(1, len(chunks)):
            context.share_head(sequence)
        positions = [len(head)] * len(chunks)
        image_tokens = [0] * len(chunks)
        image_ms = [0.0] * len(chunks)
        for sequence, parts in enumerate(chunks):
            image_tokens[sequence] = int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(parts[1]))
            positions[sequence], image_ms[sequence] = _feed_image(
                projector, context, parts[1], positions[sequence], sequence
            )
        tails = [_chunk_tokens(parts[2]) for parts in chunks]
        rows = context.feed_sequences(
            [(sequence, positions[sequence], tail) for sequence, tail in enumerate(tails)]
        )
        return [
            SequencePrompt(
                sequence=sequence,
                position=positions[sequence] + len(tails[sequence]),
                logits=rows[sequence],
                prompt_tokens=len(head) + image_tokens[sequence] + len(tails[sequence]),
                image_tokens=image_tokens[sequence],
                reused_tokens=reused,
                image_ms=image_ms[sequence],
            )
            for sequence in range(len(chunks))
        ]


def _feed_head(context: Context, tokens: list[int], reuse: bool) -> int:
    """The prompt's text before its image at the start of the cache, on sequence 0.

    Kept from the previous prompt when `reuse` and it is the same (Context.keep_head), else fed
    afresh and remembered for the next prompt. Returns how many tokens were kept (0: fed).
    """
    if reuse and context.keep_head(tokens):
        return len(tokens)
    context.reset()
    context.append(tokens, logits=False)
    context.head = list(tokens)
    return 0


def _feed_image(
    projector: Projector, context: Context, chunk: Any, position: int, sequence: int
) -> tuple[int, float]:
    """Encode an image chunk (libmtmd) and feed it on `sequence` from `position`.

    Returns the next position and the milliseconds it took (a read's `image_ms`).
    """
    started = time.perf_counter()
    new_position = llama_cpp.llama_pos(0)
    status = mtmd_cpp.mtmd_helper_eval_chunk_single(
        projector.ctx,
        context.ctx,
        chunk,
        position,
        sequence,
        context.settings.n_batch,
        False,
        ctypes.byref(new_position),
    )
    if status != 0:
        raise OutOfMemoryError(f"libmtmd could not encode or decode the image (status {status})")
    return int(new_position.value), (time.perf_counter() - started) * 1000


def _chunk_tokens(chunk: Any) -> list[int]:
    """The token ids of a text chunk (libmtmd)."""
    n_tokens = ctypes.c_size_t()
    pointer = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n_tokens))
    return [pointer[i] for i in range(n_tokens.value)]
