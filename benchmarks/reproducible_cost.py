"""What reproducible mode costs: ``concilium sim run`` as a whole process, default mode against ``--reproducible``.

W1 (``scenarios/coordinator_fedavg.toml``: 20 clients, 30 rounds, digits MLP, a committee of 4 re-executing every
aggregation) and the quickstart (``scenarios/quickstart.toml``, committee mode), each run as a fresh process from
spawn to exit (imports, set-up, the rounds, the end-of-run audit and the plots; the reproducible run's re-execution
of itself in its environment included), repetitions interleaved (default, reproducible, default, ...), on the same
CPUs. Wall seconds, and CPU seconds of the process and every descendant (``os.wait4``'s rusage: the training workers,
the ledger writer, the plotter). Prints the medians, ranges, the ratios reproducible / default and each run's head
(the default heads depend on this CPU; the reproducible heads do not).

    .venv/bin/python benchmarks/reproducible_cost.py [--reps 3] [--scenarios coordinator_fedavg quickstart] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(scenario: str, reproducible: bool, out: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "concilium", "sim", "run", scenario, "--out", str(out), "--quiet"]
    if reproducible:
        cmd.append("--reproducible")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "head": summary["head_hash"][:16],
            "accuracy": summary["final_accuracy"], "reproducible": summary.get("reproducible", False)}


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scenarios", nargs="+", default=["coordinator_fedavg", "quickstart"])
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    runs: dict[str, dict[str, list[dict[str, object]]]] = {s: {"default": [], "reproducible": []} for s in a.scenarios}
    with tempfile.TemporaryDirectory(prefix="repro-cost-") as tmp:
        for rep in range(a.reps):
            for scenario in a.scenarios:
                for mode in ("default", "reproducible"):
                    r = _run(scenario, mode == "reproducible", Path(tmp) / f"{scenario}-{mode}-{rep}")
                    runs[scenario][mode].append(r)
                    print(f"rep {rep + 1} {scenario:20s} {mode:12s} wall {r['wall']:6.2f} s  CPU {r['cpu']:6.2f} s  "
                          f"head {r['head']}  acc {r['accuracy']:.4f}", flush=True)
    print(f"\nmedian (min-max) over {a.reps} interleaved repetitions, whole process")
    for scenario, modes in runs.items():
        d, r = modes["default"], modes["reproducible"]
        dw, rw = [float(x["wall"]) for x in d], [float(x["wall"]) for x in r]
        dc, rc = [float(x["cpu"]) for x in d], [float(x["cpu"]) for x in r]
        wall_ratio = [b / c for b, c in zip(rw, dw)]
        cpu_ratio = [b / c for b, c in zip(rc, dc)]
        print(f"{scenario}: default wall {_fmt(dw)} s, CPU {_fmt(dc)} s; reproducible wall {_fmt(rw)} s, CPU {_fmt(rc)} s; "
              f"ratio wall {_fmt(wall_ratio)}, CPU {_fmt(cpu_ratio)}; heads default {sorted({x['head'] for x in d})}, "
              f"reproducible {sorted({x['head'] for x in r})}")
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
