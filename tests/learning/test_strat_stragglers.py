"""Sself and the straggler baselines (sself spec §2.2, §2.3, §6.3 unit checks, §7.2), and the straggler availability.

The scores of the unit tests come from ``TablePublic``, a PublicEval that answers from a table keyed by the exact
float32 model bytes ``float32(w_i + Δ_k)``: it fails loudly if a strategy scores any other vector. The real
evaluator is tested in test_public.py (with a trained model, §7.1).
"""

from __future__ import annotations

import math
from collections import Counter
from types import MappingProxyType

import numpy as np
import pytest

from ledger import decode, encode
from learning.robust import GeometricMedian, MultiKrum
from learning.availability import (
    DROPPED,
    AvailabilityContext,
    Stragglers,
    adversaries_per_round,
    adversary_set,
    parse_availability,
    round_time_units,
    sample_round,
)
from learning._errors import ConfigError
from learning.strategies import (
    RFA,
    ClientUpdate,
    FedAsync,
    FedAvg,
    FedAvgStragglers,
    NormThreshold,
    RoundInfo,
    Sself,
    loss_weights,
    multi_krum_f,
    staleness_weights,
    strategy_from_params,
)

D = 6


def model_of(base: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return (base.astype(np.float64) + delta.astype(np.float64)).astype(np.float32)


class TablePublic:
    """PublicEval answering ``(E_avg, F_pub)`` from a table keyed by model bytes (KeyError for anything else)."""

    def __init__(self) -> None:
        self.table: dict[bytes, tuple[float, float]] = {}
        self.calls = 0

    def add(self, model: np.ndarray, e_avg: float, f_pub: float) -> None:
        self.table[model.astype(np.float32).tobytes()] = (e_avg, f_pub)

    def __call__(self, model: np.ndarray, /) -> tuple[float, float]:
        self.calls += 1
        return self.table[model.tobytes()]


class Round:
    """A round at ``fl_round = t``: global models per round, updates, optional public scores."""

    def __init__(self, t: int, seed: int = 0) -> None:
        self.t = t
        self.rng = np.random.default_rng(seed)
        self.models = {i: self.rng.normal(0.0, 1.0, D).astype(np.float32) for i in range(max(1, t - 4), t + 1)}
        self.updates: list[ClientUpdate] = []
        self.public = TablePublic()

    def add(self, peer: str, base_round: int, m: int, *, e: float = 0.5, f: float = 1.0, delta=None) -> np.ndarray:
        d = (self.rng.normal(0.0, 0.3, D) if delta is None else np.asarray(delta, dtype=np.float64)).astype(np.float32)
        self.updates.append(ClientUpdate(peer, d, m, base_round))
        self.updates.sort(key=lambda u: (u.peer, u.base_round))
        self.public.add(model_of(self.models[base_round], d), e, f)
        return model_of(self.models[base_round], d)

    def info(self, *, public: bool = True) -> RoundInfo:
        peers = tuple(sorted({u.peer for u in self.updates}))
        stale = MappingProxyType({i: w for i, w in self.models.items() if i < self.t})
        return RoundInfo(fl_round=self.t, members=peers, sampled=peers, base_models=stale,
                         public=self.public if public else None)

    @property
    def model(self) -> np.ndarray:
        return self.models[self.t]

    def run(self, strategy, *, public: bool = True, seed: int = 0, updates=None):
        ups = self.updates if updates is None else updates
        return strategy.aggregate(self.info(public=public), self.model, ups, state=None,
                                  rng=np.random.default_rng(seed))


def group_models(r: Round) -> dict[int, list[tuple[ClientUpdate, np.ndarray]]]:
    out: dict[int, list] = {}
    for u in r.updates:
        out.setdefault(u.base_round, []).append((u, r.models[u.base_round].astype(np.float64) + u.delta))
    return out


# --- §2.2 reductions --------------------------------------------------------------------------------------------


def test_sself_without_stragglers_filter_and_loss_weights_is_exactly_fedavg() -> None:
    """δ = 0, E_th = ∞, γ = 1, no stragglers ⇒ FedAvg, bit for bit (the registered ``fedavg`` strategy)."""
    r = Round(t=7)
    for k, m in enumerate([12, 30, 7, 51, 9]):
        r.add(f"p{k}", 7, m, e=5.0)  # high entropy: E_th = ∞ keeps it
    fedavg = r.run(FedAvg())
    for strategy in (Sself(gamma=1.0, delta=0.0, filter=False),
                     Sself(gamma=1.0, delta=0.0, e_th="inf"),
                     FedAvgStragglers(aggregator="mean")):
        out = r.run(strategy)
        assert out.model.tobytes() == fedavg.model.tobytes(), strategy
    assert Sself(gamma=1.0, delta=0.0, filter=False).needs_public is False
    out = r.run(Sself(gamma=1.0, delta=0.0, e_th="inf"))
    assert [b for _, _, b in out.record["beta"]] == fedavg.record["weights"]


def test_sself_with_delta_zero_and_no_threshold_is_semi_synchronous_fedavg() -> None:
    """δ = 0 and E_th = ∞ ⇒ eqs. (2)–(3): per-group m_k-weighted average, α ∝ Σm/(t−i+1)^c, γ-mix."""
    t, gamma, c = 10, 0.5, 0.5
    r = Round(t=t)
    for peer, i, m in [("a", 10, 20), ("b", 9, 35), ("c", 10, 11), ("d", 8, 17), ("e", 9, 5), ("f", 8, 40)]:
        r.add(peer, i, m)
    vs, sizes = {}, {}
    for i, members in group_models(r).items():
        total = sum(u.n_samples for u, _ in members)
        vs[i] = sum((u.n_samples / total) * w for u, w in members)  # eq. (2)
        sizes[i] = total
    a = {i: sizes[i] / (t - i + 1) ** c for i in vs}
    alpha = {i: a[i] / sum(a.values()) for i in vs}
    expected = (1 - gamma) * r.model.astype(np.float64) + gamma * sum(alpha[i] * vs[i] for i in vs)  # eq. (3)

    plain = r.run(Sself(gamma=gamma, c=c, delta=0.0, filter=False))
    assert np.allclose(plain.model, expected, rtol=0, atol=1e-6)
    assert dict((i, x) for i, x in plain.record["alpha"]) == pytest.approx(alpha, rel=1e-14)
    assert plain.record["groups"] == [[8, ["d", "f"]], [9, ["b", "e"]], [10, ["a", "c"]]]
    scored = r.run(Sself(gamma=gamma, c=c, delta=0.0, e_th=math.inf))
    assert scored.model.tobytes() == plain.model.tobytes() and r.public.calls == 6


def test_sself_without_stragglers_and_gamma_one_is_synchronous_elf() -> None:
    """Eq. (5) plus the filter: drop iff E_avg > E_th (E = E_th is kept), non-finite ⇒ drop, β ∝ m/F^δ."""
    t = 4
    r = Round(t=t)
    kept = {"p0": (r.add("p0", t, 10, e=0.5, f=2.0), 10, 2.0),
            "p1": (r.add("p1", t, 30, e=1.0, f=1.0), 30, 1.0)}
    r.add("p2", t, 50, e=1.5, f=0.1)
    r.add("p3", t, 50, e=float("nan"), f=0.5)
    r.add("p4", t, 50, e=0.2, f=float("inf"))
    out = r.run(Sself(gamma=1.0, delta=1.0, e_th=1.0))
    raw = {p: m / f for p, (_, m, f) in kept.items()}
    beta = {p: x / sum(raw.values()) for p, x in raw.items()}
    expected = sum(beta[p] * w.astype(np.float64) for p, (w, _, _) in kept.items())
    assert np.allclose(out.model, expected, rtol=0, atol=1e-6)
    assert out.record["filtered"] == [["p2", t, 1.5], ["p3", t, "nan"], ["p4", t, 0.2]]
    assert {p: b for p, _, b in out.record["beta"]} == pytest.approx(beta, rel=1e-14)
    assert out.record["groups"] == [[t, ["p0", "p1"]]]
    assert decode(encode(out.record))["filtered"][1] == ("p3", t, "nan")  # a canonical block record


# --- weights (eqs. 9, 10; §7.2 items 1-3) ------------------------------------------------------------------------


def test_loss_weights_in_log_space() -> None:
    # δ = 5 with F ~ 1e70: F^δ overflows float64, the log-space form does not.
    beta = loss_weights([1, 1], [1e70, 1e71], 5.0)
    assert beta == pytest.approx([1 / (1 + 1e-5), 1e-5 / (1 + 1e-5)], rel=1e-9)
    assert loss_weights([1, 1], [0.0, 1e-12], 1.0) == [0.5, 0.5]  # F clamped to 1e-12
    assert loss_weights([0, 4], [1.0, 1.0], 1.0) == [0.0, 1.0]
    assert loss_weights([0, 0], [1.0, 3.0], 1.0) == pytest.approx([0.75, 0.25], rel=1e-15)
    assert loss_weights([3, 1], [9.0, 0.5], 0.0) == [0.75, 0.25]  # δ = 0: FedAvg's m/Σm exactly
    assert sum(loss_weights([5, 7, 9], [900.0, 2.0, 3.0], 5.0)) == pytest.approx(1.0, abs=1e-15)


def test_staleness_weights_convention() -> None:
    """α uses (t − i + 1)^c: a fresh group divides by 1, a group that started 2 rounds ago by 3^c (§7.2 item 1)."""
    assert staleness_weights([30, 30], [1, 3], 0.5) == pytest.approx([1 / (1 + 3**-0.5), 3**-0.5 / (1 + 3**-0.5)])
    assert staleness_weights([10, 30], [1, 2], 0.0) == [0.25, 0.75]
    assert staleness_weights([0, 0], [1, 4], 1.0) == [0.8, 0.2]
    r = Round(t=5)
    r.add("a", 5, 30)
    r.add("b", 3, 30)
    out = r.run(Sself(gamma=0.5, c=0.5, delta=0.0, filter=False))
    assert out.record["alpha"] == [[3, pytest.approx(3**-0.5 / (1 + 3**-0.5))], [5, pytest.approx(1 / (1 + 3**-0.5))]]


def test_sself_alpha_uses_the_filtered_sizes_and_beta_is_per_group() -> None:
    """§7.2 item 2: β normalised inside each group; α from Σm of the *surviving* members."""
    r = Round(t=6)
    r.add("a", 6, 10, f=1.0)
    r.add("b", 6, 90, e=3.0)  # filtered
    r.add("c", 5, 20, f=1.0)
    r.add("d", 5, 20, f=3.0)
    out = r.run(Sself(gamma=1.0, c=1.0, delta=1.0, e_th=1.0))
    a = {5: 40 / 2, 6: 10 / 1}
    assert dict(map(tuple, out.record["alpha"])) == pytest.approx({i: x / 30 for i, x in a.items()})
    assert {(p, i): b for p, i, b in out.record["beta"]} == pytest.approx({("a", 6): 1.0, ("c", 5): 0.75,
                                                                          ("d", 5): 0.25})


def test_lone_model_in_a_group_gets_beta_one() -> None:
    """§7.1: loss weighting cannot save an all-adversarial staleness group (β = 1 inside it)."""
    r = Round(t=3)
    r.add("adv", 2, 10, e=0.01, f=800.0)
    r.add("b1", 3, 10, f=0.5)
    out = r.run(Sself(gamma=1.0, delta=1.0, e_th=1.0))
    assert [row for row in out.record["beta"] if row[0] == "adv"] == [["adv", 2, 1.0]]


def test_nothing_survives_or_nothing_arrives_keeps_the_model() -> None:
    r = Round(t=2)
    r.add("a", 2, 10, e=2.0)
    r.add("b", 1, 10, e=float("inf"))
    for strategy in (Sself(), FedAsync(filter=True)):
        out = r.run(strategy)
        assert out.model is r.model
        assert len(out.record["filtered"]) == 2
    for strategy in (Sself(), FedAvgStragglers(aggregator="rfa"), FedAsync(), NormThreshold()):
        out = r.run(strategy, updates=[])
        assert out.model.tobytes() == r.model.tobytes()
    out = r.run(NormThreshold(threshold=1e-9), updates=r.updates[:1])
    assert out.model.tobytes() == r.model.tobytes() and out.record["dropped"] == ["a"]


# --- combinations (§2.3 item 7) -------------------------------------------------------------------------------


def test_semi_synchronous_rfa_is_the_groupwise_weighted_geometric_median() -> None:
    assert RFA == GeometricMedian(nu=1e-5, iterations=10, init="mean", ftol=1e-6)  # §2.3 item 4
    t, gamma, c = 9, 0.5, 0.5
    r = Round(t=t, seed=3)
    for peer, i, m in [("a", 9, 10), ("b", 9, 20), ("c", 9, 30), ("d", 8, 15), ("e", 8, 25), ("f", 7, 40)]:
        r.add(peer, i, m)
    r.add("z", 9, 10, delta=np.full(D, 50.0))  # an outlier the median resists
    out = r.run(Sself(gamma=gamma, c=c, filter=False, aggregator="rfa"), public=False)
    rng = np.random.default_rng(0)
    vs, sizes = {}, {}
    for i, members in group_models(r).items():
        x = np.stack([u.delta for u, _ in members])
        m = np.array([u.n_samples for u, _ in members], dtype=np.float64)
        vs[i] = r.models[i].astype(np.float64) + RFA(x, rng=rng, weights=m).astype(np.float64)
        sizes[i] = m.sum()
    a = {i: sizes[i] / (t - i + 1) ** c for i in vs}
    z = sum(a[i] / sum(a.values()) * vs[i] for i in vs)
    assert np.allclose(out.model, (1 - gamma) * r.model + gamma * z, rtol=0, atol=1e-6)
    assert out.record["rules"] == [[7, "rfa"], [8, "rfa"], [9, "rfa"]]
    assert np.abs(vs[9] - r.model).max() < 1.5  # the ×50 outlier moved the fresh group's median by little


def test_multi_krum_inside_groups_and_its_fedavg_fallback() -> None:
    """f = ⌊(n−3)/2⌋, M = n − f plain mean; f < 1 (n ≤ 4) ⇒ FedAvg (§2.3 item 5)."""
    assert [multi_krum_f(n) for n in (2, 3, 4, 5, 6, 7, 20)] == [-1, 0, 0, 1, 1, 2, 8]
    r = Round(t=4, seed=5)
    benign = [r.add(f"b{k}", 4, 10 + k) for k in range(5)]
    r.add("x1", 4, 10, delta=np.full(D, 40.0))
    r.add("x2", 4, 10, delta=np.full(D, -40.0))
    r.add("s0", 3, 10)
    r.add("s1", 3, 30)
    out = r.run(Sself(gamma=1.0, c=0.0, filter=False, aggregator="multi_krum"), public=False)
    assert out.record["rules"] == [[3, "mean"], [4, "multi_krum(f=2)"]]
    stale = [w for _, w in group_models(r)[3]]
    v3 = 0.25 * stale[0] + 0.75 * stale[1]  # FedAvg fallback, m-weighted
    v4 = np.mean([b.astype(np.float64) for b in benign], axis=0)  # the 5 benign, plain mean
    assert out.record["alpha"] == [[3, 40 / 120], [4, 80 / 120]]  # c = 0: Σm of the whole (unfiltered) group
    assert np.allclose(out.model, (40 * v3 + 80 * v4) / 120, rtol=0, atol=1e-5)
    direct = MultiKrum(f=2, variant="blanchard")(np.stack([u.delta for u in r.updates if u.base_round == 4]),
                                                   rng=np.random.default_rng(0))
    wait = FedAvgStragglers(aggregator="multi_krum")
    fresh = [u for u in r.updates if u.base_round == 4]
    assert np.allclose(r.run(wait, updates=fresh).model, r.model + direct, rtol=0, atol=1e-6)


def test_fedavg_stragglers_equals_synchronous_sself_combinations_bitwise() -> None:
    r = Round(t=3, seed=7)
    for k in range(6):
        r.add(f"p{k}", 3, 5 + 3 * k)
    for rule in ("rfa", "multi_krum"):
        a = r.run(FedAvgStragglers(aggregator=rule))
        b = r.run(Sself(gamma=1.0, filter=False, aggregator=rule, max_staleness=0), public=False)
        assert a.model.tobytes() == b.model.tobytes(), rule
    assert r.run(FedAvgStragglers(aggregator="rfa")).record == {"aggregator": "rfa", "inputs": 6}
    r.add("late", 2, 10)
    with pytest.raises(ValueError, match="stale"):
        r.run(FedAvgStragglers())  # wait/ignore are synchronous: the host drops late results


# --- FedAsync (§2.3 item 3) -------------------------------------------------------------------------------------


def test_fedasync_one_dimensional_closed_form() -> None:
    """w ← (1 − α s) w + α s w_i(k), s = (t − i + 1)^(−a), in the recorded (rng-drawn) order."""
    t = 5
    models = {5: np.array([0.0], np.float32), 4: np.array([2.0], np.float32), 3: np.array([-1.0], np.float32)}
    updates = [ClientUpdate("p0", np.array([1.0], np.float32), 10, 5),   # model 1, fresh
               ClientUpdate("p1", np.array([2.0], np.float32), 10, 4),   # model 4, staleness 2
               ClientUpdate("p2", np.array([-1.0], np.float32), 10, 3)]  # model −2, staleness 3
    info = RoundInfo(fl_round=t, members=("p0", "p1", "p2"), sampled=("p0", "p1", "p2"),
                     base_models=MappingProxyType({4: models[4], 3: models[3]}))
    target = {"p0": (1.0, 1), "p1": (4.0, 2), "p2": (-2.0, 3)}
    orders = set()
    for seed in range(12):
        out = FedAsync().aggregate(info, models[5], updates, state=None, rng=np.random.default_rng(seed))
        w = 0.0
        for peer, _ in out.record["order"]:
            x, s = target[peer]
            mix = 0.8 * s**-0.5
            w = (1 - mix) * w + mix * x
        assert out.model.tobytes() == np.array([w], np.float32).tobytes()
        assert [m for _, _, m in out.record["mix"]] == [0.8 * target[p][1] ** -0.5 for p, _ in out.record["order"]]
        orders.add(tuple(p for p, _ in out.record["order"]))
        again = FedAsync().aggregate(info, models[5], updates, state=None, rng=np.random.default_rng(seed))
        assert again.model.tobytes() == out.model.tobytes()
    assert len(orders) > 1  # the order is random (§7.2 item 16), not by peer id
    single = FedAsync().aggregate(info, models[5], updates[:1], state=None, rng=np.random.default_rng(0))
    assert single.model[0] == np.float32(0.8)  # (1 − α)·0 + α·1


def test_fedasync_with_elf_skips_high_entropy_models_and_decays_alpha() -> None:
    r = Round(t=3)
    r.add("a", 3, 10, e=0.5)
    r.add("b", 2, 10, e=2.0)
    out = r.run(FedAsync(filter=True, e_th=1.0))
    assert out.record["filtered"] == [["b", 2, 2.0]] and [p for p, _, _ in out.record["mix"]] == ["a"]
    only_a = r.run(FedAsync(), updates=[u for u in r.updates if u.peer == "a"])
    assert out.model.tobytes() == only_a.model.tobytes()
    decayed = FedAsync(alpha_decay=0.5, alpha_decay_every=10)
    assert [decayed.alpha_at(t) for t in (1, 10, 11, 25)] == [0.8, 0.8, 0.4, 0.2]
    assert Sself(gamma_decay=0.5, gamma_decay_every=15).gamma_at(16) == 0.25


# --- norm thresholding (§2.3 item 6) ----------------------------------------------------------------------------


def test_norm_threshold_drops_exactly_the_big_updates() -> None:
    r = Round(t=2)
    basis = np.eye(D)
    for peer, norm in [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 0.5), ("e", 2.5)]:
        r.add(peer, 2, 10, delta=norm * basis[0])
    out = r.run(NormThreshold(threshold=2.0))
    assert out.record["dropped"] == ["c", "e"]  # ‖Δ‖ = 2.0 is kept: drop iff > threshold
    assert [n for _, n in out.record["norms"]] == [1.0, 2.0, 3.0, 0.5, 2.5]
    kept = [u for u in r.updates if u.peer in ("a", "b", "d")]
    assert out.model.tobytes() == r.run(FedAvg(), updates=kept).model.tobytes()


