"""Writes a Document's result files into an output folder under names derived from the input."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from appliance.document import Document
from appliance.outputs.alto import render_alto
from appliance.outputs.atomic import write_atomic
from appliance.outputs.hocr import render_hocr
from appliance.outputs.json_result import render_json
from appliance.outputs.markdown import render_markdown
from appliance.outputs.searchable_pdf import PageImage, render_searchable_pdf
from appliance.outputs.text_result import render_text

# A renderer gets the Document, the input file and the page images it was read from: only the
# searchable PDF uses the images (which the Document does not hold), or the file without them.
Renderer = Callable[[Document, Path | None, Sequence[PageImage] | None], bytes]


def _from_document(render: Callable[[Document], bytes]) -> Renderer:
    return lambda document, _source, _images: render(document)


_RENDERERS: dict[str, tuple[str, Renderer]] = {
    "json": (".json", _from_document(render_json)),
    "text": (".txt", _from_document(render_text)),
    "markdown": (".md", _from_document(render_markdown)),
    "hocr": (".hocr", _from_document(render_hocr)),
    "alto": (".alto.xml", _from_document(render_alto)),
    "pdf": (".pdf", render_searchable_pdf),
}


def output_paths(output_dir: Path, stem: str, formats: Iterable[str]) -> dict[str, Path]:
    return {fmt: output_dir / f"{stem}{_RENDERERS[fmt][0]}" for fmt in formats}


def render_formats(
    document: Document,
    formats: Iterable[str],
    source_path: Path | None = None,
    page_images: Sequence[PageImage] | None = None,
) -> dict[str, bytes]:
    """Each format's bytes; `source_path` and `page_images` as for write_outputs."""
    return {fmt: _RENDERERS[fmt][1](document, source_path, page_images) for fmt in formats}


def write_outputs(
    document: Document,
    output_dir: Path,
    stem: str,
    formats: Iterable[str],
    *,
    mode: int = 0o644,
    gid: int | None = None,
    source_path: Path | None = None,
    page_images: Sequence[PageImage] | None = None,
) -> dict[str, Path]:
    """Render every format first, then write each atomically; return format -> path.

    Rendering all formats before writing any means a rendering bug leaves no partial set behind.
    `mode` and `gid` let sites that share results over Samba give them to a reader group.
    `source_path` is the input file the document was read from; the searchable PDF ("pdf")
    needs it for the page images and raises ValueError without it; `page_images` are those
    images as the document was read (searchable_pdf.encode_page), so it need not rasterize again.
    """
    rendered = render_formats(document, formats, source_path, page_images)
    paths = output_paths(output_dir, stem, rendered)
    for fmt, data in rendered.items():
        write_atomic(paths[fmt], data, mode)
        if gid is not None:
            shutil.chown(paths[fmt], group=gid)
    return paths
