"""Regenerate appliance/schemas/result.schema.json from the result models (`make schema`)."""

from appliance.schemas.generate import SCHEMA_FILE, schema_text

if __name__ == "__main__":
    SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
    print(SCHEMA_FILE)
