"""Speed of the vlm_gguf engine's pieces on a GPU: image encode, prefill, decode, draft verification, pages/s.

Usage (on the GPU machine, after ../shared/gpu/build-llama-cuda.sh; see bench/README.md):

    PYTHONPATH=/tmp/site:. python3 bench/vlm_gpu_bench.py --model-dir DIR [--quant Q8_0 --quant Q4_K_M]
        [--budget 8192 --budget 16384] [--tokens 1000] [--hint-rate R | --hint-rate-json FILE]
        [--hint-char-rate C] [--out DIR] [--smoke]

DIR holds model-QUANT.gguf and mmproj-f16.gguf (bench/vlm_random_model.py writes them). Each quant
x budget runs in its own process, so its peak VRAM (nvidia-smi, polled every 20 ms, minus the
reading before loading) is its own. Per run, through the engine's own runtime, memory plan and
decoding loop (appliance.engines.vlm_gguf), with the LightOnOCR profile's image and page budgets:

- plan: `plan_memory` for the budget and --want-ctx (default: what one page needs, as the engine
  plans), loaded with its n_gpu_layers, n_ctx, KV type;
- encode: libmtmd's encoder alone on a synthetic --page-size page (ms, median of 3 after a warm-up);
- prefill: tokens/s of one batch of as many text tokens as the prompt (image + text) had;
- decode: `greedy_decode` with no draft, one stream, exactly --tokens tokens (random weights loop
  and may write end tokens: the loop guard is off and end tokens do not stop it), and the same
  tokens fed one at a time without the loop's argmax/probabilities ("raw");
- verify: ms of one `Context.append` of k+1 tokens (the chosen token and k drafts) then a rewind,
  k = 0..16, after the prompt and the generated tokens, relative to k = 0 (one token);
- speculation: `greedy_decode` with a `HintDraft` from the model's own no-draft output (every
  draft is right: the upper bound) and from that output corrupted at rate R (each token replaced,
  dropped or followed by a random one, 2:1:1), with the engine's default DraftPolicy and, as the
  engine, one memory of batch costs over the runs (each run starts from what the ones before timed);
- text hint (with --hint-char-rate C): the cascade's own draft path, `TextHintDraft`, on receipt-
  like text the model is made to write, drafted from a copy whose characters are corrupted at rate
  C (replaced, dropped or followed by a stray one, 2:1:1; line breaks kept), against the same text
  written without drafts;
- pages/s at 600 and 1000 tokens per page: 1 / (encode + prompt prefill + tokens / decode rate).

`--smoke` runs the same code on a CPU build with small shapes, few tokens and no VRAM polling.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a script on the GPU machine: the repo root is on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The appliance package first: on a CUDA build of llama.cpp it makes libstdc++ global before numpy
# or llama.cpp load (appliance/llama_preload.py; without it a load crashed once numpy was imported).
import appliance  # noqa: F401, I001
import numpy as np

T = TypeVar("T")
SPECULATION_RUNS = (
    "hint_100",
    "script_no_draft",
    "script_hint_100",
    "script_hint_corrupted",
    "text_no_draft",
    "text_hint_corrupted",
)
ANCHORS = {
    "hunyuan_ocr_rtx4090_vllm_bf16_pages_s": 0.59,
    "hunyuan_ocr_rtx4090_vllm_bf16_tok_s": 393,
    "hunyuan_ocr_llamacpp_decode_tok_s": 84.6,
    "hunyuan_ocr_llamacpp_dflash_tok_s": 167,
    "ceiling_0.6b_q8_0_rtx4090_tok_s": 1600,
    "ceiling_0.6b_q8_0_h200_tok_s": 7600,
}
PAGE_TOKENS = (600, 1000)


class VramPoll:
    """Peak GPU memory in use (MiB, nvidia-smi) while the block runs, minus the reading before it."""

    def __init__(self, baseline: int | None, interval_s: float = 0.02) -> None:
        # The baseline is read by the parent process before it starts this one, so nothing is
        # forked here before CUDA has loaded the model.
        self.enabled = baseline is not None and shutil.which("nvidia-smi") is not None
        self.interval_s = interval_s
        self.baseline = baseline or 0
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def read() -> int:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(result.stdout.split()[0])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> VramPoll:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.read())

    @property
    def used_mib(self) -> int | None:
        return self.peak - self.baseline if self.enabled else None


class ForcedLength:
    """A decoding target that never ends: random weights write end tokens and loops at will."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        rows: np.ndarray = self._context.append(tokens)
        return rows

    def rewind(self, count: int) -> None:
        self._context.rewind(count)

    def is_end(self, token: int) -> bool:
        return False


