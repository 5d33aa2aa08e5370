"""One attention call per distinct image length in Qwen2-VL's vision tower, instead of one per image.

Without a variable-length (flash) kernel, transformers' Qwen2-VL vision attention loops over the
images of a batch in Python: 256 lines x 6 blocks is 1,536 small attention calls a step, forward
and backward, which left an H200 at about 2 steps/s. Lines of one batch are cut from a width-sorted
pool, so they share a few lengths; stacking the images of each length gives a handful of batched
calls with the same result. Only the training model is patched: the weights, and so the export
and its GGUF conversion, do not change.
"""

from __future__ import annotations

import itertools
import types
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own spelling


def _grouped_forward(
    self: Any,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_seqlen: int | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision

    seq_length = hidden_states.shape[0]
    qkv = self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3)
    query, key, value = qkv.unbind(0)
    assert position_embeddings is not None
    cos, sin = position_embeddings
    query, key = apply_rotary_pos_emb_vision(query, key, cos, sin)
    bounds = cu_seqlens.tolist()  # train.step passes them on the CPU: no wait for the GPU here
    starts_by_length: dict[int, list[int]] = defaultdict(list)
    for start, end in itertools.pairwise(bounds):
        starts_by_length[end - start].append(start)
    if len(starts_by_length) == 1:
        # One length (train.step's batches): the images tile the sequence, so a reshape, no gather.
        ((length, starts),) = starts_by_length.items()
        q, k, v = (t.reshape(len(starts), length, *t.shape[1:]).transpose(1, 2) for t in (query, key, value))
        attended = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
        return self.proj(attended.transpose(1, 2).reshape(seq_length, -1))
    output = torch.empty_like(query)  # (patches, heads, head_dim)
    for length, starts in starts_by_length.items():
        rows = torch.tensor(starts, device=query.device)[:, None] + torch.arange(length, device=query.device)
        q, k, v = (t[rows].transpose(1, 2) for t in (query, key, value))  # (images, heads, length, dim)
        attended = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
        output = output.index_put((rows,), attended.transpose(1, 2))
    return self.proj(output.reshape(seq_length, -1))


def group_vision_attention(model: Any) -> int:
    """Patches every vision attention block of `model` (unless it uses flash attention); returns how many."""
    patched = 0
    for module in model.modules():
        if type(module).__name__ == "VisionAttention" and "flash" not in str(
            module.config._attn_implementation
        ):
            module.forward = types.MethodType(_grouped_forward, module)
            patched += 1
    return patched
