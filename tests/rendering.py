"""Pages the tests draw themselves: receipts and document pages in English and Chinese.

Fonts come from Debian packages that `make test` installs (fonts-dejavu-core, fonts-wqy-microhei),
so no third-party document is ever copied into the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

LATIN_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
MONO_FONT = LATIN_FONT.with_name("DejaVuSansMono.ttf")
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")


def link_fonts(folder: Path, chinese: bool) -> Path:
    """`folder` as a fonts folder for train/ (load_fonts): DejaVu Sans Mono and Sans, and WenQuanYi
    Micro Hei when `chinese` and installed. The caller skips when MONO_FONT is missing."""
    for font in (MONO_FONT, LATIN_FONT, *([CJK_FONT] if chinese and CJK_FONT.exists() else [])):
        (folder / font.name).symlink_to(font)
    return folder


@dataclass
class RenderedLine:
    text: str
    box: tuple[float, float, float, float]


@dataclass
class RenderedPage:
    image: Image.Image
    lines: list[RenderedLine]

    def bgr(self) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(self.image.convert("RGB"))[:, :, ::-1])

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def _font(path: Path, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), size)


def render_lines(
    rows: list[list[tuple[int, str]]],
    width: int,
    font_path: Path = LATIN_FONT,
    size: int = 28,
    margin: int = 40,
    spacing: float = 1.9,
) -> RenderedPage:
    """Draw rows of (x, text) pieces, black on white; return the page and each piece's box."""
    font = _font(font_path, size)
    height = int(2 * margin + len(rows) * size * spacing)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    lines = []
    for row_index, row in enumerate(rows):
        y = margin + row_index * size * spacing
        for x, text in row:
            draw.text((x, y), text, font=font, fill="black")
            box = draw.textbbox((x, y), text, font=font)
            lines.append(RenderedLine(text, tuple(float(v) for v in box)))  # type: ignore[arg-type]
    return RenderedPage(image, lines)


RECEIPT_ROWS = [
    [(150, "CORNER BAKERY SDN BHD")],
    [(40, "12 JALAN MERANTI, 47301 PETALING JAYA")],
    [(40, "TEL: 03-7956 2210")],
    [(40, "INVOICE NO: CB-204518")],
    [(40, "DATE: 14/03/2024 10:42")],
    [(40, "CROISSANT BUTTER"), (520, "2 x 4.50"), (700, "9.00")],
    [(40, "SOURDOUGH LOAF"), (520, "1 x 12.90"), (700, "12.90")],
    [(40, "FLAT WHITE"), (520, "2 x 8.00"), (700, "16.00")],
    [(40, "SUBTOTAL"), (700, "37.90")],
    [(40, "SST 6%"), (700, "2.27")],
    [(40, "TOTAL"), (700, "40.17")],
    [(40, "CASH"), (700, "50.00")],
    [(40, "CHANGE"), (700, "9.83")],
    [(150, "THANK YOU, PLEASE COME AGAIN")],
]

PAGE_ZH_ROWS = [
    [(60, "第一章 系统安装与基本配置")],
    [(60, "本手册介绍如何在服务器上安装操作系统并完成网络配置。")],
    [(60, "安装前请备份重要数据，并确认硬件满足最低要求。")],
    [(60, "使用 apt-get install 命令可以安装所需的软件包。")],
    [(60, "配置文件位于 /etc/network/interfaces 目录中。")],
    [(60, "如果遇到问题，请查阅系统日志或联系管理员。")],
]

LONG_ZH_ROWS = [
    [(40, "扫描仪每天把大量文件放入共享文件夹，系统需要逐页识别文字并保存结果，不能遗漏任何一行。")],
    [(40, "合规要求规定所有数据都必须留在本地服务器上处理，任何字节都不允许发送到外部网络之中。")],
    [(40, "识别完成以后，系统根据置信度把文件分为自动通过、抽样审核和人工复核三类，并记录审计信息。")],
]


def receipt() -> RenderedPage:
    return render_lines(RECEIPT_ROWS, width=860)


def chinese_page() -> RenderedPage:
    return render_lines(PAGE_ZH_ROWS, width=1000, font_path=CJK_FONT, size=30)


def long_chinese_lines() -> RenderedPage:
    return render_lines(LONG_ZH_ROWS, width=1800, font_path=CJK_FONT, size=36)
