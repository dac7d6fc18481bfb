"""Shared machinery of the paper reproductions (``benchmarks/reproduce.py PAPER``).

Every run goes through the real simulator (``sim.run_scenario``): the elected coordinator, the committee
re-executing its aggregation, pBFT, Ed25519 signatures and the SQLite ledger, verified with re-execution
at the end of each run. A reproduction is a list of :class:`Run` (a scenario file plus overrides), run on
a process pool, then a list of :class:`Claim` checked against the measured numbers and written to a
markdown report with a table and plots.

Paper modules (``benchmarks/repro/<paper>.py``: ``unavailability``, ``mimic``, ``sself``, ``cmfl``, ``fedro``)
provide ``reproduce(out: Path, *, fast: bool, workers: int) -> Report``. ``fast`` is the small subset the default
test run checks (seconds to a minute); the full set is behind the ``slow`` marker and the command line.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = [
    "Claim",
    "Discrepancy",
    "PaperResult",
    "Report",
    "Run",
    "RunResult",
    "deep_merge",
    "last_mean",
    "run_all",
    "write_combined_report",
    "write_report",
]


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, tables recursively (``over`` wins on leaves)."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


@dataclass(frozen=True)
class Run:
    """One simulation: ``scenario`` (a file under ``scenarios/``) with ``overrides`` merged in."""

    label: str
    scenario: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    plots: bool = True
    """Write the run's own ``accuracy.png``/``acceptance.png`` (a sweep of many runs may skip them: with hundreds of
    members the acceptance bar chart costs seconds per run)."""

    def data(self) -> dict[str, Any]:
        with open(SCENARIOS / self.scenario, "rb") as f:
            base = tomllib.load(f)
        return deep_merge(base, {"name": self.label, **self.overrides})


@dataclass
class RunResult:
    """What a paper module needs from a run: per-round metrics, block records, the verification verdict."""

    label: str
    rows: list[dict[str, float | str]]
    records: list[dict[str, Any]]
    verified: bool
    verify_line: str
    wall_s: float
    out: Path

    def series(self, column: str) -> list[float]:
        return [float(r[column]) for r in self.rows]

    def accuracy(self) -> list[float]:
        return [a for a in self.series("accuracy") if not math.isnan(a)]


def _run_one(run: Run, out: Path) -> RunResult:
    from ledger.store import open_ledger
    from sim import run_scenario

    folder = out / "runs" / run.label
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    spec = out / "runs" / f"{run.label}.toml"
    spec.write_text(tomli_w.dumps(run.data()))
    summary = run_scenario(spec, out=folder, progress=False, plots=run.plots)
    with open(folder / "metrics.csv", newline="") as f:
        rows = [dict(r) for r in csv.DictReader(f)]
    store, _ = open_ledger(folder / "ledger", readonly=True, check_index=False)
    with store:
        records = [_plain(store.get(h).payload.record) for h in range(1, store.height() + 1)]
    return RunResult(
        label=run.label,
        rows=rows,
        records=records,
        # a run whose scenario makes committee members lie (cmfl's S2) verifies when the audit names their score
        # rows and nothing else (the audit recomputes every row from the stored updates)
        verified=bool(summary.get("ledger_valid_but_for_faulty_members", summary.get("ledger_verified", False))),
        verify_line=str(summary.get("ledger_verdict", "")) + (
            f" (as expected: {len(summary['ledger_findings'])} score rows of the scenario's lying members named)"
            if summary.get("ledger_findings") and not summary.get("ledger_verified") else ""
        ),
        wall_s=float(summary.get("wall_seconds", math.nan)),
        out=folder,
    )


def _verified_cell(r: RunResult) -> str:
    """The runs table's "ledger verified" cell: yes (with the lying rows the audit named, if any), or NO and why."""
    if not r.verified:
        return f"NO: {r.verify_line}"
    _, expected, rest = r.verify_line.partition(" (as expected: ")
    return f"yes ({rest}" if expected else "yes"


