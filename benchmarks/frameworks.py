"""concilium side by side with a plain PyTorch loop, Flower and pfl, on identical work, whole process each.

One workload runs through four implementations, each as a whole OS process, rep by rep interleaved
(concilium, plain, flower, pfl, concilium, ...):

``concilium``
    ``python -m concilium sim run SCENARIO --out DIR --quiet``: the whole command a user runs (imports, set-up,
    the simulation with its committee, pBFT, Ed25519 signatures and SQLite ledger, the end-of-run ledger audit,
    the plots), with its default training workers.
``plain``
    ``benchmarks/_frameworks/plain.py``: one model object, ``torch.optim.SGD``, no framework (the baseline of
    every ratio). It aggregates as concilium's FedAvg does (float64, peer-id order), so its global model must
    equal concilium's bit for bit in every round; the script checks that.
``flower``
    ``benchmarks/_frameworks/flower_run.py``: Flower 1.42.0's simulation (``run_simulation``, Ray 2.55.1), its
    message-API ``FedAvg``; Ray gets the same CPUs, one per ClientApp.
``pfl``
    ``benchmarks/_frameworks/pfl_run.py``: pfl 0.6.0's ``FederatedAveraging`` on its ``SimulatedBackend``.

**Same work everywhere.** From concilium's side, once per workload, ``workload.npz`` is exported into the run's
output folder (``sim._world.World`` of the scenario; numpy arrays only, loaded with ``allow_pickle=False``): the
train/test split, the client partition, the initial weights θ₀, and for every (round, client, local step) the
minibatch indices concilium's seeded sampler draws (``learning.training.minibatch_indices`` with the generator
``RngTree(seed).child("train", i, t, "update")``, exactly what a member's training job uses). Every peer script
loads it and replays exactly that with the same model class (``_frameworks/replay.py``: the digits MLP 64-64-10),
the same loss (cross-entropy), the same optimizer (SGD, the scenario's lr, no momentum), the same aggregation
weights (``n_i / Σ n``, every client every round) and the same accuracy (top-1 on the test split after every
round).

**What is asserted** (exit status 1 otherwise, after printing the report):

* concilium's per-round global models (read from its ledger's model blobs) equal the plain loop's bit for bit,
  every round, every rep; every round aggregated all M updates; one ledger head across reps;
* the per-round test accuracies of all four implementations are identical (exact float equality; the report
  gives the largest absolute difference, 0 when the assertion holds) in every rep.

Flower and pfl aggregate with their own code (float32, their summation order; Flower's order is the order the
replies arrive), so their models may differ from concilium's in the last bits: the report gives the largest
absolute difference of their per-round models from concilium's. Accuracies are compared exactly, not with a
tolerance.

**Timing.** Whole-process wall time (``perf_counter`` around the child, from spawn to exit) and CPU seconds
(user + system of the child and all its descendants: ``getrusage(RUSAGE_CHILDREN)`` before and after; this
process is a child subreaper, so descendants that outlive their parent, e.g. Ray's, are reaped here and counted;
any still running 30 s after the child exits are killed and counted). Every process is pinned to the same CPUs
(``--cpus``, default all this process may use; ``sched_setaffinity`` before exec), and its average number of busy
cores (CPU s / wall s) is reported. Ratios to the plain loop are taken rep by rep and reported as median and
(min-max) over reps; nothing is a best-of. The report's "in-process" column is a peer script's own clock from
its first line (Python start-up before it is not in it) to the end of its last round; concilium's is not taken.

    python benchmarks/frameworks.py [--workloads w1 c200] [--reps 3] [--rounds-c200 10] [--cpus 0,1]
                                    [--only concilium,plain,flower,pfl] [--out DIR] [--no-build]

``w1``: ``scenarios/coordinator_fedavg.toml`` as is (20 members, all trained every round, 30 rounds, committee of
4). ``c200``: the same with 200 members, all trained every round (``--rounds-c200``, default 10: fewer rounds
than W1 because Flower spends about 0.07 CPU s per client-round, 140 CPU s a run at 10 rounds). Output: a
markdown report on stdout and in ``OUT/frameworks.md``, the figures in ``OUT/frameworks.json``; each run's folder
under ``OUT/<workload>/runs/``.

Peers' environments: ``benchmarks/.venvs/flower`` and ``benchmarks/.venvs/pfl`` (git-ignored), built on first
use with ``python -m venv`` and pip (pinned; torch 2.13.0 CPU and numpy as the project's). ``--no-build`` fails
instead of building.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
PEER_DIR = HERE / "_frameworks"
VENVS = HERE / ".venvs"
SCENARIO = ROOT / "scenarios" / "coordinator_fedavg.toml"
IMPLEMENTATIONS = ("concilium", "plain", "flower", "pfl")
TORCH_PIN = "torch==2.13.0"
NUMPY_PIN = "numpy==2.4.6"
PEER_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "flower": (TORCH_PIN, NUMPY_PIN, "flwr[simulation]==1.42.0"),  # flwr 1.42.0 pins ray==2.55.1
    "pfl": (TORCH_PIN, NUMPY_PIN, "pfl[pytorch]==0.6.0"),
}
LINGER_S = 30.0


# --- workloads -------------------------------------------------------------------------------------


def scenario_text(clients: int, rounds: int) -> str:
    """``scenarios/coordinator_fedavg.toml`` with ``clients`` members, all sampled every round, and ``rounds``."""
    text = SCENARIO.read_text(encoding="utf-8")
    subs = ((r"(?m)^rounds = \d+$", f"rounds = {rounds}"), (r"(?m)^members = \d+$", f"members = {clients}"),
            (r"(?m)^params = \{ clients = \d+ \}$", f"params = {{ clients = {clients} }}"))
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        if n != 1:
            raise SystemExit(f"{SCENARIO}: expected one line matching {pattern!r}")
    return text


def export_workload(scenario_path: Path, out: Path) -> dict[str, Any]:
    """Write ``out`` (``workload.npz``, the layout of ``_frameworks/replay.py``) from what concilium's simulator
    uses for ``scenario_path``; returns a summary. Refuses a scenario whose rounds a replay could not reproduce."""
    import torch  # noqa: PLC0415

    from learning import partition_dataset, partition_spec  # noqa: PLC0415
    from learning.training import minibatch_indices  # noqa: PLC0415 - the sampler a training job uses
    from node.core import PURPOSE_UPDATE  # noqa: PLC0415
    from sim import load_scenario  # noqa: PLC0415
    from sim import World  # noqa: PLC0415

    sc = load_scenario(scenario_path)
    p, tr, adv = sc.protocol, sc.training, sc.adversary
    params = dict(p.params)
    problems = [
        what for what, bad in (
            ("coordinator-mode fedavg", (p.mode, p.algorithm) != ("coordinator", "fedavg")),
            ("every member a client every round", params.get("clients", 0) not in (0, sc.members)),
            ("server_lr 1", float(params.get("server_lr", 1.0)) != 1.0),
            ("an iid partition of the members", sc.data.partition != "iid" or bool(dict(sc.data.partition_params))),
            ("no public split", bool(sc.data.public_size)),
            ("one local dataset per member", bool(getattr(sc.data, "local_datasets", 0))),
            ("the mlp with one hidden layer", sc.model.name != "mlp" or len(tuple(sc.model.params.get("hidden", ()))) != 1),
            ("plain SGD steps with replacement", tr.epochs or tr.momentum or tr.weight_decay or tr.prox_mu
             or tr.sampling != "with_replacement" or not tr.batch_size),
            ("cpu", tr.device != "cpu"),
            ("no adversary", bool(adv.byzantine or adv.faults or adv.availability or adv.per_round)),
        ) if bad
    ]
    if problems:
        raise SystemExit(f"{scenario_path}: the replay needs " + ", ".join(problems))
    world = World.build(sc)
    m, rounds = sc.members, sc.rounds
    if int(sc.model.params.get("in_features", -1)) != world.train.x.shape[1]:
        raise SystemExit(f"{scenario_path}: the replay needs model.params.in_features = {world.train.x.shape[1]}")
    lrs = {float(world.schedule(t - 1)) for t in range(1, rounds + 1)}
    if len(lrs) != 1:
        raise SystemExit(f"{scenario_path}: the replay needs a constant learning rate, got {sorted(lrs)}")
    part = partition_dataset(partition_spec("iid", {"num_clients": m}), world.train,
                             seed=world.rng.child("partition").seed64() % 2**32)
    for i in range(m):  # the partition recomputed here is the simulator's
        d = world.client_data[i]
        if not (torch.equal(world.train.x[part.clients[i]], d.x) and torch.equal(world.train.y[part.clients[i]], d.y)):
            raise SystemExit(f"client {i}: exported partition differs from the simulator's")
    sizes = [len(ix) for ix in part.clients]
    config = world.trainer.config
    batches = np.empty((rounds, m, int(tr.steps), int(tr.batch_size)), dtype=np.int32)
    for t in range(1, rounds + 1):
        for i in range(m):
            gen = world.rng.child("train", i, t, PURPOSE_UPDATE).torch()
            rows, _ = minibatch_indices(sizes[i], config, gen, 0)
            batches[t - 1, i] = torch.stack(rows).numpy()  # type: ignore[arg-type]
    agg_order = sorted(range(m), key=lambda i: world.keys[i].peer_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        out, format=np.int64(1),
        train_x=world.train.x.numpy(), train_y=world.train.y.numpy(),
        test_x=world.test.x.numpy(), test_y=world.test.y.numpy(),
        client_index=np.concatenate(part.clients), client_offsets=np.cumsum([0, *sizes]).astype(np.int64),
        theta0=world.theta0, batches=batches, agg_order=np.array(agg_order, dtype=np.int64),
        lr=np.float64(lrs.pop()), hidden=np.int64(tuple(sc.model.params["hidden"])[0]),
        num_classes=np.int64(sc.model.params.get("num_classes", 10)),
    )
    return {"clients": m, "rounds": rounds, "steps": int(tr.steps), "batch": int(tr.batch_size), "lr": float(tr.lr),
            "train": len(world.train), "test": len(world.test), "parameters": int(world.theta0.shape[0]),
            "samples_per_client": [min(sizes), max(sizes)], "seed": sc.seed}


# --- peers' environments ----------------------------------------------------------------------------


def peer_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def ensure_venv(name: str, build: bool) -> Path:
    """``benchmarks/.venvs/NAME`` with the pinned requirements; built here when missing or stale."""
    venv, reqs = VENVS / name, PEER_REQUIREMENTS[name]
    marker = venv / "concilium-requirements.txt"
    want = "\n".join(reqs) + "\n"
    if peer_python(name).exists() and marker.exists() and marker.read_text(encoding="utf-8") == want:
        return peer_python(name)
    if not build:
        raise SystemExit(f"{venv}: missing or not built with {', '.join(reqs)} (drop --no-build to build it)")
    print(f"building {venv} ({', '.join(reqs)}) ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(peer_python(name)), "-m", "pip", "install", "--quiet", *reqs], check=True)
    marker.write_text(want, encoding="utf-8")
    return peer_python(name)


def package_versions(python: Path, names: tuple[str, ...]) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    res = subprocess.run([str(python), "-c", code, *names], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


# --- measuring one process ----------------------------------------------------------------------------


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children_of(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _descendants() -> list[int]:
    todo, seen = _children_of(os.getpid()), []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += _children_of(pid)
    return seen


@dataclass
class Measured:
    rc: int
    wall_s: float
    cpu_s: float
    user_s: float
    sys_s: float
    orphans_reaped: int = 0
    killed: list[int] = field(default_factory=list)
    linger_s: float = 0.0


def measure(cmd: list[str], *, cpus: set[int], env: dict[str, str], log: Path) -> Measured:
    """Run ``cmd`` pinned to ``cpus``; wall from spawn to exit, CPU of it and every descendant."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("wb") as fh:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        rc = proc.wait()
        wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    reaped, killed = 0, []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            reaped += 1
            continue
        if time.perf_counter() - t1 > LINGER_S:
            for d in _descendants():  # our own descendants, by pid
                try:
                    os.kill(d, signal.SIGKILL)
                    killed.append(d)
                except ProcessLookupError:
                    pass
        time.sleep(0.01)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, sys_ = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return Measured(rc, wall, user + sys_, user, sys_, reaped, killed, time.perf_counter() - t1)


