"""Trains the Qwen2-VL line reader from scratch on endless synthetic lines, within a wall-clock budget.

    python -m train.train_vlm --out DIR --minutes 7 [--fonts DIR --words FILE --workers 14 --batch 128]

Resumes from DIR/checkpoint when present (model, optimizer, scheduler, step, RNG), or takes the
weights of an earlier export with --init-from; stops before the budget (which counts start-up) and
writes DIR/checkpoint plus an HF export in DIR/hf that `train.eval_lines` reads and llama.cpp's
converter (quantize.gguf) turns into GGUF.

Rendering, not the GPU, is the slower side once the step runs without per-line loops
(`train.step`), so the GPU never waits for it: a rendered batch is kept on the device and trained
on again (up to --max-uses times, picked at random among the last --replay batches) whenever no
fresh one is ready. Every batch is still new text seen a few times, not a corpus to memorise.
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()  # the budget counts start-up: imports of torch/transformers take seconds

import argparse  # noqa: E402
import json  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Iterable  # noqa: E402
from itertools import islice  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from appliance.engines.vlm_gguf.line_image import LINE_HEIGHT, LINE_STRETCH, LineInput  # noqa: E402
from train.data import SyntheticLines, worker_init  # noqa: E402
from train.eval_lines import cer, read_lines  # noqa: E402
from train.grow import grown_state  # noqa: E402
from train.model import SIZES, PromptFormat, build_model, preprocessor_config  # noqa: E402
from train.render import (  # noqa: E402
    BILEVEL_SHARE,
    MORE_FACE_SHARE,
    PEN_SHARE,
    SCANNER_LEVELS_SHARE,
    Shares,
)
from train.schedule import RunBudget, by_steps, by_time  # noqa: E402
from train.step import line_loss, reference_loss  # noqa: E402
from train.text_source import common_chinese  # noqa: E402
from train.tokenizer import build_tokenizer, force_tokenizer_config  # noqa: E402
from train.vision_attention import group_vision_attention  # noqa: E402

_HELD_OUT_SEED = 424242  # never a training seed: training seeds are --seed * 1009 + worker
_MAX_SKIPPED_IN_ROW = 50  # a run whose gradients stay non-finite stops instead of idling


def _log(out: Path, message: str) -> None:
    line = f"[{time.monotonic() - _STARTED:7.1f}s] {message}"
    print(line, flush=True)
    with (out / "train.log").open("a", encoding="utf-8") as log:
        log.write(line + "\n")


def _peak_memory(device: Any) -> str:
    return f", {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB peak" if device.type == "cuda" else ""


class StepProfile:
    """torch.profiler over a few steps, its table written to the log: where a step's time goes."""

    WARM_UP = 100  # steps first: cuDNN/cuBLAS choices, the allocator's growth, the loader's start

    def __init__(self, steps: int, device: Any, first_step: int) -> None:
        self.steps, self.device, self._started = steps, device, 0.0
        self.start = first_step + self.WARM_UP
        self._profiler: Any = None

    def before(self, step: int) -> None:
        if self.steps and step == self.start and self._profiler is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
                torch.cuda.synchronize()
            profiler = torch.profiler.profile(activities=activities)
            profiler.__enter__()
            self._profiler = profiler
            self._started = time.monotonic()

    def after(self, step: int, out: Path) -> None:
        if self._profiler is None or step < self.start + self.steps:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.monotonic() - self._started
        self._profiler.__exit__(None, None, None)
        order = "self_cuda_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        table = self._profiler.key_averages().table(sort_by=order, row_limit=30)
        _log(out, f"profiled steps {self.start}-{step}: {1000 * seconds / self.steps:.1f} ms a step\n{table}")
        table = self._profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
        _log(out, f"the same steps by host time:\n{table}")
        self._profiler = None
        self.steps = 0


def _shares(args: argparse.Namespace) -> Shares:
    """The renderer's optional steps at the shares this run was asked for."""
    return Shares(
        pen_share=args.pen_share,
        more_share=args.more_face_share,
        levels_share=args.levels_share,
        bilevel_share=args.bilevel_share,
    )


def _line_input(args: argparse.Namespace) -> LineInput:
    """How the run draws its lines: `--line-stretch`, `--line-height` and `--line-levels`."""
    levels = None if args.line_levels is None else (args.line_levels[0], args.line_levels[1])
    return LineInput(stretch=args.line_stretch, height=args.line_height, levels=levels)


def _held_out(args: argparse.Namespace, tokenizer: Any) -> list[Any]:
    lines = SyntheticLines(
        tokenizer,
        args.fonts,
        args.words,
        1,
        _HELD_OUT_SEED,
        line_input=_line_input(args),
        shares=_shares(args),
    ).samples(0)
    return list(islice(lines, args.eval_lines))


