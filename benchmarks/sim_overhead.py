"""Simulation overhead on W1: ``concilium sim`` against a plain PyTorch FedAvg loop, same run, same cores.

Workload W1 (``benchmarks/README.md``, "Reference workloads"): scikit-learn digits scaled to [0, 1], 80/20 split with
seed 0, the train set split IID into 20 clients, MLP 64 → 64 → 10, ``torch.set_num_threads(1)``; each of
30 rounds every client starts from the global model and takes 10 SGD steps (lr 0.05, batch 32, seeded
sampling with replacement); the new model is the sample-weighted average; test accuracy once per round.
Here it is ``scenarios/coordinator_fedavg.toml`` (checked by ``check_scenario``), with concilium's own split,
partition, initial weights and minibatches, which every row below replays.

Two kinds of rows, each with its wall time **and** its CPU seconds (user + system of this process's threads and
of the children it waited for: training workers, ledger writer; ``os.times``), and the average number of busy
cores (CPU s / wall s). Every row runs on the same CPUs: this process pins itself (``--cpus``, default all it may
use) and its children inherit it. A ratio of wall times therefore compares runs that had the same cores at hand;
the CPU ratio next to it says how much more work one of them did with them.

**Job rows** (in this process, imports excluded; the baseline is ``plain``):

``plain``
    One minimal FedAvg loop a user would write, with no node, consensus, ledger or simulator code. It loads the
    data with ``learning.data.DigitsSpec``, splits it with ``learning.data.IIDPartition`` and trains every
    client with ``learning.training.LocalTrainer`` - the *same* training function the simulator calls, with the
    seeds derived as the simulator derives them (``learning.RngTree``), so both sides do the same training (the
    same minibatches from the same starting points, up to aggregation rounding). One thread: one core busy.
``torch``
    The same loop written with nothing but PyTorch (``nn.Sequential``, ``load_state_dict`` per client,
    ``torch.optim.SGD``, a weighted average of the state dicts); same initial weights and minibatch indices.
``sim-inproc``
    ``sim.Simulation(scenario, ledger_dir=tmp, workers=0).run()``: 20 real node cores, committee of 4 validators
    re-executing the aggregation, pBFT, every message signed and strictly decoded, the chain and its blobs
    written to SQLite/files on disk, training in this process: one core, like ``plain`` (like for like).
``sim``
    The same with the training workers ``concilium sim`` uses by default here (``--workers``): on 2 cores one
    forked worker beside this process, so up to two busy cores against ``plain``'s one; its CPU ratio says
    what the second core carries.

Each job covers data loading, partitioning, model set-up and the rounds (for the sim: constructing the
``Simulation`` and ``run()``); one untimed 1-round warm-up of each comes first. Inside the sim the trainer is
wrapped by a timer (two ``perf_counter`` calls per training job), which splits the in-process sim's wall time
into training, evaluation and framework.

**Whole-process rows** (``--no-process`` skips them; the baseline is the plain loop's process): each is a fresh
OS process, timed from spawn to exit (imports, set-up, rounds, and for concilium the end-of-run ledger audit and
the plots), CPU seconds of it and all its descendants (``benchmarks.frameworks.measure``):

``plain process``
    ``python benchmarks/_frameworks/plain.py workload.npz OUT``: the plain PyTorch loop of
    ``benchmarks/frameworks.py`` (one model object, ``torch.optim.SGD``, one thread), replaying the workload
    exported once from concilium's side (split, partition, θ₀, every minibatch's indices); it aggregates as
    concilium's FedAvg does, so its per-round accuracies must equal concilium's exactly (checked).
``concilium process``
    ``python -m concilium sim run scenario.toml --out DIR --quiet [--workers N]``: what a user runs.

The **headline** is the whole-process wall ratio (concilium process / plain process, same CPUs), with the CPU
ratio next to it. Goal: wall ratio ≤ 1.15 with signatures, ledger and consensus on (the reference workload's
target is 1.05: ``benchmarks/README.md``, W1). The job rows' ratios are printed too, each labelled with the cores
it had busy.

``--profile`` also runs the sim once under cProfile, prints the top functions by cumulative and by own
time, and a table of buckets (training, signatures, encoding, hashing, SQLite/blob I/O, consensus, node
core, sim loop, evaluation, ...). Each function's *own* time goes to the bucket of its file; the own time
of library and built-in functions that belong to no bucket by themselves (torch, numpy, generic
built-ins) is split among their callers in proportion to the time spent under each caller, recursively,
up to a project function. cProfile inflates Python-heavy code more than C-heavy code (torch), so the
table also gives an estimate rescaled to the unprofiled run's measured training/evaluation/framework split.

    python benchmarks/sim_overhead.py [--repeat 3] [--rounds 30] [--clients 20] [--cpus 0,1] [--workers N]
                                      [--no-torch] [--no-inprocess] [--no-process] [--profile] [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import cProfile
import gc
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import sim  # noqa: E402
from benchmarks.frameworks import PEER_DIR, become_subreaper, export_workload, measure, scenario_text  # noqa: E402
from learning import (  # noqa: E402
    DigitsSpec,
    IIDPartition,
    LocalTrainer,
    LocalTrainingConfig,
    MLPSpec,
    partition_dataset,
)
from sim import RngTree  # noqa: E402

SCENARIO = ROOT / "scenarios" / "coordinator_fedavg.toml"

# W1, as in benchmarks/README.md (checked against the scenario file in check_scenario()).
CLIENTS = 20
STEPS = 10
BATCH = 32
LR = 0.05
HIDDEN = 64
SEED = 0
W1_REFERENCE_ACCURACY = 0.8972
GOAL_RATIO = 1.15


# --- seeds: derived exactly as sim._engine derives them -------------------------------------------


def partition_seed(seed: int) -> int:
    return RngTree(seed).child("partition").seed64() % 2**32


def init_seed(seed: int) -> int:
    return RngTree(seed).child("model-init").seed64() % 2**31


def batch_generator(seed: int, client: int, fl_round: int) -> torch.Generator:
    """The minibatch generator of ``client`` in ``fl_round`` (rounds count from 1, as ledger heights)."""
    g = torch.Generator()
    g.manual_seed(RngTree(seed).child("train", client, fl_round, "update").seed64() & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def check_scenario(sc: sim.Scenario, rounds: int) -> None:
    """The scenario file must describe W1, or the comparison is meaningless."""
    tr = sc.training
    got = (
        sc.members, sc.rounds, sc.seed, sc.data.dataset, sc.data.partition, sc.model.name,
        tuple(sc.model.params.get("hidden", ())), tr.steps, tr.batch_size, tr.lr, tr.momentum, tr.weight_decay,
        sc.protocol.algorithm, dict(sc.protocol.params).get("clients"), sc.eval_every, sc.adversary.byzantine,
        tr.device, dict(sc.data.params), dict(sc.data.partition_params),
    )
    want = (CLIENTS, rounds, SEED, "digits", "iid", "mlp", (HIDDEN,), STEPS, BATCH, LR, 0.0, 0.0, "fedavg", CLIENTS, 1, 0,
            "cpu", {}, {})
    if got != want:
        raise SystemExit(f"{SCENARIO.name} is not W1: got {got}, expected {want}")


# --- timing helper --------------------------------------------------------------------------------


class TimedTrainer:
    """Wraps a LocalTrainer; adds up the wall time of ``train`` and ``evaluate`` calls."""

    def __init__(self, inner: LocalTrainer) -> None:
        self.inner = inner
        self.train_s = 0.0
        self.eval_s = 0.0
        self.trainings = 0

    def train(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        res = self.inner.train(*args, **kwargs)
        self.train_s += time.perf_counter() - t
        self.trainings += 1
        return res

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        res = self.inner.evaluate(*args, **kwargs)
        self.eval_s += time.perf_counter() - t
        return res

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# --- 1. the plain loop (LocalTrainer) -------------------------------------------------------------


def plain_fedavg(rounds: int) -> dict[str, Any]:
    """W1 as a minimal FedAvg loop around LocalTrainer (no node, consensus, ledger or simulator code)."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    splits = DigitsSpec().load()  # /16 scaling, 80/20 split, seed 0
    clients = partition_dataset(IIDPartition(num_clients=CLIENTS), splits.train, seed=partition_seed(SEED)).client_datasets(
        splits.train
    )
    trainer = TimedTrainer(LocalTrainer(MLPSpec(in_features=64, hidden=(HIDDEN,), num_classes=10),
                                        LocalTrainingConfig(steps=STEPS, batch_size=BATCH)))
    theta = trainer.initial_parameters(seed=init_seed(SEED))
    total = sum(len(d) for d in clients)
    t1 = time.perf_counter()
    accuracies = []
    for t in range(1, rounds + 1):
        acc = torch.zeros_like(theta)
        for i, data in enumerate(clients):
            res = trainer.train(theta, data, lr=LR, generator=batch_generator(SEED, i, t))
            acc.add_(res.delta, alpha=res.num_samples / total)
        theta = theta + acc
        accuracies.append(trainer.evaluate(theta, splits.test).accuracy)
    t2 = time.perf_counter()
    return {
        "job_s": t2 - t0, "setup_s": t1 - t0, "rounds_s": t2 - t1, "train_s": trainer.train_s, "eval_s": trainer.eval_s,
        "trainings": trainer.trainings, "final_accuracy": accuracies[-1], "accuracies": accuracies,
        "model": theta.numpy().copy(),
    }


