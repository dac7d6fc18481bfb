"""The framework's CPU over a whole run, by ``network.outsiders``: CPU of ``Simulation.run()`` minus the CPU inside
the training jobs, for one member count.

    python benchmarks/outsiders_cpu.py [--members 1000] [--rounds 20] [--outsiders headers lazy]
                                       [--drop P] [--reorder P] [--show-accepted] [--sampling rank|draw]

Runs ``scenarios/scale_10k.toml`` (100 clients per round) in this process, once per setting, training in-process
(``workers=0``), no ledger. Prints per setting: the jobs run, their CPU, the whole run's CPU, the difference
(framework) and that over the client-rounds, and the head; ``--drop``/``--reorder`` set the network's loss and
reordering (``network.drop``, ``network.reorder``), ``--show-accepted`` prints the updates accepted per round and
``--sampling`` sets ``protocol.params.sampling_rule`` (default: the scenario's).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim import Simulation, load_scenario  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--outsiders", nargs="+", default=["headers", "lazy"], choices=("blocks", "headers", "lazy"))
    ap.add_argument("--drop", type=float, default=0.0, help="network.drop: the probability a message is lost")
    ap.add_argument("--reorder", type=float, default=0.0, help="network.reorder")
    ap.add_argument("--sampling", choices=("rank", "draw"), help="protocol.params.sampling_rule")
    ap.add_argument("--show-accepted", action="store_true", help="print the updates accepted per round")
    args = ap.parse_args()
    for mode in args.outsiders:
        sc = load_scenario(ROOT / "scenarios" / "scale_10k.toml", rounds=args.rounds, members=args.members)
        sc = dataclasses.replace(sc, network=dataclasses.replace(sc.network, outsiders=mode, drop=args.drop,
                                                                 reorder=args.reorder))
        if args.sampling:
            params = {**sc.protocol.params, "sampling_rule": args.sampling}
            sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params=params))
        s = Simulation(sc, workers=0, ledger_dir=None)
        jobs, train = [0], [0.0]
        run_job = s._run_job

        def timed(spec):  # type: ignore[no-untyped-def]
            a = time.process_time()
            try:
                return run_job(spec)
            finally:
                jobs[0] += 1
                train[0] += time.process_time() - a

        s._run_job = timed  # type: ignore[method-assign]
        c = time.process_time()
        res = s.run()
        total = time.process_time() - c
        client_rounds = sum(m.accepted + m.rejected for m in res.rounds)
        print(f"{mode:>8} members={args.members} rounds={len(res.rounds)} jobs={jobs[0]} train_cpu_s={train[0]:.2f} "
              f"run_cpu_s={total:.2f} framework_cpu_s={total - train[0]:.2f} "
              f"framework_ms_per_client_round={1000 * (total - train[0]) / max(1, client_rounds):.2f} "
              f"sampling={sc.protocol.params.get('sampling_rule', 'rank')} view_changes={res.view_changes} head={res.head_hash.hex()[:16]}", flush=True)
        if args.show_accepted:
            print(f"{'':>8} accepted per round: {' '.join(str(m.accepted) for m in res.rounds)}", flush=True)


if __name__ == "__main__":
    main()
