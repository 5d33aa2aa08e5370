"""The training loss of a batch of equal-width lines, without transformers' per-line Python loops.

Qwen2-VL's own forward builds the M-RoPE positions with a Python loop over the lines of a batch
(`get_rope_index`, a device sync per line) and the vision tower's rotary positions with another
(`get_vision_position_ids`); through them an H200 ran 1.5-2.1 steps a second at batch 256, and
12-16 at batch 128 without them. Here the batch's lines share one width (padded with white, as
`prepare_line` pads), so the positions are the same arithmetic done once, by the data workers
(`batch_indices`): the text's M-RoPE positions, the vision tower's rotary positions, where the
image tokens go and which positions carry a label. Nothing in the step then waits for the GPU (no
boolean-mask indexing, no host-to-device copy of a fresh tensor, no `.tolist()` of a device
tensor), so Python queues the next kernels while the GPU runs. The loss is the model's (mean cross
entropy over the answer tokens); `train.train_vlm` compares the two on its first batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own spelling

from train.model import IGNORE, IMAGE_MEAN, IMAGE_STD, MERGE, PATCH, TEMPORAL


def text_positions(input_ids: np.ndarray, image_id: int, rows: int = 1) -> np.ndarray:
    """M-RoPE positions (3, batch, length) as Qwen2-VL's get_rope_index places them for line images.

    Text before the image counts 0, 1, ...; the image's tokens, `rows` rows of them in row-major
    order, sit at (t, h, w) = (p, p + row, p + column) where p is the first image position; text
    after it continues from p + max(rows, columns). Padding after a line gets positions too: the
    causal mask keeps it out of every real token's view and the loss ignores it.
    """
    batch, length = input_ids.shape
    positions = np.zeros((3, batch, length), np.int64)
    for row in range(batch):
        image = np.flatnonzero(input_ids[row] == image_id)
        first, count = int(image[0]), len(image)
        columns = count // rows
        before = np.arange(first)
        after = np.arange(length - first - count) + first + max(rows, columns)
        positions[:, row, :first] = before
        positions[:, row, first + count :] = after
        positions[0, row, first : first + count] = first
        positions[1, row, first : first + count] = first + np.repeat(np.arange(rows), columns)
        positions[2, row, first : first + count] = first + np.tile(np.arange(columns), rows)
    return positions


_NORMALISE: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if device not in _NORMALISE:  # made once: a fresh small tensor each step is a blocking copy
        mean = torch.tensor(IMAGE_MEAN, device=device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGE_STD, device=device).view(1, 3, 1, 1)
        _NORMALISE[device] = (mean, std)
    return _NORMALISE[device]


def patchify(images: torch.Tensor) -> torch.Tensor:
    """Qwen2-VL's flattened patches of (batch, H, W, 3) uint8 lines (sides multiples of 28), on their device.

    The same arithmetic as Qwen2VLImageProcessor without its resize (`python -m train.step`
    compares the two), done once for the batch: normalised, repeated over the two temporal frames,
    cut into 14 px patches in 2x2 merge order, image after image.
    """
    mean, std = _normalisation(images.device)
    chw = (images.permute(0, 3, 1, 2).float() / 255.0 - mean) / std
    batch, c, h, w = chw.shape
    gh, gw = h // PATCH, w // PATCH
    frames = chw[:, None].expand(batch, TEMPORAL, c, h, w)
    patches = frames.reshape(batch, TEMPORAL, c, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return patches.reshape(batch * gh * gw, c * TEMPORAL * PATCH * PATCH)


def vision_rotary_positions(gh: int, gw: int, images: int) -> np.ndarray:
    """(h, w) rotary positions of every patch, block-major over 2x2 merge blocks, image after image."""
    h, w = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    blocks = (gh // MERGE, MERGE, gw // MERGE, MERGE)
    one = np.stack(
        [h.reshape(blocks).transpose(0, 2, 1, 3).ravel(), w.reshape(blocks).transpose(0, 2, 1, 3).ravel()],
        axis=-1,
    )
    return np.tile(one, (images, 1)).astype(np.int64)


def batch_indices(
    images: np.ndarray, input_ids: np.ndarray, labels: np.ndarray, image_id: int
) -> dict[str, np.ndarray]:
    """What `line_loss` needs besides the pixels and ids, computed on the CPU by a data worker."""
    count, height, width = images.shape[:3]
    targets = labels[:, 1:].reshape(-1)
    scored = np.flatnonzero(targets != IGNORE)
    return {
        "position_ids": text_positions(input_ids, image_id, height // (PATCH * MERGE)),
        "vision_positions": vision_rotary_positions(height // PATCH, width // PATCH, count),
        "image_index": np.flatnonzero(input_ids.reshape(-1) == image_id),
        "label_index": scored,
        "label_targets": targets[scored],
    }


def line_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross entropy over the answer tokens of a batch from `train.data.collate_lines`, on its device."""
    images, input_ids = batch["images"], batch["input_ids"]
    count, height, width = images.shape[:3]
    gh, gw = height // PATCH, width // PATCH
    patches_per_image = gh * gw
    pixels = patchify(images).to(model.model.visual.dtype)
    # On the CPU: with the positions given, the vision tower reads the grid no further, and
    # vision_attention reads the bounds as Python ints.
    grid = torch.tensor([[1, gh, gw]]).expand(count, 3)
    bounds = torch.arange(count + 1, dtype=torch.int32) * patches_per_image
    vision = model.model.visual(
        pixels,
        grid_thw=grid,
        position_ids=batch["vision_positions"],
        cu_seqlens=bounds,
        max_seqlen=patches_per_image,
    )
    embeds = model.model.language_model.embed_tokens(input_ids)
    flat = embeds.reshape(-1, embeds.shape[-1])
    flat = flat.index_copy(0, batch["image_index"], vision.pooler_output.to(embeds.dtype))
    embeds = flat.view_as(embeds)
    # No attention mask: padding is on the right only, so causal attention already keeps it out of
    # every real token's view, and SDPA can take its causal fast path.
    hidden = model.model.language_model(
        inputs_embeds=embeds, position_ids=batch["position_ids"], use_cache=False
    ).last_hidden_state
    before_answer = hidden[:, :-1].reshape(-1, hidden.shape[-1]).index_select(0, batch["label_index"])
    return F.cross_entropy(model.lm_head(before_answer).float(), batch["label_targets"])


