"""Many simulated members on one machine: cost per round, memory and traffic against the member count.

    python benchmarks/scale.py [--members 1000 10000] [--rounds 20] [--scenario scenarios/scale_10k.toml]
                               [--workers 0] [--no-ledger] [--models-for-all | --blocks | --outsiders MODE]
                               [--sampling rank|draw] [--epoch E] [--root DIR] [--repeat N]
                               [--baseline DIR [--baseline-scenario FILE]] [--json out.json]

Runs the scenario (default ``scenarios/scale_10k.toml``: coordinator-mode FedAvg, 100 clients sampled per round,
a committee of 7, the digits MLP) once per member count, each in a fresh process (so that its peak memory is its
own), with everything else equal: the same 100 clients sampled per round, the same local datasets
(``data.local_datasets``). Training runs in the simulation's process (``--workers 0``, the default) so that it can
be timed and taken out: per round,

* ``wall/round``: (wall time at the last round − wall time at round 1) / (rounds − 1): start-up and round 1 left
  out (``setup`` is shown apart);
* ``train/round``: wall time inside the local training jobs (``Simulation._run_job``) over the same rounds;
* ``framework ms/client``: (wall/round − train/round) / clients sampled per round, and the same from CPU time
  of the process (``cpu ms/client``; steadier on a shared machine);
* ``peak RSS``: the process's ``ru_maxrss`` (the ledger writer is a forked process of its own, not counted);
* traffic per round by message kind, from ``SimResult.traffic_by_round`` (rounds 2 on, averaged), and the ``pbft``
  messages per round split by consensus kind (``SimResult.consensus_by_round``: votes, whole blocks, headers, header
  requests), with the members that got a node (``nodes made``: the others never took part);
  ``--blocks`` sends the members outside the next round the whole decided block instead of its header and certificate
  (``network.outsiders = "blocks"``); ``--models-for-all`` also pushes every new model to every member, as the simulator
  did before outsiders got headers only. The same ledger in all three. ``--outsiders lazy|headers|blocks`` sets
  ``network.outsiders`` (``lazy``: members outside the round are sent nothing and catch up by headers when a role wakes
  them; another ledger than the other two for the same seed, as the catch-up moves the network's draws).
  ``--sampling rank|draw`` sets ``protocol.params.sampling_rule`` (``rank`` hashes every member twice per height,
  ``draw`` about as many times as it picks; another ledger, as other members are picked). ``--epoch E`` sets
  ``protocol.params.committee_epoch`` (one committee per ``E`` rounds: a woken lazy member checks the last header of
  each epoch only; another ledger).

``--root DIR`` runs the members from another checkout (e.g. ``git worktree add /tmp/before <commit>``; the scenario
needs a tree that knows its keys: ``data.local_datasets``, ``network.outsiders``; pass an older scenario file with
``--scenario``). Prints a table and the growth from the first member count to
the last; ``--json`` writes every figure.

``--repeat N`` runs every member count N times, interleaved (1,000, 10,000, 1,000, 10,000, ...), and reports each
repetition's growth with the median and range: one run's ratio moves by ±15 % on a shared 2-core machine.
``--baseline DIR`` runs another checkout before this one in every repetition (an A/B on the same machine state;
``--baseline-scenario`` names its scenario file, default: the same file name in it) and summarizes each tree apart.
``--pool A.json B.json ...`` runs nothing: it summarizes the repetitions of earlier ``--json`` outputs together.
Every summary lists the ledger heads per member count, which must be the same in every repetition.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("pbft", "model", "update", "scores", "want", "blobs")


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One run in this process (``--child``): the figures as a dict."""
    import resource
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    from sim import Simulation, load_scenario

    sc = load_scenario(args.scenario, members=args.child, rounds=args.rounds)
    if (args.blocks or args.models_for_all) and getattr(sc.network, "outsiders", "blocks") != "blocks":
        sc = dataclasses.replace(sc, network=dataclasses.replace(sc.network, outsiders="blocks"))
    elif args.outsiders:
        sc = dataclasses.replace(sc, network=dataclasses.replace(sc.network, outsiders=args.outsiders))
    if args.sampling:
        params = {**sc.protocol.params, "sampling_rule": args.sampling}
        sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params=params))
    if args.epoch:
        params = {**sc.protocol.params, "committee_epoch": args.epoch}
        sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params=params))
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        s = Simulation(sc, workers=args.workers, ledger_dir=None if args.no_ledger else Path(tmp) / "ledger",
                       **({"models_for_all": True} if args.models_for_all else {}))
        t1, c1 = time.perf_counter(), time.process_time()
        train = [0.0, 0.0]
        run_job = s._run_job

        def timed(spec: Any) -> Any:
            a, b = time.perf_counter(), time.thread_time()
            try:
                return run_job(spec)
            finally:
                train[0] += time.perf_counter() - a
                train[1] += time.thread_time() - b

        s._run_job = timed  # type: ignore[method-assign]
        marks: list[tuple[float, float, float, float]] = []  # per round: wall, cpu, train wall, train cpu
        s._on_round = lambda m: marks.append((time.perf_counter(), time.process_time(), train[0], train[1]))
        res = s.run()
    t2 = time.perf_counter()
    rounds = len(res.rounds)
    span = max(1, rounds - 1)
    (w1, c1r, tw1, tc1), (wn, cnr, twn, tcn) = marks[0], marks[-1]
    clients = max(1, round(sum(m.accepted + m.rejected for m in res.rounds) / rounds))
    wall_round, cpu_round = (wn - w1) / span, (cnr - c1r) / span
    train_round, train_cpu_round = (twn - tw1) / span, (tcn - tc1) / span
    by_round = getattr(res, "traffic_by_round", None)
    if by_round is None:  # an older tree without per-round counts (--root): the run's totals, round 1 included
        by_round = [{k: (res.messages_by_kind[k], b) for k, b in res.bytes_by_kind.items()}]
        by_round = [{k: (n / rounds, b / rounds) for k, (n, b) in by_round[0].items()}] * rounds
    traffic = _per_round(by_round)
    consensus = _per_round(getattr(res, "consensus_by_round", None) or [{}])  # (older trees: none)
    made = getattr(getattr(s, "nodes", None), "made", None)
    return {
        "members": sc.members,
        "rounds": rounds,
        "clients_per_round": clients,
        "committee": sc.protocol.committee_size,
        "workers": args.workers,
        "ledger": not args.no_ledger,
        "models_for_all": args.models_for_all,
        "outsiders": getattr(sc.network, "outsiders", "blocks"),
        "sampling_rule": sc.protocol.params.get("sampling_rule", "rank"),
        "committee_epoch": sc.protocol.params.get("committee_epoch", 1),
        "import_and_setup_s": t1 - t0,
        "setup_cpu_s": c1 - c0,
        "run_s": t2 - t1,
        "wall_per_round_s": wall_round,
        "cpu_per_round_s": cpu_round,
        "train_per_round_s": train_round,
        "train_cpu_per_round_s": train_cpu_round,
        "framework_ms_per_client": 1000 * (wall_round - train_round) / clients,
        "framework_cpu_ms_per_client": 1000 * (cpu_round - train_cpu_round) / clients,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "traffic_per_round": {k: {"messages": v[0], "bytes": v[1]} for k, v in sorted(traffic.items())},
        "bytes_per_round": sum(v[1] for v in traffic.values()),
        "consensus_per_round": {k: {"messages": v[0], "bytes": v[1]} for k, v in sorted(consensus.items())},
        "nodes_made": len(made()) if made is not None else sc.members,
        "final_accuracy": res.final_accuracy,
        "head": res.head_hash.hex(),
    }


