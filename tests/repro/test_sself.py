"""Sself reproduction (benchmarks/repro/sself.py): the scenario files, the runner's plan and metrics, the fast subset of
§6.3, the full run (slow), and the paper-scale scenarios' error when the dataset files are missing."""

from __future__ import annotations

import math
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.repro import sself  # noqa: E402
from benchmarks.repro._common import SCENARIOS, RunResult, write_report  # noqa: E402
from learning.availability import AvailabilityContext, parse_availability  # noqa: E402
from learning._errors import DataError  # noqa: E402
from learning.strategies import strategy_from_params  # noqa: E402
from sim._engine import Simulation  # noqa: E402
from sim._scenario import load_scenario  # noqa: E402

SMALL = sorted(SCENARIOS.glob("sself_*.toml"))
FULL = sorted((SCENARIOS / "full").glob("sself_*.toml"))


def test_scenario_files_exist() -> None:
    assert {p.name for p in SMALL} == {g.scenario for g in sself.GROUPS.values()}
    assert {p.stem for p in FULL} == {f"sself_{d}_{k}" for d in ("mnist", "fmnist", "cifar10")
                                      for k in ("stragglers", "poison", "stragglers_poison")} | {
        "sself_mnist_backdoor", "sself_fmnist_backdoor"}  # Fig. 3 / Table 3 (MNIST, FMNIST)


@pytest.mark.parametrize("path", SMALL + FULL, ids=lambda p: p.stem)
def test_scenarios_validate_and_time_units_fit(path: Path) -> None:
    """Each file validates and builds its strategy and availability model; an on-time result (slowest device plus
    the upload's latency) lands before the deadline T_d, and a d-round delay is d × T_d (sself spec §1.2)."""
    sc = load_scenario(path)
    strat = strategy_from_params(sc.protocol.algorithm, dict(sc.protocol.params))
    backdoor = "backdoor" in path.stem
    assert strat.name == "sself" and strat.entropy_impl == "exact"
    assert (strat.e_th, strat.delta) == ((2.0, 5.0) if backdoor else (1.0, 1.0))  # Table 3 / Tables 1-2
    deadline_ms = sc.protocol.timeout_ticks_train * sc.protocol.tick_ms
    assert deadline_ms == sc.compute.round_ms == sself.T_UNIT_S * 1000
    assert sc.compute.train_ms * (1 + sc.compute.speed_spread) + sc.network.latency_ms + sc.network.jitter_ms < deadline_ms
    assert sc.data.public_size > 0 and sc.data.partition == ("dirichlet" if backdoor else "shards")
    if sc.adversary.availability:
        avail = parse_availability(sc.adversary.availability, AvailabilityContext(
            members=sc.members, sizes=(1,) * sc.members, labels=((0,),) * sc.members, rounds=sc.rounds))
        assert avail.max_delay <= strat.max_staleness == 2
    else:
        assert strat.max_staleness == 0
    if sc.adversary.byzantine:
        assert sc.adversary.byzantine == sc.members // 5  # r = 0.2 (§3.1)
    if backdoor:  # §3.4 / §6.1: r = 0.1 (1 of K = 10 per round), batch 64, from "after the 10-th round"
        assert sc.adversary.per_round == 1 and sc.training.batch_size == 64 and sc.adversary.from_round == 11
        assert sc.data.partition_params["alpha"] == 0.5


def test_plan_replaces_strategy_params_and_times_wait() -> None:
    runs = {r.label: r for r in sself.plan(fast=False)}
    assert len(runs) == 3 * sum(len(g.schemes) for g in sself.GROUPS.values())
    wait = runs["R4-MP-wait-RFA-s2"].data()
    assert wait["protocol"]["algorithm"] == "fedavg_stragglers" and wait["protocol"]["params"] == {
        "clients": 10, "aggregator": "rfa", "sampling_seed": 2}
    assert wait["protocol"]["timeout_ticks_train"] == sself.WAIT_TICKS and wait["rounds"] == sself.WAIT_ROUNDS
    assert wait["seed"] == 2 and wait["data"]["params"]["seed"] == 2
    assert wait["adversary"]["attack"] == "model_scaling(factor=-10.0)"
    assert wait["adversary"]["availability"].startswith("stragglers(")
    lf = runs["R2-MP-Sself-compat-s1"].data()
    assert lf["adversary"] == {"byzantine": 4, "attack": "model_scaling(factor=-10.0)", "data_attack": ""}
    flip = runs["R4-LF-FedAsync-ELF-s0"].data()
    assert flip["adversary"]["data_attack"] == "label_flip(num_classes=10)" and flip["adversary"]["attack"] == ""
    assert flip["adversary"]["byzantine"] == 0 and flip["adversary"]["per_round"] == 2  # exactly round(r·K) (§3.1)
    for variant, boost in (("scaled", 10.0), ("noscale", 1.0)):
        bd = runs[f"R3-{variant}-NormThr-s1"].data()
        assert bd["protocol"] == {**bd["protocol"], "algorithm": "norm_threshold",
                                  "params": {"clients": 10, "threshold": 2.0, "sampling_seed": 1}}
        assert bd["adversary"]["per_round"] == 1 and bd["adversary"]["from_round"] == 11
        assert f"boost={boost!r}" in bd["adversary"]["data_attack"] and "poisoned_per_batch=20" in bd["adversary"]["data_attack"]
        assert bd["training"]["batch_size"] == 64 and bd["rounds"] == sself.ROUNDS
    ss = strategy_from_params("sself", runs["R3-scaled-Sself-s0"].data()["protocol"]["params"])
    assert (ss.gamma, ss.delta, ss.e_th, ss.max_staleness) == (1.0, 5.0, 2.0, 0)
    assert flip["protocol"]["params"]["filter"] is True and flip["protocol"]["algorithm"] == "fedasync"
    assert lf["protocol"]["params"]["entropy_impl"] == "naive_float32" and lf["protocol"]["params"]["gamma"] == 1.0
    assert "availability" not in lf["adversary"]
    clean = runs["R2-clean-FedAvg-s0"].data()
    assert clean["adversary"]["byzantine"] == 0 and clean["rounds"] == sself.ROUNDS
    r1 = runs["R1-semi-FedAvg-s0"].data()["protocol"]["params"]
    semi = strategy_from_params("sself", r1)
    assert semi.gamma == 0.5 and semi.delta == 0.0 and not semi.filter and not semi.needs_public
    for r in runs.values():  # every run's file and overrides validate
        d = r.data()
        strategy_from_params(d["protocol"]["algorithm"], d["protocol"]["params"])


