"""Deepens the line reader without changing what it reads: added blocks start by adding nothing.

A block of either tower adds its attention's and its MLP's outputs to the residual stream, so a
block whose two output projections are zero passes its input through unchanged. Blocks so made,
spread evenly between the trained ones, give a deeper model that reads exactly as the export did,
and that training can then use: its other weights are freshly initialised, so the gradient reaches
the zero projections at the first step and everything else from the next. Both towers keep their
widths; only the number of blocks grows (`train_vlm --size deep --init-from EXPORT`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

# The parameters that write a block's result into the residual stream: Qwen2's decoder layer
# (attention's o_proj, the MLP's down_proj) and Qwen2-VL's vision block (attn.proj, mlp.fc2).
OUTPUT_PROJECTIONS = ("self_attn.o_proj.", "mlp.down_proj.", "attn.proj.", "mlp.fc2.")
_BLOCK = re.compile(r"^(?P<stack>.*\.(?:layers|blocks))\.(?P<index>\d+)\.(?P<rest>.+)$")


def spread(old: int, new: int) -> list[int]:
    """The new index of each of `old` blocks among `new`: one added block after each equal group."""
    if new < old:
        raise ValueError(f"cannot grow {old} blocks into {new}")
    added = new - old
    if not added:
        return list(range(old))
    group = math.ceil(old / added)
    return [index + min(added, index // group) for index in range(old)]


def stack_depths(names: Iterable[str]) -> dict[str, int]:
    """How many blocks each stack of a state dict's names holds (text layers, vision blocks)."""
    depths: dict[str, int] = {}
    for name in names:
        match = _BLOCK.match(name)
        if match:
            stack, index = match["stack"], int(match["index"])
            depths[stack] = max(depths.get(stack, 0), index + 1)
    return depths


def grown_state(
    fresh: Mapping[str, Any], trained: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, int]]:
    """`fresh` (a deeper model's own state) with `trained`'s blocks in place and the added ones silent.

    Returns the state to load and, per stack, how many blocks were added (none where the depths
    are equal: then this is a strict load). Every tensor of `fresh` outside the added blocks must
    come from `trained`, with the same shape: only depth may differ.
    """
    old_depths, new_depths = stack_depths(trained), stack_depths(fresh)
    if set(old_depths) != set(new_depths):
        raise ValueError(f"the stacks differ: {sorted(old_depths)} against {sorted(new_depths)}")
    placed = {stack: spread(old_depths[stack], new_depths[stack]) for stack in old_depths}
    state = dict(fresh)
    filled = set()
    for name, tensor in trained.items():
        match = _BLOCK.match(name)
        target = name
        if match:
            new_index = placed[match["stack"]][int(match["index"])]
            target = f"{match['stack']}.{new_index}.{match['rest']}"
        if target not in fresh:
            raise ValueError(f"{name} has no place in the deeper model")
        if tuple(fresh[target].shape) != tuple(tensor.shape):
            raise ValueError(
                f"{name}: shape {tuple(tensor.shape)}, the deeper model's {tuple(fresh[target].shape)}"
            )
        state[target] = tensor
        filled.add(target)
    for name, tensor in fresh.items():
        match = _BLOCK.match(name)
        if not match or int(match["index"]) in placed[match["stack"]]:
            if name not in filled:  # the export lacks it: it would stay at its random start
                raise ValueError(f"{name} is not in the export")
            continue
        if match["rest"].startswith(OUTPUT_PROJECTIONS):
            state[name] = tensor * 0  # a zero tensor of its kind (torch's, or numpy's in the tests)
    added = {stack: new_depths[stack] - old_depths[stack] for stack in old_depths}
    return state, added


def main() -> None:
    """`python -m train.grow EXPORT [FONTS]`: grow the export to `deep` and compare what both read.

    Prints the largest difference between the two models' logits on twelve rendered lines (it
    should be at rounding level) and whether their greedy reads are the same.
    """
    import sys
    import tempfile
    from itertools import islice
    from pathlib import Path

    import torch
    from transformers import Qwen2VLForConditionalGeneration

    from train.data import SyntheticLines, collate_lines
    from train.model import SIZES, PromptFormat, build_model
    from train.step import hf_inputs
    from train.text_source import common_chinese
    from train.tokenizer import build_tokenizer

    export = Path(sys.argv[1])
    fonts = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/usr/share/fonts")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = build_tokenizer(Path(folder), common_chinese())
    trained = Qwen2VLForConditionalGeneration.from_pretrained(export, dtype=torch.float32).eval()
    deep = build_model(tokenizer, SIZES["deep"])
    state, added = grown_state(deep.state_dict(), trained.state_dict())
    deep.load_state_dict(state)
    deep.eval()
    prompt = PromptFormat(tokenizer)
    lines = SyntheticLines(tokenizer, fonts, None, 1, 5).samples(0)
    batch = collate_lines(list(islice(lines, 12)), prompt)
    inputs = hf_inputs(batch, prompt.pad_id, trained.config.image_token_id)
    with torch.no_grad():
        theirs, ours = trained(**inputs).logits, deep(**inputs).logits
    same = bool((theirs.argmax(-1) == ours.argmax(-1)).all())
    largest = float((theirs - ours).abs().max())
    print(f"added {added}; largest logit difference {largest:.2e}; same argmax {same}")


if __name__ == "__main__":
    main()
