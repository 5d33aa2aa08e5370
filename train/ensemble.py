"""Two ways of combining line readers, measured on the receipt crops: weights averaged, reads voted.

`average OUT EXPORT... [--bf16]` writes the mean of exports of one shape (runs from one start, a
"model soup") as a new export, in bf16 with `--bf16` (to carry to a GPU box and start runs from).
`vote RESULT...` takes `train.eval_lines --out` files of the same crops (one reader at several
`--x-scale`, say), keeps for each line the read most of the others agree with (the first file's
on a tie) and prints the CER of each file, of the vote, of the read the reader was surest of (where
the files hold each read's token probabilities) and of the best read of each line (an oracle, the
most any choice among them could give); `--hints READS --below C` restricts all of it
to the lines the ONNX reader gave less than C confidence (the cascade's unsure lines); `--out FILE`
writes the surest reads as `train.eval_lines --out` does, for `train.paired`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.text_forms import normalize
from train.eval_lines import cer, edit_count, unsure_crops


def average_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The element-wise mean of state dicts with the same names and shapes."""
    names = set(states[0])
    if any(set(state) != names for state in states[1:]):
        raise ValueError("the exports hold different weights")
    return {name: sum(state[name] for state in states) / len(states) for name in states[0]}


def voted(reads: Sequence[str]) -> int:
    """The index of the read that most of `reads` agree with (compared as CER compares), first on a tie."""
    forms = [normalize(read, True) for read in reads]
    return max(range(len(reads)), key=lambda i: (sum(form == forms[i] for form in forms), -i))


def surest(probabilities: Sequence[Sequence[float]]) -> int:
    """The index of the read the reader was surest of: the highest mean token probability, first on a tie.

    The mean is the confidence the appliance gives a line (`text_lines.make_line`); an empty read
    counts as 0.
    """
    means = [sum(p) / len(p) if p else 0.0 for p in probabilities]
    return max(range(len(means)), key=lambda i: (means[i], -i))


def closest(truth: str, reads: Sequence[str]) -> int:
    """The index of the read nearest the truth: what an oracle would keep."""
    return min(range(len(reads)), key=lambda i: edit_count([(truth, reads[i])]))


def _average(out: Path, exports: Sequence[Path], bf16: bool) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(exports[0], out)
    for weights in sorted(out.glob("*.safetensors")):
        states = [{k: v.to(torch.float32) for k, v in load_file(e / weights.name).items()} for e in exports]
        mean = average_states(states)
        if bf16:  # as run.sh carries an export off a box: half the bytes, and --init-from takes it
            mean = {name: value.to(torch.bfloat16) for name, value in mean.items()}
        save_file(mean, weights, metadata={"format": "pt"})
    print(f"{out}: the mean of {len(exports)} exports" + (", in bf16" if bf16 else ""))


def _vote(results: Sequence[Path], hints: Path | None, below: float, out: Path | None) -> None:
    runs = [{line["file"]: line for line in json.loads(r.read_text())["lines"]} for r in results]
    files = [f for f in runs[0] if all(f in run for run in runs[1:])]
    if hints:
        unsure = unsure_crops(hints, below)
        files = [f for f in files if f in unsure]
    truths = [runs[0][f]["truth"] for f in files]
    reads = [[run[f]["read"] for run in runs] for f in files]
    for index, result in enumerate(results):
        print(f"{result}: {cer([(t, r[index]) for t, r in zip(truths, reads, strict=True)]):.2%}")
    vote = [(t, r[voted(r)]) for t, r in zip(truths, reads, strict=True)]
    oracle = [(t, r[closest(t, r)]) for t, r in zip(truths, reads, strict=True)]
    spaced = cer(vote, spaced=True)
    print(f"vote: {cer(vote):.2%} / {spaced:.2%} spaced; oracle {cer(oracle):.2%}; {len(files)} lines")
    if not all("probabilities" in run[f] for run in runs for f in files):
        if out:
            raise SystemExit("--out needs reads with their probabilities (train.eval_lines --out)")
        return
    kept = [runs[surest([run[f]["probabilities"] for run in runs])][f] for f in files]
    sure = [(line["truth"], line["read"]) for line in kept]
    print(f"surest: {cer(sure):.2%} / {cer(sure, spaced=True):.2%} spaced")
    if out:  # as train.eval_lines writes its reads, for train.paired
        summary = {
            "lines": len(kept),
            "cer_nospace_ci": round(cer(sure), 4),
            "surest_of": list(map(str, results)),
        }
        out.write_text(json.dumps({"summary": summary, "lines": kept}, ensure_ascii=False, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.ensemble", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    average = verbs.add_parser("average", help="the mean of exports' weights, as an export")
    average.add_argument("out", type=Path)
    average.add_argument("exports", type=Path, nargs="+")
    average.add_argument(
        "--bf16", action="store_true", help="write the mean in bf16 (half the bytes to carry)"
    )
    vote = verbs.add_parser("vote", help="a vote among eval_lines results of the same crops")
    vote.add_argument("results", type=Path, nargs="+")
    vote.add_argument("--hints", type=Path, help="bench.vlm_lines --save-hints: the ONNX reads")
    vote.add_argument("--below", type=float, default=0.9, help="with --hints: lines under this confidence")
    vote.add_argument(
        "--out", type=Path, help="write the surest reads as train.eval_lines does (train.paired)"
    )
    args = parser.parse_args(argv)
    if args.verb == "average":
        _average(args.out, args.exports, args.bf16)
    else:
        _vote(args.results, args.hints, args.below, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
