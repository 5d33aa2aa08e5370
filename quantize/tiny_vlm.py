"""Tiny random-init OCR vision-language models as GGUF files: the vlm_gguf engine's test fixtures.

Builds, for each family, a checkpoint of the real architecture with random weights (fixed seeds), a
text-only draft model on the same tokenizer, converts them with llama.cpp's converter and writes a
manifest, so tests can load real GGUF + mmproj files through llama-cpp-python in well under a second.

Needs torch and transformers (kept out of the appliance's own environment; see
tests/fixtures/vlm/README.md for the exact versions) and the llama-cpp-python sdist's converter::

    python -m quantize.tiny_vlm --out tests/fixtures/vlm [--llama-src DIR] [--family qwen2vl ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantize.gguf import convert_hf_checkpoint, resolve_llama_src

# Seeds fixed per family and role so the files are reproducible byte for byte on one torch version.
_SEEDS = {"smolvlm": (1101, 1102), "qwen2vl": (2201, 2202), "lightonocr": (3301, 3302)}
_VOCAB_SIZE = 1024
# Weights drawn with std 0.3 instead of transformers' 0.02: with 0.02 every prompt and image gives the
# same token over and over; at 0.3 the greedy output depends on the image and the text, so tests can
# tell inputs apart and a draft is sometimes right and sometimes wrong.
_INIT_STD = 0.3
# The converter recognises a BPE pre-tokenizer by hashing how it splits a test string; ours is the
# GPT-2 byte-level regex, which llama.cpp implements under this name, so it is named, not hashed.
_PRE_TOKENIZER = "gpt-2"

# Training text for the tokenizer: Latin letters, digits, punctuation, receipt-like lines and common
# Chinese characters, so both English and Chinese text tokenize into more than single bytes. Blank
# lines matter: SmolVLM's image layout in libmtmd looks up "\n\n" and "\n" as single tokens.
_CORPUS_EN = """\
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG! How vexingly quick daft zebras jump?
Invoice No. 2026-0417, Date: 29/11/2026, Time: 14:05. Total: 1,234.56 EUR (incl. VAT 19%).
TAX INVOICE - CASH SALE - THANK YOU, PLEASE COME AGAIN. Qty 2 x 3.50 = 7.00; Rounding -0.02.
Customer: Jane Doe <jane@example.com>; Phone +44 20 7946 0958; Ref #A-77/B [paid].
Read the text in the image. Return only the text, line by line, in reading order.
Receipt, invoice, letter, form, table, page, line, word, amount, date, address, company, total.
0 1 2 3 4 5 6 7 8 9 10 11 12 20 25 50 99 100 250 500 1000 2025 2026 3.14 0.99 12.00 100%.
a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W X Y Z
! " # $ % & ' ( ) * + , - . / : ; < = > ? @ [ \\ ] ^ _ ` { | } ~ ... -- == ** // :: ;;
"""
_CORPUS_ZH = """\
发票号码：二〇二六年十一月二十九日，金额合计人民币一千二百三十四元五角六分。
请识别图片中的文字，并按阅读顺序逐行输出。这是一个中文文档的示例页面。
我们的公司地址在北京市海淀区中关村大街一号，电话：010-12345678。
收据、发票、表格、信件、日期、地址、公司、总计、数量、单价、名称、备注。
的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持音土哪容\
"""


@dataclass(frozen=True)
class Family:
    """One architecture: its special tokens, chat template and how to build its checkpoints."""

    name: str
    special_tokens: tuple[str, ...]
    bos: str
    eos: str
    pad: str
    chat_template: str
    build_main: Callable[[dict[str, int], Path], None]
    build_draft: Callable[[dict[str, int], Path], None]
    notes: str
    tokenizer: str = "bpe"  # "bpe": byte-level BPE (tokenizer.json); "sentencepiece": tokenizer.model


# SmolVLM/Idefics3 layout: the libmtmd idefics3 path looks these tokens up by text when it lays out
# the overview and the tiles (<row_R_col_C> for each tile of the grid).
_SMOLVLM_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
)
# Content may be a string or a list of parts; llama-cpp-python's MTMDChatHandler turns image parts
# into text parts holding libmtmd's media marker, so text parts are written as they are.
_SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}: "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image' %}<image>{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)

_QWEN2VL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_QWEN2VL_TEMPLATE = (
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


def _train_tokenizer(family: Family, out_dir: Path) -> dict[str, int]:
    """Trains the family's byte-level BPE, saves it as an HF fast tokenizer; returns token -> id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # use_regex=True is GPT-2's split, which llama.cpp's "gpt-2" pre-tokenizer reproduces exactly.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(family.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    paragraphs = [line for line in (_CORPUS_EN + _CORPUS_ZH).splitlines() if line]
    # GPT-2's split keeps the last newline of a run for the next word, so only runs of three or more
    # newlines give "\n\n" pieces: paragraphs are joined with three to make "\n\n" one token.
    text = "\n\n\n".join(paragraphs * 3) + "\n"
    tokenizer.train_from_iterator([text] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
        additional_special_tokens=[t for t in family.special_tokens if t not in {family.bos, family.eos}],
    )
    fast.chat_template = family.chat_template
    fast.save_pretrained(out_dir)
    _force_tokenizer_config(out_dir, family)
    vocab: dict[str, int] = fast.get_vocab()
    for needed in ("Ċ", "ĊĊ"):  # byte-level spellings of "\n" and "\n\n"
        if needed not in vocab:
            raise SystemExit(f"tokenizer for {family.name} lacks {needed!r}; extend the corpus")
    return vocab