# --- one run of each implementation -------------------------------------------------------------------


def command(impl: str, wl_dir: Path, run_dir: Path, ncpus: int) -> list[str]:
    npz = str(wl_dir / "workload.npz")
    if impl == "concilium":
        return [sys.executable, "-m", "concilium", "sim", "run", str(wl_dir / "scenario.toml"),
                "--out", str(run_dir / "results"), "--quiet"]
    if impl == "plain":
        return [sys.executable, str(PEER_DIR / "plain.py"), npz, str(run_dir)]
    if impl == "flower":
        return [str(peer_python("flower")), str(PEER_DIR / "flower_run.py"), npz, str(run_dir), str(ncpus)]
    if impl == "pfl":
        return [str(peer_python("pfl")), str(PEER_DIR / "pfl_run.py"), npz, str(run_dir)]
    raise ValueError(impl)


def ledger_models(ledger_dir: Path) -> np.ndarray:
    """The global model of every block of a concilium ledger, ``(height, d)`` float32, from its model blobs."""
    from learning import blob_to_vector  # noqa: PLC0415
    from ledger.store import open_ledger  # noqa: PLC0415

    store, blobs = open_ledger(ledger_dir, readonly=True)
    try:
        models = []
        for h in range(1, store.height() + 1):
            digest = store.get(h).payload.model_digest
            models.append(np.array(blob_to_vector(blobs.get(digest)), dtype=np.float32))
    finally:
        store.close()
    return np.stack(models)


