"""The JSON result: its schema file is generated from the result models, and to_dict keeps its 1.0 shape."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from appliance.document import Block, Document, Line, Page, SourceFile, Word
from appliance.fields.model import FieldValue, Span
from appliance.hashing import sha256_file
from appliance.outputs.json_result import _quick_validator, result_schema, validate_result
from appliance.repair.ruleset import Change, Check, RepairLog
from appliance.schemas.generate import SCHEMA_FILE, schema_text


def test_committed_schema_is_the_generated_one() -> None:
    # `make schema` (python -m appliance.schemas) rewrites the file after a change to the models.
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text()
    assert result_schema() == json.loads(schema_text())


def test_schema_keeps_its_version_and_dialect() -> None:
    schema = result_schema()
    assert schema["$id"] == "urn:ocr-appliance:result:1.0"
    assert schema["properties"]["schema_version"]["const"] == "1.0"
    jsonschema.Draft202012Validator.check_schema(schema)


def _line() -> Line:
    return Line(
        "TOTAL 12.50",
        (10, 20, 110.04, 40),
        ((10, 20), (110, 20), (110, 40), (10, 40)),
        0.912345,
        [0.9, 0.95, 0.98765, 1, 1, 1, 1, 1, 1, 1, 1],
        words=[Word("TOTAL", (10, 20, 60, 40), 0.9), Word("12.50", (70, 20.55, 110, 40), 1)],
        engine="ppocr_onnx",
    )


def _document() -> Document:
    line = _line()
    page = Page(
        0,
        800,
        600,
        300,
        [Block([line])],
        {"det": 12.3456},
        preprocessing=[{"step": "deskew", "params": {"angle": 0.5}, "ms": 1.25}],
        occlusions=[{"kind": "seal", "box": [1, 2, 3, 4]}],
        engine_details={"cascade": {"route": "first"}},
    )
    engine = {
        "name": "ppocr_onnx",
        "manifest": "ppocrv5",
        "models": [{"role": "det", "name": "d", "file": "d.onnx", "sha256": "1" * 64, "provider": "CPU"}],
        "classes": 5,
    }
    total = FieldValue(
        "12.50",
        "12.50",
        0.87654,
        [Span(line, "pages[0].blocks[0].lines[0]", 6, 11)],
        ["amount.decimal_point", "amount.decimal_point"],
        [Check("totals.items", True, "1 item")],
    )
    return Document(
        SourceFile("a.png", "/in/a.png", "0" * 64, 123, "image/png"),
        engine,
        [page],
        {"total": 5.555},
        "2026-01-01T00:00:00+00:00",
        "1.0.0",
        {"total": total},
        RepairLog("2026.1", [Change("text.whitespace", "a  b", "a b", "pages[0].blocks[0].lines[0]")]),
        {"route": "review", "reasons": ["low confidence"]},
    )


def test_to_dict_writes_the_1_0_shape_exactly() -> None:
    result = _document().to_dict()
    validate_result(result)
    line = result["pages"][0]["blocks"][0]["lines"][0]
    # Values as given (rounded, never coerced: 300 stays an integer) and keys in the documented order.
    assert json.dumps(line["words"][1]) == '{"text": "12.50", "box": [70, 20.6, 110, 40], "confidence": 1}'
    assert list(line) == [
        "text",
        "box",
        "polygon",
        "confidence",
        "char_confidences",
        "rotated_180",
        "engine",
        "occluded",
        "words",
    ]
    assert line["char_confidences"][2] == 0.988
    assert result["pages"][0]["dpi"] == 300 and isinstance(result["pages"][0]["dpi"], int)
    assert list(result) == [
        "schema_version",
        "appliance_version",
        "created",
        "source",
        "engine",
        "page_count",
        "confidence",
        "timings_ms",
        "pages",
        "text",
        "fields",
        "repairs",
        "routing",
    ]
    # An engine's own keys pass through in its order.
    assert list(result["engine"]) == ["name", "manifest", "models", "classes"]
    assert result["fields"]["total"] == {
        "raw": "12.50",
        "value": "12.50",
        "confidence": 0.8765,
        "boxes": [[70, 20.6, 110, 40]],
        "rules": ["amount.decimal_point"],
        "checks": [{"rule": "totals.items", "passed": True, "detail": "1 item"}],
        "review": False,
        "reasons": [],
    }
    assert result["repairs"]["changes"][0]["rule"] == "text.whitespace"
    assert result["timings_ms"] == {"total": 5.55}


def _legacy_result() -> dict[str, Any]:
    """A 1.0 result as early versions wrote it: no fields, repairs, routing, occlusions or occluded."""
    return {
        "schema_version": "1.0",
        "appliance_version": "0.1.0",
        "created": "2025-06-01T10:00:00+00:00",
        "source": {
            "name": "a.pdf",
            "path": "/in/a.pdf",
            "sha256": "a" * 64,
            "size": 10,
            "media_type": "application/pdf",
        },
        "engine": {"name": "ppocr_onnx", "models": []},
        "page_count": 1,
        "confidence": None,
        "timings_ms": {},
        "pages": [
            {
                "index": 0,
                "width": 10,
                "height": 10,
                "dpi": None,
                "confidence": 0.5,
                "text_layer_chars": None,
                "timings_ms": {"det": 1.0},
                "warnings": [],
                "blocks": [
                    {
                        "box": [0, 0, 1, 1],
                        "lines": [
                            {
                                "text": "a",
                                "box": [0, 0, 1, 1],
                                "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
                                "confidence": 0.5,
                                "char_confidences": [0.5],
                                "rotated_180": False,
                                "engine": "",
                                "words": [],
                            }
                        ],
                    }
                ],
            }
        ],
        "text": "a",
    }


def test_results_written_by_earlier_versions_still_validate() -> None:
    validate_result(_legacy_result())


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("schema_version",), "2.0"),
        (("unknown",), 1),
        (("source", "sha256"), "ABC"),
        (("source", "media_type"), "text/plain"),
        (("confidence",), 1.5),
        (("pages", 0, "width"), 0),
        (("pages", 0, "blocks", 0, "lines", 0, "text"), ""),
        (("pages", 0, "blocks", 0, "lines", 0, "polygon"), [[0, 0]]),
        (("pages", 0, "blocks", 0, "lines", 0, "box"), [0, 0, 1]),
        (("pages", 0, "preprocessing"), [{"step": "sharpen", "params": {}, "ms": 1}]),
        (("routing",), {"route": "later", "reasons": []}),
        (
            ("repairs",),
            {"ruleset_version": "1", "changes": [{"rule": "", "before": "", "after": "", "ref": ""}]},
        ),
    ],
)
def test_schema_rejects_what_1_0_forbids(path: tuple[str | int, ...], value: object) -> None:
    result = copy.deepcopy(_legacy_result())
    target: Any = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    # validate_result asks jsonschema-rs first and jsonschema only for the error's wording: a result
    # that jsonschema-rs passed would be written without jsonschema ever seeing it.
    assert not _quick_validator().is_valid(result)
    with pytest.raises(jsonschema.ValidationError):
        validate_result(result)


def test_the_quick_check_passes_what_jsonschema_passes() -> None:
    for result in (_legacy_result(), _document().to_dict()):
        assert not list(jsonschema.Draft202012Validator(result_schema()).iter_errors(result))
        assert _quick_validator().is_valid(result)


def test_sha256_file_streams_the_file(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # over 2 MiB: more than one read
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
