"""train/box.sh: a training run started in one call, left running, and collected by a later call."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Stands in for .train-carry/run.sh (which needs a GPU box's torch): it records how it was called
# and writes an export part where run.sh writes them.
FAKE_RUN = """#!/bin/bash
set -e
printf '%s\\n' "$@" > "$OUT/args.txt"
echo "MINUTES=$MINUTES" > "$OUT/env.txt"
echo "$RUN_DIR" > "$OUT/run_dir.txt"
echo "[ 1.0s] final step 5" > "$OUT/console.txt"
echo part > "$OUT/hf_bf16.tgz.part-aa"
"""


def _checkout(root: Path) -> Path:
    checkout = root / "checkout"
    (checkout / "train" / "weights").mkdir(parents=True)
    (checkout / "train" / "box.sh").write_bytes((REPO / "train" / "box.sh").read_bytes())
    with tarfile.open(checkout / "train" / "weights" / "line_reader_hf_bf16.tgz", "w:gz") as archive:
        data = b'{"stretch": 1.5}\n'
        info = tarfile.TarInfo("hf_bf16/line_input.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    carry = checkout / ".train-carry"
    for part in ("fonts", "wheels", "wheels-transformers"):
        (carry / part).mkdir(parents=True)
    (carry / "words").write_text("TOTAL\n")
    (carry / "run.sh").write_text(FAKE_RUN)
    (carry / "run.sh").chmod(0o755)
    return checkout


def _box(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """box.sh with `args`; a start without --init-from is meant here unless env says FROM_SCRATCH."""
    return subprocess.run(
        ["bash", "train/box.sh", *args],
        cwd=checkout,
        env={"FROM_SCRATCH": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_run_started_in_one_call_is_collected_in_a_later_one(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(out), "MINUTES": "3"}
    assert _box(checkout, env, "start").returncode == 2  # nothing stashed yet: said, not started
    assert _box(checkout, env, "stash").returncode == 0
    started = _box(checkout, env, "start", "--init-from", "x y", "--seed", "7")
    assert started.returncode == 0, started.stderr
    finished = _box(checkout, env, "finish")
    assert finished.returncode == 0, finished.stderr
    assert "final step 5" in _box(checkout, env, "poll", "0").stdout  # the run's console, after the wait
    assert (out / "hf_bf16.tgz.part-aa").read_text() == "part\n"
    run_out = tmp_path / "box" / "trainout"
    assert (run_out / "args.txt").read_text().splitlines() == ["--init-from", "x y", "--seed", "7"]
    assert (run_out / "env.txt").read_text() == "MINUTES=3\n"
    assert (tmp_path / "box" / "init" / "hf_bf16" / "line_input.json").exists()
    with tarfile.open(out / "logs.tgz") as logs:
        assert "trainout/console.txt" in logs.getnames()


def test_start_refuses_until_every_carried_part_is_stashed(tmp_path: Path) -> None:
    # The carry comes over several calls; a run started before the last wheels arrive would
    # fail on the box, seen only when finish is called.
    checkout = _checkout(tmp_path)
    wheels = checkout / ".train-carry" / "wheels"
    wheels.rmdir()
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(tmp_path)}
    assert _box(checkout, env, "stash").returncode == 0
    refused = _box(checkout, env, "start")
    assert refused.returncode == 2
    assert "not stashed yet: wheels " in refused.stderr
    assert not (tmp_path / "box" / "run.log").exists()  # nothing started
    wheels.mkdir()
    assert _box(checkout, env, "stash").returncode == 0
    assert _box(checkout, env, "start").returncode == 0


def test_start_refuses_a_run_from_random_weights_unless_told(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(tmp_path), "FROM_SCRATCH": "0"}
    assert _box(checkout, env, "stash").returncode == 0
    refused = _box(checkout, env, "start", "--lr", "3e-5")
    assert refused.returncode == 2 and "no --init-from" in refused.stderr
    assert not (tmp_path / "box" / "run.log").exists()  # nothing started
    named = _box(checkout, env, "start", "--init-from=/tmp/box/init/hf_bf16", "--lr", "3e-5")
    assert named.returncode == 0, named.stderr
    # The next start clears what this run writes: it waits for the run to end (`finish`), as on a box.
    assert _box(checkout, env, "finish").returncode == 0
    scratch = _box(checkout, {**env, "FROM_SCRATCH": "1"}, "start", "--lr", "1e-3")
    assert scratch.returncode == 0, scratch.stderr


def test_init_starts_from_export_parts_stashed_over_several_calls(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    soup = io.BytesIO()
    with tarfile.open(fileobj=soup, mode="w:gz") as archive:
        data = b'{"stretch": 3.0, "soup": true}\n'
        info = tarfile.TarInfo("hf_bf16/line_input.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    packed = soup.getvalue()
    init = checkout / ".train-carry" / "init"
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(tmp_path), "INIT": ".train-carry/init"}
    assert _box(checkout, env, "stash").returncode == 0
    refused = _box(checkout, env, "start")  # no part stashed yet
    assert refused.returncode == 2 and "stash them first" in refused.stderr
    init.mkdir()
    (init / "hf_bf16.tgz.part-aa").write_bytes(packed[:40])  # one part a call, as they are carried
    assert _box(checkout, env, "stash").returncode == 0
    (init / "hf_bf16.tgz.part-aa").unlink()
    (init / "hf_bf16.tgz.part-ab").write_bytes(packed[40:])
    assert _box(checkout, env, "stash").returncode == 0
    started = _box(checkout, env, "start")
    assert started.returncode == 0, started.stderr
    unpacked = tmp_path / "box" / "init" / "hf_bf16" / "line_input.json"
    assert unpacked.read_text() == '{"stretch": 3.0, "soup": true}\n'  # the soup, not train/weights'


def test_a_run_that_fails_makes_finish_fail(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    (checkout / ".train-carry" / "run.sh").write_text("#!/bin/bash\nexit 3\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(out)}
    assert _box(checkout, env, "stash").returncode == 0
    assert _box(checkout, env, "start").returncode == 0
    finished = _box(checkout, env, "finish")
    assert finished.returncode == 3 and "exited with 3" in finished.stderr
    assert (out / "logs.tgz").exists() and not list(out.glob("hf_bf16.tgz.part-*"))


def test_poll_and_finish_on_a_box_without_a_run_fail_at_once(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(out)}
    assert _box(checkout, env, "stash").returncode == 0  # a fresh box: stashed, never started
    for verb in (["poll", "100000"], ["finish"]):  # either would outlast _box's timeout if it waited
        answered = _box(checkout, env, *verb)
        assert answered.returncode == 4 and "no run on this box" in answered.stderr


def test_start_begins_a_new_run_not_the_last_runs_checkpoint(tmp_path: Path) -> None:
    # train_vlm resumes from a checkpoint in its --out before it looks at --init-from.
    checkout = _checkout(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    run_dir = tmp_path / "vlmrun"
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "state.pt").write_text("the last run's state")
    (run_dir / "hf").mkdir()
    (run_dir / "hf" / "config.json").write_text("{}")
    env = {**os.environ, "BOX": str(tmp_path / "box"), "OUT": str(out), "RUN_DIR": str(run_dir)}
    assert _box(checkout, env, "stash").returncode == 0
    started = _box(checkout, env, "start", "--init-from", str(run_dir / "hf"))
    assert started.returncode == 0, started.stderr
    assert _box(checkout, env, "finish").returncode == 0
    assert not (run_dir / "checkpoint").exists()
    assert (run_dir / "hf" / "config.json").exists()  # the last export, which --init-from names


def test_seeds_start_one_run_each_side_by_side_and_finish_collects_every_export(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    run_dir = tmp_path / "vlmrun"
    (run_dir / "seed-52" / "checkpoint").mkdir(parents=True)  # a last run's, on the same box
    env = {
        **os.environ,
        "BOX": str(tmp_path / "box"),
        "OUT": str(out),
        "RUN_DIR": str(run_dir),
        "SEEDS": "51 52",
        "MINUTES": "4",
    }
    assert _box(checkout, env, "stash").returncode == 0
    started = _box(checkout, env, "start", "--lr", "3e-5")
    assert started.returncode == 0, started.stderr
    finished = _box(checkout, env, "finish")
    assert finished.returncode == 0, finished.stderr
    for seed in ("51", "52"):
        run_out = tmp_path / "box" / "trainout" / f"seed-{seed}"
        assert (run_out / "args.txt").read_text().splitlines() == ["--lr", "3e-5", "--seed", seed]
        assert (run_out / "run_dir.txt").read_text().strip() == str(run_dir / f"seed-{seed}")
        assert (run_out / "env.txt").read_text() == "MINUTES=4\n"
        assert (out / f"seed-{seed}" / "hf_bf16.tgz.part-aa").read_text() == "part\n"
    assert not (run_dir / "seed-52" / "checkpoint").exists()
    assert not list(out.glob("hf_bf16.tgz.part-*"))  # each export in its seed's folder, none loose
    assert _box(checkout, env, "poll", "0").stdout.count("final step 5") == 2
    with tarfile.open(out / "logs.tgz") as logs:
        assert {"trainout/seed-51/console.txt", "trainout/seed-52/console.txt"} <= set(logs.getnames())


def test_a_seed_whose_run_fails_makes_finish_fail(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    # Every run writes its export; the one given --seed 52 (its last option) then fails.
    failing_second = '#!/bin/bash\necho part > "$OUT/hf_bf16.tgz.part-aa"\n[ "${*: -1}" = 51 ] || exit 3\n'
    (checkout / ".train-carry" / "run.sh").write_text(failing_second)
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "BOX": str(tmp_path / "box"),
        "OUT": str(out),
        "RUN_DIR": str(tmp_path / "vlmrun"),
        "SEEDS": "51 52",
    }
    assert _box(checkout, env, "stash").returncode == 0
    assert _box(checkout, env, "start").returncode == 0
    finished = _box(checkout, env, "finish")
    assert finished.returncode == 3 and "seed-52" in finished.stderr
    assert not list(out.rglob("hf_bf16.tgz.part-*"))  # nothing collected while a run failed


# Writes an export of three parts, as a deep model's is (three 15 MiB parts), 1,000 bytes each here.
THREE_PARTS_RUN = """#!/bin/bash
set -e
for part in aa ab ac; do head -c 1000 /dev/zero > "$OUT/hf_bf16.tgz.part-$part"; done
"""


def _three_part_seeds(tmp_path: Path, **limits: str) -> tuple[Path, dict[str, str]]:
    checkout = _checkout(tmp_path)
    (checkout / ".train-carry" / "run.sh").write_text(THREE_PARTS_RUN)
    env = {
        **os.environ,
        "BOX": str(tmp_path / "box"),
        "RUN_DIR": str(tmp_path / "vlmrun"),
        "SEEDS": "51 52",
        **limits,
    }
    assert _box(checkout, env, "stash").returncode == 0
    assert _box(checkout, env, "start").returncode == 0
    return checkout, env


def _call_out(tmp_path: Path, name: str, env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    out = tmp_path / name
    out.mkdir()
    return out, {**env, "OUT": str(out)}


def test_exports_over_the_files_a_call_brings_back_are_named_and_fetched_in_the_next(
    tmp_path: Path,
) -> None:
    # logs.tgz and seed-51's three parts make 4 files; seed-52's three more would make 7, over 6.
    checkout, env = _three_part_seeds(tmp_path, BACK_FILES="6")
    out, call = _call_out(tmp_path, "finish-call", env)
    finished = _box(checkout, call, "finish")
    assert finished.returncode == 0, finished.stderr
    assert sorted(p.name for p in (out / "seed-51").iterdir()) == [
        "hf_bf16.tgz.part-aa",
        "hf_bf16.tgz.part-ab",
        "hf_bf16.tgz.part-ac",
    ]
    assert not (out / "seed-52").exists()
    assert "bash train/box.sh fetch seed-52" in finished.stderr
    assert "seed-51" not in finished.stderr

    out, call = _call_out(tmp_path, "fetch-call", env)
    fetched = _box(checkout, call, "fetch", "seed-52")
    assert fetched.returncode == 0, fetched.stderr
    assert [p.stat().st_size for p in sorted((out / "seed-52").iterdir())] == [1000, 1000, 1000]
    assert _box(checkout, call, "fetch", "seed-53").returncode == 2  # no such run: said, nothing copied


def test_exports_over_the_bytes_a_call_brings_back_wait_for_fetch(tmp_path: Path) -> None:
    # One export's 3,000 bytes and logs.tgz fit in 5,000 bytes; a second export does not.
    checkout, env = _three_part_seeds(tmp_path, BACK_BYTES="5000")
    out, call = _call_out(tmp_path, "finish-call", env)
    finished = _box(checkout, call, "finish")
    assert finished.returncode == 0, finished.stderr
    assert (out / "seed-51").is_dir() and not (out / "seed-52").exists()
    assert "fetch seed-52" in finished.stderr


def test_a_lone_runs_export_over_what_a_call_brings_back_is_fetched_by_fetch_alone(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    (checkout / ".train-carry" / "run.sh").write_text(THREE_PARTS_RUN)
    env = {**os.environ, "BOX": str(tmp_path / "box"), "RUN_DIR": str(tmp_path / "vlmrun")}
    assert _box(checkout, env, "stash").returncode == 0
    assert _box(checkout, env, "start").returncode == 0
    out, call = _call_out(tmp_path, "finish-call", {**env, "BACK_FILES": "3"})  # logs.tgz + 3 parts
    finished = _box(checkout, call, "finish")
    assert finished.returncode == 0, finished.stderr
    assert "bash train/box.sh fetch in the next call" in finished.stderr
    assert not list(out.rglob("hf_bf16.tgz.part-*"))
    out, call = _call_out(tmp_path, "fetch-call", env)
    assert _box(checkout, call, "fetch").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [f"hf_bf16.tgz.part-{s}" for s in ("aa", "ab", "ac")]
