"""benchmarks/scale.py: the repeated, interleaved A/B runs and their summary (median, range, heads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.scale import growth_summary  # noqa: E402


def _row(rep: int, members: int, ms: float, rss: float, head: str = "ab" * 32) -> dict:
    return {"rep": rep, "members": members, "framework_ms_per_client": ms, "framework_cpu_ms_per_client": ms,
            "wall_per_round_s": ms, "peak_rss_mb": rss, "bytes_per_round": 1.0, "head": head}


def test_the_summary_gives_each_repetitions_growth_its_median_and_range_and_checks_the_heads():
    rows = [_row(1, 10, 2.0, 100), _row(1, 100, 3.0, 110), _row(2, 10, 2.0, 100), _row(2, 100, 2.0, 100),
            _row(3, 10, 4.0, 100), _row(3, 100, 5.0, 120)]
    text = growth_summary(rows, [10, 100], "this")
    assert "framework per client-round median 1.25x (range 1.00-1.50x, 3 repetitions: 1.50, 1.00, 1.25)" in text
    assert "cost at 100: median 3.00 ms (range 2.00-5.00 ms" in text
    assert "peak RSS median 1.10x (range 1.00-1.20x" in text
    assert "heads at 10: abababababababab (3 runs)" in text and "NOT THE SAME" not in text
    rows[-1]["head"] = "cd" * 32
    assert "heads at 100: abababababababab, cdcdcdcdcdcdcdcd (3 runs: NOT THE SAME)" in growth_summary(rows, [10, 100])
    one = growth_summary(rows[:2], [10, 100])
    assert "framework per client-round 1.50x" in one and "median" not in one


def _small_scale_scenario() -> str:
    """``scenarios/scale_10k.toml`` (the benchmark's own) cut to 6 clients and 6 local datasets."""
    text = (ROOT / "scenarios" / "scale_10k.toml").read_text(encoding="utf-8")
    for old, new in (("clients = 100", "clients = 6"), ("local_datasets = 100", "local_datasets = 6")):
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_an_ab_run_interleaves_the_two_trees_and_gives_the_same_heads(tmp_path):
    scenario = tmp_path / "small.toml"
    scenario.write_text(_small_scale_scenario(), encoding="utf-8")
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--members", "20", "40", "--rounds", "2",
         "--scenario", str(scenario), "--baseline", str(ROOT), "--baseline-scenario", str(scenario), "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=True,
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(r["tree"], r["rep"], r["members"]) for r in rows] == [
        ("baseline", 1, 20), ("baseline", 1, 40), ("this", 1, 20), ("this", 1, 40)]
    assert all(r["rounds"] == 2 and r["clients_per_round"] == 6 for r in rows)
    # the same checkout on both sides: the same ledger per member count
    assert {r["head"] for r in rows if r["members"] == 20} == {rows[0]["head"]}
    assert proc.stdout.count("40 vs 20 members (2x):") == 2 and "NOT THE SAME" not in proc.stdout
    assert all(r["consensus_per_round"] and r["nodes_made"] <= r["members"] for r in rows)
    assert "pbft messages per round: commit" in proc.stdout
    # two runs' --json files pooled: each tree's repetitions of both, kept apart
    pooled = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--members", "20", "40",
                             "--pool", str(out), str(out)], capture_output=True, text=True, timeout=60, check=True)
    assert pooled.stdout.count("40 vs 20 members (2x):") == 2 and "2 repetitions" in pooled.stdout
    assert "heads at 20: " + rows[0]["head"][:16] + " (2 runs)" in pooled.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--members", "5", "--rounds", "1",
                          "--scenario", str(scenario)], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "the run of 5 members" in bad.stderr and "exceeds members" in bad.stderr
