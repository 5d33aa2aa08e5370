"""Appliances sharing a hot folder, a spool and a PostgreSQL journal, as processes: once each, and fenced."""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.api import convert
from appliance.cli_api import _status
from appliance.cluster import audit as chain
from appliance.cluster.journal import PostgresJournal
from appliance.config import AppConfig, parse_config
from appliance.journal import JobState
from appliance.journals import NODE_ID_FILE
from tests.fakes.engines import GatedEngine, GatedFaultEngine, fixed_text_engine
from tests.pg_server import ThrowawayPostgres, throwaway_postgres
from tests.polling import DaemonThread, image_bytes, wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def postgres() -> Iterator[ThrowawayPostgres]:
    with throwaway_postgres() as server:
        yield server


def _config(tmp_path: Path, dsn: str, node: str, lease: float = 3.0) -> Path:
    path = tmp_path / f"{node}.yaml"
    path.write_text(
        f"paths: {{state_dir: {node}, spool_dir: spool}}\n"
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: archive, failed_dir: failed}\n"
        "intake: {settle_seconds: 0.3, rescan_seconds: 2.0, min_free_mb: 0.0}\n"
        f"journal: {{backend: postgresql, dsn: '{dsn}', node_name: {node}, lease_seconds: {lease}}}\n",
        encoding="utf-8",
    )
    return path


class Node:
    """One daemon process with a stand-in engine, its log in its own file."""

    def __init__(self, tmp_path: Path, dsn: str, name: str, *extra: str, lease: float = 3.0) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.log"
        config = _config(tmp_path, dsn, name, lease)
        with self.log.open("ab") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster_node", str(config), *extra],
                cwd=ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        self.state_dir = tmp_path / name

    def node_id(self) -> str:
        return (self.state_dir / NODE_ID_FILE).read_text(encoding="ascii").strip()

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.stop()


def _all_done(journal: PostgresJournal, count: int, nodes: list[Node]) -> bool:
    for node in nodes:
        assert node.process.poll() is None, node.log.read_text(encoding="utf-8", errors="replace")
    return journal.counts()[JobState.DONE] == count


def _in_process_config(
    tmp_path: Path,
    dsn: str,
    *,
    rescan_seconds: float = 300.0,
    jobs: dict[str, Any] | None = None,
    **journal: Any,
) -> AppConfig:
    """One node's configuration, for a daemon run in the test's process (DaemonThread)."""
    settings: dict[str, Any] = {
        "paths": {"state_dir": "state", "spool_dir": "spool"},
        "jobs": jobs or {},
        "hot_folders": [
            {"path": "in", "output_dir": "out", "archive_dir": "archive", "failed_dir": "failed"}
        ],
        "intake": {"settle_seconds": 0.3, "rescan_seconds": rescan_seconds, "min_free_mb": 0.0},
        "journal": {"backend": "postgresql", "dsn": dsn, "lease_seconds": 3.0, **journal},
    }
    return parse_config(settings, base_dir=tmp_path)


def _observer(dsn: str) -> PostgresJournal:
    return PostgresJournal(dsn, node_id="test-observer", node_name="test-observer")


def test_two_nodes_read_every_file_of_a_shared_folder_once(
    tmp_path: Path, postgres: ThrowawayPostgres, nodes: list[Node]
) -> None:
    dsn = postgres.create_database()
    (tmp_path / "in").mkdir()
    # A lease far longer than a loaded machine may starve a node: nothing here wants one to run out.
    nodes.extend(Node(tmp_path, dsn, name, lease=30.0) for name in ("alpha", "beta"))
    names = [f"doc-{index:02d}.png" for index in range(16)]
    for index, name in enumerate(names):
        (tmp_path / "in" / name).write_bytes(image_bytes(size=(200 + index, 120)))
    with _observer(dsn) as journal:
        assert wait_for(lambda: _all_done(journal, len(names), nodes), timeout=240), journal.counts()
        results = sorted(path.name for path in (tmp_path / "out").glob("*.json"))
        assert results == sorted(f"{name}.json" for name in names)
        jobs = journal.jobs(limit=100)
        assert sorted(job.name for job in jobs) == names  # one job per file, none twice
        assert {job.media_type for job in jobs} == {"image/png"}  # sniffed once, at intake
        started = [t for t in journal.transitions(limit=1000) if t.to_state is JobState.RUNNING]
        assert len(started) == len(names)  # nothing was read twice
        verified = chain.verify(dsn)
        assert verified.ok and verified.entries == len(names)
        assert sorted(entry["record"]["job_id"] for entry in chain.entries(dsn)) == sorted(j.id for j in jobs)
        assert {node.name for node in journal.nodes()} >= {"alpha", "beta"}
    assert not list((tmp_path / "in").iterdir())
    # A job is recorded done before its original is moved to the archive: wait for the last move.
    assert wait_for(lambda: len(list((tmp_path / "archive").rglob("*.png"))) == len(names))


