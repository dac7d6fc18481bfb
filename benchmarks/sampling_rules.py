"""The cost of one client sample by each sampling rule (``consensus.SAMPLING_RULES``) at a given member count.

    python benchmarks/sampling_rules.py [--members 10000] [--clients 100] [--reps 3]

Times ``consensus.sample_training_clients`` (a committee of 7 excluded) with ``rule="rank"`` and ``rule="draw"``, one
line per repetition; every call is for a new height, so that the rank rule's process-wide memo never hits.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consensus import sample_training_clients  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    ids = tuple(f"12D3KooW{i:044d}" for i in range(args.members))
    committee, seed, heights = ids[:7], b"x" * 32, itertools.count(1)

    def rank() -> None:
        sample_training_clients(ids, committee, seed, next(heights), args.clients)

    def draw() -> None:
        sample_training_clients(ids, committee, seed, next(heights), args.clients, rule="draw")

    for _ in range(args.reps):
        r = timeit.timeit(rank, number=10) / 10
        d = timeit.timeit(draw, number=100) / 100
        print(f"members={args.members} clients={args.clients} rank={r * 1e3:.1f} ms draw={d * 1e3:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
