"""A duplicate's results, made from an earlier job's stored JSON result without reading the file again.

The same content under a new name (a rescan saved twice, a file copied into two hot folders) gets
the earlier reading, but under its own name (`source.name` and `source.path` in every format that
names the input) and in every format its profile asks for now, even ones the first run did not
write: they are rendered from the stored result, and the searchable PDF from the new file's own
pages (the same bytes, by sha256).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from appliance.document import Block, Document, Line, Page, SourceFile, Word
from appliance.outputs.atomic import write_atomic
from appliance.outputs.json_result import validate_result
from appliance.outputs.writer import output_paths, render_formats


def _box(values: list[float]) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = values
    return (x0, y0, x1, y1)


def _line(data: dict[str, Any]) -> Line:
    return Line(
        text=data["text"],
        box=_box(data["box"]),
        polygon=tuple((x, y) for x, y in data["polygon"]),
        confidence=data["confidence"],
        char_confidences=list(data["char_confidences"]),
        words=[Word(w["text"], _box(w["box"]), w["confidence"]) for w in data.get("words", [])],
        rotated_180=data.get("rotated_180", False),
        engine=data.get("engine", ""),
        occluded=data.get("occluded", False),
    )


def _page(data: dict[str, Any]) -> Page:
    return Page(
        index=data["index"],
        width=data["width"],
        height=data["height"],
        dpi=data["dpi"],
        blocks=[Block([_line(line) for line in block["lines"]]) for block in data["blocks"]],
        timings_ms=dict(data.get("timings_ms", {})),
        warnings=list(data.get("warnings", [])),
        text_layer_chars=data.get("text_layer_chars"),
        preprocessing=list(data.get("preprocessing", [])),
        occlusions=list(data.get("occlusions", [])),
        engine_details=dict(data.get("engine_details", {})),
        review_reasons=list(data.get("review_reasons", [])),
    )


def document_from_result(result: dict[str, Any]) -> Document:
    """The Document a JSON result was written from, as far as the other formats need it.

    Fields and repairs are left out: only the JSON result carries them, and it is issued from the
    stored one itself.
    """
    return Document(
        source=SourceFile(**result["source"]),
        engine=dict(result["engine"]),
        pages=[_page(page) for page in result["pages"]],
        timings_ms=dict(result.get("timings_ms", {})),
        created=result.get("created", ""),
        appliance_version=result.get("appliance_version", ""),
        routing=result.get("routing"),
    )


def reissue(
    stored_json: Path,
    input_path: Path,
    *,
    name: str,
    source_path: str,
    output_dir: Path,
    stem: str,
    formats: Iterable[str],
    mode: int = 0o644,
) -> dict[str, Path]:
    """Write the earlier result for the file now at `input_path`; return format -> path.

    Raises OSError or ValueError (also json and jsonschema errors, which are ValueErrors) when the
    stored result cannot be used; the caller then reads the file again.
    """
    result = json.loads(stored_json.read_text(encoding="utf-8"))
    result["source"] = {**result["source"], "name": name, "path": source_path}
    validate_result(result)
    wanted = list(dict.fromkeys(formats))
    rendered = render_formats(document_from_result(result), [f for f in wanted if f != "json"], input_path)
    if "json" in wanted:
        rendered["json"] = (json.dumps(result, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    paths = output_paths(output_dir, stem, wanted)
    for fmt in wanted:
        write_atomic(paths[fmt], rendered[fmt], mode)
    return paths
