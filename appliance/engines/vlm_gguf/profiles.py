"""What each OCR-VLM family expects: prompt, image placement, token budgets, stops, output format."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from appliance.engines.line_crop import RECOGNISER_LINE_MARGIN, VLM_LINE_MARGIN

OutputFormat = Literal["plain", "markdown", "doctags"]
# Tokens a line read may write beyond its width's bound: room for a short line in a very narrow
# face on a crop of the narrowest width (8 image tokens).
LINE_TOKEN_SLACK = 8


@dataclass(frozen=True)
class FamilyProfile:
    """How to ask one model family to read a page, and how to read its answer.

    The placement rules come from the families' model cards and from failures seen with them:
    PaddleOCR-VL loops when the instruction comes before the image, LightOnOCR was trained with an
    empty system message and a user turn that holds only the image. `qwen2vl_line` is the line
    reader that train/ makes (Qwen2-VL architecture): one text line a call, asked with the
    instruction before the image, so that everything before the image is the same for every line
    and stays in the cache (`reuse_prompt_head`); a line then costs its image and the few tokens
    that open the answer. train/model.py asks with exactly this profile's text and order.
    """

    family: str
    prompt: str | None  # the instruction after (or before) the image; None: the image alone
    image_first: bool = True
    system: str | None = None  # None: no system message; "" an empty one
    output_format: OutputFormat = "plain"
    image_max_tokens: int = 1024  # upper bound on the tokens one page image may become
    max_tokens: int = 1536  # generated tokens per page before the read is cut (and reviewed)
    stop: tuple[str, ...] = ()
    # A line reader takes each crop at exactly the size it was trained on (line_image.py) instead
    # of a page scaled to image_max_side.
    line_input: bool = False
    # Paper round a line crop in the cascade's `unit: lines`, as a share of the line's height
    # (line_crop.py): a page VLM reads a line better with a quarter; a line reader was trained on
    # detector-like crops and gets the ONNX recogniser's eighth.
    line_margin: float = VLM_LINE_MARGIN
    # A line reader's tokens a 28-px image token may hold (0: no bound but max_tokens). A line's
    # text cannot be much longer than its crop is wide, and a reader that runs away on a short crop
    # (a rule of a hundred dashes for `GST EXCL`) would otherwise write max_tokens, and hold every
    # line read beside it for as many passes. Receipt lines hold at most 1.9 characters a token
    # at the trained stretch (median 0.8; bench/README, "A line's tokens bounded by its crop's
    # width"), so 4 leaves room for narrow faces.
    tokens_per_image_token: int = 0

    def token_limit(self, image_tokens: int) -> int:
        """The tokens one read may write: max_tokens, or fewer for a narrow line crop."""
        if not self.tokens_per_image_token:
            return self.max_tokens
        return min(self.max_tokens, self.tokens_per_image_token * image_tokens + LINE_TOKEN_SLACK)

    def messages(self, media_marker: str) -> list[dict[str, Any]]:
        """Chat messages for the model's own chat template, with the image as `media_marker`."""
        parts: list[dict[str, str]] = [{"type": "text", "text": media_marker}]
        if self.prompt:
            text = {"type": "text", "text": self.prompt}
            parts = [*parts, text] if self.image_first else [text, *parts]
        messages: list[dict[str, Any]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": parts})
        return messages

    def with_overrides(self, image_max_tokens: int | None, max_tokens: int | None) -> FamilyProfile:
        """The profile with the site's budgets where the configuration sets them (0 or None: keep)."""
        return replace(
            self,
            image_max_tokens=image_max_tokens or self.image_max_tokens,
            max_tokens=max_tokens or self.max_tokens,
        )


PROFILES: dict[str, FamilyProfile] = {
    profile.family: profile
    for profile in (
        FamilyProfile("paddleocr_vl", prompt="OCR:", image_first=True, output_format="plain"),
        FamilyProfile("lightonocr", prompt=None, system="", output_format="markdown", image_max_tokens=1600),
        FamilyProfile(
            "hunyuan_ocr",
            prompt="提取文档图片中正文的所有信息用markdown格式表示，按照阅读顺序组织进行解析。",
            output_format="markdown",
        ),
        FamilyProfile("granite_docling", prompt="Convert this page to docling.", output_format="doctags"),
        FamilyProfile("qwen2vl", prompt="Read all the text in the image, line by line."),
        FamilyProfile(
            "qwen2vl_line",
            prompt="Read the text of this line.",
            image_first=False,
            image_max_tokens=64,  # line_image.prepare_line: at most 1,120 x 28 px, 40 tokens
            max_tokens=192,
            tokens_per_image_token=4,
            line_input=True,
            # Receipt line crops with a quarter read several points worse than with an eighth
            # (train/README, "Measured": `train.make_crops --margin`).
            line_margin=RECOGNISER_LINE_MARGIN,
        ),
        FamilyProfile("smolvlm", prompt="Read all the text in the image, line by line."),
    )
}


def profile_for(family: str) -> FamilyProfile:
    """The profile of a family named in a model manifest or the configuration."""
    try:
        return PROFILES[family]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown VLM family {family!r} (known: {known})") from None
