"""The API commands against a real daemon: finding its socket, id prefixes, exit codes, watch and pipes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance import cli_socket
from appliance.api.v1 import appliance_pb2 as pb
from appliance.cli import main
from appliance.errors import ExitCode
from tests.polling import wait_for
from tests.test_api import Appliance

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "import sys; from appliance.cli import main; sys.exit(main())"]

no_installed_daemon = pytest.mark.skipif(
    cli_socket.INSTALLED.exists(), reason="an installed daemon's socket would be found first"
)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes, and pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="cli-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_run(tmp_path: Path, short_dir: Path) -> Iterator[Appliance]:
    """A daemon serving where `make run` puts its socket: ./var/run/api.sock under `short_dir`."""
    (short_dir / "var" / "run").mkdir(parents=True)
    with Appliance(tmp_path, short_dir / "var" / "run") as running:
        yield running


def _one_done(appliance: Appliance) -> str:
    appliance.drop("a.png")
    with appliance.client() as client:
        assert wait_for(lambda: client.status().queue.get("done", 0) >= 1)
        return client.list_jobs(pb.ListJobsRequest()).jobs[0].id


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != cli_socket.ENV_VARIABLE}
    return {**env, "PYTHONPATH": str(REPO), **extra}


@no_installed_daemon
def test_status_finds_the_make_run_socket_from_the_checkout(
    make_run: Appliance,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(short_dir)
    monkeypatch.delenv(cli_socket.ENV_VARIABLE, raising=False)
    assert main(["status"]) == ExitCode.OK
    assert "running" in capsys.readouterr().out


def test_status_finds_the_socket_named_in_a_config(
    make_run: Appliance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "site.yaml"
    config.write_text(f"api:\n  socket: {make_run.socket}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cli_socket.ENV_VARIABLE, str(tmp_path / "elsewhere.sock"))
    assert main(["status", "--config", str(config)]) == ExitCode.OK
    assert "running" in capsys.readouterr().out


def test_no_daemon_anywhere_lists_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.example.yaml").write_text("api:\n  socket: ./example/api.sock\n", encoding="utf-8")
    monkeypatch.setenv(cli_socket.ENV_VARIABLE, str(tmp_path / "env.sock"))
    places = cli_socket.candidates()
    if cli_socket.choose(places) is not None:
        pytest.skip("a daemon's socket exists on this machine")
    assert main(["status"]) == ExitCode.API_UNREACHABLE
    err = capsys.readouterr().err
    for expected in (
        f"{tmp_path / 'env.sock'} (${cli_socket.ENV_VARIABLE})",
        f"{cli_socket.INSTALLED} (installed default)",
        f"{tmp_path / 'var/run/api.sock'} (`make run` default)",
        f"{tmp_path / 'example/api.sock'} (api.socket in",
    ):
        assert expected in err, err


def test_job_and_review_accept_the_printed_id_prefix(
    make_run: Appliance, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _one_done(make_run)
    socket = ["--socket", str(make_run.socket)]
    capsys.readouterr()
    assert main(["job", job_id[:8], *socket]) == ExitCode.OK
    assert job_id in capsys.readouterr().out
    # Not in review: the prefix is resolved, then the daemon refuses for its own reason.
    assert main(["review", "resolve", job_id[:8], "--field", "total=1", *socket]) == (
        ExitCode.API_FAILED_PRECONDITION
    )
    assert main(["job", job_id[:2], *socket]) == ExitCode.API_INVALID_ARGUMENT
    other = "0" * 8 if not job_id.startswith("0000") else "f" * 8
    assert main(["job", other, *socket]) == ExitCode.API_NOT_FOUND
    err = capsys.readouterr().err
    assert "NOT_FOUND" in err and "INVALID_ARGUMENT" in err


def test_watch_stops_at_the_first_signal(make_run: Appliance) -> None:
    _one_done(make_run)
    for stop in (signal.SIGINT, signal.SIGTERM):
        watch = subprocess.Popen(
            [*CLI, "watch", "--after", "0", "--socket", str(make_run.socket)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        first = watch.stdout.readline()
        assert "queued" in first, first
        watch.send_signal(stop)
        _out, err = watch.communicate(timeout=30)
        assert watch.returncode == ExitCode.OK, (stop, err)
        assert "Traceback" not in err


def test_a_closed_pipe_ends_quietly(make_run: Appliance) -> None:
    _one_done(make_run)
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that has already exited: every write fails with EPIPE
    try:
        done = subprocess.run(
            [*CLI, "jobs", "--json", "--socket", str(make_run.socket)],
            env=_env(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == ExitCode.BROKEN_PIPE, done.stderr
    assert done.stderr == ""


def test_api_errors_have_their_own_exit_codes() -> None:
    from appliance.cli_api import exit_code_for

    codes = {
        exit_code_for(name)
        for name in (
            "UNAVAILABLE",
            "NOT_FOUND",
            "INVALID_ARGUMENT",
            "PERMISSION_DENIED",
            "FAILED_PRECONDITION",
        )
    }
    assert len(codes) == 5
    assert ExitCode.INTERNAL_ERROR not in codes and exit_code_for("INTERNAL") != ExitCode.INTERNAL_ERROR
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"| {code.value} | {code.name} |" in readme, code.name
