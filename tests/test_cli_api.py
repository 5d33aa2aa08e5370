"""The status command shows why the VLM is left out, and the workers' session server, when there are."""

from __future__ import annotations

import argparse

import pytest

from appliance.api.v1 import appliance_pb2 as pb
from appliance.cli_api import _status


class _Client:
    def __init__(self, response: pb.GetStatusResponse) -> None:
        self.response = response

    def status(self) -> pb.GetStatusResponse:
        return self.response


def test_status_shows_a_disabled_vlm_and_nothing_while_it_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    reason = "VLM disabled until restart: 3 documents in a row lost their worker while they could call it"
    plain = argparse.Namespace(json=False)
    _status(_Client(pb.GetStatusResponse(version="0.1.0", vlm_disabled=reason)), plain)
    assert reason in capsys.readouterr().out
    _status(_Client(pb.GetStatusResponse(version="0.1.0")), plain)
    assert "VLM disabled" not in capsys.readouterr().out


def test_status_shows_the_session_server_where_there_is_one(capsys: pytest.CaptureFixture[str]) -> None:
    plain = argparse.Namespace(json=False)
    server = pb.SessionServer(
        pid=4242, alive=True, restarts=1, socket="/run/ocr-appliance/sessions/sessions.sock", runners=2
    )
    _status(_Client(pb.GetStatusResponse(version="0.1.0", session_server=server)), plain)
    shown = capsys.readouterr().out
    assert "session server" in shown and "pid 4242, 2 runner(s), restarted 1 time(s)" in shown
    assert "/run/ocr-appliance/sessions/sessions.sock" in shown
    assert "VLM" not in shown  # each worker reads with its own
    server.vlm_copies = 2
    _status(_Client(pb.GetStatusResponse(version="0.1.0", session_server=server)), plain)
    assert "2 runner(s), the VLM for the workers (2 copies), restarted 1 time(s)" in capsys.readouterr().out
    server.alive = False
    _status(_Client(pb.GetStatusResponse(version="0.1.0", session_server=server)), plain)
    assert "down, starting again" in capsys.readouterr().out
    _status(_Client(pb.GetStatusResponse(version="0.1.0")), plain)
    assert "session server" not in capsys.readouterr().out
