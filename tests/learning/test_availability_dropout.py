"""mimic spec §3 dropout schemes: §6.3 A5 schedules, each law's statistics, floors, determinism, strict config."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learning.availability import (
    AVAILABILITY,
    DROPPED,
    AvailabilityContext,
    BoundedDropout,
    ClassCorrelatedDropout,
    StaticDropout,
    StaticHetDropout,
    TimeVaryingDropout,
    expected_active_fraction,
    parse_availability,
)
from learning._errors import ConfigError


def ctx(n: int, labels: tuple[tuple[int, ...], ...] = ()) -> AvailabilityContext:
    return AvailabilityContext(members=n, sizes=(72,) * n, labels=labels, rounds=100)


def active_matrix(model: object, n: int, rounds: int, seed: int = 0, sampled: list[int] | None = None) -> np.ndarray:
    """``A[r-1, i]`` = member i responded in round r (rounds 1..rounds), every member sampled."""
    idx = list(range(n)) if sampled is None else sampled
    out = np.zeros((rounds, n), dtype=bool)
    for r in range(1, rounds + 1):
        res = model.outcome(r, idx, rng=np.random.default_rng([seed, r]))  # type: ignore[attr-defined]
        assert sorted(res) == sorted(idx)
        assert set(res.values()) <= {0, DROPPED}
        for i, o in res.items():
            out[r - 1, i] = o == 0
    return out


def test_registered() -> None:
    for name in ("bounded", "static", "static_het", "timevar", "corr"):
        assert name in AVAILABILITY


# --- scheme 1 ------------------------------------------------------------------------------------------------------


def test_bounded_uniform_periods_match_the_schedule_and_the_expected_fraction() -> None:
    """A5: client i active exactly when t % τ_i == 0 (t = fl_round − 1), staleness ≤ τ_max, round 0 all active;
    active fraction ≈ H_{τmax}/τmax = 0.1799 for τ_max = 20 (§3)."""
    n, rounds = 1000, 240
    m = parse_availability("bounded(tau_max=20, min_active=0, seed=7)", ctx(n))
    assert isinstance(m, BoundedDropout)
    assert m.tau.min() >= 1 and m.tau.max() <= 20 and set(np.unique(m.tau)) == set(range(1, 21))
    act = active_matrix(m, n, rounds)
    t = np.arange(rounds)[:, None]
    assert np.array_equal(act, (t % m.tau[None, :]) == 0)
    assert act[0].all()
    for i in range(n):  # observed staleness (gap between active rounds) never exceeds τ_max
        assert np.diff(np.flatnonzero(act[:, i])).max(initial=1) <= 20
    assert expected_active_fraction(20) == pytest.approx(0.17989, abs=1e-5)
    assert expected_active_fraction(50) == pytest.approx(0.09, abs=1e-3)
    assert expected_active_fraction(100) == pytest.approx(0.052, abs=1e-3)
    # per-trial law: mean(1/τ_i) ≈ H/τmax (std of the mean ≈ 0.0075 for N = 1000); the schedule realises it
    assert float(np.mean(1.0 / m.tau)) == pytest.approx(expected_active_fraction(20), abs=0.03)
    assert act[1:].mean() == pytest.approx(float(np.mean(1.0 / m.tau)), abs=0.01)


def test_bounded_random_phase_and_determinism_per_seed() -> None:
    n = 50
    a = BoundedDropout(members=n, tau_max=10, phase="random", seed=3, min_active=0)
    b = BoundedDropout(members=n, tau_max=10, phase="random", seed=3, min_active=0)
    c = BoundedDropout(members=n, tau_max=10, phase="random", seed=4, min_active=0)
    assert np.array_equal(a.tau, b.tau) and np.array_equal(a.phi, b.phi)
    assert not (np.array_equal(a.tau, c.tau) and np.array_equal(a.phi, c.phi))
    assert ((a.phi >= 0) & (a.phi < a.tau)).all() and a.phi.any()
    act = active_matrix(a, n, 40)
    t = np.arange(40)[:, None]
    assert act[0].all()
    assert np.array_equal(act[1:], ((t + a.phi[None, :]) % a.tau[None, :] == 0)[1:])
    assert np.array_equal(act, active_matrix(b, n, 40, seed=99))  # no per-round randomness without a floor


def test_bounded_halfnormal3_is_the_code_law() -> None:
    """Code: τ = min(round(|N(0, 3)|), τ_max), 0 → 1: P(τ ≤ 1) = P(|N(0, 3)| < 1.5) = 2Φ(0.5) − 1 ≈ 0.383."""
    m = BoundedDropout(members=4000, tau_max=20, period_dist="halfnormal3", seed=1)
    assert m.tau.min() >= 1 and m.tau.max() <= 20
    p_le1 = math.erf(1.5 / 3.0 / math.sqrt(2.0))
    assert float(np.mean(m.tau <= 1)) == pytest.approx(p_le1, abs=0.03)
    assert float(np.median(m.tau)) == 2.0
    assert float(np.mean(m.tau >= 10)) < 0.01


def test_bounded_explicit_periods_and_floor() -> None:
    m = BoundedDropout(members=4, tau_max=10, periods=(3, 5, 7, 10), min_active=2)
    act = active_matrix(m, 4, 30)
    assert act.sum(axis=1).min() >= 2  # the floor tops up
    t = np.arange(30)[:, None]
    scheduled = (t % np.array([3, 5, 7, 10])[None, :]) == 0
    assert (act >= scheduled).all()  # the floor only adds
    assert (act[1:].sum(axis=1) == np.maximum(scheduled[1:].sum(axis=1), 2)).all()


# --- scheme 2 ------------------------------------------------------------------------------------------------------


def test_static_homogeneous_frequency() -> None:
    """A5: empirical rate within p ± 4·√(p(1−p)/(N·T)) (p = 0.1, no floor)."""
    n, rounds, p = 50, 400, 0.1
    m = parse_availability("static(p=0.1, min_active=0)", ctx(n))
    assert isinstance(m, StaticDropout)
    act = active_matrix(m, n, rounds + 1)
    assert act[0].all()
    rate = act[1:].mean()
    assert abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / (n * rounds))
    assert not np.array_equal(act[1], act[2])  # redrawn every round


def test_static_floor_respected_on_sampled_subset() -> None:
    m = StaticDropout(members=20, p=0.05, min_active=2)
    sampled = [1, 4, 6, 9, 13]
    act = active_matrix(m, 20, 200, sampled=sampled)
    assert (act[:, sampled].sum(axis=1) >= 2).all()
    assert not act[:, [i for i in range(20) if i not in sampled]].any()
    m1 = parse_availability("static(p=0.05)", ctx(20))  # default floor 1
    assert (active_matrix(m1, 20, 200).sum(axis=1) >= 1).all()


def test_static_het_levels() -> None:
    """Code: p_i = p + (i mod 5)(1 − p)/4 — {0.1, 0.325, 0.55, 0.775, 1.0} for p = 0.1, mean 0.55."""
    n, rounds = 100, 300
    m = parse_availability("static_het(p=0.1)", ctx(n))
    assert isinstance(m, StaticHetDropout)
    np.testing.assert_allclose(m.probabilities()[:5], [0.1, 0.325, 0.55, 0.775, 1.0])
    assert m.probabilities().mean() == pytest.approx(0.55)
    act = active_matrix(m, n, rounds + 1)[1:]
    for level, p in enumerate([0.1, 0.325, 0.55, 0.775, 1.0]):
        rate = act[:, level::5].mean()
        assert abs(rate - p) <= 4 * math.sqrt(max(p * (1 - p), 1e-12) / (20 * rounds)) + 1e-12
    assert act[:, 4::5].all()


# --- scheme 3 ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "ratio", "m"), [(20, 0.1, 2), (30, 0.3, 9), (30, 0.5, 15), (100, 0.29, 29)])
def test_timevar_exactly_m_per_round(n: int, ratio: float, m: int) -> None:
    """A5: exactly int(P·N) distinct clients every round (P = 0.29, N = 100: 28.999… → 29 by the guard)."""
    tv = parse_availability(f"timevar(ratio={ratio})", ctx(n))
    assert isinstance(tv, TimeVaryingDropout) and tv.m == m
    act = active_matrix(tv, n, 60)
    assert act[0].all()
    assert (act[1:].sum(axis=1) == m).all()


def test_timevar_is_symmetric_and_weighted() -> None:
    """Weights a ~ U[1, 10] are redrawn every round and symmetric across clients: every client's long-run
    inclusion rate is m/N. With N = 2, m = 1: P(pick 0) = E[a_0/(a_0 + a_1)] = 1/2, but a single round's pick
    follows that round's weights (not a uniform draw): replay the sequential draw by hand."""
    tv = TimeVaryingDropout(members=10, ratio=0.3)
    act = active_matrix(tv, 10, 2001)[1:]
    rates = act.mean(axis=0)
    assert np.abs(rates - 0.3).max() < 4 * math.sqrt(0.3 * 0.7 / 2000)
    two = TimeVaryingDropout(members=2, ratio=0.5)
    for r in range(2, 40):
        rng = np.random.default_rng([5, r])
        got = two.outcome(r, [0, 1], rng=rng)
        ref = np.random.default_rng([5, r])
        a = ref.uniform(1.0, 10.0, size=2)
        pick = 0 if ref.random() * (a[0] + a[1]) < a[0] else 1
        assert got == {pick: 0, 1 - pick: DROPPED}


