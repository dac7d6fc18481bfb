"""Reproduction of "Federated Learning in the Presence of Adversarial Client Unavailability" (Su, Xu, Yang).

The paper ``unavailability`` (formerly ``seed000``; README, "Papers"). Spec unavailability spec §6.2 (R1, the "CIFAR-mimic" on
balanced Synthetic(1,1)) run through the real simulator: every algorithm is a coordinator-mode strategy (``fedavg``,
``fedavg_v``, ``mifa``, ``fedprox``, ``fedprox_v``, ``cclip``, ``gm``, ``bucketing_cclip``, ``bucketing_gm``), the
adversary is the §3.3 ε-budgeted greedy dropout (``eps_adversarial``) applied by the simulator between the sampled
clients and the coordinator, and every ledger is verified with re-execution. Scenario files:
``scenarios/unavailability_{fedavg,fedprox,robust}.toml``.

Measured per run, from the ledger (not from the simulator's own counters):

* ``S̃_t`` = the block record's sampled ``clients``, ``S_t`` = the round's updates in the block, and
  ``ε_t = Σ_{S̃_t∖S_t} n_i / (K N/M)`` (§1.3 item 7, :func:`learning.dropout_fraction`);
* "train loss" = the global objective on the pooled training data of **all** members (§7 item 18), evaluated on
  every committed model; test accuracy is the simulator's (pooled test set, every ``eval_every`` rounds);
* ``final_loss`` = mean of the last 10 % of the train-loss points taken every ``eval_every`` rounds, ``rough`` =
  mean ``|L_{k+1} − L_k|`` over the second half of those points (§6.2 "Derived metrics").

Departures from §6.2, all documented in the report's notes: the candidate set is ``random:35`` instead of the shadow
runs' (same dropout statistics, §3.4: ``#dropped = min(X, ⌊εK⌋)``, ``X ~ HG(100, 35, 10)``), and the four robust
baselines run the first of the spec's two seeds only (time budget; the other five algorithms run both and the claims
compare seed averages); the spec's η/μ values (calibrated on the reference prototype) are used as they are. The
FAST subset (the default test run) runs FedAvg and FedAvg_v at both ε for 40 rounds and checks R1-a, R1-b (with a
3-standard-error tolerance), R1-g and the variant's aggregation identity (R0 item 1) on the committed records.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.repro._common import (
    Report,
    Run,
    RunResult,
    last_mean,
    markdown_table,
    plot_curves,
    run_all,
)

__all__ = [
    "ALGORITHMS",
    "Cell",
    "R1C_ALGORITHMS",
    "RunStats",
    "analyse_run",
    "cells",
    "check_r1c",
    "discrepancy_participants",
    "expected_drops",
    "member_index",
    "plan",
    "reproduce",
    "run_for",
    "runs",
]

#: label → (scenario file, registered strategy); the order of the spec's tables.
ALGORITHMS: dict[str, tuple[str, str]] = {
    "FedAvg": ("unavailability_fedavg.toml", "fedavg"),
    "FedAvg_v": ("unavailability_fedavg.toml", "fedavg_v"),
    "MIFA": ("unavailability_fedavg.toml", "mifa"),
    "FedProx": ("unavailability_fedprox.toml", "fedprox"),
    "FedProx_v": ("unavailability_fedprox.toml", "fedprox_v"),
    "cclip": ("unavailability_robust.toml", "cclip"),
    "GM": ("unavailability_robust.toml", "gm"),
    "b-cclip": ("unavailability_robust.toml", "bucketing_cclip"),
    "b-GM": ("unavailability_robust.toml", "bucketing_gm"),
}
ROBUST = ("cclip", "GM", "b-cclip", "b-GM")
EPSILONS = (0.8, 0.2)
CANDIDATES = 35
FAST_ALGORITHMS = ("FedAvg", "FedAvg_v")
FAST_ROUNDS = 40
SEEDS = (0, 1)
"""The spec's seeds (§6.2); the robust baselines, the expensive runs, use the first only (time budget)."""


