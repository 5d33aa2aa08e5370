"""bench.gpu_memory_steps: a step for each session the engine opens and for each one's first run."""

from __future__ import annotations

from tests.bench_runs import last_json, run_bench


def _steps(*options: str) -> list[dict[str, object]]:
    steps: list[dict[str, object]] = last_json(run_bench("gpu_memory_steps", *options))["steps"]
    return steps


def test_small_sessions_are_each_marked_when_created_and_after_their_run() -> None:
    options = (
        "--cuda-option",
        "cudnn_conv_use_max_workspace=0",
        "--shared-arena",
        "--cublas-workspace",
        "null",
    )
    report = last_json(run_bench("gpu_memory_steps", "--tiny", "2", "--provider", "cpu", *options))
    names = [step["step"] for step in report["steps"]]
    assert names == ["start", "tiny 1 created", "tiny 1 ran", "tiny 2 created", "tiny 2 ran"]
    # the CUDA settings asked for are reported with the figures (the CPU provider ignores them)
    assert report["cuda_options"] == ["cudnn_conv_use_max_workspace=0"] and report["shared_arena"]
    assert report["settings"] == {"cublas_workspace_config": None}


def test_every_session_of_the_engine_is_marked_created_and_warmed() -> None:
    steps = _steps(
        "--variant", "fp32+provider=cpu+fixed_shapes=on+det_limit_side_len=640", "--det-shares", "0.5"
    )
    names = [str(step["step"]) for step in steps]
    created = [name for name in names if name.endswith(" created")]
    warmed = [name for name in names if name.endswith(" first run")]
    # detector buckets (two shares: 0.5 both ways, the square), line widths, orientation: a session each
    assert len(created) == 3 + 4 + 1
    assert sorted(name.removesuffix(" first run") for name in warmed) == sorted(
        name.removesuffix(" created") for name in created
    )
    assert names[0] == "start" and names[-1] == "engine loaded"
