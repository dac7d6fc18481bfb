"""Rounds over shaped links: 4 node processes, each in its own network namespace, every link
rate-limited with ``tc tbf`` (``netem`` where the kernel has it), at several rates and model sizes.

Each cell: the bundled ``testnet`` scenario (coordinator mode, FedAvg, 4 members, all 4 training and validating
every round) with the MLP's hidden layers sized to the model size asked for, the link rate written into the genesis
(``protocol.params.link_mbit``: the round deadlines follow it, ``node._deadlines``), run for ``--rounds`` rounds
by 4 ``concilium node start`` processes, one per namespace (``concilium.netns``), each link shaped both ways
(the node's uplink and downlink). Reported per cell:

* ``rounds``: heights every node stored, and the exit codes;
* ``accepted``: updates accepted per round (min / median over the rounds; 4 = no member locked out), whether the
  last member's update is in each round's block, and the blocks of a view above 0 (view changes);
* ``s/round``: median seconds between consecutive ``decided`` lines of node 0 (round 1 left out: it includes
  the connection set-up), with min–max;
* ``wire s``: the wire-time lower bound of a round: bytes on the busiest link (the largest of any node's bytes
  sent or received over the run, from its ``stopped`` status, divided by the rounds) divided by the rate;
* ``dropped``: the inputs the nodes dropped, summed (``update for another round`` = an update that came late).

    sudo python benchmarks/link_bench.py [--rates 10 100 1000] [--sizes 0.01 2 45] [--rounds 5]
                                         [--rounds-slow 2] [--rejoin] [--keep DIR]
                                         [--json out.json]

``--rejoin`` adds, per cell of a model of 1 MB or more at 100 Mbit/s or less (and under 30 s of wire a round), a run where the last member's link drops to a twentieth of the rate for 15 s once it
stored height 2, then comes back: it may miss rounds meanwhile, and must be in every block after it is back.
``--rounds-slow`` applies to the cells whose wire bound exceeds 30 s a round (45 MB at 10 Mbit). Needs root
(namespaces); the run takes about 15 minutes for the full matrix on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tomli_w  # noqa: E402

from concilium.netns import (  # noqa: E402
    NetnsError, Shape, SlowDown, clean_stale, run_testnet, tbf_args,
)
from sim import World, load_scenario, resolve_scenario  # noqa: E402

N = 4
PORT = 4001
HIDDEN = {0.01: [32], 2.0: [700, 640], 45.0: [3000, 3700]}
"""MLP hidden layers (64 inputs, 10 classes) per model size in MB: 2,410 / 500,550 / 11,343,710 float32 params."""
SLOW_WIRE_S = 30.0
REJOIN_SLOW_S = 15.0
"""The rejoin cell: how long the last member's link runs at 1/20 of the rate, from its storing height 2 on."""


def _scenario(tmp: Path, *, hidden: list[int], rate_mbit: float, rounds: int) -> Path:
    data = tomllib.loads(resolve_scenario("testnet").read_text())
    data["rounds"] = rounds
    data["model"]["params"]["hidden"] = hidden
    data["protocol"]["params"]["link_mbit"] = int(rate_mbit)
    path = tmp / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def _busiest_bytes(events: list[list[dict[str, Any]]]) -> int:
    most = 0
    for ev in events:
        stopped = [e for e in ev if e.get("event") == "stopped"]
        if not stopped:
            continue
        net = stopped[-1].get("status", {}).get("net", {})
        most = max(most, sum(net.get("bytes_out", {}).values()), sum(net.get("bytes_in", {}).values()))
    return most


