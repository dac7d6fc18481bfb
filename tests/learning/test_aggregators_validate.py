"""Update validation before aggregation (learning/robust/_validate.py): NaN/Inf, shape and dtype are rejected."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from learning._errors import ConfigError, InvalidUpdateError, LearningError
from learning.robust import (
    FLOAT64_ABS_MAX,
    check_rng,
    nonfinite_rows,
    parse_aggregator,
    validate_update,
    validate_updates,
    validate_weights,
)


def good(n: int = 5, d: int = 4, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, d)).astype(dtype)


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_finite_rows_are_named(bad_value: float, dtype: type) -> None:
    x = good(6, 7, dtype)
    x[3, 2] = bad_value
    x[5, 0] = bad_value
    with pytest.raises(InvalidUpdateError, match=r"update\(s\) 3, 5 contain NaN or Inf"):
        validate_updates(x)
    np.testing.assert_array_equal(nonfinite_rows(x), [3, 5])


def test_inf_minus_inf_in_one_row_is_caught() -> None:
    x = good(3, 4)
    x[1, 0], x[1, 1] = np.inf, -np.inf
    with pytest.raises(InvalidUpdateError, match="1 contain"):
        validate_updates(x)


def test_huge_finite_float32_rows_are_accepted() -> None:
    # The float32 row sum overflows; the exact element check must clear the row.
    x = np.full((3, 8), 3.0e38, dtype=np.float32)
    assert validate_updates(x) is x
    assert nonfinite_rows(x).size == 0


def test_float64_magnitude_bound() -> None:
    x = good(3, 4, np.float64)
    x[2, 1] = FLOAT64_ABS_MAX * 2
    with pytest.raises(InvalidUpdateError, match="2 have float64 entries beyond"):
        validate_updates(x)
    x[2, 1] = -FLOAT64_ABS_MAX
    validate_updates(x)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(4, dtype=np.float32),  # 1-D
        np.zeros((2, 3, 4), dtype=np.float32),  # 3-D
        np.zeros((0, 4), dtype=np.float32),  # no update
        np.zeros((3, 0), dtype=np.float32),  # empty vectors
        np.zeros((3, 4), dtype=np.int64),
        np.zeros((3, 4), dtype=np.float16),
        np.zeros((3, 4), dtype=np.complex64),
        np.zeros((3, 4), dtype=">f4"),  # non-native byte order
        np.zeros((3, 4), dtype=object),
        [np.zeros(3, np.float32), np.zeros(4, np.float32)],  # ragged
        [np.zeros(3, np.float32), np.zeros(3, np.float64)],  # mixed dtypes
        [],
        "not an array",
    ],
    ids=repr,
)
def test_wrong_shapes_and_dtypes_are_rejected(bad: object) -> None:
    with pytest.raises(InvalidUpdateError):
        validate_updates(bad)


def test_wrong_dimension_is_rejected() -> None:
    with pytest.raises(InvalidUpdateError, match="dimension 4; expected 5"):
        validate_updates(good(3, 4), dim=5)


def test_sequence_of_vectors_is_stacked() -> None:
    rows = list(good(4, 3))
    out = validate_updates(rows)
    assert out.shape == (4, 3) and out.flags.c_contiguous


def test_non_contiguous_input_is_copied_to_c_order() -> None:
    x = np.asfortranarray(good(5, 6))
    out = validate_updates(x)
    assert out.flags.c_contiguous and not np.shares_memory(out, x)
    np.testing.assert_array_equal(out, x)
    c = good(5, 6)
    assert validate_updates(c) is c


def test_validate_update_single_vector() -> None:
    v = good(1, 5)[0]
    assert validate_update(v, dim=5, dtype=np.float32) is v
    with pytest.raises(InvalidUpdateError, match="length 5; expected 6"):
        validate_update(v, dim=6)
    with pytest.raises(InvalidUpdateError, match="dtype float32; expected float64"):
        validate_update(v, dtype=np.float64)
    v2 = v.copy()
    v2[0] = np.nan
    with pytest.raises(InvalidUpdateError, match="peer-7 contains NaN"):
        validate_update(v2, what="peer-7")
    with pytest.raises(InvalidUpdateError):
        validate_update(good(2, 2))


def test_weights_are_validated_and_normalised() -> None:
    np.testing.assert_array_equal(validate_weights([1, 1, 2], 3), [0.25, 0.25, 0.5])
    for bad in ([1, 2], [1, -1, 1], [0, 0, 0], [1, np.nan, 1], [[1, 1, 1]], [True, False, True]):
        with pytest.raises(InvalidUpdateError):
            validate_weights(bad, 3)


def test_rng_must_be_a_generator() -> None:
    check_rng(np.random.default_rng(0))
    for bad in (None, 0, np.random.RandomState(0)):
        with pytest.raises(ConfigError):
            check_rng(bad)


@pytest.mark.parametrize(
    "spec", ["mean", "median", "trimmed_mean(f=1)", "krum(f=1)", "nnm(f=1) > trimmed_mean(f=1)", "bucketing > mean"]
)
def test_aggregators_reject_bad_updates_before_aggregating(spec: str) -> None:
    rule = parse_aggregator(spec)
    x = good(5, 4)
    x[4, 3] = np.nan
    with pytest.raises(InvalidUpdateError, match="4 contain NaN"):
        rule(x, rng=np.random.default_rng(0))
    with pytest.raises(InvalidUpdateError):
        rule(good(5, 4)[0], rng=np.random.default_rng(0))
    with pytest.raises(ConfigError):
        rule(good(5, 4), rng=None)  # type: ignore[arg-type]


def test_error_hierarchy() -> None:
    assert issubclass(InvalidUpdateError, LearningError) and issubclass(InvalidUpdateError, ValueError)
    assert issubclass(ConfigError, ValueError)


# --- the kernels' thread helper --------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_parallel_ranges_covers_the_range_once_in_aligned_pieces(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    import threading

    import learning.robust._validate as validate_module

    monkeypatch.setattr(validate_module, "WORKERS", workers)
    seen: list[tuple[int, int]] = []
    threads: set[int] = set()
    lock = threading.Lock()

    def work(j0: int, j1: int) -> None:
        with lock:
            seen.append((j0, j1))
            threads.add(threading.get_ident())

    total = 300_001
    validate_module.parallel_ranges(work, total, align=1024)
    seen.sort()
    assert seen[0][0] == 0 and seen[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(seen))  # contiguous, no overlap, no gap
    assert all(j0 % 1024 == 0 for j0, _ in seen)
    assert len(seen) == (1 if workers == 1 else workers * validate_module._PIECES_PER_WORKER)
    assert len(threads) <= workers
    small: list[tuple[int, int]] = []
    validate_module.parallel_ranges(lambda a, b: small.append((a, b)), 1000, align=1)  # below _MIN_PARALLEL: inline
    assert small == [(0, 1000)]


def test_parallel_ranges_propagates_a_failure_and_stops_handing_out_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    import learning.robust._validate as validate_module

    monkeypatch.setattr(validate_module, "WORKERS", 2)
    calls: list[int] = []

    def work(j0: int, j1: int) -> None:
        calls.append(j0)
        raise RuntimeError(f"piece at {j0}")

    with pytest.raises(RuntimeError, match="piece at"):
        validate_module.parallel_ranges(work, 1 << 20)
    assert len(calls) <= 2  # one failing piece per thread at most, not all 2 * _PIECES_PER_WORKER
