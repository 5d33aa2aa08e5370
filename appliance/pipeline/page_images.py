"""What the outputs need of each page image, kept as the reader passes it, so no output rasterizes again.

Memory: a page image is kept only as long as its page is being read. What an output needs of it
is taken on the way past: the searchable PDF's JPEG (in memory: about a twentieth of the raw
pixels, and the PDF writer holds every page's JPEG at once when it assembles the file anyway),
and the review folder's pages, wanted only if the document ends up in review. Those are held as
pixels while they fit `REVIEW_MEMORY_BYTES` and encoded as PNG only when the review folder asks
for them: most documents are not reviewed, and encoding a page as PNG took 26-31 ms on average
(`python -m bench.host_stages --review`, bench/README.md). The
pages beyond that are written as PNG to a private temporary folder and read back one page at a
time, because a 500-page document's pages must not sit in memory waiting for the route.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import cv2
import numpy as np

from appliance.outputs.searchable_pdf import PageImage, encode_page, needs_page_images
from appliance.pipeline.rasterize import RasterPage

# Raw pixels of the review pages one document may hold in memory: one colour A4 page at 300 dpi
# (26 MB), or a receipt photo several times over.
REVIEW_MEMORY_BYTES = 32 * 1024 * 1024


class PageImages:
    """Collects, page by page, the searchable PDF's images and the review PNGs of one document.

    A context manager: leaving it removes the review PNGs that were not needed.
    """

    def __init__(self, *, pdf: bool, review: bool, review_memory_bytes: int = REVIEW_MEMORY_BYTES) -> None:
        self._pdf = pdf
        self._review = review
        self._memory_budget = review_memory_bytes
        self.pdf_images: list[PageImage] = []
        self._folder: Path | None = None
        self._review_pages: list[int] = []
        self._held: dict[int, np.ndarray] = {}

    def keep(self, raster: RasterPage, media_type: str) -> None:
        """Take what the outputs need of one page as it passes."""
        if self._pdf and needs_page_images(media_type):
            self.pdf_images.append(encode_page(raster.image))
        if not self._review:
            return
        held_bytes = sum(image.nbytes for image in self._held.values())  # only what fits the budget
        if held_bytes + raster.image.nbytes <= self._memory_budget:
            # A copy: the reader's stages may work on the page's own array after this.
            self._held[raster.index] = raster.image.copy()
            self._review_pages.append(raster.index)
            return
        ok, png = cv2.imencode(".png", raster.image)
        if ok:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="ocr-appliance-pages-"))
            (self._folder / f"{raster.index}.png").write_bytes(png.tobytes())
            self._review_pages.append(raster.index)

    def pdf_pages(self) -> list[PageImage] | None:
        """The searchable PDF's page images; None when none were kept (it then reads the source)."""
        return self.pdf_images if self.pdf_images else None

    def review_pngs(self) -> Iterator[tuple[int, bytes]]:
        """(page index, PNG bytes) of each page, encoded or read back one at a time."""
        for index in self._review_pages:
            held = self._held.get(index)
            if held is None:
                assert self._folder is not None
                yield index, (self._folder / f"{index}.png").read_bytes()
                continue
            ok, png = cv2.imencode(".png", held)
            if ok:
                yield index, png.tobytes()

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        self.pdf_images = []
        self._review_pages = []
        self._held = {}

    def __enter__(self) -> PageImages:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
