"""File names as the kernel gives them: shown escaped, stored losslessly, shortened to fit NAME_MAX.

Linux accepts any bytes in a name but `/` and NUL, and SMB or NFS clients do produce names that are
not UTF-8. Python hands those over as str with surrogate escapes (PEP 383), which round-trip to the
original bytes through `os.fsencode` but cannot be encoded as UTF-8: SQLite, protobuf, JSON writers
and journald all refuse them. So a name is kept as such a str inside the appliance, stored as bytes,
and turned into `display()` text only where it leaves for a person or a UTF-8-only format.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

# Linux's limit on one path component, in bytes (ext4, xfs, btrfs, tmpfs; NFS and SMB pass it on).
NAME_MAX = 255
# Hex digits of the full name's sha256 kept in a shortened name: 40 bits tell names apart that
# share their first 200-odd bytes, and keep the cut prefix long enough to recognise.
_HASH_DIGITS = 10


def display(text: str) -> str:
    r"""`text` as valid UTF-8 text: bytes that are not UTF-8 become `\xNN`; never raises.

    Lossy on purpose (a real backslash is not doubled): for logs, APIs and JSON that people read;
    the lossless form is `os.fsencode(text)`.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no file name produced (e.g. from JSON)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def display_all(value: Any) -> Any:
    """`value` with every str inside dicts, lists and tuples passed through `display`."""
    if isinstance(value, str):
        return display(value)
    if isinstance(value, dict):
        return {display_all(key): display_all(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [display_all(item) for item in value]
    return value


def name_bytes(name: str) -> int:
    """The length of `name` on disk, in bytes."""
    return len(os.fsencode(name))


def fit_name(name: str, suffix: str = "", limit: int = NAME_MAX) -> str:
    """`name + suffix`, or a deterministic shorter name when that would exceed `limit` bytes.

    The shorter name keeps a prefix of `name` cut at a character boundary (never inside a UTF-8
    sequence: every str character is one code point or one escaped raw byte), then `~` and a
    short hash of the full name, then `suffix`, so two long names that share a prefix stay apart
    and the same name always maps to the same shortened one.
    """
    if name_bytes(name + suffix) <= limit:
        return name + suffix
    tag = "~" + hashlib.sha256(os.fsencode(name)).hexdigest()[:_HASH_DIGITS]
    room = limit - name_bytes(tag + suffix)
    if room < 0:
        raise ValueError(f"suffix {display(suffix)!r} leaves no room for a name within {limit} bytes")
    prefix, used = [], 0
    for char in name:
        width = name_bytes(char)
        if used + width > room:
            break
        prefix.append(char)
        used += width
    return "".join(prefix) + tag + suffix
