"""Pre-aggregators (NNM, bucketing, clipping, ARC), chains and the spec-string boundary."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from learning.robust import AGGREGATORS, GeometricMedian, Mean, TrimmedMean
from learning._errors import ConfigError
from learning.robust import (
    ARC,
    NNM,
    PRE_AGGREGATORS,
    Bucketing,
    Chain,
    StaticClipping,
    format_aggregator,
    parse_aggregator,
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def stack(n: int, d: int, seed: int, *, outliers: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, d))
    x[:outliers] += g.standard_normal(d) * 40
    return x


# --- NNM ------------------------------------------------------------------------------------------------------


def ref_nnm(x: np.ndarray, f: int) -> np.ndarray:
    d = np.array([[np.sum((a - b) ** 2) for b in x] for a in x])
    out = np.empty_like(x)
    for i in range(len(x)):
        key = d[i].copy()
        key[i] = -1.0
        out[i] = x[np.argsort(key, kind="stable")[: len(x) - f]].mean(axis=0)
    return out


@pytest.mark.parametrize(("n", "f"), [(1, 0), (3, 1), (7, 3), (12, 4), (20, 9)])
def test_nnm_matches_reference(n: int, f: int) -> None:
    x = stack(n, 9, seed=n, outliers=f)
    np.testing.assert_allclose(NNM(f=f)(x, rng=rng()), ref_nnm(x, f), rtol=1e-12, atol=1e-12)


def test_nnm_byzfl_docstring_example() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    np.testing.assert_array_equal(NNM(f=1)(x, rng=rng()), [[2.5, 3.5, 4.5], [2.5, 3.5, 4.5], [5.5, 6.5, 7.5]])


def test_nnm_includes_the_point_itself_even_with_duplicates() -> None:
    x = np.array([[0.0], [0.0], [0.0], [5.0]])
    out = NNM(f=1)(x, rng=rng())
    np.testing.assert_array_equal(out[3], [5.0 / 3.0])


def test_nnm_f0_mixes_everything() -> None:
    x = stack(6, 4, seed=1)
    np.testing.assert_allclose(NNM(f=0)(x, rng=rng()), np.repeat(x.mean(0)[None], 6, 0), rtol=1e-13)


def test_nnm_keeps_weights() -> None:
    x = stack(5, 3, seed=2)
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    _, w_out = NNM(f=1).apply(x, rng=rng(), weights=w)
    np.testing.assert_allclose(w_out, w / w.sum())


# --- bucketing ------------------------------------------------------------------------------------------------


def test_bucketing_footnote_4_toy_example() -> None:
    """unavailability spec Appendix A footnote 4: {1,2,3,4}, one corrupted value, two buckets of two.

    The adversary corrupts the smallest element of the bucket with the larger mean; the Byzantine-free bucket's
    mean is then strictly below the average of the non-corrupted data, and over the three equally likely
    partitions E[free-bucket mean] = 2 < E[mean of non-corrupted data] ∈ {8/3, 23/9} (tie {1,4} vs {2,3}).
    """
    data = np.array([[1.0], [2.0], [3.0], [4.0]])
    seen: Counter[frozenset[frozenset[float]]] = Counter()
    free_means = {}
    for seed in range(600):
        buckets = Bucketing(bucket_size=2)(data, rng=rng(seed))
        assert buckets.shape == (2, 1)
        np.testing.assert_allclose(buckets.mean(), 2.5)  # a partition into two pairs
        perm = np.random.default_rng(seed).permutation(4)
        pairs = [sorted(data[perm[:2], 0]), sorted(data[perm[2:], 0])]
        np.testing.assert_allclose(sorted(buckets[:, 0]), sorted(np.mean(p) for p in pairs))
        key = frozenset(frozenset(p) for p in pairs)
        seen[key] += 1
        for tie_takes_4 in (True, False):  # the tie {1,4} vs {2,3}: corrupt inside {1,4} or inside {2,3}
            means = [Fraction(sum(map(int, p)), 2) for p in pairs]
            if means[0] != means[1]:
                target = int(np.argmax(means))
            else:
                target = next(i for i, p in enumerate(pairs) if (4.0 in p) == tie_takes_4)
            corrupted = min(pairs[target])
            free = means[1 - target]
            clean = [v for v in (1, 2, 3, 4) if v != corrupted]
            assert free < Fraction(sum(clean), 3)
            free_means[(key, tie_takes_4)] = (free, Fraction(sum(clean), 3))
    assert len(seen) == 3 and min(seen.values()) > 150  # the three partitions, roughly uniformly
    for tie_takes_4, expected_clean in ((True, Fraction(8, 3)), (False, Fraction(23, 9))):
        vals = [v for (k, t), v in free_means.items() if t == tie_takes_4]
        assert sum(f for f, _ in vals) / 3 == 2
        assert sum(c for _, c in vals) / 3 == expected_clean


def test_bucketing_sizes_and_weights() -> None:
    x = stack(100, 3, seed=3)
    out, w = Bucketing(bucket_size=2).apply(x, rng=rng(), weights=np.ones(100))
    assert out.shape == (50, 3)
    assert w is not None
    np.testing.assert_allclose(w.sum(), 1.0)
    np.testing.assert_allclose(out.mean(0), x.mean(0), rtol=1e-12)
    out7 = Bucketing(bucket_size=7)(x, rng=rng())
    assert out7.shape == (15, 3)  # 14 full buckets and one of 2


def test_bucket_size_1_only_permutes() -> None:
    x = stack(9, 4, seed=4)
    out = Bucketing(bucket_size=1)(x, rng=rng(5))
    np.testing.assert_array_equal(out, x[np.random.default_rng(5).permutation(9)])


def test_weighted_bucketing() -> None:
    x = np.array([[0.0], [10.0], [100.0], [1000.0]])
    w = np.array([1.0, 3.0, 0.0, 0.0])
    out, w_out = Bucketing(bucket_size=2).apply(x, rng=rng(0), weights=w)
    assert w_out is not None
    perm = np.random.default_rng(0).permutation(4)
    for b, rows in enumerate((perm[:2], perm[2:])):
        total = w[rows].sum()
        expected = (w[rows] * x[rows, 0]).sum() / total if total else x[rows, 0].mean()
        assert out[b, 0] == pytest.approx(expected)
        assert w_out[b] == pytest.approx(total / w.sum())


# --- clipping and ARC -------------------------------------------------------------------------------------------


def test_static_clipping() -> None:
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = StaticClipping(c=1.0)(x, rng=rng())
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]], rtol=1e-15)
    np.testing.assert_array_equal(out[1], x[1])  # unclipped rows are exact copies


def test_static_clipping_float32_norms_bounded() -> None:
    x = (stack(20, 100, seed=6) * 10).astype(np.float32)
    out = StaticClipping(c=2.0)(x, rng=rng())
    assert out.dtype == np.float32
    assert (np.linalg.norm(out.astype(np.float64), axis=1) <= 2.0 * (1 + 1e-6)).all()


def test_arc_clips_the_k_largest_to_the_next_norm() -> None:
    n, f = 50, 10
    x = stack(n, 6, seed=7) * np.arange(1, n + 1)[:, None]
    norms = np.linalg.norm(x, axis=1)
    out = ARC(f=f)(x, rng=rng())
    k = 2 * f * (n - f) // n
    assert k == 16
    order = np.argsort(-norms)
    threshold = norms[order[k]]
    out_norms = np.linalg.norm(out, axis=1)
    np.testing.assert_allclose(out_norms[order[:k]], threshold, rtol=1e-12)
    np.testing.assert_array_equal(out[order[k:]], x[order[k:]])


def test_arc_byzfl_docstring_example() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    out = ARC(f=1)(x, rng=rng())
    np.testing.assert_allclose(out[2], [4.41004009, 5.04004582, 5.67005155], rtol=1e-8)
    np.testing.assert_array_equal(out[:2], x[:2])


def test_arc_into_mean_is_the_float64_mean_of_the_clipped_rows_for_any_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fused path adds the rows in order, the clipped ones scaled in float64, and divides once by n: the bytes
    # of the float64 mean of the clipped rows (same factors) rounded once, for any number of kernel threads.
    import learning.robust._aggregators as aggregators_module
    import learning.robust._validate as validate_module

    n, f = 12, 3
    d = 2 * aggregators_module._SUM_BLOCK + 1
    x = (stack(n, d, seed=31, outliers=3) * 0.2).astype(np.float32)
    x[7] *= 3  # a clipped row between unclipped runs (k = 4: rows 0-2 and 7)
    x64 = x.astype(np.float64)
    norms = np.linalg.norm(x64, axis=1)
    k = 2 * f * (n - f) // n
    threshold = np.sort(norms)[::-1][k]
    assert list(np.flatnonzero(norms > threshold)) == [0, 1, 2, 7]
    # The factors as the rule computes them (its norms are float32 blocks summed in float64, ~1e-8 relative).
    scale = ARC(f=f)._row_scale(aggregators_module.row_sq_norms(x))
    np.testing.assert_allclose(scale, np.minimum(1.0, threshold / norms), rtol=1e-7)
    expected = ((scale[:, None] * x64).sum(axis=0) / n).astype(np.float32)
    chain = parse_aggregator(f"arc(f={f}) > mean")
    for workers in (1, 2, 3):
        monkeypatch.setattr(validate_module, "WORKERS", workers)
        np.testing.assert_array_equal(chain(x, rng=rng()), expected)


def test_arc_f0_is_identity() -> None:
    x = stack(5, 3, seed=8)
    np.testing.assert_array_equal(ARC(f=0)(x, rng=rng()), x)


# --- chains and the spec boundary -----------------------------------------------------------------------------


def test_chain_equals_manual_composition() -> None:
    x = stack(11, 5, seed=9, outliers=3).astype(np.float32)
    chain = parse_aggregator("nnm(f=3) > trimmed_mean(f=3)")
    assert chain == Chain(pre=(NNM(f=3),), final=TrimmedMean(f=3))
    np.testing.assert_array_equal(chain(x, rng=rng()), TrimmedMean(f=3)(NNM(f=3)(x, rng=rng()), rng=rng()))
    two = parse_aggregator("arc(f=2) > bucketing(bucket_size=2) > geometric_median(iterations=8)")
    expected = GeometricMedian(iterations=8)(
        Bucketing(bucket_size=2)(ARC(f=2)(x, rng=rng(1)), rng=rng(1)), rng=rng(1)
    )
    np.testing.assert_array_equal(two(x, rng=rng(1)), expected)


def test_chain_f_is_checked_against_the_stage_input() -> None:
    chain = parse_aggregator("bucketing(bucket_size=2) > trimmed_mean(f=3)")
    x = stack(12, 3, seed=10)
    with pytest.raises(ConfigError, match=r"f=3, n=6"):
        chain(x, rng=rng())
    parse_aggregator("bucketing(bucket_size=2) > trimmed_mean(f=2)")(x, rng=rng())


def test_weights_flow_through_a_chain() -> None:
    x = np.array([[0.0], [1.0], [2.0], [100.0]])
    w = np.array([1.0, 1.0, 1.0, 0.0])
    out = parse_aggregator("clipping(c=1000.0) > mean")(x, rng=rng(), weights=w)
    np.testing.assert_allclose(out, [1.0])
    with pytest.raises(ConfigError, match="does not support weights"):
        parse_aggregator("nnm(f=1) > trimmed_mean(f=1)")(x, rng=rng(), weights=w)


@pytest.mark.parametrize(
    "spec",
    [
        "mean",
        "median",
        "trimmed_mean(f=2)",
        "geometric_median(nu=1e-05, iterations=10, init='mean', ftol=1e-06)",
        "centered_clipping(tau=100, iterations=3)",
        "krum(f=1, variant='blanchard')",
        "multi_krum(f=2, q=5)",
        "meamed(f=1)",
        "mda(f=1)",
        "nnm(f=2) > trimmed_mean(f=2)",
        "clipping(c=2) > arc(f=1) > bucketing(bucket_size=3) > mean",
    ],
)
def test_parse_format_roundtrip(spec: str) -> None:
    rule = parse_aggregator(spec)
    text = format_aggregator(rule)
    assert parse_aggregator(text) == rule
    assert format_aggregator(parse_aggregator(text)) == text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "non-empty"),
        ("nosuchrule", "unknown aggregator 'nosuchrule'"),
        ("trimmed_mean", "missing 1 required keyword-only argument"),
        ("trimmed_mean(2)", "keyword arguments only"),
        ("trimmed_mean(f=2, g=3)", r"no parameter\(s\) \['g'\]"),
        ("trimmed_mean(f=-1)", "must be >= 0"),
        ("trimmed_mean(f='2')", "must be an int"),
        ("trimmed_mean(f=__import__('os'))", "must be a literal"),
        ("nnm(f=1) > clipping", "last stage must be an aggregator"),
        ("mean > trimmed_mean(f=1)", "only the last stage"),
        ("nnm(f=1) < mean", "chained with '>' only"),
        ("nnm(f=1) > > mean", "cannot parse"),
        ("os.system('x')", "expected name or name"),
        ("mean(**{})", r"\*\* is not allowed"),
    ],
)
def test_parse_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_aggregator(spec)


def test_chain_rejects_unregistered_stages() -> None:
    with pytest.raises(ConfigError):
        Chain(pre=(Mean(),), final=Mean())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Chain(pre=(), final=NNM(f=1))  # type: ignore[arg-type]


def test_registries_are_disjoint_and_named() -> None:
    assert not set(AGGREGATORS) & set(PRE_AGGREGATORS)
    for name, cls in itertools.chain(AGGREGATORS.items(), PRE_AGGREGATORS.items()):
        assert cls.name == name


@pytest.mark.parametrize("spec", ["clipping(c=1.5) > mean", "arc(f=3) > mean", "clipping(c=3.0) > arc(f=2) > mean"])
def test_row_scalings_fused_into_the_mean_match_materialised_stages(spec: str) -> None:
    x = (stack(12, 300, seed=11, outliers=3) * 0.2).astype(np.float32)
    chain = parse_aggregator(spec)
    assert isinstance(chain, Chain)
    y = x
    for stage in chain.pre:
        y = stage(y, rng=rng())
    np.testing.assert_allclose(chain(x, rng=rng()), Mean()(y, rng=rng()), rtol=2e-6, atol=1e-7)
    w = np.arange(1.0, 13.0)
    np.testing.assert_allclose(chain(x, rng=rng(), weights=w), Mean()(y, rng=rng(), weights=w), rtol=2e-6, atol=1e-7)


def test_norm_based_rules_handle_float32_values_whose_squares_overflow() -> None:
    x = np.ones((6, 50), dtype=np.float32)
    x[0] = 1e30  # ‖x_0‖² = 5e61 overflows float32 but not float64
    clipped = StaticClipping(c=1.0)(x, rng=rng())
    assert np.linalg.norm(clipped[0].astype(np.float64)) == pytest.approx(1.0, rel=1e-6)
    arc = ARC(f=1)(x, rng=rng())
    np.testing.assert_allclose(np.linalg.norm(arc.astype(np.float64), axis=1), np.sqrt(50), rtol=1e-6)
    from learning.robust import CenteredClipping

    cc = CenteredClipping(tau=1.0, iterations=1)(x, rng=rng())
    np.testing.assert_allclose(cc, np.full(50, (5 / np.sqrt(50) + 1 / np.sqrt(50)) / 6), rtol=1e-6)