def _label(algo: str, eps: float, seed: int = 0) -> str:
    return f"{algo}-eps{eps}-s{seed}"


def _availability(eps: float) -> str:
    return f"eps_adversarial(eps={eps}, candidates='random:{CANDIDATES}')"


def plan(*, fast: bool) -> list[tuple[str, float, int]]:
    """``(algorithm, ε, seed)`` of every simulation (FAST: FedAvg and FedAvg_v at both ε, seed 0)."""
    out = []
    for seed in (SEEDS[:1] if fast else SEEDS):
        for eps in EPSILONS:
            for algo in FAST_ALGORITHMS if fast else ALGORITHMS:
                if seed == SEEDS[0] or algo not in ROBUST:
                    out.append((algo, eps, seed))
    return out


def run_for(algo: str, eps: float, seed: int, *, rounds: int | None = None) -> Run:
    """The simulation of ``algo`` at ``ε`` with ``seed`` (``rounds``: override the scenario's T)."""
    scenario, strategy = ALGORITHMS[algo]
    over: dict[str, Any] = {
        "seed": seed,
        "protocol": {"algorithm": strategy},
        "adversary": {"availability": _availability(eps)},
    }
    if rounds is not None:
        over["rounds"] = rounds
    return Run(_label(algo, eps, seed), scenario, over)


def runs(*, fast: bool) -> list[Run]:
    """The simulations of the reproduction, in :func:`plan` order (FAST: few rounds)."""
    return [run_for(algo, eps, seed, rounds=FAST_ROUNDS if fast else None) for algo, eps, seed in plan(fast=fast)]


# ---------------------------------------------------------------------------------------------------------------
# Exact dropout statistics of the balanced case (§3.4)


def _hypergeom_pmf(pop: int, marked: int, draws: int) -> list[float]:
    total = math.comb(pop, draws)
    return [math.comb(marked, j) * math.comb(pop - marked, draws - j) / total for j in range(draws + 1)]


def expected_drops(members: int, candidates: int, clients: int, eps: float) -> tuple[float, float]:
    """Mean and standard deviation of ``#dropped = min(X, ⌊εK⌋, K − 1)``, ``X ~ HG(M, |C̃|, K)`` (§3.4, balanced).

    ``⌊εK⌋`` is computed on the decimal ``ε`` prints as (the availability model's exact budget).
    """
    from fractions import Fraction

    cap = min(math.floor(Fraction(repr(float(eps))) * clients), clients - 1)
    pmf = _hypergeom_pmf(members, candidates, clients)
    mean = sum(p * min(j, cap) for j, p in enumerate(pmf))
    var = sum(p * (min(j, cap) - mean) ** 2 for j, p in enumerate(pmf))
    return mean, math.sqrt(var)


# ---------------------------------------------------------------------------------------------------------------
# Per-run measurements from the ledger