# --- determinism, state and parameter strictness ----------------------------------------------------------------


def test_bit_reproducible_and_rng_free() -> None:
    def build(seed: int) -> Round:
        r = Round(t=8, seed=11)
        for peer, i, m, e, f in [("a", 8, 10, 0.3, 0.7), ("b", 7, 20, 0.9, 1.4), ("c", 6, 15, 0.2, 3.0),
                                 ("d", 8, 40, 1.3, 0.2), ("e", 7, 5, 0.1, 0.9), ("f", 8, 12, 0.6, 2.2),
                                 ("g", 8, 9, 0.4, 1.1), ("h", 8, 30, 0.8, 0.6)]:
            r.add(peer, i, m, e=e, f=f)
        return r

    for strategy in (Sself(delta=5.0, e_th=1.0), Sself(aggregator="rfa"), Sself(aggregator="multi_krum"),
                     FedAsync(filter=True)):
        first = build(0).run(strategy, seed=1)
        second = build(0).run(strategy, seed=1)
        assert first.model.tobytes() == second.model.tobytes() and first.record == second.record
        assert encode(first.record) == encode(second.record)
    sself = Sself(delta=5.0)
    assert build(0).run(sself, seed=1).model.tobytes() == build(0).run(sself, seed=99).model.tobytes()


