"""Format completeness check: whether a settled hot-folder file has really been written to its end."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pypdfium2 as pdfium

from appliance.errors import FailureReason
from appliance.media_types import BMP, HEAD_SIZE, JPEG, PDF, PNG, TIFF, sniff

_PNG_IEND = b"\x00\x00\x00\x00IEND\xae\x42\x60\x82"
# Acrobat accepts %%EOF anywhere in the last 1024 bytes; that is also where we look for it.
_PDF_TAIL_SIZE = 1024
# Scanners pad JPEGs with a few NULs or a newline; 64 KiB of "padding" is rather a file preallocated
# by an SMB client and not yet filled, which must not pass.
_JPEG_TAIL_SIZE = 64 * 1024
_PADDING = b"\x00 \t\r\n\x0b\x0c"


@dataclass(frozen=True)
class CompletenessResult:
    """Whether a file is completely written; if not, why (for the log and the failed/ reason file)."""

    complete: bool
    media_type: str | None
    reason: str | None
    # The reason reported once a file stays like this past the timeout: a file that never got a
    # byte is `empty` (the README's reason), one cut short is `incomplete`.
    failure: FailureReason = FailureReason.INCOMPLETE


def check_complete(path: Path) -> CompletenessResult:
    """Whether `path` looks completely written, judged by its magic bytes and its format's end markers.

    Reads only the head and tail (and a TIFF's IFD tables), never the whole file. Any OSError
    (the file vanished or cannot be read) propagates.
    """
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return CompletenessResult(False, None, "file is empty", FailureReason.EMPTY)
        head = handle.read(HEAD_SIZE)
        media_type, partial_signature = sniff(head)
        if media_type is None:
            # Unknown bytes: the reader refuses them with a clear reason, and waiting would not help.
            return CompletenessResult(True, None, None)
        if partial_signature:
            return _incomplete(media_type, f"file is only {size} bytes, shorter than its format signature")
        if media_type == PDF:
            reason = _pdf_problem(handle, size, path)
        elif media_type == TIFF:
            reason = _TiffWalker(handle, size, head).problem()
        elif media_type == JPEG:
            reason = _jpeg_problem(handle, size)
        elif media_type == PNG:
            reason = _png_problem(handle, size)
        elif media_type == BMP:
            reason = _bmp_problem(head, size)
        else:
            reason = _webp_problem(head, size)
    if reason is None:
        return CompletenessResult(True, media_type, None)
    return _incomplete(media_type, reason)


def _incomplete(media_type: str, reason: str) -> CompletenessResult:
    return CompletenessResult(False, media_type, reason)


def _read_at(handle: BinaryIO, offset: int, length: int) -> bytes:
    handle.seek(offset)
    return handle.read(length)


def _read_tail(handle: BinaryIO, size: int, length: int) -> bytes:
    return _read_at(handle, max(0, size - length), length)


def _pdf_problem(handle: BinaryIO, size: int, path: Path) -> str | None:
    tail = _read_tail(handle, size, _PDF_TAIL_SIZE).rstrip(_PADDING)
    if not tail.endswith(b"%%EOF"):
        return "PDF does not end with an %%EOF marker (it may still be being written)"
    # %%EOF alone is not enough: an incremental update (a scanner appending a page, a signature)
    # ends each section with %%EOF, so the file can be cut just after an earlier one, or pdfium may
    # not yet find the cross-reference data of the last section.
    try:
        document = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as error:
        if error.err_code in (pdfium.raw.FPDF_ERR_PASSWORD, pdfium.raw.FPDF_ERR_SECURITY):
            # Completeness is not validity: the reader reports the file as encrypted later, and
            # waiting for a password would never end.
            return None
        if error.err_code == pdfium.raw.FPDF_ERR_FILE:
            # The file vanished or became unreadable between our open and pdfium's: the caller's
            # case, like any other OSError, not a reason to wait.
            raise OSError(f"{path}: {error}") from error
        return f"PDF cannot be opened yet: {error}"
    document.close()
    return None


def _jpeg_problem(handle: BinaryIO, size: int) -> str | None:
    tail = _read_tail(handle, size, _JPEG_TAIL_SIZE).rstrip(_PADDING)
    if tail.endswith(b"\xff\xd9"):
        return None
    return "JPEG has no end-of-image marker (FF D9)"


def _png_problem(handle: BinaryIO, size: int) -> str | None:
    if _read_tail(handle, size, len(_PNG_IEND)) == _PNG_IEND:
        return None
    return "PNG does not end with an IEND chunk"


def _bmp_problem(head: bytes, size: int) -> str | None:
    if len(head) < 6:
        return "BMP header is cut short"
    (declared,) = struct.unpack_from("<I", head, 2)
    if declared > size:
        return f"BMP header declares {declared} bytes but the file has {size}"
    return None


def _webp_problem(head: bytes, size: int) -> str | None:
    (riff_size,) = struct.unpack_from("<I", head, 4)
    if riff_size + 8 > size:
        return f"WebP RIFF header declares {riff_size + 8} bytes but the file has {size}"
    return None


# TIFF field types -> bytes per value (TIFF 6.0 plus BigTIFF's LONG8, SLONG8, IFD8).
_TIFF_TYPE_SIZES = {
    **dict.fromkeys((1, 2, 6, 7), 1),  # BYTE, ASCII, SBYTE, UNDEFINED
    **dict.fromkeys((3, 8), 2),  # SHORT, SSHORT
    **dict.fromkeys((4, 9, 11, 13), 4),  # LONG, SLONG, FLOAT, IFD
    **dict.fromkeys((5, 10, 12, 16, 17, 18), 8),  # RATIONAL, SRATIONAL, DOUBLE, LONG8, SLONG8, IFD8
}
_TIFF_UNSIGNED_CODES = {3: "H", 4: "I", 13: "I", 16: "Q", 18: "Q"}
_STRIP_OFFSETS, _STRIP_BYTE_COUNTS = 273, 279
_TILE_OFFSETS, _TILE_BYTE_COUNTS = 324, 325
_JPEG_IF_OFFSET, _JPEG_IF_LENGTH = 513, 514  # old-style JPEG-in-TIFF
# SubIFDs, Exif, GPS and Interoperability IFDs: their tables and values are part of the file too.
_IFD_POINTER_TAGS = (330, 34665, 34853, 40965)
# Real files have a few dozen entries per IFD and at most thousands of pages or strips; beyond these
# limits the "table" is garbage (or a preallocated hole) and reading it would only cost memory and time.
_MAX_IFD_ENTRIES = 4096
_MAX_IFDS = 100_000
_MAX_VALUES = 1 << 22
# Writers pad the end: to a word (TIFF 6.0), 8 bytes (BigTIFF), 16 bytes with NULs (Pillow's multi-page
# writer). More unreferenced bytes than this at the end are data that no IFD describes yet.
_TIFF_TRAILING_SLACK = 16


class _TiffStructureError(Exception):
    """The TIFF structure is not (yet) whole; the message is the reason. Caught inside the walker only."""


@dataclass(frozen=True)
class _Entry:
    tag: int
    field_type: int
    count: int
    value_field: bytes  # the inline 4 (8 for BigTIFF) bytes: the value itself or its offset


class _TiffWalker:
    """Follows a TIFF's IFDs and checks that every table, value and strip or tile lies in the file.

    Written by hand with `struct` because Pillow opens a truncated multi-page TIFF lazily and says
    nothing until it decodes the missing page, which happens long after the file was claimed.
    """

    def __init__(self, handle: BinaryIO, size: int, head: bytes) -> None:
        self._handle = handle
        self._size = size
        self._head = head
        self._order = "<" if head[:2] == b"II" else ">"
        self._big = head[2:4] in (b"+\x00", b"\x00+")
        # How far into the file the structure reaches: the end of every table, value and strip.
        self._extent = 0

    def problem(self) -> str | None:
        try:
            self._walk()
        except _TiffStructureError as problem:
            return str(problem)
        if self._size - self._extent > _TIFF_TRAILING_SLACK:
            # libtiff (behind many scanner drivers, and Pillow's compressed output) writes a page's
            # strips first and its IFD after them, linking it into the chain last: a file paused
            # while a page is being encoded has a whole, valid chain for the earlier pages and the
            # new page's strips dangling after it. Only those trailing bytes give it away.
            return (
                f"TIFF has {self._size - self._extent} bytes after the end of its last described data "
                "(a page is probably still being written)"
            )
        return None

    def _unpack(self, code: str, data: bytes, offset: int = 0) -> int:
        (value,) = struct.unpack_from(self._order + code, data, offset)
        return int(value)

    def _need(self, start: int, length: int, what: str) -> None:
        end = start + length
        if end > self._size:
            raise _TiffStructureError(
                f"TIFF {what} at offset {start} ends at {end}, past the end of the file ({self._size} bytes)"
            )
        self._extent = max(self._extent, end)

    def _walk(self) -> None:
        if self._big:
            if len(self._head) < 16:
                raise _TiffStructureError("BigTIFF header is cut short")
            if self._unpack("H", self._head, 4) != 8:
                raise _TiffStructureError("BigTIFF header has an offset size other than 8")
            first, header_size = self._unpack("Q", self._head, 8), 16
        else:
            if len(self._head) < 8:
                raise _TiffStructureError("TIFF header is cut short")
            first, header_size = self._unpack("I", self._head, 4), 8
        self._extent = header_size
        if first == 0:
            # libtiff writes the header first and points it at the first IFD once page 1 is done.
            raise _TiffStructureError("TIFF header does not point to an IFD yet")
        pending = [first]
        seen: set[int] = set()
        while pending:
            offset = pending.pop()
            if offset in seen:
                raise _TiffStructureError(
                    f"TIFF IFD at offset {offset} is reached twice (a loop in the IFD chain)"
                )
            if len(seen) >= _MAX_IFDS:
                raise _TiffStructureError(f"TIFF has more than {_MAX_IFDS} IFDs")
            seen.add(offset)
            pending.extend(self._check_ifd(offset))

    def _check_ifd(self, offset: int) -> list[int]:
        """Check one IFD; return the offsets of the IFDs it links to (next, sub-IFDs, Exif...)."""
        count_size, entry_size, link_code = (8, 20, "Q") if self._big else (2, 12, "I")
        if offset < 8:
            raise _TiffStructureError(f"TIFF IFD offset {offset} points into the header")
        self._need(offset, count_size, "IFD entry count")
        count = self._unpack(link_code if self._big else "H", _read_at(self._handle, offset, count_size))
        if count == 0:
            raise _TiffStructureError(f"TIFF IFD at offset {offset} has no entries")
        if count > _MAX_IFD_ENTRIES:
            raise _TiffStructureError(f"TIFF IFD at offset {offset} claims an implausible {count} entries")
        table_length = count * entry_size + (8 if self._big else 4)
        self._need(offset + count_size, table_length, "IFD entry table")
        table = _read_at(self._handle, offset + count_size, table_length)
        if len(table) < table_length:
            raise _TiffStructureError(
                f"TIFF IFD at offset {offset} could not be read whole (the file shrank)"
            )
        entries: dict[int, _Entry] = {}
        for index in range(count):
            entry = self._parse_entry(table, index * entry_size)
            entries[entry.tag] = entry
        links = [self._unpack(link_code, table, count * entry_size)]
        for entry in entries.values():
            self._check_value_inside(entry)
        for offsets_tag, counts_tag in (
            (_STRIP_OFFSETS, _STRIP_BYTE_COUNTS),
            (_TILE_OFFSETS, _TILE_BYTE_COUNTS),
        ):
            if offsets_tag in entries:
                self._check_data(entries[offsets_tag], entries.get(counts_tag))
        if _JPEG_IF_OFFSET in entries and _JPEG_IF_LENGTH in entries:
            (start,) = self._integers(entries[_JPEG_IF_OFFSET])[:1] or (0,)
            (length,) = self._integers(entries[_JPEG_IF_LENGTH])[:1] or (0,)
            if length:
                self._need(start, length, "JPEG interchange data")
        for tag in _IFD_POINTER_TAGS:
            # A pointer of an odd type is the reader's problem, not a sign of a file still growing.
            if tag in entries and entries[tag].field_type in _TIFF_UNSIGNED_CODES:
                links.extend(self._integers(entries[tag]))
        return [link for link in links if link != 0]

    def _parse_entry(self, table: bytes, at: int) -> _Entry:
        tag = self._unpack("H", table, at)
        field_type = self._unpack("H", table, at + 2)
        if self._big:
            return _Entry(tag, field_type, self._unpack("Q", table, at + 4), table[at + 12 : at + 20])
        return _Entry(tag, field_type, self._unpack("I", table, at + 4), table[at + 8 : at + 12])

    def _value_location(self, entry: _Entry) -> tuple[int, int] | None:
        """(offset, length) of an out-of-line value; None if inline or of a type we cannot size."""
        type_size = _TIFF_TYPE_SIZES.get(entry.field_type)
        if type_size is None:
            return None  # unknown types are skipped, as libtiff does
        length = type_size * entry.count
        if length <= len(entry.value_field):
            return None
        return self._unpack("Q" if self._big else "I", entry.value_field), length

    def _check_value_inside(self, entry: _Entry) -> None:
        location = self._value_location(entry)
        if location is not None:
            self._need(location[0], location[1], f"value of tag {entry.tag}")

    def _integers(self, entry: _Entry) -> tuple[int, ...]:
        code = _TIFF_UNSIGNED_CODES.get(entry.field_type)
        if code is None:
            raise _TiffStructureError(
                f"TIFF tag {entry.tag} has type {entry.field_type}, not an unsigned integer"
            )
        if entry.count > _MAX_VALUES:
            raise _TiffStructureError(f"TIFF tag {entry.tag} claims an implausible {entry.count} values")
        location = self._value_location(entry)
        if location is None:
            data = entry.value_field
        else:
            data = _read_at(self._handle, *location)
            if len(data) < location[1]:
                raise _TiffStructureError(
                    f"TIFF value of tag {entry.tag} could not be read whole (the file shrank)"
                )
        values = struct.unpack_from(f"{self._order}{entry.count}{code}", data)
        return tuple(int(value) for value in values)

    def _check_data(self, offsets_entry: _Entry, counts_entry: _Entry | None) -> None:
        offsets = self._integers(offsets_entry)
        if counts_entry is None:
            # Without byte counts (libtiff guesses them) we can only ask that each piece starts inside.
            for start in offsets:
                self._need(start, 1, "strip or tile")
            return
        counts = self._integers(counts_entry)
        if len(counts) != len(offsets):
            raise _TiffStructureError(
                f"TIFF has {len(offsets)} strip or tile offsets but {len(counts)} byte counts"
            )
        for start, length in zip(offsets, counts, strict=True):
            if length:  # a zero count is an empty (sparse) tile, whatever its offset says
                self._need(start, length, "strip or tile data")