class Scripted(ForcedLength):
    """A target that pays the model's real cost for every append but writes a given token sequence.

    A random-weight model falls into repeating one token, which any n-gram lookup drafts
    perfectly; real pages do not. Here each logits row the model returned is steered, in place, so
    that its argmax is the script's next token, so drafting meets text-like output (words repeat,
    n-grams recur, a corrupted hint misleads) while every forward pass still runs on the GPU and the
    loop still works on the model's own 152k-entry rows (a softmax over them per written token).
    """

    def __init__(self, context: Any, script: Sequence[int], n_vocab: int) -> None:
        super().__init__(context)
        self._script = list(script)
        self._n_vocab = n_vocab
        self._fed = 0  # generated tokens appended so far (not counting rewound ones)

    def steer(self, row: np.ndarray, index: int) -> np.ndarray:
        """The row with the script's token `index` raised just above the row's maximum."""
        row[self._script[min(index, len(self._script) - 1)]] = row.max() + 1.0
        return row

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        rows = super().append(tokens)
        for index in range(len(tokens)):
            self.steer(rows[index], self._fed + index + 1)
        self._fed += len(tokens)
        return rows

    def rewind(self, count: int) -> None:
        super().rewind(count)
        self._fed -= count


def text_like_script(length: int, n_vocab: int, seed: int = 0) -> list[int]:
    """Token ids with the statistics of running text: Zipf-distributed words of 1 to 3 tokens."""
    rng = np.random.default_rng(seed)
    words = [list(rng.integers(1000, n_vocab, int(rng.integers(1, 4)))) for _ in range(3000)]
    weights = _zipf(len(words))
    script: list[int] = []
    while len(script) < length:
        script.extend(int(t) for t in words[int(rng.choice(len(words), p=weights))])
    return script[:length]


def _zipf(count: int) -> np.ndarray:
    """Word frequencies of running text: the word of rank r is drawn with weight 1 / r^1.1."""
    weights = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** 1.1
    weights /= weights.sum()
    return weights


def synthetic_page(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A white page with dark text-like strokes in lines (RGB); content does not change the cost."""
    rng = np.random.default_rng(seed)
    page = np.full((height, width, 3), 245, dtype=np.uint8)
    for top in range(60, height - 60, 36):
        left = 60
        while left < width - 120:
            word = int(rng.integers(20, 110))
            page[top : top + 18, left : left + word] = rng.integers(0, 80, size=(18, word, 1), dtype=np.uint8)
            left += word + int(rng.integers(8, 20))
    return page


def corrupt(tokens: Sequence[int], rate: float, n_vocab: int, seed: int = 0) -> list[int]:
    """Tokens with a fraction `rate` of them replaced, dropped or followed by a stray token (2:1:1)."""
    return _misread(tokens, rate, lambda rng: rng.randrange(n_vocab), seed)


def _misread(
    items: Sequence[T], rate: float, stray: Callable[[random.Random], T], seed: int, keep: Sequence[T] = ()
) -> list[T]:
    """Items with a fraction `rate` replaced by `stray`, dropped or followed by one (2:1:1); `keep`: never."""
    rng = random.Random(seed)
    out: list[T] = []
    for item in items:
        if item in keep or rng.random() >= rate:
            out.append(item)
            continue
        kind = rng.random()
        if kind < 0.5:
            out.append(stray(rng))
        elif kind < 0.75:
            continue
        else:
            out.extend((item, stray(rng)))
    return out


def text_like_text(seed: int = 0, words: int = 4000) -> str:
    """Receipt-like text: Zipf-distributed words and amounts, a line break every few words."""
    rng = np.random.default_rng(seed)
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    vocabulary = ["".join(rng.choice(list(letters), int(rng.integers(2, 9)))) for _ in range(600)] + [
        f"{rng.integers(0, 1000)}.{rng.integers(0, 100):02d}" for _ in range(200)
    ]
    chosen = rng.choice(len(vocabulary), size=words, p=_zipf(len(vocabulary)))
    lines, line = [], []
    for index in chosen:
        line.append(vocabulary[int(index)])
        if len(line) >= int(rng.integers(3, 7)):
            lines.append(" ".join(line))
            line = []
    return "\n".join(lines)


def corrupt_text(text: str, rate: float, seed: int = 0) -> str:
    """Text with a fraction `rate` of its characters replaced, dropped or followed by a stray one (2:1:1).

    Line breaks are kept: they come from the page's layout, not from misread characters.
    """
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(_misread(text, rate, lambda rng: rng.choice(alphabet), seed, keep="\n"))


def _timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def encode_ms(runtime: Any, projector: Any, prompt: str, image: np.ndarray) -> tuple[float, int]:
    """Time libmtmd's image encoder alone (no decoding of its embeddings); returns (ms, image tokens)."""
    from llama_cpp import mtmd_cpp

    with runtime.prompt_chunks(projector, prompt, image) as chunks:
        for index in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, index)
            if mtmd_cpp.mtmd_input_chunk_get_type(chunk) != mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                started = time.perf_counter()
                if mtmd_cpp.mtmd_encode_chunk(projector.ctx, chunk) != 0:
                    raise RuntimeError("mtmd_encode_chunk failed")
                return (time.perf_counter() - started) * 1000, int(
                    mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
                )
    raise RuntimeError("the prompt holds no image")


