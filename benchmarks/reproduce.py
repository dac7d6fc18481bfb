"""Reproduce a source paper's qualitative claims through ``concilium sim`` and write a markdown report.

    python benchmarks/reproduce.py PAPER [--fast] [--out DIR] [--workers 2] [--with-r5]
    python benchmarks/reproduce.py margins [--seeds N] [--fast] [--out DIR] [--workers 2]

``PAPER`` is ``unavailability`` (adversarial client unavailability), ``mimic`` (MimiC), ``sself`` (Sself),
``cmfl`` (CMFL, committee mode) or ``fedro`` (FedRo), or ``all``; the papers' former ids ``seed000`` …
``seed004`` (in that order) still work (``sim.PAPER_ALIASES``). Every run is a real simulation (elected
coordinator or CMFL committee, re-execution, pBFT, signatures, SQLite ledger verified with re-execution) on
embedded data; the claims and tolerances are those each paper's module (``benchmarks/repro/<paper>.py``) states
and checks. ``--fast`` runs the small subset the default test run checks. Exit status 0
iff every claim holds and every ledger verifies.

``all`` runs the five papers in turn (each into ``OUT/<paper>[-fast]/`` with its own ``REPORT.md``), then writes
one combined report, ``OUT/REPORT.md`` (``OUT/REPORT-fast.md`` with ``--fast``): per paper its claims table and
plots, and a section "Where the paper does not hold" with the spec-listed discrepancies as each runner measured
them. A runner that raises is recorded as an error in the combined report and the others still run.

``margins`` reruns only the runs of the three claims that passed by a thin margin (mimic B4-S4, unavailability R1-c,
sself A11a) over seeds ``0..N-1`` (default 10; the runners' own seeds are 0-2) and writes ``OUT/margins/margins.md``
and ``margins.json``: per claim the threshold (unchanged), the per-seed values, mean, sd, min, max, seeds passing
alone, the runner's own seed-averaged verdict and a 95 % interval of the mean over all seeds
(``benchmarks/repro/margins.py``). Exit status 0 iff every ledger verifies (the report, not the exit status, says
whether the claims hold).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.repro._common import PaperResult, write_combined_report, write_report  # noqa: E402
from sim import PAPER_ALIASES  # noqa: E402

PAPERS = ("unavailability", "mimic", "sself", "cmfl", "fedro")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed_id", metavar="PAPER", choices=(*PAPERS, "all", "margins", *PAPER_ALIASES),
                    help=f"{', '.join(PAPERS)}, all or margins (former ids: {', '.join(PAPER_ALIASES)})")
    ap.add_argument("--fast", action="store_true", help="the small subset the default test run checks")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "reproduce", help="report folder root")
    ap.add_argument("--workers", type=int, default=2, help="simulations run in parallel (processes)")
    ap.add_argument("--with-r5", action="store_true", help="fedro only: add the optional R5 runs (n̂ sweep, ~7 min)")
    ap.add_argument("--seeds", type=int, default=None, help="margins only: run seeds 0..N-1 (default 10)")
    args = ap.parse_args(argv)
    args.seed_id = PAPER_ALIASES.get(args.seed_id, args.seed_id)
    if args.with_r5 and args.seed_id not in ("fedro", "all"):
        ap.error("--with-r5 applies to fedro only")
    if args.seeds is not None and args.seed_id != "margins":
        ap.error("--seeds applies to margins only")
    if args.seed_id == "margins":
        n = 10 if args.seeds is None else args.seeds
        if n < 1:
            ap.error("--seeds must be at least 1")
        return run_margins(args.out, n, fast=args.fast, workers=args.workers)
    if args.seed_id != "all":
        return 0 if run_paper(args.seed_id, args.out, fast=args.fast, workers=args.workers,
                              with_r5=args.with_r5).ok else 1
    papers = []
    for sid in PAPERS:
        t0 = time.perf_counter()
        try:
            papers.append(run_paper(sid, args.out, fast=args.fast, workers=args.workers, with_r5=args.with_r5))
        except Exception as e:  # one paper's failure must not lose the others' results
            import traceback

            traceback.print_exc()
            papers.append(PaperResult(sid, args.out / (sid + ("-fast" if args.fast else "")),
                                      error=f"{type(e).__name__}: {e}", wall_s=time.perf_counter() - t0))
    path = write_combined_report(args.out, papers, fast=args.fast)
    ok = all(p.ok for p in papers)
    print(f"all: {'PASS' if ok else 'FAIL'} ({sum(p.ok for p in papers)}/{len(papers)} papers); combined report {path}",
          flush=True)
    return 0 if ok else 1


def run_margins(root: Path, seeds: int, *, fast: bool, workers: int = 2) -> int:
    """``margins``: the thin-margin claims over seeds ``0..seeds-1`` into ``root/margins[-fast]``."""
    from benchmarks.repro.margins import margins, write_margins

    out = root / ("margins" + ("-fast" if fast else ""))
    print(f"margins: seeds 0-{seeds - 1} ({'fast' if fast else 'full'}) into {out}/", flush=True)
    result = margins(out, seeds=range(seeds), workers=workers, fast=fast)
    md, _ = write_margins(out, result)
    for c in result.claims:
        r = c.runner
        print(f"  {c.claim}: runner's seeds {r['seeds']} {'pass' if r['passed'] else 'FAIL'}; "
              f"{sum(c.per_seed.values())}/{len(c.per_seed)} seeds pass alone; all seeds "
              f"{'pass' if c.all_seeds['passed'] else 'FAIL'}")
        for q in c.quantities:
            d = q.dist
            lo, hi = d.ci
            print(f"    {q.name} {q.formula} >= {d.threshold:g}: mean {d.mean:+.4f} sd {d.sd:.4f} "
                  f"[{d.min:+.4f}, {d.max:+.4f}], 95% CI [{lo:+.4f}, {hi:+.4f}]")
    verified = sum(r.verified for r in result.runs.values())
    print(f"margins: {verified}/{len(result.runs)} ledgers verified in {result.wall_s:.0f} s; report {md}", flush=True)
    return 0 if result.ok else 1


def run_paper(sid: str, root: Path, *, fast: bool, workers: int = 2, with_r5: bool = False) -> PaperResult:
    """Run one paper's reproduction into ``root/sid[-fast]``, write its report, print its claims and discrepancies."""
    mod = importlib.import_module(f"benchmarks.repro.{sid}")
    out = root / (sid + ("-fast" if fast else ""))
    t0 = time.perf_counter()
    print(f"{sid}: reproducing ({'fast' if fast else 'full'}) into {out}/", flush=True)
    extra = {"with_r5": True} if with_r5 and sid == "fedro" else {}
    report = mod.reproduce(out, fast=fast, workers=workers, **extra)
    path = write_report(out, report)
    for c in report.claims:
        print(f"  [{'pass' if c.passed else 'FAIL'}] {c.name}: {c.measured}")
    for d in report.discrepancies:
        tag = {True: "confirmed", False: "NOT confirmed", None: "not measured"}[d.confirmed]
        print(f"  [discrepancy {tag}] {d.name}: {d.measured}")
    wall = time.perf_counter() - t0
    print(f"{sid}: {'PASS' if report.ok else 'FAIL'} in {wall:.0f} s; report {path}", flush=True)
    return PaperResult(sid, out, report=report, wall_s=wall)


if __name__ == "__main__":
    raise SystemExit(main())