# --- 2. the same loop in plain PyTorch -----------------------------------------------------------


def torch_fedavg(rounds: int) -> dict[str, Any]:
    """W1 with nothing but PyTorch: one nn.Sequential, load_state_dict per client, torch.optim.SGD."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    splits = DigitsSpec().load()
    clients = partition_dataset(IIDPartition(num_clients=CLIENTS), splits.train, seed=partition_seed(SEED)).client_datasets(
        splits.train
    )
    model = nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))
    # the same initial weights as the other two (concilium's MLP has this parameter order)
    theta0 = LocalTrainer(MLPSpec(in_features=64, hidden=(HIDDEN,), num_classes=10),
                          LocalTrainingConfig(steps=STEPS, batch_size=BATCH)).initial_parameters(seed=init_seed(SEED))
    nn.utils.vector_to_parameters(theta0, model.parameters())
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    total = sum(len(d) for d in clients)
    t1 = time.perf_counter()
    accuracies = []
    train_s = eval_s = 0.0
    for t in range(1, rounds + 1):
        ta = time.perf_counter()
        new_state = {k: torch.zeros_like(v) for k, v in global_state.items()}
        for i, data in enumerate(clients):
            model.load_state_dict(global_state)
            batches = torch.randint(0, len(data), (STEPS, BATCH), generator=batch_generator(SEED, i, t))
            model.train()
            for idx in batches:
                opt.zero_grad()
                F.cross_entropy(model(data.x[idx]), data.y[idx]).backward()
                opt.step()
            w = len(data) / total
            for k, v in model.state_dict().items():
                new_state[k].add_(v, alpha=w)
        global_state = new_state
        tb = time.perf_counter()
        model.load_state_dict(global_state)
        model.eval()
        with torch.no_grad():
            accuracies.append(float((model(splits.test.x).argmax(1) == splits.test.y).float().mean()))
        tc = time.perf_counter()
        train_s += tb - ta
        eval_s += tc - tb
    t2 = time.perf_counter()
    return {
        "job_s": t2 - t0, "setup_s": t1 - t0, "rounds_s": t2 - t1, "train_s": train_s, "eval_s": eval_s,
        "trainings": rounds * CLIENTS, "final_accuracy": accuracies[-1], "accuracies": accuracies,
        "model": nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy(),
    }


# --- 3. the simulator ----------------------------------------------------------------------------


def load_workload(rounds: int) -> sim.Scenario:
    """The scenario file with ``CLIENTS`` members, all sampled every round (W1: the file as is)."""
    scenario = sim.load_scenario(SCENARIO, rounds=rounds)
    if CLIENTS != scenario.members:
        params = {**dict(scenario.protocol.params), "clients": CLIENTS}
        scenario = dataclasses.replace(
            scenario, members=CLIENTS, protocol=dataclasses.replace(scenario.protocol, params=params)
        )
    check_scenario(scenario, rounds)
    return scenario


def sim_fedavg(
    rounds: int, ledger_root: str | None, profiler: cProfile.Profile | None = None, workers: int | None = None
) -> dict[str, Any]:
    """W1 through ``concilium sim``: Simulation(scenario, ledger_dir=tmp, workers=workers).run(), everything on.
    With training workers the trainer timer runs in the workers, so training time is only split out in-process."""
    scenario = load_workload(rounds)
    with tempfile.TemporaryDirectory(dir=ledger_root, prefix="sim-overhead-") as tmp:
        if profiler is not None:
            profiler.enable()
        t0 = time.perf_counter()
        s = sim.Simulation(scenario, ledger_dir=Path(tmp) / "ledger", workers=workers)
        trainer = TimedTrainer(s.trainer)
        s.trainer = trainer  # type: ignore[assignment]  # evaluation
        s.world.trainer = trainer  # type: ignore[assignment]  # training jobs (World.local_train)
        t1 = time.perf_counter()
        res = s.run()
        t2 = time.perf_counter()
        if profiler is not None:
            profiler.disable()
        ledger_bytes = sum(p.stat().st_size for p in (Path(tmp) / "ledger").rglob("*") if p.is_file())
    wall = [0.0] + [m.wall_time_s for m in res.rounds]
    virt = [0.0] + [m.virtual_time_s for m in res.rounds]
    # the run stops when the results ledger has every block; nodes that have the last one agree on the model
    models = {n.model.tobytes() for n in s.nodes.values() if n.chain_state.height == rounds and n.model is not None}
    assert len(models) == 1, "nodes at the last height disagree on the final model"
    return {
        "job_s": t2 - t0, "setup_s": t1 - t0, "rounds_s": t2 - t1, "train_s": trainer.train_s, "eval_s": trainer.eval_s,
        "trainings": trainer.trainings, "workers": s.workers, "final_accuracy": res.final_accuracy,
        "accuracies": [m.accuracy for m in res.rounds], "model": np.frombuffer(models.pop(), dtype=np.float32).copy(),
        "virtual_s": res.rounds[-1].virtual_time_s,
        "virtual_s_per_round": [round(b - a, 6) for a, b in zip(virt, virt[1:])],
        "wall_s_per_round": [round(b - a, 6) for a, b in zip(wall, wall[1:])],
        "messages": sum(res.messages_by_kind.values()), "bytes": sum(res.bytes_by_kind.values()),
        "messages_by_kind": res.messages_by_kind, "bytes_by_kind": res.bytes_by_kind,
        "view_changes": res.view_changes, "head_hash": res.head_hash.hex(), "ledger_bytes": ledger_bytes,
    }


# --- profile buckets ------------------------------------------------------------------------------

BUCKETS = (
    "training",
    "evaluation",
    "signatures",
    "hashing",
    "encoding/decoding",
    "sqlite/blobs I/O",
    "consensus",
    "ledger records & chain rules",
    "aggregation (learning)",
    "node core",
    "sim loop",
    "setup (data, model)",
    "other",
)

_PROJECT_FILES: tuple[tuple[str, str | None], ...] = (
    # (path prefix relative to the repository, bucket; None = inherit from callers)
    ("learning/models/_params.py", None),
    ("learning/_config.py", None),
    ("learning/strategies/_base.py", "aggregation (learning)"),
    ("learning/robust/_aggregators.py", "aggregation (learning)"),
    ("learning/robust/_cmfl.py", "aggregation (learning)"),
    ("learning/models/_blobs.py", "encoding/decoding"),
    ("learning/data/_datasets.py", "setup (data, model)"),
    ("learning/data/_partition.py", "setup (data, model)"),
    ("learning/models/_zoo.py", "setup (data, model)"),
    ("sim/_scenario.py", "setup (data, model)"),
    ("ledger/_encoding.py", "encoding/decoding"),
    ("ledger/_tensors.py", "encoding/decoding"),
    ("node/_wire.py", "encoding/decoding"),
    ("ledger/_merkle.py", "hashing"),
    ("ledger/store/", "sqlite/blobs I/O"),
    ("ledger/_blockstore.py", "sqlite/blobs I/O"),
    ("ledger/", "ledger records & chain rules"),
    ("consensus/", "consensus"),
    ("node/", "node core"),
    ("sim/", "sim loop"),
    ("learning/", "aggregation (learning)"),
)


def _own_bucket(key: tuple[str, int, str]) -> str | None:
    """The bucket a function's own time belongs to, or None to inherit it from its callers."""
    filename, _, name = key
    if filename == "~":  # a built-in: recognise the few that are a bucket by themselves
        if "ed25519" in name.lower() or "cryptography" in name or "crypto_sign" in name or "_sodium" in name:
            return "signatures"
        if "_hashlib" in name or "sha256" in name or "_blake2" in name:
            return "hashing"
        if "sqlite3" in name:
            return "sqlite/blobs I/O"
        if "msgpack" in name:
            return "encoding/decoding"
        if name in ("<built-in method posix.fsync>", "<built-in method posix.replace>", "<built-in method posix.open>"):
            return "sqlite/blobs I/O"
        return None
    path = Path(filename)
    try:
        rel = path.resolve().relative_to(ROOT).as_posix()
    except (ValueError, OSError):
        rel = None
    if rel is not None and not rel.startswith(".venv/"):
        if rel == "learning/training/_local.py":
            return "evaluation" if name == "evaluate" else "training"
        if rel == "ledger/_crypto.py":
            return "hashing" if name in ("sha256", "hash_tagged") else "signatures"
        if rel == "benchmarks/sim_overhead.py" and name in ("train", "evaluate"):  # TimedTrainer
            return "evaluation" if name == "evaluate" else "training"
        if rel == "sim/_engine.py" and name == "__init__":
            return "setup (data, model)"
        for prefix, bucket in _PROJECT_FILES:
            if rel.startswith(prefix):
                return bucket
        return "other"
    p = path.as_posix()
    if "/cryptography/" in p or "/nacl/" in p:
        return "signatures"
    if "/msgpack/" in p:
        return "encoding/decoding"
    if "/sqlite3/" in p:
        return "sqlite/blobs I/O"
    if p.endswith("/hashlib.py"):
        return "hashing"
    if "/sklearn/" in p:
        return "setup (data, model)"
    return None


