"""CMFL scoring (learning/robust/_cmfl.py): eq. 7/8, the median variant and the centroid identity (cmfl spec)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning._errors import ConfigError, InvalidUpdateError
from learning.robust import (
    DISTANCE_FLOOR,
    cmfl_scores,
    cmfl_scores_centroid,
    cmfl_scores_median,
    distance_matrix,
    distance_row,
    member_scores,
)


def updates(n: int, d: int, seed: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(dtype)


def test_distance_row_matches_direct() -> None:
    u = updates(18, 210, seed=0)
    r = updates(1, 210, seed=1)[0]
    expected = ((u.astype(np.float64) - r.astype(np.float64)) ** 2).sum(axis=1)
    np.testing.assert_allclose(distance_row(r, u), expected, rtol=1e-13)


def test_distance_matrix_rows_are_the_members_rows_bit_for_bit() -> None:
    u, refs = updates(9, 70_000, seed=2), updates(4, 70_000, seed=3)
    mat = distance_matrix(refs, u)
    assert mat.shape == (4, 9) and mat.dtype == np.float64
    for c in range(4):
        assert mat[c].tobytes() == distance_row(refs[c], u).tobytes()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), c=st.integers(1, 6), d=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_eq8_forms_and_centroid_identity(n: int, c: int, d: int, seed: int) -> None:
    """cmfl spec §7.8 item 1: C/Σ_c‖g−r_c‖² = 1/(‖g−r̄‖² + V) = C/Σ_c(1/P_k^c)."""
    u = updates(n, d, seed, np.float64)
    refs = updates(c, d, seed + 1, np.float64) * 2
    dist = distance_matrix(refs, u)
    p = cmfl_scores(dist)
    np.testing.assert_allclose(p, c / (1.0 / member_scores(dist)).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(p, cmfl_scores_centroid(refs, u), rtol=1e-9)
    # Ranking by P_k is ranking by distance to the committee centroid.
    centroid = refs.mean(axis=0)
    to_centroid = ((u - centroid) ** 2).sum(axis=1)
    ordered = to_centroid[np.argsort(-p, kind="stable")]
    assert (np.diff(ordered) >= -1e-9 * (1.0 + ordered.max())).all()


def test_eq8_known_value() -> None:
    dist = np.array([[1.0, 4.0], [3.0, 0.0]])
    np.testing.assert_array_equal(cmfl_scores(dist), [2 / 4, 2 / 4])
    np.testing.assert_array_equal(cmfl_scores(np.array([[2.0, 8.0]])), [0.5, 0.125])
    np.testing.assert_array_equal(cmfl_scores_median(np.array([[1.0], [2.0], [9.0]])), [0.5])
    np.testing.assert_array_equal(cmfl_scores_median(np.array([[1.0], [3.0], [9.0], [100.0]])), [1 / 6])


def test_zero_distances_are_floored() -> None:
    u = np.zeros((2, 3), dtype=np.float32)
    dist = distance_matrix(np.zeros((3, 3), np.float32), u)
    p = cmfl_scores(dist)
    assert np.isfinite(p).all() and (p == 3 / DISTANCE_FLOOR).all()
    assert np.isfinite(cmfl_scores_median(dist)).all()
    assert np.isfinite(member_scores(dist)).all()


def test_crafted_reference_steers_eq8_but_not_the_median() -> None:
    """cmfl spec §7.8 item 9: r_bad = C·z − Σ_honest r_c puts the committee centroid on a malicious update z."""
    g = np.random.default_rng(7)
    d, n_honest, c = 30, 10, 5
    honest_updates = g.standard_normal((n_honest, d)) * 0.1 + 1.0
    z = -10.0 * honest_updates.mean(axis=0)  # a scaled back-gradient
    u = np.vstack([honest_updates, z[None]])
    malicious = n_honest  # index of z
    honest_refs = g.standard_normal((c - 1, d)) * 0.1 + 1.0
    r_bad = c * z - honest_refs.sum(axis=0)
    refs = np.vstack([honest_refs, r_bad[None]])
    dist = distance_matrix(refs, u)
    assert int(np.argmax(cmfl_scores(dist))) == malicious
    assert int(np.argmin(cmfl_scores_median(dist))) == malicious  # malicious members (1) < C/2


def test_non_finite_updates_are_rejected_before_scoring() -> None:
    u = updates(4, 5, seed=8)
    u[2, 0] = np.nan
    with pytest.raises(InvalidUpdateError, match="2 contain NaN"):
        distance_row(np.zeros(5, np.float32), u)
    with pytest.raises(InvalidUpdateError, match="reference contains NaN"):
        distance_row(np.full(5, np.inf, np.float32), updates(4, 5, seed=8))
    with pytest.raises(InvalidUpdateError, match="length 4; expected 5"):
        distance_row(np.zeros(4, np.float32), updates(4, 5, seed=8))


@pytest.mark.parametrize(
    "bad", [np.array([1.0, 2.0]), np.zeros((0, 3)), np.array([[1, 2]]), np.array([[1.0, np.nan]]), np.array([[-1.0]])]
)
def test_distance_matrix_validation(bad: np.ndarray) -> None:
    with pytest.raises((ConfigError, InvalidUpdateError)):
        cmfl_scores(bad)
