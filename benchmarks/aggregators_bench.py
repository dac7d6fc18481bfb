"""Aggregator benchmark (workload A1): concilium's rules against ByzFL's, on the same input, in the same run.

Workload A1 (``benchmarks/README.md``, "Reference workloads"): n = 50 updates of d = 1,000,000 float32 (seeded), f = 10.
Every rule is timed as the median of ``--repeat`` calls, ours and ByzFL's interleaved so both see the same machine
noise, next to ``np.mean`` (the floor). The figure of merit is the ratio ours / ByzFL measured in this run.

ByzFL is *not* a dependency of concilium. Install it into a separate, git-ignored environment and run the script
with the project's environment, appending ByzFL's site-packages (its aggregators need only numpy, scipy and torch,
which the project environment has)::

    python3.11 -m venv benchmarks/.venv-byzfl
    benchmarks/.venv-byzfl/bin/pip install --no-deps byzfl==0.0.11
    .venv/bin/python benchmarks/aggregators_bench.py --byzfl-site benchmarks/.venv-byzfl/lib/python3.11/site-packages

(``pip install byzfl`` with dependencies resolves a CUDA torch 2.14 and torchvision, several GB; and ``import byzfl``
fails next to the CPU torch because its ``__init__`` imports torchvision. The script therefore loads
``byzfl.aggregators`` under a stub parent package and never runs ``byzfl/__init__.py``.) Without ByzFL the script
still times our rules and prints "n/a" in the ByzFL columns.

    python benchmarks/aggregators_bench.py [--n 50] [--d 1000000] [--f 10] [--repeat 5] [--no-memory]
                                           [--workers K] [--only SUBSTR,...] [--json out.json]

Prints a markdown table: rule, ours (s, median), ByzFL (s, median), ratio, × np.mean, peak memory of one call of
each (tracemalloc, numpy buffers), and the largest difference between the two outputs (relative to the largest
output entry), which checks that both compute the same rule. BLAS threads are left as the machine has them.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learning import parse_aggregator  # noqa: E402


def load_byzfl(site: str | None) -> tuple[types.ModuleType | None, str]:
    """Import ``byzfl.aggregators`` without executing ``byzfl/__init__.py``; ``(None, reason)`` if unavailable."""
    if site:
        sys.path.append(site)
    spec = importlib.util.find_spec("byzfl")
    if spec is None or not spec.submodule_search_locations:
        return None, "not installed"
    if "byzfl" not in sys.modules:
        stub = types.ModuleType("byzfl")
        stub.__path__ = list(spec.submodule_search_locations)
        sys.modules["byzfl"] = stub
    try:
        module = importlib.import_module("byzfl.aggregators")
    except Exception as exc:  # noqa: BLE001 -- report any import failure of the optional competitor
        return None, f"import failed: {type(exc).__name__}: {exc}"
    try:
        version = importlib.metadata.version("byzfl")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown version"
    return module, version


@dataclass
class Case:
    label: str
    spec: str  # ours, as a spec string
    byzfl: Callable[[np.ndarray], np.ndarray] | None  # ByzFL on a fresh copy of the input (see `fresh`)
    fresh: bool = False  # ByzFL mutates its input: give it a copy (made outside the timed region)
    n: int | None = None  # a different number of inputs (MDA: ByzFL enumerates C(n, f) subsets)
    f: int | None = None
    note: str = ""


def cases(bz: types.ModuleType | None, f: int) -> list[Case]:
    def b(make: Callable[[types.ModuleType], Callable[[np.ndarray], np.ndarray]]) -> Callable[[np.ndarray], np.ndarray] | None:
        return None if bz is None else make(bz)

    mda_n, mda_f = 20, 4
    return [
        Case("Mean", "mean", b(lambda m: m.Average())),
        Case("Median", "median", b(lambda m: m.Median())),
        Case(f"TrMean(f={f})", f"trimmed_mean(f={f})", b(lambda m: m.TrMean(f))),
        Case("GeometricMedian (ν=0.1, T=3)", "geometric_median(nu=0.1, iterations=3)",
             b(lambda m: m.GeometricMedian(nu=0.1, T=3))),
        Case(f"Krum(f={f})", f"krum(f={f})", b(lambda m: m.Krum(f))),
        Case(f"MultiKrum(f={f})", f"multi_krum(f={f})", b(lambda m: m.MultiKrum(f))),
        # ByzFL's CenteredClipping keeps the last aggregate as its next centre: a fresh instance per call.
        Case("CenteredClipping (τ=100, L=1)", "centered_clipping(tau=100.0, iterations=1)",
             b(lambda m: lambda x: m.CenteredClipping(tau=100.0, L=1)(x))),
        Case("CenteredClipping (τ=100, L=3)", "centered_clipping(tau=100.0, iterations=3)",
             b(lambda m: lambda x: m.CenteredClipping(tau=100.0, L=3)(x))),
        Case(f"MeaMed(f={f})", f"meamed(f={f})", b(lambda m: m.Meamed(f))),
        Case(f"NNM(f={f}) → TrMean(f={f})", f"nnm(f={f}) > trimmed_mean(f={f})",
             b(lambda m: lambda x: m.TrMean(f)(m.NNM(f)(x)))),
        Case(f"ARC(f={f}) → Mean", f"arc(f={f}) > mean", b(lambda m: lambda x: m.Average()(m.ARC(f)(x))), fresh=True),
        Case("Clipping(c=2) → Mean", "clipping(c=2.0) > mean",
             b(lambda m: lambda x: m.Average()(m.Clipping(2.0)(x))), fresh=True),
        Case("Bucketing(s=2) → Mean", "bucketing(bucket_size=2) > mean",
             b(lambda m: lambda x: m.Average()(m.Bucketing(2)(x)))),
        Case(f"MDA(f={f})", f"mda(f={f})", None,
             note=f"ByzFL enumerates C(n, f) = {math.comb(50, f):.2e} subsets: not run"),
        Case(f"MDA(f={mda_f}), n={mda_n}", f"mda(f={mda_f})", b(lambda m: m.MDA(mda_f)), n=mda_n, f=mda_f),
    ]


def _workers() -> int:
    from learning import kernel_threads

    return kernel_threads()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def fmt_s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--d", type=int, default=1_000_000)
    ap.add_argument("--f", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--byzfl-site", default=None, help="site-packages directory holding byzfl (appended to sys.path)")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    ap.add_argument("--only", default=None, help="comma-separated prefixes of the rule labels to run")
    ap.add_argument("--json", default=None)
    ap.add_argument("--workers", type=int, default=None, help="threads of concilium's column-parallel kernels")
    args = ap.parse_args()
    if args.workers is not None:
        from learning import set_kernel_threads

        set_kernel_threads(max(1, args.workers))

    bz, bz_version = load_byzfl(args.byzfl_site)
    print(
        f"# A1 aggregation benchmark: n={args.n}, d={args.d:,} float32, f={args.f}, median of {args.repeat}\n"
        f"# python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
        f"concilium kernel threads={_workers()}, load average {os.getloadavg()[0]:.2f}, "
        f"ByzFL: {bz_version if bz is not None else 'n/a (' + bz_version + ')'}",
        flush=True,
    )
    inputs: dict[int, np.ndarray] = {}

    def data(n: int) -> np.ndarray:
        if n not in inputs:
            inputs[n] = np.random.default_rng(args.seed).standard_normal((n, args.d), dtype=np.float32)
        return inputs[n]

    rows = []
    for case in cases(bz, args.f):
        if args.only and not any(case.label.startswith(s.strip()) for s in args.only.split(",")):
            continue
        x = data(case.n or args.n)
        ours_rule = parse_aggregator(case.spec)

        def ours() -> np.ndarray:
            return ours_rule(x, rng=np.random.default_rng(1))  # noqa: B023

        theirs = case.byzfl
        copies: list[np.ndarray] = []

        def run_theirs() -> np.ndarray:
            assert theirs is not None
            return theirs(copies.pop() if case.fresh else x)  # noqa: B023

        def refill() -> None:
            if case.fresh:
                copies.append(x.copy())  # noqa: B023

        # Warm-up (and the outputs for the agreement check).
        out_ours = ours()
        out_theirs = None
        if theirs is not None:
            refill()
            out_theirs = np.asarray(run_theirs())
        t_ours, t_theirs, t_mean = [], [], []
        for _ in range(args.repeat):
            t_mean.append(timed(lambda: np.mean(x, axis=0)))  # noqa: B023
            t_ours.append(timed(ours))
            if theirs is not None:
                refill()
                t_theirs.append(timed(run_theirs))
        mem_ours = mem_theirs = None
        if not args.no_memory:
            mem_ours = peak_bytes(ours)
            if theirs is not None:
                refill()
                mem_theirs = peak_bytes(run_theirs)
        diff = None
        n_diff = 0
        if out_theirs is not None:
            scale = float(np.max(np.abs(out_theirs))) or 1.0
            gap = np.abs(out_ours.astype(np.float64) - out_theirs.astype(np.float64)) / scale
            diff = float(np.max(gap))
            n_diff = int(np.count_nonzero(gap > 1e-5))
        row = {
            "rule": case.label,
            "spec": case.spec,
            "n": case.n or args.n,
            "ours_s": statistics.median(t_ours),
            "byzfl_s": statistics.median(t_theirs) if t_theirs else None,
            "np_mean_s": statistics.median(t_mean),
            "ours_peak_mb": None if mem_ours is None else mem_ours / 2**20,
            "byzfl_peak_mb": None if mem_theirs is None else mem_theirs / 2**20,
            "max_rel_diff": diff,
            "coords_differing": n_diff,
            "note": case.note if theirs is None and bz is not None else ("" if bz is not None else "ByzFL n/a"),
        }
        rows.append(row)
        print(f"#   {case.label}: ours {row['ours_s']:.3f} s, ByzFL {fmt_s(row['byzfl_s'])} s", file=sys.stderr, flush=True)

    print()
    print(
        "| rule | ours (s, median of %d) | ByzFL (s) | ratio | × np.mean | peak MB ours / ByzFL "
        "| max rel. diff (coords > 1e-5) |" % args.repeat
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = "n/a" if r["byzfl_s"] is None else f"{r['ours_s'] / r['byzfl_s']:.2f}"
        xmean = f"{r['ours_s'] / r['np_mean_s']:.1f}"
        mem = "n/a" if r["ours_peak_mb"] is None else f"{r['ours_peak_mb']:.0f} / " + (
            "n/a" if r["byzfl_peak_mb"] is None else f"{r['byzfl_peak_mb']:.0f}"
        )
        diff = "n/a" if r["max_rel_diff"] is None else f"{r['max_rel_diff']:.1e} ({r['coords_differing']})"
        label = r["rule"] + (f" ({r['note']})" if r["note"] and r["note"] != "ByzFL n/a" else "")
        print(f"| {label} | {r['ours_s']:.3f} | {fmt_s(r['byzfl_s'])} | {ratio} | {xmean} | {mem} | {diff} |")
    floor = statistics.median(r["np_mean_s"] for r in rows if r["n"] == args.n) if rows else float("nan")
    print(f"\nnp.mean floor (n={args.n}): {floor:.4f} s")
    shared = [r for r in rows if r["byzfl_s"] is not None]
    if shared:
        worst = max(shared, key=lambda r: r["ours_s"] / r["byzfl_s"])
        print(
            f"worst ratio: {worst['ours_s'] / worst['byzfl_s']:.2f} ({worst['rule']}); "
            f"goal: every shared rule <= 1.0x ByzFL -> {'met' if all(r['ours_s'] <= r['byzfl_s'] for r in shared) else 'NOT met'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "byzfl": bz_version, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
