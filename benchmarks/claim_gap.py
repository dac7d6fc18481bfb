"""The accuracy gap of FedAvg under a ``2^53 - 1`` sample claim, over seeds (``learning.cap_sample_counts`` bounds
what a claimed count weighs; which client is Byzantine follows from the genesis).

    python benchmarks/claim_gap.py [--seeds 8]

Per seed: ``scenarios/coordinator_fedavg.toml`` with 10 members, 30 rounds, every client sampled, once clean and
once with one Byzantine client (the first outside the genesis committee) signing ``n_samples = 2^53 - 1`` in every
update, under the default cap (``n_samples_cap`` = 4). Runs in reproducible mode (the same bits on any x86-64 CPU;
the script restarts itself in the mode's environment). Prints ``seed clean claim gap`` and the gaps' mean and range.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learning import reproducible  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "coordinator_fedavg.toml"
HUGE = 2**53 - 1


def final_accuracy(seed: int, claim: int) -> float:
    from sim import Simulation, load_scenario  # noqa: PLC0415

    sc = load_scenario(SCENARIO, rounds=30, members=10, seed=seed)
    adv = dataclasses.replace(sc.adversary, byzantine=1 if claim else 0, n_samples=claim)
    sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params={"clients": 10}), adversary=adv)
    with tempfile.TemporaryDirectory() as d:
        return float(Simulation(sc, workers=0, ledger_dir=Path(d) / "ledger").run().final_accuracy)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    reproducible.reexec()  # (returns at once when already in the mode)
    reproducible.configure()
    gaps = []
    for seed in range(args.seeds):
        clean, claim = final_accuracy(seed, 0), final_accuracy(seed, HUGE)
        gaps.append(claim - clean)
        print(f"seed {seed}: clean {clean:.4f} claim {claim:.4f} gap {claim - clean:+.4f}", flush=True)
    print(f"{len(gaps)} seeds: mean gap {sum(gaps) / len(gaps):+.4f}, range [{min(gaps):+.4f}, {max(gaps):+.4f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
