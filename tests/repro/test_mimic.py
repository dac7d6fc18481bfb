"""MimiC reproduction (benchmarks/repro/mimic.py): the scenario files, the fast subset of §6.3, the full run (slow), and
the paper-scale scenarios' error when the dataset files are missing."""

from __future__ import annotations

import math
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.repro import mimic  # noqa: E402
from benchmarks.repro._common import SCENARIOS, write_report  # noqa: E402
from learning.availability import AvailabilityContext, ClassCorrelatedDropout, parse_availability  # noqa: E402
from learning._errors import DataError  # noqa: E402
from learning.strategies import strategy_from_params  # noqa: E402
from node.config import ConfigFileError  # noqa: E402
from sim._engine import Simulation  # noqa: E402
from sim._scenario import load_scenario  # noqa: E402

SMALL = sorted(SCENARIOS.glob("mimic_*.toml"))
FULL = sorted((SCENARIOS / "full").glob("mimic_*.toml"))


def test_scenario_files_exist() -> None:
    assert {p.name for p in SMALL} == {s.scenario for s in mimic.SCHEMES.values()}
    assert len(FULL) == 6


@pytest.mark.parametrize("path", SMALL + FULL, ids=lambda p: p.stem)
def test_scenarios_build_every_method_with_the_host_schedule(path: Path) -> None:
    """Each file validates; every compared strategy builds from its protocol.params; the strategy-owned local
    rate equals the host schedule (mimic spec §2.7: one decaying rate on both sides)."""
    sc = load_scenario(path)
    params = dict(sc.protocol.params)
    tr = sc.training
    assert tr.schedule == "exponential"
    assert params["lr"] == tr.lr and params["lr_gamma"] == tr.schedule_params["gamma"]
    assert params["mu"] == 0.01 and params["variant"] == "seed001"
    if tr.epochs:  # K = E local epochs of ceil(n_i / B) steps (§2.1 [CODE≠PAPER])
        spc = sc.data.partition_params["samples_per_client"]
        assert params["local_steps"] == tr.epochs * math.ceil(spc / tr.batch_size)
    else:
        assert params["local_steps"] == tr.steps
    for name in mimic.METHODS.values():
        strat = strategy_from_params(name, params)
        assert strat.name == name
    mimic_strategy = strategy_from_params("mimic", params)
    for t in (1, 2, 50):
        assert mimic_strategy.lr_at(t) == pytest.approx(max(tr.lr * tr.schedule_params["gamma"] ** (t - 1), 1e-5))
    assert strategy_from_params("mifa", params).variant == "seed001"
    if sc.adversary.availability:
        labels = tuple((i % 10, (i + 1) % 10) for i in range(sc.members))
        ctx = AvailabilityContext(members=sc.members, sizes=(1,) * sc.members, labels=labels, rounds=sc.rounds)
        parse_availability(sc.adversary.availability, ctx)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_s5_is_the_spec_pair_partition_with_rare_pairs_3_and_4(seed: int) -> None:
    """§6.1 S5: client i holds exactly classes 2(i mod 5), 2(i mod 5)+1 (every training sample once); the holders
    of pairs 3 and 4 (classes 6-9) have period tau = 10 with a phase drawn from the trial seed, the others tau = 1."""
    s5 = mimic.SCHEMES["S5"]
    sc = load_scenario(SCENARIOS / s5.scenario, seed=seed)
    assert sc.data.partition == "pairs"
    sim = Simulation(replace(sc, adversary=replace(sc.adversary, **s5.overrides(seed)["adversary"])))
    held = [set(np.unique(d.labels).tolist()) for d in sim.client_data]
    assert held == [{2 * (i % 5), 2 * (i % 5) + 1} for i in range(20)]
    assert sum(len(d) for d in sim.client_data) == 1437
    corr = sim.availability
    assert isinstance(corr, ClassCorrelatedDropout) and corr.seed == seed
    rare = [3, 4, 8, 9, 13, 14, 18, 19]
    assert np.flatnonzero(corr.rare).tolist() == rare
    assert corr.tau.tolist() == [10 if i in rare else 1 for i in range(20)]
    assert all(0 <= corr.phi[i] < 10 for i in rare)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ("{ num_clients = 10 }", "num_clients = 10 must equal members = 20"),
        ("{ classes_per_client = 2 }", "unknown parameter"),
        ("{ num_clients = 0 }", "num_clients"),
    ],
)
def test_scenario_load_validates_the_partition_parameters(params: str, match: str, tmp_path: Path) -> None:
    """``data.partition = "pairs"`` is reachable from TOML; bad parameters fail when the file loads."""
    text = (SCENARIOS / "mimic_corr.toml").read_text()
    assert 'partition = "pairs"\n' in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('partition = "pairs"\n', f'partition = "pairs"\npartition_params = {params}\n'))
    with pytest.raises(ConfigFileError, match=match):
        load_scenario(bad)
    bad.write_text(text.replace('partition = "pairs"\n', 'partition = "pair"\n'))
    with pytest.raises(ConfigFileError, match="unknown partition 'pair'"):
        load_scenario(bad)


