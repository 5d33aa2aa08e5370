"""Offline OCR appliance: hot-folder intake, quantized OCR engines, repaired and routed results."""

__version__ = "0.1.0"
