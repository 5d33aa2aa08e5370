"""JSON from a model's output: repaired with json-repair, then validated with jsonschema."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from json_repair import repair_json

from appliance.repair.ruleset import Change, Check


@dataclass
class JsonResult:
    """The parsed value (None if nothing usable), what was repaired, and the schema check."""

    value: Any
    changes: list[Change] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.value is not None and all(check.passed for check in self.checks)


def parse_model_json(text: str, schema: dict[str, Any] | None = None, ref: str = "model") -> JsonResult:
    """Parse what should be JSON; repair it only when plain parsing fails, and say so."""
    result = JsonResult(None)
    try:
        result.value = json.loads(text)
    except json.JSONDecodeError:
        repaired = repair_json(text, skip_json_loads=True)
        assert isinstance(repaired, str)
        if repaired in {"", '""'}:
            result.checks.append(Check("json.repair", False, "nothing JSON-like in the output"))
            return result
        result.value = json.loads(repaired)
        result.changes.append(Change("json.repair", text, repaired, ref))
    if schema is not None:
        errors = sorted(
            jsonschema.Draft202012Validator(schema).iter_errors(result.value), key=lambda e: list(e.path)
        )
        detail = "; ".join(f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:5])
        result.checks.append(Check("json.schema", not errors, detail))
    return result
