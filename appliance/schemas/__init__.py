"""The JSON result's schema: pydantic models (result.py) and the JSON Schema file made from them."""