def evaluate(model: Any, tokenizer: Any, held_out: list[Any], batch: int) -> tuple[float, float, list[str]]:
    model.eval()
    texts = read_lines(model, tokenizer, [s.image for s in held_out], batch, pad=True)
    model.train()
    pairs = [(s.text, t) for s, t in zip(held_out, texts, strict=True)]
    return cer(pairs), cer(pairs, spaced=True), texts


def timed_evaluation(
    model: Any, tokenizer: Any, held_out: list[Any], *, budget: RunBudget, out: Path, step: int
) -> None:
    """Reads the held-out lines, logs their CER and gives the budget the seconds the reading took."""
    started = time.monotonic()
    nospace, spaced, texts = evaluate(model, tokenizer, held_out, 128)
    budget.eval_seconds = time.monotonic() - started
    _log(
        out,
        f"step {step} held-out CER {nospace:.4f} (spaced {spaced:.4f}) in {budget.eval_seconds:.1f} s; "
        # An untrained model writes up to the token cap: the example is cut to a line's length.
        f"e.g. {held_out[0].text!r} -> {texts[0][:80]!r}",
    )


def export(model: Any, tokenizer_dir: Path, out: Path, line_input: LineInput) -> None:
    """HF export (fp32 weights: the model is small), tokenizer, preprocessor and line-input files."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for item in tokenizer_dir.iterdir():
        shutil.copy2(item, tmp / item.name)
    force_tokenizer_config(tmp)
    config = preprocessor_config(line_input.height)
    (tmp / "preprocessor_config.json").write_text(json.dumps(config, indent=2) + "\n")
    line_input.write(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def save_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, step: int) -> None:
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "step": step,
        "rng": {
            "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        },
    }
    path.mkdir(parents=True, exist_ok=True)
    torch.save(state, path / "state.pt.tmp")
    (path / "state.pt.tmp").replace(path / "state.pt")  # a crash mid-save keeps the previous one


class Batches:
    """Fresh batches from the loader when one is ready, else one of the recent ones again.

    A thread drains the DataLoader into a short queue; `next_batch` takes from it without waiting
    while some kept batch has been used fewer than `max_uses` times, and waits otherwise.
    """

    def __init__(self, loader: Iterable[dict[str, Any]], device: Any, keep: int, max_uses: int) -> None:
        self.device, self.keep, self.max_uses = device, keep, max_uses
        self.kept: list[list[Any]] = []  # [batch on device, uses]
        self.fresh_count = 0
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=8)
        self._rng = random.Random(0)
        threading.Thread(target=self._fill, args=(loader,), daemon=True).start()

    def _fill(self, loader: Iterable[dict[str, Any]]) -> None:
        try:
            for batch in loader:
                self._queue.put(batch)
        except BaseException as error:  # handed to the training loop, which raises it
            self._queue.put({"error": error})

    def _take(self, block: bool) -> dict[str, Any]:
        batch = self._queue.get(block=block)
        if "error" in batch:
            # Without this the loop would train on the kept batches until each was used up, then
            # wait forever for a loader that is gone.
            raise RuntimeError("the data loader stopped") from batch["error"]
        return batch

    def next_batch(self) -> dict[str, Any]:
        usable = [entry for entry in self.kept if entry[1] < self.max_uses]
        try:
            cpu_batch = self._take(block=not usable)
        except queue.Empty:
            entry = self._rng.choice(usable)
            entry[1] += 1
            return entry[0]  # type: ignore[no-any-return]
        batch = {k: v.to(self.device, non_blocking=True) for k, v in cpu_batch.items()}
        self.kept.append([batch, 1])
        if len(self.kept) > self.keep:
            self.kept.pop(0)
        self.fresh_count += 1
        return batch


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m train.train_vlm", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock budget, start-up included")
    parser.add_argument("--fonts", type=Path, default=Path("/usr/share/fonts"))
    parser.add_argument("--words", type=Path, default=Path("/usr/share/dict/words"))
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--replay", type=int, default=256, help="recent batches kept on the device")
    parser.add_argument("--max-uses", type=int, default=4, help="times a rendered batch may be trained on")
    parser.add_argument("--init-from", type=Path, help="an HF export whose weights to start from")
    parser.add_argument("--start-step", type=int, default=0, help="schedule position with --init-from")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--total-steps", type=int, default=20000, help="length of the cosine schedule")
    parser.add_argument(
        "--schedule",
        choices=("steps", "time"),
        default="steps",
        help="the cosine over --total-steps, or over the time from the warm-up's end to the run's stop "
        "(the floor reached as --minutes end, on a box of any speed; a run of one call: no resuming)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help="stop after this many steps even with minutes left (0: the minutes alone), so that a run on a "
        "faster card trains as many steps as one it is compared with; with --schedule steps only",
    )
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument(
        "--line-stretch",
        type=float,
        default=LINE_STRETCH,
        help="lines drawn this much wider than their aspect (prepare_line's stretch; kept in the export)",
    )
    parser.add_argument(
        "--line-height",
        type=int,
        default=LINE_HEIGHT,
        help="lines drawn this many pixels high, a multiple of 28 (prepare_line's height; kept in the "
        "export): 56 gives each glyph two rows of tokens",
    )
    parser.add_argument(
        "--line-levels",
        type=int,
        nargs=2,
        metavar=("INK", "PAPER"),
        help="level each line's ink and paper to these grey levels (prepare_line's levels; kept in the "
        "export, and the appliance reads its lines so): every line reaches the model at one contrast",
    )
    parser.add_argument(
        "--pen-share",
        type=float,
        default=PEN_SHARE,
        help="share of lines marked by a pen after printing (train.render's PEN_SHARE; off by default)",
    )
    parser.add_argument(
        "--more-face-share",
        type=float,
        default=MORE_FACE_SHARE,
        help="share of Latin lines drawn in the fonts' more/ faces (train.render's MORE_FACE_SHARE; off)",
    )
    parser.add_argument(
        "--levels-share",
        type=float,
        default=SCANNER_LEVELS_SHARE,
        help="share of lines given a scanner's levels, paper to white (train.render's SCANNER_LEVELS_SHARE)",
    )
    parser.add_argument(
        "--bilevel-share",
        type=float,
        default=BILEVEL_SHARE,
        help="share of lines scanned one bit a pixel, black or white (train.render's BILEVEL_SHARE)",
    )
    parser.add_argument(
        "--swap-tokens",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="share of the answer tokens given to the model swapped for others, the targets kept "
        "(train.swapped_tokens): the line's pixels, not the token before, must decide",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--eval-lines", type=int, default=256)
    parser.add_argument("--save-every", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile the loss (dynamic shapes; minutes to compile)"
    )
    parser.add_argument(
        "--profile-steps", type=int, default=0, help="profile this many steps, 100 steps in; log the tables"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Before any cv2 call, so forked data workers inherit one thread each instead of a thread pool:
    # fifteen workers each running OpenCV on every core thrash the CPU.
    cv2.setNumThreads(1)
    # Its evaluation's seconds come from the held-out reading before the first step.
    budget = RunBudget(_STARTED, args.minutes * 60, max_steps=args.max_steps)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        # torch 2.13 picks cuDNN's attention by default on Hopper; its backward returns NaN for
        # some inputs (pytorch/pytorch#196678; an H200 run went NaN at step ~2,000 with it) and it
        # builds a graph per new shape (about 3 ms of host time per call, twelve calls a step).
        # Flash and memory-efficient attention give the same result without either.
        torch.backends.cuda.enable_cudnn_sdp(False)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = args.out / "tokenizer"
    tokenizer = build_tokenizer(tokenizer_dir, common_chinese())
    torch.manual_seed(args.seed)
    model = build_model(tokenizer, SIZES[args.size]).to(device)
    group_vision_attention(model)  # same result, a few batched attention calls instead of one per line
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
        fused=device.type == "cuda",
    )
    timed = args.schedule == "time"
    factor = by_time(args.warmup, budget) if timed else by_steps(args.total_steps, args.warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    step = 0
    checkpoint = args.out / "checkpoint"
    if (checkpoint / "state.pt").exists():
        if timed:
            # The cosine would start again from the peak: the minutes of this call are not the run's.
            raise SystemExit(f"--schedule time does not resume: {checkpoint} holds a run; give a new --out")
        state = torch.load(checkpoint / "state.pt", map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = state["step"]
        torch.set_rng_state(state["rng"]["torch"].cpu())
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        if state["rng"]["cuda"] is not None and device.type == "cuda":
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
        _log(args.out, f"resumed at step {step}")
    elif args.init_from:
        from transformers import Qwen2VLForConditionalGeneration

        exported = Qwen2VLForConditionalGeneration.from_pretrained(args.init_from, dtype=torch.float32)
        # The export's shape, or a deeper --size: its blocks, and added ones that change nothing yet.
        state, added = grown_state(model.state_dict(), exported.state_dict())
        model.load_state_dict(state)
        if any(added.values()):
            _log(args.out, f"grown from {args.init_from}: blocks added {added}")
        step = args.start_step
        with warnings.catch_warnings():  # stepping the schedule ahead before any optimizer step is meant
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(step):
                scheduler.step()
        _log(
            args.out,
            f"weights from {args.init_from} (trained on {LineInput.of_export(args.init_from)}, now"
            f" {_line_input(args)}), schedule at step {step}",
        )
    params = sum(p.numel() for p in model.parameters())
    _log(args.out, f"device {device}, {params / 1e6:.2f}M parameters, vocabulary {len(tokenizer)}")
    if args.swap_tokens > 0.0:
        _log(args.out, f"answer tokens given swapped: {args.swap_tokens:.0%}")
    # A resumed run draws new lines: the data seed moves with the step it starts from.
    data = SyntheticLines(
        tokenizer,
        args.fonts,
        args.words,
        args.batch,
        args.seed * 100003 + step,
        line_input=_line_input(args),
        shares=_shares(args),
        swap_share=args.swap_tokens,
    )
    loader = DataLoader(
        data,
        batch_size=None,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if args.workers else None,
        worker_init_fn=worker_init,
    )
    held_out = _held_out(args, tokenizer)
    model.train()
    batches = Batches(loader, device, args.replay, args.max_uses)
    first = batches.next_batch()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        fast, slow = line_loss(model, first), reference_loss(model, first, PromptFormat(tokenizer).pad_id)
    _log(args.out, f"first batch: loss {fast.item():.5f}, transformers' own forward {slow.item():.5f}")
    # Timed before training, not guessed: the run's stop keeps room for its last evaluation, and a
    # guess of a minute left fine-tunes from K, whose 256 lines read in 3 s on an H100, stopping 57 s
    # early (train/README.md, "The time schedule on an H100"). The weights it starts from read
    # slowest if untrained (every line to the token cap), so later evaluations take no longer.
    timed_evaluation(model, tokenizer, held_out, budget=budget, out=args.out, step=step)
    window_start, window_samples, window_steps, losses = time.monotonic(), 0, 0, []
    # The first batch (the check above) is not trained on: the first window's fresh share starts after it.
    waited, fresh_at_window = 0.0, batches.fresh_count
    skipped = skipped_in_row = 0  # steps dropped for a non-finite gradient
    profile = StepProfile(args.profile_steps, device, step)
    # Compiled after the first batch's check, so that check compares two eager forwards.
    loss_of = torch.compile(line_loss, dynamic=True) if args.compile else line_loss
    while True:
        profile.before(step)
        fetched = time.monotonic()
        batch = batches.next_batch()
        tick = time.monotonic()
        waited += tick - fetched  # time the GPU sat waiting for rendered lines
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = loss_of(model, batch)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # A non-finite gradient would make every weight NaN for good (and the next checkpoint
        # with it): that step is dropped. Reading the norm waits for the GPU, which a host-bound
        # step barely notices.
        if not torch.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            skipped_in_row += 1
            if skipped_in_row >= _MAX_SKIPPED_IN_ROW:
                raise RuntimeError(f"{skipped_in_row} steps in a row had non-finite gradients (step {step})")
            continue
        skipped_in_row = 0
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        profile.after(step, args.out)
        losses.append(loss.detach())  # no device sync each step: read at log time
        window_samples += batch["input_ids"].shape[0]
        window_steps += 1
        budget.step_seconds = 0.9 * budget.step_seconds + 0.1 * (time.monotonic() - tick)
        if step % args.log_every == 0:
            elapsed = time.monotonic() - window_start
            mean_loss = torch.stack(losses).mean().item()
            _log(
                args.out,
                f"step {step} loss {mean_loss:.4f} lr {scheduler.get_last_lr()[0]:.2e} "
                f"{window_steps / elapsed:.2f} steps/s {window_samples / elapsed:.0f} samples/s "
                f"{(batches.fresh_count - fresh_at_window) / window_steps:.0%} fresh, "
                f"{waited / elapsed:.0%} waiting for data{_peak_memory(device)}"
                + (f", {skipped} steps dropped (non-finite gradient)" if skipped else ""),
            )
            window_start, window_samples, window_steps, losses, waited = time.monotonic(), 0, 0, [], 0.0
            skipped = 0
            fresh_at_window = batches.fresh_count
        if step % args.eval_every == 0:
            timed_evaluation(model, tokenizer, held_out, budget=budget, out=args.out, step=step)
        if step % args.save_every == 0:
            save_checkpoint(checkpoint, model, optimizer, scheduler, step)
            # A call cut short still leaves a model.
            export(model, tokenizer_dir, args.out / "hf", _line_input(args))
        if budget.spent(step, time.monotonic()):
            break
    _log(args.out, f"stopping at step {step}")
    save_checkpoint(checkpoint, model, optimizer, scheduler, step)
    export(model, tokenizer_dir, args.out / "hf", _line_input(args))
    nospace, spaced, _ = evaluate(model, tokenizer, held_out, 128)
    _log(
        args.out,
        f"final step {step} held-out CER {nospace:.4f} (spaced {spaced:.4f}); export in {args.out / 'hf'}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