def _plain(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def run_all(runs: Sequence[Run], out: Path, *, workers: int = 2, log: Callable[[str], None] = print) -> dict[str, RunResult]:
    """Run every :class:`Run` (``workers`` processes); results by label, in the order given."""
    out.mkdir(parents=True, exist_ok=True)
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError("run labels must be unique")
    results: dict[str, RunResult] = {}
    if workers <= 1 or len(runs) == 1:
        for r in runs:
            results[r.label] = _run_one(r, out)
            log(f"  {r.label}: final accuracy {_final(results[r.label])}")
    else:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            futs = {r.label: ex.submit(_run_one, r, out) for r in runs}
            for label in labels:
                results[label] = futs[label].result()
                log(f"  {label}: final accuracy {_final(results[label])}")
    return {label: results[label] for label in labels}


def _final(res: RunResult) -> str:
    acc = res.accuracy()
    return f"{acc[-1]:.4f}" if acc else "n/a"


def last_mean(xs: Sequence[float], k: int) -> float:
    """Mean of the last ``k`` values (all if fewer)."""
    tail = [x for x in xs[-k:] if not math.isnan(x)]
    return sum(tail) / len(tail) if tail else math.nan


@dataclass(frozen=True)
class Claim:
    """One qualitative claim of a paper's reproduction section, with what we measured."""

    name: str
    statement: str
    measured: str
    passed: bool


@dataclass(frozen=True)
class Discrepancy:
    """A place where the paper does not hold (a discrepancy its spec lists), measured through our stack.

    ``paper`` is what the paper states or does; ``measured`` our numbers (never copied from the spec);
    ``explanation`` one paragraph. ``confirmed``: ``True`` if our measurement shows the discrepancy (the paper's
    statement does not hold here), ``False`` if we measured it and the paper's statement holds after all, ``None``
    if it was not measured in this run (``measured`` then says "not measured: why"). Discrepancies are findings,
    not claims: they do not enter :attr:`Report.ok`.
    """

    name: str
    paper: str
    measured: str
    explanation: str
    confirmed: bool | None


@dataclass
class Report:
    """A paper's reproduction: claims, tables (markdown), plots (PNG files in the report folder)."""

    seed_id: str
    title: str
    claims: list[Claim] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: dict[str, RunResult] = field(default_factory=dict)
    discrepancies: list[Discrepancy] = field(default_factory=list)
    """Where the paper does not hold (spec discrepancies measured by this run); reported, not gated."""

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.claims) and all(r.verified for r in self.runs.values())

    def check(self, name: str, statement: str, measured: str, passed: bool) -> None:
        self.claims.append(Claim(name, statement, measured, bool(passed)))

    def claim(self, name: str) -> Claim | None:
        """The claim called ``name``, if this run checked it."""
        return next((c for c in self.claims if c.name == name), None)

    def discrepancy(self, name: str, paper: str, measured: str, explanation: str, confirmed: bool | None) -> None:
        self.discrepancies.append(Discrepancy(name, paper, measured, explanation, confirmed))


def plot_curves(
    path: Path,
    title: str,
    curves: Mapping[str, Sequence[float]],
    *,
    ylabel: str = "test accuracy",
    xlabel: str = "round",
    xs: Mapping[str, Sequence[float]] | None = None,
) -> Path:
    """One line per curve; ``xs`` gives a curve's x values (default 1, 2, ...)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=110)
    for name, ys in curves.items():
        x = list(xs[name]) if xs is not None and name in xs else list(range(1, len(ys) + 1))
        ax.plot(x, ys, label=name, linewidth=1.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(x: Any) -> str:
        if isinstance(x, float):
            return "n/a" if math.isnan(x) else f"{x:.4f}"
        return str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(out: Path, report: Report) -> Path:
    """``out/REPORT.md`` (and ``out/report.json``): the claims table, the tables, the plots, the runs."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Reproduction of {report.seed_id}: {report.title}", ""]
    verdict = "PASS" if report.ok else "FAIL"
    lines += [f"**Verdict: {verdict}** ({sum(c.passed for c in report.claims)}/{len(report.claims)} claims hold; "
              f"{sum(r.verified for r in report.runs.values())}/{len(report.runs)} ledgers verified with re-execution)", ""]
    lines += ["## Claims", "", markdown_table(["claim", "statement", "measured", "result"],
              [(c.name, c.statement, c.measured, "pass" if c.passed else "FAIL") for c in report.claims]), ""]
    for t in report.tables:
        lines += [t, ""]
    for p in report.plots:
        lines += [f"![{p.stem}]({p.name})", ""]
    if report.discrepancies:
        lines += ["## Where the paper does not hold", ""] + _discrepancy_lines(report.discrepancies)
    if report.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    lines += ["## Runs", "", markdown_table(["run", "rounds", "final accuracy", "ledger verified", "wall s", "results"],
              [(r.label, len(r.rows), _final(r), _verified_cell(r), f"{r.wall_s:.1f}",
                os.path.relpath(r.out, out)) for r in report.runs.values()]), ""]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    (out / "report.json").write_text(json.dumps({
        "seed_id": report.seed_id, "ok": report.ok,
        "claims": [c.__dict__ for c in report.claims],
        "discrepancies": [d.__dict__ for d in report.discrepancies],
        "runs": {k: {"verified": r.verified, "final_accuracy": _final(r), "wall_s": r.wall_s} for k, r in report.runs.items()},
    }, indent=2))
    return path


def _verdict(confirmed: bool | None) -> str:
    return {True: "confirmed: the paper does not hold here", False: "not confirmed: the paper's statement holds here",
            None: "not measured in this run"}[confirmed]


