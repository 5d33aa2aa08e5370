"""The audit chain in PostgreSQL: the same hash-chained entries as the file, appended by any node.

Appends are serialised by the database (a transaction-scoped advisory lock), not by a file lock,
and each is made in the transaction that finishes its job: a job is done with its entry or not
done at all, whichever node finished it and whenever that node died.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from appliance.audit import GENESIS_HASH, VerifyResult, canonical_json, entry_hash, verify_entries

_AUDIT_LOCK = 0x6F63725F617564  # "ocr_aud"


def append_entry(
    conn: psycopg.Connection[Any], record: Mapping[str, Any], job_id: str | None
) -> dict[str, Any]:
    """Chain `record` onto the audit table inside the caller's transaction; returns the entry."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_AUDIT_LOCK,))
    with conn.cursor(row_factory=dict_row) as cursor:
        head = cursor.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
    seq, prev_hash = (0, GENESIS_HASH) if head is None else (int(head["seq"]), str(head["hash"]))
    entry: dict[str, Any] = {
        "seq": seq + 1,
        "prev_hash": prev_hash,
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "record": dict(record),
    }
    entry["hash"] = entry_hash(entry)
    conn.execute(
        "INSERT INTO audit (seq, hash, job_id, entry) VALUES (%s, %s, %s, %s)",
        (entry["seq"], entry["hash"], job_id, canonical_json(entry).decode()),
    )
    return entry


def verify(dsn: str) -> VerifyResult:
    """Check the whole chain in the database, as `appliance.audit.verify` checks a file."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor(name="audit_verify") as cursor:
        conn.autocommit = False  # a named (server-side) cursor lives in a transaction
        cursor.itersize = 2000
        cursor.execute("SELECT entry FROM audit ORDER BY seq")
        return verify_entries([str(row[0]).encode() for row in cursor])


def entries(dsn: str) -> list[dict[str, Any]]:
    """Every entry's record with its seq (for exports and tests), in chain order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT entry FROM audit ORDER BY seq").fetchall()
    return [json.loads(row[0]) for row in rows]
