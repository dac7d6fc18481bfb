"""Wall time of the W1 simulation with training workers and results ledger on/off (one process, alternating).

    python benchmarks/sim_variants.py [--repeat 3] [--rounds 30] [--clients 20]

Prints one line per variant: the median wall time, the samples, and the median CPU seconds of this process
and of its children (training workers, ledger writer); every variant must reach the same ledger head.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sim  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--workers", type=int, nargs="*", default=[0, 1, 2])
    args = ap.parse_args()
    sc = sim.load_scenario(ROOT / "scenarios" / "coordinator_fedavg.toml", rounds=args.rounds, members=args.clients)
    sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params={"clients": args.clients}))
    variants = [(w, led) for w in args.workers for led in (False, True)]
    times: dict[tuple[int, bool], list[float]] = {v: [] for v in variants}
    cpu: dict[tuple[int, bool], list[tuple[float, float]]] = {v: [] for v in variants}
    heads = set()
    sim.Simulation(sc, workers=0).run()  # warm-up
    for r in range(args.repeat):
        for w, led in variants if r % 2 == 0 else variants[::-1]:
            with tempfile.TemporaryDirectory(prefix="sim-variants-") as tmp:
                t, c = time.perf_counter(), os.times()
                s = sim.Simulation(sc, workers=w, ledger_dir=Path(tmp) / "ledger" if led else None)
                heads.add(s.run().head_hash)
                times[(w, led)].append(time.perf_counter() - t)
                c2 = os.times()
                cpu[(w, led)].append((c2.user + c2.system - c.user - c.system,
                                      c2.children_user + c2.children_system - c.children_user - c.children_system))
    for (w, led), xs in times.items():
        own = statistics.median(a for a, _ in cpu[(w, led)])
        kids = statistics.median(b for _, b in cpu[(w, led)])
        print(f"workers={w} ledger={'on ' if led else 'off'}  median {statistics.median(xs):.2f} s  "
              f"samples {', '.join(f'{x:.2f}' for x in xs)}  cpu: this process {own:.2f} s, children {kids:.2f} s")
    assert len(heads) == 1, "variants disagree on the ledger head"
    print(f"same head in every variant: {heads.pop().hex()[:16]}")


if __name__ == "__main__":
    main()
