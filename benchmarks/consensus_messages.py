"""Messages and bytes per committed block of the pBFT replica, as a function of the committee size C.

Runs the deterministic cluster harness (``consensus.testing.Cluster``, every member in the committee)
and divides what the replicas sent by the heights every replica decided. A message is one copy to one
peer (a broadcast to C-1 peers counts C-1); bytes are the canonical msgpack encoding of the
``consensus.Message`` (no transport framing). The harness payload is minimal (no updates, no score
rows), so bytes measure the protocol's own overhead; a CMFL payload adds its score rows to every
pre-prepare (C-1 copies per block).

Scenarios: ``clean`` (no faults: the pBFT normal case, expected (C-1) + (C-1)² + C(C-1) messages),
``lossy`` (10 % loss, 0-2 ticks extra delay: retransmissions and view changes), and ``silent``
(``f`` silent members: a view change whenever one is the primary).

Usage::

    .venv/bin/python benchmarks/consensus_messages.py [--heights 20] [--sizes 4 7 10 16]
"""

from __future__ import annotations

import argparse
import time

from consensus.testing import Cluster, Faults

KINDS = ("pre_prepare", "prepare", "commit", "view_change", "new_view")


def measure(size: int, scenario: str, heights: int, seed: int = 0) -> dict[str, float]:
    f = (size - 1) // 3
    if scenario == "clean":
        c = Cluster(size=size, seed=seed, faults=Faults(reorder=False))
    elif scenario == "lossy":
        c = Cluster(size=size, seed=seed, faults=Faults(drop=0.1, delay_ticks_max=2))
    else:
        c = Cluster(size=size, seed=seed, byzantine={i: "silent" for i in range(1, 3 * f, 3)})
    t0 = time.perf_counter()
    if not c.run_until(lambda: c.min_height() >= heights, 200 * heights):
        raise SystemExit(f"size {size} {scenario}: only {c.min_height()} heights decided")
    wall = time.perf_counter() - t0
    n = c.min_height()
    out = {k: c.sent[k] / n for k in KINDS}
    msgs, nbytes = c.pbft_messages()
    out.update(
        messages=msgs / n,
        bytes=nbytes / n,
        catch_up=(c.sent["decided"] + c.sent["sync_request"]) / n,
        ticks=c.now / n,
        expected=(size - 1) + (size - 1) ** 2 + size * (size - 1),
        wall_ms=1000 * wall / n,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heights", type=int, default=20)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 7, 10, 16])
    ap.add_argument("--scenarios", nargs="+", default=["clean", "lossy", "silent"])
    args = ap.parse_args()
    print(f"per committed block, {args.heights} heights, seed 0")
    print()
    print("| scenario | C | f | q | messages | expected (C-1)+(C-1)²+C(C-1) | bytes | pre-prep | prepare | commit | view-chg | new-view | catch-up msgs | ticks | harness ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario in args.scenarios:
        for size in args.sizes:
            m = measure(size, scenario, args.heights)
            f = (size - 1) // 3
            q = 2 * size // 3 + 1
            print(
                f"| {scenario} | {size} | {f} | {q} | {m['messages']:.1f} | {m['expected']} | {m['bytes']:,.0f} | "
                f"{m['pre_prepare']:.1f} | {m['prepare']:.1f} | {m['commit']:.1f} | {m['view_change']:.1f} | "
                f"{m['new_view']:.1f} | {m['catch_up']:.1f} | {m['ticks']:.1f} | {m['wall_ms']:.1f} |"
            )


if __name__ == "__main__":
    main()
