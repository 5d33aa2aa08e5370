"""The `ocr-appliance` command: run the daemon, read files once, check a config or the models."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import get_args

from appliance import __version__
from appliance.config import AppConfig, OutputFormat, load_config
from appliance.errors import ConfigError, DocumentError, ExitCode, ModelError

log = logging.getLogger("appliance")

DEFAULT_CONFIG = Path("/etc/ocr-appliance/config.yaml")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocr-appliance", description="Offline OCR appliance.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="watch the hot folders in the foreground until stopped")
    run.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"config file (default {DEFAULT_CONFIG})"
    )

    process = commands.add_parser("process", help="read files once, without the daemon")
    process.add_argument("files", nargs="+", type=Path, metavar="FILE")
    process.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder for the results")
    process.add_argument("--config", type=Path, help="config file (engine and limits; default: built-in)")
    process.add_argument(
        "--format",
        action="append",
        choices=get_args(OutputFormat),
        help="output format (repeatable; default: config)",
    )
    process.add_argument(
        "--profile",
        default="default",
        help="the profile whose preprocessing, cascade and routing to use (default: default)",
    )

    config = commands.add_parser("config", help="configuration tools")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = config_commands.add_parser("check", help="validate a config file")
    check.add_argument("file", type=Path)

    models = commands.add_parser("models", help="model tools")
    model_commands = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    verify = model_commands.add_parser(
        "verify", help="check model files against their manifest, load them, run one inference on CUDA"
    )
    verify.add_argument("--config", type=Path, help="config file (default: built-in)")

    audit = commands.add_parser("audit", help="audit log tools")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    audit_verify = audit_commands.add_parser(
        "verify", help="check an audit log's hash chain (exit 7 on any edited, removed or reordered entry)"
    )
    audit_source = audit_verify.add_mutually_exclusive_group(required=True)
    audit_source.add_argument("file", type=Path, nargs="?", help="the audit log file (SQLite journal)")
    audit_source.add_argument(
        "--config", type=Path, help="verify the chain in the PostgreSQL journal this config names"
    )

    from appliance import cli_api

    cli_api.register(commands)  # status, jobs, job, watch, pause... over the control API
    return parser


def _load(path: Path | None) -> AppConfig:
    return load_config(path) if path else AppConfig()


def _load_checked(path: Path | None) -> AppConfig:
    """The config, refused when it needs the vlm extra and that is not installed."""
    from appliance.vlm_extra import require_vlm_runtime

    config = _load(path)
    require_vlm_runtime(config, path or "built-in config")
    return config


def _cmd_config_check(args: argparse.Namespace) -> ExitCode:
    config = _load_checked(args.file)
    folders = ", ".join(str(folder.path) for folder in config.hot_folders) or "none"
    print(f"{args.file}: valid (engine {config.engine.name}, hot folders: {folders})")
    return ExitCode.OK


def _cmd_audit_verify(args: argparse.Namespace) -> ExitCode:
    from appliance.audit import verify

    if args.config is not None:
        config = _load(args.config)
        if config.journal.backend != "postgresql" or config.journal.dsn is None:
            audit_file = config.paths.state_dir / "audit.jsonl"
            print(f"{args.config}: the SQLite journal's chain is the file {audit_file}", file=sys.stderr)
            return ExitCode.USAGE
        from appliance.cluster.audit import verify as verify_database

        source, result = "audit table", verify_database(config.journal.dsn)
        where_kind = "entry"
    else:
        source, result = str(args.file), verify(args.file)
        where_kind = "line"
    if result.ok:
        print(f"{source}: {result.entries} entries, chain intact, head {result.head_hash}")
        return ExitCode.OK
    where = f"{where_kind} {result.line}: " if result.line else ""
    problem = result.problem.value if result.problem else "invalid"
    print(f"{source}: {where}{problem}: {result.message}", file=sys.stderr)
    print(f"{source}: {result.entries} entries verified before it", file=sys.stderr)
    return ExitCode.AUDIT_TAMPERED


def _cmd_models_verify(args: argparse.Namespace) -> ExitCode:
    from appliance.engines.factory import build_engine
    from appliance.engines.ppocr_onnx.provider_check import check_cuda, smallest_model

    config = _load_checked(args.config)
    engine = build_engine(config.engine)
    try:
        description = engine.describe()
        # A session created on CUDA is no proof that it runs there: one inference on the GPU is.
        first = getattr(engine, "first", engine)  # the ONNX engine of an EnginePair
        paths: dict[str, Path] = getattr(first, "model_paths", {})  # the ppocr_onnx engine's
        cuda = check_cuda(config.engine.ppocr_onnx.provider, smallest_model(paths))
    finally:
        engine.close()
    print(json.dumps({**description, "cuda_check": cuda}, indent=1))
    if not cuda["ok"]:
        print(f"the CUDA provider does not run here: {cuda['reason']}", file=sys.stderr)
        return ExitCode.MODEL_INVALID
    return ExitCode.OK


def _cmd_process(args: argparse.Namespace, stop: threading.Event) -> ExitCode:
    from appliance.engines.factory import build_engine
    from appliance.outputs.writer import write_outputs
    from appliance.pipeline.read_job import JobFile, JobReader, ReadOptions

    config = _load_checked(args.config)
    formats: tuple[OutputFormat, ...] = tuple(args.format) if args.format else config.outputs.formats
    if args.profile not in config.profiles:
        raise ConfigError(f"no profile {args.profile!r}; the config has {', '.join(sorted(config.profiles))}")
    engine = build_engine(config.engine)
    # One-shot reads use a profile's preprocessing, cascade and routing and the configured repair
    # rules and site dictionary, like the daemon (the same JobReader), so the same file gives the
    # same result and route either way: a site tries its routing on samples before going live.
    # Nothing is moved to a review folder; the route is in the results and on stdout.
    reader = JobReader(engine, config.rasterize)
    options = ReadOptions(
        profile=config.profiles[args.profile],
        repair=config.repair,
        pdf_images="pdf" in formats,
        site_dictionary=config.paths.state_dir / "site_dictionary.json",
    )
    failed = 0
    for path in args.files:
        if stop.is_set():
            return ExitCode.INTERRUPTED
        try:
            if not path.is_file():
                raise DocumentError.missing(path)
            read = reader.read(JobFile(path), options, should_stop=stop.is_set)
        except InterruptedError:
            return ExitCode.INTERRUPTED
        except DocumentError as error:
            failed += 1
            print(f"{path}: failed ({error.reason.value}): {error.message}", file=sys.stderr)
            continue
        with read:
            document, decision = read.document, read.decision
            try:
                images = read.pages.pdf_pages()
                written = write_outputs(
                    document, args.out, path.name, formats, source_path=path, page_images=images
                )
            except OSError as error:
                print(f"{path}: cannot write results to {args.out}: {error}", file=sys.stderr)
                return ExitCode.OUTPUT_FAILED
        confidence = "n/a" if document.confidence is None else f"{document.confidence:.3f}"
        why = f" ({'; '.join(decision.reasons)})" if decision.reasons else ""
        print(
            f"{path}: {len(document.pages)} page(s), confidence {confidence}, route {decision.route}{why} -> "
            + ", ".join(str(p) for p in written.values())
        )
    return ExitCode.DOCUMENT_FAILED if failed else ExitCode.OK


def _cmd_run(args: argparse.Namespace, stop: threading.Event, reload: threading.Event) -> ExitCode:
    from appliance.daemon import Daemon
    from appliance.engines.factory import build_engine
    from appliance.logging_setup import setup_logging

    config = _load_checked(args.config)
    setup_logging(config.logging.level)
    if not config.hot_folders:
        raise ConfigError(f"{args.config}: hot_folders is empty; there is nothing to watch")
    # The engine is built inside each worker process; a partial of a module-level function and a
    # (picklable) config is what the spawn start method can send there.
    daemon = Daemon(
        config,
        functools.partial(build_engine, config.engine, config.jobs.workers),
        config_path=args.config,
        factory_for=lambda new: functools.partial(build_engine, new.engine, new.jobs.workers),
    )
    daemon.start(notify_ready=False)
    for model in daemon.engine_description.get("models", []):
        if model.get("provider"):
            log.info(
                "engine %s: %s runs on %s",
                daemon.engine_description["name"],
                model["name"],
                model["provider"],
            )
    from appliance.api.server import ApiServer
    from appliance.control import Control

    api = ApiServer(Control(daemon), config.api)
    api.start()
    daemon.notify_ready()  # not before: `systemctl start` returns at READY=1, and the API must answer
    try:
        daemon.run(stop, reload)
    finally:
        api.stop()
    return ExitCode.OK


def _install_signal_handlers(stop: threading.Event, reload: threading.Event) -> None:
    def on_stop(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
        if not stop.is_set():
            log.info("received %s: finishing the current page, then stopping", signal.Signals(signum).name)
        stop.set()

    def on_hangup(_signum: int, _frame: FrameType | None) -> None:
        reload.set()  # the main loop reloads; a handler must not do real work

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGHUP, on_hangup)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its ExitCode."""
    from appliance.logging_setup import setup_logging

    args = _parser().parse_args(argv)
    setup_logging("INFO" if args.command == "run" else "WARNING")
    stop = threading.Event()
    reload = threading.Event()
    # The daemon's handlers (finish the page, then stop; SIGHUP reloads) only where a loop checks
    # `stop`: the daemon, and `process` between pages. Elsewhere (watch, status...) Ctrl-C must act
    # at once, which Python's default KeyboardInterrupt does.
    if args.command in ("run", "process"):
        _install_signal_handlers(stop, reload)
    try:
        code = _dispatch(args, stop, reload)
        sys.stdout.flush()  # a closed pipe shows here for output still in the buffer
        return code
    except BrokenPipeError:
        return _broken_pipe()
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return ExitCode.CONFIG_INVALID
    except ModelError as error:
        print(f"model error: {error}", file=sys.stderr)
        return ExitCode.MODEL_INVALID
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


def _dispatch(args: argparse.Namespace, stop: threading.Event, reload: threading.Event) -> ExitCode:
    from appliance import cli_api

    if args.command in cli_api.COMMANDS:
        return cli_api.run(args)
    if args.command == "config":
        return _cmd_config_check(args)
    if args.command == "audit":
        return _cmd_audit_verify(args)
    if args.command == "models":
        return _cmd_models_verify(args)
    if args.command == "process":
        return _cmd_process(args, stop)
    return _cmd_run(args, stop, reload)


def _broken_pipe() -> ExitCode:
    """The reader went away (`jobs --json | head`): stop quietly, as Unix tools do.

    Python's recipe (the signal module's docs, "Note on SIGPIPE"): point stdout at /dev/null so the
    interpreter's last flush at exit does not raise again and print a traceback.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return ExitCode.BROKEN_PIPE
