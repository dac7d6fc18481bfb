"""Run a scenario end to end and write its results folder (the main job behind ``concilium sim run``).

``RESULTS/``
    ``ledger/``          the committed chain (SQLite + blobs), verifiable offline
    ``genesis.toml``     the simulated network's genesis
    ``scenario.toml``    a copy of the scenario that ran (with the seed and rounds used)
    ``metrics.csv``      one row per round
    ``summary.json``     final figures, traffic, verification verdict, how to reproduce
    ``accuracy.png``     test accuracy per round
    ``acceptance.png``   how often each client's update was accepted (Byzantine clients in red)
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import tomli_w

from ledger import LedgerError, audit_chain
from ledger.store import open_ledger
from node.config import dump_genesis
from learning._attacks import parse_data_attack
from learning._errors import LearningError
from learning._strategies import PublicEval
from node.reexec import reexecutor_for
from sim._engine import RoundMetrics, Simulation, SimResult
from sim._scenario import Scenario, load_scenario

__all__ = [
    "has_backdoor",
    "metric_columns",
    "public_eval_for_ledger",
    "run_scenario",
    "verify_ledger",
    "write_results",
]


def _plots(out: Path, res: SimResult) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [m.fl_round for m in res.rounds if not math.isnan(m.accuracy)]
    ys = [m.accuracy for m in res.rounds if not math.isnan(m.accuracy)]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    ax.plot(xs, ys, marker="o", markersize=3)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(f"{res.scenario.name} (seed {res.scenario.seed}, {res.scenario.protocol.mode} mode)")
    fig.tight_layout()
    fig.savefig(out / "accuracy.png")
    plt.close(fig)

    peers = sorted(res.acceptance, key=lambda p: res.member_index[p])
    rates = [res.acceptance[p][0] / res.acceptance[p][1] if res.acceptance[p][1] else 0.0 for p in peers]
    colors = ["tab:red" if p in res.byzantine else "tab:blue" for p in peers]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=110)
    ax.bar([f"n{res.member_index[p]}" for p in peers], rates, color=colors)
    ax.set_ylabel("accepted / trained")
    ax.set_ylim(0, 1)
    ax.set_title("per-client acceptance (red: Byzantine)")
    ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    for label, p in zip(ax.get_xticklabels(), peers):
        if p in res.byzantine:
            label.set_color("tab:red")  # a bar of height 0 is invisible: mark the name too
    fig.tight_layout()
    fig.savefig(out / "acceptance.png")
    plt.close(fig)


def has_backdoor(scenario: Scenario) -> bool:
    """Does the scenario run a per-batch backdoor (so its rounds carry an attack success rate)?"""
    spec = scenario.adversary.data_attack
    return bool(spec) and bool(getattr(parse_data_attack(spec), "per_batch", False))


def metric_columns(scenario: Scenario) -> list[str]:
    """The ``metrics.csv`` columns: every :class:`RoundMetrics` field, ``asr`` only with a backdoor."""
    names = [fld.name for fld in dataclasses.fields(RoundMetrics)]
    return names if has_backdoor(scenario) else [n for n in names if n != "asr"]


def write_results(out: Path, scenario: Scenario, res: SimResult, verdict: str, verified: bool) -> dict[str, Any]:
    """Write ``metrics.csv``, ``summary.json``, plots, genesis and scenario copies; return the summary."""
    columns = metric_columns(scenario)
    with open(out / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for m in res.rounds:
            w.writerow([getattr(m, c) for c in columns])
    (out / "genesis.toml").write_text(dump_genesis(res.genesis), encoding="utf-8")
    (out / "scenario.toml").write_text(tomli_w.dumps(_scenario_toml(scenario)), encoding="utf-8")
    _plots(out, res)
    summary = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "mode": scenario.protocol.mode,
        "algorithm": scenario.protocol.algorithm,
        "rounds": len(res.rounds),
        "final_accuracy": res.final_accuracy,
        **({"final_asr": res.final_asr} if "asr" in columns else {}),
        "head_hash": res.head_hash.hex(),
        "byzantine_clients": [f"n{res.member_index[p]}" for p in res.byzantine],
        "byzantine_accepted_total": sum(m.byzantine_accepted for m in res.rounds),
        "view_changes": res.view_changes,
        "evidence_in_ledger": res.evidence,
        "bytes_by_kind": res.bytes_by_kind,
        "messages_by_kind": res.messages_by_kind,
        "dropped_messages": res.dropped_messages,
        "virtual_seconds": res.rounds[-1].virtual_time_s if res.rounds else 0.0,
        "wall_seconds": round(res.wall_seconds, 3),
        "ledger_verified": verified,
        "ledger_verdict": verdict,
        "reproduce": f"concilium sim run {out / 'scenario.toml'}",
        "verify": f"concilium ledger verify {out / 'ledger'}",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _scenario_toml(sc: Scenario) -> dict[str, Any]:
    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [conv(x) for x in v]
        if hasattr(v, "items"):
            return {k: conv(x) for k, x in v.items()}
        return v

    return conv(sc)  # type: ignore[no-any-return]


def public_eval_for_ledger(path: Path) -> PublicEval | None:
    """The public-split evaluator a results ledger's strategy needs (Sself, FedAsync with the entropy filter),
    rebuilt from the ``scenario.toml`` beside it; None if there is none or it does not describe this chain."""
    path = Path(path)
    scenario_file = (path.parent if path.is_file() else path).parent / "scenario.toml"
    if not scenario_file.is_file():
        return None
    try:
        scenario = load_scenario(scenario_file)
        if not scenario.data.public_size:
            return None
        sim = Simulation(scenario)
        store, _ = open_ledger(path, readonly=True, check_index=False)
        with store:
            same = store.genesis().hash() == sim.genesis.hash()
    except (ValueError, OSError, LedgerError, LearningError):
        return None
    return sim.public_eval if same else None


def verify_ledger(path: Path, *, public: PublicEval | None = None) -> tuple[bool, str]:
    """Full audit of a results ledger, re-executing every round (a chain that cannot be re-executed fails)."""
    store, blobs = open_ledger(path, readonly=True, check_index=False)
    with store:
        g = store.genesis()
        rx = reexecutor_for(g, public=public)
        if rx is None and public is None:
            rx = reexecutor_for(g, public=public_eval_for_ledger(Path(path)))
        if rx is None:
            return False, f"FAIL: the rounds of algorithm {g.protocol.algorithm!r} cannot be re-executed here"
        report = audit_chain(g, store.iter_rows(), blobs=blobs, reexecutor=rx)
    return report.ok, report.line()


def run_scenario(
    path: str | os.PathLike[str],
    *,
    out: Path,
    seed: int | None = None,
    rounds: int | None = None,
    progress: bool = True,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run the scenario at ``path`` into the new results folder ``out``; return the summary. ``workers``:
    training processes beside the simulator (None = ``sim._workers.default_workers``); never changes results."""
    scenario = load_scenario(path, seed=seed, rounds=rounds)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: already exists and is not empty")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        sim = Simulation(scenario, ledger_dir=out / "ledger", on_round=None, workers=workers)
    except BaseException:
        if created:  # bad configuration: leave nothing behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=scenario.rounds, desc=scenario.name, unit="round", file=sys.stderr)

    def on_round(m: RoundMetrics) -> None:
        if bar is not None:
            acc = "" if math.isnan(m.accuracy) else f"acc {m.accuracy:.3f} "
            bar.set_postfix_str(f"round {m.fl_round} {acc}committee {m.committee} byz-acc {m.byzantine_accepted}")
            bar.update(1)

    sim._on_round = on_round
    try:
        res = sim.run()
    finally:
        if bar is not None:
            bar.close()
    verified, verdict = verify_ledger(out / "ledger", public=sim.public_eval)
    return write_results(out, scenario, res, verdict, verified)