def _force_tokenizer_config(out_dir: Path, family: Family) -> None:
    """Puts the chat template and add_bos_token into tokenizer_config.json, whatever transformers wrote.

    transformers 5 writes the template to chat_template.jinja; the converter reads both, but other
    readers only look in tokenizer_config.json, and neither family adds a BOS token by itself.
    """
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = family.chat_template
    config["add_bos_token"] = False
    config["add_eos_token"] = False
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "chat_template.jinja").unlink(missing_ok=True)


def _save(model: Any, out_dir: Path) -> None:
    model.save_pretrained(out_dir, safe_serialization=True)


def _build_smolvlm(vocab: dict[str, int], out_dir: Path) -> None:
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    torch.manual_seed(_SEEDS["smolvlm"][0])
    config = Idefics3Config(
        # 32-pixel tiles of 8-pixel patches: 16 patches, 4 tokens after the 2x pixel shuffle.
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
            "initializer_range": _INIT_STD,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": len(vocab),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "initializer_range": _INIT_STD,
            "tie_word_embeddings": True,
            "bos_token_id": vocab["<|im_start|>"],
            "eos_token_id": vocab["<end_of_utterance>"],
            "pad_token_id": vocab["<|im_end|>"],
        },
        scale_factor=2,
        image_token_id=vocab["<image>"],
        tie_word_embeddings=True,
    )
    model = Idefics3ForConditionalGeneration(config).eval()
    _save(model, out_dir)
    # The converter picks the text model's class from text_config.architectures.
    _patch_config(out_dir, lambda c: c["text_config"].__setitem__("architectures", ["LlamaForCausalLM"]))
    # longest_edge = two tiles: a page becomes at most a 2x2 grid plus the overview.
    _write_json(
        out_dir / "preprocessor_config.json",
        {
            "image_processor_type": "Idefics3ImageProcessor",
            "do_resize": True,
            "size": {"longest_edge": 64},
            "max_image_size": {"longest_edge": 32},
            "do_image_splitting": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
        },
    )


def _build_qwen2vl(vocab: dict[str, int], out_dir: Path) -> None:
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(_SEEDS["qwen2vl"][0])
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "initializer_range": _INIT_STD,
            "tie_word_embeddings": True,
            # M-RoPE: temporal/height/width sections of the rotary half-dimension (8 = 16 / 2).
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": vocab["<|endoftext|>"],
            "eos_token_id": vocab["<|im_end|>"],
        },
        # 14-pixel patches merged 2x2; the merger's output (hidden_size) is the text width. Three
        # blocks, not one: the converter maps the merger's mlp.2 through the block-index table,
        # which only has as many entries as there are blocks.
        vision_config={
            "depth": 3,
            "embed_dim": 32,
            "hidden_size": 64,
            "mlp_ratio": 2,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "initializer_range": _INIT_STD,
        },
        image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"],
        vision_end_token_id=vocab["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    model = Qwen2VLForConditionalGeneration(config).eval()
    _save(model, out_dir)
    _write_json(
        out_dir / "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessor",
            "min_pixels": 56 * 56,
            "max_pixels": 448 * 448,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
        },
    )


