"""Training recipe for the appliance's own small OCR vision-language model (synthetic lines only)."""
