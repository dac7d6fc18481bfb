"""Ranking members by hash (the client sample and the next committee, every round): the copied-prefix hashing of
``consensus._committee._ranked_memo`` against one ``ledger.hash_tagged`` call per id, on 10,000 ids.

    python benchmarks/ranking_bench.py [--ids 10000] [--reps 7]

Checks that both give the same ranks, then times them interleaved (3 calls per timing) and prints the median and
the range of each and of their ratio.
"""

from __future__ import annotations

import argparse
import timeit

from consensus._committee import _ranked_memo
from ledger import hash_tagged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    peers = tuple(f"12D3KooW{i:040d}" for i in range(args.ids))
    seed = b"x" * 40

    def new() -> tuple[str, ...]:
        return _ranked_memo.__wrapped__(b"dom", seed, peers)  # type: ignore[attr-defined, no-any-return]

    def old() -> tuple[str, ...]:
        return tuple(sorted(peers, key=lambda p: (hash_tagged(b"dom", seed + p.encode()), p)))

    assert new() == old(), "the two rankings differ"
    a, b = [], []
    for _ in range(args.reps):
        a.append(timeit.timeit(new, number=3) / 3)
        b.append(timeit.timeit(old, number=3) / 3)
    r = sorted(y / x for x, y in zip(a, b))
    a.sort()
    b.sort()
    m = args.reps // 2
    print(f"{args.ids} ids: copied prefix {a[m] * 1e3:.1f} ms ({a[0] * 1e3:.1f}-{a[-1] * 1e3:.1f}), "
          f"hash_tagged per id {b[m] * 1e3:.1f} ms ({b[0] * 1e3:.1f}-{b[-1] * 1e3:.1f}), "
          f"ratio {r[m]:.2f} ({r[0]:.2f}-{r[-1]:.2f})")


if __name__ == "__main__":
    main()
