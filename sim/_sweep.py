"""``concilium sim sweep``: one scenario over a grid of ``--set`` overrides and seeds, one results folder per run,
a table and a plot across them.

    concilium sim sweep SCENARIO --grid training.lr=0.01,0.05 [--grid KEY=V1,V2 ...] --seeds 0-4 --out DIR

Every combination of the grid's values (their product, in the order given) runs once per seed, into
``DIR/<k1=v1,k2=v2>/seed-<s>/`` (a full results folder: ledger, metrics, summary; its ``scenario.toml`` is the
effective scenario, so each run reproduces alone). Then ``DIR/sweep.csv`` (one row per run: the combination's folder name, the
overrides, the seed, final accuracy, rounds, view changes, the ledger's status and head), ``DIR/sweep.json`` (the same, and the
command) and ``DIR/sweep.png`` (final accuracy of each combination: the mean over its seeds, and each seed's
value). A sweep is only as good as its runs: the command exits 0 only if every run's ledger verifies with
re-execution (3 if some could not be re-executed here and none failed, 1 if one failed).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node import ConfigFileError

__all__ = ["GridAxis", "parse_grid", "parse_seeds", "run_sweep"]

RUNS_MAX = 1000
"""At most this many runs in one sweep (a typo in ``--seeds 0-99999`` would otherwise run for days)."""
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}(\.[A-Za-z_][A-Za-z0-9_-]{0,63})*$")


@dataclass(frozen=True, slots=True)
class GridAxis:
    """One ``--grid KEY=V1,V2,...``: a dotted scenario key and its values (each a ``--set`` value)."""

    key: str
    values: tuple[str, ...]


def parse_grid(items: Sequence[str]) -> list[GridAxis]:
    """``--grid`` options: ``KEY=V1,V2`` (values split on commas; a value holding a comma, such as a TOML list,
    goes in its own ``--grid KEY=[1, 2]`` with one value). Raises :class:`ConfigFileError` with one line."""
    axes: list[GridAxis] = []
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not _KEY.match(key) or not text.strip():
            raise ConfigFileError(f"--grid {item!r:.80}: expected KEY=V1,V2,... with KEY a dotted scenario key")
        values = (text,) if text.lstrip().startswith(("[", "{", '"')) else tuple(v.strip() for v in text.split(","))
        if any(not v for v in values) or len(set(values)) != len(values):
            raise ConfigFileError(f"--grid {item!r:.80}: empty or repeated values")
        if key in {a.key for a in axes}:
            raise ConfigFileError(f"--grid {item!r:.80}: {key} is given twice")
        axes.append(GridAxis(key, values))
    return axes


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``0-4``, ``1,3,7`` or a mix (``0-2,10``), each in ``[0, 2^31)``."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d{1,10})(?:-(\d{1,10}))?", part)
        if m is None:
            raise ConfigFileError(f"--seeds {text!r:.60}: expected seeds like 0-4 or 1,3,7")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo or hi >= 1 << 31 or hi - lo >= RUNS_MAX:
            raise ConfigFileError(f"--seeds {text!r:.60}: {part} is not a range of seeds in [0, 2^31)")
        seeds.extend(range(lo, hi + 1))
    if len(set(seeds)) != len(seeds):
        raise ConfigFileError(f"--seeds {text!r:.60}: a seed is repeated")
    return seeds


def _slug(combo: Sequence[tuple[str, str]]) -> str:
    text = ",".join(f"{k}={v}" for k, v in combo) or "base"
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)
    return safe[:150]


def run_sweep(
    scenario: str | os.PathLike[str],
    *,
    grid: Sequence[GridAxis],
    seeds: Sequence[int],
    out: str | os.PathLike[str],
    rounds: int | None = None,
    workers: int | None = None,
    progress: bool = True,
    command: str = "",
) -> dict[str, Any]:
    """Run the sweep (the module docstring) and return its summary (``rows``, ``status``: ``"ok"``,
    ``"not_reexecuted"`` or ``"fail"``). ``out`` must be new or empty. Bad input raises :class:`ConfigFileError`
    (checked, every combination loaded, before the first run)."""
    from sim._run import results_folder, run_scenario  # noqa: PLC0415
    from sim._scenario import load_scenario  # noqa: PLC0415

    combos = [list(zip([a.key for a in grid], values)) for values in itertools.product(*[a.values for a in grid])]
    runs = [(c, s) for c in combos for s in seeds]
    if len(runs) > RUNS_MAX:
        raise ConfigFileError(f"--grid/--seeds: {len(runs)} runs, at most {RUNS_MAX} in one sweep")
    for c in combos:  # every combination must load before anything runs
        load_scenario(scenario, rounds=rounds, sets=[f"{k}={v}" for k, v in c])
    slugs = [_slug(c) for c in combos]
    if len(set(slugs)) != len(slugs):
        raise ConfigFileError("--grid: two combinations map to one folder name; use simpler values")
    rows: list[dict[str, Any]] = []
    with results_folder(out, force=False) as build:
        for i, (combo, seed) in enumerate(runs, 1):
            folder = build / _slug(combo) / f"seed-{seed}"
            summary = run_scenario(scenario, out=folder, seed=seed, rounds=rounds, progress=False, workers=workers,
                                   plots=False, sets=[f"{k}={v}" for k, v in combo])
            row = {"combo": _slug(combo), **{k: v for k, v in combo}, "seed": seed, "final_accuracy": summary["final_accuracy"],
                   "rounds": summary["rounds"], "view_changes": summary["view_changes"],
                   "ledger_status": summary["ledger_status"], "head_hash": summary["head_hash"],
                   "folder": str(folder.relative_to(build))}
            rows.append(row)
            if progress:
                acc = summary["final_accuracy"]
                print(f"sweep: run {i}/{len(runs)} {_slug(combo)} seed {seed}: "
                      f"{'acc ' + format(acc, '.4f') if not math.isnan(acc) else 'no accuracy'}, ledger "
                      f"{summary['ledger_status']}", file=sys.stderr, flush=True)
        statuses = {r["ledger_status"] for r in rows}
        status = "fail" if "fail" in statuses else ("not_reexecuted" if "not_reexecuted" in statuses else "ok")
        columns = ["combo"] + [a.key for a in grid] + ["seed", "final_accuracy", "rounds", "view_changes", "ledger_status",
                                           "head_hash", "folder"]
        with open(build / "sweep.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(rows)
        result = {"scenario": str(scenario), "command": command, "grid": {a.key: list(a.values) for a in grid},
                  "seeds": list(seeds), "status": status, "rows": rows}
        (build / "sweep.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        _plot(build / "sweep.png", combos, seeds, rows)
    return result


def _plot(path: Path, combos: list[list[tuple[str, str]]], seeds: Sequence[int], rows: list[dict[str, Any]]) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    labels = [_slug(c) for c in combos]
    by = {lab: [r["final_accuracy"] for r in rows if r["combo"] == lab] for lab in labels}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(labels) + 2), 4))
    for x, lab in enumerate(labels):
        vals = [v for v in by[lab] if not math.isnan(v)]
        ax.scatter([x] * len(vals), vals, color="#2453a6", alpha=0.6, s=18)
        if vals:
            ax.scatter([x], [sum(vals) / len(vals)], color="black", marker="_", s=400)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("final accuracy")
    ax.set_title(f"final accuracy ({len(seeds)} seeds each; line: mean)", fontsize=10)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
