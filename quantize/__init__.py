"""Offline tools that derive the INT8 and FP16 model sets from the verified FP32 PP-OCRv5 files."""
