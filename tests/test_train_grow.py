"""train.grow: where the trained blocks go in a deeper reader, and that the added ones start silent."""

from __future__ import annotations

import numpy as np
import pytest

from train.grow import grown_state, spread, stack_depths


def _state(text_layers: int, vision_blocks: int, fill: float) -> dict[str, np.ndarray]:
    """A state dict of the line reader's names (two weights a block and one outside them)."""
    state = {"model.embed_tokens.weight": np.full((5, 4), fill)}
    for index in range(text_layers):
        state[f"model.language_model.layers.{index}.self_attn.q_proj.weight"] = np.full((4, 4), fill + index)
        state[f"model.language_model.layers.{index}.self_attn.o_proj.weight"] = np.full((4, 4), fill + index)
        state[f"model.language_model.layers.{index}.mlp.down_proj.weight"] = np.full((4, 8), fill + index)
    for index in range(vision_blocks):
        state[f"model.visual.blocks.{index}.attn.qkv.weight"] = np.full((6, 2), fill + index)
        state[f"model.visual.blocks.{index}.attn.proj.bias"] = np.full((2,), fill + index)
        state[f"model.visual.blocks.{index}.mlp.fc2.weight"] = np.full((2, 8), fill + index)
    return state


def test_spread_puts_one_added_block_after_each_equal_group() -> None:
    assert spread(6, 8) == [0, 1, 2, 4, 5, 6]
    assert spread(6, 9) == [0, 1, 3, 4, 6, 7]
    assert spread(4, 4) == [0, 1, 2, 3]
    assert spread(2, 5) == [0, 2]


def test_spread_refuses_to_shrink() -> None:
    with pytest.raises(ValueError, match="cannot grow"):
        spread(8, 6)


def test_stack_depths_counts_each_stack() -> None:
    assert stack_depths(_state(6, 3, 0.0)) == {"model.language_model.layers": 6, "model.visual.blocks": 3}


def test_grown_state_keeps_trained_blocks_and_silences_the_added_ones() -> None:
    trained, fresh = _state(6, 6, 100.0), _state(8, 8, 0.5)
    state, added = grown_state(fresh, trained)
    assert added == {"model.language_model.layers": 2, "model.visual.blocks": 2}
    np.testing.assert_array_equal(state["model.embed_tokens.weight"], trained["model.embed_tokens.weight"])
    text = "model.language_model.layers.{}.{}"
    # Trained layer 3 now sits at 4, after the block added at 3.
    np.testing.assert_array_equal(state[text.format(4, "self_attn.q_proj.weight")], np.full((4, 4), 103.0))
    for new in (3, 7):
        assert not state[text.format(new, "self_attn.o_proj.weight")].any()
        assert not state[text.format(new, "mlp.down_proj.weight")].any()
        # Its inputs keep their fresh values, so the gradient reaches the zero projections.
        np.testing.assert_array_equal(
            state[text.format(new, "self_attn.q_proj.weight")], np.full((4, 4), 0.5 + new)
        )
        assert not state[f"model.visual.blocks.{new}.attn.proj.bias"].any()
        assert not state[f"model.visual.blocks.{new}.mlp.fc2.weight"].any()
        assert state[f"model.visual.blocks.{new}.attn.qkv.weight"].all()


def test_grown_state_refuses_a_change_of_width() -> None:
    trained, fresh = _state(6, 6, 1.0), _state(8, 8, 0.5)
    trained["model.embed_tokens.weight"] = np.ones((5, 6))
    with pytest.raises(ValueError, match="shape"):
        grown_state(fresh, trained)


def test_grown_state_at_the_same_depth_is_the_export_itself() -> None:
    trained, fresh = _state(6, 6, 100.0), _state(6, 6, 0.5)
    state, added = grown_state(fresh, trained)
    assert added == {"model.language_model.layers": 0, "model.visual.blocks": 0}
    assert state.keys() == trained.keys()
    for name, tensor in trained.items():
        np.testing.assert_array_equal(state[name], tensor)


def test_grown_state_refuses_an_export_that_lacks_a_weight() -> None:
    trained, fresh = _state(6, 6, 1.0), _state(8, 8, 0.5)
    del trained["model.visual.blocks.2.attn.qkv.weight"]
    with pytest.raises(ValueError, match="not in the export"):
        grown_state(fresh, trained)