# LightOnOCR: Qwen3 text, Pixtral vision, 2x2 patch merger. Every width differs from every other
# (text 64, q 4x24, kv 2x24, MLP 80; vision 56, MLP 72, merger 4x56), so each tensor dimension
# names one hyperparameter: bench/vlm_random_model.py scales this file to the published shapes.
_LIGHTONOCR_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}<|image_pad|>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _build_lightonocr(vocab: dict[str, int], out_dir: Path) -> None:
    import torch
    from transformers import LightOnOcrConfig, LightOnOcrForConditionalGeneration

    torch.manual_seed(_SEEDS["lightonocr"][0])
    config = LightOnOcrConfig(
        text_config={
            "model_type": "qwen3",
            "vocab_size": len(vocab),
            "hidden_size": 64,
            "intermediate_size": 80,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 24,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "initializer_range": _INIT_STD,
            "bos_token_id": vocab["<|endoftext|>"],
            "eos_token_id": vocab["<|im_end|>"],
        },
        # 112 px longest edge of 14 px patches: an 8x8 grid, 16 tokens after the 2x2 merge. Three
        # blocks, as for Qwen2-VL: the converter maps the projector's linear_2 through the block table.
        vision_config={
            "model_type": "pixtral",
            "hidden_act": "silu",  # LightOnOCR's gated MLP; Pixtral's own default is GELU
            "hidden_size": 56,
            "intermediate_size": 72,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "head_dim": 28,
            "image_size": 112,
            "patch_size": 14,
            "initializer_range": _INIT_STD,
        },
        spatial_merge_size=2,
        image_token_id=vocab["<|image_pad|>"],
        tie_word_embeddings=True,
    )
    model = LightOnOcrForConditionalGeneration(config).eval()
    _save(model, out_dir)

    # The converter registers the vision side under this spelling (transformers writes "Ocr"), and
    # picks the text model's class from text_config.architectures.
    def name_classes(c: dict[str, Any]) -> None:
        c["architectures"] = ["LightOnOCRForConditionalGeneration"]
        c["text_config"]["architectures"] = ["Qwen3ForCausalLM"]

    _patch_config(out_dir, name_classes)
    _write_json(
        out_dir / "preprocessor_config.json",
        {
            "image_processor_type": "PixtralImageProcessor",
            "size": {"longest_edge": 112},
            "patch_size": 14,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
        },
    )


def _text_draft(
    family: str, config_class: str, model_class: str, bos: str, eos: str, **extra: Any
) -> Callable[[dict[str, int], Path], None]:
    """A builder of a one-layer, 32-wide text model on the family's tokenizer (its draft).

    The drafts of the Llama, Qwen2 and Qwen3 families differ only in their transformers classes,
    special tokens and a few settings (`extra`), so one builder serves them all.
    """

    def build(vocab: dict[str, int], out_dir: Path) -> None:
        import torch
        import transformers

        torch.manual_seed(_SEEDS[family][1])
        config = getattr(transformers, config_class)(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            initializer_range=_INIT_STD,
            tie_word_embeddings=True,
            bos_token_id=vocab[bos],
            eos_token_id=vocab[eos],
            **{key: vocab[value] if key.endswith("_token_id") else value for key, value in extra.items()},
        )
        _save(getattr(transformers, model_class)(config).eval(), out_dir)

    return build


# PaddleOCR-VL: ERNIE-4.5 text with M-RoPE, a SigLIP-style vision tower and a 2x2 merging projector
# ("mlp_AR"). Its converter path reads only a SentencePiece tokenizer.model.
_PADDLE_SEEDS = (4401, 4402)  # model, draft
_PADDLE_TOKENS = (
    "<|IMAGE_START|>",
    "<|IMAGE_END|>",
    "<|IMAGE_PLACEHOLDER|>",
    "<|begin_of_sentence|>",
    "<|end_of_sentence|>",
)
# As PaddleOCR-VL's own template: the image parts first, then the text, "\n" after the user's turn.
_PADDLE_TEMPLATE = (
    "<|begin_of_sentence|>{% for message in messages %}"
    "{% if message['role'] == 'user' %}User: {% elif message['role'] == 'assistant' %}Assistant: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}<|end_of_sentence|>{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)


def _train_sentencepiece(family: Family, out_dir: Path) -> dict[str, int]:
    """Trains a SentencePiece BPE (byte fallback) with the family's markers; returns piece -> id."""
    import sentencepiece as spm

    paragraphs = [line for line in (_CORPUS_EN + _CORPUS_ZH).splitlines() if line]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(paragraphs * 3),
        model_prefix=str(out_dir / "tokenizer"),
        vocab_size=_VOCAB_SIZE,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,  # any character still encodes, as bytes
        split_digits=True,
        # User-defined pieces are matched in the text before the BPE splits it: the markers stay whole.
        user_defined_symbols=list(family.special_tokens),
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        add_dummy_prefix=False,
        num_threads=1,  # one thread: the same pieces on every run
        minloglevel=2,
    )
    processor = spm.SentencePieceProcessor(model_file=str(out_dir / "tokenizer.model"))
    vocab = {processor.id_to_piece(index): index for index in range(processor.get_piece_size())}
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": family.bos,
        "eos_token": family.eos,
        "pad_token": family.pad,
        "unk_token": "<unk>",
        "add_bos_token": False,
        "add_eos_token": False,
        # Trained without SentencePiece's dummy prefix: llama.cpp must not add a leading space either.
        "add_prefix_space": False,
        "chat_template": family.chat_template,
        "added_tokens_decoder": {
            str(vocab[token]): {
                "content": token,
                "special": True,
                "normalized": False,
                "lstrip": False,
                "rstrip": False,
                "single_word": False,
            }
            for token in family.special_tokens
        },
    }
    _write_json(out_dir / "tokenizer_config.json", config)
    return vocab