def bucket_table(stats: pstats.Stats) -> dict[str, float]:
    """Own time of every function, assigned to buckets (see the module docstring); seconds per bucket.

    A function without a bucket of its own gets its callers' bucket shares, weighted by the time spent in it
    under each caller. Recursion (nn.Sequential calling modules, isinstance hooks) makes that a linear system
    over the call graph; it is solved by fixed-point iteration, and any share left unresolved is "other".
    """
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    fixed: dict[Any, dict[str, float]] = {}
    edges: dict[Any, list[tuple[Any, float]]] = {}
    for key, (_, _, _, _, callers) in raw.items():
        own = _own_bucket(key)
        if own is not None:
            fixed[key] = {own: 1.0}
            continue
        weights = [(c, v[2] if v[2] > 0 else v[3]) for c, v in callers.items()]
        total = sum(w for _, w in weights)
        edges[key] = [(c, w / total) for c, w in weights if w > 0] if total > 0 else []
    current: dict[Any, dict[str, float]] = {k: {} for k in edges}
    for _ in range(200):
        change = 0.0
        for key, ins in edges.items():
            out: dict[str, float] = {}
            for c, f in ins:
                src = fixed.get(c)
                if src is None:
                    src = current.get(c, {"other": 1.0}) if c in edges else {"other": 1.0}
                for b, x in src.items():
                    out[b] = out.get(b, 0.0) + f * x
            change = max(change, abs(sum(out.values()) - sum(current[key].values())))
            current[key] = out
        if change < 1e-9:
            break
    seconds = {b: 0.0 for b in BUCKETS}
    for key, (_, _, tt, _, _) in raw.items():
        sh = fixed.get(key) or current.get(key) or {}
        got = 0.0
        for b, f in sh.items():
            seconds[b] = seconds.get(b, 0.0) + tt * f
            got += f
        seconds["other"] += tt * max(0.0, 1.0 - got)
    return seconds


