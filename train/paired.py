"""Whether one reader reads the crops better than another beyond the luck of which receipts were drawn.

    python -m train.paired --crops CROPS A B [--resamples 9999] [--seed 0]

A and B are reads of the same crops: `train.eval_lines --out` files (the line reader's) or
`bench.vlm_lines --save-hints` files (the ONNX reader's). Prints each one's CER (whitespace-free
and spaced, counted with `train.eval_lines`' edit_count and char_count) and B's less A's with a
95% interval from a paired bootstrap over the receipts the crops were cut from
(bench.page_bootstrap: a receipt's lines share its print and faces, so receipts are resampled,
not lines).

A or B may be a group, several reads joined by commas (one recipe's runs, a seed each): its
edits on a receipt are the mean of its reads', so its CER is theirs averaged. The interval is
still over receipts only: a group of a few seeds keeps some of each run's own luck.

`--hints READS --below C` compares only the crops the ONNX reader (`bench.vlm_lines
--save-hints`) gave less than C confidence: the lines the cascade hands to the line reader.
With `--max-changes N` it also prints, for A and B, the edits their reads save and add against
the ONNX reads, split by whether a read changes the ONNX text by at most N characters (as
`cascade.max_changes` counts them: the reads the cascade would take) or by more.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from appliance.pipeline.cascade import changed_characters
from bench.page_bootstrap import Difference, PageCounts, compare, page_counts
from train.eval_lines import char_count, edit_count, unsure_crops


def load_truths(crops: Path) -> dict[str, tuple[str, str]]:
    """Each crop's page and truth, by file name, from a `train.make_crops` folder's labels.jsonl."""
    truths = {}
    for line in (crops / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            truths[record["file"]] = (record["page"], record["text"])
    return truths


def load_reads(path: Path) -> dict[str, str]:
    """Each crop's read, by file name, from `train.eval_lines --out` or `bench.vlm_lines --save-hints`."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "lines" in data:
        return {line["file"]: line["read"] for line in data["lines"]}
    if isinstance(data, list):
        return {read["file"]: read["text"] for read in data}
    raise ValueError(f"{path}: neither train.eval_lines --out nor bench.vlm_lines --save-hints")


def receipt_counts(
    truths: Mapping[str, tuple[str, str]],
    group_a: Sequence[Mapping[str, str]],
    group_b: Sequence[Mapping[str, str]],
    spaced: bool = False,
) -> PageCounts:
    """Each receipt's mean edits by A's reads and by B's, and its truth's characters, over crops all read."""
    groups = (group_a, group_b)
    files = [name for name in truths if all(name in reads for group in groups for reads in group)]
    if not files:
        raise ValueError("the reads share no crop of this folder")
    pages = sorted({truths[name][0] for name in files})
    index = {page: position for position, page in enumerate(pages)}
    edits = [[0.0] * len(pages) for _ in groups]
    chars = [0] * len(pages)
    for name in files:
        page, truth = truths[name]
        at = index[page]
        for counted, group in zip(edits, groups, strict=True):
            counted[at] += sum(edit_count([(truth, reads[name])], spaced) for reads in group) / len(group)
        chars[at] += char_count(truth, spaced)
    return page_counts(edits[0], edits[1], chars)


def change_split(
    truths: Mapping[str, tuple[str, str]],
    onnx: Mapping[str, str],
    group: Sequence[Mapping[str, str]],
    max_changes: int,
) -> tuple[float, float, float, float]:
    """A group's mean edits saved and added against the ONNX reads, by the size of a read's change.

    First by reads changing at most `max_changes` characters of the ONNX text (those the cascade
    would take), then by the others.
    """
    totals = [0, 0, 0, 0]
    for reads in group:
        for name, (_, truth) in truths.items():
            gained = edit_count([(truth, onnx[name])]) - edit_count([(truth, reads[name])])
            larger = 2 if changed_characters(onnx[name], reads[name]) > max_changes else 0
            if gained > 0:
                totals[larger] += gained
            elif gained < 0:
                totals[larger + 1] -= gained
    saved_small, added_small, saved_large, added_large = (total / len(group) for total in totals)
    return saved_small, added_small, saved_large, added_large


def _tenths(count: float) -> str:
    """A group's mean count to a tenth, a whole one without its `.0`."""
    return f"{count:.1f}".removesuffix(".0")


def describe(name_a: str, name_b: str, whitespace_free: Difference, spaced: Difference) -> list[str]:
    """The report's lines: both readers' CER, then B's less A's with its interval, each way of counting."""
    return [
        f"A {name_a}: {whitespace_free.cer_a:.2%} / {spaced.cer_a:.2%} spaced",
        f"B {name_b}: {whitespace_free.cer_b:.2%} / {spaced.cer_b:.2%} spaced",
        f"B - A, whitespace-free: {whitespace_free.described()}",
        f"B - A, spaced: {spaced.described()}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.paired", description=__doc__.splitlines()[0])
    parser.add_argument("--crops", type=Path, required=True, help="the train.make_crops folder both read")
    parser.add_argument(
        "a", help="reads of the crops (eval_lines --out, vlm_lines --save-hints); several joined by commas"
    )
    parser.add_argument("b", help="another reader's reads of the same crops (or several, joined by commas)")
    parser.add_argument("--resamples", type=int, default=9999)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hints", type=Path, help="bench.vlm_lines --save-hints: the ONNX reads")
    parser.add_argument("--below", type=float, default=0.9, help="with --hints: crops under this confidence")
    parser.add_argument(
        "--max-changes", type=int, help="with --hints: edits saved and added by reads within N changes or not"
    )
    args = parser.parse_args(argv)
    if args.max_changes is not None and not args.hints:
        parser.error("--max-changes needs --hints (the ONNX reads it counts changes against)")
    truths = load_truths(args.crops)
    if args.hints:
        unsure = unsure_crops(args.hints, args.below)
        truths = {name: truth for name, truth in truths.items() if name in unsure}
        if not truths:
            parser.error(f"no crop of {args.crops} has an ONNX confidence below {args.below}")
    group_a, group_b = ([load_reads(Path(path)) for path in group.split(",")] for group in (args.a, args.b))
    unread = [name for name in truths if any(name not in reads for reads in (*group_a, *group_b))]
    if unread:
        parser.error(f"{len(unread)} crops of {args.crops} lack a read in A or B (the first: {unread[0]})")
    results = [
        compare(receipt_counts(truths, group_a, group_b, spaced=spaced), args.resamples, args.seed)
        for spaced in (False, True)
    ]
    print("\n".join(describe(str(args.a), str(args.b), *results)))
    if args.max_changes is not None:
        onnx = load_reads(args.hints)
        for side, group in (("A", group_a), ("B", group_b)):
            saved, added, saved_more, added_more = change_split(truths, onnx, group, args.max_changes)
            print(
                f"{side} against the ONNX reads: reads changing at most {args.max_changes} characters "
                f"save {_tenths(saved)} edits and add {_tenths(added)}; "
                f"larger changes save {_tenths(saved_more)} and add {_tenths(added_more)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
