"""Adversarial-unavailability reproduction (benchmarks/repro/unavailability.py): the FAST subset through the real
simulator, the exact dropout statistics it is checked against, the full run (slow), and the full-scale scenarios'
missing-data message."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.repro import unavailability  # noqa: E402
from benchmarks.repro._common import write_report  # noqa: E402

FULL = sorted((ROOT / "scenarios" / "full").glob("unavailability_*.toml"))


def test_expected_drops_match_the_spec_table() -> None:
    """§3.4: E[#dropped] = 3.500 (ε = 0.8) and 1.915 (ε = 0.2) for M = 100, |C̃| = 35, K = 10."""
    assert unavailability.expected_drops(100, 35, 10, 0.8)[0] == pytest.approx(3.500, abs=5e-4)
    assert unavailability.expected_drops(100, 35, 10, 0.2)[0] == pytest.approx(1.915, abs=5e-4)
    assert unavailability.expected_drops(100, 35, 10, 0.5)[0] == pytest.approx(3.393, abs=5e-4)
    # ε = 1 still keeps one responder: at most K − 1 drops
    assert unavailability.expected_drops(10, 10, 10, 1.0) == (9.0, 0.0)


def test_fast_reproduction(tmp_path: Path) -> None:
    report = unavailability.reproduce(tmp_path, fast=True, workers=2)
    failed = [c for c in report.claims if not c.passed]
    assert not failed, failed
    assert {"R1-a", "R1-b (ε=0.8)", "R1-b (ε=0.2)", "R0-1", "R1-g"} <= {c.name for c in report.claims}
    assert len(report.runs) == 4 and all(r.verified for r in report.runs.values())
    path = write_report(tmp_path, report)
    assert "Verdict: PASS" in path.read_text()


@pytest.mark.slow
def test_full_reproduction(tmp_path: Path) -> None:
    report = unavailability.reproduce(tmp_path, fast=False, workers=2)
    write_report(tmp_path, report)
    assert len(report.runs) == len(unavailability.plan(fast=False)) == 28
    assert report.ok, [c for c in report.claims if not c.passed]


@pytest.mark.parametrize("path", FULL, ids=lambda p: p.name)
def test_full_scale_scenario_names_the_missing_cifar10_files(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from learning import DataError, model_spec, parse_availability, partition_spec, schedule_spec
    from learning.availability import AvailabilityContext
    from learning.strategies import strategy_from_params
    from sim._engine import Simulation
    from sim._scenario import load_scenario

    sc = load_scenario(path)
    # everything but the data files is a valid configuration
    strategy_from_params(sc.protocol.algorithm, dict(sc.protocol.params))
    model_spec(sc.model.name, dict(sc.model.params))
    partition_spec(sc.data.partition, {"num_clients": sc.members, **dict(sc.data.partition_params)})
    schedule_spec(sc.training.schedule, {"lr" if sc.training.schedule == "constant" else "lr0": sc.training.lr})
    parse_availability(sc.adversary.availability, AvailabilityContext(members=sc.members, sizes=(500,) * sc.members))
    monkeypatch.chdir(tmp_path)  # the relative data root resolves to an empty folder
    with pytest.raises(DataError) as err:
        Simulation(sc)
    msg = str(err.value)
    for name in ("data_batch_1.bin", "data_batch_5.bin", "test_batch.bin", "data/cifar10", "never download"):
        assert name in msg
