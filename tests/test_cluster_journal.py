"""The PostgreSQL journal on a real server: claims, SKIP LOCKED dispatch, leases, fencing, the audit chain."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from appliance.audit import Problem
from appliance.cli import main
from appliance.cluster import audit as chain
from appliance.cluster.journal import LEASE_EXPIRED_REASON, PostgresJournal
from appliance.cluster.schema import SCHEMA_VERSION
from appliance.errors import ExitCode, FailureReason
from appliance.journal import (
    RECOVER_REASON,
    AlreadyClaimedError,
    InvalidTransition,
    JobState,
    JournalError,
    LeaseLostError,
)
from tests.pg_server import ThrowawayPostgres, throwaway_postgres
from tests.polling import wait_for

T = TypeVar("T")


@pytest.fixture(scope="module")
def postgres() -> Iterator[ThrowawayPostgres]:
    with throwaway_postgres() as server:
        yield server


@pytest.fixture
def dsn(postgres: ThrowawayPostgres) -> str:
    return postgres.create_database()


def _node(dsn: str, name: str, lease: float = 60.0, **kwargs: int) -> PostgresJournal:
    return PostgresJournal(dsn, node_id=f"id-{name}", node_name=name, lease_seconds=lease, **kwargs)  # type: ignore[arg-type]


def _add(journal: PostgresJournal, index: int = 0, *, identity: str | None = None, priority: int = 0) -> str:
    return journal.add(
        sha256=f"{index:064x}",
        source_folder="/in",
        relative_path=f"doc-{index}.png",
        name=f"doc-{index}.png",
        size=10,
        spool_path=f"/spool/{index}/doc-{index}.png",
        priority=priority,
        identity=identity,
    ).id


def _until(produce: Callable[[], T], timeout: float = 60.0) -> T:
    """The first truthy value `produce` returns (a state reached), failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := produce()):
        assert time.monotonic() < deadline, "the state was never reached"
        time.sleep(0.05)
    return value


def _lease_expires(dsn: str, job_id: str) -> float:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT lease_expires FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return float(row[0])


def _expired(dsn: str, job_id: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT lease_expires < extract(epoch FROM clock_timestamp()) FROM jobs WHERE id = %s", (job_id,)
        ).fetchone()
    return bool(row and row[0])


