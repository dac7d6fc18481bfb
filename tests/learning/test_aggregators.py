"""Known values and reference implementations for the aggregation rules (learning/robust/_aggregators.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats

from learning.robust import _aggregators
from learning.robust import (
    MDA,
    CenteredClipping,
    CoordinateWiseMedian,
    GeometricMedian,
    Krum,
    MeaMed,
    Mean,
    MultiKrum,
    TrimmedMean,
    pairwise_sq_distances,
)
from learning._errors import ConfigError

RNG = np.random.default_rng(0)


def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def stack(n: int, d: int, seed: int, *, outliers: int = 0, dtype: type = np.float64) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, d))
    if outliers:
        x[:outliers] += g.standard_normal(d) * 50
    return x.astype(dtype)


# --- reference implementations (direct, no Gram matrix) -------------------------------------------------------


def ref_sq_dist(x: np.ndarray) -> np.ndarray:
    return np.array([[float(np.sum((a - b) ** 2)) for b in x] for a in x])


def ref_krum_scores(x: np.ndarray, neighbours: int) -> np.ndarray:
    d = ref_sq_dist(x)
    return np.array([np.sort(np.delete(d[i], i))[:neighbours].sum() for i in range(len(x))])


def ref_meamed(x: np.ndarray, f: int) -> np.ndarray:
    n, d = x.shape
    out = np.empty(d)
    for k in range(d):
        col = x[:, k]
        med = np.median(col)
        order = np.argsort(np.abs(col - med), kind="stable")
        out[k] = col[order[: n - f]].mean()
    return out


def ref_nnm(x: np.ndarray, f: int) -> np.ndarray:
    d = ref_sq_dist(x)
    out = np.empty_like(x, dtype=np.float64)
    for i in range(len(x)):
        key = d[i].copy()
        key[i] = -1
        out[i] = x[np.argsort(key, kind="stable")[: len(x) - f]].mean(axis=0)
    return out


def ref_cc(x: np.ndarray, tau: float, iterations: int, w: np.ndarray | None = None) -> np.ndarray:
    a = np.full(len(x), 1 / len(x)) if w is None else w / w.sum()
    v = np.zeros(x.shape[1])
    for _ in range(iterations):
        diff = x - v
        norms = np.linalg.norm(diff, axis=1)
        scale = np.minimum(1.0, tau / np.where(norms == 0, np.inf, norms))
        v = v + (a[:, None] * scale[:, None] * diff).sum(axis=0)
    return v


def ref_weiszfeld(x: np.ndarray, nu: float, iterations: int, w: np.ndarray | None = None) -> np.ndarray:
    a = np.full(len(x), 1 / len(x)) if w is None else w / w.sum()
    z = np.zeros(x.shape[1])
    for _ in range(iterations):
        beta = a / np.maximum(nu, np.linalg.norm(x - z, axis=1))
        z = (beta[:, None] * x).sum(axis=0) / beta.sum()
    return z


# --- mean ----------------------------------------------------------------------------------------------------


def test_mean_and_weighted_mean_known_values() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 12.0]])
    np.testing.assert_array_equal(Mean()(x, rng=rng()), [3.0, 6.0])
    np.testing.assert_allclose(Mean()(x, rng=rng(), weights=np.array([1, 1, 2])), [3.5, 7.5], rtol=1e-15)
    np.testing.assert_allclose(Mean()(x, rng=rng(), weights=np.array([0, 0, 5])), [5.0, 12.0], rtol=1e-15)


def test_mean_float32_accumulates_in_float64() -> None:
    # 2^24 + 1 is not a float32; the float64 sum of [2^24, 1, 1, ...] divided by n is exact before rounding.
    x = np.array([[2.0**24]] + [[1.0]] * 7, dtype=np.float32)
    out = Mean()(x, rng=rng())
    assert out.dtype == np.float32
    assert out[0] == np.float32((2.0**24 + 7) / 8)


def test_mean_float32_is_numpys_float64_mean_rounded_once_for_any_threads_and_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # d spans several accumulator blocks and ends in a one-column block; magnitudes span 2^±30. numpy's float64
    # mean over axis 0 adds whole rows in order, so the blocked, threaded kernel must give exactly its bytes.
    import learning.robust._validate as validate_module

    d = 2 * _aggregators._SUM_BLOCK + 1
    g = np.random.default_rng(21)
    x = (g.standard_normal((9, d)) * np.exp2(g.integers(-30, 31, (9, d)))).astype(np.float32)
    expected = np.mean(x.astype(np.float64), axis=0).astype(np.float32)
    for workers, block in itertools.product((1, 2, 3), (_aggregators._SUM_BLOCK, 4097, 5)):
        monkeypatch.setattr(validate_module, "WORKERS", workers)
        monkeypatch.setattr(_aggregators, "_SUM_BLOCK", block)  # one-column blocks inside the range too
        np.testing.assert_array_equal(Mean()(x, rng=rng()), expected)


@pytest.mark.parametrize("d", [1, 2, _aggregators._SUM_BLOCK + 1])
def test_mean_sums_each_column_in_row_order_wherever_its_block_ends(d: int) -> None:
    # In row order each 100 is absorbed by 2^60 (half an ulp is 128) and the column sums to 0; a pairwise sum
    # (numpy's choice when a reduction has a single column) adds the 100s together first and returns 1536.
    col = np.array([2.0**60] + [100.0] * 14 + [-(2.0**60)], dtype=np.float32)
    x = np.zeros((16, d), dtype=np.float32)
    x[:, -1] = col
    x[:, 0] = col
    out = Mean()(x, rng=rng())
    assert out[0] == 0.0 and out[-1] == 0.0


def test_combine_is_the_sequential_float64_sum_for_any_threads_and_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A leading run of unit coefficients (rows 3-4, one reduction), then scaled and unit rows out of order: the
    # bytes of the row-by-row float64 sum of coef[k] * x[rows[k]], divided once and rounded once.
    import learning.robust._validate as validate_module

    d = _aggregators._SUM_BLOCK + 3
    x = (np.random.default_rng(22).standard_normal((10, d)) * 3).astype(np.float32)
    rows = np.array([3, 4, 5, 0, 7, 8, 9])
    coef = np.array([1.0, 1.0, 0.25, 1.0, 1.0, 1.0, -2.5])
    expected = ((coef[:, None] * x[rows].astype(np.float64)).sum(axis=0) / 3.0).astype(np.float32)
    for workers, block in itertools.product((1, 2), (_aggregators._SUM_BLOCK, 5)):
        monkeypatch.setattr(validate_module, "WORKERS", workers)
        monkeypatch.setattr(_aggregators, "_SUM_BLOCK", block)
        out = _aggregators._combine(x, rows, coef, 3.0)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, expected)


# --- coordinate-wise rules -------------------------------------------------------------------------------------


def test_median_odd_even_and_no_overflow() -> None:
    x = np.array([[1.0, 5.0], [2.0, 0.0], [9.0, 1.0]])
    np.testing.assert_array_equal(CoordinateWiseMedian()(x, rng=rng()), [2.0, 1.0])
    x4 = np.array([[1.0], [2.0], [4.0], [100.0]])
    np.testing.assert_array_equal(CoordinateWiseMedian()(x4, rng=rng()), [3.0])
    big = np.full((2, 3), 3.0e38, dtype=np.float32)
    out = CoordinateWiseMedian()(big, rng=rng())
    assert np.isfinite(out).all() and out.dtype == np.float32
    np.testing.assert_array_equal(out, big[0])


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_median_matches_numpy(n: int) -> None:
    x = stack(n, 37, seed=n)
    np.testing.assert_allclose(CoordinateWiseMedian()(x, rng=rng()), np.median(x, axis=0), rtol=0, atol=1e-15)


@pytest.mark.parametrize(("n", "f"), [(1, 0), (4, 1), (9, 4), (10, 3), (21, 5)])
def test_trimmed_mean_matches_scipy(n: int, f: int) -> None:
    x = stack(n, 29, seed=100 + n, outliers=f)
    expected = scipy.stats.trim_mean(x, f / n, axis=0)
    np.testing.assert_allclose(TrimmedMean(f=f)(x, rng=rng()), expected, rtol=1e-13, atol=1e-13)


def test_trimmed_mean_known_value() -> None:
    x = np.array([[1.0], [2.0], [3.0], [100.0]])
    assert TrimmedMean(f=1)(x, rng=rng())[0] == 2.5


@pytest.mark.parametrize(("n", "f"), [(3, 1), (7, 2), (10, 4), (15, 3)])
def test_meamed_matches_reference(n: int, f: int) -> None:
    x = stack(n, 23, seed=200 + n, outliers=f)
    np.testing.assert_allclose(MeaMed(f=f)(x, rng=rng()), ref_meamed(x, f), rtol=1e-12, atol=1e-12)


def test_meamed_f0_is_mean() -> None:
    x = stack(6, 5, seed=3)
    np.testing.assert_allclose(MeaMed(f=0)(x, rng=rng()), x.mean(axis=0), rtol=1e-13)


def test_meamed_repeated_value_at_the_window_edge() -> None:
    """Workload A1 (``benchmarks/README.md``), coordinate 725,866: a repeated value at the lower edge of the window.

    Column 0: sorted values -3, -3, 0, 1, 2, median 0, distances 3, 3, 0, 1, 2. The n - f = 4 closest are 0, 1, 2
    and one -3: mean (-3 + 0 + 1 + 2)/4 = 0. A window chosen by its largest distance ties [-3, -3, 0, 1] with
    [-3, 0, 1, 2] (both 3) and took the first, dropping 2 (distance 2 < 3): (-3 - 3 + 0 + 1)/4 = -1.25.
    Column 1: -1, 0, 1, 2, 3, median 1: -1 and 3 are both at distance 2, a genuine tie between different values;
    the lower one is kept: (-1 + 0 + 1 + 2)/4 = 0.5 (ByzFL's argpartition may return 1.5).
    """
    x = np.array([[-3.0, -1.0], [-3.0, 0.0], [0.0, 1.0], [1.0, 2.0], [2.0, 3.0]])
    expected = [(-3.0 + 0.0 + 1.0 + 2.0) / 4, (-1.0 + 0.0 + 1.0 + 2.0) / 4]
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1], [3, 1, 4, 0, 2]):
        for dtype in (np.float32, np.float64):
            out = MeaMed(f=1)(np.ascontiguousarray(x[order]).astype(dtype), rng=rng())
            np.testing.assert_array_equal(out, np.array(expected, dtype=dtype))


def test_meamed_with_many_ties_is_the_n_minus_f_closest_values() -> None:
    """Small integers (many repeated values and equal distances), exact arithmetic: the n - f values with the
    smallest ``(|v - median|, v)`` -- closest first, the lower value first on equal distance."""
    g = np.random.default_rng(31)
    for trial in range(300):
        n = int(g.integers(2, 12))
        f = int(g.integers(0, (n - 1) // 2 + 1))
        x = g.integers(-3, 4, size=(n, 9)).astype(np.float64)
        expected = []
        for col in x.T:
            med = float(np.median(col))
            closest = sorted(col.tolist(), key=lambda v: (abs(v - med), v))[: n - f]
            expected.append(sum(closest) / (n - f))
        np.testing.assert_allclose(MeaMed(f=f)(x, rng=rng()), expected, rtol=1e-15, atol=0, err_msg=f"{trial=}")


# --- geometric median --------------------------------------------------------------------------------------------


def test_geometric_median_collinear_points() -> None:
    # unavailability spec §6.1 item 7: 7 collinear points, equal weights, nu = 1e-6, 100 iterations -> the median to 1e-9.
    pts = np.array([[0.0], [1.0], [2.5], [3.0], [7.0], [8.0], [20.0]])
    out = GeometricMedian(nu=1e-6, iterations=100)(pts, rng=rng())
    assert abs(out[0] - 3.0) < 1e-9
    # Collinear in 2-D: the geometric median is the median point on the line.
    pts2 = np.hstack([pts, 2 * pts + 1])
    np.testing.assert_allclose(GeometricMedian(nu=1e-6, iterations=100)(pts2, rng=rng()), [3.0, 7.0], atol=1e-8)


def test_geometric_median_matches_direct_weiszfeld() -> None:
    x = stack(9, 13, seed=7, outliers=2)
    for nu, it in [(0.1, 3), (0.1, 8), (1e-3, 25)]:
        np.testing.assert_allclose(
            GeometricMedian(nu=nu, iterations=it)(x, rng=rng()), ref_weiszfeld(x, nu, it), rtol=1e-9, atol=1e-10
        )
    w = np.arange(1.0, 10.0)
    np.testing.assert_allclose(
        GeometricMedian(nu=0.1, iterations=8)(x, rng=rng(), weights=w), ref_weiszfeld(x, 0.1, 8, w), rtol=1e-9
    )


def test_geometric_median_minimises_the_sum_of_distances() -> None:
    x = stack(11, 4, seed=8, outliers=3)
    z = GeometricMedian(nu=1e-9, iterations=2000, init="mean")(x, rng=rng())

    def objective(y: np.ndarray) -> float:
        return float(np.linalg.norm(x - y, axis=1).sum())

    best = objective(z)
    probe = np.random.default_rng(9)
    for _ in range(200):
        assert objective(z + probe.standard_normal(4) * 1e-3) >= best - 1e-9
    assert best <= min(objective(p) for p in x) + 1e-12


def ref_weiszfeld_direct(
    x: np.ndarray, nu: float, iterations: int, init: str, ftol: float, w: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Weiszfeld in float64 with direct distances ``‖x_i − z‖`` (no Gram matrix), ``ftol`` as RFA; ``(z, steps)``."""
    a = np.full(len(x), 1 / len(x)) if w is None else w / w.sum()
    z = np.zeros(x.shape[1]) if init == "zero" else (a[:, None] * x).sum(axis=0)
    dist = np.linalg.norm(x - z, axis=1)
    obj = float(a @ dist)
    for step in range(1, iterations + 1):
        beta = a / np.maximum(nu, dist)
        z = (beta[:, None] * x).sum(axis=0) / beta.sum()
        dist = np.linalg.norm(x - z, axis=1)
        new = float(a @ dist)
        if ftol > 0 and abs(obj - new) < ftol * new:
            return z, step
        obj = new
    return z, iterations


@pytest.mark.parametrize("offset", [1e3, -3e5])
def test_geometric_median_inputs_with_a_large_shared_offset(offset: float) -> None:
    """Inputs ``offset + 1e-2·N(0, 1)``. From ``X Xᵀ`` the distances lost ~‖offset‖²/spread² of
    float64's precision (about 3e-7 of the spread in the result at 1e3, and RFA's ``ftol`` test stopped after 3 steps
    instead of 1); recomputed relative to the medoid they are as precise as direct differences."""
    g = np.random.default_rng(41)
    x = offset + 1e-2 * g.standard_normal((50, 10_000))
    x[:4] += 1.0  # a few outliers, far in units of the spread
    spread = float(np.linalg.norm(x - np.median(x, axis=0), axis=1).mean())
    rounding = 1e-14 * abs(offset) * np.sqrt(x.shape[1])  # float64 rounding of the result itself (both sides)
    w = g.random(50) + 0.5
    cases = [
        (dict(nu=1e-5, iterations=10, init="mean", ftol=1e-6), None),  # RFA (sself spec)
        (dict(nu=1e-5, iterations=10, init="mean", ftol=1e-6), w),
        (dict(nu=1e-5, iterations=10, init="mean", ftol=0.0), None),
        (dict(nu=0.1, iterations=3, init="zero", ftol=0.0), None),  # ByzFL's defaults
        (dict(nu=1e-6, iterations=60, init="mean", ftol=0.0), w),
    ]
    for kw, weights in cases:
        nu, iterations, init, ftol = float(kw["nu"]), int(kw["iterations"]), str(kw["init"]), float(kw["ftol"])
        expected, steps = ref_weiszfeld_direct(x, nu, iterations, init, ftol, weights)
        out = GeometricMedian(nu=nu, iterations=iterations, init=init, ftol=ftol)(  # type: ignore[arg-type]
            x, rng=rng(), weights=weights
        )
        assert np.linalg.norm(out - expected) <= 1e-9 * spread + rounding, kw
        if ftol:
            # Same stopping step as the direct reference: one step fewer or more moves z by far more than 1e-9.
            rule = GeometricMedian(nu=nu, iterations=steps, init=init)  # type: ignore[arg-type]
            fixed = rule(x, rng=rng(), weights=weights)
            np.testing.assert_array_equal(out, fixed)


def test_geometric_median_without_a_shared_offset_uses_the_plain_gram_matrix() -> None:
    """The recentring is only for inputs whose offset dwarfs their spread: zero-mean updates (workload A1's shape)
    and far outliers alone keep ``X Xᵀ`` (same bytes as before the recentring existed)."""
    g = np.random.default_rng(42)
    a = np.full(20, 1 / 20)
    block = _aggregators._GRAM_BLOCK
    x = g.standard_normal((20, 2 * block + 5)).astype(np.float32)
    x[:3] *= 1e6
    gram = _aggregators.gram_matrix(x)
    assert _aggregators._central_input(gram, a) is None
    assert _aggregators._weiszfeld_gram(x, a).tobytes() == gram.tobytes()  # first block, then the rest: same bytes
    shifted = x.astype(np.float64) + 1e4
    assert _aggregators._central_input(_aggregators.gram_matrix(shifted), a) in range(3, 20)  # a medoid, not an outlier
    assert _aggregators._weiszfeld_gram(shifted, a).shape == (21, 21)
    late = x.astype(np.float64)
    late[:, block:] += 1e5  # the offset only after the first block: found on the whole X Xᵀ, then recomputed
    assert _aggregators._central_input(_aggregators.gram_matrix(late[:, :block]), a) is None
    assert _aggregators._weiszfeld_gram(late, a).shape == (21, 21)


def test_geometric_median_ftol_stops_early() -> None:
    x = stack(8, 5, seed=10)
    early = GeometricMedian(nu=1e-5, iterations=10, init="mean", ftol=1e300)(x, rng=rng())
    one = GeometricMedian(nu=1e-5, iterations=1, init="mean")(x, rng=rng())
    np.testing.assert_array_equal(early, one)


# --- centered clipping ----------------------------------------------------------------------------------------


def test_centered_clipping_inside_radius_is_the_mean() -> None:
    x = stack(6, 4, seed=11)
    w = np.array([1.0, 2.0, 3.0, 1.0, 1.0, 2.0])
    out = CenteredClipping(tau=1e6, iterations=1)(x, rng=rng(), weights=w)
    np.testing.assert_allclose(out, (w[:, None] * x).sum(0) / w.sum(), rtol=1e-13)


def test_centered_clipping_tiny_radius_bounds_each_step() -> None:
    x = stack(6, 4, seed=12) * 100
    tau = 1e-3
    v1 = CenteredClipping(tau=tau, iterations=1)(x, rng=rng())
    assert np.linalg.norm(v1) <= tau * (1 + 1e-12)
    v3 = CenteredClipping(tau=tau, iterations=3)(x, rng=rng())
    assert np.linalg.norm(v3) <= 3 * tau * (1 + 1e-12)


@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_centered_clipping_matches_jacobi_reference(iterations: int) -> None:
    x = stack(10, 7, seed=13, outliers=3)
    w = np.random.default_rng(14).random(10)
    for tau in (0.5, 3.0, 100.0):
        np.testing.assert_allclose(
            CenteredClipping(tau=tau, iterations=iterations)(x, rng=rng()), ref_cc(x, tau, iterations), rtol=1e-10
        )
        np.testing.assert_allclose(
            CenteredClipping(tau=tau, iterations=iterations)(x, rng=rng(), weights=w),
            ref_cc(x, tau, iterations, w),
            rtol=1e-10,
        )


# --- Krum, Multi-Krum ------------------------------------------------------------------------------------------


def test_pairwise_distances_match_direct() -> None:
    x = stack(7, 50, seed=15, dtype=np.float32)
    np.testing.assert_allclose(pairwise_sq_distances(x), ref_sq_dist(x.astype(np.float64)), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize(("variant", "extra"), [("byzfl", 1), ("blanchard", 2)])
def test_krum_matches_reference(variant: str, extra: int) -> None:
    for seed in range(20):
        n = 5 + seed % 9
        f = (n - 3) // 2 if variant == "blanchard" else (n - 1) // 2  # the largest f each variant accepts
        x = stack(n, 6, seed=seed, outliers=f)
        out = Krum(f=f, variant=variant)(x, rng=rng())  # type: ignore[arg-type]
        expected = x[int(np.argmin(ref_krum_scores(x, n - f - extra)))]
        np.testing.assert_array_equal(out, expected)


def test_krum_returns_a_copy_of_an_input() -> None:
    x = stack(7, 5, seed=16, outliers=2)
    out = Krum(f=2)(x, rng=rng())
    assert any(np.array_equal(out, row) for row in x)
    assert not np.shares_memory(out, x)


def test_krum_and_multi_krum_ties_go_to_the_lowest_index() -> None:
    """Exact ties (integer coordinates: exact Gram arithmetic). Square vertices, f = 1, n - f - 1 = 2 neighbours:
    every vertex scores 2 + 2 = 4, so Krum returns input 0 and Multi-Krum(q=2) averages inputs 0 and 1; reversing
    the input order reverses the choice (a symmetric function except on exact ties)."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    np.testing.assert_array_equal(_aggregators._krum_scores(pairwise_sq_distances(x), 2), [4.0, 4.0, 4.0, 4.0])
    np.testing.assert_array_equal(Krum(f=1)(x, rng=rng()), [1.0, 0.0])
    np.testing.assert_array_equal(Krum(f=1)(x[::-1].copy(), rng=rng()), [0.0, -1.0])
    np.testing.assert_array_equal(MultiKrum(f=1, q=2)(x, rng=rng()), [0.5, 0.5])
    np.testing.assert_array_equal(MultiKrum(f=1, q=2)(x[::-1].copy(), rng=rng()), [-0.5, -0.5])


def test_krum_and_multi_krum_ties_between_duplicated_rows() -> None:
    """1-D points 0, 10, 0, 1, 2 (rows 0 and 2 equal), f = 1, 3 neighbours. Scores by hand:
    row 0: 0 + 1 + 4 = 5, row 1: 64 + 81 + 100 = 245, row 2: 5, row 3: 1 + 1 + 1 = 3, row 4: 1 + 4 + 4 = 9.
    Multi-Krum(q=2) takes rows 3 and 0 (not 2): with weights 1, 1, 3, 1, 1 the weighted mean is
    (1·1 + 1·0)/2 = 0.5 (row 2 would give (1·1 + 3·0)/4 = 0.25)."""
    x = np.array([[0.0], [10.0], [0.0], [1.0], [2.0]])
    np.testing.assert_array_equal(_aggregators._krum_scores(pairwise_sq_distances(x), 3), [5.0, 245.0, 5.0, 3.0, 9.0])
    w = np.array([1.0, 1.0, 3.0, 1.0, 1.0])
    assert MultiKrum(f=1, q=2)(x, rng=rng(), weights=w)[0] == 0.5
    assert MultiKrum(f=1, q=3)(x, rng=rng(), weights=w)[0] == (1.0 + 0.0 + 0.0) / 5  # rows 3, 0, 2
    # Duplicates as the Krum choice: rows 1 and 2 tie at the minimum (0 + 1 + 1 = 2); row 1 is chosen.
    y = np.array([[3.0], [0.0], [0.0], [1.0], [-1.0]])
    np.testing.assert_array_equal(_aggregators._krum_scores(pairwise_sq_distances(y), 3), [22.0, 2.0, 2.0, 6.0, 6.0])
    assert MultiKrum(f=1, q=1)(y, rng=rng(), weights=np.array([1.0, 2.0, 5.0, 1.0, 1.0]))[0] == 0.0
    # Rows 3 and 4 (1 and -1) tie exactly at 6 and are different: q = 3 takes row 3.
    assert MultiKrum(f=1, q=3)(y, rng=rng())[0] == (0.0 + 0.0 + 1.0) / 3


def test_duplicated_rows_get_bit_identical_krum_scores() -> None:
    """Random float32 rows with one row repeated: the Gram matrix gives both copies the same distances to every
    other row, bit for bit, so the tie between them is exact and broken by index (the output is the same row)."""
    g = np.random.default_rng(43)
    for n, d, i, j in [(12, 50_001, 3, 7), (30, 20_000, 0, 29), (9, 3, 8, 2)]:
        x = g.standard_normal((n, d)).astype(np.float32)
        x[j] = x[i]
        scores = _aggregators._krum_scores(pairwise_sq_distances(x), n - 2 - 1)
        assert scores[i] == scores[j]
        order = np.lexsort((np.arange(n), scores))
        assert list(order).index(min(i, j)) == list(order).index(max(i, j)) - 1


def test_krum_blanchard_needs_n_above_2f_plus_2() -> None:
    with pytest.raises(ConfigError, match="n > 2f"):
        Krum(f=2, variant="blanchard")(stack(6, 3, seed=0), rng=rng())
    Krum(f=2, variant="byzfl")(stack(6, 3, seed=0), rng=rng())


def test_multi_krum_matches_reference() -> None:
    for seed in range(15):
        n = 6 + seed % 7
        f = (n - 1) // 2
        x = stack(n, 5, seed=seed, outliers=f)
        scores = ref_krum_scores(x, n - f - 1)
        for q in (None, 1, n - f, n):
            qq = n - f if q is None else q
            chosen = np.argsort(scores, kind="stable")[:qq]
            np.testing.assert_allclose(MultiKrum(f=f, q=q)(x, rng=rng()), x[chosen].mean(axis=0), rtol=1e-12)
        w = np.arange(1.0, n + 1)
        chosen = np.argsort(scores, kind="stable")[: n - f]
        expected = (w[chosen, None] * x[chosen]).sum(0) / w[chosen].sum()
        np.testing.assert_allclose(MultiKrum(f=f)(x, rng=rng(), weights=w), expected, rtol=1e-12)


def test_multi_krum_q_above_n_is_rejected() -> None:
    with pytest.raises(ConfigError, match="q=9"):
        MultiKrum(f=1, q=9)(stack(5, 2, seed=0), rng=rng())


def test_multi_krum_filters_far_outliers() -> None:
    x = stack(10, 8, seed=17)
    x[:3] = 1e6
    out = MultiKrum(f=3)(x, rng=rng())
    assert np.abs(out).max() < 10


# --- MDA ----------------------------------------------------------------------------------------------------


def brute_mda(x: np.ndarray, f: int) -> np.ndarray:
    d = ref_sq_dist(x)
    n = len(x)
    best = None
    for subset in itertools.combinations(range(n), n - f):
        sub = d[np.ix_(subset, subset)]
        key = (sub.max(), sub.sum())
        if best is None or key < best[0]:
            best = (key, subset)
    assert best is not None
    return x[list(best[1])].mean(axis=0)


def test_mda_matches_brute_force() -> None:
    g = np.random.default_rng(18)
    for trial in range(120):
        n = int(g.integers(3, 10))
        f = int(g.integers(0, (n - 1) // 2 + 1))
        x = g.standard_normal((n, int(g.integers(1, 4))))
        if trial % 2:
            x[:f] += g.standard_normal(x.shape[1]) * 20
        np.testing.assert_allclose(MDA(f=f)(x, rng=rng()), brute_mda(x, f), rtol=1e-12, atol=1e-12)


def test_mda_is_fast_where_enumeration_is_not() -> None:
    # C(50, 10) ~ 1e10 subsets: ByzFL's enumeration never finishes; the vertex-cover search does.
    x = stack(50, 20, seed=19, outliers=10)
    out = MDA(f=10)(x, rng=rng())
    np.testing.assert_allclose(out, x[10:].mean(axis=0), rtol=1e-12)


def test_mda_with_tied_distances_has_minimum_diameter() -> None:
    g = np.random.default_rng(20)
    for _ in range(60):
        n = int(g.integers(4, 9))
        f = int(g.integers(1, (n - 1) // 2 + 1))
        x = g.integers(0, 4, size=(n, 1)).astype(float)
        out = MDA(f=f)(x, rng=rng())
        d = ref_sq_dist(x)
        best = min(d[np.ix_(s, s)].max() for s in itertools.combinations(range(n), n - f))
        # The output is the mean of some subset of n - f inputs of diameter `best`.
        found = any(
            d[np.ix_(s, s)].max() == best and np.allclose(x[list(s)].mean(0), out)
            for s in itertools.combinations(range(n), n - f)
        )
        assert found


# --- parameter validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrimmedMean(f=-1),
        lambda: TrimmedMean(f=1.5),  # type: ignore[arg-type]
        lambda: TrimmedMean(f=True),  # type: ignore[arg-type]
        lambda: Krum(f=1, variant="other"),  # type: ignore[arg-type]
        lambda: MultiKrum(f=1, q=0),
        lambda: GeometricMedian(nu=0.0),
        lambda: GeometricMedian(iterations=0),
        lambda: GeometricMedian(init="median"),  # type: ignore[arg-type]
        lambda: GeometricMedian(ftol=float("nan")),
        lambda: CenteredClipping(tau=-1.0),
        lambda: CenteredClipping(iterations=0),
        lambda: MeaMed(f="2"),  # type: ignore[arg-type]
        lambda: MDA(f=-3),
    ],
)
def test_bad_parameters_raise_config_error(make: object) -> None:
    with pytest.raises(ConfigError):
        make()  # type: ignore[operator]


def test_integer_like_parameters_are_normalised() -> None:
    assert GeometricMedian(nu=1, iterations=np.int64(4)) == GeometricMedian(nu=1.0, iterations=4)
    assert type(GeometricMedian(nu=1).nu) is float
    assert type(TrimmedMean(f=np.int32(2)).f) is int


@pytest.mark.parametrize(
    "rule", [CoordinateWiseMedian(), TrimmedMean(f=1), MeaMed(f=1), Krum(f=1), MDA(f=1)], ids=lambda r: r.name
)
def test_unweighted_rules_refuse_weights(rule: object) -> None:
    with pytest.raises(ConfigError, match="does not support weights"):
        rule(stack(5, 3, seed=0), rng=rng(), weights=np.ones(5))  # type: ignore[operator]