def test_plan_pairs_every_scheme_of_a_seed() -> None:
    """The spec's prototype compares the schemes of a seed on the same draws: every run of a seed has the same
    scenario name (the simulator derives the peer ids from it) and ``sampling_seed`` (the sampled clients), in
    every group, while the run labels (folders, results) stay distinct."""
    runs = sself.plan(fast=False)
    assert len({r.label for r in runs}) == len(runs)
    for seed in sself.SEEDS:
        datas = [r.data() for r in runs if r.label.endswith(f"-s{seed}")]
        assert len(datas) == sum(len(g.schemes) for g in sself.GROUPS.values())
        assert {d["name"] for d in datas} == {f"seed002-s{seed}"}
        assert {d["protocol"]["params"]["sampling_seed"] for d in datas} == {seed}
        assert all(d["seed"] == seed for d in datas)
    for r in sself.plan(fast=True):
        assert r.data()["protocol"]["params"]["sampling_seed"] == 0 and r.data()["name"] == "seed002-s0"


def _result(points: list[tuple[float, float]]) -> RunResult:
    rows = [{"virtual_time_s": str(2.0 * t), "accuracy": str(a)} for t, a in points]
    return RunResult(label="x", rows=rows, records=[], verified=True, verify_line="", wall_s=0.0, out=Path("."))


def test_asr_metric_is_the_mean_of_the_last_three_evaluations() -> None:
    rows = [{"accuracy": "0.8", "asr": a} for a in ("0.1", "nan", "0.9", "0.6", "0.3")]
    res = RunResult(label="x", rows=rows, records=[], verified=True, verify_line="", wall_s=0.0, out=Path("."))
    assert sself.asr_rounds(res) == pytest.approx((0.9 + 0.6 + 0.3) / 3)


def test_time_metrics() -> None:
    """§6.1: AUC = mean over τ = 1..30 of the latest accuracy by τ (0.1 before the first round); acc = mean of the
    last 3 evaluations within the budget; a round's commit latency (< GRACE) counts for the unit it closes."""
    deadline = _result([(k + 0.035, 0.5) for k in range(1, 31)])  # 30 rounds, 70 ms commit each
    assert sself.auc_time(deadline) == pytest.approx(0.5)
    wait = _result([(2.97 * k, 0.05 * k) for k in range(1, 12)])  # ~3 units a round: 10 rounds by τ = 30
    curve = sself.time_curve(wait)
    assert curve[:5] == [0.1, 0.1, 0.05, 0.05, 0.05] and curve[5] == 0.1 and curve[29] == 0.5
    # rounds k = 1..9 are the latest for 3 units each (from τ = 3k), round 10 for τ = 30; 2 units of 0.1 first
    assert sself.auc_time(wait) == pytest.approx((0.2 + 0.05 * (3 * sum(range(1, 10)) + 10)) / 30)
    assert sself.acc_time(wait) == pytest.approx(0.05 * (8 + 9 + 10) / 3)  # round 11 (32.7 units) is over budget
    stopped = _result([(1.0, 0.4), (2.0, 0.1)])  # a diverged run keeps its last model
    assert sself.auc_rounds(stopped, 4) == pytest.approx((0.4 + 0.1 * 3) / 4)
    assert math.isnan(sself.acc_rounds(_result([])))


def test_fast_reproduction(tmp_path: Path) -> None:
    """R2 model poisoning (seed 0, 12 rounds): FedAvg collapses, Sself does not (§6.3 A8 a, b); the −10·w models are
    over-confident and lose on F_pub (D1, D2); every R1 Sself block equals the independent recomputation (W1); the
    scaled backdoor (seed 0, 14 rounds, attack from round 11) backdoors FedAvg but not Sself (A9 a, b, e)."""
    report = sself.reproduce(tmp_path, fast=True, workers=2)
    path = write_report(tmp_path, report)
    failed = [f"{c.name}: {c.measured}" for c in report.claims if not c.passed]
    assert not failed, failed
    assert {c.name for c in report.claims} == {"A8-fasta", "A8-fastb", "A9-fasta", "A9-fastb", "A9-faste", "D1", "D2",
                                               "W1"}
    assert all(r.verified and "rounds re-executed" in r.verify_line for r in report.runs.values())
    assert report.ok and "Verdict: PASS" in path.read_text()
    assert (tmp_path / "accuracy_R2-MP.png").is_file() and (tmp_path / "asr_R3-scaled.png").is_file()


@pytest.mark.slow
def test_full_reproduction(tmp_path: Path) -> None:
    """The whole §6 reproduction (102 simulations): A1-A12, B1-B3, D1-D3, W1."""
    report = sself.reproduce(tmp_path, fast=False, workers=2)
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
