"""The PostgreSQL journal's tables, created and migrated by the appliance itself, versioned."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row

from appliance.journal import JournalError

SCHEMA_VERSION = 2

# Every node runs this at start; the advisory lock makes a fresh database's creation happen once
# when several nodes start together.
_MIGRATION_LOCK = 0x6F63725F6A726E  # "ocr_jrn"

# Version 1. Paths and names are bytea (the bytes the kernel gave, as in the SQLite journal).
# `seq` orders jobs of equal priority and time (SQLite's rowid). A claim is unique on the file's
# identity (device, inode, mtime of the file in the hot folder) and its content: two nodes that
# both see a file on a shared mount cannot both journal it. Leases: the node holding a running
# job, a token that is new every time the job starts (it fences a node that lost the job) and
# when the lease runs out, on the database's clock. The audit chain is one row per entry; its
# `entry` is the canonical JSON that was hashed, kept as text so verification sees those bytes.
_V1 = (
    """
    CREATE TABLE jobs (
        id text PRIMARY KEY,
        seq bigserial UNIQUE,
        sha256 text NOT NULL,
        identity text,
        source_folder bytea NOT NULL,
        relative_path bytea NOT NULL,
        name bytea NOT NULL,
        size bigint NOT NULL CHECK (size >= 0),
        spool_path bytea NOT NULL,
        profile text NOT NULL,
        priority integer NOT NULL,
        state text NOT NULL CHECK (state IN ('queued', 'running', 'done', 'review', 'failed')),
        attempts integer NOT NULL CHECK (attempts >= 0),
        reason text,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        not_before double precision NOT NULL,
        outputs jsonb NOT NULL,
        duplicate_of text,
        failure text,
        lease_node text,
        lease_token bigint,
        lease_expires double precision
    )
    """,
    "CREATE UNIQUE INDEX jobs_claim ON jobs (identity, sha256) WHERE identity IS NOT NULL",
    "CREATE INDEX jobs_queue ON jobs (priority DESC, created_at, seq) WHERE state = 'queued'",
    "CREATE INDEX jobs_sha256 ON jobs (sha256, state)",
    "CREATE INDEX jobs_created ON jobs (created_at)",
    "CREATE INDEX jobs_finished ON jobs (state, updated_at)",
    "CREATE INDEX jobs_spool ON jobs (spool_path)",
    "CREATE INDEX jobs_leases ON jobs (lease_expires) WHERE state = 'running'",
    "CREATE SEQUENCE lease_tokens",
    """
    CREATE TABLE transitions (
        seq bigserial PRIMARY KEY,
        job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        from_state text,
        to_state text NOT NULL,
        reason text NOT NULL,
        at double precision NOT NULL
    )
    """,
    "CREATE INDEX transitions_job ON transitions (job_id, seq)",
    """
    CREATE TABLE nodes (
        id text PRIMARY KEY,
        name text NOT NULL,
        pid integer NOT NULL,
        started_at double precision NOT NULL,
        heartbeat_at double precision NOT NULL,
        stats jsonb NOT NULL DEFAULT '{}'
    )
    """,
    """
    CREATE TABLE audit (
        seq bigint PRIMARY KEY CHECK (seq > 0),
        hash text NOT NULL UNIQUE,
        job_id text,
        entry text NOT NULL
    )
    """,
)

# Version 2: the media type intake's completeness check found, so the reader need not sniff again.
_V2 = ("ALTER TABLE jobs ADD COLUMN media_type text",)

_MIGRATIONS: dict[int, tuple[str, ...]] = {1: _V1, 2: _V2}


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Create or upgrade the schema in one transaction; returns the version found before."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS appliance_schema (version integer NOT NULL)")
        with conn.cursor(row_factory=tuple_row) as cursor:
            row = cursor.execute("SELECT version FROM appliance_schema").fetchone()
        found = 0 if row is None else int(row[0])
        if found > SCHEMA_VERSION:
            raise JournalError(
                f"the PostgreSQL journal was written by a newer appliance (schema version {found}; "
                f"this version understands up to {SCHEMA_VERSION}); upgrade every node"
            )
        for step in range(found + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
        if found == 0:
            conn.execute("INSERT INTO appliance_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        elif found != SCHEMA_VERSION:
            conn.execute("UPDATE appliance_schema SET version = %s", (SCHEMA_VERSION,))
    return found