# --- class-correlated --------------------------------------------------------------------------------------------


def test_corr_rare_classes() -> None:
    """§6.1 S5: client i holds (2(i mod 5), 2(i mod 5)+1); pairs 3, 4 (classes 6-9) have τ = 10, random phase."""
    n = 20
    labels = tuple((2 * (i % 5), 2 * (i % 5) + 1) for i in range(n))
    m = parse_availability("corr(rare_classes=(6, 7, 8, 9), tau_rare=10, seed=2)", ctx(n, labels))
    assert isinstance(m, ClassCorrelatedDropout)
    rare = np.array([i % 5 >= 3 for i in range(n)])
    assert np.array_equal(m.rare, rare)
    act = active_matrix(m, n, 61)
    assert act[:, ~rare].all()
    t = np.arange(61)[:, None]
    assert np.array_equal(act[1:, rare], ((t + m.phi[None, :]) % 10 == 0)[1:, rare])
    assert act[1:, rare].mean() == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="labels"):
        parse_availability("corr(rare_classes=(6,))", ctx(n))


# --- conventions and strictness ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["bounded", "static(p=0.2)", "static_het(p=0.1)", "timevar(ratio=0.1)", "corr(rare_classes=(1,))"],
)
def test_round_one_all_active_and_round_zero_rejected(spec: str) -> None:
    labels = tuple((i % 10,) for i in range(10))
    m = parse_availability(spec, ctx(10, labels))
    assert m.outcome(1, range(10), rng=np.random.default_rng(0)) == {i: 0 for i in range(10)}
    with pytest.raises(ValueError):
        m.outcome(0, range(10), rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        m.outcome(2, [10], rng=np.random.default_rng(0))
    # determinism: same rng seed, same outcome
    assert [m.outcome(r, range(10), rng=np.random.default_rng(r)) for r in range(2, 9)] == [
        m.outcome(r, range(10), rng=np.random.default_rng(r)) for r in range(2, 9)
    ]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("bounded(tau_max=0)", "tau_max"),
        ("bounded(tau=5)", "unknown parameter"),
        ("bounded(tau_max=2.5)", "tau_max must be int"),
        ("bounded(period_dist='normal')", "period_dist"),
        ("bounded(phase='late')", "phase"),
        ("bounded(periods=(1, 2))", "periods has 2"),
        ("bounded(tau_max=5, periods=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))", "exceeds tau_max"),
        ("bounded(periods=(1, 2, 3, 4, 5, 6, 7, 8, 9, 0))", "period"),
        ("bounded(seed=-1)", "seed"),
        ("bounded(min_active=-1)", "min_active"),
        ("static", "p is required"),
        ("static(p=0.0)", "p must be"),
        ("static(p=1.5)", "p must be"),
        ("static(p='x')", "p must be float"),
        ("static_het(p=0.1, levels=1)", "levels"),
        ("timevar", "ratio"),
        ("timevar(ratio=0.05)", "selects no client"),
        ("corr(tau_rare=3)", "rare_classes is required"),
        ("corr(rare_classes=6)", "rare_classes must be tuple"),
        ("corr(rare_classes=(6,), tau_rare=0)", "tau_rare"),
    ],
)
def test_strict_params(spec: str, match: str) -> None:
    labels = tuple((i % 10,) for i in range(10))
    with pytest.raises(ConfigError, match=match):
        parse_availability(spec, ctx(10, labels))
