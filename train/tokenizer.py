"""A character-level tokenizer that forces reading: byte-level BPE, merges only for Chinese characters.

Latin text is spelled byte by byte (no merges), so no word or line can be recalled as one token.
Each Chinese character of the list becomes exactly one token (two merges: its first two UTF-8
bytes, then the third), because three byte-tokens per character would triple the answer length
and make the model emit invalid UTF-8 halfway through a character when unsure. The vocabulary is
256 bytes + the distinct two-byte prefixes + one token per character + Qwen2-VL's special tokens.
The GPT-2 pre-tokenizer is what llama.cpp's converter knows as "gpt-2" (see quantize.gguf).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Also the tiny Qwen2-VL test fixture's (tests/fixtures/vlm/build.py imports them from here):
# Qwen2-VL's special tokens and chat template, which the appliance's qwen2vl profile renders.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BOS, EOS, PAD = "<|endoftext|>", "<|im_end|>", "<|endoftext|>"
# Full-width punctuation of Chinese text, one token each like the characters.
CJK_PUNCT = "，。：；、！？（）《》“”‘’￥【】—…·"


def _gpt2_order() -> list[str]:
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def build_tokenizer(out_dir: Path, chinese: Sequence[str]) -> Any:
    """Builds, saves (HF fast tokenizer + chat template) and returns the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_sym = _gpt2_order()
    vocab: dict[str, int] = {sym: i for i, sym in enumerate(byte_sym)}
    pair_merges: list[tuple[str, str]] = []
    full_merges: list[tuple[str, str]] = []
    seen_chars: set[str] = set()
    for char in [*CJK_PUNCT, *chinese]:
        raw = char.encode("utf-8")
        if len(raw) != 3 or char in seen_chars:
            continue  # only three-byte characters (all of CJK) need merges
        seen_chars.add(char)
        a, b, c = (byte_sym[x] for x in raw)
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            pair_merges.append((a, b))
        vocab[a + b + c] = len(vocab)
        full_merges.append((a + b, c))
    model = models.BPE(vocab=vocab, merges=pair_merges + full_merges)
    tokenizer = Tokenizer(model)
    # use_regex=True is GPT-2's split, which llama.cpp's "gpt-2" pre-tokenizer reproduces exactly.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in {BOS, EOS}],
    )
    fast.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    force_tokenizer_config(out_dir)
    return fast


def force_tokenizer_config(out_dir: Path) -> None:
    """Puts the chat template into tokenizer_config.json and turns BOS/EOS adding off (as build.py does).

    transformers 5 writes the template to chat_template.jinja; llama.cpp's converter reads both,
    other readers only tokenizer_config.json.
    """
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = CHAT_TEMPLATE
    config["add_bos_token"] = False
    config["add_eos_token"] = False
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "chat_template.jinja").unlink(missing_ok=True)
