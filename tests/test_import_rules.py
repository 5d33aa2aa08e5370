"""What may import what (ARCHITECTURE.md, "Imports"): checked on the source with ast, no module imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "appliance"

# (importer, imported): the importer's modules never import the imported ones. Names are dotted
# module prefixes: "appliance.engines" covers every module under appliance/engines/.
CLI = ("appliance.cli", "appliance.cli_api", "appliance.cli_socket", "appliance.__main__")
STAGES = ("appliance.intake", "appliance.journal", "appliance.engines", "appliance.pipeline")
SERVICE = ("appliance.daemon", "appliance.control", "appliance.api", "appliance.workers", *CLI)
RULES: dict[str, tuple[str, ...]] = {
    # Engines read pages; they know nothing of jobs, folders, outputs or the service around them.
    "appliance.engines": (
        *SERVICE,
        "appliance.intake",
        "appliance.journal",
        "appliance.pipeline",
        "appliance.outputs",
        "appliance.fields",
        "appliance.repair",
        "appliance.routing",
        "appliance.review",
    ),
    # The API serves the control layer; the daemon is reached only through appliance.control.
    "appliance.api": ("appliance.daemon", "appliance.workers", "appliance.intake", *CLI),
    # Intake finds and claims files; the daemon records them in the journal.
    "appliance.intake": (*SERVICE, "appliance.journal", "appliance.pipeline", "appliance.engines"),
    # The journal is SQLite and its states only.
    "appliance.journal": (
        *SERVICE,
        "appliance.intake",
        "appliance.pipeline",
        "appliance.engines",
        "appliance.outputs",
        "appliance.document",
        "appliance.cluster",
    ),
    # Its PostgreSQL backend likewise: jobs, leases and the audit chain, nothing of the flow.
    "appliance.cluster": (
        *SERVICE,
        "appliance.intake",
        "appliance.pipeline",
        "appliance.engines",
        "appliance.outputs",
        "appliance.document",
    ),
    # A document is read the same way in a one-shot `process` and in the daemon.
    "appliance.pipeline": (*SERVICE, "appliance.intake", "appliance.journal", "appliance.cluster"),
    "appliance.outputs": (*SERVICE, "appliance.intake", "appliance.journal", "appliance.engines"),
    "appliance.repair": (
        *SERVICE,
        "appliance.intake",
        "appliance.journal",
        "appliance.engines",
        "appliance.pipeline",
    ),
    "appliance.fields": (
        *SERVICE,
        "appliance.intake",
        "appliance.journal",
        "appliance.engines",
        "appliance.pipeline",
    ),
    # The document model and its result schema are the spine: they import no stage of the flow.
    "appliance.document": (
        *SERVICE,
        "appliance.intake",
        "appliance.journal",
        "appliance.engines",
        "appliance.pipeline",
        "appliance.outputs",
        "appliance.fields.receipt",
        "appliance.repair.step",
    ),
    "appliance.lines": ("appliance.document", "appliance.fields", "appliance.repair"),
    "appliance.fields.model": ("appliance.document",),
    "appliance.schemas": ("appliance.document", "appliance.lines", "appliance.fields", "appliance.repair"),
    "appliance.config": ("appliance.document", "appliance.engines", "appliance.pipeline", *SERVICE),
}
# Nothing but the command line imports the command line.
for _name in (
    "appliance.daemon",
    "appliance.control",
    "appliance.workers",
    "appliance.api",
    "appliance.systemd",
):
    RULES.setdefault(_name, ())
    RULES[_name] = (*RULES[_name], *CLI)

# The daemon conducts collaborators that get the journal and config injected; none imports it back,
# and control reaches it through a Protocol of its own (control.Controlled), not by importing it.
COLLABORATORS = (
    "appliance.filing",
    "appliance.review_desk",
    "appliance.status",
    "appliance.intake.hot_folders",
    "appliance.session_server_keeper",
)
for _name in (*COLLABORATORS, "appliance.control"):
    RULES.setdefault(_name, ())
    RULES[_name] = (*RULES[_name], "appliance.daemon")
# Filing and the status sit below the review desk; intake reaches filing through a Protocol.
RULES["appliance.filing"] = (*RULES["appliance.filing"], "appliance.review_desk", "appliance.status")
RULES["appliance.status"] = (*RULES["appliance.status"], "appliance.filing", "appliance.review_desk")
RULES["appliance.intake"] = (*RULES["appliance.intake"], *COLLABORATORS)

# Imports that break a rule in files this clean-up does not own; each names why it stays for now.
# Outside the engines, an engine is reached through base.py (the protocols), factory.py (the
# registry) and the neutral modules beside them (details.py, text_lines.py, shared_sessions.py),
# never through its own folder; only the CLI's `models verify` asks the ONNX engine's provider
# check directly.
ENGINE_FOLDERS = ("appliance.engines.ppocr_onnx", "appliance.engines.vlm_gguf")
for _name in (
    "appliance.pipeline",
    "appliance.outputs",
    "appliance.workers",
    "appliance.daemon",
    "appliance.session_server_keeper",
    "appliance.review",
):
    RULES[_name] = (*RULES.get(_name, ()), *ENGINE_FOLDERS)

KNOWN_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> set[str]:
    """Every appliance module a file imports, at any depth (TYPE_CHECKING and late imports too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("appliance.")}


