"""Field extraction from a read Document: each field with raw and normalised value, confidence, boxes."""

from appliance.fields.model import FieldValue

__all__ = ["FieldValue"]
