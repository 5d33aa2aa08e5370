"""The JSON result: the Document serialised and checked against the versioned JSON Schema."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import jsonschema_rs

from appliance.document import Document

SCHEMA_FILE = "result.schema.json"


@cache
def result_schema() -> dict[str, Any]:
    text = resources.files("appliance").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> jsonschema.Draft202012Validator:
    """The schema checked once: jsonschema.validate checks it again on every call (~50 ms each)."""
    jsonschema.Draft202012Validator.check_schema(result_schema())
    return jsonschema.Draft202012Validator(result_schema())


@cache
def _quick_validator() -> jsonschema_rs.Draft202012Validator:
    """The same schema in jsonschema-rs, which only says whether a result is valid.

    jsonschema's walk in Python, paid on every write, was most of the 29-33 ms that rendering a
    page's JSON took; with this check first it takes 6-7 ms (`python -m bench.host_stages --formats
    json`, bench/README.md). Formats are annotations in draft 2020-12 and jsonschema checks none by
    default, so neither does this one.
    """
    return jsonschema_rs.Draft202012Validator(result_schema(), validate_formats=False)


def validate_result(result: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if a result does not follow the schema."""
    if _quick_validator().is_valid(result):
        return
    # The error itself comes from jsonschema, as jsonschema.validate gives it, so callers and the
    # messages they log stay the same; it is the last word when the two ever disagree.
    error = jsonschema.exceptions.best_match(_validator().iter_errors(result))
    if error is not None:
        raise error


def render_json(document: Document) -> bytes:
    result = document.to_dict()
    # Validated on every write: a result that breaks the schema is a bug we want to see at once,
    # not a file that a site's importer chokes on later.
    validate_result(result)
    return (json.dumps(result, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
