"""The Qwen2-VL line reader: its config, the prompt around a line image and the label masking."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from appliance.engines.vlm_gguf.profiles import profile_for

# The appliance's own profile of the line reader: the model is trained on exactly the prompt the
# engine sends (its instruction before the image, so all text before the image is the same for every
# line and the engine keeps it in the cache: a line costs its image tokens and the fourteen that close
# the turn and open the answer, the character-level vocabulary spelling `assistant` in nine).
PROFILE = profile_for("qwen2vl_line")
_IMAGE_MARK = "<image>"  # the image's place in the profile's messages; the chat template draws it
IGNORE = -100
PATCH, MERGE, TEMPORAL = 14, 2, 2
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ModelSize:
    """The few widths and depths worth changing; the defaults are the 16M spike's."""

    vision_depth: int = 6  # llama.cpp's converter needs at least 3 vision blocks
    vision_width: int = 256
    vision_heads: int = 4
    text_layers: int = 6
    text_width: int = 384
    text_heads: int = 6
    text_kv_heads: int = 2
    text_mlp: int = 1024


# Wider and deeper where a step costs little more: the H200's step is bound by kernel launches
# (the GPU busy about 20 ms of a 50-75 ms step at the default shape), so width is nearly free
# there. 34.6M parameters; converted, the text model's Q8_0 is 21.8 MB and the projector 28.6 MB
# in F16 or 16.6 MB in Q8_0 (the default shape's: 12.0 MB and 13.0 or 7.8 MB).
WIDE = ModelSize(
    vision_depth=6,
    vision_width=384,
    vision_heads=6,
    text_layers=6,
    text_width=512,
    text_heads=8,
    text_kv_heads=2,
    text_mlp=1536,
)

TINY = ModelSize(
    vision_depth=3,
    vision_width=64,
    vision_heads=2,
    text_layers=2,
    text_width=128,
    text_heads=4,
    text_kv_heads=2,
    text_mlp=256,
)


# The default shape with two blocks more in each tower (22.3M parameters), which `train.grow` makes
# from a default-shape export without changing what it reads.
DEEP = ModelSize(vision_depth=8, text_layers=8)


# The shapes `train_vlm --size` offers, by name.
SIZES = {"default": ModelSize(), "deep": DEEP, "wide": WIDE, "tiny": TINY}


def build_model(tokenizer: Any, size: ModelSize = ModelSize()) -> Any:
    """A freshly initialised Qwen2VLForConditionalGeneration for `tokenizer`'s vocabulary."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    vocab = tokenizer.get_vocab()
    head_dim = size.text_width // size.text_heads
    half = head_dim // 2
    # M-RoPE splits the rotary half-dimension into temporal/height/width sections as Qwen2-VL does
    # (16/24/24 of 64), scaled to this head size.
    t_sec = half // 4
    h_sec = (half - t_sec) // 2
    mrope = [t_sec, h_sec, half - t_sec - h_sec]
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": size.text_width,
            "intermediate_size": size.text_mlp,
            "num_hidden_layers": size.text_layers,
            "num_attention_heads": size.text_heads,
            "num_key_value_heads": size.text_kv_heads,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
            "bos_token_id": vocab["<|endoftext|>"],
            "eos_token_id": vocab["<|im_end|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        vision_config={
            "depth": size.vision_depth,
            "embed_dim": size.vision_width,
            "hidden_size": size.text_width,  # the merger's output is the text width
            "mlp_ratio": 4,
            "num_heads": size.vision_heads,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": TEMPORAL,
        },
        image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"],
        vision_end_token_id=vocab["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    return Qwen2VLForConditionalGeneration(config)


def preprocessor_config(height: int = PATCH * MERGE) -> dict[str, Any]:
    """preprocessor_config.json for the export: min/max pixels that never resize a prepared line."""
    return {
        "image_processor_type": "Qwen2VLImageProcessor",
        "min_pixels": height * 224,
        "max_pixels": height * 28 * 40,
        "patch_size": PATCH,
        "temporal_patch_size": TEMPORAL,
        "merge_size": MERGE,
        "image_mean": list(IMAGE_MEAN),
        "image_std": list(IMAGE_STD),
    }


class PromptFormat:
    """Token ids of the chat prompt around one line image, and of the answer with its labels."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        self.image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")

    @cached_property
    def _halves(self) -> tuple[list[int], list[int]]:
        messages = PROFILE.messages(_IMAGE_MARK)
        for message in messages:
            if isinstance(message["content"], list):
                message["content"] = [
                    {"type": "image"} if part.get("text") == _IMAGE_MARK else part
                    for part in message["content"]
                ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        before, after = text.split("<|image_pad|>")
        encode = self.tokenizer.encode
        return encode(before, add_special_tokens=False), encode(after, add_special_tokens=False)

    def prompt_ids(self, image_tokens: int) -> list[int]:
        """The prompt with `image_tokens` image placeholders, ending where the answer starts."""
        before, after = self._halves
        return [*before, *([self.image_id] * image_tokens), *after]

    def example(self, image_tokens: int, text: str) -> tuple[list[int], list[int]]:
        """input_ids and labels for one line: the loss covers the answer and its <|im_end|> only."""
        prompt = self.prompt_ids(image_tokens)
        answer = [*self.tokenizer.encode(text, add_special_tokens=False), self.eos_id]
        return prompt + answer, [IGNORE] * len(prompt) + answer
