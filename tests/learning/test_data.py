"""In-memory datasets, splits (train/test, public, validation) and the datasets that need no files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learning.data import (
    DATASETS,
    DataConfig,
    DataSplits,
    Dataset,
    DigitsSpec,
    MiniFEMNISTSpec,
    SyntheticSpec,
    dataset_spec,
    load_data,
    split_public,
    split_random,
    with_public,
    with_validation,
)
from learning._errors import ConfigError, DataError


@pytest.fixture(scope="module")
def digits() -> DataSplits:
    return DigitsSpec(test_fraction=0.2, seed=0).load()


def _rows(d: Dataset) -> set[bytes]:
    return {row.numpy().tobytes() + bytes([int(label)]) for row, label in zip(d.x, d.y, strict=True)}


# -- digits -----------------------------------------------------------------------------------------------------


def test_digits_w1_split(digits: DataSplits) -> None:
    assert (len(digits.train), len(digits.test)) == (1437, 360)
    assert digits.train.x.dtype == torch.float32 and digits.train.x.shape == (1437, 64)
    assert float(digits.train.x.min()) == 0.0 and float(digits.train.x.max()) == 1.0
    assert digits.train.num_classes == 10
    assert set(np.unique(digits.test.labels)) == set(range(10))
    # disjoint and complete: the 1,797 digits (a few are exact duplicates, hence <=)
    assert len(_rows(digits.train) & _rows(digits.test)) <= 2
    assert len(digits.train) + len(digits.test) == 1797


def test_digits_seeded(digits: DataSplits) -> None:
    again = DigitsSpec(test_fraction=0.2, seed=0).load()
    other = DigitsSpec(test_fraction=0.2, seed=1).load()
    assert torch.equal(again.test.x, digits.test.x) and torch.equal(again.test.y, digits.test.y)
    assert not torch.equal(other.test.y, digits.test.y)
    assert DigitsSpec(image=True).load().train.x.shape == (1437, 1, 8, 8)


# The shipped file is scikit-learn 1.9.1's sklearn/datasets/data/digits.csv.gz, byte for byte, and the table read
# from it is, as float64 bytes in file order, the table that load_digits() gave (its data, then its target, as the
# last column) and that the loader read from scikit-learn's copy before the file was shipped: the bundled
# scenarios' ledger heads rest on these bytes.
_DIGITS_FILE_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
_DIGITS_TABLE_SHA256 = "30aa855cd90427ff3c4996b3f40109597c57049f8a038cc52db1efeac8ad2e26"


def test_digits_are_scikit_learns_digits_shipped_with_the_package() -> None:
    """The loader reads the digits file that ships beside it (no scikit-learn, no download), with its licences;
    the file and the table are scikit-learn's, bit for bit, and the splits are the table's rows ``/ 16``."""
    import hashlib  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    import learning.data._datasets as datasets_module  # noqa: PLC0415

    here = Path(datasets_module.__file__).parent
    assert hashlib.sha256((here / "digits.csv.gz").read_bytes()).hexdigest() == _DIGITS_FILE_SHA256
    notice = (here / "digits.LICENSE.txt").read_text()
    assert "CC BY 4.0" in notice and "BSD 3-Clause" in notice and "Alpaydin" in notice
    table = datasets_module._digits_table()
    assert table.dtype == np.float64 and table.shape == (1797, 65) and table.flags.c_contiguous
    assert hashlib.sha256(table.tobytes()).hexdigest() == _DIGITS_TABLE_SHA256
    full = DigitsSpec(test_fraction=0.2, seed=0).load()
    x = torch.cat([full.train.x, full.test.x]).numpy()
    y = torch.cat([full.train.y, full.test.y]).numpy()
    ref_x = (table[:, :-1] / 16.0).astype(np.float32)
    ours = sorted(zip(map(bytes, x), y.tolist()))
    theirs = sorted(zip(map(bytes, ref_x), table[:, -1].astype(np.int64).tolist()))
    assert ours == theirs


# -- Synthetic(α, β) --------------------------------------------------------------------------------------------


def test_synthetic_shapes_split_and_groups() -> None:
    spec = SyntheticSpec(num_clients=12, seed_model=3, seed_data=4)
    splits = spec.load()
    sizes = spec.client_sizes()
    assert sizes.min() >= 50
    train_sizes = np.bincount(splits.train.groups, minlength=12)
    test_sizes = np.bincount(splits.test.groups, minlength=12)
    assert np.array_equal(train_sizes, (0.9 * sizes).astype(np.int64))  # first int(0.9 n) → train
    assert np.array_equal(train_sizes + test_sizes, sizes)
    assert splits.train.x.shape == (int(train_sizes.sum()), 60)
    assert splits.train.labels.min() >= 0 and splits.train.labels.max() <= 9
    assert splits.train.group_names[0] == "client-0"


def test_synthetic_is_deterministic_and_seed1_fixes_the_sizes() -> None:
    a = SyntheticSpec(num_clients=8, seed_model=1, seed_data=1).load()
    b = SyntheticSpec(num_clients=8, seed_model=1, seed_data=1).load()
    shadow = SyntheticSpec(num_clients=8, seed_model=1, seed_data=2).load()
    other = SyntheticSpec(num_clients=8, seed_model=2, seed_data=1).load()
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.train.y, b.train.y)
    # unavailability spec §6.1 item 10: same seed1, different seed2 ⇒ identical client sizes, different samples
    assert np.array_equal(a.train.groups, shadow.train.groups)
    assert not torch.equal(a.train.x, shadow.train.x)
    assert not np.array_equal(np.bincount(a.train.groups), np.bincount(other.train.groups))


def test_synthetic_covariance_and_balanced_option() -> None:
    # Σ_jj = j^-1.2: the per-feature variance inside one client (mean v_i fixed) follows it
    splits = SyntheticSpec(num_clients=1, balanced=True, samples_per_client=20_000, seed_model=0).load()
    var = splits.train.x.double().var(dim=0).numpy()
    expected = np.arange(1, 61) ** -1.2
    assert np.allclose(var, expected, rtol=0.05)
    balanced = SyntheticSpec(num_clients=3, balanced=True).load()
    assert np.array_equal(np.bincount(balanced.train.groups), [450, 450, 450])
    assert np.array_equal(np.bincount(balanced.test.groups), [50, 50, 50])


def test_synthetic_alpha_beta_control_heterogeneity() -> None:
    # α = β = 0: every client shares one labelling function mean and one feature mean (less label skew)
    def label_spread(alpha: float, beta: float) -> float:
        splits = SyntheticSpec(num_clients=30, alpha=alpha, beta=beta, balanced=True, samples_per_client=200).load()
        counts = np.stack([np.bincount(splits.train.labels[splits.train.groups == i], minlength=10) for i in range(30)])
        return float(counts.max(axis=1).mean())

    assert label_spread(0.0, 0.0) < label_spread(1.0, 1.0)


def test_gmm_and_mini_femnist() -> None:
    gmm = dataset_spec("gmm", {"num_clients": 20, "seed": 1000}).load()
    assert gmm.train.x.shape[1] == 20 and gmm.train.groups.max() == 19
    assert np.all(np.bincount(gmm.test.groups) >= 2)
    again = dataset_spec("gmm", {"num_clients": 20, "seed": 1000}).load()
    assert torch.equal(gmm.train.x, again.train.x)
    mini = MiniFEMNISTSpec(num_clients=15).load()
    assert len(mini.train) == 15 * 40 and np.array_equal(mini.test.class_counts(), [200] * 10)
    # label skew: every client's two dominant classes hold about p_dom + 2/10·(1 − p_dom) = 60 % of its data
    top2 = [np.sort(np.bincount(mini.train.labels[mini.train.groups == i], minlength=10))[-2:].sum() for i in range(15)]
    assert np.mean(top2) / 40 > 0.5


# -- Dataset ----------------------------------------------------------------------------------------------------


def test_dataset_validation() -> None:
    with pytest.raises(DataError):
        Dataset(x=torch.zeros(3, 2), y=torch.tensor([0, 1, 5]), num_classes=3)
    with pytest.raises(DataError):
        Dataset(x=torch.zeros(3, 2), y=torch.tensor([0, 1]), num_classes=3)
    with pytest.raises(DataError):
        Dataset(x=torch.zeros(2, 2), y=torch.tensor([0.0, 1.0]), num_classes=3)
    with pytest.raises(DataError):
        Dataset(x=torch.zeros(2, 2), y=torch.tensor([0, 1]), num_classes=3, groups=np.array([0, 1]), group_names=("a",))
    d = Dataset(x=torch.arange(10.0).view(5, 2), y=torch.tensor([0, 1, 2, 1, 0]), num_classes=3)
    sub = d.subset([4, 0])
    assert torch.equal(sub.y, torch.tensor([0, 0])) and torch.equal(sub.x[0], torch.tensor([8.0, 9.0]))
    assert d.to("cpu") is d
    assert np.array_equal(d.class_counts(), [2, 2, 1])


# -- splits -----------------------------------------------------------------------------------------------------


def test_public_split_is_class_balanced_and_removed(digits: DataSplits) -> None:
    public, pool = split_public(digits.train, 50, rng=np.random.default_rng(0))
    assert np.array_equal(public.class_counts(), [5] * 10)  # sself spec §6.1: 5 per class
    assert len(pool) == len(digits.train) - 50
    assert len(_rows(public) & _rows(pool)) <= 2  # disjoint up to the few duplicate images of digits
    assert len(_rows(public) | _rows(pool)) == len(_rows(digits.train))
    again, _ = split_public(digits.train, 50, rng=np.random.default_rng(0))
    other, _ = split_public(digits.train, 50, rng=np.random.default_rng(1))
    assert torch.equal(again.x, public.x) and not torch.equal(other.x, public.x)
    odd, _ = split_public(digits.train, 33, rng=np.random.default_rng(0))
    assert sorted(odd.class_counts()) == [3] * 7 + [4] * 3
    overlap, full = split_public(digits.train, 20, rng=np.random.default_rng(0), overlap=True)
    assert full is digits.train and len(overlap) == 20  # sself spec App. E: public also at the devices


def test_public_split_fraction_and_errors(digits: DataSplits) -> None:
    splits = with_public(digits, seed=0, fraction=0.02)
    assert len(splits.public) == round(0.02 * 1437) == 29
    assert len(splits.train) == 1437 - 29 and splits.test is digits.test
    tiny = Dataset(x=torch.zeros(6, 1), y=torch.tensor([0, 0, 0, 0, 0, 1]), num_classes=2)
    with pytest.raises(DataError, match="class 1"):
        split_public(tiny, 4, rng=np.random.default_rng(0))
    with pytest.raises(ConfigError):
        with_public(digits, seed=0)


def test_validation_split_is_stratified(digits: DataSplits) -> None:
    splits = with_validation(digits, fraction=0.1, seed=0)
    assert len(splits.validation) == 144 and len(splits.train) == 1437 - 144
    share = splits.validation.class_counts() / digits.train.class_counts()
    assert np.all(np.abs(share - 0.1) < 0.02)
    drawn, rest = split_random(digits.train, 100, rng=np.random.default_rng(3))
    assert len(drawn) == 100 and len(rest) == 1337


def test_registry_and_load_data() -> None:
    assert {"digits", "synthetic", "gmm", "mini_femnist"} <= set(DATASETS)
    dataset_spec("mnist", {"root": "/nonexistent"})  # importing the file loaders registers them
    assert {"mnist", "fashion_mnist", "emnist", "cifar10", "femnist", "shakespeare", "sent140"} <= set(DATASETS)
    with pytest.raises(ConfigError, match="unknown dataset"):
        dataset_spec("imagenet")
    with pytest.raises(ConfigError):
        dataset_spec("digits", {"test_fraction": 1.5})
    cfg = DataConfig(source=dataset_spec("digits"), public_size=50, validation_fraction=0.1, split_seed=4)
    splits = load_data(cfg)
    assert len(splits.public) == 50 and len(splits.validation) == round(0.1 * (1437 - 50))
    assert len(splits.train) + len(splits.validation) + len(splits.public) == 1437
    with pytest.raises(ConfigError):
        DataConfig(source=dataset_spec("digits"), public_size=10, public_fraction=0.1)
