"""Configuration: defaults, relative paths, and errors that name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance.config import AppConfig, PpocrOnnxConfig, load_config, parse_config
from appliance.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def test_example_config_is_valid_and_matches_the_defaults() -> None:
    """config.example.yaml documents the defaults: its values are the built-in ones."""
    config = load_config(REPO / "config.example.yaml")
    defaults = AppConfig()
    assert config.engine == defaults.engine
    assert config.rasterize == defaults.rasterize
    assert config.outputs == defaults.outputs
    assert config.intake == defaults.intake
    assert config.jobs == defaults.jobs
    assert config.profiles == defaults.profiles
    assert config.paths.state_dir == REPO / "var" / "lib"
    assert config.hot_folders[0].path == REPO / "var" / "inbox"
    assert config.hot_folders[0].output_dir == REPO / "var" / "out"
    assert config.api == defaults.api.model_copy(update={"socket": REPO / "var" / "run" / "api.sock"})


def test_relative_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "site" / "config.yaml"
    path.parent.mkdir()
    path.write_text(
        "hot_folders:\n  - {path: in, output_dir: out, archive_dir: arch, failed_dir: /srv/failed}\n",
        encoding="utf-8",
    )
    folder = load_config(path).hot_folders[0]
    assert folder.path == tmp_path / "site" / "in"
    assert folder.failed_dir == Path("/srv/failed")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"rasterize": {"pdf_dpi": "300"}}, "rasterize.pdf_dpi: Input should be a valid integer"),
        ({"rasterize": {"pdf_dpi": 20}}, "rasterize.pdf_dpi: Input should be greater than or equal to 72"),
        ({"engine": {"ppocr_onnx": {"det_limit": 960}}}, "engine.ppocr_onnx.det_limit: unknown key"),
        ({"engine": {"ppocr_onnx": {"provider": "tpu"}}}, "engine.ppocr_onnx.provider: Input should be"),
        ({"engine": {"ppocr_onnx": {"use_line_orientation": "yes"}}}, "use_line_orientation"),
        ({"hot_folders": [{"path": "in"}]}, "hot_folders[0].output_dir: Field required"),
        ({"outputs": {"formats": ["json", "docx"]}}, "outputs.formats[1]: Input should be 'json', 'text'"),
        ({"version": 2}, "version: Input should be 1"),
        ({"surprise": 1}, "surprise: unknown key"),
    ],
)
def test_errors_name_the_key_path(raw: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(raw, "site.yaml")
    assert expected in str(raised.value)
    assert str(raised.value).startswith("site.yaml:")


def test_all_errors_are_reported_together() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"rasterize": {"pdf_dpi": "x", "max_pages": 0}, "typo": 1})
    assert "3 invalid setting(s)" in str(raised.value)


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        parse_config(["a", "b"])


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert load_config(path) == AppConfig()


def test_broken_yaml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("engine: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "absent.yaml")


def test_a_bare_yaml_on_or_off_is_refused_with_what_to_write(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("jobs:\n  session_server: on\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r'jobs\.session_server: write "on" in quotes'):
        load_config(path)
    path.write_text("jobs:\n  session_server: off\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r'write "off" in quotes: YAML reads a bare off as false'):
        load_config(path)
    path.write_text('jobs:\n  session_server: "on"\n  session_server_runners: 2\n', encoding="utf-8")
    jobs = load_config(path).jobs
    assert (jobs.session_server, jobs.session_server_runners) == ("on", 2)
    path.write_text("engine:\n  ppocr_onnx:\n    fixed_shapes: on\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r'engine\.ppocr_onnx\.fixed_shapes: write "on" in quotes'):
        load_config(path)
    path.write_text('engine:\n  ppocr_onnx:\n    fixed_shapes: "off"\n', encoding="utf-8")
    assert load_config(path).engine.ppocr_onnx.fixed_shapes == "off"


@pytest.mark.parametrize("value", [":4096:8", ":4096:2:16:8", None])
def test_cublas_workspace_settings_in_cublas_form_are_taken(value: str | None) -> None:
    assert PpocrOnnxConfig(cublas_workspace_config=value).cublas_workspace_config == value


@pytest.mark.parametrize("value", ["4096:8", ":4096", ":4k:8", ""])
def test_cublas_workspace_settings_not_in_cublas_form_are_refused(value: str) -> None:
    with pytest.raises(ValidationError):
        PpocrOnnxConfig(cublas_workspace_config=value)
