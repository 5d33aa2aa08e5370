"""Rule-based repair of OCR text: a versioned rule set of small, pure, table-tested rules."""

from appliance.repair.ruleset import RULES, RULESET_VERSION, Change, Check, RepairLog

__all__ = ["RULES", "RULESET_VERSION", "Change", "Check", "RepairLog"]