def _covers(prefix: str, name: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations() -> set[tuple[str, str]]:
    broken: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for importer_prefix, forbidden in RULES.items():
            if not _covers(importer_prefix, importer):
                continue
            for imported in _imports(path, importer):
                if any(_covers(prefix, imported) for prefix in forbidden) and not _covers(
                    importer_prefix, imported
                ):
                    broken.add((importer, imported))
    return broken


def test_modules_import_only_what_the_architecture_allows() -> None:
    assert sorted(violations() - KNOWN_EXCEPTIONS) == []


def test_known_exceptions_still_exist() -> None:
    # An exception that was fixed is taken off the list, so the rule holds from then on.
    assert sorted(KNOWN_EXCEPTIONS - violations()) == []


# bench/scoring.py is the scorer every benchmark shares, tested on its own, bench/text_forms.py
# its text forms (train/ counts CER with them too), bench/page_bootstrap.py the interval the page
# benchmarks and train/ put on a difference of CER, and bench/host_cpu.py the host's CPU counters
# the daemon benchmark reads, each tested on its own; the benchmarks themselves are programs, and
# a test that needs one of their parts gets it moved into the package.
BENCH_HELPERS = ("bench.scoring", "bench.text_forms", "bench.page_bootstrap", "bench.host_cpu")
# tests/test_api_hostile.py drives bench/api_hostile.py's attacks at a smaller scale; both files are
# another change's, so the import stays until those attacks move to a module of their own.
# tests/test_bench_second_reader.py tests two benchmark tools themselves (peak RSS per variant in a
# child process, the rule that picks a second reader's threshold), as test_bench_scoring does.
# tests/test_pack_onnx_gpu.py tests the GPU transfer packer itself, its download step replaced by
# fake wheels, which only an import can do.
BENCH_IMPORT_EXCEPTIONS = frozenset(
    {
        ("tests/test_api_hostile.py", "bench"),
        ("tests/test_bench_second_reader.py", "bench.confidence_errors"),
        ("tests/test_bench_second_reader.py", "bench.ocr_bench"),
        ("tests/test_pack_onnx_gpu.py", "bench"),
        ("tests/test_pack_onnx_gpu.py", "bench.pack_onnx_gpu"),
    }
)


def _bench_imports() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for folder in ("tests", "appliance", "quantize"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for name in names:
                    if _covers("bench", name) and not any(_covers(helper, name) for helper in BENCH_HELPERS):
                        found.add((str(path.relative_to(ROOT)), name))
    return found


def test_no_benchmark_is_imported_outside_bench() -> None:
    found = _bench_imports()  # parses every file of three trees: once
    assert sorted(found - BENCH_IMPORT_EXCEPTIONS) == []
    assert sorted(BENCH_IMPORT_EXCEPTIONS - found) == []


def test_the_checker_sees_late_relative_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from appliance.daemon import Daemon\n"
        "def late():\n    from ..journal import Journal\n",
        encoding="utf-8",
    )
    found = _imports(source, "appliance.engines.probe")
    assert {"appliance.daemon", "appliance.journal"} <= found
