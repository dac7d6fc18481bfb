"""benchmarks/scored_blobs.py: its figures from a real results folder (a 3-round quickstart)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.scored_blobs import measure  # noqa: E402
from sim import resolve_scenario, run_scenario  # noqa: E402


def test_storage_per_round_and_outlier_margins_of_a_quickstart_run(tmp_path):
    out = tmp_path / "run"
    summary = run_scenario(resolve_scenario("quickstart"), out=out, rounds=3, progress=False, plots=False, workers=0)
    m = measure(out)
    assert m["rounds"] == 3 and m["head"] == summary["head_hash"][:16]
    files = sum(1 for p in (out / "ledger" / "blobs").rglob("*") if p.is_file())
    assert m["files_per_round"] == files / 3
    # before: each block's 8 accepted updates and its model (and the genesis model); now also the 4 rejected
    # updates and the 4 members' references of every round
    assert m["files_per_round_before"] == (1 + 3 * 9) / 3 and m["files_per_round"] == (1 + 3 * 17) / 3
    assert m["bytes_per_round"] > 1.8 * m["bytes_per_round_before"]
    assert m["honest_max_over_median"] < 10 < m["byzantine_min_over_median"]
    assert all(n.startswith("node-") for n, *_ in m["mostly_rejected"])