def _per_round(by_round: list[dict[str, tuple[int, int]]]) -> dict[str, list[float]]:
    """Kind → [messages, bytes] per round, averaged over rounds 2 on (round 1 apart, like the timings)."""
    later = by_round[1:] or by_round
    out: dict[str, list[float]] = {}
    for t in later:
        for k, (n, b) in t.items():
            acc = out.setdefault(k, [0.0, 0.0])
            acc[0] += n / len(later)
            acc[1] += b / len(later)
    return out


def run_one(args: argparse.Namespace, members: int, root: Path | None = None, scenario: Path | None = None) -> dict[str, Any]:
    """One member count in a fresh process, with the sim/ of ``root`` (default ``--root``) and ``scenario``."""
    root = args.root if root is None else root
    scenario = args.scenario if scenario is None else scenario
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(members), "--rounds", str(args.rounds),
           "--scenario", str(scenario), "--workers", str(args.workers)]
    if args.no_ledger:
        cmd.append("--no-ledger")
    if args.models_for_all:
        cmd.append("--models-for-all")
    if args.blocks:
        cmd.append("--blocks")
    if args.outsiders:
        cmd += ["--outsiders", args.outsiders]
    if args.sampling:
        cmd += ["--sampling", args.sampling]
    if args.epoch:
        cmd += ["--epoch", str(args.epoch)]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, env=env, cwd=str(root), capture_output=True, text=True)
    if out.returncode != 0:
        tail = "\n".join(out.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"the run of {members} members (sim from {root}) failed, exit {out.returncode}:\n{tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "scale_10k.toml")
    ap.add_argument("--workers", type=int, default=0, help="training workers (0: in-process, so training can be timed)")
    ap.add_argument("--no-ledger", action="store_true", help="keep no results ledger (default: one in a temp dir)")
    ap.add_argument("--models-for-all", action="store_true",
                    help="push every new model to every member (the traffic before outsiders got headers only; "
                         "same ledger)")
    ap.add_argument("--blocks", action="store_true",
                    help="send members outside the next round whole blocks, not headers (same ledger)")
    ap.add_argument("--outsiders", choices=("blocks", "headers", "lazy"),
                    help="what members outside the next round are sent (network.outsiders; default: the scenario's)")
    ap.add_argument("--sampling", choices=("rank", "draw"),
                    help="how clients and committees are picked (protocol.params.sampling_rule; default: the scenario's)")
    ap.add_argument("--epoch", type=int,
                    help="rounds per committee (protocol.params.committee_epoch; default: the scenario's)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose sim/ runs (default: this one)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every member count this many times, interleaved, and report the median and range")
    ap.add_argument("--baseline", type=Path,
                    help="another checkout to run before this one in every repetition (an A/B; its scenario file "
                         "is --baseline-scenario, default: the same name in it)")
    ap.add_argument("--baseline-scenario", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--pool", type=Path, nargs="+", metavar="JSON",
                    help="run nothing: summarize the repetitions of earlier --json files together, per tree")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.scenario = args.scenario.resolve()
    if args.pool:
        print(pool(args.pool, args.members))
        return
    if args.child is not None:
        sys.path.insert(0, str(Path.cwd()))
        print(json.dumps(child(args)))
        return
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    trees: list[tuple[str, Path, Path]] = [("this", args.root.resolve(), args.scenario)]
    if args.baseline is not None:
        base = args.baseline.resolve()
        base_scenario = (args.baseline_scenario or base / "scenarios" / args.scenario.name).resolve()
        trees = [("baseline", base, base_scenario), ("this", args.root.resolve(), args.scenario)]
    print(f"{args.scenario.name}, {args.rounds} rounds, workers={args.workers}, ledger={'off' if args.no_ledger else 'on'}, "
          f"models to {'all' if args.models_for_all else 'the next round'}, "
          f"outsiders get {'blocks' if args.blocks or args.models_for_all else args.outsiders or 'the scenario says'}, "
          f"sampling {args.sampling or 'as the scenario says'}, committee epoch {args.epoch or 'as the scenario says'}, "
          + ", ".join(f"{label} from {root}" for label, root, _ in trees)
          + (f", {args.repeat} repetitions interleaved" if args.repeat > 1 else ""))
    head = (f"{'tree':>8} {'rep':>3} {'members':>8} {'clients':>7} {'setup s':>8} {'wall/round s':>12} {'train/round s':>13} "
            f"{'framework ms/client':>19} {'cpu ms/client':>13} {'peak RSS MB':>11} {'MB/round':>9}  by kind (MB/round)")
    print(head)
    rows = []
    for rep in range(1, args.repeat + 1):
        for label, root, scenario in trees:
            for m in args.members:
                r = dict(run_one(args, m, root, scenario), tree=label, rep=rep)
                rows.append(r)
                kinds = " ".join(f"{k}={v['bytes'] / 1e6:.2f}" for k, v in r["traffic_per_round"].items())
                print(f"{label:>8} {rep:>3} {r['members']:>8} {r['clients_per_round']:>7} {r['import_and_setup_s']:>8.2f} "
                      f"{r['wall_per_round_s']:>12.3f} {r['train_per_round_s']:>13.3f} {r['framework_ms_per_client']:>19.2f} "
                      f"{r['framework_cpu_ms_per_client']:>13.2f} {r['peak_rss_mb']:>11.0f} {r['bytes_per_round'] / 1e6:>9.1f}  "
                      f"{kinds}", flush=True)
                if r.get("consensus_per_round"):
                    split = ", ".join(f"{k} {v['messages']:.1f}" for k, v in r["consensus_per_round"].items())
                    print(f"{'':>12} pbft messages per round: {split}; nodes made {r.get('nodes_made', '?')}", flush=True)
    if len(args.members) > 1:
        for label, _, _ in trees:
            print(growth_summary([r for r in rows if r["tree"] == label], args.members, label))
    if args.json:
        args.json.write_text(json.dumps({"scenario": str(args.scenario), "rows": rows}, indent=2) + "\n", encoding="utf-8")


def pool(files: list[Path], members: list[int]) -> str:
    """The growth summaries of the repetitions of several ``--json`` files taken together (each file's repetitions
    kept apart: file ``i``'s repetition ``r`` is pooled repetition ``(i, r)``), one per tree label."""
    rows: list[dict[str, Any]] = []
    for i, f in enumerate(files):
        for r in json.loads(f.read_text(encoding="utf-8"))["rows"]:
            rows.append(dict(r, rep=(i, r["rep"]), tree=r.get("tree", "this")))
    labels = sorted({r["tree"] for r in rows})
    head = f"{len(files)} files pooled: {', '.join(str(f) for f in files)}"
    return "\n".join([head] + [growth_summary([r for r in rows if r["tree"] == t], members, t) for t in labels])


def growth_summary(rows: list[dict[str, Any]], members: list[int], label: str = "") -> str:
    """From the first member count to the last, per repetition: framework cost per client-round (wall and CPU),
    wall per round, peak RSS, bytes per round; the median and range over repetitions where there are several."""
    lo, hi = members[0], members[-1]
    by_rep: dict[int, dict[int, dict[str, Any]]] = {}
    for r in rows:
        by_rep.setdefault(r["rep"], {})[r["members"]] = r
    pairs = [(reps[lo], reps[hi]) for reps in by_rep.values() if lo in reps and hi in reps]

    def ratios(key: str) -> list[float]:
        return [b[key] / a[key] for a, b in pairs]

    def show(values: list[float], unit: str = "x", fmt: str = ".2f") -> str:
        if len(values) == 1:
            return f"{values[0]:{fmt}}{unit}"
        return (f"median {statistics.median(values):{fmt}}{unit} (range {min(values):{fmt}}-{max(values):{fmt}}{unit}, "
                f"{len(values)} repetitions: {', '.join(f'{v:{fmt}}' for v in values)})")

    out = [f"{label + ': ' if label else ''}{hi} vs {lo} members ({hi / lo:.0f}x):",
           f"  framework per client-round {show(ratios('framework_ms_per_client'))}",
           f"  (cpu {show(ratios('framework_cpu_ms_per_client'))})",
           f"  cost at {lo}: {show([a['framework_ms_per_client'] for a, _ in pairs], ' ms')}",
           f"  cost at {hi}: {show([b['framework_ms_per_client'] for _, b in pairs], ' ms')}",
           f"  wall/round {show(ratios('wall_per_round_s'))}",
           f"  peak RSS {show(ratios('peak_rss_mb'))}, bytes/round {show(ratios('bytes_per_round'))}"]
    for m in members:  # the same seed must give the same ledger in every repetition
        heads = sorted({r["head"][:16] for r in rows if r["members"] == m})
        runs = sum(1 for r in rows if r["members"] == m)
        out.append(f"  heads at {m}: {', '.join(heads)} ({runs} run{'' if runs == 1 else 's'}{'' if len(heads) == 1 else ': NOT THE SAME'})")
    return "\n".join(out)


if __name__ == "__main__":
    main()
