"""``python -m sim run [SCENARIO] [--seed S] [--rounds R] [--out DIR] [--workers N]``: replay a simulation.

The same job as ``concilium sim run`` (which the CLI layer adds one-line error handling to); kept here so
that a failing seed can be replayed with the simulator alone (VOPR style).
"""

import argparse
import sys
import time
from pathlib import Path

from sim._run import run_scenario
from sim._scenario import default_scenario_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("scenario", nargs="?")
    r.add_argument("--seed", type=int)
    r.add_argument("--rounds", type=int)
    r.add_argument("--out")
    r.add_argument("--workers", type=int, help="training processes beside the simulator (0 = in-process)")
    a = ap.parse_args(argv)
    scenario = Path(a.scenario) if a.scenario else default_scenario_path()
    out = Path(a.out) if a.out else Path("results") / f"{scenario.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = run_scenario(scenario, out=out, seed=a.seed, rounds=a.rounds, workers=a.workers)
    print(f"head {summary['head_hash']}  final accuracy {summary['final_accuracy']:.4f}  {summary['ledger_verdict']}")
    return 0 if summary["ledger_verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
