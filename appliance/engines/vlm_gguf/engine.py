"""The `vlm_gguf` engine: a GGUF OCR vision-language model with its mmproj, decoding with drafts."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from appliance.config import VlmGgufConfig
from appliance.document import Line
from appliance.engines.base import PageText
from appliance.engines.vlm_gguf import runtime
from appliance.engines.vlm_gguf.decoding import (
    DraftPolicy,
    Generation,
    greedy_decode,
    greedy_decode_together,
    read_log_likelihood,
    text_log_likelihood,
)
from appliance.engines.vlm_gguf.draft_length import BatchCosts, DepthAcceptance
from appliance.engines.vlm_gguf.drafts import DraftSource, HintDraft, ModelDraft, TextHintDraft
from appliance.engines.vlm_gguf.gguf_manifest import load_vlm_manifest, verify_vlm_files
from appliance.engines.vlm_gguf.line_image import UNRECORDED_STRETCH, LineInput, prepare_line
from appliance.engines.vlm_gguf.loop_guard import LoopGuard
from appliance.engines.vlm_gguf.memory import MemoryPlan, plan_memory
from appliance.engines.vlm_gguf.output import ENGINE_NAME, TextLine, make_line, parse_answer, spell_out
from appliance.engines.vlm_gguf.profiles import FamilyProfile, profile_for
from appliance.errors import ModelError

log = logging.getLogger(__name__)

# A generation that stopped for one of these did not finish the page: a person must look at it.
CUT_SHORT = {
    "repetition": "the model started repeating itself and was stopped",
    "max_tokens": "the read needed more tokens than its limit (a page's, or a line's by its width)",
    "timeout": "the page took longer than the per-page time limit",
}


@dataclass
class GpuMemory:
    """GPU memory in use, sampled before the models load, after they load and after every page.

    The readings are the devices' memory in use (ggml's gpu and igpu devices summed): every process
    on the card counts, other workers of this daemon included. `peak_bytes - before_load_bytes`
    approximates this engine's share when nothing else on the card grew meanwhile. Samples, not a
    trace: memory taken and given back within a page is not seen (ggml's CUDA pools keep what they
    grew to, so most of it is). `budget_bytes` is what this engine's memory plan fits into.
    """

    before_load_bytes: int
    after_load_bytes: int
    peak_bytes: int
    budget_bytes: int

    def sample(self, used_bytes: int) -> None:
        self.peak_bytes = max(self.peak_bytes, used_bytes)

    def to_dict(self) -> dict[str, int]:
        return {
            "before_load_bytes": self.before_load_bytes,
            "after_load_bytes": self.after_load_bytes,
            "peak_bytes": self.peak_bytes,
            "budget_bytes": self.budget_bytes,
        }


@dataclass
class PageRead:
    """What the VLM wrote for one page and what it cost."""

    lines: list[TextLine]
    generation: Generation
    details: dict[str, Any]


class VlmGgufEngine:
    """Reads whole pages with a GGUF OCR VLM; optionally verifies drafts instead of writing from scratch."""

    name = ENGINE_NAME
    # Under `cascade.keep: auto` a line it reads again is kept by both readers' scores (`joint`):
    # on whole receipts, every line read again, 2.28% against the ONNX engine's 2.49%, where the
    # surer read alone read 2.47% (bench/README.md, "Both readers' scores").
    auto_keep = "joint"

    def __init__(self, config: VlmGgufConfig) -> None:
        self._config = config
        model_dir = config.model_dir
        manifest = load_vlm_manifest(model_dir / config.manifest)
        self._infos = verify_vlm_files(manifest, model_dir, check_hashes=config.verify_hashes)
        self._manifest = manifest
        # A line reader whose manifest does not say was trained before the stretch was recorded.
        self._line_input = manifest.line_input or LineInput(stretch=UNRECORDED_STRETCH)
        family = config.family if config.family != "auto" else manifest.family
        self.profile: FamilyProfile = profile_for(family).with_overrides(
            config.image_max_tokens, config.max_tokens_per_page
        )
        # The cascade cuts a line crop with this much paper round it (engines/base.SecondReader).
        self.line_margin = self.profile.line_margin
        # Line crops decoded side by side in one pass (read_lines); a page VLM reads one page at a time.
        self.lines_together = config.lines_together if self.profile.line_input else 1
        self._threads = config.threads or max(1, (os.cpu_count() or 1))
        paths = {role: info.path for role, info in self._infos.items()}
        if "model" not in paths or "mmproj" not in paths:
            raise ModelError(f"{manifest.source} must name a 'model' and an 'mmproj' file")
        want_draft_model = config.draft.source == "model"
        if want_draft_model and "draft" not in paths:
            raise ModelError(f"draft.source is 'model' but {manifest.source} names no 'draft' file")
        self._paths = paths
        gpu = config.device != "cpu" and runtime.supports_gpu()
        if config.device == "gpu" and not gpu:
            raise ModelError("engine.vlm_gguf.device is 'gpu' but this llama.cpp build has no GPU offload")
        shape = runtime.model_shape(
            paths["model"], paths["mmproj"], paths.get("draft") if want_draft_model else None
        )
        # One page needs its image tokens, the prompt around them and the tokens it may write. Lines
        # read together share one cache and one prompt head: each adds its image and its output.
        min_ctx = 256 + (self.profile.image_max_tokens + self.profile.max_tokens) * self.lines_together
        want_ctx = max(config.n_ctx or min_ctx, min_ctx)
        self.plan: MemoryPlan = plan_memory(
            shape,
            config.vram_budget_mb,
            want_ctx,
            min_ctx,
            gpu=gpu,
            kv_type=config.kv_cache_type,
            image_tokens=self.profile.image_max_tokens,
        )
        self._fallbacks: list[str] = []  # allocations that failed at load and what was tried next
        self._draft_model: runtime.TextModel | None = None
        self._draft_context: runtime.Context | None = None
        # Only an engine that offloads asks the GPU: on CUDA the question alone makes a CUDA context
        # (hundreds of MiB on the card) in a process that would otherwise never touch it.
        before_load = runtime.gpu_memory_used() if gpu else None
        try:
            self._load(self.plan, min_ctx)
            # The same for every page and line: the model's chat template is rendered once here
            # (a jinja compile, 3-5 ms a call on the 2-core CI machine, had been paid on every read).
            self._prompt = runtime.render_prompt(self._model, self.profile.messages(self._projector.marker))
        except BaseException:
            self.close()  # a draft refused after the model loaded must not keep the model's memory
            raise
        self.gpu_memory: GpuMemory | None = None  # None: no GPU device, or the engine runs on the CPU
        after_load = runtime.gpu_memory_used() if before_load is not None else None
        if before_load is not None and after_load is not None:
            self.gpu_memory = GpuMemory(
                before_load_bytes=before_load,
                after_load_bytes=after_load,
                peak_bytes=max(before_load, after_load),
                budget_bytes=self.plan.budget_mb * 2**20,
            )
        self._guard = LoopGuard(
            max_period=config.repetition.max_period,
            min_repeats=config.repetition.min_repeats,
            min_span=config.repetition.min_span,
        )
        self._policy = DraftPolicy(
            k=config.draft.k,
            k_max=config.draft.k_max,
            min_acceptance=config.draft.min_acceptance,
            min_drafted=config.draft.min_drafted,
            batch_cost=_linear_cost(config.draft.extra_token_cost),
        )
        self.last_generation: Generation | None = None  # the tokens of the last page (benchmarks, tests)
        # One llama.cpp context serves every read: a worker reading several pages at once
        # (engines.base.parallel_reads) sends its pages' reads here one after another, and one
        # that has this engine loaded reads one job at a time by default.
        self._busy = threading.Lock()
        self.parallel_reads = 1
        self._pieces: dict[int, bytes] = {}  # each token's bytes, asked of llama.cpp once
        self._stops = [stop.encode("utf-8") for stop in self.profile.stop]
        # Verification costs by batch size, and how often drafts are right by depth, learnt over
        # every page this engine reads: a line is too short to learn them before they would pay.
        self._batch_costs = BatchCosts()
        self._draft_depths = DepthAcceptance(self._policy.k_max)
        # Whether a line read with a hint also says how likely the hint was (`score_hints`).
        self._score_hints = False
        self._end_tokens: list[int] | None = None

    def _load(self, plan: MemoryPlan, min_ctx: int) -> None:
        """Load with the plan; when an allocation fails, shorten the context, then move layers to the CPU."""
        n_gpu_layers, n_ctx = plan.n_gpu_layers, plan.n_ctx
        while True:
            try:
                self._model = runtime.TextModel(self._paths["model"], n_gpu_layers)
                try:
                    self._context = runtime.Context(
                        self._model, self._settings(n_ctx, plan.kv_type, self.lines_together)
                    )
                    self._projector = runtime.Projector(
                        self._paths["mmproj"],
                        self._model,
                        self._threads,
                        use_gpu=n_gpu_layers > 0,
                        image_max_tokens=self.profile.image_max_tokens,
                    )
                except BaseException:
                    self._close_loaded()
                    raise
                break
            except runtime.OutOfMemoryError as error:
                if n_ctx > min_ctx:
                    n_ctx = max(min_ctx, n_ctx // 2)
                elif n_gpu_layers > 0:
                    n_gpu_layers //= 2
                else:
                    raise
                self._fallbacks.append(f"{error}; retrying with n_ctx={n_ctx}, n_gpu_layers={n_gpu_layers}")
                log.warning("%s", self._fallbacks[-1])
        self.plan.n_gpu_layers, self.plan.n_ctx = n_gpu_layers, n_ctx
        if self._config.draft.source == "model":
            self._draft_model = runtime.TextModel(self._paths["draft"], n_gpu_layers)
            if self._draft_model.n_vocab != self._model.n_vocab:
                raise ModelError(
                    f"draft {self._paths['draft'].name} has {self._draft_model.n_vocab} tokens,"
                    f" the model {self._model.n_vocab}: a draft must share the model's vocabulary"
                )
            self._draft_context = runtime.Context(self._draft_model, self._settings(n_ctx, plan.kv_type))

    def _settings(self, n_ctx: int, kv_type: str, n_seq_max: int = 1) -> runtime.ContextSettings:
        return runtime.ContextSettings(
            n_ctx=n_ctx,
            n_batch=self._config.n_batch,
            n_threads=self._threads,
            kv_type=kv_type,
            flash_attention=self._config.flash_attention,
            n_seq_max=n_seq_max,
        )

    def describe(self) -> dict[str, Any]:
        models = {
            role: {
                "file": info.path.name,
                "sha256": entry.sha256 if (entry := self._manifest.entry(role)) else None,
                "architecture": info.architecture,
                "quantization": info.file_type,
            }
            for role, info in self._infos.items()
        }
        return {
            "name": ENGINE_NAME,
            "family": self.profile.family,
            "manifest": self._manifest.name,
            "models": models,
            "draft_source": self._config.draft.source,
            "threads": self._threads,
            "memory_plan": self.plan.to_dict(),
            "fallbacks": list(self._fallbacks),
            "gpu_memory": self.gpu_memory.to_dict() if self.gpu_memory else None,
        }

    def score_hints(self, on: bool = True) -> bool:
        """Have each line read with a hint also say how likely the model finds the hint and its own read.

        The details of such a read hold `hint_log_likelihood` and `read_log_likelihood` (log P of
        each text, its end included) where the read ended and differs from the hint: one pass more
        over the hint's tokens, on the line's own place in the cache (the cascade's `keep: joint`).
        A page reader does not: False.
        """
        self._score_hints = on and bool(self.profile.line_input)
        return self._score_hints or not on

    def text_of(self, tokens: list[int]) -> str:
        """The text of tokens as the model writes them (for hints built from a model's own output)."""
        return b"".join(self._model.piece(token) for token in tokens).decode("utf-8", errors="replace")

    def recognize(self, image: np.ndarray) -> PageText:
        return self.read(image)

    def read(
        self,
        image: np.ndarray,
        hint: str | None = None,
        deadline: float | None = None,
        hint_tokens: list[int] | None = None,
    ) -> PageText:
        """Read one BGR page; `hint` is the page's text as another engine read it (the draft source).

        `hint_tokens` drafts from exact tokens instead (benchmarks: a model's own earlier output
        gives the upper bound of what drafting can buy).
        """
        with self._busy:
            started = time.perf_counter()
            try:
                page = self._read_page(image, hint, deadline, hint_tokens)
            finally:
                gpu_used = self._sample_gpu_memory()  # a page that failed (out of memory) counts too
            total_ms = (time.perf_counter() - started) * 1000
            self.last_generation = page.generation
            return self._page_text(page, image.shape, total_ms, gpu_used)

    def read_lines(
        self,
        images: Sequence[np.ndarray],
        deadline: float | None = None,
        hints: Sequence[str | None] | None = None,
    ) -> list[PageText]:
        """Read BGR line crops side by side, `lines_together` at a time, one PageText per crop.

        A pass feeds one token to every line still writing, so a group costs as many passes as its
        longest line. `hints` are the lines' texts as another engine read them: with draft.source
        `ocr_hint` each line drafts from its own, its drafts checked in the same pass as every
        line's next token. Each line's timings are its share of its group's (they add up to the
        group's time).
        """
        if not self.profile.line_input:
            raise ModelError(f"{self.profile.family} reads pages: read_lines is for a line reader")
        if hints is not None and len(hints) != len(images):
            raise ValueError(f"{len(images)} lines but {len(hints)} hints")
        line_hints = list(hints) if hints is not None else [None] * len(images)
        read: list[PageText] = []
        with self._busy:
            for start in range(0, len(images), self.lines_together):
                end = start + self.lines_together
                read.extend(self._read_together(images[start:end], line_hints[start:end], deadline))
        return read

    def _read_together(
        self, images: Sequence[np.ndarray], hints: Sequence[str | None], deadline: float | None
    ) -> list[PageText]:
        context = self._context
        started = time.perf_counter()
        try:
            prompts = runtime.evaluate_line_prompts(
                self._projector,
                context,
                self._prompt,
                [self._scaled(image) for image in images],
                reuse_head=self._config.reuse_prompt_head,
            )
            prompt_ms = (time.perf_counter() - started) * 1000
            head = len(context.head)  # the cells every line shares; each line adds the rest of its prompt
            used = head + sum(p.prompt_tokens - head for p in prompts)
            room = (context.n_ctx - used) // len(prompts) - 1
            limits = [min(self.profile.token_limit(p.image_tokens), room) for p in prompts]
            if deadline is None and self._config.timeout_seconds_per_page:
                deadline = time.monotonic() + self._config.timeout_seconds_per_page
            drafts = [self._hint_draft(hint) for hint in hints]  # hints tokenized before decoding's clock
            decode_started = time.perf_counter()
            generations = greedy_decode_together(
                _SideBySide(context, [p.position for p in prompts]),
                [p.logits for p in prompts],
                max_tokens=limits,
                drafts=drafts,
                policy=self._policy,
                guard=self._guard,
                deadline=deadline,
                should_stop=self._hit_stop if self.profile.stop else None,
                costs=self._batch_costs,
                prior=self._draft_depths,
            )
            decode_ms = (time.perf_counter() - decode_started) * 1000
            scores = self._hint_scores(
                context, [(p.sequence, p.position, p.logits) for p in prompts], generations, hints
            )
        finally:
            context.end_sequences()  # the head stays for the next line or group
            gpu_used = self._sample_gpu_memory()
        total_ms = (time.perf_counter() - started) * 1000
        count = len(images)
        read = []
        for image, hint, line_prompt, generation, score in zip(
            images, hints, prompts, generations, scores, strict=True
        ):
            page = self._page_read(
                line_prompt,
                generation,
                prompt_ms / count,
                decode_ms / count,
                lines_together=count,
                hint_chars=len(hint or ""),
            )
            page.details.update(score)
            read.append(self._page_text(page, image.shape, total_ms / count, gpu_used))
        return read

    def _page_text(
        self, page: PageRead, shape: tuple[int, ...], total_ms: float, gpu_used: int | None
    ) -> PageText:
        """The engine's answer for one page or line: its lines in its pixels, its figures, its warnings."""
        height, width = shape[:2]
        lines = self._lines(page.lines, width, height)
        warnings = []
        reason = CUT_SHORT.get(page.generation.stop_reason)
        if reason:
            warnings.append(f"vlm_gguf: {reason}")
        details = {**page.details, "total_ms": round(total_ms, 2)}
        if gpu_used is not None:
            details["gpu_memory_used_bytes"] = gpu_used  # the device's, after the page (GpuMemory)
        return PageText(
            lines=lines,
            timings_ms={"vlm_encode": page.details["prompt_ms"], "vlm_decode": page.details["decode_ms"]},
            warnings=warnings,
            details={ENGINE_NAME: details},
            review_reasons=[f"vlm_gguf: {reason}"] if reason else [],
        )

    def _piece(self, token: int) -> bytes:
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._model.piece(token)
        return cached

    def _hit_stop(self, tokens: list[int]) -> bool:
        tail = b"".join(self._piece(token) for token in tokens[-16:])
        return any(tail.endswith(stop) for stop in self._stops)

    def _answer(self, generation: Generation) -> list[TextLine]:
        """The text lines of what the model wrote, a stop string it ended on taken off."""
        text, confidences = spell_out([self._piece(t) for t in generation.tokens], generation.probabilities)
        for stop in self.profile.stop:
            if generation.stop_reason == "stop_string" and text.endswith(stop):
                text, confidences = text[: -len(stop)], confidences[: -len(stop)]
        return parse_answer(text, confidences, self.profile.output_format)

    def _sample_gpu_memory(self) -> int | None:
        """The GPUs' memory in use now, also kept as the peak; None on the CPU."""
        if self.gpu_memory is None:
            return None
        used = runtime.gpu_memory_used()
        if used is not None:
            self.gpu_memory.sample(used)
        return used

    def _scaled(self, image: np.ndarray) -> np.ndarray:
        """The page as RGB, its long side scaled down to the limit (encoding cost grows with area).

        A line reader's crop is instead sized as its model was trained (line_image.prepare_line).
        """
        if self.profile.line_input:
            line = prepare_line(image, self._line_input)
            return cv2.cvtColor(line, cv2.COLOR_BGR2RGB)
        rgb = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        limit = self._config.image_max_side
        long_side = max(rgb.shape[:2])
        if limit and long_side > limit:
            scale = limit / long_side
            rgb = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        return rgb

    def _read_page(
        self, image: np.ndarray, hint: str | None, deadline: float | None, hint_tokens: list[int] | None
    ) -> PageRead:
        context = self._context
        prompt_started = time.perf_counter()
        result = runtime.evaluate_prompt(
            self._projector,
            context,
            self._prompt,
            self._scaled(image),
            reuse_head=self._config.reuse_prompt_head,
        )
        prompt_end = context.position
        prompt_ms = (time.perf_counter() - prompt_started) * 1000
        draft = self._draft_source(hint, result.text_tokens, hint_tokens)
        max_tokens = min(self.profile.token_limit(result.image_tokens), context.n_ctx - context.position - 1)
        if deadline is None and self._config.timeout_seconds_per_page:
            deadline = time.monotonic() + self._config.timeout_seconds_per_page
        decode_started = time.perf_counter()
        generation = greedy_decode(
            context,
            result.logits,
            max_tokens=max_tokens,
            draft=draft,
            policy=self._policy,
            guard=self._guard,
            deadline=deadline,
            should_stop=self._hit_stop if self.profile.stop else None,
            costs=self._batch_costs,
            prior=self._draft_depths,
        )
        decode_ms = (time.perf_counter() - decode_started) * 1000
        (score,) = self._hint_scores(context, [(0, prompt_end, result.logits)], [generation], [hint])
        page = self._page_read(
            result,
            generation,
            prompt_ms,
            decode_ms,
            hint_chars=len(hint or ""),
            hint_tokens=len(hint_tokens or []),  # exact tokens given (benchmarks); 0 for a text hint
        )
        page.details.update(score)
        return page

    def _hint_scores(
        self,
        context: runtime.Context,
        places: Sequence[tuple[int, int, np.ndarray]],
        generations: Sequence[Generation],
        hints: Sequence[str | None],
    ) -> list[dict[str, float]]:
        """Each line's log P of its own read and of its hint, where `score_hints` asks and they differ.

        `places` are each line's sequence, the position after its prompt and the logits there. The
        hints that differ from their reads are fed on their lines' sequences in one pass, over what
        was written there (the caller forgets it all after the read).
        """
        scores: list[dict[str, float]] = [{} for _ in generations]
        if not self._score_hints:
            return scores
        parts, wanted = [], []
        for index, (generation, hint) in enumerate(zip(generations, hints, strict=True)):
            own = read_log_likelihood(generation)
            if hint is None or own is None:
                continue
            scores[index]["read_log_likelihood"] = own
            if " ".join(hint.split()) == " ".join(self.text_of(generation.tokens).split()):
                scores[index]["hint_log_likelihood"] = own
                continue
            sequence, position, _ = places[index]
            tokens = self._model.tokenize(hint)
            if not tokens:
                continue
            context.forget(sequence, position)
            parts.append((sequence, position, tokens))
            wanted.append(index)
        if not parts:
            return scores
        try:
            rows = context.feed_sequences(parts, every_row=True)
        except runtime.OutOfMemoryError as error:
            # A hint past the context's room: the reads stand, and their lines are kept by how sure
            # each reader is (the cascade's `joint` needs both scores).
            log.warning("hints not scored: %s", error)
            return scores
        if self._end_tokens is None:
            self._end_tokens = [token for token in range(self._model.n_vocab) if self._model.is_end(token)]
        for index, (_, _, tokens), line_rows in zip(wanted, parts, rows, strict=True):
            logits = np.vstack([places[index][2][None, :], line_rows])
            scores[index]["hint_log_likelihood"] = text_log_likelihood(logits, tokens, self._end_tokens)
        return scores

    def _page_read(
        self,
        prompt: runtime.PromptResult | runtime.SequencePrompt,
        generation: Generation,
        prompt_ms: float,
        decode_ms: float,
        **extra: int,
    ) -> PageRead:
        """What the model wrote for one page or line, with what its prompt and decoding cost."""
        details: dict[str, Any] = {
            "family": self.profile.family,
            "prompt_tokens": prompt.prompt_tokens,
            "prompt_tokens_reused": prompt.reused_tokens,
            "image_tokens": prompt.image_tokens,
            "prompt_ms": round(prompt_ms, 2),
            # Of prompt_ms, the image's own (libmtmd's encoder, then its embeddings fed): on a CPU
            # the vision tower, not the text, is most of a line's prompt.
            "image_ms": round(prompt.image_ms, 2),
            "decode_ms": round(decode_ms, 2),
            "stop_reason": generation.stop_reason,
            **extra,
            **generation.stats.to_dict(),
        }
        return PageRead(self._answer(generation), generation, details)

    def _draft_source(
        self, hint: str | None, prompt_text_tokens: list[int], hint_tokens: list[int] | None
    ) -> DraftSource | None:
        source = self._config.draft.source
        if hint_tokens:
            return HintDraft(hint_tokens)
        if source == "ocr_hint":
            return self._hint_draft(hint)
        if source == "model" and self._draft_context is not None:
            self._draft_context.reset()
            # The draft model cannot see the image: it gets the prompt's text and what was written.
            self._draft_context.append(prompt_text_tokens or [0], logits=False)
            self._draft_context.seal()
            return ModelDraft(self._draft_context)
        return None

    def _hint_draft(self, hint: str | None) -> TextHintDraft | None:
        """Drafts from another engine's text of the page or line, where draft.source is `ocr_hint`."""
        if self._config.draft.source != "ocr_hint" or not hint:
            return None
        return TextHintDraft(hint, self._model.piece, self._model.tokenize)

    def _lines(self, read: list[TextLine], width: int, height: int) -> list[Line]:
        """Lines in page pixels, in bands of the page where the model gave no location.

        Each unlocated line gets a band in the order written, so reading order survives layout
        sorting; the cascade replaces those bands with the boxes of the ONNX engine's lines.
        """
        lines: list[Line] = []
        count = max(len(read), 1)
        for index, item in enumerate(read):
            if item.box is not None:
                x0, y0, x1, y1 = item.box
                box = (x0 * width, y0 * height, x1 * width, y1 * height)
            else:
                box = (0.0, index * height / count, float(width), (index + 1) * height / count)
            lines.append(make_line(item.text, item.char_confidences, box))
        return lines

    def _close_loaded(self) -> None:
        for attribute in ("_projector", "_context", "_model"):
            resource = getattr(self, attribute, None)
            if resource is not None:
                resource.close()
                setattr(self, attribute, None)

    def close(self) -> None:
        for attribute in ("_draft_context", "_draft_model"):
            resource = getattr(self, attribute, None)
            if resource is not None:
                resource.close()
                setattr(self, attribute, None)
        self._close_loaded()


class _SideBySide:
    """Lines past their prompts on sequences 0..n-1 of one context (decoding.Sequences)."""

    def __init__(self, context: runtime.Context, positions: list[int]) -> None:
        self._context = context
        self._positions = positions

    def step(self, tokens: dict[int, list[int]]) -> dict[int, np.ndarray]:
        rows = self._context.feed_sequences(
            [(sequence, self._positions[sequence], fed) for sequence, fed in tokens.items()], every_row=True
        )
        for sequence, fed in tokens.items():
            self._positions[sequence] += len(fed)
        return dict(zip(tokens, rows, strict=True))

    def rewind(self, sequence: int, count: int) -> None:
        self._positions[sequence] -= count
        self._context.forget(sequence, self._positions[sequence])

    def is_end(self, token: int) -> bool:
        return self._context.is_end(token)


def _linear_cost(extra_token_cost: float | None) -> Callable[[int], float] | None:
    """A verification pass's cost, one token counting 1 and each more `extra_token_cost`."""
    if extra_token_cost is None:
        return None
    return lambda batch: 1.0 + extra_token_cost * (batch - 1)
