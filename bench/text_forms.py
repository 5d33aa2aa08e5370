"""The two text forms CER is counted on: whitespace-free, and with whitespace runs as one space.

Kept apart from bench.scoring (which needs the appliance's layout code) so that the line-reader
training tools on a GPU box, where the appliance is not installed, count CER the same way.
"""

from __future__ import annotations


def normalize(text: str, case_insensitive: bool) -> str:
    """Remove all whitespace; case-fold when the dataset is scored case-insensitively."""
    stripped = "".join(text.split())
    return stripped.casefold() if case_insensitive else stripped


def normalize_spaced(text: str, case_insensitive: bool) -> str:
    """Runs of whitespace collapsed to one space, ends trimmed; case-folded when the set says so."""
    spaced = " ".join(text.split())
    return spaced.casefold() if case_insensitive else spaced
