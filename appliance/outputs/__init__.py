"""Result files rendered from the Document model, written atomically."""
