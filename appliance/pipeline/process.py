"""Reads one input file into a Document: hash, rasterize page by page, engine, reading order; routes it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from appliance import __version__
from appliance.config import CascadeConfig, PreprocessConfig, RepairConfig, RoutingConfig
from appliance.document import Document, Page, SourceFile
from appliance.engines.base import Engine
from appliance.engines.factory import second_reader_of
from appliance.errors import DocumentError, EngineUnavailableError, FailureReason
from appliance.hashing import sha256_file
from appliance.names import display
from appliance.pipeline.cascade import Cascade, prepare_joint
from appliance.pipeline.preprocess import read_page
from appliance.pipeline.rasterize import Rasterizer, RasterPage, sniff_media_type
from appliance.repair.step import repair_document
from appliance.review import apply_site_dictionary
from appliance.routing import Decision, decide

log = logging.getLogger(__name__)


def route_document(
    document: Document, routing: RoutingConfig, site_dictionary: dict[str, dict[str, str]] | None = None
) -> Decision:
    """Route a read document as the daemon does: the site's learned corrections first, then decide.

    Sets `document.routing`, so the results say where the daemon would send the document; moving
    it to a review or audit folder is the caller's business (the daemon's, never a one-shot read).
    """
    apply_site_dictionary(document, site_dictionary or {})
    decision = decide(document, routing)
    document.routing = decision.to_dict()
    return decision


class DocumentProcessor:
    """Turns files into Documents with one engine; safe to reuse for many files."""

    def __init__(
        self,
        engine: Engine,
        rasterizer: Rasterizer,
        repair: RepairConfig | None = None,
        preprocess: PreprocessConfig | None = None,
        cascade: CascadeConfig | None = None,
    ) -> None:
        self._engine = engine
        reader = second_reader_of(engine, cascade.reader) if cascade else None
        # The profile's cascade, when it has one and its second reader is loaded (the config refuses
        # a cascade without one; a processor built by hand may still pair them wrongly).
        self._cascade = (
            Cascade(reader, cascade) if reader is not None and cascade and cascade.mode != "off" else None
        )
        # `keep: joint` (lines only) needs both readers' scores: the first engine (an EnginePair's
        # `first`) keeps its step evidence and the second reader scores its hints from now on.
        if (
            self._cascade is not None
            and cascade is not None
            and cascade.unit == "lines"
            and self._cascade.keep == "joint"
            and not prepare_joint(getattr(engine, "first", engine), reader)
        ):
            log.warning("cascade.keep joint: a reader keeps no scores; its lines are kept by more_confident")
        self._rasterizer = rasterizer
        self._repair = repair or RepairConfig()
        self._preprocess = preprocess or PreprocessConfig()
        self._engine_description = engine.describe()

    def process(
        self,
        path: Path,
        should_stop: Callable[[], bool] = lambda: False,
        source_path: str | None = None,
        on_page: Callable[[int], None] = lambda _index: None,
        *,
        sha256: str | None = None,
        media_type: str | None = None,
        on_raster: Callable[[RasterPage, str], None] | None = None,
        vlm_skip_reason: str | None = None,
    ) -> Document:
        """Read every page of `path`; raise DocumentError with a reason if the file cannot be read.

        `should_stop` is checked between pages so a shutdown does not wait for a long document;
        the caller then leaves the file where it is and nothing half-done is written.
        `source_path` is where the file came from (its hot folder path) when `path` is a spool copy.
        `on_page` is called with each page's index once it is read (the daemon's watchdog uses it
        to tell a slow document from a hung engine).
        `sha256` and `media_type` are what the journal already knows of the file (hashed and
        sniffed here when not given). `on_raster` gets each page image, with the media type, as
        it is rasterized, before it is read, for outputs that need the pixels (page_images.py);
        the image is not kept here. `vlm_skip_reason` says why the cascade must not call the
        VLM this time (vlm_breaker).
        """
        started = time.perf_counter()
        try:
            size = self._rasterizer.check_size(path)
            media_type = media_type or sniff_media_type(path)
            digest = sha256 or sha256_file(path)
        except OSError as error:
            raise DocumentError(
                FailureReason.CORRUPT, f"{path.name} cannot be read: {error.strerror}"
            ) from None
        source = SourceFile(
            # Shown escaped: every result format is UTF-8, and a name need not be (names.display).
            name=display(path.name),
            path=display(source_path or str(path)),
            sha256=digest,
            size=size,
            media_type=media_type,
        )
        document = Document(
            source=source,
            engine=self._engine_description,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            appliance_version=__version__,
        )
        refine = self._cascade.refiner(vlm_skip_reason) if self._cascade else None
        raster_started = time.perf_counter()
        for raster in self._rasterizer.pages(path, media_type):
            raster_ms = (time.perf_counter() - raster_started) * 1000
            if should_stop():
                raise InterruptedError(f"stopped while reading {path.name}")
            if on_raster is not None:
                on_raster(raster, media_type)
            try:
                # Preprocessing, the engine and reading order; boxes come back in raster pixels.
                page_read = read_page(
                    self._engine,
                    raster.image,
                    self._preprocess,
                    refine=refine,
                )
            except DocumentError:
                raise
            except MemoryError:
                raise DocumentError(
                    FailureReason.ENGINE_ERROR,
                    f"{path.name} page {raster.index + 1}: out of memory",
                    transient=True,
                ) from None
            except EngineUnavailableError as error:
                # The session server died with a run in flight; the daemon starts it again.
                raise DocumentError(
                    FailureReason.ENGINE_ERROR,
                    f"{path.name} page {raster.index + 1}: {error}",
                    transient=True,
                ) from None
            page_text = page_read.text
            blocks = page_read.blocks
            timings = {"rasterize": raster_ms, **page_read.timings_ms}
            height, width = raster.image.shape[:2]
            document.pages.append(
                Page(
                    index=raster.index,
                    width=width,
                    height=height,
                    dpi=raster.dpi,
                    blocks=blocks,
                    timings_ms=timings,
                    warnings=[*raster.warnings, *page_text.warnings, *page_read.warnings],
                    text_layer_chars=raster.text_layer_chars,
                    preprocessing=page_read.steps,
                    occlusions=page_read.occlusions,
                    engine_details=page_text.details,
                    review_reasons=page_text.review_reasons,
                )
            )
            log.debug("%s page %d: %d lines", path.name, raster.index + 1, len(page_text.lines))
            on_page(raster.index)
            raster_started = time.perf_counter()
        repair_started = time.perf_counter()
        repair_document(document, self._repair)
        repair_ms = (time.perf_counter() - repair_started) * 1000
        stages: dict[str, float] = {}
        for page in document.pages:
            for stage, value in page.timings_ms.items():
                stages[stage] = stages.get(stage, 0.0) + value
        stages["repair"] = repair_ms
        stages["total"] = (time.perf_counter() - started) * 1000
        document.timings_ms = stages
        return document
