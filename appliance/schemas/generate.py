"""The result's JSON Schema, generated from the result models; `python -m appliance.schemas` writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema

from appliance.schemas.result import SCHEMA_VERSION, DocumentResult

SCHEMA_FILE = Path(__file__).with_name("result.schema.json")
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _ResultSchema(GenerateJsonSchema):
    """Pydantic's generator without the titles it derives from Python names and without defaults.

    Titles like "Char Confidences" say nothing the key does not, and defaults describe how the
    models fill a missing key, not what a reader may rely on.
    """

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> JsonSchemaValue:
        result = super().generate(schema, mode)
        for definition in result.get("$defs", {}).values():
            definition.pop("title", None)
        cleaned: JsonSchemaValue = _without_defaults(result)
        return cleaned


def _without_defaults(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_defaults(item) for key, item in value.items() if key != "default"}
    if isinstance(value, list):
        return [_without_defaults(item) for item in value]
    return value


def result_schema() -> dict[str, Any]:
    """The result's JSON Schema (draft 2020-12), with its dialect, id and version."""
    generated = DocumentResult.model_json_schema(schema_generator=_ResultSchema)
    return {
        "$schema": DIALECT,
        "$id": f"urn:ocr-appliance:result:{SCHEMA_VERSION}",
        "title": "OCR appliance document result",
        **{key: value for key, value in generated.items() if key != "title"},
    }


def schema_text() -> str:
    """The schema file's text: stable key order, so a change shows as a small diff."""
    return json.dumps(result_schema(), indent=2, ensure_ascii=False) + "\n"
