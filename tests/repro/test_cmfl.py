"""CMFL reproduction (benchmarks/repro/cmfl.py): the FAST subset through the real simulator (CMFL-I in committee
mode against FedAvg in coordinator mode under the bg10 attack), the §2.8.6 crafted-reference check on the committee's
own scoring functions, the run plan of §7.4, and the full run (slow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.repro import cmfl  # noqa: E402
from benchmarks.repro._common import write_report  # noqa: E402


def test_plan_is_the_spec_run_list() -> None:
    """§7.4: 47 runs (E1 9, E2 28 + 2 clean, E3 6, E4 2) plus the 4 runs of the §2.8.6 experiment; §1.3 sizes."""
    cells = cmfl.plan(fast=False)
    by_exp: dict[str, int] = {}
    for c in cells:
        by_exp[c.exp] = by_exp.get(c.exp, 0) + 1
    assert by_exp == {"E1": 9, "E2": 30, "E3": 6, "E4": 2, "S": 4}
    assert len({c.label for c in cells}) == len(cells) == 51
    sizes = {(c.omega, c.alpha): c.sizes() for c in cells}
    assert [(s.committee, s.training, s.aggregation) for s in (sizes[(0.4, 0.4)], sizes[(0.3, 0.4)], sizes[(0.5, 0.5)])] \
        == [(12, 18, 7), (9, 21, 8), (15, 15, 8)]
    # committee mode for CMFL, coordinator mode with the same n sampled clients for the baselines
    e2 = {c.method: cmfl.to_run(c, 5).data() for c in cells if c.exp == "E2" and c.attack == "bg10" and c.seed == 0}
    assert e2["cmfl1"]["protocol"]["mode"] == "committee" and e2["cmfl1"]["protocol"]["committee_size"] == 12
    assert e2["cmfl2"]["protocol"]["params"]["strategy"] == "II"
    for m in ("fedavg", "median", "trmean", "krum", "mkrum"):
        assert e2[m]["protocol"]["mode"] == "coordinator" and e2[m]["protocol"]["params"]["clients"] == 18
    assert e2["mkrum"]["protocol"]["params"]["aggregator"] == "multi_krum(f=2, q=7, variant='blanchard')"
    assert e2["cmfl1"]["adversary"] == {"byzantine": 30, "attack": "sign_flip(scale=10.0)"}
    assert e2["cmfl1"]["data"]["params"]["seed"] == 1000


def test_crafted_reference_steers_the_mean_score_not_the_median() -> None:
    """§7.8 item 9 with the committee's scoring functions (consensus.combine_scores on eq. 7 rows)."""
    res = cmfl.crafted_reference_check()
    assert res[(0, "mean")] == res[(0, "median")] == {"first": False, "bad_accepted": 0}
    for j in (1, 5):
        assert res[(j, "mean")]["first"] and res[(j, "mean")]["bad_accepted"] >= 1
        assert res[(j, "median")] == {"first": False, "bad_accepted": 0}


def test_fast_reproduction(tmp_path: Path, fast_all) -> None:  # noqa: ANN001
    report = fast_all.report("cmfl")  # cmfl.reproduce(out, fast=True, workers=2), run once (conftest.py)
    failed = [c for c in report.claims if not c.passed]
    assert not failed, failed
    assert {"S1", "R1-bg10 (fast)", "R5-bg10 (fast, I only)"} <= {c.name for c in report.claims}
    assert len(report.runs) == 2 and all(r.verified for r in report.runs.values())
    cmfl_run = report.runs["E2-bg10-cmfl1-s0"]
    assert all(r["strategy"] == "I" and len(r["training"]) == 18 and len(r["accepted"]) == 7 for r in cmfl_run.records)
    path = write_report(tmp_path, report)
    assert "Verdict: PASS" in path.read_text()


@pytest.mark.slow
def test_full_reproduction(tmp_path: Path) -> None:
    report = cmfl.reproduce(tmp_path, fast=False, workers=2)
    write_report(tmp_path, report)
    assert len(report.runs) == 51 and len(report.claims) == 21
    assert report.ok, [c for c in report.claims if not c.passed]
