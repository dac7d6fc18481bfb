"""Thin reproduction margins over more seeds: ``benchmarks/reproduce.py margins``.

Three claims of the paper runners passed on their seed average by a thin margin: seed 001 **B4-S4** (scheme 3, P =
0.1: B4a last10(MimiC) − last10(FedAvg) ≥ −1 pp, B4b osc(MimiC) ≤ 0.5 osc(FedAvg), B4c last10(MimiC) −
last10(MIFA) ≥ −1.5 pp), seed 000 **R1-c** (at ε = 0.8, rough(FedAvg_v) ≤ rough(FedAvg) and rough(FedProx_v) ≤
rough(FedProx)) and seed 002 **A11a** (R4 label flip: acc(Sself) − acc(wait+RFA) ≥ +0.05). This module reruns only
the runs those claims need, over seeds ``0..N−1`` (the runners' own seeds among them, so their figures come back
bit for bit), with each paper module's own run builders (``run_for``), runners (``run_all`` / ``run_many``, every
ledger verified with re-execution as the paper runner does it), metrics and claim checks (``check_b4``,
``check_r1c``, ``check_a11a``). Thresholds are the paper runners'; nothing here changes them.

Each claim is split into *quantities* that are linear in the per-seed metrics, so that the runner's seed-averaged
statistic is the mean of the per-seed values: B4a ``last10(MimiC) − last10(FedAvg)`` ≥ −1.0 pp, B4b ``0.5·osc(FedAvg)
− osc(MimiC)`` ≥ 0 pp (the claim's ``osc(MimiC) ≤ 0.5·osc(FedAvg)``, on means), B4c ``last10(MimiC) −
last10(MIFA)`` ≥ −1.5 pp, R1-c ``rough(FedAvg) − rough(FedAvg_v)`` ≥ 0 and ``rough(FedProx) − rough(FedProx_v)`` ≥ 0,
A11a ``acc(Sself) − acc(wait+RFA)`` ≥ 0.05. Per quantity the report gives the per-seed values, mean, sample standard
deviation, min, max, how many seeds pass on their own, the mean over the runner's seeds, and the mean over all seeds
with a 95 % interval ``mean ± t(0.975, n−1)·sd/√n``. Per claim it gives the module's own verdict on the runner's
seeds (the statistic the paper runner gates), on each seed alone and on all seeds; the per-seed verdicts are checked
against the quantities (``consistent``), so the thresholds here cannot drift from the modules'.

The runs skip their own per-run plots (``Run.plots``), which the ledgers and metrics do not see.
``fast``: a tiny configuration for the default tests (few rounds; seed 000 evaluates every 2 rounds so that its
roughness has points to difference). Its numbers are not the claims' and are not to be read as such.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.repro import unavailability, mimic, sself
from benchmarks.repro._common import Report, Run, RunResult, deep_merge, markdown_table, run_all

__all__ = [
    "CLAIMS",
    "ClaimResult",
    "Distribution",
    "MarginsResult",
    "Quantity",
    "margins",
    "plan",
    "t_quantile",
    "write_margins",
]

CLAIMS = ("B4-S4", "R1-c", "A11a")
"""The thin-margin claims, in report order."""

FAST_ROUNDS = {"unavailability": 6, "mimic": 3, "sself": 3, "sself-wait": 1}
"""``fast``: rounds per run (seed 002's wait-for-stragglers rounds last ~3 time units each)."""
FAST_EVAL_EVERY = 2
"""``fast``: seed 000 evaluates every 2 rounds (3 points, 1 difference in the second half)."""


# --- statistics ----------------------------------------------------------------------------------------------


def t_quantile(df: int, q: float = 0.975) -> float:
    """Student-t quantile ``t(q, df)`` (scipy, of the dev extra); NaN for ``df < 1``."""
    if df < 1:
        return math.nan
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


@dataclass(frozen=True)
class Distribution:
    """Per-seed values of one quantity against its threshold (a seed passes alone iff its value ≥ threshold)."""

    seeds: tuple[int, ...]
    values: tuple[float, ...]
    threshold: float

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def sd(self) -> float:
        """Sample standard deviation (n − 1); NaN below two seeds."""
        return statistics.stdev(self.values) if self.n > 1 else math.nan

    @property
    def min(self) -> float:
        return min(self.values, default=math.nan)

    @property
    def max(self) -> float:
        return max(self.values, default=math.nan)

    @property
    def passing(self) -> int:
        return sum(v >= self.threshold for v in self.values)

    @property
    def half_width(self) -> float:
        """``t(0.975, n−1)·sd/√n`` (NaN below two seeds)."""
        return t_quantile(self.n - 1) * self.sd / math.sqrt(self.n) if self.n > 1 else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        """The 95 % interval of the mean, ``mean ± t·sd/√n``."""
        return self.mean - self.half_width, self.mean + self.half_width

    def subset(self, seeds: Sequence[int]) -> Distribution:
        keep = [(s, v) for s, v in zip(self.seeds, self.values, strict=True) if s in set(seeds)]
        return Distribution(tuple(s for s, _ in keep), tuple(v for _, v in keep), self.threshold)


@dataclass(frozen=True)
class Quantity:
    """One gated quantity of a claim: what it is, its threshold, and its distribution over the seeds."""

    name: str
    formula: str
    unit: str
    dist: Distribution


@dataclass
class ClaimResult:
    """A thin-margin claim: its quantities, and the paper module's own verdicts (runner's seeds, each seed, all)."""

    claim: str
    paper: str
    statement: str
    runner_seeds: tuple[int, ...]
    quantities: list[Quantity]
    runner: dict[str, Any]
    """The module's check on the runner's seeds that ran: ``seeds``, ``measured`` (its text), ``passed``, and
    ``partial`` (some of the runner's seeds were not run)."""
    per_seed: dict[int, bool]
    """The module's check on each seed alone."""
    all_seeds: dict[str, Any]
    """The module's check on all the seeds run: ``measured``, ``passed``."""

    @property
    def consistent(self) -> bool:
        """Each seed's verdict from the module equals "every quantity of that seed ≥ its threshold"."""
        for j, s in enumerate(self.quantities[0].dist.seeds):
            own = all(q.dist.values[j] >= q.dist.threshold for q in self.quantities)
            if self.per_seed.get(s) is not own:
                return False
        return True


@dataclass
class MarginsResult:
    seeds: tuple[int, ...]
    fast: bool
    claims: list[ClaimResult]
    runs: dict[str, RunResult] = field(default_factory=dict)
    wall_s: float = math.nan

    @property
    def ok(self) -> bool:
        """Every ledger verified and every claim's per-seed verdicts consistent with its quantities. (Not whether the
        claims pass: that is what the report shows.)"""
        return bool(self.runs) and all(r.verified for r in self.runs.values()) and all(c.consistent for c in self.claims)


# --- the three claims ----------------------------------------------------------------------------------------


def _verdict(check: Callable[[Report], None], name: str) -> tuple[str, bool]:
    """Run one of a paper module's checks into a scratch report; the claim ``name``'s measured text and verdict."""
    scratch = Report("scratch", "scratch")
    check(scratch)
    c = scratch.claim(name)
    assert c is not None, name
    return c.measured, c.passed


def _verdicts(seeds: tuple[int, ...], runner_seeds: tuple[int, ...], check: Callable[[Report, Sequence[int]], None],
              names: Sequence[str]) -> tuple[dict[str, Any], dict[int, bool], dict[str, Any]]:
    """The module's verdicts on the runner's seeds, on each seed, on all seeds (a claim of several module claims,
    B4 = B4a, B4b, B4c, passes iff each does)."""

    def on(ss: Sequence[int]) -> tuple[str, bool]:
        parts = [_verdict(lambda r: check(r, ss), n) for n in names]
        text = "; ".join(f"{n}: {m}" if len(names) > 1 else m for n, (m, _) in zip(names, parts, strict=True))
        return text, all(p for _, p in parts)

    ran = tuple(s for s in runner_seeds if s in seeds)
    runner: dict[str, Any] = {"seeds": list(ran), "partial": ran != runner_seeds, "measured": "", "passed": None}
    if ran:
        runner["measured"], runner["passed"] = on(ran)
    per_seed = {s: on((s,))[1] for s in seeds}
    text, ok = on(seeds)
    return runner, per_seed, {"measured": text, "passed": ok}


def _b4_runs(seeds: Sequence[int], fast: bool) -> list[Run]:
    rounds = FAST_ROUNDS["mimic"] if fast else mimic.ROUNDS
    return [replace(mimic.run_for("S4", m, s, rounds), plots=False) for s in seeds for m in mimic.B4_METHODS]


def _b4(results: Mapping[str, RunResult], seeds: tuple[int, ...]) -> ClaimResult:
    def per(s: int, method: str) -> mimic.Stats:
        st = mimic.summary(results, "S4", method, (s,))
        assert st is not None, (s, method)
        return st

    def dist(f: Callable[[int], float], threshold: float) -> Distribution:
        return Distribution(seeds, tuple(f(s) for s in seeds), threshold)

    qs = [
        Quantity("B4a-S4", "last10(MimiC) − last10(FedAvg)", "pp",
                 dist(lambda s: per(s, "MimiC").last10 - per(s, "FedAvg").last10, -1.0)),
        Quantity("B4b-S4", "0.5·osc(FedAvg) − osc(MimiC)", "pp",
                 dist(lambda s: 0.5 * per(s, "FedAvg").osc - per(s, "MimiC").osc, 0.0)),
        Quantity("B4c-S4", "last10(MimiC) − last10(MIFA)", "pp",
                 dist(lambda s: per(s, "MimiC").last10 - per(s, "MIFA").last10, -1.5)),
    ]
    runner, per_seed, every = _verdicts(
        seeds, mimic.SEEDS, lambda r, ss: mimic.check_b4(r, results, ss, ("S4",)),
        ("B4a-S4", "B4b-S4", "B4c-S4"))
    return ClaimResult("B4-S4", "mimic", "S4 (scheme 3, P = 0.1): last10(MimiC) ≥ last10(FedAvg) − 1.0 pp, "
                       "osc(MimiC) ≤ 0.5 osc(FedAvg), last10(MimiC) ≥ last10(MIFA) − 1.5 pp (means over seeds)",
                       mimic.SEEDS, qs, runner, per_seed, every)


def _r1c_runs(seeds: Sequence[int], fast: bool) -> list[Run]:
    out = []
    for s in seeds:
        for algo in unavailability.R1C_ALGORITHMS:
            rounds = FAST_ROUNDS["unavailability"] if fast else None
            run = replace(unavailability.run_for(algo, 0.8, s, rounds=rounds), plots=False)
            if fast:
                run = replace(run, overrides=deep_merge(run.overrides, {"eval_every": FAST_EVAL_EVERY}))
            out.append(run)
    return out


def _r1c(stats: Mapping[tuple[str, int], unavailability.RunStats], seeds: tuple[int, ...]) -> ClaimResult:
    def cell(ss: Sequence[int]) -> dict[tuple[str, float], unavailability.Cell]:
        return unavailability.cells({st.label: st for (_, s), st in stats.items() if s in set(ss)})

    qs = [Quantity(f"R1-c ({naive})", f"rough({naive}) − rough({naive}_v)", "loss",
                   Distribution(seeds, tuple(stats[(naive, s)].rough - stats[(f"{naive}_v", s)].rough
                                             for s in seeds), 0.0))
          for naive in ("FedAvg", "FedProx")]
    runner, per_seed, every = _verdicts(seeds, unavailability.SEEDS,
                                        lambda r, ss: unavailability.check_r1c(r, cell(ss)), ("R1-c",))
    return ClaimResult("R1-c", "unavailability",
                       "at ε = 0.8: rough(FedAvg_v) ≤ rough(FedAvg) and rough(FedProx_v) ≤ rough(FedProx) "
                       "(means over seeds)",
                       unavailability.SEEDS, qs, runner, per_seed, every)


def _a11a_runs(seeds: Sequence[int], fast: bool) -> list[sself.SeedRun]:
    out = []
    for s in seeds:
        for scheme in sself.A11A_SCHEMES:
            rounds = None
            if fast:
                rounds = FAST_ROUNDS["sself-wait" if scheme.startswith("wait") else "sself"]
            out.append(replace(sself.run_for("R4-LF", scheme, s, rounds=rounds), plots=False))
    return out


def _a11a(results: Mapping[str, tuple[RunResult, sself.Outcome]], seeds: tuple[int, ...]) -> ClaimResult:
    def acc(scheme: str, s: int) -> float:
        return sself.acc_time(results[sself.run_for("R4-LF", scheme, s).label][0])  # R4 is timed: acc at budget

    values = tuple(acc("Sself", s) - acc("wait-RFA", s) for s in seeds)
    qs = [Quantity("A11a", "acc(Sself) − acc(wait+RFA)", "accuracy", Distribution(seeds, values, 0.05))]
    runner, per_seed, every = _verdicts(seeds, sself.SEEDS, lambda r, ss: sself.check_a11a(r, results, ss),
                                        ("A11a",))
    return ClaimResult("A11a", "sself", "R4 label flip: acc(Sself) − acc(wait+RFA) ≥ +0.05 (mean over seeds)",
                       sself.SEEDS, qs, runner, per_seed, every)


# --- entry point ---------------------------------------------------------------------------------------------


def plan(seeds: Sequence[int], *, fast: bool = False) -> dict[str, Sequence[Run]]:
    """The runs of each claim over ``seeds``, by claim (the paper modules' own runs; only their per-run plots are
    skipped, which the ledgers and metrics do not see)."""
    return {"B4-S4": _b4_runs(seeds, fast), "R1-c": _r1c_runs(seeds, fast), "A11a": _a11a_runs(seeds, fast)}


def margins(out: Path, *, seeds: Sequence[int], workers: int = 2, fast: bool = False,
            claims: Sequence[str] = CLAIMS, log: Callable[[str], None] = print) -> MarginsResult:
    """Rerun the runs of ``claims`` over ``seeds`` into ``out/<paper>/``, verify every ledger, compute the margins.

    Each paper's runs go through that paper's own runner (seed 000 under one BLAS thread per process, as its
    reproduction runs). Returns the claims (see :class:`ClaimResult`) and every run by label."""
    from threadpoolctl import threadpool_limits

    bad = [c for c in claims if c not in CLAIMS]
    if bad:
        raise ValueError(f"unknown claims {bad}; known: {', '.join(CLAIMS)}")
    ss = tuple(sorted(set(int(s) for s in seeds)))
    if not ss:
        raise ValueError("need at least one seed")
    t0 = time.perf_counter()
    result = MarginsResult(seeds=ss, fast=fast, claims=[])
    found: dict[str, ClaimResult] = {}
    if "R1-c" in claims:
        runs = _r1c_runs(ss, fast)
        log(f"margins: R1-c (unavailability), {len(runs)} runs into {out / 'unavailability'}/")
        with threadpool_limits(limits=1):  # as unavailability.reproduce: one BLAS thread per process
            res = run_all(runs, out / "unavailability", workers=workers, log=log)
            stats = {(algo, s): unavailability.analyse_run(res[unavailability.run_for(algo, 0.8, s).label],
                                                           algo, 0.8, s)
                     for s in ss for algo in unavailability.R1C_ALGORITHMS}
        result.runs |= res
        found["R1-c"] = _r1c(stats, ss)
    if "B4-S4" in claims:
        runs = _b4_runs(ss, fast)
        log(f"margins: B4-S4 (mimic), {len(runs)} runs into {out / 'mimic'}/")
        res = run_all(runs, out / "mimic", workers=workers, log=log)
        result.runs |= res
        found["B4-S4"] = _b4(res, ss)
    if "A11a" in claims:
        runs2 = _a11a_runs(ss, fast)
        order = sorted(runs2, key=lambda r: -int(r.overrides["rounds"]))  # longest first, for the pool
        log(f"margins: A11a (sself), {len(runs2)} runs into {out / 'sself'}/")
        res2 = sself.run_many(order, out / "sself", workers)
        result.runs |= {r.label: res2[r.label][0] for r in runs2}
        found["A11a"] = _a11a(res2, ss)
    result.claims = [found[c] for c in CLAIMS if c in found]
    result.wall_s = time.perf_counter() - t0
    return result


# --- report --------------------------------------------------------------------------------------------------


def _f(x: float, unit: str) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:+.2f}" if unit == "pp" else f"{x:+.4f}"