def _build_paddleocr_vl(vocab: dict[str, int], out_dir: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import PaddleOCRVLConfig, PaddleOCRVLForConditionalGeneration

    torch.manual_seed(_PADDLE_SEEDS[0])
    config = PaddleOCRVLConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "initializer_range": _INIT_STD,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": vocab["<s>"],
            "eos_token_id": vocab["</s>"],
            "pad_token_id": vocab["<pad>"],
        },
        # 14-pixel patches merged 2x2. Three blocks: the converter maps the projector's linear_1 and
        # linear_2 through the block-index table, which has as many entries as there are blocks.
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "image_size": 56,
            "patch_size": 14,
            "initializer_range": _INIT_STD,
        },
        image_token_id=vocab["<|IMAGE_PLACEHOLDER|>"],
        vision_start_token_id=vocab["<|IMAGE_START|>"],
        vision_end_token_id=vocab["<|IMAGE_END|>"],
        video_token_id=vocab["<|IMAGE_PLACEHOLDER|>"],
        tie_word_embeddings=True,
    )
    model = PaddleOCRVLForConditionalGeneration(config).eval()
    _save(model, out_dir)
    # llama.cpp's converter reads the tensor names of the published checkpoint (ERNIE under
    # "model.", the vision tower under "visual.", the projector as "mlp_AR"), not transformers' own.
    renamed = {
        name.replace("model.language_model.", "model.")
        .replace("model.visual.", "visual.")
        .replace("model.projector.", "mlp_AR."): tensor.contiguous()
        for name, tensor in model.state_dict().items()
        if name != "lm_head.weight"  # tied to the embeddings
    }
    for stale in out_dir.glob("*.safetensors*"):
        stale.unlink()
    save_file(renamed, str(out_dir / "model.safetensors"), metadata={"format": "pt"})

    def name_classes(c: dict[str, Any]) -> None:
        c["architectures"] = ["PaddleOCRVLForConditionalGeneration"]
        c["vision_config"]["architectures"] = ["PaddleOCRVisionModel"]

    _patch_config(out_dir, name_classes)
    # The converter sets the tile size from max_pixels; a 64 px page becomes 2x2 merged tokens.
    _write_json(
        out_dir / "preprocessor_config.json",
        {
            "image_processor_type": "PaddleOCRVLImageProcessor",
            "min_pixels": 56 * 56,
            "max_pixels": 224 * 224,
            "patch_size": 14,
            "merge_size": 2,
            "temporal_patch_size": 1,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
        },
    )


def _build_ernie_draft(vocab: dict[str, int], out_dir: Path) -> None:
    import torch
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    torch.manual_seed(_PADDLE_SEEDS[1])
    config = Ernie4_5Config(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        initializer_range=_INIT_STD,
        tie_word_embeddings=True,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["<pad>"],
    )
    _save(Ernie4_5ForCausalLM(config).eval(), out_dir)