def test_a_node_stopped_longer_than_its_lease_writes_no_stale_result(
    tmp_path: Path, postgres: ThrowawayPostgres, nodes: list[Node]
) -> None:
    dsn = postgres.create_database()
    (tmp_path / "in").mkdir()
    gate = tmp_path / "gate"
    stale = Node(tmp_path, dsn, "stale", "--text", "STALE READ", "--gate", str(gate))
    nodes.append(stale)
    (tmp_path / "in" / "scan.png").write_bytes(image_bytes())
    with _observer(dsn) as journal:

        def running_on_stale() -> bool:
            jobs = journal.jobs(JobState.RUNNING)
            return (
                bool(jobs)
                and (stale.state_dir / NODE_ID_FILE).exists()
                and jobs[0].lease_node == stale.node_id()
            )

        assert wait_for(running_on_stale, timeout=120), stale.log.read_text()
        # The node freezes mid-read (a stopped VM, a cut cable), its worker held at the gate.
        stale.process.send_signal(signal.SIGSTOP)
        nodes.append(Node(tmp_path, dsn, "fresh", "--text", "FRESH READ"))
        assert wait_for(lambda: journal.counts()[JobState.DONE] == 1, timeout=240), journal.counts()
        result = tmp_path / "out" / "scan.png.json"
        assert "FRESH READ" in json.loads(result.read_text(encoding="utf-8"))["text"]
        # The stale node wakes up and its worker finishes reading: it must write nothing.
        gate.touch()
        stale.process.send_signal(signal.SIGCONT)
        assert wait_for(lambda: stale.logged("its worker writes nothing"), timeout=120), stale.log.read_text()
        assert wait_for(lambda: stale.logged("another node reads it"), timeout=60)
        assert "FRESH READ" in json.loads(result.read_text(encoding="utf-8"))["text"]
        assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["scan.png.json", "scan.png.txt"]
        job = journal.jobs(JobState.DONE)[0]
        history = [(t.from_state, t.to_state) for t in journal.transitions(job_id=job.id)]
        assert history.count((JobState.QUEUED, JobState.RUNNING)) == 2
        assert job.attempts == 1  # the stopped node's attempt was given back
        entries = chain.entries(dsn)
        assert [entry["record"]["job_id"] for entry in entries] == [job.id]
        assert stale.process.poll() is None  # the stale node carries on, it did not crash