def test_runner_overrides_vary_scenario_and_availability_seed() -> None:
    runs = {r.label: r for r in mimic.plan(fast=False)}
    s1 = runs["S1-MimiC-s2"].data()
    assert s1["seed"] == 2 and s1["adversary"]["availability"] == "bounded(tau_max=20, seed=2)"
    assert s1["protocol"]["algorithm"] == "mimic" and s1["rounds"] == 100
    sc = runs["S1-SCAFFOLD-s1"].data()
    assert sc["protocol"]["algorithm"] == "scaffold" and sc["rounds"] == 50  # 100 uploads (A6)
    assert runs["S5-FedAvg-s0"].data()["protocol"]["algorithm"] == "fedavg_uniform"
    assert "availability" not in runs["S0-FedAvg-s1"].data().get("adversary", {})


def test_fast_reproduction(tmp_path: Path) -> None:
    """§6.3 A1 (S0, 10 rounds), B3's MimiC-over-FedAvg gap (S5, seed 0, 100 rounds), A5, A6 through the simulator."""
    report = mimic.reproduce(tmp_path, fast=True, workers=2)
    path = write_report(tmp_path, report)
    failed = [f"{c.name}: {c.measured}" for c in report.claims if not c.passed]
    assert not failed, failed
    assert {c.name for c in report.claims} == {"A1", "B3a (1 seed)", "A5", "A6"}
    assert all(r.verified for r in report.runs.values()), [r.verify_line for r in report.runs.values()]
    assert report.ok and "Verdict: PASS" in path.read_text()
    assert (tmp_path / "accuracy_S5.png").is_file()


def test_s4_mimic_ledger_replays_algorithm_1(tmp_path: Path) -> None:
    """S4 (2 of 20 clients per round, round 0 all-active) through the real simulator: an independent float64
    Algorithm 1 (mimic spec §2.3, Convention G, η_t = K·max(0.05·0.97^t, 1e-5), t = height − 1) fed with the uploads
    stored in the ledger reproduces every committed model to float32 rounding, keeps Σ_i c^i = 0, and every
    upload is fresh (trained from the round's own model)."""
    from benchmarks.repro._common import run_all
    from learning.models import blob_to_vector
    from ledger.store import open_ledger

    rounds, k = 25, 10
    run = mimic._run("S4", "MimiC", 1, rounds)
    res = run_all([run], tmp_path, workers=1, log=lambda _: None)[run.label]
    store, blobs = open_ledger(res.out / "ledger", readonly=True, check_index=False)
    with store:
        genesis = store.genesis()
        w = blob_to_vector(blobs.get(genesis.model.digest)).astype(np.float64)
        c = {m.peer_id: np.zeros(w.shape[0]) for m in genesis.members}
        sizes = []
        for h in range(1, store.height() + 1):
            payload = store.get(h).payload
            assert all(u.fl_round == h for u in payload.updates)
            g = {u.peer: blob_to_vector(blobs.get(u.digest)).astype(np.float64) for u in payload.updates}
            sizes.append(len(g))
            v = sum(g[p] + c[p] for p in sorted(g)) / len(g)  # lines 5-8
            w_ref = w - k * max(0.05 * 0.97 ** (h - 1), 1e-5) * v  # line 9
            for p in g:  # line 10
                c[p] = v - g[p]
            committed = blob_to_vector(blobs.get(payload.model_digest)).astype(np.float64)
            np.testing.assert_allclose(committed, w_ref, rtol=0, atol=1e-6 * (1 + np.abs(w_ref).max()))
            total = sum(c.values())
            assert np.abs(total).max() <= 1e-8 * (1 + max(np.abs(x).max() for x in c.values()))
            w = committed
    assert store.height() == rounds and sizes[0] == 20 and set(sizes[1:]) == {2}
    assert res.verified


@pytest.mark.slow
def test_full_reproduction(tmp_path: Path) -> None:
    """The whole §6 reproduction (75 simulations, about 10 minutes on 2 cores): A1, A5, A6, B1-B7."""
    report = mimic.reproduce(tmp_path, fast=False, workers=2)
    write_report(tmp_path, report)
    failed = [f"{c.name}: {c.measured}" for c in report.claims if not c.passed]
    assert not failed, failed
    assert report.ok


@pytest.mark.parametrize("path", FULL, ids=lambda p: p.stem)
def test_full_scale_scenario_without_data_names_the_missing_files(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The paper-scale scenarios read data/<dataset>/ relative to the working directory; without the files the
    simulation refuses to start with a DataError naming the directory and every expected file."""
    monkeypatch.chdir(tmp_path)  # an empty working directory: data/... does not exist
    with open(path, "rb") as f:
        root = tomllib.load(f)["data"]["params"]["root"]
    with pytest.raises(DataError) as info:
        Simulation(load_scenario(path))
    msg = str(info.value)
    assert root in msg and "never download" in msg
    expected = (
        ("data_batch_1.bin", "data_batch_5.bin", "test_batch.bin")
        if "cifar10" in path.stem
        else ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    )
    for name in expected:
        assert name in msg