FAMILIES: dict[str, Family] = {
    "smolvlm": Family(
        name="smolvlm",
        special_tokens=_SMOLVLM_TOKENS,
        bos="<|im_start|>",
        eos="<end_of_utterance>",
        pad="<|im_end|>",
        chat_template=_SMOLVLM_TEMPLATE,
        build_main=_build_smolvlm,
        build_draft=_text_draft(
            "smolvlm",
            "LlamaConfig",
            "LlamaForCausalLM",
            "<|im_start|>",
            "<end_of_utterance>",
            rms_norm_eps=1e-5,
            pad_token_id="<|im_end|>",
        ),
        notes="Idefics3ForConditionalGeneration (SmolVLM layout); draft: LlamaForCausalLM",
    ),
    "qwen2vl": Family(
        name="qwen2vl",
        special_tokens=_QWEN2VL_TOKENS,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template=_QWEN2VL_TEMPLATE,
        build_main=_build_qwen2vl,
        build_draft=_text_draft(
            "qwen2vl", "Qwen2Config", "Qwen2ForCausalLM", "<|endoftext|>", "<|im_end|>", rms_norm_eps=1e-6
        ),
        notes="Qwen2VLForConditionalGeneration; draft: Qwen2ForCausalLM",
    ),
    "lightonocr": Family(
        name="lightonocr",
        special_tokens=_QWEN2VL_TOKENS,
        bos="<|endoftext|>",
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template=_LIGHTONOCR_TEMPLATE,
        build_main=_build_lightonocr,
        build_draft=_text_draft(
            "lightonocr",
            "Qwen3Config",
            "Qwen3ForCausalLM",
            "<|endoftext|>",
            "<|im_end|>",
            head_dim=16,
            rms_norm_eps=1e-6,
        ),
        notes="LightOnOcrForConditionalGeneration (Qwen3 text, Pixtral vision); draft: Qwen3ForCausalLM",
    ),
    "paddleocr_vl": Family(
        name="paddleocr_vl",
        special_tokens=_PADDLE_TOKENS,
        bos="<s>",
        eos="</s>",
        pad="<pad>",
        chat_template=_PADDLE_TEMPLATE,
        build_main=_build_paddleocr_vl,
        build_draft=_build_ernie_draft,
        notes="PaddleOCRVLForConditionalGeneration (ERNIE-4.5 text, SigLIP vision); draft: Ernie4_5 text",
        tokenizer="sentencepiece",
    ),
}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _patch_config(out_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = out_dir / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    change(config)
    _write_json(path, config)


def build_family(family: Family, out_dir: Path, llama_src: Path, work_dir: Path) -> None:
    """Writes model-f32.gguf, mmproj-f32.gguf, draft-f32.gguf and manifest.json into out_dir."""
    from appliance.engines.gguf_manifest import write_vlm_manifest

    main_dir = work_dir / family.name / "model"
    draft_dir = work_dir / family.name / "draft"
    for directory in (main_dir, draft_dir):
        directory.mkdir(parents=True, exist_ok=True)
    train = _train_sentencepiece if family.tokenizer == "sentencepiece" else _train_tokenizer
    vocab = train(family, main_dir)
    # The draft gets a byte-identical copy of the main model's tokenizer files: the same vocabulary.
    for tokenizer_file in main_dir.iterdir():
        shutil.copy2(tokenizer_file, draft_dir / tokenizer_file.name)
    family.build_main(vocab, main_dir)
    family.build_draft(vocab, draft_dir)

    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "model": out_dir / "model-f32.gguf",
        "mmproj": out_dir / "mmproj-f32.gguf",
        "draft": out_dir / "draft-f32.gguf",
    }
    for role, hf_dir in (("model", main_dir), ("mmproj", main_dir), ("draft", draft_dir)):
        convert_hf_checkpoint(
            hf_dir,
            files[role],
            llama_src=llama_src,
            mmproj=role == "mmproj",
            outtype="f32",
            pre_tokenizer=_PRE_TOKENIZER,
        )
    write_vlm_manifest(
        out_dir / "manifest.json",
        name=f"tiny-{family.name}",
        family=family.name,
        files=files,
        origin=f"quantize.tiny_vlm: random-init {family.notes}; not a trained model",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantize.tiny_vlm", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder that gets one subfolder per family")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="default: all")
    parser.add_argument("--llama-src", type=Path, help="unpacked llama-cpp-python 0.3.36 sdist")
    parser.add_argument("--keep-hf", type=Path, help="also keep the HF checkpoints in this folder")
    args = parser.parse_args(argv)
    llama_src = resolve_llama_src(args.llama_src)
    with tempfile.TemporaryDirectory(prefix="tiny-vlm-") as tmp:
        work_dir = args.keep_hf or Path(tmp)
        for name in args.family or sorted(FAMILIES):
            build_family(FAMILIES[name], args.out / name, llama_src, work_dir)
            print(f"{name}: {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
