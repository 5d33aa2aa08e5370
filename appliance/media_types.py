"""The input formats the appliance reads, told apart by their first bytes (one signature table)."""

from __future__ import annotations

PDF = "application/pdf"
TIFF = "image/tiff"
JPEG = "image/jpeg"
PNG = "image/png"
BMP = "image/bmp"
WEBP = "image/webp"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Magic numbers of the formats we read; the extension alone is never trusted. WebP is a RIFF
# container, told by two fields rather than a prefix (see sniff).
SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", PDF),
    (b"II*\x00", TIFF),
    (b"MM\x00*", TIFF),
    (b"II+\x00", TIFF),  # BigTIFF
    (b"MM\x00+", TIFF),
    (b"\xff\xd8\xff", JPEG),
    (PNG_SIGNATURE, PNG),
    (b"BM", BMP),
)
# Enough of a file's head for every signature above and WebP's RIFF fields.
HEAD_SIZE = 16


def sniff(head: bytes) -> tuple[str | None, bool]:
    """(media type, whether `head` is shorter than that type's signature) from a file's first bytes.

    A file cut inside its own signature (a scanner that has written 3 bytes so far) is still a
    file being written, not an unknown format to refuse: intake waits for it, the reader refuses
    it. (None, False) means no format we read.
    """
    for signature, media_type in SIGNATURES:
        if head.startswith(signature):
            return media_type, False
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP, False
    for signature, media_type in SIGNATURES:
        if len(head) < len(signature) and signature.startswith(head):
            return media_type, True
    if len(head) < 12 and b"RIFF".startswith(head[:4]) and b"WEBP".startswith(head[8:12]):
        return WEBP, True
    return None, False