def _discrepancy_lines(ds: Sequence[Discrepancy], level: str = "###") -> list[str]:
    lines: list[str] = []
    for d in ds:
        lines += [f"{level} {d.name} ({_verdict(d.confirmed)})", "", f"- **Paper:** {d.paper}",
                  f"- **Measured (our stack):** {d.measured}", "", d.explanation, ""]
    return lines


@dataclass
class PaperResult:
    """One paper's part of a combined report: its :class:`Report` and folder, or the error that stopped it."""

    seed_id: str
    out: Path
    report: Report | None = None
    error: str = ""
    wall_s: float = math.nan

    @property
    def ok(self) -> bool:
        return self.report is not None and not self.error and self.report.ok


def write_combined_report(root: Path, papers: Sequence[PaperResult], *, fast: bool) -> Path:
    """One markdown file for several papers (``benchmarks/reproduce.py all``), built from their :class:`Report` s.

    ``root/REPORT.md`` (``root/REPORT-fast.md`` for the fast subsets, so a fast run never overwrites a full one):
    a summary table, then per paper its claims table (claim, threshold as stated, measured, result) and its plots
    (links relative to ``root``, into the paper's own folder), then "Where the paper does not hold": every
    :class:`Discrepancy` the papers measured, with our numbers. Also ``root/report[-fast].json``.
    """
    root.mkdir(parents=True, exist_ok=True)
    kind = "fast subsets" if fast else "full runs"
    ok = all(p.ok for p in papers)
    lines = [f"# Paper reproductions ({kind})", "",
             f"**Verdict: {'PASS' if ok else 'FAIL'}** ({sum(p.ok for p in papers)}/{len(papers)} papers pass). "
             "Every measured number below comes from this run of `benchmarks/reproduce.py` through the simulator (or, "
             "where stated, from the project's own code); only the lines marked **Paper** quote the paper. Each "
             "paper's own report, with its tables, notes and runs, is linked.", "",
             markdown_table(["paper", "verdict", "claims", "ledgers verified", "discrepancies measured", "wall s",
                             "report"],
                            [_summary_row(root, p) for p in papers]), ""]
    for p in papers:
        lines += [f"## {p.seed_id}: {p.report.title if p.report else '(no report)'}", ""]
        if p.report is None:
            lines += [f"**The runner failed:** {p.error}", ""]
            continue
        r = p.report
        rows = [(c.name, _cell_text(c.statement), _cell_text(c.measured), "pass" if c.passed else "FAIL")
                for c in r.claims]
        lines += [markdown_table(["claim", "threshold (as stated)", "measured", "result"], rows), ""]
        if r.plots:
            lines += ["Plots: " + ", ".join(f"[{q.stem}]({_rel(q, root)})" for q in r.plots), ""]
            lines += [f"![{p.seed_id} {q.stem}]({_rel(q, root)})" for q in r.plots] + [""]
    lines += ["## Where the paper does not hold", "",
              "The discrepancies the specs list, each measured by this run through our stack (confirmed = our "
              "numbers show the paper's statement or procedure does not hold as printed).", ""]
    for p in papers:
        lines += [f"### {p.seed_id}", ""]
        if p.report is None:
            lines += [f"not measured: the runner failed ({p.error})", ""]
        elif not p.report.discrepancies:
            lines += ["not measured: this runner records no discrepancy.", ""]
        else:
            lines += _discrepancy_lines(p.report.discrepancies, level="####")
    suffix = "-fast" if fast else ""
    path = root / f"REPORT{suffix}.md"
    path.write_text("\n".join(lines))
    (root / f"report{suffix}.json").write_text(json.dumps({
        "fast": fast, "ok": ok,
        "papers": {p.seed_id: {
            "ok": p.ok, "error": p.error, "wall_s": p.wall_s, "folder": _rel(p.out, root),
            "claims": [c.__dict__ for c in p.report.claims] if p.report else [],
            "discrepancies": [d.__dict__ for d in p.report.discrepancies] if p.report else [],
        } for p in papers},
    }, indent=2))
    return path


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _cell_text(s: str) -> str:
    """A claim's text inside a table cell (pipes escaped, newlines flattened)."""
    return s.replace("|", "\\|").replace("\n", " ")


def _summary_row(root: Path, p: PaperResult) -> tuple[Any, ...]:
    if p.report is None:
        return (p.seed_id, "ERROR", "-", "-", "-", f"{p.wall_s:.0f}", _cell_text(p.error[:80]))
    r = p.report
    ds = r.discrepancies
    return (p.seed_id, "PASS" if r.ok else "FAIL", f"{sum(c.passed for c in r.claims)}/{len(r.claims)}",
            f"{sum(x.verified for x in r.runs.values())}/{len(r.runs)}",
            f"{sum(d.confirmed is not None for d in ds)}/{len(ds)}", f"{p.wall_s:.0f}",
            f"[{_rel(p.out / 'REPORT.md', root)}]({_rel(p.out / 'REPORT.md', root)})")
