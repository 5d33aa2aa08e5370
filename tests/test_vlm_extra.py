"""Without the vlm extra (llama-cpp-python) the appliance imports, and a config that needs it is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# A fresh interpreter in which llama_cpp cannot be found, as after `make setup` without `make vlm`.
PROGRAM = """
import importlib.machinery, sys

find = importlib.machinery.PathFinder.find_spec

def without_llama(name, path=None, target=None):
    if name == "llama_cpp" or name.startswith("llama_cpp."):
        return None  # what the path finder answers for a package that is not installed
    return find(name, path, target)

importlib.machinery.PathFinder.find_spec = without_llama
import importlib.util
assert importlib.util.find_spec("llama_cpp") is None
import appliance, appliance.cli, appliance.daemon, appliance.engines.factory, appliance.engines.vlm_gguf
import appliance.pipeline.process, appliance.pipeline.cascade, appliance.engines.vlm_gguf.gguf_manifest
assert "llama_cpp" not in sys.modules
from appliance.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def test_the_appliance_imports_and_checks_configs_without_llama_cpp(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("engine:\n  name: ppocr_onnx\n", encoding="utf-8")
    checked = _cli("config", "check", str(plain))
    assert checked.returncode == 0, checked.stderr
    assert "valid" in checked.stdout


def test_a_config_with_a_vlm_is_refused_with_what_to_install(tmp_path: Path) -> None:
    vlm = tmp_path / "vlm.yaml"
    vlm.write_text(f"engine:\n  vlm_gguf:\n    model_dir: {tmp_path}\n", encoding="utf-8")
    for args in (("config", "check", str(vlm)), ("run", "--config", str(vlm))):
        refused = _cli(*args)
        assert refused.returncode == 4, (args, refused.stderr)
        assert "engine.vlm_gguf" in refused.stderr
        assert "install the vlm extra: make vlm" in refused.stderr
