"""The training loss of a batch of equal-width lines, without transformers' per-line Python loops.

Qwen2-VL's own forward builds the M-RoPE positions with a Python loop over the lines of a batch
(`get_rope_index`, a device sync per line) and the vision tower's rotary positions with another
(`get_vision_position_ids`); at batch 128 on an H200 those loops, not the arithmetic, set the step
time. Here the batch's lines share one width (padded with white, as `prepare_line` pads), so the
positions are the same arithmetic done once: the text positions are built by the data workers
(`text_positions`), the vision ones are one image's tiled. The loss is the model's (mean cross
entropy over the answer tokens); `train.train_vlm` compares the two on its first batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own spelling

from train.model import IGNORE, IMAGE_MEAN, IMAGE_STD, MERGE, PATCH, TEMPORAL


def text_positions(input_ids: np.ndarray, image_id: int) -> np.ndarray:
    """M-RoPE positions (3, batch, length) as Qwen2-VL's get_rope_index places them for one-row lines.

    Text before the image counts 0, 1, ...; the image's k-th token sits at (t, h, w) =
    (p, p, p + k) where p is the first image position; text after it continues from p + tokens
    (max(h, w) of the merged grid, and h is 1). Padding after a line gets positions too: the
    causal mask keeps it out of every real token's view and the loss ignores it.
    """
    batch, length = input_ids.shape
    positions = np.zeros((3, batch, length), np.int64)
    for row in range(batch):
        image = np.flatnonzero(input_ids[row] == image_id)
        first, count = int(image[0]), len(image)
        before = np.arange(first)
        after = np.arange(length - first - count) + first + count
        positions[:, row, :first] = before
        positions[:, row, first + count :] = after
        positions[0, row, first : first + count] = first
        positions[1, row, first : first + count] = first
        positions[2, row, first : first + count] = first + np.arange(count)
    return positions


def patchify(images: torch.Tensor) -> torch.Tensor:
    """Qwen2-VL's flattened patches of (batch, 28, W, 3) uint8 lines, on their device.

    The same arithmetic as `train.data.pixel_patches` (and so as Qwen2VLImageProcessor), done
    once for the batch: normalised, repeated over the two temporal frames, cut into 14 px patches
    in 2x2 merge order, image after image.
    """
    mean = torch.tensor(IMAGE_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD, device=images.device).view(1, 3, 1, 1)
    chw = (images.permute(0, 3, 1, 2).float() / 255.0 - mean) / std
    batch, c, h, w = chw.shape
    gh, gw = h // PATCH, w // PATCH
    frames = chw[:, None].expand(batch, TEMPORAL, c, h, w)
    patches = frames.reshape(batch, TEMPORAL, c, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return patches.reshape(batch * gh * gw, c * TEMPORAL * PATCH * PATCH)


def _vision_rotary_positions(gh: int, gw: int, images: int, device: torch.device) -> torch.Tensor:
    """(h, w) rotary positions of every patch, block-major over 2x2 merge blocks, image after image."""
    h, w = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    blocks = (gh // MERGE, MERGE, gw // MERGE, MERGE)
    one = torch.stack(
        [h.reshape(blocks).transpose(1, 2).flatten(), w.reshape(blocks).transpose(1, 2).flatten()], dim=-1
    )
    return one.repeat(images, 1).to(device)


def line_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross entropy over the answer tokens of a batch from `train.data.collate_lines`, on its device."""
    images, input_ids, labels = batch["images"], batch["input_ids"], batch["labels"]
    count, height, width = images.shape[:3]
    gh, gw = height // PATCH, width // PATCH
    patches_per_image = gh * gw
    pixels = patchify(images).to(model.model.visual.dtype)
    grid = torch.tensor([[1, gh, gw]], device=images.device).expand(count, 3)
    bounds = torch.arange(count + 1, device=images.device, dtype=torch.int32) * patches_per_image
    vision = model.model.visual(
        pixels,
        grid_thw=grid,
        position_ids=_vision_rotary_positions(gh, gw, count, images.device),
        cu_seqlens=bounds,
        max_seqlen=patches_per_image,
    )
    embeds = model.model.language_model.embed_tokens(input_ids)
    image_mask = (input_ids == model.config.image_token_id).unsqueeze(-1)
    embeds = embeds.masked_scatter(image_mask, vision.pooler_output.to(embeds.dtype))
    # No attention mask: padding is on the right only, so causal attention already keeps it out of
    # every real token's view, and SDPA can take its causal fast path.
    hidden = model.model.language_model(
        inputs_embeds=embeds, position_ids=batch["position_ids"], use_cache=False
    ).last_hidden_state
    targets = labels[:, 1:]
    scored = targets != IGNORE
    logits = model.lm_head(hidden[:, :-1][scored])
    return F.cross_entropy(logits.float(), targets[scored])


def reference_loss(model: Any, batch: dict[str, torch.Tensor], pad_id: int) -> torch.Tensor:
    """The same batch through Qwen2-VL's own forward, to check `line_loss` against (slow: its loops)."""
    images, input_ids = batch["images"], batch["input_ids"]
    count, height, width = images.shape[:3]
    grid = torch.tensor([[1, height // PATCH, width // PATCH]], device=images.device).expand(count, 3)
    return model(
        input_ids=input_ids,
        attention_mask=(input_ids != pad_id).long(),
        pixel_values=patchify(images),
        image_grid_thw=grid,
        labels=batch["labels"],
        mm_token_type_ids=(input_ids == model.config.image_token_id).long(),
    ).loss
