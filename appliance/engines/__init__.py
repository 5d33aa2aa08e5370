"""OCR engines behind one small protocol, and the factory that builds the configured one."""
