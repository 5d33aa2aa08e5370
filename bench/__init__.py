"""Accuracy and speed benchmark of the appliance's OCR pipeline against Tesseract 5."""
