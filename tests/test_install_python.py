"""`make install` builds the service's venv with the system's interpreter, one the unit can execute."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECK = REPO / "scripts" / "check-venv-interpreter"


def _dry_run(tmp_path: Path, *arguments: str) -> str:
    """The commands `make install-venv` would run, with a pyenv-like python3 first on the PATH."""
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    shim = shims / "python3"
    shim.write_text("#!/bin/sh\nexit 99\n", encoding="utf-8")
    shim.chmod(0o755)
    result = subprocess.run(
        ["make", "-n", "-C", str(REPO), "install-venv", f"DESTDIR={tmp_path / 'stage'}", *arguments],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{shims}:{os.environ['PATH']}"},
    )
    return result.stdout


def test_install_venv_uses_the_system_interpreter_not_the_first_on_the_path(tmp_path: Path) -> None:
    commands = _dry_run(tmp_path)
    venv = f"{tmp_path}/stage/usr/local/lib/ocr-appliance/venv"
    assert f"/usr/bin/python3 -m venv {venv}" in commands
    assert f"check-venv-interpreter {venv}" in commands
    assert "python3-venv" in commands  # Debian's python3 lacks venv/ensurepip without it
    assert commands.index("-m venv") < commands.index("check-venv-interpreter") < commands.index("pip")


def test_install_python_can_be_overridden(tmp_path: Path) -> None:
    commands = _dry_run(tmp_path, "INSTALL_PYTHON=/opt/python3.12/bin/python3")
    assert "/opt/python3.12/bin/python3 -m venv " in commands
    assert "/usr/bin/python3 -m venv" not in commands


def _venv_with_python_at(tmp_path: Path, interpreter: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # venv's own layout: python -> python3 -> the interpreter it was made with.
    (venv / "bin" / "python3").symlink_to(interpreter)
    (venv / "bin" / "python").symlink_to("python3")
    return venv


def _check(venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHECK), str(venv)], capture_output=True, text=True, check=False)


def test_check_refuses_an_interpreter_the_unit_cannot_see(tmp_path: Path) -> None:
    for hidden in (
        "/root/.pyenv/versions/3.11.7/bin/python3.11",
        "/home/ops/miniconda3/bin/python3.12",
        "/run/user/1000/python3",
    ):
        result = _check(_venv_with_python_at(tmp_path / hidden.split("/")[1], hidden))
        assert result.returncode == 1, hidden
        assert hidden in result.stderr
        assert "ProtectHome=yes" in result.stderr
        assert "INSTALL_PYTHON=/usr/bin/python3" in result.stderr


def test_check_follows_a_chain_of_links(tmp_path: Path) -> None:
    """A link outside /home to an interpreter inside it is still refused: the real path counts."""
    innocent = tmp_path / "usr-local-python3"
    innocent.symlink_to("/home/ops/.pyenv/versions/3.12.3/bin/python3.12")
    result = _check(_venv_with_python_at(tmp_path, str(innocent)))
    assert result.returncode == 1
    assert "/home/ops/.pyenv/versions/3.12.3/bin/python3.12" in result.stderr


def test_check_accepts_a_system_interpreter(tmp_path: Path) -> None:
    result = _check(_venv_with_python_at(tmp_path, "/usr/bin/python3"))
    assert result.returncode == 0, result.stderr
    assert _check(_venv_with_python_at(tmp_path / "homely", "/usr/lib/homestead/python3")).returncode == 0