def test_registry_and_params_are_strict() -> None:
    s = strategy_from_params("sself", {"gamma": 1, "e_th": "inf", "delta": 5, "clients": 20, "f": 3,
                                       "committee_size": 7, "aggregator": "rfa", "filter": False})
    assert isinstance(s, Sself) and s.gamma == 1.0 and s.e_th == math.inf and s.clients_per_round(100) == 20
    assert strategy_from_params("sself", {"e_th": math.inf}).e_th == math.inf
    assert strategy_from_params("sself", {}).max_staleness == 2
    assert isinstance(strategy_from_params("fedasync", {"alpha": 0.8, "a": 0.5}), FedAsync)
    assert isinstance(strategy_from_params("norm_threshold", {"threshold": 2}), NormThreshold)
    assert strategy_from_params("fedavg_stragglers", {"aggregator": "multi_krum"}).max_staleness == 0
    bad = [("sself", {"gamma": "0.5"}), ("sself", {"gamma": 0.0}), ("sself", {"gamma": 1.5}),
           ("sself", {"c": -1.0}), ("sself", {"delta": -0.1}), ("sself", {"e_th": -1.0}),
           ("sself", {"e_th": "big"}), ("sself", {"e_th": True}), ("sself", {"entropy_impl": "log2"}),
           ("sself", {"aggregator": "median"}), ("sself", {"filter": 1}), ("sself", {"max_staleness": 2.0}),
           ("sself", {"max_staleness": -1}), ("sself", {"gamma_decay": 0.0}), ("sself", {"clients": -1}),
           ("fedasync", {"alpha": 1.2}), ("fedasync", {"a": -0.5}), ("fedasync", {"e_th": float("nan")}),
           ("norm_threshold", {"threshold": 0.0}), ("fedavg_stragglers", {"aggregator": "krum"})]
    for name, params in bad:
        with pytest.raises(ConfigError):
            strategy_from_params(name, params)
    assert Sself().needs_public and not Sself(filter=False, aggregator="rfa").needs_public
    assert Sself(filter=False).needs_public  # δ = 1 loss weighting still needs F_pub
    assert not FedAsync().needs_public and FedAsync(filter=True).needs_public


