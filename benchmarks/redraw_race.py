"""Agreement when committee re-draws race a live committee: seeded cluster sweeps.

    python benchmarks/redraw_race.py [--seeds 5]

Each run: the consensus cluster (``consensus.testing.Cluster``: real replicas, a seeded lossy network, Byzantine
members) with ``redraw_ticks`` R far shorter than a genesis would use, so that heights move to a re-drawn committee
while the old one may still be deciding them. The cluster checks agreement, validity, certificates and evidence
after every event; a violation is printed with the line that replays it. Per configuration (R, committee size,
members), over three fault mixes (10 % loss with duplicates and 3-tick delays; 30 % loss with 6-tick delays; 5 % loss
with 70 % of COMMITs lost), seven behaviours (``f + 1`` of the first committee crashed and recovered at tick 500;
``f`` members equivocating, silent, proposing wrong blocks, forging or replaying; none) and ``--seeds`` seeds: 500
ticks, heal, 300 more. Prints the runs, violations, blocks decided and blocks decided in a later attempt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consensus.testing import Cluster, Faults, InvariantViolation  # noqa: E402
from ledger import ATTEMPT_VIEWS  # noqa: E402

CONFIGS = ((6, 4, 10), (10, 4, 10), (15, 7, 12), (30, 7, 12), (10, 4, 4))
"""(redraw_ticks, committee size, members); the cluster's view timeouts are 10-15 ticks, doubling per view."""
FAULTS = (
    Faults(drop=0.1, duplicate=0.05, delay_ticks_max=3),
    Faults(drop=0.3, delay_ticks_max=6),
    Faults(drop=0.05, delay_ticks_max=2, drop_kind=(("commit", 0.7),)),
)
KINDS = ("crash", "equivocate", "silent", "wrong_proposal", "forge", "replay", "none")


def run(redraw: int, size: int, members: int, seeds: int) -> tuple[int, int, int, int]:
    runs = violations = blocks = redrawn = 0
    f = (size - 1) // 3
    for faults in FAULTS:
        for kind in KINDS:
            for seed in range(seeds):
                byz = {} if kind in ("crash", "none") else {(seed * 7 + i * 3) % members: kind for i in range(f)}
                c = Cluster(size=size, members=members, seed=3000 + seed, byzantine=byz, faults=faults,
                            redraw_ticks=redraw)
                if kind == "crash":
                    for p in sorted(c.states[c.peers[0]].committee)[: f + 1]:
                        c.crash(p)
                runs += 1
                try:
                    c.run(500)
                    for p in sorted(c.crashed):
                        c.recover(p)
                    c.heal()
                    c.run(300)
                except InvariantViolation as e:
                    violations += 1
                    print("VIOLATION", kind, seed, str(e)[:600], flush=True)
                    continue
                chain = c.chains[c.live_honest()[0]]
                blocks += len(chain)
                redrawn += sum(b.certificate.view >= ATTEMPT_VIEWS for b in chain)
    return runs, violations, blocks, redrawn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    total = [0, 0, 0, 0]
    for redraw, size, members in CONFIGS:
        r = run(redraw, size, members, args.seeds)
        total = [a + b for a, b in zip(total, r)]
        print(f"redraw_ticks {redraw:>2}, committee {size} of {members}: {r[0]} runs, {r[1]} violations, {r[2]} blocks, "
              f"{r[3]} decided in a later attempt", flush=True)
    print(f"all: {total[0]} runs, {total[1]} violations, {total[2]} blocks, {total[3]} decided in a later attempt")


if __name__ == "__main__":
    main()
