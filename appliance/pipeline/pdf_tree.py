"""Finds a loop in a PDF's page tree (a /Pages node whose /Kids lead back to itself or an ancestor).

pdfium stops at such a loop and reports the pages it met before it, so a hostile or broken file
would be read as fewer pages than it claims, without a word. pikepdf (qpdf) gives the raw objects
and their object numbers without building its own page list, which is what a walk needs.
"""

from __future__ import annotations

from pathlib import Path

import pikepdf


def page_tree_loop(path: Path) -> str | None:
    """A description of the first loop in `path`'s page tree, or None (also when pikepdf cannot open it).

    A node reached again through another branch (a shared subtree) is not a loop and is not
    walked twice, so a crafted tree of shared nodes cannot make this walk exponential.
    """
    try:
        # Without inherit_page_attributes qpdf does not build its own page list on open (which
        # stops at a loop with an error message to parse); the walk below names the loop itself.
        with pikepdf.open(path, inherit_page_attributes=False) as pdf:
            root = pdf.Root.get("/Pages")
            if not isinstance(root, pikepdf.Dictionary):
                return None
            seen: set[tuple[int, int]] = set()
            stack: list[tuple[pikepdf.Dictionary, tuple[tuple[int, int], ...]]] = [(root, ())]
            while stack:
                node, ancestors = stack.pop()
                ident = node.objgen
                if ident != (0, 0):  # a direct object cannot be referred to, so it cannot loop
                    if ident in ancestors:
                        return (
                            f"its page tree loops: /Pages object {ident[0]} {ident[1]} R is its own "
                            "ancestor through /Kids"
                        )
                    if ident in seen:
                        continue
                    seen.add(ident)
                kids = node.get("/Kids")
                if not isinstance(kids, pikepdf.Array):
                    continue
                for kid in kids:
                    if isinstance(kid, pikepdf.Dictionary) and "/Kids" in kid:
                        stack.append((kid, (*ancestors, ident)))
    except (pikepdf.PdfError, pikepdf.PasswordError, OSError):
        return None  # pdfium's verdict on the file stands
    return None
