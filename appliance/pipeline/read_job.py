"""Reading one job, the same in a daemon worker and in `ocr-appliance process`: read, correct, route.

A `JobReader` lives as long as its engine (one per worker process, one per CLI run). It builds
a document processor once per configuration it is asked for and keeps the site dictionary,
which is re-read only when its file changes; each job hands in what the journal already knows
of the file (its sha256, its media type where known), so nothing is hashed or sniffed twice,
and gets back the Document, its route and the page images its outputs need (`PageImages`:
taken page by page while reading, so no output rasterizes the file again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.config import ProfileConfig, RasterizeConfig, RepairConfig
from appliance.document import Document
from appliance.engines.base import Engine
from appliance.pipeline.page_images import PageImages
from appliance.pipeline.process import DocumentProcessor, route_document
from appliance.pipeline.rasterize import Rasterizer
from appliance.review import SiteDictionary, apply_site_dictionary
from appliance.routing import DONE, Decision

# Processors kept per reader: one per profile in use is the usual case; a config reload that
# changes a profile adds one, and the oldest goes once there are more than this.
_MAX_PROCESSORS = 8


@dataclass(frozen=True)
class JobFile:
    """The file to read and what the journal already knows of it."""

    path: Path
    source_path: str | None = None  # where it came from (its hot folder path) when `path` is a spool copy
    sha256: str | None = None  # None: hashed while reading (a file no journal has seen)
    media_type: str | None = None  # None: sniffed from its first bytes


@dataclass(frozen=True)
class ReadOptions:
    """How to read one job: its profile's settings and what its outputs will need."""

    profile: ProfileConfig
    repair: RepairConfig
    route: bool = True  # decide done, audit or review; False: every document is done
    pdf_images: bool = False  # keep each page's image for a searchable PDF
    review_images: bool = False  # keep each page's PNG for a review folder
    vlm_skip_reason: str | None = None  # why the cascade must not call the VLM this time (vlm_breaker)
    site_dictionary: Path | None = None  # the reviewers' corrections file; None: none applied


@dataclass
class JobRead:
    """A read job: its document, where it goes, and its page images for the outputs.

    Close it (or use it as a context manager) once the outputs are written: that removes the
    page images kept for review.
    """

    document: Document
    decision: Decision
    pages: PageImages

    def close(self) -> None:
        self.pages.close()

    def __enter__(self) -> JobRead:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class JobReader:
    """Reads jobs with one engine; processors and site dictionaries are built once and reused.

    Several threads may read jobs at once (a worker's `jobs.per_worker`): the engine is shared,
    and the processors and dictionaries kept here are looked up under a lock.
    """

    def __init__(self, engine: Engine, rasterize: RasterizeConfig) -> None:
        self._engine = engine
        self._rasterizer = Rasterizer(rasterize)
        self._processors: dict[str, DocumentProcessor] = {}
        self._dictionaries: dict[Path, SiteDictionary] = {}
        self._lock = threading.Lock()

    def read(
        self,
        file: JobFile,
        options: ReadOptions,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        on_page: Callable[[int], None] = lambda _index: None,
    ) -> JobRead:
        """Read, correct and route one file; raise DocumentError (InterruptedError on a stop)."""
        pages = PageImages(pdf=options.pdf_images, review=options.review_images)
        try:
            document = self.processor(options.profile, options.repair).process(
                file.path,
                should_stop=should_stop,
                source_path=file.source_path,
                on_page=on_page,
                sha256=file.sha256,
                media_type=file.media_type,
                on_raster=pages.keep,
                vlm_skip_reason=options.vlm_skip_reason,
            )
            dictionary = self._site_dictionary(options.site_dictionary)
            if options.route:
                decision = route_document(document, options.profile.routing, dictionary)
            else:
                apply_site_dictionary(document, dictionary)
                decision = Decision(DONE)
        except BaseException:
            pages.close()
            raise
        return JobRead(document, decision, pages)

    def processor(self, profile: ProfileConfig, repair: RepairConfig) -> DocumentProcessor:
        """The processor for a profile's settings, built the first time they are asked for."""
        key = "\n".join(
            (
                profile.preprocess.model_dump_json(),
                profile.cascade.model_dump_json(),
                repair.model_dump_json(),
            )
        )
        with self._lock:
            processor = self._processors.get(key)
            if processor is None:
                if len(self._processors) >= _MAX_PROCESSORS:
                    self._processors.pop(next(iter(self._processors)))
                processor = DocumentProcessor(
                    self._engine, self._rasterizer, repair, profile.preprocess, profile.cascade
                )
                self._processors[key] = processor
            return processor

    def _site_dictionary(self, path: Path | None) -> dict[str, dict[str, str]]:
        if path is None:
            return {}
        with self._lock:
            dictionary = self._dictionaries.get(path)
            if dictionary is None:
                dictionary = self._dictionaries[path] = SiteDictionary(path)
            return dictionary.load()  # re-reads the file only when its mtime or size changed