def concilium_outcome(run_dir: Path, clients: int) -> dict[str, Any]:
    """Per-round accuracies (``metrics.csv``) and global models (the ledger's model blobs) of a concilium run."""
    res = run_dir / "results"
    with (res / "metrics.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    accuracies = [float(r["accuracy"]) for r in rows]
    accepted = [int(r["accepted"]) for r in rows]
    summary = json.loads((res / "summary.json").read_text(encoding="utf-8"))
    return {"accuracies": accuracies, "models": ledger_models(res / "ledger"), "accepted": accepted,
            "head": summary["head_hash"], "verified": summary.get("ledger_verified"),
            "all_aggregated": all(a == clients for a in accepted)}


def peer_outcome(run_dir: Path) -> dict[str, Any]:
    body = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    body["models"] = np.load(run_dir / "models.npy", allow_pickle=False)
    return body


# --- report -------------------------------------------------------------------------------------------


def _spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def report(wl: str, meta: dict[str, Any], runs: dict[str, list[dict[str, Any]]], ncpus: int) -> tuple[list[str], dict[str, Any], list[str]]:
    """Markdown lines, figures and failed assertions of one workload."""
    impls = list(runs)
    reps = len(runs[impls[0]])
    failures: list[str] = []
    ref = "concilium" if "concilium" in runs else impls[0]
    acc_diff: dict[str, float] = {}
    model_diff: dict[str, float] = {}
    for impl in impls:
        a_max = m_max = 0.0
        for k in range(reps):
            a, b = runs[impl][k]["outcome"], runs[ref][k]["outcome"]
            if len(a["accuracies"]) != meta["rounds"]:
                failures.append(f"{wl} rep {k + 1} {impl}: {len(a['accuracies'])} rounds of accuracy, expected {meta['rounds']}")
                continue
            da = max(abs(x - y) for x, y in zip(a["accuracies"], b["accuracies"]))
            a_max = max(a_max, da)
            if a["accuracies"] != b["accuracies"]:
                bad = [t + 1 for t, (x, y) in enumerate(zip(a["accuracies"], b["accuracies"])) if x != y]
                failures.append(f"{wl} rep {k + 1}: {impl}'s accuracy differs from {ref}'s in rounds {bad} (max {da:.6f})")
            m_max = max(m_max, float(np.max(np.abs(a["models"].astype(np.float64) - b["models"].astype(np.float64)))))
        acc_diff[impl], model_diff[impl] = a_max, m_max
    if "concilium" in runs:
        heads = {r["outcome"]["head"] for r in runs["concilium"]}
        if len(heads) != 1:
            failures.append(f"{wl}: concilium's ledger head differs across reps: {sorted(heads)}")
        for k, r in enumerate(runs["concilium"]):
            if r["outcome"]["verified"] is not True:
                failures.append(f"{wl} rep {k + 1}: concilium's end-of-run ledger audit did not pass")
            if not r["outcome"]["all_aggregated"]:
                failures.append(f"{wl} rep {k + 1}: concilium aggregated fewer than {meta['clients']} updates in some "
                                f"round ({r['outcome']['accepted']})")
        if "plain" in runs:
            for k in range(reps):
                if not np.array_equal(runs["plain"][k]["outcome"]["models"], runs["concilium"][k]["outcome"]["models"]):
                    failures.append(f"{wl} rep {k + 1}: the plain loop's global models are not concilium's bit for bit")
    for impl in impls:
        for k, r in enumerate(runs[impl]):
            if r["measured"].rc != 0:
                failures.append(f"{wl} rep {k + 1} {impl}: exit status {r['measured'].rc} (log {r['log']})")

    base = "plain" if "plain" in runs else None
    lines = [f"### {wl}: {meta['clients']} clients × {meta['rounds']} rounds, {reps} reps interleaved, "
             f"{ncpus} CPU{'s' if ncpus > 1 else ''} for every process\n",
             "| implementation | wall s | **wall / plain** | CPU s | **CPU / plain** | busy cores | "
             "in-process: start→rounds done s | final accuracy | max Δ accuracy vs concilium | max Δ model vs concilium |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    figures: dict[str, Any] = {"workload": meta, "reps": reps, "cpus": ncpus, "implementations": {}}
    for impl in impls:
        rs = runs[impl]
        wall = [r["measured"].wall_s for r in rs]
        cpu = [r["measured"].cpu_s for r in rs]
        busy = [c / w for c, w in zip(cpu, wall)]
        if base:
            wr = [r["measured"].wall_s / b["measured"].wall_s for r, b in zip(rs, runs[base])]
            cr = [r["measured"].cpu_s / b["measured"].cpu_s for r, b in zip(rs, runs[base])]
        else:
            wr = cr = []
        inproc = [r["inprocess_s"] for r in rs if r.get("inprocess_s") is not None]
        fig = {
            "wall_s": wall, "cpu_s": cpu, "busy_cores": busy, "wall_ratio_to_plain": wr, "cpu_ratio_to_plain": cr,
            "inprocess_to_rounds_done_s": inproc, "final_accuracy": rs[-1]["outcome"]["accuracies"][-1],
            "accuracies": rs[-1]["outcome"]["accuracies"], "max_abs_accuracy_diff_vs_concilium": acc_diff[impl],
            "max_abs_model_diff_vs_concilium": model_diff[impl],
            "orphans_reaped": [r["measured"].orphans_reaped for r in rs],
            "killed_after_linger": [len(r["measured"].killed) for r in rs],
            "linger_s": [r["measured"].linger_s for r in rs],
        }
        figures["implementations"][impl] = fig
        lines.append(
            f"| {impl} | {_spread(wall, '.2f')} | **{_spread(wr, '.2f') if wr else '-'}** | {_spread(cpu, '.2f')} | "
            f"**{_spread(cr, '.2f') if cr else '-'}** | {statistics.median(busy):.2f} | "
            f"{_spread(inproc, '.2f') if inproc else '-'} | {fig['final_accuracy']:.4f} | {acc_diff[impl]:.1e} | "
            f"{model_diff[impl]:.1e} |"
        )
    lines.append("")
    lines.append("Per rep (wall s / CPU s): " + "; ".join(
        f"{impl} " + ", ".join(f"{r['measured'].wall_s:.2f}/{r['measured'].cpu_s:.2f}" for r in runs[impl])
        for impl in impls) + ".")
    for impl in impls:
        reaped = [r["measured"].orphans_reaped for r in runs[impl]]
        if any(reaped):
            lines.append(f"{impl}: {', '.join(map(str, reaped))} descendant processes outlived it and were reaped here "
                         f"(CPU counted), the last {_spread([r['measured'].linger_s for r in runs[impl]], '.2f')} s "
                         f"after it exited; killed after {LINGER_S:.0f} s: "
                         f"{sum(len(r['measured'].killed) for r in runs[impl])}.")
    if "concilium" in runs:
        c = runs["concilium"][-1]["outcome"]
        lines.append(f"concilium: ledger head {c['head'][:16]} in every rep: {len({r['outcome']['head'] for r in runs['concilium']}) == 1}; "
                     f"ledger verified: {c['verified']}; all {meta['clients']} updates aggregated every round: "
                     f"{all(r['outcome']['all_aggregated'] for r in runs['concilium'])}")
    lines.append("")
    return lines, figures, failures


# --- main ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["w1", "c200"], choices=["w1", "c200"])
    ap.add_argument("--reps", type=int, default=3, help="interleaved reps of every implementation (default 3)")
    ap.add_argument("--rounds-c200", type=int, default=10,
                    help="rounds of the 200-client workload (default 10: Flower spends ~0.07 CPU s a client-round)")
    ap.add_argument("--rounds-w1", type=int, default=30, help="rounds of W1 (default 30, as the notes' W1)")
    ap.add_argument("--cpus", help="CPU list every process is pinned to, e.g. 0,1 (default: all this process may use)")
    ap.add_argument("--only", default=",".join(IMPLEMENTATIONS), help="implementations to run, comma-separated")
    ap.add_argument("--out", help="output folder, new or empty (default results/frameworks-<time>)")
    ap.add_argument("--no-build", action="store_true", help="fail if a peer's environment is missing")
    args = ap.parse_args(argv)
    impls = [x for x in IMPLEMENTATIONS if x in args.only.split(",")]
    if unknown := set(args.only.split(",")) - set(IMPLEMENTATIONS):
        ap.error(f"unknown implementations: {sorted(unknown)}")
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    cpus = {int(c) for c in args.cpus.split(",")} if args.cpus else os.sched_getaffinity(0)
    out = Path(args.out) if args.out else ROOT / "results" / time.strftime("frameworks-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        ap.error(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True)

    versions: dict[str, dict[str, str]] = {
        "concilium": package_versions(Path(sys.executable), ("torch", "numpy", "concilium"))}
    versions["plain"] = {k: v for k, v in versions["concilium"].items() if k != "concilium"}
    for peer in ("flower", "pfl"):
        if peer in impls:
            python = ensure_venv(peer, build=not args.no_build)
            versions[peer] = package_versions(python, ("torch", "numpy", "flwr", "ray", "pfl"))
    for impl, v in versions.items():
        if impl in impls and (v.get("torch", "").split("+")[0], v.get("numpy")) != (
                versions["concilium"]["torch"].split("+")[0], versions["concilium"]["numpy"]):
            print(f"warning: {impl} runs torch {v.get('torch')} / numpy {v.get('numpy')}, the project "
                  f"{versions['concilium']['torch']} / {versions['concilium']['numpy']}", file=sys.stderr)
    subreaper = become_subreaper()
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "RAY_USAGE_STATS_ENABLED": "0"}

    load0 = os.getloadavg()
    workloads = {"w1": (20, args.rounds_w1), "c200": (200, args.rounds_c200)}
    all_lines = ["## concilium vs plain PyTorch, Flower, pfl: identical work, whole process\n",
                 f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores here, every process pinned to "
                 f"CPUs {sorted(cpus)}; Python {platform.python_version()}; "
                 + "; ".join(f"{k}: " + ", ".join(f"{n} {v}" for n, v in vs.items()) for k, vs in versions.items()
                             if k in impls)
                 + f"; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}\n"]
    figures: dict[str, Any] = {"cpus": sorted(cpus), "versions": versions, "subreaper": subreaper,
                               "loadavg_start": load0, "command": sys.argv, "workloads": {}}
    failures: list[str] = []
    for wl in args.workloads:
        clients, rounds = workloads[wl]
        wl_dir = out / wl
        wl_dir.mkdir()
        (wl_dir / "scenario.toml").write_text(scenario_text(clients, rounds), encoding="utf-8")
        meta = export_workload(wl_dir / "scenario.toml", wl_dir / "workload.npz")
        runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
        for k in range(args.reps):
            for impl in impls:
                run_dir = wl_dir / "runs" / f"{impl}-{k + 1}"
                run_dir.mkdir(parents=True)
                log = run_dir / "output.log"
                m = measure(command(impl, wl_dir, run_dir, len(cpus)), cpus=cpus, env=env, log=log)
                rec: dict[str, Any] = {"measured": m, "log": str(log)}
                try:
                    if impl == "concilium":
                        rec["outcome"] = concilium_outcome(run_dir, clients)
                    else:
                        rec["outcome"] = peer_outcome(run_dir)
                        rec["inprocess_s"] = rec["outcome"]["seconds"].get("rounds")
                except (OSError, KeyError, ValueError) as e:
                    raise SystemExit(f"{wl} rep {k + 1} {impl}: no result ({e}); see {log}") from None
                runs[impl].append(rec)
                print(f"[{wl} rep {k + 1}/{args.reps}] {impl}: wall {m.wall_s:.2f} s, CPU {m.cpu_s:.2f} s, "
                      f"final accuracy {rec['outcome']['accuracies'][-1]:.4f}", file=sys.stderr, flush=True)
        lines, fig, fails = report(wl, meta, runs, len(cpus))
        all_lines += lines
        figures["workloads"][wl] = fig
        failures += fails
    load1 = os.getloadavg()
    figures["loadavg_end"] = load1
    all_lines.append(f"Load average at the end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}. Command: "
                     f"`{' '.join([Path(sys.executable).name, *sys.argv])}`.")
    all_lines.append("**Asserted**: per-round accuracies identical across the implementations (exact), concilium's "
                     "per-round models = the plain loop's bit for bit, every update aggregated, one ledger head: "
                     + ("**all hold**." if not failures else "**FAILED**:\n- " + "\n- ".join(failures)))
    figures["failures"] = failures
    text = "\n".join(all_lines) + "\n"
    print(text)
    (out / "frameworks.md").write_text(text, encoding="utf-8")
    (out / "frameworks.json").write_text(json.dumps(figures, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"figures in {out / 'frameworks.json'}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
