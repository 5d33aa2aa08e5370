"""Where the CLI looks for the daemon's API socket: the places the daemon itself may have chosen.

A site runs the daemon either installed (`/run/ocr-appliance/api.sock`) or from a checkout with
`make run` (`./var/run/api.sock`, from config.example.yaml); the CLI tries them in that order
after what the user named, takes the first socket that exists, and lists every place it looked
when none answers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from appliance.config import ApiConfig, load_config
from appliance.errors import ConfigError

ENV_VARIABLE = "OCR_APPLIANCE_SOCKET"
INSTALLED: Path = ApiConfig().socket  # the daemon's own default, where `make install` runs it
MAKE_RUN = Path("var/run/api.sock")  # under the checkout `make run` was started in
EXAMPLE_CONFIG = Path("config.example.yaml")


@dataclass(frozen=True)
class Candidate:
    """One place a socket may be, and why the CLI looks there."""

    path: Path
    origin: str

    def describe(self) -> str:
        return f"{self.path} ({self.origin})"


def _config_socket(path: Path) -> Path:
    return load_config(path).api.socket


def candidates(
    socket: Path | None = None,
    config: Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> list[Candidate]:
    """The places to look, in order; `--socket` alone when given. ConfigError for a bad --config."""
    if socket is not None:
        return [Candidate(socket, "--socket")]
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    found: list[Candidate] = []
    if config is not None:
        found.append(Candidate(_config_socket(config), f"api.socket in {config}"))
    if environ.get(ENV_VARIABLE):
        found.append(Candidate(Path(environ[ENV_VARIABLE]), f"${ENV_VARIABLE}"))
    found.append(Candidate(INSTALLED, "installed default"))
    found.append(Candidate(cwd / MAKE_RUN, "`make run` default"))
    example = cwd / EXAMPLE_CONFIG
    if example.is_file():
        # An edited example that no longer loads is not this command's concern.
        with contextlib.suppress(ConfigError):
            found.append(Candidate(_config_socket(example), f"api.socket in {example}"))
    unique: dict[Path, Candidate] = {}
    for candidate in found:
        unique.setdefault(candidate.path.absolute(), candidate)
    return list(unique.values())


def choose(places: list[Candidate]) -> Candidate | None:
    """The first place where a socket exists, or None."""
    for candidate in places:
        try:
            if candidate.path.is_socket():
                return candidate
        except OSError:  # a folder this user may not enter
            continue
    return None


def looked_at(places: list[Candidate]) -> str:
    """Every place looked at, one per line, for an error message."""
    return "looked for the API socket at:\n" + "\n".join(f"  {c.describe()}" for c in places)
