"""What keeping every scored update costs, and the outlier margins the explorer marks by.

    python benchmarks/scored_blobs.py [--scenario quickstart] [--rounds 30] [--out DIR]

Runs a committee-mode scenario through ``concilium sim run`` (its results ledger and audit) and prints, per round:

* the blob files and bytes in ``ledger/blobs/`` (the genesis model included), against what the store kept before it
  kept the score rows' blobs: each block's accepted updates and its model (the same run, counted from its blocks);
* the score rows' distances relative to their round's median: the largest of the honest clients', the smallest of
  the Byzantine clients' (the explorer marks a distance above ``OUTLIER_DISTANCE_FACTOR`` = 10 times it);
* the members the explorer marks *mostly rejected* over the whole run, with rejected / trained.

The ledger head is printed too: keeping more blobs changes no block.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from consensus import parse_score_row, score_row_blobs  # noqa: E402
from ledger.store import open_ledger  # noqa: E402
from node.explorer import OUTLIER_DISTANCE_FACTOR, rejection_counts  # noqa: E402
from sim import resolve_scenario, run_scenario  # noqa: E402


def measure(out: Path) -> dict[str, object]:
    """The figures of one results folder (see the module docstring)."""
    summary = json.loads((out / "summary.json").read_text())
    byzantine = {"node-" + n.removeprefix("n") for n in summary["byzantine_clients"]}
    blob_dir = out / "ledger" / "blobs"
    sizes = {p.parent.name + p.name: p.stat().st_size for p in blob_dir.rglob("*") if p.is_file() and not p.name.startswith(".tmp")}
    store, _ = open_ledger(out / "ledger", readonly=True)
    with store:
        g = store.genesis()
        names = {m.peer_id: m.name for m in g.members}
        rounds = store.height()
        before = {g.model.digest.hex()}
        honest_max, byz_min = 0.0, float("inf")
        for h in range(1, rounds + 1):
            p = store.get(h).payload
            before.update(d.hex() for d in [u.digest for u in p.updates] + [p.model_digest])
            missing = [d for _, _, d in score_row_blobs(p.attestations) if d.hex() not in sizes]
            assert not missing, f"height {h}: {len(missing)} blobs of the score rows are not in the store"
            rows = [parse_score_row(a) for a in p.attestations]
            median = statistics.median(d for r in rows for d in r.distances.values())
            for r in rows:
                for k, d in r.distances.items():
                    if names[k] in byzantine:
                        byz_min = min(byz_min, d / median)
                    else:
                        honest_max = max(honest_max, d / median)
        marks = rejection_counts(store, window=rounds)["members"]
    return {
        "rounds": rounds,
        "head": summary["head_hash"][:16],
        "files_per_round": len(sizes) / rounds,
        "bytes_per_round": sum(sizes.values()) / rounds,
        "files_per_round_before": len(before) / rounds,
        "bytes_per_round_before": sum(sizes[d] for d in before) / rounds,
        "honest_max_over_median": honest_max,
        "byzantine_min_over_median": byz_min,
        "mostly_rejected": sorted(
            (names[p], v["rejected"], v["trained"], names[p] in byzantine) for p, v in marks.items() if v["mostly_rejected"]
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="quickstart")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", type=Path, help="results folder to write (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "run"
        run_scenario(resolve_scenario(args.scenario), out=out, rounds=args.rounds, progress=False, plots=False)
        m = measure(out)
    print(f"{args.scenario}, {m['rounds']} rounds, head {m['head']}")
    print(f"blobs/ per round: {m['files_per_round']:.2f} files, {m['bytes_per_round']:,.0f} bytes; "
          f"accepted updates and models only (the store before): {m['files_per_round_before']:.2f} files, "
          f"{m['bytes_per_round_before']:,.0f} bytes ({m['bytes_per_round'] / m['bytes_per_round_before']:.2f}x)")
    byz = m["byzantine_min_over_median"]
    print(f"distances over their round's median: honest clients at most {m['honest_max_over_median']:.2f}x, "
          + (f"Byzantine clients at least {byz:,.0f}x" if byz != float("inf") else "no Byzantine client")
          + f" (marked above {OUTLIER_DISTANCE_FACTOR:g}x)")
    marked = ", ".join(f"{n} {r}/{t}{' (Byzantine)' if b else ''}" for n, r, t, b in m["mostly_rejected"])  # type: ignore[union-attr]
    print(f"mostly rejected (rejected/trained): {marked or 'none'}")


if __name__ == "__main__":
    main()
