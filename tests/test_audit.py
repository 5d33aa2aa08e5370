"""Audit log: hash chain appends, tamper detection (edit, delete, swap, truncate) and the CLI."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from appliance.audit import (
    GENESIS_HASH,
    AuditLog,
    Problem,
    canonical_json,
    document_record,
    entry_hash,
    verify,
)
from appliance.cli import main
from appliance.engines.ppocr_onnx import PpocrOnnxEngine
from appliance.errors import ExitCode
from appliance.outputs.writer import write_outputs
from tests import rendering
from tests.output_documents import read_rendered


def _log(tmp_path: Path, count: int = 5) -> Path:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    for index in range(count):
        log.append({"document": {"name": f"doc{index}.pdf"}, "route": "auto", "reasons": []})
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_entries_chain_from_genesis(tmp_path: Path) -> None:
    path = _log(tmp_path, 3)
    entries = [json.loads(line) for line in _lines(path)]
    assert [e["seq"] for e in entries] == [1, 2, 3]
    assert entries[0]["prev_hash"] == GENESIS_HASH
    for before, after in itertools.pairwise(entries):
        assert after["prev_hash"] == before["hash"]
    for entry in entries:
        body = {k: v for k, v in entry.items() if k != "hash"}
        assert entry["hash"] == entry_hash(entry)
        assert len(entry["hash"]) == 64
        assert canonical_json(body).decode().startswith('{"prev_hash":')  # sorted, no spaces
    result = verify(path)
    assert result.ok and result.entries == 3 and result.head_hash == entries[-1]["hash"]


def test_a_new_log_object_continues_the_chain(tmp_path: Path) -> None:
    path = _log(tmp_path, 2)
    entry = AuditLog(path).append({"route": "review"})
    assert entry["seq"] == 3
    assert verify(path).ok


def test_empty_or_missing_log(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert verify(empty).ok and verify(empty).entries == 0
    missing = verify(tmp_path / "missing.jsonl")
    assert not missing.ok and missing.problem is Problem.UNREADABLE


def test_edited_field_is_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = _lines(path)
    lines[2] = lines[2].replace('"route":"auto"', '"route":"done"')
    path.write_text("".join(lines), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 3 and result.problem is Problem.EDITED
    assert result.entries == 2


def test_edit_with_a_recomputed_hash_breaks_the_chain(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = _lines(path)
    entry = json.loads(lines[1])
    entry["record"]["route"] = "done"
    entry["hash"] = entry_hash(entry)
    lines[1] = canonical_json(entry).decode() + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 3 and result.problem is Problem.EDITED


def test_deleted_line_is_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = _lines(path)
    del lines[1]
    path.write_text("".join(lines), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 2 and result.problem is Problem.REMOVED
    assert "entry 2 is missing" in result.message


def test_deleted_first_line_is_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    path.write_text("".join(_lines(path)[1:]), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 1 and result.problem is Problem.REMOVED


def test_swapped_lines_are_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = _lines(path)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 2 and result.problem is Problem.REORDERED


def test_duplicated_line_is_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = _lines(path)
    path.write_text("".join([*lines[:3], lines[1], *lines[3:]]), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 4 and result.problem is Problem.REORDERED


def test_truncated_file_is_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])
    result = verify(path)
    assert not result.ok and result.line == 5 and result.problem is Problem.TRUNCATED
    assert result.entries == 4


def test_garbage_line_is_detected(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = _lines(path)
    lines[3] = "{not json\n"
    path.write_text("".join(lines), encoding="utf-8")
    result = verify(path)
    assert not result.ok and result.line == 4 and result.problem is Problem.BAD_JSON


def test_append_after_a_torn_write_drops_the_fragment(tmp_path: Path) -> None:
    path = _log(tmp_path, 3)
    with path.open("ab") as handle:
        handle.write(b'{"seq":4,"prev_ha')  # a crash in the middle of an append
    entry = AuditLog(path).append({"route": "auto"})
    assert entry["seq"] == 4
    assert verify(path).ok and verify(path).entries == 4


def test_append_refuses_to_chain_onto_an_edited_last_entry(tmp_path: Path) -> None:
    from appliance.audit import AuditError

    path = _log(tmp_path, 2)
    path.write_text(
        path.read_text(encoding="utf-8").replace('"route":"auto"', '"route":"xx"'), encoding="utf-8"
    )
    with pytest.raises(AuditError, match="does not match its hash"):
        AuditLog(path).append({"route": "auto"})


def test_threads_append_without_breaking_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    other = AuditLog(path)  # a second object on the same file, as a second process would be

    def work(target: AuditLog, name: str) -> None:
        for index in range(25):
            target.append({"document": {"name": f"{name}{index}"}})

    threads = [threading.Thread(target=work, args=(t, n)) for t, n in ((log, "a"), (other, "b"), (log, "c"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = verify(path)
    assert result.ok and result.entries == 75


def test_document_record_from_a_real_document(engine: PpocrOnnxEngine, tmp_path: Path) -> None:
    source = tmp_path / "receipt.png"
    document = read_rendered(engine, rendering.receipt(), source)
    outputs = write_outputs(
        document, tmp_path / "out", source.name, ["json", "text", "pdf"], source_path=source
    )
    record = document_record(
        document, outputs, route="review", reasons=["low confidence on TOTAL"], ruleset_version=None
    )
    import hashlib

    assert record["document"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    for fmt, path in outputs.items():
        assert record["outputs"][fmt]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert {m["role"] for m in record["engine"]["models"]} == {"det", "cls", "rec"}
    assert all(len(m["sha256"]) == 64 for m in record["engine"]["models"])
    assert record["route"] == "review" and record["reasons"] == ["low confidence on TOTAL"]
    assert record["ruleset_version"] is None
    assert record["timings_ms"]["total"] > 0
    log_path = tmp_path / "audit.jsonl"
    entry = AuditLog(log_path).append(record)
    assert json.loads(log_path.read_text(encoding="utf-8")) == entry
    assert verify(log_path).ok


def test_cli_audit_verify_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _log(tmp_path)
    assert main(["audit", "verify", str(path)]) == ExitCode.OK
    assert "5 entries" in capsys.readouterr().out
    lines = _lines(path)
    lines[0], lines[1] = lines[1], lines[0]
    path.write_text("".join(lines), encoding="utf-8")
    assert main(["audit", "verify", str(path)]) == ExitCode.AUDIT_TAMPERED == 7
    assert "line 1: reordered" in capsys.readouterr().err
    assert main(["audit", "verify", str(tmp_path / "nope.jsonl")]) == ExitCode.AUDIT_TAMPERED