def test_schema_is_created_once_and_a_newer_one_is_refused(dsn: str) -> None:
    with _node(dsn, "a"), _node(dsn, "b"), psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM appliance_schema").fetchall() == [(SCHEMA_VERSION,)]
        conn.execute("UPDATE appliance_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(JournalError, match="newer appliance"):
        _node(dsn, "c")


def test_an_unreachable_server_is_a_journal_error(tmp_path: object) -> None:
    with pytest.raises(JournalError, match="cannot reach"):
        PostgresJournal(
            f"host={tmp_path} dbname=nothing connect_timeout=1",
            node_id="x",
            node_name="x",
            connect_timeout=1.0,
        )


def test_one_file_seen_by_two_nodes_is_journalled_once(dsn: str) -> None:
    with _node(dsn, "a") as a, _node(dsn, "b") as b:
        first = _add(a, 1, identity="64769:1234:1700000000000000000")
        with pytest.raises(AlreadyClaimedError) as raised:
            _add(b, 1, identity="64769:1234:1700000000000000000")
        assert raised.value.job.id == first
        # The same content dropped again later is a new file (another inode): a new job.
        again = _add(b, 1, identity="64769:5678:1700000000500000000")
        assert again != first
        assert a.counts()[JobState.QUEUED] == 2
        assert len(a.transitions()) == 2  # the refused claim recorded nothing


def test_nodes_taking_jobs_at_once_never_share_one(dsn: str) -> None:
    with _node(dsn, "seed") as seed:
        expected = {_add(seed, index) for index in range(60)}
    nodes = [_node(dsn, f"n{index}", pool_size=2) for index in range(4)]
    taken: list[list[str]] = [[] for _ in nodes]
    start = threading.Barrier(len(nodes))

    def take(index: int) -> None:
        start.wait()
        while (job := nodes[index].start_next()) is not None:
            taken[index].append(job.id)

    threads = [threading.Thread(target=take, args=(index,)) for index in range(len(nodes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    every = [job_id for part in taken for job_id in part]
    assert sorted(every) == sorted(expected)  # each job once, none left, none twice
    assert sum(1 for part in taken if part) >= 2  # the nodes really competed
    for node in nodes:
        node.close()


def test_start_next_takes_priority_then_age(dsn: str) -> None:
    with _node(dsn, "a") as a:
        old = _add(a, 1)
        urgent = _add(a, 2, priority=5)
        young = _add(a, 3)
        order = [job.id for job in iter(a.start_next, None)]
        assert order == [urgent, old, young]


def test_a_lease_that_runs_out_sends_the_job_to_another_node_and_fences_the_first(dsn: str) -> None:
    with _node(dsn, "a", lease=0.5) as a, _node(dsn, "b", lease=60) as b:
        job_id = _add(a, 1)
        started = a.start_next()
        assert started is not None and started.lease_node == "id-a" and started.attempts == 1
        reclaimed = _until(b.reclaim_expired)
        assert [job.id for job in reclaimed] == [job_id]
        assert reclaimed[0].state is JobState.QUEUED
        assert reclaimed[0].attempts == 0  # a dead node is not the file's fault
        assert reclaimed[0].reason == LEASE_EXPIRED_REASON
        again = b.start_next()
        assert again is not None and again.id == job_id and again.lease_node == "id-b"
        assert again.lease_token != started.lease_token
        # Node a comes back with its stale result: nothing it says about the job is recorded.
        for stale in (
            lambda: a.fence(job_id),
            lambda: a.finish(job_id, JobState.DONE, "read", {"json": "/out/a.json"}, audit={"by": "a"}),
            lambda: a.worker_died(job_id, "worker died"),
            lambda: a.retry_later(job_id, "busy", 1.0),
            lambda: a.release(job_id, "stopping"),
        ):
            with pytest.raises(LeaseLostError):
                stale()
        b.fence(job_id)
        done = b.finish(job_id, JobState.DONE, "read", {"json": "/out/b.json"}, audit={"by": "b"})
        assert done.state is JobState.DONE and done.outputs == {"json": "/out/b.json"}
        assert [entry["record"] for entry in chain.entries(dsn)] == [{"by": "b"}]


def test_an_expired_lease_is_not_renewed_even_before_anyone_reclaims_it(dsn: str) -> None:
    with _node(dsn, "a", lease=0.5) as a:
        job_id = _add(a, 1)
        a.start_next()
        assert wait_for(lambda: _expired(dsn, job_id), timeout=60)
        assert a.renew_leases([job_id]) == []
        with pytest.raises(LeaseLostError, match="ran out"):
            a.fence(job_id)


def test_renewing_moves_the_lease_on_and_keeps_the_job(dsn: str) -> None:
    with _node(dsn, "a", lease=30) as a, _node(dsn, "b") as b:
        job_id = _add(a, 1)
        a.start_next()
        before = _lease_expires(dsn, job_id)
        assert wait_for(
            lambda: a.renew_leases([job_id]) == [job_id] and _lease_expires(dsn, job_id) > before, timeout=60
        )
        assert b.reclaim_expired() == []
        a.fence(job_id)
        assert a.finish(job_id, JobState.DONE, "read").state is JobState.DONE


def test_a_restarted_node_requeues_its_own_jobs_and_leaves_the_others(dsn: str) -> None:
    with _node(dsn, "a") as a, _node(dsn, "b") as b:
        mine, theirs = _add(a, 1), _add(a, 2)
        assert a.start_next().id == mine  # type: ignore[union-attr]
        assert b.start_next().id == theirs  # type: ignore[union-attr]
    with _node(dsn, "a") as again, _node(dsn, "observer") as observer:
        recovered = again.recover()
        assert [(job.id, job.state, job.attempts, job.reason) for job in recovered] == [
            (mine, JobState.QUEUED, 0, RECOVER_REASON)
        ]
        assert observer.get(theirs).state is JobState.RUNNING  # type: ignore[union-attr]


def test_a_file_that_kills_its_nodes_fails_as_crashed_daemon(dsn: str) -> None:
    with _node(dsn, "a", lease=0.2, max_restarts=3) as a:
        job_id = _add(a, 1)
        states = []
        for _ in range(3):
            assert a.start_next() is not None
            reclaimed = _until(a.reclaim_expired)
            states.append(reclaimed[0].state)
        assert states == [JobState.QUEUED, JobState.QUEUED, JobState.FAILED]
        failed = a.get(job_id)
        assert failed is not None and failed.failure is FailureReason.CRASHED_DAEMON


def test_finish_and_its_audit_entry_commit_together(dsn: str) -> None:
    with _node(dsn, "a") as a:
        job_id = _add(a, 1)
        a.start_next()
        with pytest.raises(InvalidTransition):
            a.finish(job_id, JobState.QUEUED, "nonsense", audit={"never": True})
        assert chain.entries(dsn) == []
        with pytest.raises(ValueError, match="duplicate of itself"):
            a.finish(job_id, JobState.DONE, "read", duplicate_of=job_id, audit={"never": True})
        assert chain.entries(dsn) == []
        a.finish(job_id, JobState.DONE, "read", audit={"job": job_id})
        assert [entry["record"] for entry in chain.entries(dsn)] == [{"job": job_id}]


def test_nodes_appending_at_once_keep_one_intact_chain(dsn: str) -> None:
    nodes = [_node(dsn, f"n{index}", pool_size=2) for index in range(3)]
    for index in range(45):
        _add(nodes[0], index)

    def work(node: PostgresJournal) -> None:
        while (job := node.start_next()) is not None:
            node.finish(job.id, JobState.DONE, "read", audit={"job": job.id, "node": node.node_name})

    threads = [threading.Thread(target=work, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    result = chain.verify(dsn)
    assert result.ok and result.entries == 45
    entries = chain.entries(dsn)
    assert [entry["seq"] for entry in entries] == list(range(1, 46))
    assert len({entry["record"]["job"] for entry in entries}) == 45
    for node in nodes:
        node.close()


def test_an_edited_audit_row_is_found(dsn: str) -> None:
    with _node(dsn, "a") as a:
        for index in range(3):
            job_id = _add(a, index)
            a.start_next()
            a.finish(job_id, JobState.DONE, "read", audit={"job": job_id, "pages": 1})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE audit SET entry = replace(entry, '\"pages\":1', '\"pages\":2') WHERE seq = 2")
    result = chain.verify(dsn)
    assert not result.ok and result.problem is Problem.EDITED and result.entries == 1


def test_every_node_sees_the_cluster_with_heartbeats_and_running_jobs(dsn: str) -> None:
    with _node(dsn, "alpha") as a, _node(dsn, "beta") as b:
        _add(a, 1)
        a.start_next()
        a.renew_leases([], {"done": 7, "pages_per_second_1m": 1.5})
        b.renew_leases([], {"done": 2})
        seen = {node.name: node for node in b.nodes()}
        assert set(seen) == {"alpha", "beta"}
        assert seen["alpha"].running == 1 and seen["beta"].running == 0
        assert seen["alpha"].stats == {"done": 7, "pages_per_second_1m": 1.5}
        assert 0 <= seen["alpha"].seconds_since_heartbeat < 60


def test_names_are_kept_as_the_kernel_gave_them(dsn: str) -> None:
    name = b"re\xe7u-\xff.png".decode("utf-8", "surrogateescape")
    with _node(dsn, "a") as a:
        job = a.add(
            sha256="f" * 64,
            source_folder="/in",
            relative_path=name,
            name=name,
            size=1,
            spool_path=f"/s/{name}",
        )
        found = a.find_by_spool_path(f"/s/{name}")
        assert found is not None and found.id == job.id and found.name == name


def test_prune_forgets_finished_jobs_but_not_their_audit_entries(dsn: str) -> None:
    with _node(dsn, "a") as a:
        old = _add(a, 1)
        a.start_next()
        a.finish(old, JobState.DONE, "read", audit={"job": old}, now=1_000.0)
        waiting = _add(a, 2)
        pruned = a.prune(older_than_seconds=60)
        assert [job.id for job in pruned] == [old]
        assert a.get(old) is None and a.get(waiting) is not None
        assert a.transitions(job_id=old) == []
        assert chain.verify(dsn).entries == 1


def test_a_node_takes_only_jobs_of_the_folders_it_serves(dsn: str) -> None:
    with _node(dsn, "a") as a:
        mine = _add(a, 1)
        theirs = a.add(
            sha256="e" * 64,
            source_folder="/other",
            relative_path="x.png",
            name="x.png",
            size=1,
            spool_path="/s/x",
        ).id
        assert a.start_next(sources=["/nowhere"]) is None
        assert a.start_next(sources=["/other"]).id == theirs  # type: ignore[union-attr]
        assert a.start_next(sources=["/in", "/other"]).id == mine  # type: ignore[union-attr]


def test_audit_verify_checks_the_database_chain_a_config_names(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _node(dsn, "a") as a:
        for index in range(2):
            job_id = _add(a, index)
            a.start_next()
            a.finish(job_id, JobState.DONE, "read", audit={"job": job_id})
    config = tmp_path / "config.yaml"
    config.write_text(
        f"paths: {{state_dir: state, spool_dir: spool}}\njournal: {{backend: postgresql, dsn: '{dsn}'}}\n",
        encoding="utf-8",
    )
    assert main(["audit", "verify", "--config", str(config)]) == ExitCode.OK
    assert "2 entries, chain intact" in capsys.readouterr().out
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM audit WHERE seq = 1")
    assert main(["audit", "verify", "--config", str(config)]) == ExitCode.AUDIT_TAMPERED
    assert "removed" in capsys.readouterr().err


def test_a_version_1_database_gains_the_media_type_and_keeps_its_jobs(dsn: str) -> None:
    with _node(dsn, "a") as a:
        old = _add(a, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobs DROP COLUMN media_type")
        conn.execute("UPDATE appliance_schema SET version = 1")
    with _node(dsn, "a") as again, psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT version FROM appliance_schema").fetchall() == [(SCHEMA_VERSION,)]
        assert again.get(old).media_type is None  # type: ignore[union-attr]
        job = again.add(
            sha256="c" * 64,
            source_folder="/in",
            relative_path="c.pdf",
            name="c.pdf",
            size=1,
            spool_path="/s/c",
            media_type="application/pdf",
        )
        assert again.get(job.id).media_type == "application/pdf"  # type: ignore[union-attr]
