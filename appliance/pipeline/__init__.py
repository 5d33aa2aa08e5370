"""From an input file to a Document: rasterize, read each page with the engine, order the lines."""