def test_node_contract_violations_raise() -> None:
    r = Round(t=5)
    r.add("a", 5, 10)
    r.add("b", 3, 10)
    with pytest.raises(ValueError, match="state"):
        Sself().aggregate(r.info(), r.model, r.updates, state=b"\x00", rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="max_staleness"):
        r.run(Sself(max_staleness=1))
    with pytest.raises(ValueError, match="public"):
        r.run(Sself(), public=False)
    with pytest.raises(ValueError, match="sorted"):
        r.run(Sself(), updates=list(reversed(r.updates)))
    missing = RoundInfo(fl_round=5, members=("a", "b"), sampled=("a", "b"), public=r.public)
    with pytest.raises(ValueError, match="base model"):
        Sself().aggregate(missing, r.model, r.updates, state=None, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="base_round"):
        r.run(Sself(), updates=[ClientUpdate("a", r.updates[0].delta, 10, 6)])
    with pytest.raises(ValueError, match="float32"):
        r.run(Sself(), updates=[ClientUpdate("a", r.updates[0].delta.astype(np.float64), 10, 5)])
    with pytest.raises(ValueError, match="fresh"):
        r.run(Sself(), updates=[ClientUpdate("a", r.updates[0].delta, 10, -1),
                                ClientUpdate("a", r.updates[0].delta, 10, 5)])
    fresh = r.run(Sself(), updates=[ClientUpdate("a", r.updates[0].delta, 10, -1)])  # -1 = fresh
    assert fresh.model.tobytes() == r.run(Sself(), updates=r.updates[:1]).model.tobytes()


