"""Partitions: coverage, exact sizes and class counts, seeding, IID limits, statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learning.data import Dataset, DigitsSpec, SyntheticSpec
from learning._errors import ConfigError, DataError
from learning.data import (
    PARTITIONS,
    DirichletPartition,
    IIDPartition,
    KClassesPartition,
    LogNormalPartition,
    NaturalPartition,
    PairsPartition,
    Partition,
    ShardsPartition,
    partition_dataset,
    partition_spec,
)
from learning.data._partition import _distinct_rows


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return DigitsSpec(test_fraction=0.2, seed=0).load().train


def labels_only(counts: list[int], *, seed: int = 99) -> Dataset:
    """A dataset with given class sizes (features irrelevant), labels in a scrambled order."""
    y = np.repeat(np.arange(len(counts)), counts)
    y = y[np.random.default_rng(seed).permutation(len(y))]
    return Dataset(x=torch.zeros(len(y), 1), y=torch.from_numpy(y.astype(np.int64)), num_classes=len(counts))


def same(a: Partition, b: Partition) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a.clients, b.clients, strict=True))


def tv_to_global(part: Partition, data: Dataset) -> float:
    """Mean total-variation distance between each client's label distribution and the pool's."""
    stats = part.stats(data)
    local = stats.label_counts / stats.samples_per_client[:, None]
    pool = data.class_counts() / len(data)
    return float(0.5 * np.abs(local - pool).sum(axis=1).mean())


SEEDED = [
    IIDPartition(num_clients=20),
    DirichletPartition(num_clients=10, alpha=0.5),
    DirichletPartition(num_clients=10, alpha=0.5, scheme="per_client"),
    KClassesPartition(num_clients=20, classes_per_client=2),
    KClassesPartition(num_clients=20, classes_per_client=2, scheme="label_holders"),
    ShardsPartition(num_clients=20),
    LogNormalPartition(num_clients=20),
]


@pytest.mark.parametrize("spec", SEEDED, ids=lambda s: f"{s.name}")
def test_same_seed_same_partition_different_seed_different(spec, digits: Dataset) -> None:
    a = partition_dataset(spec, digits, seed=1)
    b = partition_dataset(spec, digits, seed=1)
    c = partition_dataset(spec, digits, seed=2)
    assert same(a, b)
    assert not same(a, c)
    assert a.is_disjoint()


def test_iid_w1(digits: Dataset) -> None:
    part = partition_dataset(IIDPartition(num_clients=20), digits, seed=0)
    assert part.covers_all()
    assert sorted(set(part.sizes().tolist())) == [71, 72]  # 1,437 = 17·72 + 3·71
    assert tv_to_global(part, digits) < 0.2
    fixed = partition_dataset(IIDPartition(num_clients=10, samples_per_client=100), digits, seed=0)
    assert fixed.sizes().tolist() == [100] * 10 and fixed.is_disjoint() and not fixed.covers_all()
    with pytest.raises(ConfigError):
        partition_dataset(IIDPartition(num_clients=20, samples_per_client=100), digits, seed=0)


def test_dirichlet_per_class_covers_and_large_alpha_is_iid(digits: Dataset) -> None:
    skewed = partition_dataset(DirichletPartition(num_clients=10, alpha=0.1), digits, seed=0)
    flat = partition_dataset(DirichletPartition(num_clients=10, alpha=1e5), digits, seed=0)
    iid = partition_dataset(IIDPartition(num_clients=10), digits, seed=0)
    for part in (skewed, flat):
        assert part.covers_all()
        assert part.sizes().min() >= 1
    assert tv_to_global(flat, digits) < 0.05  # α → ∞: each class split evenly ⇒ (at least) as IID as IID
    assert tv_to_global(flat, digits) <= tv_to_global(iid, digits) + 0.02
    assert tv_to_global(skewed, digits) > 0.4
    balanced = partition_dataset(DirichletPartition(num_clients=10, alpha=0.5, min_samples=60), digits, seed=0)
    assert balanced.sizes().min() >= 60
    with pytest.raises(ConfigError, match="min_samples"):
        partition_dataset(DirichletPartition(num_clients=10, alpha=0.01, min_samples=140), digits, seed=0)


def test_dirichlet_per_client_unavailability_spec(digits: Dataset) -> None:
    # unavailability spec §4.3 / §6.1 item 11: exact size per client, no sample twice, exhaustion handled, skew
    spec = DirichletPartition(num_clients=14, alpha=0.1, scheme="per_client")
    part = partition_dataset(spec, digits, seed=0)
    assert part.sizes().tolist() == [1437 // 14] * 14
    assert part.is_disjoint()
    assert len(np.concatenate(part.clients)) == 14 * 102  # uses 1,428 of 1,437: classes ran out on the way
    counts = part.stats(digits).label_counts
    top2 = np.sort(counts, axis=1)[:, -2:].sum(axis=1) / part.sizes()
    assert np.mean(top2 > 0.8) >= 0.5  # α = 0.1 ⇒ most clients dominated by 1–2 classes
    flat = partition_dataset(DirichletPartition(num_clients=10, alpha=1e5, scheme="per_client"), digits, seed=0)
    assert tv_to_global(flat, digits) < 0.2 < 0.4 < tv_to_global(part, digits)
    fixed = DirichletPartition(num_clients=5, alpha=1.0, scheme="per_client", samples_per_client=50)
    assert partition_dataset(fixed, digits, seed=0).sizes().tolist() == [50] * 5
    with pytest.raises(ConfigError):
        DirichletPartition(num_clients=5, alpha=1.0, samples_per_client=50)  # per_class has no fixed size
    with pytest.raises(ConfigError):
        DirichletPartition(num_clients=5, alpha=0.0)


def test_k_classes_seed_001_fmnist_shape() -> None:
    # mimic spec §4: 60,000 FMNIST images, 30 clients, 2 classes and 2,000 samples each
    data = labels_only([6000] * 10)
    part = partition_dataset(KClassesPartition(num_clients=30, classes_per_client=2), data, seed=0)
    stats = part.stats(data)
    assert stats.samples_per_client.tolist() == [2000] * 30
    assert stats.classes_per_client.tolist() == [2] * 30
    assert np.all(stats.label_counts[stats.label_counts > 0] == 1000)
    assert part.is_disjoint()
    # each class is split into 6 shards of 1,000
    assert np.array_equal(stats.label_counts.sum(axis=0), [6000] * 10)
    # CIFAR-10: 5,000 per class ⇒ 6 shards of 833 ⇒ 1,666 per client
    cifar = partition_dataset(KClassesPartition(num_clients=30, classes_per_client=2), labels_only([5000] * 10), seed=0)
    assert cifar.sizes().tolist() == [1666] * 30


@pytest.mark.parametrize(("clients", "k"), [(20, 2), (30, 5), (30, 8), (10, 10), (7, 2), (13, 3)])
def test_k_classes_exactly_k_distinct_classes(clients: int, k: int, digits: Dataset) -> None:
    spec = KClassesPartition(num_clients=clients, classes_per_client=k)
    part = partition_dataset(spec, digits, seed=3)
    stats = part.stats(digits)
    assert stats.classes_per_client.tolist() == [k] * clients
    assert len(set(stats.samples_per_client.tolist())) == 1
    assert part.is_disjoint()


def test_k_classes_fixed_size_seed_001_reproduction(digits: Dataset) -> None:
    # mimic spec §6.1: N = 20, 2 classes per client, each class in 4 shards; digits' smallest class (133 in this
    # pool) bounds the equal shard size at 33, i.e. 66 per client (the spec's "about 72" uses unequal shards)
    auto = partition_dataset(KClassesPartition(num_clients=20, classes_per_client=2), digits, seed=0)
    assert auto.sizes().tolist() == [66] * 20
    spec = KClassesPartition(num_clients=20, classes_per_client=2, samples_per_client=64)
    part = partition_dataset(spec, digits, seed=0)
    assert part.sizes().tolist() == [64] * 20
    assert part.stats(digits).classes_per_client.tolist() == [2] * 20
    with pytest.raises(DataError, match="cannot fill"):
        too_big = KClassesPartition(num_clients=20, classes_per_client=2, samples_per_client=72)
        partition_dataset(too_big, digits, seed=0)
    with pytest.raises(ConfigError):
        KClassesPartition(num_clients=20, classes_per_client=2, samples_per_client=71)
    with pytest.raises(ConfigError):
        partition_dataset(KClassesPartition(num_clients=2, classes_per_client=11), digits, seed=0)


def test_distinct_rows_keeps_the_multiset() -> None:
    for seed in range(30):
        rng = np.random.default_rng(seed)
        labels = np.repeat(np.arange(10), 6)
        grid = _distinct_rows(labels, 30, 2, rng)
        assert all(len(set(row)) == 2 for row in grid.tolist())
        assert np.array_equal(np.sort(grid.reshape(-1)), labels)
    # a tight case: 10 rows, 10 classes each appearing 10 times ⇒ every row must be a permutation (the swap
    # repair stalls for some seeds here, which exercises the strided fallback)
    for seed in range(20):
        grid = _distinct_rows(np.repeat(np.arange(10), 10), 10, 10, np.random.default_rng(seed))
        assert all(sorted(row) == list(range(10)) for row in grid.tolist())


def test_k_classes_label_holders_seed_001_code(digits: Dataset) -> None:
    spec = KClassesPartition(num_clients=20, classes_per_client=2, samples_per_client=60, scheme="label_holders")
    part = partition_dataset(spec, digits, seed=0)
    stats = part.stats(digits)
    assert stats.classes_per_client.tolist() == [2] * 20
    for i in range(20):
        assert stats.label_counts[i, i % 10] > 0  # client i holds class i mod C
    assert stats.samples_per_client.max() <= 60 and part.is_disjoint()


def test_shards_mcmahan(digits: Dataset) -> None:
    part = partition_dataset(ShardsPartition(num_clients=20, shards_per_client=2), digits, seed=0)
    assert part.sizes().tolist() == [2 * (1437 // 40)] * 20
    assert part.is_disjoint()
    assert part.stats(digits).classes_per_client.max() <= 4  # 2 shards, each straddling at most one boundary


def test_natural_partition_on_synthetic_groups() -> None:
    train = SyntheticSpec(num_clients=10, seed_model=0).load().train
    part = partition_dataset(NaturalPartition(), train, seed=0)
    assert part.covers_all() and len(part) == 10
    assert part.names == tuple(f"client-{i}" for i in range(10))
    assert np.array_equal(part.sizes(), np.bincount(train.groups))
    first = partition_dataset(NaturalPartition(max_clients=4), train, seed=0)
    assert len(first) == 4 and same(Partition(clients=part.clients[:4], num_samples=len(train)), first)
    big = partition_dataset(NaturalPartition(min_samples=100), train, seed=0)
    assert all(s >= 100 for s in big.sizes())
    with pytest.raises(ConfigError, match="groups"):
        partition_dataset(NaturalPartition(), labels_only([3, 3]), seed=0)


def test_lognormal_sizes(digits: Dataset) -> None:
    part = partition_dataset(LogNormalPartition(num_clients=40), digits, seed=0)
    assert part.covers_all()
    sizes = part.sizes()
    assert sizes.min() >= 1 and sizes.max() > 4 * np.median(sizes)  # heavy tail (σ = 2)
    even = partition_dataset(LogNormalPartition(num_clients=40, sigma=0.01, offset=0, min_samples=5), digits, seed=0)
    assert even.sizes().max() - even.sizes().min() <= 2


def test_stats_table_row() -> None:
    data = labels_only([3, 2, 1])
    y = data.labels
    part = Partition(
        clients=(np.flatnonzero(y == 0), np.sort(np.concatenate([np.flatnonzero(y == 1), np.flatnonzero(y == 2)]))),
        num_samples=6,
    )
    stats = part.stats(data)
    assert stats.samples_per_client.tolist() == [3, 3]
    assert stats.classes_per_client.tolist() == [1, 2]
    assert stats.label_counts.tolist() == [[3, 0, 0], [0, 2, 1]]
    assert (stats.num_clients, stats.total_samples, stats.mean, stats.stdev) == (2, 6, 3.0, 0.0)
    assert stats.table_row() == "clients 2 | total samples 6 | mean 3.00 | stdev 0.00 | classes/client 1.50 [1–2]"
    with pytest.raises(ConfigError):
        Partition(clients=(np.array([2, 1]),), num_samples=3)


def test_config_boundary() -> None:
    assert set(PARTITIONS) == {"iid", "dirichlet", "k_classes", "pairs", "shards", "natural", "lognormal"}
    spec = partition_spec("k_classes", {"num_clients": 30, "classes_per_client": 2, "samples_per_client": 2000})
    assert spec == KClassesPartition(num_clients=30, classes_per_client=2, samples_per_client=2000)
    with pytest.raises(ConfigError, match="unknown partition"):
        partition_spec("pathological")
    with pytest.raises(ConfigError):
        partition_spec("dirichlet", {"num_clients": 10, "alpha": 0.5, "scheme": "per_writer"})


# --- fixed class pairs (mimic spec §6.1 S5): client i holds classes 2(i mod P) and 2(i mod P)+1


def class_sets(part: Partition, data: Dataset) -> list[set[int]]:
    return [set(np.unique(data.labels[idx]).tolist()) for idx in part.clients]


def test_seed_001_s5_exact_class_pairs(digits: Dataset) -> None:
    """N = 20 clients on digits: client i holds exactly {2(i mod 5), 2(i mod 5)+1}; every sample once; classes 6-9
    (pair ids 3 and 4) are held by clients 3, 4, 8, 9, 13, 14, 18, 19 only."""
    part = partition_dataset(partition_spec("pairs", {"num_clients": 20}), digits, seed=0)
    assert len(part) == 20 and part.covers_all()
    sets = class_sets(part, digits)
    assert sets == [{2 * (i % 5), 2 * (i % 5) + 1} for i in range(20)]
    assert [i for i, s in enumerate(sets) if s & {6, 7, 8, 9}] == [3, 4, 8, 9, 13, 14, 18, 19]
    stats = part.stats(digits)
    assert stats.classes_per_client.tolist() == [2] * 20
    # each class split evenly over its 4 holders: holder counts of one class differ by at most one
    counts = stats.label_counts
    for c in range(10):
        held = counts[counts[:, c] > 0, c]
        assert len(held) == 4 and held.sum() == digits.class_counts()[c] and held.max() - held.min() <= 1
        assert held.tolist() == [len(x) for x in np.array_split(np.arange(held.sum()), 4)]
    assert stats.total_samples == len(digits) == 1437
    assert 69 <= part.sizes().min() and part.sizes().max() <= 74  # "about 72 samples each" (spec §6.1)


def test_deterministic_class_sets_seeded_membership(digits: Dataset) -> None:
    spec = PairsPartition(num_clients=20)
    a = partition_dataset(spec, digits, seed=1)
    b = partition_dataset(spec, digits, seed=1)
    c = partition_dataset(spec, digits, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a.clients, b.clients, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a.clients, c.clients, strict=True))
    assert class_sets(a, digits) == class_sets(c, digits)  # class sets do not depend on the seed
    assert a.sizes().tolist() == c.sizes().tolist()  # nor do the sizes
    assert c.covers_all()


def test_exact_sizes_when_pairs_divide_clients() -> None:
    """6 classes (3 pairs), 6 clients (2 holders per pair): class sizes 10, 11, 12, 13, 14, 15."""
    data = labels_only([10, 11, 12, 13, 14, 15], seed=7)
    part = partition_dataset(PairsPartition(num_clients=6), data, seed=0)
    assert part.covers_all()
    # client i: pair i mod 3; first holder of a class takes the larger half (array_split)
    assert part.sizes().tolist() == [5 + 6, 6 + 7, 7 + 8, 5 + 5, 6 + 6, 7 + 7]
    assert part.stats(data).label_counts.tolist() == [
        [5, 6, 0, 0, 0, 0],
        [0, 0, 6, 7, 0, 0],
        [0, 0, 0, 0, 7, 8],
        [5, 5, 0, 0, 0, 0],
        [0, 0, 6, 6, 0, 0],
        [0, 0, 0, 0, 7, 7],
    ]


def test_uneven_holders_still_cover_every_sample() -> None:
    """7 clients, 3 pairs: pair 0 has 3 holders (clients 0, 3, 6), pairs 1 and 2 have 2."""
    data = labels_only([9, 9, 8, 8, 8, 8], seed=7)
    part = partition_dataset(PairsPartition(num_clients=7), data, seed=3)
    assert part.covers_all()
    assert class_sets(part, data) == [{0, 1}, {2, 3}, {4, 5}, {0, 1}, {2, 3}, {4, 5}, {0, 1}]
    assert part.sizes().tolist() == [6, 8, 8, 6, 8, 8, 6]


def test_single_pair_and_one_client_per_pair() -> None:
    two = labels_only([4, 3], seed=7)
    part = partition_dataset(PairsPartition(num_clients=3), two, seed=0)
    assert part.covers_all() and class_sets(part, two) == [{0, 1}] * 3
    ten = labels_only([5] * 10, seed=7)
    part = partition_dataset(PairsPartition(num_clients=5), ten, seed=0)
    assert part.covers_all() and part.sizes().tolist() == [10] * 5


def test_errors() -> None:
    with pytest.raises(ConfigError, match="even class count"):
        partition_dataset(PairsPartition(num_clients=6), labels_only([4, 4, 4], seed=7), seed=0)
    with pytest.raises(ConfigError, match=r"num_clients >= 5"):
        partition_dataset(PairsPartition(num_clients=4), labels_only([4] * 10, seed=7), seed=0)
    with pytest.raises(DataError, match="class 3 has 1 samples for 2 holders"):
        partition_dataset(PairsPartition(num_clients=4), labels_only([4, 4, 4, 1], seed=7), seed=0)
    with pytest.raises(DataError, match="class 1 has 0 samples"):
        partition_dataset(PairsPartition(num_clients=2), labels_only([4, 0], seed=7), seed=0)
    for bad in (0, -2, 2.0, True, "20"):
        with pytest.raises(ConfigError, match="num_clients must be a positive int"):
            PairsPartition(num_clients=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        partition_spec("pairs", {"num_clients": 20, "classes_per_client": 2})  # no such parameter
    with pytest.raises(ConfigError):
        partition_spec("pairs", {})  # num_clients is required