def hf_inputs(batch: dict[str, torch.Tensor], pad_id: int, image_id: int) -> dict[str, torch.Tensor]:
    """The batch as Qwen2-VL's own forward and `generate` take it (patches, grids, masks), on its device."""
    images, input_ids = batch["images"], batch["input_ids"]
    count, height, width = images.shape[:3]
    grid = torch.tensor([[1, height // PATCH, width // PATCH]], device=images.device).expand(count, 3)
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != pad_id).long(),
        "pixel_values": patchify(images),
        "image_grid_thw": grid,
        # transformers 5 places M-RoPE positions by these types (1: image token), as its processor does.
        "mm_token_type_ids": (input_ids == image_id).long(),
    }


def reference_loss(model: Any, batch: dict[str, torch.Tensor], pad_id: int) -> torch.Tensor:
    """The same batch through Qwen2-VL's own forward, to check `line_loss` against (slow: its loops)."""
    inputs = hf_inputs(batch, pad_id, model.config.image_token_id)
    return model(**inputs, labels=batch["labels"]).loss


def main() -> None:
    """`python -m train.step [FONTS [HEIGHT]]`: this module against transformers on rendered lines, on CPU.

    Prints the largest difference between `patchify` and Qwen2VLImageProcessor's pixel values, and
    between `line_loss` (with vision_attention's grouping, as training runs it) and the model's own
    loss and gradients, for the tiny and default shapes. HEIGHT (28 unless given) draws the lines
    that many pixels high: 56 checks the positions of two rows of image tokens.
    """
    import sys
    import tempfile
    from itertools import islice
    from pathlib import Path

    from transformers import Qwen2VLImageProcessor

    from train.data import SyntheticLines, collate_lines
    from train.model import TINY, ModelSize, PromptFormat, build_model, preprocessor_config
    from train.render import LINE_HEIGHT, LINE_STRETCH, LineInput
    from train.text_source import common_chinese
    from train.tokenizer import build_tokenizer
    from train.vision_attention import group_vision_attention

    fonts = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/usr/share/fonts")
    height = int(sys.argv[2]) if len(sys.argv) > 2 else LINE_HEIGHT
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = build_tokenizer(Path(folder), common_chinese())
    prompt = PromptFormat(tokenizer)
    # As wide as the usual line at its usual stretch, however tall.
    stretch = LINE_STRETCH * LINE_HEIGHT / height
    line_input = LineInput(stretch=stretch, height=height)
    lines = SyntheticLines(tokenizer, fonts, None, 1, 5, line_input=line_input).samples(0)
    batch = collate_lines(list(islice(lines, 12)), prompt)
    config = {k: v for k, v in preprocessor_config(height).items() if k != "image_processor_type"}
    processor = Qwen2VLImageProcessor(**config)
    theirs = processor(images=list(batch["images"].numpy()), return_tensors="pt")["pixel_values"]
    print(f"pixel values: largest difference {float((patchify(batch['images']) - theirs).abs().max()):.2e}")

    def theirs_of(model: Any) -> torch.Tensor:
        return reference_loss(model, batch, prompt.pad_id)

    def ours_of(model: Any) -> torch.Tensor:
        return line_loss(model, batch)

    for name, size in (("tiny", TINY), ("default", ModelSize())):
        model = build_model(tokenizer, size)
        gradients = []
        for loss_of in (theirs_of, ours_of):
            if loss_of is ours_of:
                group_vision_attention(model)  # ours as training runs it; theirs, transformers' own
            model.zero_grad()
            loss = loss_of(model)
            loss.backward()
            grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
            gradients.append((float(loss.detach()), grads))
        (theirs_loss, theirs_grads), (ours_loss, ours_grads) = gradients
        largest = max(float((a - b).abs().max()) for a, b in zip(theirs_grads, ours_grads, strict=True))
        print(
            f"{name}: loss {ours_loss:.6f} against {theirs_loss:.6f}, "
            f"largest gradient difference {largest:.2e} over {len(ours_grads)} tensors"
        )


if __name__ == "__main__":
    main()