def _where(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    p = Path(filename)
    try:
        rel = p.resolve().relative_to(ROOT).as_posix()
        if rel.startswith(".venv/"):
            rel = rel.split("site-packages/", 1)[-1]
    except (ValueError, OSError):
        rel = p.as_posix().split("site-packages/", 1)[-1].split("/lib/python3", 1)[-1]
    return f"{rel}:{line}({name})"


def top_table(stats: pstats.Stats, sort_index: int, n: int) -> list[str]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(raw.items(), key=lambda kv: kv[1][sort_index], reverse=True)[:n]
    out = ["| # | calls | own s | cumulative s | bucket (own time) | function |", "|---:|---:|---:|---:|---|---|"]
    for i, (key, (cc, nc, tt, ct, _)) in enumerate(rows, 1):
        calls = f"{nc}" if cc == nc else f"{nc}/{cc}"
        out.append(f"| {i} | {calls} | {tt:.3f} | {ct:.3f} | {_own_bucket(key) or '(callers)'} | `{_where(key)}` |")
    return out


# --- main -----------------------------------------------------------------------------------------


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _cpu_now() -> float:
    """CPU seconds so far of this process (all threads) and of the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _spread(xs: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


class WholeProcess:
    """The whole-process rows: W1 (or its ``--clients``/``--rounds`` variant) as a scenario file and the workload
    exported from it, then ``concilium sim run`` and the plain loop's script as fresh processes."""

    def __init__(self, root: Path, rounds: int, workers: int | None) -> None:
        self.root = root
        self.workers = workers
        self.scenario = root / "scenario.toml"
        self.scenario.write_text(scenario_text(CLIENTS, rounds), encoding="utf-8")
        check_scenario(sim.load_scenario(self.scenario), rounds)
        self.npz = root / "workload.npz"
        export_workload(self.scenario, self.npz)
        self.count = 0
        self.env = dict(os.environ)

    def run(self, which: str) -> dict[str, Any]:
        self.count += 1
        out = self.root / f"{which}-{self.count}"
        if which == "concilium":
            cmd = [sys.executable, "-m", "concilium", "sim", "run", str(self.scenario), "--out", str(out), "--quiet"]
            if self.workers is not None:
                cmd += ["--workers", str(self.workers)]
        else:
            cmd = [sys.executable, str(PEER_DIR / "plain.py"), str(self.npz), str(out)]
        m = measure(cmd, cpus=os.sched_getaffinity(0), env=self.env, log=self.root / f"{which}-{self.count}.log")
        if m.rc != 0:
            raise SystemExit(f"{which} process failed (exit {m.rc}); see {self.root / f'{which}-{self.count}.log'}")
        if which == "concilium":
            with (out / "metrics.csv").open(newline="", encoding="utf-8") as fh:
                acc = [float(r["accuracy"]) for r in csv.DictReader(fh)]
        else:
            acc = json.loads((out / "result.json").read_text(encoding="utf-8"))["accuracies"]
        return {"job_s": m.wall_s, "cpu_s": m.cpu_s, "accuracies": acc, "final_accuracy": acc[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each row, interleaved (median reported)")
    ap.add_argument("--rounds", type=int, default=30, help="FL rounds (W1: 30)")
    ap.add_argument("--no-torch", action="store_true", help="skip the pure-PyTorch reference loop")
    ap.add_argument("--profile", action="store_true", help="also run the sim once under cProfile and print buckets")
    ap.add_argument("--top", type=int, default=25, help="functions listed per profile table")
    ap.add_argument("--ledger-root", help="directory for the sim's temporary ledger (default: the system temp dir)")
    ap.add_argument("--json", help="also write the figures as JSON here")
    ap.add_argument("--workers", type=int, default=None,
                    help="training workers of the `sim` and `concilium process` rows (default: what `concilium sim` "
                         "picks here)")
    ap.add_argument("--no-inprocess", action="store_true", help="skip the in-process (workers=0) sim row")
    ap.add_argument("--no-process", action="store_true", help="skip the whole-process rows")
    ap.add_argument("--cpus", help="CPUs every row runs on, e.g. 0,1 (default: all this process may use)")
    ap.add_argument("--clients", type=int, default=20,
                    help="clients, all trained every round (W1: 20; the 50-client variant: 50)")
    args = ap.parse_args()
    global CLIENTS
    CLIENTS = args.clients
    if args.repeat < 1 or args.rounds < 1:
        ap.error("--repeat and --rounds must be >= 1")
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    cpus = sorted(os.sched_getaffinity(0))
    torch.set_num_threads(1)

    impls: dict[str, Callable[[int], dict[str, Any]]] = {"plain": plain_fedavg}
    if not args.no_torch:
        impls["torch"] = torch_fedavg
    if not args.no_inprocess:
        impls["sim-inproc"] = lambda r: sim_fedavg(r, args.ledger_root, workers=0)
    impls["sim"] = lambda r: sim_fedavg(r, args.ledger_root, workers=args.workers)

    # untimed warm-up: lazy imports (sklearn), torch kernels, SQLite
    for f in impls.values():
        f(1)

    procs = ("plain-process", "concilium-process")
    tmp_proc = None if args.no_process else tempfile.TemporaryDirectory(dir=args.ledger_root, prefix="sim-overhead-proc-")
    whole = None
    if tmp_proc is not None:
        become_subreaper()  # descendants that outlive their parent are reaped (and counted) here
        whole = WholeProcess(Path(tmp_proc.name), args.rounds, args.workers)

    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in [*impls, *(procs if whole else ())]}
    order = list(runs)
    for r in range(args.repeat):
        for name in (order if r % 2 == 0 else order[::-1]):
            gc.collect()
            if name in procs:
                assert whole is not None
                res = whole.run("concilium" if name == "concilium-process" else "plain")
            else:
                c0 = _cpu_now()
                res = impls[name](args.rounds)
                res["cpu_s"] = _cpu_now() - c0
            runs[name].append(res)
            print(f"[repeat {r + 1}/{args.repeat}] {name}: {res['job_s']:.2f} s wall, {res['cpu_s']:.2f} s CPU",
                  file=sys.stderr)
    if tmp_proc is not None:
        tmp_proc.cleanup()

    med = {k: {m: _med([x[m] for x in v]) for m in ("job_s", "setup_s", "rounds_s", "train_s", "eval_s", "cpu_s")
               if m in v[0]} for k, v in runs.items()}
    last = {k: v[-1] for k, v in runs.items()}
    plain = med["plain"]
    s_last = last["sim"]

    def ratios(name: str, base: str, key: str) -> list[float]:
        return [a[key] / b[key] for a, b in zip(runs[name], runs[base])]

    labels = {
        "plain": "plain FedAvg loop (LocalTrainer, one model object) - **baseline of the job rows**",
        "torch": "plain PyTorch loop (nn.Sequential, load_state_dict per client, optim.SGD)",
        "sim-inproc": f"`concilium sim` coordinator_fedavg, training in-process (workers=0; {CLIENTS} nodes, committee 4, "
                      "pBFT, Ed25519, SQLite ledger)",
        "sim": f"`concilium sim` coordinator_fedavg as run by default here ({s_last['workers']} training workers; "
               f"{CLIENTS} nodes, committee 4, pBFT, Ed25519, SQLite ledger)",
        "plain-process": "plain PyTorch loop, whole process (`benchmarks/_frameworks/plain.py`) - **baseline of the "
                         "whole-process rows**",
        "concilium-process": "`concilium sim run` coordinator_fedavg, whole process (imports, set-up, rounds, audit, "
                             "plots) - **headline**",
    }
    base_of = {k: "plain" for k in impls} | {k: "plain-process" for k in procs}

    title = "W1" if CLIENTS == 20 else "W1-like"
    print(f"## {title} simulation overhead ({args.rounds} rounds, {CLIENTS} clients, median (min-max) of "
          f"{args.repeat} interleaved runs)\n")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores here, every row on CPUs {cpus}; "
          f"Python {platform.python_version()}, torch {torch.__version__}, threads 1; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end\n")
    print("| row | wall s | CPU s | busy cores | set-up s | rounds s | training s | final acc | "
          "**wall / baseline** | **CPU / baseline** |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, v in runs.items():
        m = med[k]
        busy = _med([x["cpu_s"] / x["job_s"] for x in v])
        in_workers = last[k].get("workers", 0) > 0  # the trainer timer ran in the workers: not measured here
        train_cell = "-" if k in procs else "(in workers)" if in_workers else f"{m['train_s']:.2f}"
        opt = (lambda key: f"{m[key]:.2f}" if key in m else "-")  # noqa: E731
        print(f"| {labels[k]} | {_spread([x['job_s'] for x in v])} | {_spread([x['cpu_s'] for x in v])} | {busy:.2f} | "
              f"{opt('setup_s')} | {opt('rounds_s')} | {train_cell} | {last[k]['final_accuracy']:.4f} | "
              f"{_spread(ratios(k, base_of[k], 'job_s'))} | {_spread(ratios(k, base_of[k], 'cpu_s'))} |")
    print("\nRatios are taken run by run against the baseline of the same repeat; median (min-max).\n")

    verdicts: dict[str, Any] = {}
    if whole is not None:
        wr, cr = ratios("concilium-process", "plain-process", "job_s"), ratios("concilium-process", "plain-process", "cpu_s")
        ratio = _med(wr)
        verdict = "meets" if ratio <= GOAL_RATIO else "misses"
        print(f"**Headline, whole process on the same CPUs {cpus}: `concilium sim run` / plain loop = {ratio:.2f} wall** "
              f"({min(wr):.2f}-{max(wr):.2f}); CPU seconds {_med(cr):.2f} ({min(cr):.2f}-{max(cr):.2f}); "
              f"goal wall <= {GOAL_RATIO}: {verdict} it.")
        same = all(a["accuracies"] == b["accuracies"] for a, b in zip(runs["concilium-process"], runs["plain-process"]))
        print(f"- per-round accuracies of the two processes identical in every repeat: {same}")
        if not same:
            raise SystemExit("the whole-process rows did not do the same work: accuracies differ")
        verdicts["process"] = {"wall_ratio": ratio, "wall_ratios": wr, "cpu_ratio": _med(cr), "cpu_ratios": cr,
                               "goal_met": ratio <= GOAL_RATIO}
    jr, jc = ratios("sim", "plain", "job_s"), ratios("sim", "plain", "cpu_s")
    if whole is None:
        ratio = _med(jr)
        verdict = "meets" if ratio <= GOAL_RATIO else "misses"
        print(f"**Headline with --no-process (job rows only, imports, audit and plots excluded): sim with "
              f"{s_last['workers']} workers / plain job = {ratio:.2f} wall** ({min(jr):.2f}-{max(jr):.2f}), up to "
              f"{1 + s_last['workers']} busy cores against one; CPU {_spread(jc)}; goal wall <= {GOAL_RATIO}: {verdict} it.")
    print(f"- job, default workers ({s_last['workers']}; up to {1 + s_last['workers']} busy cores) / plain job (one "
          f"core busy): wall {_spread(jr)}, CPU {_spread(jc)}")
    if "sim-inproc" in runs:
        ir, ic = ratios("sim-inproc", "plain", "job_s"), ratios("sim-inproc", "plain", "cpu_s")
        print(f"- job, in-process (one core busy, like the plain job): wall {_spread(ir)}, CPU {_spread(ic)}")
    if "torch" in med:
        print(f"- job, sim (default workers) / plain PyTorch loop: {med['sim']['job_s'] / med['torch']['job_s']:.2f}; "
              f"plain PyTorch / LocalTrainer baseline: {med['torch']['job_s'] / plain['job_s']:.2f}")
    split_key = "sim-inproc" if "sim-inproc" in last else "sim"
    sp = med[split_key]
    framework = sp["job_s"] - sp["train_s"] - sp["eval_s"]
    print()
    print(f"| {split_key} wall split (median) | s | % of {split_key} |")
    print("|---|---:|---:|")
    for name, v in ((f"training (LocalTrainer.train, {last[split_key]['trainings']} jobs)", sp["train_s"]),
                    (f"evaluation ({args.rounds} x test set)", sp["eval_s"]),
                    ("framework: everything else (set-up, consensus, signatures, encoding, ledger, event loop)", framework)):
        print(f"| {name} | {v:.2f} | {100 * v / sp['job_s']:.1f} |")
    print(f"| **overhead vs baseline ({split_key} - plain)** | {sp['job_s'] - plain['job_s']:.2f} | "
          f"{100 * (sp['job_s'] - plain['job_s']) / sp['job_s']:.1f} |")
    print()
    vr = s_last["virtual_s_per_round"]
    diffs = {k: float(np.max(np.abs(last[k]["model"] - s_last["model"]))) for k in impls if k != "sim"}
    extra = last[split_key]["trainings"] - args.rounds * CLIENTS
    print("- trainings: " + ", ".join(f"{k} {last[k]['trainings']}" for k in impls if not last[k].get("workers"))
          + (f" (the sim's {extra} extra are round {args.rounds + 1} jobs that nodes start on committing the last "
             "block, before the run stops)" if extra > 0 else ""))
    print("- final accuracy: " + ", ".join(f"{k} {last[k]['final_accuracy']:.4f}" for k in runs)
          + f" (W1 reference {W1_REFERENCE_ACCURACY}); max |final model - sim's|: "
          + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    print(f"- sim virtual time: {s_last['virtual_s']:.3f} s for {args.rounds} rounds, {statistics.mean(vr):.3f} s/round "
          f"(min {min(vr):.3f}, max {max(vr):.3f}; train_ms 300, latency 20 ms, tick 100 ms)")
    print(f"- sim traffic: {s_last['messages']} messages, {s_last['bytes'] / 1e6:.1f} MB "
          f"({', '.join(f'{k} {v}' for k, v in s_last['messages_by_kind'].items())}); view changes {s_last['view_changes']}; "
          f"ledger on disk {s_last['ledger_bytes'] / 1e6:.1f} MB; head {s_last['head_hash'][:16]}")
    print("- samples (wall s / CPU s): " + "; ".join(
        f"{k} " + ", ".join(f"{x['job_s']:.2f}/{x['cpu_s']:.2f}" for x in v) for k, v in runs.items()))

    figures: dict[str, Any] = {
        "workload": "W1" if CLIENTS == 20 else f"W1-like, {CLIENTS} clients",
        "clients": CLIENTS,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "cpus": cpus,
        "loadavg_end": os.getloadavg(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "median": med,
        "headline": "whole process wall ratio" if whole is not None else "job wall ratio, default workers",
        "ratio": ratio,
        "process": verdicts.get("process"),
        "workers": s_last["workers"],
        "ratio_job": _med(jr),
        "ratio_job_cpu": _med(jc),
        "ratio_inprocess": _med(ratios("sim-inproc", "plain", "job_s")) if "sim-inproc" in runs else None,
        "ratio_inprocess_cpu": _med(ratios("sim-inproc", "plain", "cpu_s")) if "sim-inproc" in runs else None,
        "goal": GOAL_RATIO,
        "samples_job_s": {k: [x["job_s"] for x in v] for k, v in runs.items()},
        "samples_cpu_s": {k: [x["cpu_s"] for x in v] for k, v in runs.items()},
        "final_accuracy": {k: last[k]["final_accuracy"] for k in runs},
        "max_abs_model_diff_vs_sim": diffs,
        "sim": {k: s_last[k] for k in ("virtual_s", "virtual_s_per_round", "wall_s_per_round", "messages", "bytes",
                                         "messages_by_kind", "bytes_by_kind", "view_changes", "ledger_bytes", "head_hash")},
    }

    if args.profile:
        gc.collect()
        prof = cProfile.Profile()
        t = time.perf_counter()
        p_run = sim_fedavg(args.rounds, args.ledger_root, profiler=prof, workers=0)
        profiled_wall = time.perf_counter() - t
        stats = pstats.Stats(prof)
        total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
        seconds = bucket_table(stats)
        # rescale to the unprofiled median: training and evaluation measured directly, the framework buckets
        # share what is left in proportion to their profiled own time
        fw_prof = sum(v for b, v in seconds.items() if b not in ("training", "evaluation"))
        est = {b: v * framework / fw_prof if fw_prof else 0.0 for b, v in seconds.items()}
        est["training"], est["evaluation"] = sp["train_s"], sp["eval_s"]
        print(f"\n## Profile of one in-process sim run (workers=0; cProfile: {total:.2f} s of own time, wall {profiled_wall:.2f} s, "
              f"unprofiled median {sp['job_s']:.2f} s; accuracy {p_run['final_accuracy']:.4f})\n")
        print("| bucket | profiled s | % of profiled sim | est. unprofiled s | est. % of sim |")
        print("|---|---:|---:|---:|---:|")
        for b in sorted(seconds, key=lambda b: -seconds[b]):
            print(f"| {b} | {seconds[b]:.2f} | {100 * seconds[b] / total:.1f} | {est[b]:.2f} | "
                  f"{100 * est[b] / sp['job_s']:.1f} |")
        est_total = sum(est.values())
        print(f"| **total** | {total:.2f} | 100.0 | {est_total:.2f} | {100 * est_total / sp['job_s']:.1f} |")
        print(f"\n### Top {args.top} by cumulative time\n")
        print("\n".join(top_table(stats, 3, args.top)))
        print(f"\n### Top {args.top} by own time\n")
        print("\n".join(top_table(stats, 2, args.top)))
        figures["profile"] = {"profiled_own_s": total, "profiled_wall_s": profiled_wall, "buckets_s": seconds,
                              "buckets_est_unprofiled_s": est}

    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=float) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
