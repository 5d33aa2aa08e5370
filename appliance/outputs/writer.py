"""Writes a Document's result files into an output folder under names derived from the input."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from appliance.document import Document
from appliance.outputs.atomic import write_atomic
from appliance.outputs.json_result import render_json
from appliance.outputs.text_result import render_text

_RENDERERS: dict[str, tuple[str, Callable[[Document], bytes]]] = {
    "json": (".json", render_json),
    "text": (".txt", render_text),
}


def output_paths(output_dir: Path, stem: str, formats: Iterable[str]) -> dict[str, Path]:
    return {fmt: output_dir / f"{stem}{_RENDERERS[fmt][0]}" for fmt in formats}


def write_outputs(
    document: Document,
    output_dir: Path,
    stem: str,
    formats: Iterable[str],
    *,
    mode: int = 0o644,
    gid: int | None = None,
) -> dict[str, Path]:
    """Render every format first, then write each atomically; return format -> path.

    Rendering all formats before writing any means a rendering bug leaves no partial set behind.
    `mode` and `gid` let sites that share results over Samba give them to a reader group.
    """
    rendered = {fmt: _RENDERERS[fmt][1](document) for fmt in formats}
    paths = output_paths(output_dir, stem, rendered)
    for fmt, data in rendered.items():
        write_atomic(paths[fmt], data, mode)
        if gid is not None:
            shutil.chown(paths[fmt], group=gid)
    return paths