def run_cell(rate_mbit: float, size_mb: float, rounds: int, *, timeout_s: float, keep: Path | None = None,
             rejoin: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="link-bench-") as td:
        tmp = Path(td)
        if keep is not None:
            tmp = keep / f"{rate_mbit:g}mbit-{size_mb:g}mb{'-rejoin' if rejoin else ''}"
            tmp.mkdir(parents=True)
        world = World.build(load_scenario(_scenario(tmp, hidden=HIDDEN[size_mb], rate_mbit=rate_mbit, rounds=rounds)))
        model_bytes = 4 * int(world.theta0.shape[0])
        during = SlowDown(N - 1, after_height=2, seconds=REJOIN_SLOW_S, rate_mbit=rate_mbit / 20,
                          back_mbit=rate_mbit) if rejoin else None
        # a node that stored the last height serves its peers a while longer: the last blobs of a slow link's archive
        linger = 5.0 + 4 * model_bytes * 8 / (rate_mbit * 1e6)
        run = run_testnet(world, tmp, shape=Shape(tbf=tbf_args(rate_mbit), both_ways=True), until_height=rounds,
                          timeout_s=timeout_s, during=during, linger_s=linger)
        decided0 = run.decided(0)
        heights = sorted(decided0)
        ts = [float(decided0[h]["ts"]) for h in heights]
        late = run.files[N - 1].peer_id
        dropped: dict[str, int] = {}
        for ev in run.events:
            st = [e for e in ev if e.get("event") == "stopped"]
            for k, v in (st[-1].get("status", {}).get("dropped", {}) if st else {}).items():
                dropped[k] = dropped.get(k, 0) + int(v)
        busiest = _busiest_bytes(run.events)
        stored = run.stored()
        return {
            "rate_mbit": rate_mbit, "model_mb": round(model_bytes / 1e6, 3), "rounds_asked": rounds, "rejoin": rejoin,
            "stored": stored, "exit_codes": run.exit_codes,
            "accepted": [len(decided0[h]["accepted"]) for h in heights],
            "last_member_in": [any(a.startswith(late) for a in decided0[h]["accepted"]) for h in heights],
            "views": [int(decided0[h]["view"]) for h in heights],
            "s_per_round": [b - a for a, b in zip(ts, ts[1:])], "wall_s": round(run.wall_s, 1),
            "busiest_bytes": busiest,
            "wire_s_per_round": busiest / max(1, min(stored, default=0)) / (rate_mbit * 1e6 / 8),
            "dropped": dropped, "shaping": run.shaping,
            "stderr_tail": [t[-600:] for t in run.stderr if t.strip()],
        }


def _row(c: dict[str, Any]) -> str:
    gaps = c["s_per_round"][1:] or c["s_per_round"]
    spr = f"{statistics.median(gaps):.2f} ({min(gaps):.2f}–{max(gaps):.2f})" if gaps else "–"
    acc = c["accepted"]
    acc_s = f"{min(acc)} / {statistics.median(acc):g}" if acc else "–"
    vc = sum(1 for v in c["views"] if v > 0)
    last = "".join("+" if x else "-" for x in c["last_member_in"])
    return (f"| {c['rate_mbit']:g} | {c['model_mb']:g} | {'slowed' if c['rejoin'] else 'steady'} | "
            f"{min(c['stored'])}/{c['rounds_asked']} | {acc_s} | {last} | {vc} | "
            f"{spr} | {c['wire_s_per_round']:.2f} | {c['exit_codes']} | "
            f"{c['dropped'].get('update for another round', 0)} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=float, nargs="+", default=[10, 100, 1000], help="link rates, Mbit/s")
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.01, 2, 45], choices=sorted(HIDDEN),
                    help="model sizes, MB")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rounds-slow", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="per cell, seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rejoin", action="store_true",
                    help="also, per cell, a run where the last member's link drops to 1/20 of the rate for "
                         f"{REJOIN_SLOW_S:g} s once it stored height 2 (it must rejoin once the link is back)")
    ap.add_argument("--keep", type=Path, help="keep each cell's testnet folder (node logs, ledgers) under this folder")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("link_bench needs root (network namespaces)", file=sys.stderr)
        return 2
    clean_stale()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print("| Mbit/s | model MB | last member's link | rounds | accepted min / median | last member in, by round | "
          "view>0 blocks | s/round median (min–max) | wire s/round (lower bound) | exit codes | late updates |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cells = []
    for size in args.sizes:
        for rate in args.rates:
            wire_guess = 6 * size * 1e6 / (rate * 1e6 / 8)
            rounds = args.rounds_slow if wire_guess > SLOW_WIRE_S else args.rounds
            # the slow-down is 15 s long: it means something where a round moves megabytes, not too many of them
            slowable = args.rejoin and size >= 1 and rate <= 100 and wire_guess <= SLOW_WIRE_S
            for rejoin in (False, True) if slowable else (False,):
                try:
                    c = run_cell(rate, size, rounds + 2 * rejoin, timeout_s=args.timeout, keep=args.keep,
                                 rejoin=rejoin)
                except NetnsError as e:
                    print(f"cannot make namespaces: {e}", file=sys.stderr)
                    return 2
                cells.append(c)
                print(_row(c), flush=True)
                if c["stderr_tail"]:
                    print("  stderr:", json.dumps(c["stderr_tail"])[:1200], file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(cells, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