def measure_one(
    args: argparse.Namespace, quant: str, budget: int, save_to: Path, vram_baseline: int | None
) -> dict[str, Any]:
    """Every figure for one quant under one budget (run in a process of its own).

    The text side runs first, after a text prompt as long as a page's (the KV cache does not care
    what the tokens are), the image side last; what is measured is saved after every stage, so a
    crash in one stage keeps the figures of those before it.
    """
    from appliance.engines.vlm_gguf import memory, runtime
    from appliance.engines.vlm_gguf.decoding import DraftPolicy, greedy_decode
    from appliance.engines.vlm_gguf.draft_length import BatchCosts
    from appliance.engines.vlm_gguf.drafts import HintDraft, TextHintDraft
    from appliance.engines.vlm_gguf.profiles import profile_for

    model_path = args.model_dir / f"model-{quant}.gguf"
    mmproj_path = args.model_dir / "mmproj-f16.gguf"
    profile = profile_for("lightonocr")
    gpu = runtime.supports_gpu()
    shape = runtime.model_shape(model_path, mmproj_path, None)
    min_ctx = profile.image_max_tokens + profile.max_tokens + 256
    plan = memory.plan_memory(
        shape, budget, max(args.want_ctx, min_ctx), min_ctx, gpu=gpu, image_tokens=profile.image_max_tokens
    )
    threads = args.threads or os.cpu_count() or 1
    result: dict[str, Any] = {"quant": quant, "budget_mib": budget, "gpu": gpu, "plan": plan.to_dict()}
    result["files_mib"] = {
        "model": round(model_path.stat().st_size / 2**20, 1),
        "mmproj": round(mmproj_path.stat().st_size / 2**20, 1),
    }
    vram = VramPoll(vram_baseline)

    def stage(name: str) -> None:
        result["peak_vram_mib"] = vram.used_mib
        result["vram_baseline_mib"] = vram.baseline if vram.enabled else None
        save_to.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"[{quant} {budget}] {name}", file=sys.stderr, flush=True)

    stage("planned")
    # The poll starts once the model and its context are loaded: the weights and the KV cache stay
    # allocated, so the peak is still seen, and no nvidia-smi is forked while CUDA loads the model
    # (a suspect in the segfaults seen inside llama_model_load_from_file on the H200).
    started = time.perf_counter()
    model = runtime.TextModel(model_path, n_gpu_layers=plan.n_gpu_layers)
    settings = runtime.ContextSettings(
        n_ctx=plan.n_ctx, n_batch=512, n_threads=threads, kv_type=plan.kv_type, flash_attention=True
    )
    context = runtime.Context(model, settings)
    result["load_s"] = round(time.perf_counter() - started, 2)
    with vram:
        stage("text model loaded")

        # Prefill: one page's prompt length of text tokens (image tokens cost the same to decode).
        rng = np.random.default_rng(1)
        prefix = [int(t) for t in rng.integers(1000, 100000, args.prompt_tokens)]
        prefill = []
        for _ in range(args.repeats + 1):
            context.reset()
            prefill.append(_timed(lambda: context.append(prefix, logits=False)))
        result["prefill_tokens"] = len(prefix)
        result["prefill_tok_s"] = round(len(prefix) / (statistics.median(prefill[1:]) / 1000), 1)
        stage("prefill")

        # One cost memory for every run, as the engine keeps one over its pages.
        costs = BatchCosts()

        def decode(
            draft: Any = None, script: list[int] | None = None
        ) -> tuple[list[int], dict[str, Any], float]:
            context.reset()
            first = context.append(prefix, logits=False)[-1]
            context.seal()
            target = ForcedLength(context) if script is None else Scripted(context, script, model.n_vocab)
            if isinstance(target, Scripted):
                first = target.steer(first.copy(), 0)
            started = time.perf_counter()
            generation = greedy_decode(
                target, first, max_tokens=args.tokens, draft=draft, policy=DraftPolicy(), costs=costs
            )
            seconds = time.perf_counter() - started
            return generation.tokens, generation.stats.to_dict(), seconds

        own, stats, seconds = decode()
        result["decode_tok_s"] = round(len(own) / seconds, 1)
        result["decode_stats"] = stats
        result["own_output_distinct_tokens"] = len(set(own))
        stage("decode")

        # The same tokens one at a time, without argmax and probabilities: the loop's own overhead.
        context.reset()
        context.append(prefix, logits=False)
        context.seal()
        raw_ms = _timed(lambda: [context.append([token]) for token in own])
        result["decode_raw_tok_s"] = round(len(own) / (raw_ms / 1000), 1)

        # Verification cost after the prompt and the generated tokens: append k+1, rewind, repeat.
        verify_ms: dict[int, float] = {}
        probe = own[: args.k_max + 1]
        for k in range(args.k_max + 1):
            samples: list[float] = []
            for _ in range(args.verify_repeats + 1):
                batch = probe[: k + 1]
                samples.append(_timed(lambda batch=batch: context.append(batch)))  # type: ignore[misc]
                context.rewind(k + 1)
            verify_ms[k] = statistics.median(samples[1:])
        result["verify_position"] = context.position
        result["verify_ms"] = {str(k): round(ms, 3) for k, ms in verify_ms.items()}
        result["verify_relative"] = {str(k): round(ms / verify_ms[0], 3) for k, ms in verify_ms.items() if k}
        stage("verify")

        # (a) the model's own output as it writes it; (b) a text-like script the model is made to
        # write (see Scripted), drafted from itself and from a copy corrupted at the measured rate.
        script = text_like_script(args.tokens + 1, model.n_vocab)
        runs: dict[str, tuple[list[int], list[int] | None, list[int]]] = {
            "hint_100": (own, None, own),
            "script_no_draft": ([], script, script),
            "script_hint_100": (script, script, script),
            "script_hint_corrupted": (corrupt(script, args.hint_rate, model.n_vocab), script, script),
        }
        result["hint_rate"] = args.hint_rate
        result["script_distinct_tokens"] = len(set(script[: args.tokens]))

        def speculate(
            name: str, source: Any, written: list[int] | None, expected: list[int], **hint: int
        ) -> None:
            tokens, stats, seconds = decode(source, written)
            same = sum(1 for a, b in zip(tokens, expected, strict=False) if a == b)
            result[name] = {
                "tok_s": round(len(tokens) / seconds, 1),
                "acceptance": stats["acceptance_rate"],
                "tokens_per_step": stats["tokens_per_step"],
                "mean_k": stats["mean_k"],
                "draft_disabled_after": stats["draft_disabled_after"],
                "same_as_expected": round(same / max(len(expected), 1), 4),
                **hint,
            }
            stage(name)

        for name, (hint, written, expected) in runs.items():
            speculate(name, HintDraft(hint) if hint else None, written, expected, hint_tokens=len(hint))

        # (c) the cascade's own draft path: text the model is made to write, drafted by
        # TextHintDraft from a copy whose characters are corrupted at the ONNX engine's measured
        # character rate (6.1%: bench/README.md, Findings), as the ONNX text of a page is.
        if args.hint_char_rate is not None:
            text = text_like_text()
            written = model.tokenize(text)[: args.tokens + 1]
            shown = b"".join(model.piece(token) for token in written).decode("utf-8", errors="replace")
            hint_text = corrupt_text(shown, args.hint_char_rate)
            result["hint_char_rate"] = args.hint_char_rate
            speculate("text_no_draft", None, written, written, hint_chars=0)
            draft = TextHintDraft(hint_text, model.piece, model.tokenize)
            speculate("text_hint_corrupted", draft, written, written, hint_chars=len(hint_text))

        # The image side: libmtmd's encoder alone, then the whole page prompt (encode + decode).
        projector = runtime.Projector(mmproj_path, model, threads, gpu, profile.image_max_tokens)
        stage("projector loaded")
        prompt = runtime.render_prompt(model, profile.messages(projector.marker))
        image = synthetic_page(*args.page_size)
        encodes = [encode_ms(runtime, projector, prompt, image) for _ in range(args.repeats + 1)][1:]
        result["image_tokens"] = encodes[0][1]
        result["encode_ms"] = round(statistics.median(ms for ms, _ in encodes), 2)
        stage("encode")
        prompt_runs = []
        for _ in range(args.repeats + 1):
            started = time.perf_counter()
            evaluated = runtime.evaluate_prompt(projector, context, prompt, image)
            prompt_runs.append((time.perf_counter() - started) * 1000)
        result["prompt_tokens"] = evaluated.prompt_tokens
        result["prompt_ms"] = round(statistics.median(prompt_runs[1:]), 2)
        projector.close()
        context.close()
        model.close()
    stage("done")
    return result


