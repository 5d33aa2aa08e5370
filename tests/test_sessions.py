"""The execution provider is chosen explicitly and the one really used is reported."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from appliance.engines.ppocr_onnx import default_model_dir
from appliance.engines.ppocr_onnx.sessions import CPU, CUDA, create_session
from appliance.errors import ProviderError

MODEL = default_model_dir() / "ppocrv5_cls.onnx"
HAS_CUDA = CUDA in ort.get_available_providers()


def test_cpu_is_used_when_asked() -> None:
    _, info = create_session(MODEL, "cpu", 1, 1)
    assert info.provider == CPU
    assert info.fallback_reason is None


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime build has the CUDA provider")
def test_cuda_request_fails_loudly_without_cuda() -> None:
    with pytest.raises(ProviderError, match="no CUDA provider"):
        create_session(MODEL, "cuda", 1, 1)


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime build has the CUDA provider")
def test_auto_records_why_it_runs_on_the_cpu() -> None:
    _, info = create_session(MODEL, "auto", 1, 1)
    assert info.provider == CPU
    assert info.requested == "auto"
    assert info.fallback_reason == "this onnxruntime build has no CUDA provider"


def test_thread_settings_reach_the_session() -> None:
    session, _ = create_session(MODEL, "cpu", 2, 1)
    options = session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 1
