"""The review queue on disk: a folder per document, resolved by a corrected JSON, and the site dictionary.

A document routed to people gets `review_dir/<name>.<job>/` with its result files, `reasons.json`
and one PNG per page. A reviewer (or the control API) resolves it with
`corrected.json`: `{"fields": {"total": "40.17", ...}, "text": "optional full text"}`. Every
correction of a field also teaches the site dictionary (raw reading -> corrected value per field),
which later repairs apply, so a shop name misread the same way every week is fixed once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema

from appliance.document import Document
from appliance.names import fit_name
from appliance.outputs.atomic import write_atomic

REASONS_FILE = "reasons.json"
CORRECTED_FILE = "corrected.json"
SITE_DICTIONARY_RULE = "site.dictionary"

CORRECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "fields": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 10_000}},
        "text": {"type": "string", "maxLength": 10_000_000},
        "reviewer": {"type": "string", "maxLength": 200},
    },
}


def review_folder(review_dir: Path, relative: str, job_id: str) -> Path:
    """Folder of one document under review (the job id keeps same-named documents apart)."""
    path = Path(relative)
    # A name near NAME_MAX is cut (keeping a prefix and a hash) so the job id still fits.
    return review_dir / path.parent / fit_name(path.name, f".{job_id[:8]}")


def write_review_extras(
    folder: Path, document: Document, reasons: list[str], job_id: str, pages: Iterable[tuple[int, bytes]]
) -> None:
    """reasons.json and a PNG per page, so a reviewer needs nothing but a file browser.

    `pages` are (page index, PNG bytes) of the images the document was read from (the reader
    keeps them as each page passes: pipeline/page_images.py), so the boxes of its result files
    are pixel positions on these PNGs and nothing is rasterized again.
    """
    record = {"job_id": job_id, "source": document.source.to_dict(), "reasons": reasons}
    write_atomic(folder / REASONS_FILE, (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode())
    for index, png in pages:
        write_atomic(folder / f"page-{index + 1:03d}.png", png)


def parse_correction(raw: object) -> dict[str, Any]:
    """Validate a correction; raise ValueError with what is wrong."""
    try:
        jsonschema.validate(raw, CORRECTION_SCHEMA)
    except jsonschema.ValidationError as error:
        raise ValueError(f"invalid correction: {error.message}") from None
    assert isinstance(raw, dict)
    return raw


def apply_correction(result: dict[str, Any], fields: dict[str, str], text: str | None) -> dict[str, Any]:
    """The result JSON with the reviewer's values in place and marked as corrected."""
    unknown = sorted(set(fields) - set(result.get("fields", {})))
    if unknown:
        known = ", ".join(sorted(result.get("fields", {}))) or "none"
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; this document has: {known}")
    for name, value in fields.items():
        field = result["fields"][name]
        field.update({"value": value, "confidence": 1.0, "review": False})
        field["reasons"] = [*field.get("reasons", []), "corrected by a reviewer"]
    if text is not None:
        result["text"] = text
    routing = result.get("routing") or {"route": "review", "reasons": []}
    routing["corrected"] = dict(fields)
    result["routing"] = routing
    return result


class SiteDictionary:
    """Per-site corrections, field -> raw reading -> corrected value, kept as one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, int], dict[str, dict[str, str]]] | None = None

    def load(self) -> dict[str, dict[str, str]]:
        """The dictionary, re-read only when the file changed (the daemon asks once per job)."""
        try:
            info = self.path.stat()
        except OSError:
            return {}
        version = (info.st_mtime_ns, info.st_size)
        if self._cached is not None and self._cached[0] == version:
            return self._cached[1]
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        loaded = data if isinstance(data, dict) else {}
        self._cached = (version, loaded)
        return loaded

    def learn(self, result: dict[str, Any], fields: dict[str, str]) -> None:
        with self._lock:
            data = self.load()
            for name, value in fields.items():
                raw = result.get("fields", {}).get(name, {}).get("raw")
                if raw:
                    data.setdefault(name, {})[_key(raw)] = value
            write_atomic(self.path, (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode())


def _key(raw: str) -> str:
    return " ".join(raw.split()).upper()


def apply_site_dictionary(document: Document, dictionary: dict[str, dict[str, str]]) -> None:
    """Replace field values that reviewers corrected before, for the same raw reading."""
    for name, value in document.fields.items():
        corrected = dictionary.get(name, {}).get(_key(value.raw))
        if corrected is None or corrected == value.value:
            continue
        value.value = corrected
        value.rules.append(SITE_DICTIONARY_RULE)
        value.confidence = max(value.confidence, 0.99)
        value.review = False
        value.reasons = [*value.reasons, "value from the site dictionary (a reviewer corrected this reading)"]