# --- stragglers availability and round sampling (§1.2, §3.1) ----------------------------------------------------


def _ctx(n: int) -> AvailabilityContext:
    return AvailabilityContext(members=n, sizes=(10,) * n)


def test_straggler_delays_are_uniform_and_nobody_drops() -> None:
    model = parse_availability("stragglers", _ctx(20))
    assert isinstance(model, Stragglers) and model.max_delay == 2
    counts: Counter[int] = Counter()
    for t in range(1, 301):
        out = model.outcome(t, list(range(19, -1, -2)), rng=np.random.default_rng([7, t]))
        assert sorted(out) == list(range(1, 20, 2)) and DROPPED not in out.values()
        counts.update(out.values())
    assert set(counts) == {0, 1, 2}
    assert all(abs(counts[d] / 3000 - 1 / 3) < 0.03 for d in range(3))
    severe = parse_availability("stragglers(max_delay=4)", _ctx(20))
    seen = set()
    for t in range(1, 50):
        seen.update(severe.outcome(t, range(20), rng=np.random.default_rng([1, t])).values())
    assert seen == {0, 1, 2, 3, 4}
    again = model.outcome(3, [1, 2], rng=np.random.default_rng(5))
    assert again == model.outcome(3, [2, 1], rng=np.random.default_rng(5))


