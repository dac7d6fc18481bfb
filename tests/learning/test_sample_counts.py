"""Bounded sample counts: ``learning.cap_sample_counts``, the rule every validator and the auditor
re-execute before a data-size-weighted aggregation."""

import random

import numpy as np
import pytest

from learning import N_SAMPLES_CAP_DEFAULT, ClientUpdate, FedAvg, RoundInfo, cap_sample_counts, strategy_from_params

HUGE = 2**53 - 1


def _ups(counts):
    return [ClientUpdate(f"p{i:02d}", np.full(3, float(i), np.float32), n) for i, n in enumerate(counts)]


def _counts(ups):
    return [u.n_samples for u in ups]


def test_each_count_is_capped_at_ratio_times_the_lower_median_claim():
    assert N_SAMPLES_CAP_DEFAULT == 4
    assert _counts(cap_sample_counts(_ups([10, 12, HUGE]), 4)) == [10, 12, 48]
    # an even number of claims: the lower median (index (n - 1) // 2 of the sorted claims)
    assert _counts(cap_sample_counts(_ups([30, 10, HUGE, 20]), 4)) == [30, 10, 80, 20]
    assert _counts(cap_sample_counts(_ups([100, 100, 100, 401, 400]), 4)) == [100, 100, 100, 400, 400]
    assert _counts(cap_sample_counts(_ups([HUGE]), 4)) == [HUGE]  # one claim is its own median
    assert _counts(cap_sample_counts(_ups([7]), 1)) == [7]
    assert cap_sample_counts([], 4) == []
    # a round of empty claims: the cap is 0 (FedAvg then weighs them equally)
    assert _counts(cap_sample_counts(_ups([0, 0, HUGE]), 4)) == [0, 0, 0]


def test_ratio_zero_keeps_the_claims_and_unchanged_updates_are_the_same_objects():
    ups = _ups([10, 12, HUGE])
    assert cap_sample_counts(ups, 0) == ups
    capped = cap_sample_counts(ups, 4)
    assert capped[0] is ups[0] and capped[1] is ups[1] and capped[2] is not ups[2]
    assert capped[2].peer == ups[2].peer and capped[2].delta is ups[2].delta and capped[2].base_round == ups[2].base_round


@pytest.mark.parametrize("bad", [-1, 1.5, "4", True, None])
def test_a_ratio_that_is_not_a_non_negative_int_is_refused(bad):
    with pytest.raises(ValueError, match="cap ratio must be an int >= 0"):
        cap_sample_counts(_ups([1, 2]), bad)


def test_the_cap_does_not_depend_on_the_order_of_the_updates():
    rng = random.Random(1)
    for _ in range(200):
        counts = [rng.choice([0, 1, 5, 50, 64, 1000, HUGE]) for _ in range(rng.randint(1, 9))]
        ups = _ups(counts)
        want = {u.peer: u.n_samples for u in cap_sample_counts(ups, 3)}
        rng.shuffle(ups)
        assert {u.peer: u.n_samples for u in cap_sample_counts(ups, 3)} == want


def test_with_an_honest_majority_a_claim_weighs_at_most_ratio_honest_clients():
    """The bound of the docstring: while more than half the updates are honest, a Byzantine count is capped at
    ``ratio`` times the largest honest one, whatever the Byzantine clients claim."""
    rng = random.Random(7)
    for _ in range(500):
        honest = [rng.randint(1, 500) for _ in range(rng.randint(1, 12))]
        byz = [rng.choice([0, 1, rng.randint(1, 10**6), HUGE]) for _ in range(rng.randint(0, len(honest) - 1))]
        ratio = rng.choice([1, 2, 4, 10])
        capped = _counts(cap_sample_counts(_ups(honest + byz), ratio))
        assert all(n <= ratio * max(honest) for n in capped[len(honest):]), (honest, byz, ratio, capped)
        assert all(c <= n for c, n in zip(capped, honest + byz))


def test_fedavg_weight_of_a_huge_claim_among_equal_honest_clients_is_ratio_over_k_plus_ratio():
    k, ratio = 9, 4
    ups = _ups([60] * k + [HUGE])
    model = np.zeros(3, np.float32)
    info = RoundInfo(fl_round=1, members=tuple(u.peer for u in ups), sampled=tuple(u.peer for u in ups))
    rng = np.random.default_rng(0)
    raw = FedAvg().aggregate(info, model, ups, state=None, rng=rng).record["weights"]
    capped = FedAvg().aggregate(info, model, cap_sample_counts(ups, ratio), state=None, rng=rng).record["weights"]
    assert raw[-1] > 1 - 1e-12  # as signed: one client is the whole round
    assert capped[-1] == pytest.approx(ratio / (k + ratio)) and sum(capped) == pytest.approx(1.0)


def test_the_cap_key_is_a_host_key_no_strategy_sees():
    assert strategy_from_params("fedavg", {"clients": 3, "n_samples_cap": 2, "time_drift_ms": 5}) == strategy_from_params(
        "fedavg", {"clients": 3}
    )
