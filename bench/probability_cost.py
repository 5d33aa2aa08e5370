"""What the VLM loop's per-token numpy work costs on a 152k-entry logits row (microseconds per call).

Usage: python -m bench.probability_cost [--vocab 151936] [--repeats 2000]

Every written token takes a softmax probability of a row the size of a Qwen vocabulary
(decoding._probability); a verification batch of k+1 tokens is one copy of k+1 such rows
(runtime.Context.append). Prints each piece and the whole, on a row of N(0, 3) logits.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable

import numpy as np

from appliance.engines.vlm_gguf.decoding import _probability


def _shifted_pairwise(row: np.ndarray, token: int) -> float:
    """The textbook float32 softmax: shifted by the maximum, numpy's pairwise sum."""
    weights = row - row.max()
    np.exp(weights, out=weights)
    return float(weights[token]) / float(weights.sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.probability_cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args(argv)
    rows = (np.random.default_rng(0).standard_normal((17, args.vocab)) * 3).astype(np.float32)
    row, weights = rows[1], np.exp(rows[1])
    pieces: dict[str, Callable[[], object]] = {
        "max": row.max,
        "shift (row - max)": lambda: row - 1.0,
        "exp": lambda: np.exp(row),
        "sum, numpy pairwise": weights.sum,
        "sum, einsum": lambda: np.einsum("i->", weights),
        "argmax": lambda: np.argmax(row),
        "probability, shifted + pairwise": lambda: _shifted_pairwise(row, 5),
        "probability, decoding._probability": lambda: _probability(row, 5),
        "copy of 16 rows (a 15-draft batch)": rows[:16].copy,
    }
    for name, action in pieces.items():
        seconds = timeit.timeit(action, number=args.repeats) / args.repeats
        print(f"{name:<38} {seconds * 1e6:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