def _seeds_text(seeds: Sequence[int]) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _yn(x: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "n/a"}[x]


def write_margins(out: Path, result: MarginsResult) -> tuple[Path, Path]:
    """``out/margins.md`` and ``out/margins.json``."""
    out.mkdir(parents=True, exist_ok=True)
    n = len(result.seeds)
    lines = [f"# Thin reproduction margins over {n} seeds ({_seeds_text(result.seeds)})", ""]
    if result.fast:
        lines += ["**FAST configuration (a few rounds per run): these numbers test the machinery, they are not the "
                  "claims' margins.**", ""]
    verified = sum(r.verified for r in result.runs.values())
    lines += [f"{len(result.runs)} simulations through the paper modules' own runners, {verified}/{len(result.runs)} "
              f"ledgers verified with re-execution; wall {result.wall_s:.0f} s. Thresholds are the paper runners' "
              "(unchanged). A quantity's value per seed is the claim's own statistic on that seed alone; the runner "
              "gates its mean over the runner's seeds. 95 % interval: mean ± t(0.975, n−1)·sd/√n, sd the sample "
              "standard deviation.", ""]
    rows = []
    for c in result.claims:
        for q in c.quantities:
            d = q.dist
            r = d.subset(c.runner_seeds)
            lo, hi = d.ci
            rows.append((c.claim, f"{q.formula} ≥ {_f(d.threshold, q.unit)} ({q.unit})", _f(r.mean, q.unit),
                         f"{d.passing}/{d.n}", _f(d.mean, q.unit), _f(d.sd, q.unit).lstrip("+"), _f(d.min, q.unit),
                         _f(d.max, q.unit), f"[{_f(lo, q.unit)}, {_f(hi, q.unit)}]",
                         "yes" if lo >= d.threshold else ("no" if not math.isnan(lo) else "n/a")))
    lines += ["## Margins per quantity", "", markdown_table(
        ["claim", "quantity ≥ threshold", "mean, runner's seeds", "seeds passing alone", f"mean, {n} seeds",
         "sd", "min", "max", "95 % interval", "interval clears threshold"], rows), ""]
    rows = []
    for c in result.claims:
        r = c.runner
        seeds_r = ", ".join(map(str, r["seeds"])) + (" (partial)" if r["partial"] else "")
        rows.append((c.claim, c.paper, c.statement, f"{seeds_r}: {_yn(r['passed'])}",
                     f"{sum(c.per_seed.values())}/{len(c.per_seed)}",
                     f"{_yn(c.all_seeds['passed'])}", "yes" if c.consistent else "NO"))
    lines += ["## Claims (the paper module's own check)", "", markdown_table(
        ["claim", "paper", "statement", "runner's seeds: verdict", "seeds passing alone", f"{n} seeds: verdict",
         "per-seed verdicts = quantities"], rows), ""]
    for c in result.claims:
        lines += [f"### {c.claim} ({c.paper})", "",
                  f"- runner's seeds ({', '.join(map(str, c.runner['seeds']))}): {c.runner['measured'] or 'n/a'}",
                  f"- all {n} seeds: {c.all_seeds['measured']}", ""]
        header = ["seed"] + [f"{q.name}: {q.formula} ({q.unit})" for q in c.quantities] + ["module verdict"]
        seeds = c.quantities[0].dist.seeds
        body = [(s, *(_f(q.dist.values[j], q.unit) for q in c.quantities), _yn(c.per_seed[s]))
                for j, s in enumerate(seeds)]
        lines += [markdown_table(header, body), ""]
    lines += ["## Runs", "", markdown_table(["run", "rounds", "ledger verified", "wall s"], [
        (k, len(r.rows), "yes" if r.verified else f"NO: {r.verify_line}", f"{r.wall_s:.1f}")
        for k, r in result.runs.items()]), ""]
    md = out / "margins.md"
    md.write_text("\n".join(lines))
    js = out / "margins.json"
    js.write_text(json.dumps(_finite(_json(result)), indent=2, allow_nan=False))
    return md, js


