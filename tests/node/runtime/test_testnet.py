"""``concilium testnet local``: real node processes on 127.0.0.1, real sockets (Noise, Yamux), real stores.

One run of the bundled ``testnet`` scenario (4 processes, 3 rounds) through the command line: every node's
ledger verifies with re-execution, all end on the same head, and the accepted sets and model digests are the
ones ``sim run`` gives for the same scenario and seed (block hashes differ: a testnet's block times are wall
times).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.store import open_ledger
from sim import Simulation, load_scenario, resolve_scenario

ROUNDS = 3


@pytest.fixture(scope="module")
def testnet_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("testnet") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "concilium", "testnet", "local", "-n", "4", "--rounds", str(ROUNDS), "--out", str(out),
         "--quiet", "--timeout", "240"],
        capture_output=True, text=True, timeout=300,
    )
    return out, proc


def _chain(path: Path) -> list[tuple[list[tuple[str, int]], bytes]]:
    store, _ = open_ledger(path, readonly=True)
    try:
        return [
            ([(u.peer, u.fl_round) for u in b.payload.updates], b.payload.model_digest)
            for b in (store.get(h) for h in range(1, store.height() + 1))
        ]
    finally:
        store.close()


def test_four_processes_commit_and_every_ledger_verifies(testnet_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, proc = testnet_run
    assert proc.returncode == 0, proc.stdout + proc.stderr + "".join(
        (p / "stderr.log").read_text()[-2000:] for p in sorted((out / "nodes").glob("node-*"))
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == ROUNDS and summary["all_verified"] and summary["same_head"]
    assert all("rounds re-executed" in led["verdict"] for led in summary["ledgers"]), summary["ledgers"]
    import csv  # noqa: PLC0415
    import math  # noqa: PLC0415

    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == ROUNDS
    # each member's accuracy on its own validation split, beside the global test accuracy: the
    # last round is evaluated by every node before the supervisor stops them
    local = [float(rows[-1][f"local_accuracy_n{i}"]) for i in range(4)]
    assert all(0.0 <= a <= 1.0 for a in local), rows[-1]
    assert math.isclose(float(rows[-1]["local_accuracy_mean"]), sum(local) / 4)
    assert float(rows[-1]["local_accuracy_min"]) == min(local) and 0.0 <= float(rows[-1]["accuracy"]) <= 1.0
    for i in range(4):  # and in every node's status.json
        st = json.loads((out / "nodes" / f"node-{i}" / "data" / "status.json").read_text())
        assert st["local_eval"]["height"] == ROUNDS and st["local_eval"]["accuracy"] == local[i], st
        # every member validates every round (testnet: 4 members, committee of 4): each node judged the proposals
        # of the rounds it did not propose by re-executing them in its worker thread (node.core.Check)
        assert st["checks"]["run"] >= 1 and st["checks"]["longest_ms"] > 0, st["checks"]
    assert (out / "accuracy.png").stat().st_size > 0
    heads = {_chain(out / "nodes" / f"node-{i}" / "data" / "ledger")[-1][1] for i in range(4)}
    assert len(heads) == 1


def test_same_accepted_sets_and_models_as_the_simulator(testnet_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, proc = testnet_run
    assert proc.returncode == 0
    sim_dir = out.parent / "sim-ledger"
    Simulation(load_scenario(resolve_scenario("testnet"), rounds=ROUNDS), ledger_dir=sim_dir, workers=0).run()
    want = _chain(sim_dir)
    assert len(want) == ROUNDS
    for i in range(4):
        assert _chain(out / "nodes" / f"node-{i}" / "data" / "ledger") == want


@pytest.mark.slow
def test_sself_scores_on_the_public_split_in_every_process_as_the_simulator_does(tmp_path: Path) -> None:
    """A strategy that scores models on a public split (Sself) over 4 processes: each node builds the split from
    the scenario; the accepted sets and models are the simulator's, and every ledger re-executes (the auditor
    rebuilds the same split). About 30 s: slow-marked."""
    scenario = Path(__file__).parent / "scenarios" / "net_sself.toml"
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "concilium", "testnet", "local", "--scenario", str(scenario), "--out", str(out),
         "--quiet", "--timeout", "240"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["all_verified"] and all("rounds re-executed" in led["verdict"] for led in summary["ledgers"])
    sim = Simulation(load_scenario(scenario), ledger_dir=tmp_path / "sim", workers=0)
    assert sim.public_eval is not None
    sim.run()
    want = _chain(tmp_path / "sim")
    assert len(want) == 3
    for i in range(4):
        assert _chain(out / "nodes" / f"node-{i}" / "data" / "ledger") == want