@dataclass(frozen=True)
class RunStats:
    """What the claims need from one run (lists are per committed round, in round order)."""

    label: str
    algo: str
    eps: float
    seed: int
    clients: int
    sampled: list[int]
    included: list[int]
    eps_t: list[float]
    subset_ok: bool
    dropped_in_candidates: bool
    unavailable_consistent: bool
    train_loss: list[float]
    eval_loss: list[float]
    accuracy: list[float]
    records: list[Mapping[str, Any]]

    @property
    def final_loss(self) -> float:
        return last_mean(self.eval_loss, max(1, len(self.eval_loss) // 10))

    @property
    def final_acc(self) -> float:
        return last_mean(self.accuracy, max(1, len(self.accuracy) // 10))

    @property
    def rough(self) -> float:
        half = self.eval_loss[len(self.eval_loss) // 2 :]
        steps = [abs(b - a) for a, b in zip(half, half[1:])]
        return sum(steps) / len(steps) if steps else math.nan


@dataclass(frozen=True)
class Cell:
    """One (algorithm, ε) over its seeds: the seed-averaged metrics of §6.2."""

    runs: tuple[RunStats, ...]

    def _mean(self, attr: str) -> float:
        return sum(getattr(r, attr) for r in self.runs) / len(self.runs)

    @property
    def final_loss(self) -> float:
        return self._mean("final_loss")

    @property
    def final_acc(self) -> float:
        return self._mean("final_acc")

    @property
    def rough(self) -> float:
        return self._mean("rough")


def cells(stats: Mapping[str, RunStats]) -> dict[tuple[str, float], Cell]:
    """Runs grouped by (algorithm, ε), in :data:`ALGORITHMS` order."""
    out: dict[tuple[str, float], list[RunStats]] = {}
    for s in sorted(stats.values(), key=lambda r: (list(ALGORITHMS).index(r.algo), -r.eps, r.seed)):
        out.setdefault((s.algo, s.eps), []).append(s)
    return {k: Cell(tuple(v)) for k, v in out.items()}


class _Pooled:
    """The pooled training data, the trainer and the member sizes of a scenario's data (cached per data config)."""

    _cache: dict[str, _Pooled] = {}

    def __init__(self, scenario_path: Path) -> None:
        import torch

        from learning import Dataset
        from sim import Simulation, load_scenario

        sim = Simulation(load_scenario(scenario_path))
        data = sim.client_data
        self.train = Dataset(
            x=torch.cat([d.x for d in data]), y=torch.cat([d.y for d in data]), num_classes=data[0].num_classes,
            name="pooled-train",
        )
        self.trainer = sim.trainer
        self.sizes = [len(d) for d in data]

    @classmethod
    def of(cls, scenario_path: Path) -> _Pooled:
        with open(scenario_path, "rb") as f:
            data = tomllib.load(f)
        key = repr((data.get("members"), data.get("seed"), data.get("data"), data.get("model")))
        if key not in cls._cache:
            cls._cache[key] = cls(scenario_path)
        return cls._cache[key]

    def loss(self, vector: np.ndarray) -> float:
        import torch

        return float(self.trainer.evaluate(torch.from_numpy(np.array(vector, dtype=np.float32)), self.train).loss)


def member_index(genesis: Any) -> dict[str, int]:
    """Peer id → the simulator's member index (the genesis names member ``i`` ``node-i``)."""
    return {m.peer_id: int(m.name.rsplit("-", 1)[1]) for m in genesis.members}


def analyse_run(res: RunResult, algo: str, eps: float, seed: int) -> RunStats:
    """Read ``res``'s ledger: per round ``S̃_t``, ``S_t``, ``ε_t`` and the train loss of the committed model."""
    from learning import blob_to_vector, dropout_fraction, resolve_candidates
    from ledger.store import open_ledger

    spec = res.out.parent / f"{res.label}.toml"
    pooled = _Pooled.of(spec)
    with open(spec, "rb") as f:
        scenario = tomllib.load(f)
    every = int(scenario.get("eval_every", 1))
    rounds = int(scenario["rounds"])
    cand = set(resolve_candidates(f"random:{CANDIDATES}", pooled.sizes, seed=0))
    sampled, included, eps_t, train_loss, eval_loss = [], [], [], [], []
    subset_ok = in_cand = consistent = True
    store, blobs = open_ledger(res.out / "ledger", readonly=True, check_index=False)
    with store:
        index = member_index(store.genesis())
        for h in range(1, store.height() + 1):
            block = store.get(h)
            rec = block.payload.record
            s_tilde = [index[p] for p in rec["clients"]]
            s_t = [index[u.peer] for u in block.payload.updates if u.fl_round == h]
            gone = sorted(set(s_tilde) - set(s_t))
            subset_ok &= set(s_t) <= set(s_tilde) and len(set(s_tilde)) == len(s_tilde)
            in_cand &= set(gone) <= cand
            consistent &= int(float(res.rows[h - 1]["unavailable"])) == len(gone)
            sampled.append(len(s_tilde))
            included.append(len(s_t))
            eps_t.append(dropout_fraction(pooled.sizes, gone, clients=len(s_tilde)))
            loss = pooled.loss(blob_to_vector(blobs.get(block.payload.model_digest)))
            train_loss.append(loss)
            if h % every == 0 or h == rounds:
                eval_loss.append(loss)
    return RunStats(
        label=res.label,
        algo=algo,
        eps=eps,
        seed=seed,
        clients=max(sampled) if sampled else 0,
        sampled=sampled,
        included=included,
        eps_t=eps_t,
        subset_ok=subset_ok,
        dropped_in_candidates=in_cand,
        unavailable_consistent=consistent,
        train_loss=train_loss,
        eval_loss=eval_loss,
        accuracy=res.accuracy(),
        records=res.records,
    )


# ---------------------------------------------------------------------------------------------------------------
# Claims


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4f}"


def _check_budget(report: Report, stats: Mapping[str, RunStats]) -> None:
    """R1-a: every round of every run obeys Assumption 2, ``S_t ⊆ S̃_t``, ``|S_t| ≥ 1``, drops only candidates."""
    worst = max((max(s.eps_t) - s.eps for s in stats.values()), default=math.nan)
    min_s = min((min(s.included) for s in stats.values()), default=0)
    k_ok = all(all(k == s.clients for k in s.sampled) for s in stats.values())
    subset = all(s.subset_ok and s.dropped_in_candidates and s.unavailable_consistent for s in stats.values())
    rounds = sum(len(s.eps_t) for s in stats.values())
    report.check(
        "R1-a",
        "Assumption 2 every round of every run: ε_t ≤ ε, S_t ⊆ S̃_t, |S̃_t| = K, |S_t| ≥ 1, drops ⊆ C̃ "
        "(S̃_t, S_t read from the ledger)",
        f"{rounds} rounds: max(ε_t − ε) = {worst:+.3f}, min |S_t| = {min_s}, subsets/candidates/counters ok: {subset}",
        worst <= 1e-9 and min_s >= 1 and k_ok and subset,
    )


def _check_statistics(report: Report, stats: Mapping[str, RunStats], members: int, fast: bool) -> None:
    """R1-b: mean ε_t and mean |S_t| match the exact hypergeometric expectation (§3.4)."""
    for eps in EPSILONS:
        group = [s for s in stats.values() if s.eps == eps]
        if not group:
            continue
        k = group[0].clients
        mean, sd = expected_drops(members, CANDIDATES, k, eps)
        parts, ok = [], True
        for s in group:
            t = len(s.eps_t)
            # the spec's tolerances (0.03, 0.3) hold for T = 300; a shorter run widens them to 3 standard errors
            tol_e = max(0.03, 3 * sd / k / math.sqrt(t)) if fast else 0.03
            tol_s = max(0.3, 3 * sd / math.sqrt(t)) if fast else 0.3
            me = sum(s.eps_t) / t
            ms = sum(s.included) / t
            ok &= abs(me - mean / k) <= tol_e and abs(ms - (k - mean)) <= tol_s
            parts.append(f"{s.label}: {me:.3f}/{ms:.2f}")
        report.check(
            f"R1-b (ε={eps})",
            f"mean ε_t ≈ E/K = {mean / k:.3f} and mean |S_t| ≈ K − E = {k - mean:.3f}, E = E[min(X, ⌊εK⌋)], "
            f"X ~ HG({members}, {CANDIDATES}, {k}) (tolerances 0.03 / 0.3{'; fast: ≥ 3 s.e.' if fast else ''})",
            "mean ε_t / mean |S_t|: " + ", ".join(parts),
            ok,
        )


def _check_identity(report: Report, stats: Mapping[str, RunStats], members: int) -> None:
    """R0 item 1 on the committed records: the variant's step is ``β n_{S_t}/N`` (no renormalisation)."""
    worst, n = 0.0, 0
    ok = True
    for s in stats.values():
        if s.algo not in ("FedAvg_v", "FedProx_v"):
            continue
        for rec, inc in zip(s.records, s.included):
            beta = float(rec["beta"])
            want = beta * inc / members
            worst = max(worst, abs(float(rec["step"]) - want))
            ok &= len(rec["weights"]) == inc and abs(beta - members / s.clients) < 1e-12
            n += 1
    report.check(
        "R0-1",
        "variant aggregation (eq. 2): β = M/K, one weight w_i = 1/M per survivor, global step β·n_{S_t}/N = β|S_t|/M "
        "(the naive rule would renormalise to 1), read from every committed record",
        f"{n} records, max |step − β|S_t|/M| = {worst:.2e}",
        ok and n > 0 and worst <= 1e-12,
    )


def _check_adversary_hurts(report: Report, cell: Mapping[tuple[str, float], Cell]) -> None:
    """R1-g: for every algorithm, final train loss at ε = 0.8 exceeds that at ε = 0.2 (seed-averaged)."""
    parts, ok, n = [], True, 0
    for algo in ALGORITHMS:
        hi, lo = cell.get((algo, 0.8)), cell.get((algo, 0.2))
        if hi is None or lo is None:
            continue
        ok &= hi.final_loss > lo.final_loss
        n += 1
        parts.append(f"{algo} {hi.final_loss:.3f} > {lo.final_loss:.3f}")
    report.check("R1-g", "the adversary hurts: final train loss(ε=0.8) > final train loss(ε=0.2) for every algorithm",
                 "; ".join(parts), ok and n > 0)


R1C_ALGORITHMS = ("FedAvg", "FedAvg_v", "FedProx", "FedProx_v")
"""The runs R1-c compares (at ε = 0.8)."""


def check_r1c(report: Report, cell: Mapping[tuple[str, float], Cell]) -> None:
    """R1-c: rough(variant) ≤ rough(naive) at ε = 0.8, FedAvg and FedProx, on the metrics averaged over the seeds
    of ``cell`` (plus a note with the per-seed ratios). Needs the four :data:`R1C_ALGORITHMS` at ε = 0.8 only."""
    def st(algo: str, eps: float) -> Cell:
        return cell[(algo, eps)]

    ra, rv = st("FedAvg", 0.8).rough, st("FedAvg_v", 0.8).rough
    pa, pv = st("FedProx", 0.8).rough, st("FedProx_v", 0.8).rough
    report.check(
        "R1-c", "our variants progress smoother at ε = 0.8: rough(FedAvg_v) ≤ rough(FedAvg), "
        "rough(FedProx_v) ≤ rough(FedProx)",
        f"FedAvg_v {rv:.4f} vs FedAvg {ra:.4f} (ratio {rv / ra:.2f}); FedProx_v {pv:.4f} vs FedProx {pa:.4f} "
        f"(ratio {pv / pa:.2f})",
        rv <= ra and pv <= pa,
    )
    per_seed = []
    for naive, var in (("FedAvg", "FedAvg_v"), ("FedProx", "FedProx_v")):
        ratios = [v.rough / n.rough for n, v in zip(st(naive, 0.8).runs, st(var, 0.8).runs, strict=True)]
        per_seed.append(f"{var}/{naive} " + ", ".join(f"{x:.2f}" for x in ratios))
    report.notes.append("R1-c per seed (rough ratio variant/naive at ε = 0.8, seeds in order): " + "; ".join(per_seed)
                        + ". The roughness of one seed (14 differences of points 10 rounds apart) is noisy; the spec "
                        "gates the seed average (its calibration: ratio < 1 in 23 of 24 seed pairs).")


def _check_full(report: Report, cell: Mapping[tuple[str, float], Cell]) -> None:
    """R1-c … R1-h (need all nine algorithms); metrics averaged over the seeds each algorithm ran."""
    def st(algo: str, eps: float) -> Cell:
        return cell[(algo, eps)]

    check_r1c(report, cell)
    la, lv = st("FedAvg", 0.8).final_loss, st("FedAvg_v", 0.8).final_loss
    lp, lpv = st("FedProx", 0.8).final_loss, st("FedProx_v", 0.8).final_loss
    report.check(
        "R1-d", "variants not worse at ε = 0.8: final_loss(variant) ≤ 1.03 × final_loss(naive), FedAvg and FedProx",
        f"FedAvg_v {lv:.4f} vs FedAvg {la:.4f} (ratio {lv / la:.3f}); FedProx_v {lpv:.4f} vs FedProx {lp:.4f} "
        f"(ratio {lpv / lp:.3f})",
        lv <= 1.03 * la and lpv <= 1.03 * lp,
    )
    best_var = min(lv, lpv)
    rob = {a: st(a, 0.8).final_loss for a in ROBUST}
    best_rob = min(rob.values())
    report.check(
        "R1-e", "Byzantine-resilient algorithms lag behind at ε = 0.8: min robust final_loss ≥ 1.02 × "
        "min(final_loss FedAvg_v, FedProx_v)",
        "robust " + ", ".join(f"{a} {v:.4f}" for a, v in rob.items()) + f"; best variant {best_var:.4f} "
        f"(ratio {best_rob / best_var:.3f})",
        best_rob >= 1.02 * best_var,
    )
    gm = st("GM", 0.2).final_loss
    others = {a: st(a, 0.2).final_loss for a in ("cclip", "b-cclip", "b-GM")}
    report.check(
        "R1-f", "\"except the naive GM\" at ε = 0.2: final_loss(GM) ≥ max(cclip, b-cclip, b-GM)",
        f"GM {gm:.4f} vs " + ", ".join(f"{a} {v:.4f}" for a, v in others.items()),
        gm >= max(others.values()),
    )
    accs = {a: st(a, 0.2).final_acc for a in ("FedAvg", "FedAvg_v", "MIFA")}
    spread = max(accs.values()) - min(accs.values())
    report.check(
        "R1-h", "all FedAvg-type algorithms comparable at ε = 0.2: max − min final test accuracy over "
        "{FedAvg, FedAvg_v, MIFA} ≤ 0.10",
        ", ".join(f"{a} {v:.4f}" for a, v in accs.items()) + f"; spread {spread:.4f}",
        spread <= 0.10,
    )


def _soft_notes(report: Report, cell: Mapping[tuple[str, float], Cell]) -> None:
    """§6.2's soft checks: recorded, not gated."""
    def fl(a: str, e: float) -> float:
        return cell[(a, e)].final_loss

    def fa(a: str, e: float) -> float:
        return cell[(a, e)].final_acc

    report.notes += [
        f"soft (not gated): strict \"variant < naive\" train loss at ε = 0.8: FedAvg_v {fl('FedAvg_v', 0.8):.4f} vs "
        f"FedAvg {fl('FedAvg', 0.8):.4f}; FedProx_v {fl('FedProx_v', 0.8):.4f} vs FedProx {fl('FedProx', 0.8):.4f} "
        f"(spec calibration: holds at η_0 ≥ 0.3, tie at 0.1; false at ε = 0.2: here FedAvg_v {fl('FedAvg_v', 0.2):.4f} "
        f"vs FedAvg {fl('FedAvg', 0.2):.4f}).",
        f"soft: \"MIFA acts better than FedAvg but falls behind our variants\" (ε = 0.8 train loss): MIFA "
        f"{fl('MIFA', 0.8):.4f}, FedAvg {fl('FedAvg', 0.8):.4f}, FedAvg_v {fl('FedAvg_v', 0.8):.4f}, FedProx_v "
        f"{fl('FedProx_v', 0.8):.4f} (spec calibration: MIFA ≤ FedAvg holds, MIFA ≤ variants too).",
        "soft: \"FedProx variant achieves the best test accuracy\" at ε = 0.2: "
        + ", ".join(f"{a} {fa(a, 0.2):.3f}" for a in ALGORITHMS)
        + " (spec calibration: not reproduced at this scale; the cclip variants are best).",
    ]


def discrepancy_participants(
    report: Report, stats: Mapping[str, RunStats], members: int
) -> dict[float, dict[str, float]]:
    """Spec §3.4 / §7 item 7: the paper says "only 2 clients participate in the training per round" at ε = 0.8 (and
    "a total of 8" at ε = 0.2). Measured: |S_t| of every committed round of this run's ε-runs (from the ledger),
    against the exact hypergeometric law for |C̃| = 35, and the |C̃| the ε = 0.8 statement would need."""
    from fractions import Fraction

    found: dict[float, dict[str, float]] = {}
    parts = []
    for eps, said in ((0.8, 2), (0.2, 8)):
        group = [s for s in stats.values() if s.eps == eps]
        if not group:
            continue
        k = group[0].clients
        sizes = [x for s in group for x in s.included]
        mean, _ = expected_drops(members, CANDIDATES, k, eps)
        pmf = _hypergeom_pmf(members, CANDIDATES, k)
        cap = min(math.floor(Fraction(repr(float(eps))) * k), k - 1)  # ⌊εK⌋ as expected_drops computes it
        p_said = sum(p for j, p in enumerate(pmf) if k - min(j, cap) == said)
        share = sum(x == said for x in sizes) / len(sizes)
        found[eps] = {"rounds": len(sizes), "mean": sum(sizes) / len(sizes), "min": min(sizes), "share": share,
                      "expected_mean": k - mean, "expected_share": p_said}
        parts.append(f"ε = {eps} ({len(group)} runs, {len(sizes)} rounds): mean |S_t| = {sum(sizes) / len(sizes):.2f} "
                     f"(exact E = {k - mean:.2f}), min {min(sizes)}, |S_t| = {said} in {share:.1%} of rounds (exact "
                     f"P = {p_said:.1%})")
    if 0.8 not in found:
        report.discrepancy("participants per round at ε = 0.8 (spec §3.4, §7 item 7)", "\"only 2 clients participate "
                           "in the training per round\" at ε = 0.8", "not measured: this run has no ε = 0.8 runs",
                           "", None)
        return found
    k = next(s.clients for s in stats.values() if s.eps == 0.8)
    need = next((c for c in range(CANDIDATES, members + 1) if k - expected_drops(members, c, k, 0.8)[0] <= 2.5), None)
    f8 = found[0.8]
    report.discrepancy(
        "participants per round at ε = 0.8 (spec §3.4, §7 item 7)",
        "\"only 2 clients participate in the training per round\" at ε = 0.8 (second row of Fig. 1a; App. E.2: \"an "
        "almost constant dropout fraction\"), and \"a total of 8 clients participate\" at ε = 0.2",
        "; ".join(parts) + f"; smallest |C̃| with E|S_t| ≤ 2.5 at ε = 0.8: {need} of {members} (exact law)",
        f"The adversary of §6.1 may drop only members of the static candidate set C̃ (|C̃| = K′ = {CANDIDATES}, the "
        "paper's 25 + 10), so the number of sampled candidates, hypergeometric HG(M, |C̃|, K), bounds the drops far "
        "more often than the budget ⌊εK⌋ = 8 does. Through our simulator (the `eps_adversarial` availability model, "
        "|S̃_t| and |S_t| read from each committed block) the ε = 0.8 rounds keep several times more participants "
        "than 2 and almost never exactly 2, as the exact law predicts; the paper's '2 clients' would need most "
        "members to be candidates (the last number above). "
        + (f"The ε = 0.2 statement ('8 clients') holds in {found[0.2]['share']:.0%} of those rounds. " if 0.2 in found
           else "")
        + "R1-b asserts the hypergeometric statistics instead of the paper's sentence.",
        f8["mean"] >= 4.0 and f8["share"] < 0.05,
    )
    return found


# ---------------------------------------------------------------------------------------------------------------
# Entry point


def reproduce(out: Path, *, fast: bool, workers: int = 2) -> Report:
    """Run the unavailability spec reproduction into ``out`` and return its report (claims with measured numbers)."""
    from threadpoolctl import threadpool_limits

    report = Report("unavailability", "Federated Learning in the Presence of Adversarial Client Unavailability (R1)")
    todo = plan(fast=fast)
    sims = runs(fast=fast)
    # one BLAS thread per process (spec §6.0): the aggregators' Gram/norm kernels are ~20x slower oversubscribed
    with threadpool_limits(limits=1):
        results = run_all(sims, out, workers=workers)
        report.runs = dict(results)
        stats = {r.label: analyse_run(results[r.label], algo, eps, seed) for r, (algo, eps, seed) in zip(sims, todo)}
    members = int(sims[0].data()["members"])
    cell = cells(stats)
    _check_budget(report, stats)
    _check_statistics(report, stats, members, fast)
    _check_identity(report, stats, members)
    _check_adversary_hurts(report, cell)
    discrepancy_participants(report, stats, members)
    if not fast:
        _check_full(report, cell)
        _soft_notes(report, cell)
    _tables_and_plots(report, stats, cell, out)
    seeds = "seed 0" if fast else (f"seeds {', '.join(map(str, SEEDS))} for FedAvg, FedAvg_v, MIFA, FedProx, FedProx_v "
                                   f"and seed {SEEDS[0]} for the four robust baselines (time budget)")
    report.notes += [
        "Scale: M = 100 members, K = 10 sampled (β = 10), balanced Synthetic(1,1) (450 train samples per member), "
        "logistic regression, ε ∈ {0.8, 0.2}, §6.2's step sizes; "
        + (f"FAST subset: FedAvg and FedAvg_v only, {FAST_ROUNDS} rounds, {seeds}." if fast
           else f"T = 300 rounds, {seeds}; claims use seed-averaged metrics."),
        f"Candidate set C̃: {CANDIDATES} members drawn at random (eps_adversarial candidates='random:{CANDIDATES}', "
        "seed 0) instead of the two shadow runs of §3.1–3.2: the dropout statistics (§3.4) depend only on |C̃|.",
        "Train loss = cross-entropy of each committed model on the pooled training data of all members, computed from "
        "the ledger's model blobs (the simulator's metrics.csv loss is the test loss).",
        "Weights w_i = 1/M (balanced data; the strategies' default without a sizes list, identical to n_i/N here).",
    ]
    return report


def _tables_and_plots(report: Report, stats: Mapping[str, RunStats], cell: Mapping[tuple[str, float], Cell],
                      out: Path) -> None:
    rows = [(s.label, s.final_loss, s.final_acc, s.rough, sum(s.eps_t) / len(s.eps_t), max(s.eps_t),
             sum(s.included) / len(s.included)) for s in stats.values()]
    report.tables.append("## Runs (train loss on the pooled training data)\n\n" + markdown_table(
        ["run", "final train loss", "final test acc", "rough", "mean ε_t", "max ε_t", "mean |S_t|"], rows))
    report.tables.append("## Seed-averaged (what the claims compare)\n\n" + markdown_table(
        ["algorithm", "ε", "seeds", "final train loss", "final test acc", "rough"],
        [(a, e, len(c.runs), c.final_loss, c.final_acc, c.rough) for (a, e), c in cell.items()]))
    for eps in EPSILONS:
        curves = {a: c.runs[0].train_loss for (a, e), c in cell.items() if e == eps}
        if curves:
            report.plots.append(plot_curves(out / f"train_loss_eps{eps}.png",
                                            f"unavailability spec R1: train loss, ε = {eps} (seed {SEEDS[0]})", curves,
                                            ylabel="train loss (pooled)"))
    eps_curves = {f"{s.label} (ε_t)": s.eps_t for s in stats.values() if s.algo == "FedAvg_v" and s.seed == SEEDS[0]}
    if eps_curves:
        report.plots.append(plot_curves(out / "eps_t.png", "realised dropout fraction ε_t (FedAvg_v runs)", eps_curves,
                                        ylabel="ε_t"))
