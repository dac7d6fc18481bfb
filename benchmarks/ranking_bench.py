"""Ranking members by hash (the client sample and the next committee, every round): ``consensus.sample_committee``
(which ranks from a copied prefix hash state) against the same sample ranked with one ``ledger.hash_tagged`` call
per id, on 10,000 ids.

    python benchmarks/ranking_bench.py [--ids 10000] [--reps 7]

Checks that both give the same committee, then times them interleaved (3 calls per timing, each with a new seed:
``sample_committee`` remembers recent rankings) and prints the median and the range of each and of their ratio.
"""

from __future__ import annotations

import argparse
import itertools
import timeit

from consensus import sample_committee
from ledger import hash_tagged

DOMAIN = b"concilium-committee-sample/v1"  # consensus.sample_committee's


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    peers = tuple(f"12D3KooW{i:040d}" for i in range(args.ids))
    seeds = (n.to_bytes(40, "big") for n in itertools.count())

    def new(seed: bytes) -> tuple[str, ...]:
        return sample_committee(peers, seed, 7)

    def old(seed: bytes) -> tuple[str, ...]:
        pool = sorted(set(peers))
        return tuple(sorted(sorted(pool, key=lambda p: (hash_tagged(DOMAIN, seed + p.encode()), p))[:7]))

    first = next(seeds)
    assert new(first) == old(first), "the two rankings differ"
    a, b = [], []
    for _ in range(args.reps):
        a.append(timeit.timeit(lambda: new(next(seeds)), number=3) / 3)
        b.append(timeit.timeit(lambda: old(next(seeds)), number=3) / 3)
    r = sorted(y / x for x, y in zip(a, b))
    a.sort()
    b.sort()
    m = args.reps // 2
    print(f"{args.ids} ids: sample_committee {a[m] * 1e3:.1f} ms ({a[0] * 1e3:.1f}-{a[-1] * 1e3:.1f}), "
          f"hash_tagged per id {b[m] * 1e3:.1f} ms ({b[0] * 1e3:.1f}-{b[-1] * 1e3:.1f}), "
          f"ratio {r[m]:.2f} ({r[0]:.2f}-{r[-1]:.2f})")


if __name__ == "__main__":
    main()