def test_per_device_delays_are_fixed_and_params_strict() -> None:
    model = parse_availability("stragglers(delay_mode='per_device', seed=3)", _ctx(10))
    first = model.outcome(1, range(10), rng=np.random.default_rng(0))
    assert all(model.outcome(t, [i], rng=np.random.default_rng(t))[i] == first[i] for t in range(2, 6)
               for i in range(10))
    assert set(first.values()) <= {0, 1, 2} and len(set(first.values())) > 1
    for spec in ("stragglers(max_delay=-1)", "stragglers(max_delay=1.5)", "stragglers(max_delay=True)",
                 "stragglers(delay_mode='sometimes')", "stragglers(lag=2)", "stragglers(seed=-1)"):
        with pytest.raises(ConfigError):
            parse_availability(spec, _ctx(10))
    with pytest.raises(ValueError, match="distinct"):
        model.outcome(1, [3, 3], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="distinct"):
        model.outcome(1, [10], rng=np.random.default_rng(0))


def test_round_sampling_places_exactly_rk_adversaries_among_idle_devices() -> None:
    assert [adversaries_per_round(r, k) for r, k in [(0.2, 20), (0.1, 10), (0.2, 10), (0.25, 10), (0.0, 10)]] == \
        [4, 1, 2, 3, 0]
    adv = adversary_set(20, 0.2, rng=np.random.default_rng(0))
    assert len(adv) == 4 and list(adv) == sorted(adv) and adv == adversary_set(20, 0.2, rng=np.random.default_rng(0))
    for t in range(50):
        rng = np.random.default_rng([2, t])
        busy = set(rng.permutation(20)[:6].tolist())
        chosen = sample_round(20, 10, rng=rng, busy=busy, adversaries=adv, adversaries_per_round=2)
        assert list(chosen) == sorted(set(chosen)) and not busy & set(chosen)
        idle_adv = len(set(adv) - busy)
        assert len(set(chosen) & set(adv)) == min(2, idle_adv)  # exactly round(rK), fewer only if not idle
        assert len(chosen) == min(2, idle_adv) + 8
    crowded = sample_round(20, 10, rng=np.random.default_rng(0), busy=range(14), adversaries=(15, 16),
                           adversaries_per_round=2)
    assert len(crowded) == 6 and set(crowded) == set(range(14, 20))  # fewer when not enough are idle
    uniform = sample_round(20, 10, rng=np.random.default_rng(0), busy={0, 1})
    assert len(uniform) == 10 and not {0, 1} & set(uniform)
    with pytest.raises(ConfigError):
        sample_round(20, 10, rng=np.random.default_rng(0), adversaries=adv, adversaries_per_round=11)
    assert round_time_units({1: 0, 2: 2, 3: 1}, wait=True) == 3
    assert round_time_units({1: 0, 2: 2}, wait=False) == 1 and round_time_units({}, wait=True) == 1
