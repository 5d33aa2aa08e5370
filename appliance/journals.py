"""Opens the journal a configuration names: an SQLite file in the state folder, or the shared PostgreSQL."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.config import AppConfig
from appliance.journal import JobJournal, Journal
from appliance.outputs.atomic import write_atomic

NODE_ID_FILE = "node-id"


def node_id(state_dir: Path) -> str:
    """The appliance's id in a cluster, made once and kept in its state folder.

    Kept across restarts so that a node that comes back finds the jobs its previous life left
    running (and requeues them at once); two daemons never share a state folder (its lock).
    """
    path = state_dir / NODE_ID_FILE
    try:
        return path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        made = uuid.uuid4().hex
        write_atomic(path, f"{made}\n".encode())
        return made


def open_journal(config: AppConfig, audit_sink: Callable[[Mapping[str, Any]], None]) -> JobJournal:
    """The configured journal, schema created or migrated; raises JournalError when it cannot be used.

    `audit_sink` receives each finished job's audit record on SQLite (a hash-chained file);
    PostgreSQL keeps the chain in the database, in the transaction that finishes the job.
    """
    state_dir = config.paths.state_dir
    if config.journal.backend == "sqlite":
        return Journal(
            state_dir / "journal.sqlite3", max_attempts=config.jobs.max_attempts, audit_sink=audit_sink
        )
    from appliance.cluster.journal import PostgresJournal  # psycopg loads only where it is used

    assert config.journal.dsn is not None  # the config's validation requires it
    return PostgresJournal(
        config.journal.dsn,
        node_id=node_id(state_dir),
        node_name=config.journal.node_name or socket.gethostname(),
        lease_seconds=config.journal.lease_seconds,
        max_attempts=config.jobs.max_attempts,
        pool_size=config.journal.pool_size,
    )
