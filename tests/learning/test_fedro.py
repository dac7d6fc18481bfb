"""FedRo's recommend (n̂, b̂) and the κ robustness coefficients (fedro spec §2.3, §3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning.robust import CoordinateWiseMedian, GeometricMedian, Krum, TrimmedMean
from learning._errors import ConfigError
from learning.strategies import (
    b_hat_star,
    exact_b_hat,
    hypergeom_sf,
    kappa_geometric_median,
    kappa_krum,
    kappa_lower_bound,
    kappa_median,
    kappa_nnm,
    kappa_trimmed_mean,
    kl_bernoulli,
    n_hat_opt,
    n_hat_th,
    probability_no_takeover,
    recommend,
    robustness_ratio,
)
from learning.robust import NNM, Chain

# --- worked examples and test vectors of fedro spec §3 -------------------------------------------------------------


def test_worked_example_femnist() -> None:
    r = recommend(150, 15, 500, 0.99)
    assert (r.n_hat, r.b_hat, r.n_hat_th, r.n_hat_opt) == (26, 11, 26, 150)
    assert recommend(150, 15, 500, 0.99, mode="strict").b_hat == 12
    assert recommend(150, 15, 500, 0.99, mode="exact").b_hat == 9


def test_worked_example_cifar() -> None:
    r = recommend(150, 15, 1500, 0.99)
    assert (r.n_hat, r.b_hat) == (29, 13)
    assert recommend(150, 15, 1500, 0.99, mode="strict").b_hat == 14


def test_intermediate_numbers() -> None:
    assert math.log(500 / 0.01) == pytest.approx(10.81978, abs=1e-5)
    assert kl_bernoulli(0.5, 0.1) == pytest.approx(0.51083, abs=1e-5)
    assert kl_bernoulli(11 / 26, 0.1) == pytest.approx(0.35369, abs=1e-5)
    assert kl_bernoulli(12 / 26, 0.1) == pytest.approx(0.42928, abs=1e-5)
    assert kl_bernoulli(0.1, 0.1) == 0.0
    assert kl_bernoulli(0.0, 0.1) == pytest.approx(-math.log(0.9))
    assert kl_bernoulli(1.0, 0.1) == pytest.approx(-math.log(0.1))
    assert hypergeom_sf(150, 15, 26, 11) == pytest.approx(1.894e-8, rel=1e-3)
    assert hypergeom_sf(150, 15, 26, 10) == pytest.approx(4.65e-7, rel=1e-3)
    assert probability_no_takeover(150, 15, 26, 11, 500) == pytest.approx(0.99999, abs=1e-5)
    assert probability_no_takeover(150, 15, 26, 10, 500) == pytest.approx(0.9998, abs=1e-4)


def test_n1000_b200_vectors() -> None:
    r = recommend(1000, 200, 500, 0.99)
    assert (r.n_hat_th, r.n_hat_opt) == (57, 186)
    assert (b_hat_star(1000, 200, 57, 500, 0.99), b_hat_star(1000, 200, 57, 500, 0.99, mode="strict")) == (27, 28)
    assert (b_hat_star(1000, 200, 186, 500, 0.99), b_hat_star(1000, 200, 186, 500, 0.99, mode="strict")) == (64, 65)
    assert recommend(1000, 200, 500, 0.99, target="opt").n_hat == 186


def test_fig2_setting_has_no_tolerance_at_26() -> None:
    r = recommend(150, 30, 500, 0.99)
    assert (r.n_hat_th, r.b_hat, r.n_hat_opt) == (57, 27, 150)
    assert b_hat_star(150, 30, 26, 500, 0.99) is None


def test_b_hat_ratio_table_beta_01() -> None:
    sizes = (26, 30, 40, 50, 75, 100, 150, 200, 300, 369, 500, 750, 1000)
    ratios = (0.423, 0.400, 0.375, 0.340, 0.280, 0.260, 0.227, 0.210, 0.187, 0.179, 0.166, 0.153, 0.100)
    for size, ratio in zip(sizes, ratios, strict=True):
        bh = b_hat_star(1000, 100, size, 500, 0.99)
        assert bh is not None and bh / size == pytest.approx(ratio, abs=5e-4)


def test_fig1_table() -> None:
    bs = (10, 20, 50, 100, 150, 200, 250, 300, 350, 400, 450)
    th = (10, 12, 17, 26, 39, 57, 87, 143, 261, 601, 1000)
    opt = (1000, 1000, 735, 369, 247, 186, 198, 308, 545, 1000, 1000)
    assert tuple(n_hat_th(1000, b, 500, 0.99) for b in bs) == th
    assert tuple(n_hat_opt(1000, b, 500, 0.99) for b in bs) == opt


def test_fig2_exact_tails_and_union_bound_tolerances() -> None:
    sizes = (1, 6, 11, 16, 21, 26, 31, 36, 41, 46, 51, 56)
    assert tuple(exact_b_hat(150, 30, s, 500, 0.99) for s in sizes) == (1, 6, 8, 10, 12, 13, 15, 16, 18, 19, 20, 21)
    assert hypergeom_sf(150, 30, 26, 12) == pytest.approx(1.30e-4, rel=5e-3)
    assert probability_no_takeover(150, 30, 26, 12, 500) == pytest.approx(0.9371, abs=1e-4)
    assert hypergeom_sf(150, 30, 1, 0) == pytest.approx(0.2)
    fig4 = [probability_no_takeover(150, 30, 26, bh, 500) for bh in (9, 10, 11, 12)]
    np.testing.assert_allclose(fig4, [0.0012, 0.174, 0.689, 0.937], atol=1e-3)


def test_degenerate_cases() -> None:
    r = recommend(100, 0, 50, 0.9)
    assert (r.n_hat, r.b_hat) == (1, 0)
    assert b_hat_star(10, 2, 10, 5, 0.9) == 2  # the whole population: b̂_t = b
    assert b_hat_star(10, 2, 10, 5, 0.9, mode="strict") == 3
    assert b_hat_star(10, 4, 10, 5, 0.9, mode="strict") is None  # 2·5 >= 10
    for args in ((10, 5, 5, 0.9), (10, -1, 5, 0.9), (10, 2, 0, 0.9), (10, 2, 5, 1.0), (10, 2, 5, 0.0), (10, 2, 5, True)):
        with pytest.raises(ConfigError):
            recommend(*args)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        recommend(150, 15, 500, 0.99, mode="loose")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        b_hat_star(150, 15, 151, 500, 0.99)


# --- properties of the three modes (Lemmas 1, 2, 4) -------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(20, 400),
    beta=st.floats(0.02, 0.4),
    T=st.integers(1, 2000),
    p=st.floats(0.5, 0.999),
    frac=st.floats(0.05, 1.0),
)
def test_modes_are_ordered_and_lemma1_holds(n: int, beta: float, T: int, p: float, frac: float) -> None:
    b = max(1, min(int(beta * n), (n - 1) // 2))
    n_hat = max(1, int(frac * n))
    paper = b_hat_star(n, b, n_hat, T, p)
    strict = b_hat_star(n, b, n_hat, T, p, mode="strict")
    exact = b_hat_star(n, b, n_hat, T, p, mode="exact")
    for bh in (paper, strict, exact):
        assert bh is None or 2 * bh < n_hat
    if strict is not None:
        assert paper is not None and paper <= strict
    if paper is not None:
        assert exact is not None and exact <= paper
        # Lemma 1: with the paper's b̂, no round samples more than b̂ Byzantine clients with probability >= p.
        assert probability_no_takeover(n, b, n_hat, paper, T) >= p - 1e-12
    if exact is not None:
        assert probability_no_takeover(n, b, n_hat, exact, T) >= p - 1e-12


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.2, 0.3])
def test_lemma2_a_strict_tolerance_exists_above_n_hat_th(beta: float) -> None:
    n, T, p = 1000, 500, 0.99
    b = int(beta * n)
    start = n_hat_th(n, b, T, p)
    for size in range(start, min(n, start + 150)):
        assert b_hat_star(n, b, size, T, p, mode="strict") is not None


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.2])
def test_lemma4_b_hat_ratio_is_order_beta_above_n_hat_opt(beta: float) -> None:
    n, T, p = 2000, 500, 0.99
    b = int(beta * n)
    nopt = n_hat_opt(n, b, T, p)
    for size in (nopt, nopt + 50, 2 * nopt):
        size = min(size, n - 1)
        bh = b_hat_star(n, b, size, T, p, mode="strict")
        assert bh is not None and bh / size <= 2 * beta + 1 / size <= 7 * beta / 3 + 1e-12


def test_diminishing_return() -> None:
    n, b, T, p = 1000, 100, 500, 0.99
    nth, nopt = n_hat_th(n, b, T, p), 369

    def ratio(size: int) -> float:
        bh = b_hat_star(n, b, size, T, p)
        assert bh is not None
        return bh / size

    assert ratio(nth) - ratio(nopt) > 4 * (ratio(nopt) - ratio(2 * nopt))


# --- κ ---------------------------------------------------------------------------------------------------


def test_kappa_values_of_the_spec() -> None:
    assert kappa_trimmed_mean(26, 11) == pytest.approx(61.875)
    assert kappa_nnm(kappa_trimmed_mean(26, 11), 26, 11) == pytest.approx(368.87, abs=5e-3)
    assert kappa_lower_bound(26, 11) == pytest.approx(2.75)
    assert kappa_trimmed_mean(29, 13) == pytest.approx(138.67, abs=5e-3)
    assert kappa_nnm(kappa_trimmed_mean(29, 13), 29, 13) == pytest.approx(907.83, abs=5e-3)
    assert kappa_trimmed_mean(26, 3) == pytest.approx(1.035)
    assert kappa_median(10, 0) == 4.0 and kappa_krum(10, 0) == 6.0 and kappa_trimmed_mean(10, 0) == 0.0
    assert kappa_geometric_median(9, 2) == kappa_median(9, 2)
    with pytest.raises(ConfigError):
        kappa_median(10, 5)


def _instance(g: np.random.Generator, n: int, f: int, d: int, kind: int) -> np.ndarray:
    h = g.standard_normal((n - f, d)) * g.uniform(0.1, 3) + g.standard_normal(d)
    mean, std = h.mean(0), h.std(0, ddof=1) if n - f > 1 else np.zeros(d)
    byz = {
        0: np.repeat(-mean[None], f, 0),  # sign flip
        1: np.repeat((mean + 1.5 * std)[None], f, 0),  # ALIE
        2: np.repeat(h[:1], f, 0),  # mimic
        3: g.standard_normal((f, d)) * 100,  # large noise
        4: np.repeat((-2 * mean)[None], f, 0),  # IPM
    }[kind]
    x = np.vstack([h, byz])
    return x[g.permutation(n)]


def test_kappa_bounds_never_violated_on_random_instances() -> None:
    """Definition 2 over *every* subset S of n − f inputs (robustness_ratio), fedro spec §2.3 stress test."""
    g = np.random.default_rng(2024)
    # The smoothed Weiszfeld iterate approximates the geometric median: allow 1e-12 of absolute slack (mimic makes
    # subsets with zero spread, where the exact rule returns the repeated point).
    slack = {"geometric_median": 1e-12}
    rules = {
        "trimmed_mean": (lambda f: TrimmedMean(f=f), kappa_trimmed_mean),
        "median": (lambda f: CoordinateWiseMedian(), kappa_median),
        "krum": (lambda f: Krum(f=f), kappa_krum),
        "geometric_median": (
            lambda f: GeometricMedian(nu=1e-9, iterations=300, init="mean"),
            kappa_geometric_median,
        ),
        "nnm>trimmed_mean": (
            lambda f: Chain(pre=(NNM(f=f),), final=TrimmedMean(f=f)),
            lambda n, f: kappa_nnm(kappa_trimmed_mean(n, f), n, f),
        ),
        "nnm>median": (
            lambda f: Chain(pre=(NNM(f=f),), final=CoordinateWiseMedian()),
            lambda n, f: kappa_nnm(kappa_median(n, f), n, f),
        ),
    }
    worst = dict.fromkeys(rules, 0.0)
    for trial in range(150):
        n = int(g.integers(3, 10))
        f = int(g.integers(1, (n - 1) // 2 + 1))
        x = _instance(g, n, f, int(g.integers(1, 6)), trial % 5)
        for name, (make, kappa) in rules.items():
            out = make(f)(x, rng=np.random.default_rng(0))
            ratio = robustness_ratio(out, x, f, atol=slack.get(name, 0.0)) / kappa(n, f)
            assert ratio <= 1.0 + 1e-9, (name, n, f, trial)
            worst[name] = max(worst[name], ratio)
    assert max(worst.values()) > 0.01  # the instances are not trivial


def test_robustness_ratio_detects_a_non_robust_rule() -> None:
    x = np.vstack([np.zeros((4, 2)), [[1e6, 1e6]]])
    x[:4] += np.random.default_rng(1).standard_normal((4, 2))
    mean = x.mean(axis=0)
    assert robustness_ratio(mean, x, 1) > 1e6
