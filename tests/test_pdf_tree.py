"""A PDF whose page tree loops fails as corrupt, naming the loop, instead of being read short."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pytest

from appliance.config import RasterizeConfig
from appliance.errors import DocumentError, FailureReason
from appliance.pipeline.pdf_tree import page_tree_loop
from appliance.pipeline.rasterize import Rasterizer


def _pdf(path: Path, pages: int = 2) -> pikepdf.Pdf:
    pdf = pikepdf.new()
    for _ in range(pages):
        pdf.add_blank_page(page_size=(200, 100))
    return pdf


def _looping(path: Path, *, through_child: bool) -> Path:
    """A /Pages node listing itself among its /Kids, or a child /Pages node listing its parent."""
    pdf = _pdf(path)
    root = pdf.Root.Pages
    if through_child:
        child = pdf.make_indirect(
            pikepdf.Dictionary(Type=pikepdf.Name.Pages, Kids=pikepdf.Array([root]), Count=1, Parent=root)
        )
        root.Kids.append(child)
    else:
        root.Kids.append(root)
    pdf.save(path)
    return path


@pytest.mark.parametrize("through_child", [False, True])
def test_a_page_tree_that_loops_is_corrupt(tmp_path: Path, through_child: bool) -> None:
    path = _looping(tmp_path / "loop.pdf", through_child=through_child)
    loop = page_tree_loop(path)
    assert loop is not None and "loops" in loop
    with pytest.raises(DocumentError) as caught:
        list(Rasterizer(RasterizeConfig(pdf_dpi=72)).pages(path))
    assert caught.value.reason is FailureReason.CORRUPT
    assert "page tree loops" in caught.value.message


def test_a_shared_subtree_is_not_a_loop(tmp_path: Path) -> None:
    pdf = _pdf(tmp_path)
    root = pdf.Root.Pages
    shared = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Pages, Kids=pikepdf.Array(), Count=0))
    root.Kids.append(shared)
    root.Kids.append(shared)
    pdf.save(tmp_path / "shared.pdf")
    assert page_tree_loop(tmp_path / "shared.pdf") is None


def test_a_plain_pdf_is_read_whole(tmp_path: Path) -> None:
    _pdf(tmp_path, pages=3).save(tmp_path / "plain.pdf")
    assert page_tree_loop(tmp_path / "plain.pdf") is None
    assert len(list(Rasterizer(RasterizeConfig(pdf_dpi=72)).pages(tmp_path / "plain.pdf"))) == 3