def test_status_on_any_node_shows_the_whole_cluster(
    tmp_path: Path, postgres: ThrowawayPostgres, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = postgres.create_database()
    config = _in_process_config(tmp_path, dsn, node_name="here")
    with _observer(dsn) as other, DaemonThread(config, fixed_text_engine) as running:
        other.add(
            sha256="a" * 64,
            source_folder="/elsewhere",
            relative_path="x.png",
            name="x.png",
            size=1,
            spool_path="/s/x",
        )
        other.renew_leases([], {"state": "running", "done": 41, "failed": 1, "pages_per_second_1m": 2.5})
        # The daemon's own heartbeat arrives from its lease keeper (every third of the lease).
        assert wait_for(lambda: running.daemon.snapshot_status().nodes[0].stats.get("state") == "running")
        status = running.daemon.snapshot_status()
        # The cluster's queue, with a job of a folder only the other node serves: left for it.
        assert status.queue["queued"] == 1
        message = convert.status(status)
        by_name = {node.name: node for node in message.nodes}
        assert set(by_name) == {"here", "test-observer"}
        assert by_name["here"].self and not by_name["test-observer"].self
        assert (by_name["test-observer"].done, by_name["test-observer"].pages_per_second) == (41, 2.5)
        _status(_Client(message), argparse.Namespace(json=False))
        shown = capsys.readouterr().out
        assert "here (this one)" in shown and "test-observer" in shown


class _Client:
    def __init__(self, response: object) -> None:
        self.response = response

    def status(self) -> object:
        return self.response


def test_a_database_that_goes_away_for_a_while_stops_nothing_and_loses_nothing(tmp_path: Path) -> None:
    with throwaway_postgres() as server:
        dsn = server.create_database()
        # An hour: the file claimed while the server is away must not wait to be found as an
        # orphan; the daemon journals it itself once the server is back.
        config = _in_process_config(tmp_path, dsn, orphan_grace_seconds=3600.0)
        with DaemonThread(config, fixed_text_engine) as running:
            (tmp_path / "in" / "first.png").write_bytes(image_bytes("white"))
            assert wait_for((tmp_path / "out" / "first.png.json").exists, timeout=120)
            server.halt()
            (tmp_path / "in" / "second.png").write_bytes(image_bytes("gray"))
            assert wait_for(
                lambda: any(
                    "unreachable" in error["message"] for error in list(running.daemon.recent_errors)
                ),
                timeout=120,
            )
            # Claimed into the spool while the server is away: intake does not need the journal.
            assert wait_for(lambda: not (tmp_path / "in" / "second.png").exists(), timeout=120)
            assert running.thread.is_alive()
            server.resume()
            assert wait_for((tmp_path / "out" / "second.png.json").exists, timeout=180)
            # The first job's record may have met the server going away after its outputs were
            # written; it is then let go and read again once its lease runs out, so wait for it.
            with _observer(dsn) as journal:
                assert wait_for(lambda: journal.counts()[JobState.DONE] == 2, timeout=180), journal.counts()
                assert chain.verify(dsn).entries == 2


def test_a_job_read_while_the_database_is_away_is_read_again_once_it_is_back(tmp_path: Path) -> None:
    with throwaway_postgres() as server:
        dsn = server.create_database()
        (tmp_path / "in").mkdir()
        config = _in_process_config(tmp_path, dsn)
        gate = tmp_path / "gate"
        with DaemonThread(config, functools.partial(GatedEngine, "HELLO", str(gate))) as running:
            with _observer(dsn) as journal:
                (tmp_path / "in" / "held.png").write_bytes(image_bytes("white"))
                assert wait_for(lambda: journal.counts()[JobState.RUNNING] == 1, timeout=120)
            server.halt()
            gate.touch()  # the read ends while its lease cannot be checked: nothing may be written
            assert wait_for(
                lambda: any(
                    "unreachable" in error["message"] for error in list(running.daemon.recent_errors)
                ),
                timeout=120,
            )
            assert running.thread.is_alive()
            server.resume()
            with _observer(dsn) as journal:
                # Not failed for the outage: the file did nothing wrong.
                done = wait_for(lambda: journal.counts()[JobState.DONE] == 1, timeout=180)
                assert done, [(job.state, job.reason) for job in journal.jobs()]
                assert journal.counts()[JobState.RUNNING] == 0
                assert chain.verify(dsn).entries == 1
        assert [path.name for path in (tmp_path / "out").glob("*.json")] == ["held.png.json"]


def test_a_claim_a_dead_node_never_journalled_is_read_by_another_node(
    tmp_path: Path, postgres: ThrowawayPostgres
) -> None:
    dsn = postgres.create_database()
    inbox = tmp_path / "in"
    # What a node killed between its claim's move and the journal entry leaves in the shared spool.
    orphan_dir = tmp_path / "spool" / "0123456789abcdef0123456789abcdef"
    orphan_dir.mkdir(parents=True)
    (orphan_dir / "claim.json").write_text(
        json.dumps({"source_folder": str(inbox), "relative_path": "lost.png", "identity": "1:2:3"}),
        encoding="utf-8",
    )
    (orphan_dir / "lost.png").write_bytes(image_bytes("gray"))
    config = _in_process_config(tmp_path, dsn, rescan_seconds=1.0, orphan_grace_seconds=10.0)
    with DaemonThread(config, fixed_text_engine) as running:
        # Young, it may be another node's claim in progress: left alone at start...
        assert running.daemon.snapshot_status().queue["queued"] == 0
        assert (orphan_dir / "lost.png").exists()
        # ...and queued and read once older than the grace, without any restart.
        old = time.time() - 60
        os.utime(orphan_dir / "claim.json", (old, old))
        assert wait_for((tmp_path / "out" / "lost.png.json").exists, timeout=120)
    with _observer(dsn) as journal:
        assert [job.name for job in journal.jobs()] == ["lost.png"]


def test_jobs_read_at_once_each_ask_for_their_lease_and_publish(
    tmp_path: Path, postgres: ThrowawayPostgres
) -> None:
    # Two jobs in flight on one worker ask "may I publish?" at about the same time: each answer
    # must reach the thread that asked, or a job waits for ever or writes on another's answer.
    dsn = postgres.create_database()
    (tmp_path / "in").mkdir()
    config = _in_process_config(tmp_path, dsn, jobs={"per_worker": 2})
    engine = functools.partial(
        GatedFaultEngine, "HELLO", str(tmp_path / "go"), str(tmp_path / "never"), "hang"
    )
    with _observer(dsn) as journal, DaemonThread(config, engine):
        names = ["one.png", "two.png"]
        for index, name in enumerate(names):
            (tmp_path / "in" / name).write_bytes(image_bytes(size=(200 + index, 120)))
        assert wait_for(lambda: journal.counts()[JobState.RUNNING] == 2, timeout=120)
        (tmp_path / "go").touch()
        assert wait_for(lambda: journal.counts()[JobState.DONE] == 2, timeout=120), journal.counts()
        assert sorted(path.name for path in (tmp_path / "out").glob("*.json")) == [
            f"{n}.json" for n in sorted(names)
        ]
        assert chain.verify(dsn).entries == 2