def _finite(v: Any) -> Any:
    """NaN → null (strict JSON)."""
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _json(result: MarginsResult) -> dict[str, Any]:
    def dist(d: Distribution) -> dict[str, Any]:
        lo, hi = d.ci
        return {"seeds": list(d.seeds), "values": list(d.values), "threshold": d.threshold, "n": d.n,
                "mean": d.mean, "sd": d.sd, "min": d.min, "max": d.max, "passing": d.passing,
                "t": t_quantile(d.n - 1), "ci95": [lo, hi]}

    return {
        "seeds": list(result.seeds), "fast": result.fast, "ok": result.ok, "wall_s": result.wall_s,
        "claims": {c.claim: {
            "paper": c.paper, "statement": c.statement, "runner_seeds": list(c.runner_seeds),
            "runner": c.runner, "per_seed": {str(s): v for s, v in c.per_seed.items()}, "all_seeds": c.all_seeds,
            "consistent": c.consistent,
            "quantities": {q.name: {"formula": q.formula, "unit": q.unit, **dist(q.dist),
                                    "runner_mean": q.dist.subset(c.runner_seeds).mean} for q in c.quantities},
        } for c in result.claims},
        "runs": {k: {"verified": r.verified, "verdict": r.verify_line, "rounds": len(r.rows), "wall_s": r.wall_s}
                 for k, r in result.runs.items()},
    }
