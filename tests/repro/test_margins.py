"""Thin reproduction margins (benchmarks/repro/margins.py, ``reproduce.py margins``): the interval arithmetic, the
B4-S4 margins recomputed from the real runs' metrics (2 seeds, a few rounds) and the report files; all three claims
in the FAST configuration (slow)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import reproduce  # noqa: E402
from benchmarks.repro import margins, unavailability, mimic, sself  # noqa: E402
from benchmarks.repro._common import Report  # noqa: E402


def test_distribution_statistics() -> None:
    d = margins.Distribution((0, 1, 2, 3), (1.0, 2.0, 3.0, 4.0), 2.5)
    assert d.mean == 2.5 and d.min == 1.0 and d.max == 4.0 and d.passing == 2
    assert d.sd == pytest.approx(math.sqrt(5 / 3))  # sample sd: Σ(x − 2.5)² = 5 over n − 1 = 3
    assert margins.t_quantile(3) == pytest.approx(3.182446, abs=1e-6)  # the t table, 0.975, 3 degrees of freedom
    lo, hi = d.ci
    assert hi - 2.5 == pytest.approx(2.5 - lo) == pytest.approx(3.182446 * math.sqrt(5 / 3) / 2, abs=1e-6)
    assert d.subset((1, 3)).values == (2.0, 4.0)
    one = margins.Distribution((0,), (0.7,), 0.5)
    assert one.passing == 1 and math.isnan(one.sd) and all(math.isnan(x) for x in one.ci)


def test_runs_are_the_paper_runners_runs() -> None:
    """On the runners' own seeds, every margins run is the paper runner's run of that label (same scenario file and
    merged data, hence the same ledger); the extra seeds only add runs. No simulation."""
    by_claim = margins.plan(range(5))
    assert {k: len(v) for k, v in by_claim.items()} == {"B4-S4": 15, "R1-c": 20, "A11a": 10}
    runner = {r.label: r for r in (*unavailability.runs(fast=False), *mimic.plan(fast=False), *sself.plan(fast=False))}
    ours = [r for runs in by_claim.values() for r in runs]
    assert len({r.label for r in ours}) == len(ours) and not any(r.plots for r in ours)
    runner_seeds = {"B4-S4": mimic.SEEDS, "R1-c": unavailability.SEEDS, "A11a": sself.SEEDS}
    shared = 0
    for claim, runs in by_claim.items():
        for r in runs:
            seed = int(r.label.rsplit("-s", 1)[1])
            assert (r.label in runner) is (seed in runner_seeds[claim]), r.label
            if r.label in runner:
                assert r.scenario == runner[r.label].scenario and r.data() == runner[r.label].data(), r.label
                shared += 1
    assert shared == 3 * len(mimic.SEEDS) + 4 * len(unavailability.SEEDS) + 2 * len(sself.SEEDS) == 23


def _pct_accuracy(res) -> list[float]:  # type: ignore[no-untyped-def]
    return [100.0 * float(r["accuracy"]) for r in res.rows if not math.isnan(float(r["accuracy"]))]


def test_b4_margins_from_the_runs(tmp_path: Path) -> None:
    """Two seeds of S4 (FedAvg, MIFA, MimiC), a few rounds: every per-seed value equals the claim's quantity
    recomputed here from the run's own metrics.csv; mean/sd/min/max/passing/interval follow; the verdicts are
    mimic.check_b4's; both report files hold the numbers."""
    res = margins.margins(tmp_path, seeds=(1, 0), workers=2, fast=True, claims=("B4-S4",), log=lambda _: None)
    assert res.seeds == (0, 1) and len(res.runs) == 6 and all(r.verified for r in res.runs.values())
    assert all(len(r.rows) == margins.FAST_ROUNDS["mimic"] for r in res.runs.values())
    (claim,) = res.claims
    assert claim.claim == "B4-S4" and claim.consistent and res.ok

    def metric(method: str, seed: int) -> tuple[float, float]:
        acc = _pct_accuracy(res.runs[f"S4-{method}-s{seed}"])
        return statistics.fmean(acc[-10:]), statistics.pstdev(acc[-30:])  # last10, osc (§6.1)

    want = {
        "B4a-S4": [metric("MimiC", s)[0] - metric("FedAvg", s)[0] for s in (0, 1)],
        "B4b-S4": [0.5 * metric("FedAvg", s)[1] - metric("MimiC", s)[1] for s in (0, 1)],
        "B4c-S4": [metric("MimiC", s)[0] - metric("MIFA", s)[0] for s in (0, 1)],
    }
    thresholds = {"B4a-S4": -1.0, "B4b-S4": 0.0, "B4c-S4": -1.5}
    qs = {q.name: q.dist for q in claim.quantities}
    assert set(qs) == set(want)
    for name, vals in want.items():
        d = qs[name]
        assert d.seeds == (0, 1) and d.threshold == thresholds[name]
        assert d.values == pytest.approx(vals, abs=1e-9)
        assert d.mean == pytest.approx(sum(vals) / 2) and d.min == min(d.values) and d.max == max(d.values)
        assert d.sd == pytest.approx(abs(vals[0] - vals[1]) / math.sqrt(2))
        assert d.passing == sum(v >= thresholds[name] for v in d.values)
        half = 12.706205 * d.sd / math.sqrt(2)  # t(0.975, 1)
        assert d.ci == pytest.approx((d.mean - half, d.mean + half), rel=1e-6)
    for s in (0, 1):  # each seed's verdict from the module: all three quantities of that seed clear their threshold
        assert claim.per_seed[s] is all(v[s] >= thresholds[k] for k, v in want.items())
    scratch = Report("t", "t")
    mimic.check_b4(scratch, res.runs, (0, 1), ("S4",))
    assert claim.runner["passed"] is all(c.passed for c in scratch.claims)
    assert claim.runner["seeds"] == [0, 1] and claim.runner["partial"]  # the runner's seeds are 0-2
    assert claim.runner["measured"].startswith("B4a-S4: " + scratch.claims[0].measured)

    md, js = margins.write_margins(tmp_path, res)
    text = md.read_text()
    assert "Thin reproduction margins over 2 seeds (0, 1)" in text and "FAST configuration" in text
    assert "6/6 ledgers verified" in text
    for name, d in qs.items():
        lo, hi = d.ci
        assert f"| {d.passing}/2 | {d.mean:+.2f} | {d.sd:.2f} | {d.min:+.2f} | {d.max:+.2f} | [{lo:+.2f}, {hi:+.2f}] |" \
            in text, name
    data = json.loads(js.read_text())
    got = data["claims"]["B4-S4"]["quantities"]
    for name, d in qs.items():
        assert got[name]["values"] == list(d.values) and got[name]["ci95"] == list(d.ci)
        assert got[name]["sd"] == d.sd and got[name]["passing"] == d.passing and got[name]["threshold"] == d.threshold
    assert data["ok"] is True and set(data["runs"]) == set(res.runs)


def test_cli_rejects_seeds_for_papers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        reproduce.main(["mimic", "--seeds", "3"])
    assert "--seeds applies to margins only" in capsys.readouterr().err


@pytest.mark.slow
def test_all_claims_fast(tmp_path: Path) -> None:
    """The three claims' runs (2 seeds, FAST): every ledger verified, verdicts consistent, R1-c's runner seeds
    complete (unavailability runs seeds 0 and 1)."""
    assert reproduce.main(["margins", "--seeds", "2", "--fast", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "margins-fast" / "margins.json").read_text())
    assert list(data["claims"]) == list(margins.CLAIMS) and len(data["runs"]) == 18
    assert all(r["verified"] for r in data["runs"].values())
    assert data["claims"]["R1-c"]["runner"]["partial"] is False
    assert set(data["claims"]["R1-c"]["quantities"]) == {"R1-c (FedAvg)", "R1-c (FedProx)"}
