"""Exceptions the appliance raises on purpose, each with a machine-readable reason, and exit codes."""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ExitCode(IntEnum):
    """Exit status of every `ocr-appliance` command (documented in the README)."""

    OK = 0
    INTERNAL_ERROR = 1
    USAGE = 2  # argparse's own code for bad arguments
    DOCUMENT_FAILED = 3  # at least one input could not be read; the others were processed
    CONFIG_INVALID = 4
    MODEL_INVALID = 5  # a model file is missing, altered or unloadable
    OUTPUT_FAILED = 6  # results could not be written
    AUDIT_TAMPERED = 7  # `audit verify`: an entry was edited, removed or reordered, or a line is cut
    # The control API commands (status, jobs, job, review...): one code per kind of refusal, by gRPC code.
    API_UNREACHABLE = 8  # no daemon answers on any socket looked at (UNAVAILABLE, DEADLINE_EXCEEDED)
    API_NOT_FOUND = 9  # no such job or review (NOT_FOUND)
    API_INVALID_ARGUMENT = 10  # a bad id, filter or value; an id prefix that matches several jobs
    API_PERMISSION_DENIED = 11  # this user may not use the socket (PERMISSION_DENIED)
    API_FAILED_PRECONDITION = 12  # valid but not now: the job is still running, not in review
    API_FAILED = 13  # any other refusal by the daemon (RESOURCE_EXHAUSTED, INTERNAL...)
    BROKEN_PIPE = 141  # the reader of our output went away (`| head`): 128 + SIGPIPE, as shells report it
    INTERRUPTED = 130  # stopped by SIGINT before finishing (128 + SIGINT, as shells report it)


class FailureReason(StrEnum):
    """Why a document failed; written into the failed folder's JSON reason file."""

    MISSING = "missing"
    UNSUPPORTED_FORMAT = "unsupported_format"
    CORRUPT = "corrupt"
    TRUNCATED = "truncated"
    ENCRYPTED = "encrypted"
    TOO_LARGE = "too_large"
    TOO_MANY_PAGES = "too_many_pages"
    PAGE_TOO_LARGE = "page_too_large"
    EMPTY = "empty"
    ENGINE_ERROR = "engine_error"
    INCOMPLETE = "incomplete"  # still not a complete file after intake.incomplete_timeout_seconds
    POISON = "poison"  # killed or hung its worker on every attempt
    CRASHED_DAEMON = "crashed_daemon"  # being read at every one of journal.MAX_DAEMON_RESTARTS daemon crashes
    GAVE_UP = "gave_up"  # a transient error on every attempt
    OUTPUT_ERROR = "output_error"
    INTERNAL = "internal"


class ApplianceError(Exception):
    """Base class of the errors the appliance reports to users."""


class ConfigError(ApplianceError):
    """The configuration file is missing, unparsable or invalid; the message names the key path."""


class ModelError(ApplianceError):
    """A model file is missing, does not match its manifest, or cannot be loaded."""


class ProviderError(ModelError):
    """The requested onnxruntime execution provider is not usable on this machine."""


class EngineUnavailableError(ApplianceError):
    """What runs the engine's models went away (the session server): the same read may well succeed later.

    The daemon starts such a process again; a document whose read it cut short is retried, not
    failed (pipeline/process.py makes it a transient engine error).
    """


class DocumentError(ApplianceError):
    """One input document cannot be processed; carries a `FailureReason` for the failed folder."""

    def __init__(self, reason: FailureReason, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        # Transient: the same file may well succeed later (the engine ran out of memory while
        # other work held it), so it is retried with backoff instead of failed.
        self.transient = transient

    @classmethod
    def missing(cls, path: object) -> DocumentError:
        return cls(FailureReason.MISSING, f"{path} does not exist or is not a regular file")