def add_pages_per_s(result: dict[str, Any]) -> None:
    """Pages/s at 600 and 1000 tokens: 1 / (page prompt incl. encode + tokens / decode rate)."""
    if "prompt_ms" in result:
        fixed_s = result["prompt_ms"] / 1000
    elif "prefill_tok_s" in result:  # no image figures: the prompt's tokens alone, encode left out
        fixed_s = result["prefill_tokens"] / result["prefill_tok_s"]
    else:
        return
    result["page_fixed_s"] = round(fixed_s, 4)
    rates = {"no_draft": result.get("decode_tok_s")}
    rates |= {name: result[name]["tok_s"] for name in SPECULATION_RUNS if name in result}
    result["pages_per_s"] = {
        name: {str(n): round(1 / (fixed_s + n / rate), 3) for n in PAGE_TOKENS}
        for name, rate in rates.items()
        if rate
    }


def _cell(value: Any, spec: str) -> str:
    """A table cell: the value formatted, or '-' where the run did not get that far."""
    return "-" if value is None else format(value, spec)


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'quant':<7} {'budget':>6} {'ngl':>3} {'n_ctx':>6} {'kv':>4} {'load s':>6} {'enc ms':>7} "
        f"{'img tok':>7} {'prompt ms':>9} {'prefill t/s':>11} {'dec t/s':>8} {'raw t/s':>8} {'VRAM MiB':>8} "
        f"{'p/s 600':>7} {'p/s 1000':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        plan = r["plan"]
        pps = r.get("pages_per_s", {}).get("no_draft", {})
        print(
            f"{r['quant']:<7} {r['budget_mib']:>6} {plan['n_gpu_layers']:>3} {plan['n_ctx']:>6} "
            f"{plan['kv_cache_type']:>4} {_cell(r.get('load_s'), '>6.1f')} "
            f"{_cell(r.get('encode_ms'), '>7.1f')} "
            f"{_cell(r.get('image_tokens'), '>7')} {_cell(r.get('prompt_ms'), '>9.1f')} "
            f"{_cell(r.get('prefill_tok_s'), '>11.0f')} {_cell(r.get('decode_tok_s'), '>8.1f')} "
            f"{_cell(r.get('decode_raw_tok_s'), '>8.1f')} {_cell(r.get('peak_vram_mib'), '>8')} "
            f"{_cell(pps.get('600'), '>7.3f')} {_cell(pps.get('1000'), '>8.3f')}"
        )
    print("\nverify cost of k drafts (append k+1 tokens) relative to one token:")
    for r in results:
        rel = " ".join(f"{k}:{v:.2f}" for k, v in r.get("verify_relative", {}).items())
        print(f"{r['quant']:<7} {r['budget_mib']:>6} {rel}")
    print("\nspeculation (tok/s, acceptance, tokens per forward pass; pages/s at 600 / 1000 tokens):")
    for r in results:
        for name in SPECULATION_RUNS:
            if name not in r:
                continue
            run, pps = r[name], r.get("pages_per_s", {}).get(name, {})
            label = name
            if name == "script_hint_corrupted":
                label = f"{name} (r={r['hint_rate']:.3f})"
            elif name == "text_hint_corrupted":
                label = f"{name} (c={r['hint_char_rate']:.3f})"
            print(
                f"{r['quant']:<7} {r['budget_mib']:>6} {label:<32} {run['tok_s']:>7.1f} tok/s"
                f"  acc {_cell(run['acceptance'], '.3f')}  {run['tokens_per_step']} tok/step"
                f"  {_cell(pps.get('600'), '.3f')} / {_cell(pps.get('1000'), '.3f')} pages/s"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--quant", action="append", default=[])
    parser.add_argument("--budget", action="append", type=int, default=[], help="VRAM budget in MiB")
    parser.add_argument(
        "--want-ctx", type=int, default=0, help="context the plan starts from (0: one page's need)"
    )
    parser.add_argument("--tokens", type=int, default=1000, help="tokens generated per decode run")
    parser.add_argument("--k-max", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=1616, help="text prompt length before decoding")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--verify-repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--page-size", type=int, nargs=2, default=(1540, 1100), metavar=("W", "H"))
    parser.add_argument("--hint-rate", type=float, help="token disagreement rate of the corrupted hint")
    parser.add_argument("--hint-rate-json", type=Path, help="JSON holding the rate as all.token_rate")
    parser.add_argument(
        "--hint-char-rate",
        type=float,
        help="character error rate of the text hint (bench/README.md, Findings); runs the text-hint pair",
    )
    parser.add_argument("--out", type=Path, help="folder for vlm_gpu_bench.json")
    parser.add_argument("--smoke", action="store_true", help="CPU check: few tokens, one repeat")
    parser.add_argument("--one", nargs=3, metavar=("QUANT", "BUDGET", "JSON"), help=argparse.SUPPRESS)
    parser.add_argument("--vram-baseline", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hint_rate is None:
        if args.hint_rate_json is None:
            parser.error("give --hint-rate or --hint-rate-json")
        args.hint_rate = json.loads(args.hint_rate_json.read_text(encoding="utf-8"))["all"]["token_rate"]
    if args.smoke:
        args.tokens, args.repeats, args.verify_repeats, args.k_max, args.prompt_tokens = 48, 1, 2, 4, 200
    if args.one:
        quant, budget, out = args.one
        # PYTHONFAULTHANDLER=1 in the environment makes a crash in llama.cpp say which Python line
        # called it (not enabled here: its signal handlers were present in every load that crashed).
        measure_one(args, quant, int(budget), Path(out), args.vram_baseline)
        return 0

    quants = args.quant or ["Q8_0", "Q4_K_M"]
    budgets = args.budget or [8192, 16384]
    passthrough = list(argv if argv is not None else sys.argv[1:])
    out_dir = args.out or Path()
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "device": _device_name(),
        "tokens_per_decode_run": args.tokens,
        "page_size": list(args.page_size),
        "want_ctx": args.want_ctx,
        "hint_rate": args.hint_rate,
        "anchors": ANCHORS,
        "results": [],
    }
    results: list[dict[str, Any]] = report["results"]
    for quant in quants:
        for budget in budgets:
            one_json = out_dir / f"vlm_gpu_{quant}_{budget}.json"
            command = [sys.executable, str(Path(__file__).resolve()), *passthrough]
            command += ["--hint-rate", str(args.hint_rate), "--one", quant, str(budget), str(one_json)]
            if shutil.which("nvidia-smi") and not args.smoke:  # the card before this run's process exists
                command += ["--vram-baseline", str(VramPoll.read())]
            started = time.perf_counter()
            status = subprocess.run(command, check=False).returncode
            if status != 0:
                print(f"{quant} at {budget} MiB failed (exit {status})", file=sys.stderr, flush=True)
            if not one_json.is_file():
                continue
            result = json.loads(one_json.read_text(encoding="utf-8"))
            result["exit_status"] = status
            add_pages_per_s(result)
            results.append(result)
            one_json.unlink()
            print(f"{quant} at {budget} MiB: done in {time.perf_counter() - started:.1f} s", flush=True)
            # Written after every run, so a run cut short still leaves what it measured.
            (out_dir / "vlm_gpu_bench.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print_table(results)
    return 0 if len(results) == len(quants) * len(budgets) else 1


def _device_name() -> str:
    if shutil.which("nvidia-smi") is None:
        return "cpu"
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or "unknown GPU"


if __name__ == "__main__":
    sys.exit(main())
