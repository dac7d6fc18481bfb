"""``python -m sim run [SCENARIO|NAME] [--seed S] [--rounds R] [--out DIR] [--workers N] [--reproducible]``: replay a
simulation.

The same job as ``concilium sim run`` (which the CLI layer adds one-line error handling to); kept here so
that a failing seed can be replayed with the simulator alone (VOPR style).
"""

import argparse
import sys
import time
from pathlib import Path

from node import ConfigFileError
from sim._run import run_scenario
from sim._scenario import resolve_scenario


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("scenario", nargs="?", help="scenario TOML file or bundled scenario name (default: quickstart)")
    r.add_argument("--seed", type=int)
    r.add_argument("--rounds", type=int)
    r.add_argument("--out")
    r.add_argument("--force", action="store_true", help="replace an earlier results folder at --out")
    r.add_argument("--workers", type=int, help="training processes beside the simulator (0 = in-process)")
    r.add_argument("--reproducible", action="store_true", help="reproducible mode: the same head on any x86-64 CPU")
    a = ap.parse_args(argv)
    if a.reproducible and argv is None:
        from learning import reproducible  # noqa: PLC0415

        reproducible.reexec()  # this command again in the mode's environment (kernels are chosen at start-up)
    try:
        scenario = resolve_scenario(a.scenario)
    except ConfigFileError as e:
        ap.error(str(e))
    out = a.out if a.out is not None else Path("results") / f"{scenario.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = run_scenario(scenario, out=out, seed=a.seed, rounds=a.rounds, workers=a.workers, force=a.force,
                           reproducible=a.reproducible)
    print(f"head {summary['head_hash']}  final accuracy {summary['final_accuracy']:.4f}  {summary['ledger_verdict']}")
    return 0 if summary["ledger_verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
