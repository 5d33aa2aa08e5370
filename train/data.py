"""Synthetic line batches rendered on the fly in DataLoader workers, as `train.step` takes them."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from train.model import IGNORE, MERGE, PATCH, PromptFormat
from train.render import (
    DEFAULT_LINE_INPUT,
    DEFAULT_SHARES,
    LineInput,
    LineRenderer,
    Shares,
    load_fonts,
    prepare_line,
)
from train.step import batch_indices
from train.swapped_tokens import swap_answer_tokens
from train.text_source import TextSource, label_of


@dataclass
class Sample:
    """One rendered, prepared line with its text."""

    text: str
    image: np.ndarray  # prepared: (n*28) x (k*28) RGB, n rows of tokens (1 unless drawn taller)


def collate_lines(
    samples: Sequence[Sample],
    prompt: PromptFormat,
    *,
    swap_share: float = 0.0,
    rng: np.random.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """One training batch for `train.step.line_loss`: lines padded with white to one width, as uint8.

    Padding on the right with white is what `prepare_line` already does to reach a multiple of
    28 px, so a wider line is still a line the appliance could send. uint8 images are a sixteenth
    of float patches to pass between processes; the patches are cut on the GPU. With `swap_share`
    (drawn with `rng`), that share of the answer tokens the model is given are swapped
    (`train.swapped_tokens`); the labels stay true.
    """
    width = max(s.image.shape[1] for s in samples)
    height = samples[0].image.shape[0]
    images = np.full((len(samples), height, width, 3), 255, np.uint8)
    tokens = (height // (PATCH * MERGE)) * (width // (PATCH * MERGE))
    ids, labels = [], []
    for row, sample in enumerate(samples):
        images[row, :, : sample.image.shape[1]] = sample.image
        sample_ids, sample_labels = prompt.example(tokens, sample.text)
        ids.append(sample_ids)
        labels.append(sample_labels)
    length = max(len(x) for x in ids)
    input_ids = np.full((len(ids), length), prompt.pad_id, np.int64)
    label_ids = np.full((len(ids), length), IGNORE, np.int64)
    for row, (x, y) in enumerate(zip(ids, labels, strict=True)):
        input_ids[row, : len(x)] = x
        label_ids[row, : len(y)] = y
    if swap_share > 0.0:
        if rng is None:
            raise ValueError("swapping answer tokens needs a random generator")
        input_ids = swap_answer_tokens(input_ids, label_ids, swap_share, rng)
    indices = batch_indices(images, input_ids, label_ids, prompt.image_id)
    return {
        "images": torch.from_numpy(images),
        "input_ids": torch.from_numpy(input_ids),
        "labels": torch.from_numpy(label_ids),
        **{name: torch.from_numpy(value) for name, value in indices.items()},
    }


def worker_init(_worker_id: int) -> None:
    """One torch thread per worker (cv2's is set in the parent: setNumThreads in a forked child can hang)."""
    torch.set_num_threads(1)


class SyntheticLines(IterableDataset[dict[str, torch.Tensor]]):  # type: ignore[misc]  # torch untyped here
    """Endless batches of synthetic lines; each worker seeds its own text source and renderer.

    A worker renders a pool of `pool` batches' worth of lines, sorts them by width and cuts batches
    from neighbours, so a batch pads few patches and few tokens.
    """

    def __init__(
        self,
        tokenizer: Any,
        fonts: Path,
        words: Path | None,
        batch: int,
        seed: int,
        *,
        pool: int = 8,
        line_input: LineInput = DEFAULT_LINE_INPUT,
        shares: Shares = DEFAULT_SHARES,
        swap_share: float = 0.0,
    ) -> None:
        self.tokenizer, self.fonts, self.words = tokenizer, fonts, words
        self.batch, self.seed, self.pool = batch, seed, pool
        self.line_input, self.shares, self.swap_share = line_input, shares, swap_share

    def samples(self, worker: int) -> Iterator[Sample]:
        """Endless rendered samples for worker number `worker` (also used for held-out lines)."""
        source = TextSource(self.seed * 1009 + worker, self.words)
        renderer = LineRenderer(
            load_fonts(self.fonts),
            self.seed * 1009 + worker,
            **asdict(self.shares),
        )
        while True:
            text = source.line()
            try:
                image = renderer.render(text)
            except cv2.error as error:
                # One bad line must not end a paid GPU run, but it is said, not hidden: a renderer
                # bug that skipped many lines would bend the data (the empty crop was one).
                print(f"render skipped {text!r}: {error}", file=sys.stderr, flush=True)
                continue
            line = prepare_line(image, self.line_input)
            yield Sample(label_of(text), line)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker = info.id if info else 0
        prompt = PromptFormat(self.tokenizer)
        stream = self.samples(worker)
        shuffle = random.Random(self.seed + 7919 * worker)
        swaps = np.random.default_rng(self.seed + 7919 * worker)
        while True:
            pool = sorted(
                (next(stream) for _ in range(self.batch * self.pool)), key=lambda s: s.image.shape[1]
            )
            batches = [pool[i : i + self.batch] for i in range(0, len(pool), self.batch)]
            shuffle.shuffle(batches)
            for batch in batches:
                yield collate_lines(batch, prompt, swap_share=self.swap_share, rng=swaps)
