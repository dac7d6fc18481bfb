"""Datasets held in memory, train/test/validation/public splits, and the datasets that need no files.

A :class:`Dataset` is a pair of tensors (features ``x``, int64 labels ``y``) plus, for data with a natural client
structure (LEAF writers and speakers, the generated per-client datasets), a ``groups`` array naming each sample's
client. :class:`DataSplits` bundles ``train``/``test`` and the optional ``validation`` and ``public`` splits.

Datasets are resolved by name at the config boundary (:func:`dataset_spec`) into typed frozen specs whose
``load()`` returns :class:`DataSplits`. Registered here (no files needed):

* ``digits`` — the UCI 8×8 digits (1,797 × 64) as scikit-learn ships them, copied beside this module with their
  licence, scaled to [0, 1] (mimic spec §6.1, sself spec §6.1, W1);
* ``synthetic`` — Synthetic(α, β) of FedProx as specified in unavailability spec §4.4 (one labelling function per client);
* ``gmm`` — the label-skewed Gaussian-mixture clients of cmfl spec §7.2;
* ``mini_femnist`` — the synthetic "mini-FEMNIST" of fedro spec §6.

The file-based loaders (MNIST, Fashion-MNIST, EMNIST, CIFAR-10 binary, LEAF JSON) are in ``learning.data._files``.
No loader ever uses the network.
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol, TypeVar

import numpy as np
import torch

from learning._config import spec_from_mapping
from learning._errors import ConfigError, DataError

__all__ = [
    "DATASETS",
    "DataConfig",
    "DataSplits",
    "Dataset",
    "DatasetSpec",
    "DigitsSpec",
    "GMMSpec",
    "MiniFEMNISTSpec",
    "SyntheticSpec",
    "dataset_spec",
    "load_data",
    "register_dataset",
    "split_public",
    "split_random",
    "with_public",
    "with_validation",
]


# ---------------------------------------------------------------------------------------------------------------
# In-memory dataset.


@dataclass(frozen=True, slots=True, eq=False)
class Dataset:
    """Features and labels in memory.

    Attributes
    ----------
    x:
        Features, first dimension = samples: float32 images ``(N, C, H, W)``, float32 vectors ``(N, D)`` or int64
        token ids ``(N, L)`` (LEAF Shakespeare / Sent140).
    y:
        int64 labels ``(N,)`` in ``[0, num_classes)``.
    num_classes:
        Number of classes ``C``.
    groups:
        Optional int64 numpy array ``(N,)``: the natural client (writer, speaker, generated client) of each sample,
        an index into ``group_names``. Used by the ``natural`` partition.
    group_names:
        Names of the groups (LEAF user ids, ``"client-17"``), empty when ``groups`` is None.
    name:
        Human-readable dataset name, for reports.
    """

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    groups: np.ndarray | None = None
    group_names: tuple[str, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        what = self.name or "dataset"
        if self.y.dtype != torch.int64 or self.y.dim() != 1:
            raise DataError(f"{what}: labels must be a 1-D int64 tensor, got {self.y.dtype} {tuple(self.y.shape)}")
        if self.x.shape[0] != self.y.shape[0]:
            raise DataError(f"{what}: {self.x.shape[0]} feature rows but {self.y.shape[0]} labels")
        if self.num_classes <= 0:
            raise DataError(f"{what}: num_classes must be positive, got {self.num_classes}")
        if self.y.numel() and (int(self.y.min()) < 0 or int(self.y.max()) >= self.num_classes):
            raise DataError(
                f"{what}: labels must be in [0, {self.num_classes}), found [{int(self.y.min())}, {int(self.y.max())}]"
            )
        if self.groups is not None:
            if self.groups.shape != (self.y.shape[0],) or self.groups.dtype != np.int64:
                raise DataError(f"{what}: groups must be an int64 array of shape ({self.y.shape[0]},)")
            if self.groups.size and (self.groups.min() < 0 or self.groups.max() >= len(self.group_names)):
                raise DataError(f"{what}: group ids must index group_names ({len(self.group_names)})")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def labels(self) -> np.ndarray:
        """Labels as an int64 numpy array (a copy if the data live on an accelerator)."""
        return self.y.detach().cpu().numpy()

    def class_counts(self) -> np.ndarray:
        """Number of samples of each class, shape ``(num_classes,)``."""
        return np.bincount(self.labels, minlength=self.num_classes)

    def subset(self, indices: np.ndarray | Sequence[int]) -> Dataset:
        """The samples at ``indices`` (in that order), groups kept."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1:
            raise ConfigError("subset indices must be 1-D")
        t = torch.from_numpy(idx).to(self.x.device)
        groups = None if self.groups is None else self.groups[idx]
        return replace(self, x=self.x.index_select(0, t), y=self.y.index_select(0, t), groups=groups)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> Dataset:
        """The same data on ``device``, floating features cast to ``dtype`` if given (self if nothing changes)."""
        device = torch.device(device)
        x_dtype = dtype if dtype is not None and self.x.is_floating_point() else self.x.dtype
        if self.x.device == device and self.y.device == device and self.x.dtype == x_dtype:
            return self
        return replace(self, x=self.x.to(device=device, dtype=x_dtype), y=self.y.to(device))


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSplits:
    """The splits of one dataset.

    ``public`` is the server-held, class-balanced set Sself needs (sself spec §1.3); ``validation`` a held-out part
    of the training pool. Both are None unless asked for (:func:`with_public`, :func:`with_validation`).
    """

    train: Dataset
    test: Dataset
    validation: Dataset | None = None
    public: Dataset | None = None


# ---------------------------------------------------------------------------------------------------------------
# Splits.


def _check_fraction(what: str, fraction: float) -> None:
    if not (isinstance(fraction, int | float) and 0.0 <= fraction < 1.0):
        raise ConfigError(f"{what} must be in [0, 1), got {fraction!r}")


def split_random(
    dataset: Dataset, size: int, *, rng: np.random.Generator, stratify: bool = False
) -> tuple[Dataset, Dataset]:
    """Draw ``size`` samples without replacement; return ``(drawn, rest)``, each in ascending index order.

    With ``stratify`` the drawn part has each class in proportion to the whole (largest remainders, ties by a
    seeded draw), e.g. for a validation split.
    """
    n = len(dataset)
    if not 0 <= size <= n:
        raise ConfigError(f"cannot draw {size} of {n} samples")
    if not stratify:
        chosen = rng.permutation(n)[:size]
    else:
        labels = dataset.labels
        counts = np.bincount(labels, minlength=dataset.num_classes)
        quota = _largest_remainder(counts * (size / n) if n else counts.astype(float), size, rng=rng)
        chosen = np.concatenate(
            [rng.permutation(np.flatnonzero(labels == c))[: quota[c]] for c in range(dataset.num_classes)]
        )
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    return dataset.subset(np.flatnonzero(mask)), dataset.subset(np.flatnonzero(~mask))


def _largest_remainder(shares: np.ndarray, total: int, *, rng: np.random.Generator) -> np.ndarray:
    """Integers proportional to ``shares`` summing to ``total`` (Hamilton's method; ties broken by ``rng``)."""
    base = np.floor(shares).astype(np.int64)
    left = total - int(base.sum())
    if left > 0:
        frac = shares - base
        jitter = rng.random(len(shares))
        order = np.lexsort((jitter, -frac))
        base[order[:left]] += 1
    return base


def split_public(
    dataset: Dataset,
    size: int,
    *,
    rng: np.random.Generator,
    class_balanced: bool = True,
    overlap: bool = False,
) -> tuple[Dataset, Dataset]:
    """Take the server's public set out of a training pool (sself spec §1.3): returns ``(public, pool)``.

    Parameters
    ----------
    size:
        n_pub. sself spec main experiments: 2 % of the training set (1,200 for MNIST/FMNIST, 1,000 for CIFAR-10);
        reproduction: 50 digits (5 per class).
    class_balanced:
        ``size // C`` per class, the remainder to ``size % C`` classes chosen by ``rng`` ([DEFAULT] of sself spec:
        "uniformly distributed over classes"); otherwise a uniform draw.
    overlap:
        False (default, main experiments): the public samples are *removed* from the pool the clients share.
        True (sself spec App. E): the pool keeps every sample and the public set is a copy of some of them.

    Raises
    ------
    DataError
        A class has fewer samples than its public quota.
    """
    n, c = len(dataset), dataset.num_classes
    if not 0 < size <= n:
        raise ConfigError(f"public size must be in [1, {n}], got {size}")
    if class_balanced:
        labels = dataset.labels
        quota = np.full(c, size // c, dtype=np.int64)
        quota[rng.permutation(c)[: size % c]] += 1
        parts = []
        for k in range(c):
            members = np.flatnonzero(labels == k)
            if len(members) < quota[k]:
                raise DataError(
                    f"{dataset.name or 'dataset'}: class {k} has {len(members)} samples, fewer than its public "
                    f"quota {quota[k]}"
                )
            parts.append(rng.permutation(members)[: quota[k]])
        chosen = np.sort(np.concatenate(parts))
    else:
        chosen = np.sort(rng.permutation(n)[:size])
    public = dataset.subset(chosen)
    if overlap:
        return public, dataset
    mask = np.ones(n, dtype=bool)
    mask[chosen] = False
    return public, dataset.subset(np.flatnonzero(mask))


def with_public(
    splits: DataSplits,
    *,
    seed: int,
    fraction: float | None = None,
    size: int | None = None,
    class_balanced: bool = True,
    overlap: bool = False,
) -> DataSplits:
    """Splits with a public set taken from ``splits.train`` (see :func:`split_public`).

    Give ``fraction`` (of the training pool, rounded to the nearest int; sself spec: 0.02) or ``size``.
    """
    if (fraction is None) == (size is None):
        raise ConfigError("give exactly one of fraction= or size= for the public split")
    if fraction is not None:
        _check_fraction("public fraction", fraction)
        size = max(1, round(fraction * len(splits.train)))
    assert size is not None
    public, pool = split_public(
        splits.train, size, rng=np.random.default_rng(seed), class_balanced=class_balanced, overlap=overlap
    )
    return replace(splits, train=pool, public=public)


def with_validation(splits: DataSplits, *, fraction: float, seed: int, stratify: bool = True) -> DataSplits:
    """Splits with ``round(fraction · |train|)`` training samples moved to ``validation`` (stratified by class)."""
    _check_fraction("validation fraction", fraction)
    size = round(fraction * len(splits.train))
    validation, train = split_random(splits.train, size, rng=np.random.default_rng(seed), stratify=stratify)
    return replace(splits, train=train, validation=validation)


# ---------------------------------------------------------------------------------------------------------------
# Registry.


class DatasetSpec(Protocol):
    """A typed, frozen dataset description; ``load()`` reads or generates it."""

    name: ClassVar[str]

    def load(self) -> DataSplits: ...


DATASETS: dict[str, type[DatasetSpec]] = {}
"""Registry ``name → dataset spec class``, filled by :func:`register_dataset`."""

_S = TypeVar("_S")


def register_dataset(name: str) -> Callable[[type[_S]], type[_S]]:
    """Class decorator: register a dataset spec class under ``name``."""

    def decorate(cls: type[_S]) -> type[_S]:
        if name in DATASETS:
            raise ConfigError(f"dataset {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        DATASETS[name] = cls  # type: ignore[assignment]
        return cls

    return decorate


def dataset_spec(name: str, params: Mapping[str, object] | None = None) -> DatasetSpec:
    """Resolve a dataset name and its parameters into a typed spec — the config boundary.

    Examples
    --------
    >>> dataset_spec("digits", {"test_fraction": 0.2, "seed": 0})
    DigitsSpec(test_fraction=0.2, seed=0, image=False)
    """
    try:
        cls = DATASETS[name]
    except KeyError:
        raise ConfigError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}") from None
    return spec_from_mapping(cls, params or {}, what=f"dataset {name!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """Which dataset to load and which extra splits to carve out of its training pool.

    Attributes
    ----------
    source:
        The dataset spec (:func:`dataset_spec`).
    public_fraction, public_size:
        Server public set taken from the training pool (sself spec §1.3; at most one of the two; 0/None = none).
    public_class_balanced, public_overlap:
        See :func:`split_public`.
    validation_fraction:
        Fraction of the (remaining) training pool held out as a stratified validation set.
    split_seed:
        Seed of the public and validation draws.
    """

    source: DatasetSpec
    public_fraction: float = 0.0
    public_size: int | None = None
    public_class_balanced: bool = True
    public_overlap: bool = False
    validation_fraction: float = 0.0
    split_seed: int = 0

    def __post_init__(self) -> None:
        _check_fraction("public_fraction", self.public_fraction)
        _check_fraction("validation_fraction", self.validation_fraction)
        if self.public_size is not None and (self.public_fraction or self.public_size <= 0):
            raise ConfigError("give public_size (> 0) or public_fraction, not both")


def load_data(config: DataConfig) -> DataSplits:
    """Load ``config.source`` and add the public split, then the validation split, each from the training pool."""
    splits = config.source.load()
    if config.public_size is not None or config.public_fraction > 0:
        splits = with_public(
            splits,
            seed=config.split_seed,
            fraction=config.public_fraction if config.public_size is None else None,
            size=config.public_size,
            class_balanced=config.public_class_balanced,
            overlap=config.public_overlap,
        )
    if config.validation_fraction > 0:
        splits = with_validation(splits, fraction=config.validation_fraction, seed=config.split_seed + 1)
    return splits


# ---------------------------------------------------------------------------------------------------------------
# Embedded and generated datasets.


def _check_seed(what: str, seed: int) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"{what} must be a non-negative int, got {seed!r}")


def _grouped(
    name: str,
    per_client_x: Sequence[np.ndarray],
    per_client_y: Sequence[np.ndarray],
    num_classes: int,
    x_dtype: torch.dtype = torch.float32,
) -> Dataset:
    names = tuple(f"client-{i}" for i in range(len(per_client_x)))
    groups = np.concatenate([np.full(len(y), i, dtype=np.int64) for i, y in enumerate(per_client_y)])
    x = torch.from_numpy(np.concatenate(per_client_x).astype(np.float32, copy=False)).to(x_dtype)
    y = torch.from_numpy(np.concatenate(per_client_y).astype(np.int64, copy=False))
    return Dataset(x=x, y=y, num_classes=num_classes, groups=groups, group_names=names, name=name)


@register_dataset("digits")
@dataclass(frozen=True, slots=True, kw_only=True)
class DigitsSpec:
    """The UCI digits as scikit-learn bundles them, shipped with the package (1,797 samples, 8×8, 10 classes;
    ``learning/data/digits.csv.gz``), features ``X/16`` ∈ [0, 1].

    Train/test: a permutation drawn from ``np.random.default_rng(seed)``, the first ``⌈test_fraction · N⌉``
    samples (360 for 0.2) are the test set (mimic spec §6.1, sself spec §6.1; W1: 80/20, seed 0).

    Attributes
    ----------
    image:
        False: ``x`` is ``(N, 64)``; True: ``(N, 1, 8, 8)``.
    """

    name: ClassVar[str]
    test_fraction: float = 0.2
    seed: int = 0
    image: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"digits: test_fraction must be in (0, 1), got {self.test_fraction}")
        _check_seed("digits: seed", self.seed)

    def load(self) -> DataSplits:
        data = _digits_table()
        x = torch.from_numpy((data[:, :-1] / 16.0).astype(np.float32))
        if self.image:
            x = x.view(-1, 1, 8, 8)
        y = torch.from_numpy(data[:, -1].astype(np.int64))
        full = Dataset(x=x, y=y, num_classes=10, name="digits")
        n = len(full)
        n_test = math.ceil(self.test_fraction * n)
        perm = np.random.default_rng(self.seed).permutation(n)
        return DataSplits(train=full.subset(perm[n_test:]), test=full.subset(perm[:n_test]))


def _digits_table() -> np.ndarray:
    """The digits table as ``sklearn.datasets.load_digits`` reads it (``np.loadtxt``, float64: 64 pixel values
    0..16, then the label), from ``digits.csv.gz`` beside this module: scikit-learn's copy of the UCI test set,
    shipped with the package (licences in ``digits.LICENSE.txt``), so the main job needs neither scikit-learn
    nor a download."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.csv.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return np.loadtxt(f, delimiter=",")


@register_dataset("synthetic")
@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticSpec:
    """Synthetic(α, β) of [SSZ14, LSZ+20] as specified in unavailability spec §4.4 (App. E.2): one labelling function per
    client, ``num_classes`` = 10, ``dim`` = 60.

    With ``rng1 = default_rng(seed_model)`` and ``rng2 = default_rng(seed_data)``::

        rng1: n_i^raw = ⌊LogNormal(4, 2)⌋ + 50     (or samples_per_client if balanced)  — "power law" sizes
              u_i ~ N(0, α²),  B_i ~ N(0, β²),  v_i[j] ~ N(B_i, 1),  Σ = diag(j^−1.2), j = 1..60
        rng2: W_i ∈ ℝ^{60×10}, b_i ∈ ℝ^10, entries ~ N(u_i, 1);  x ~ N(v_i, Σ);  y = argmax(x W_i + b_i)
              per client: shuffle, first ⌊train_fraction · n^raw⌋ → train, rest → test (pooled)

    so the same ``seed_model`` with another ``seed_data`` keeps every client's size and feature mean (the shadow
    dataset of unavailability spec §3). Both splits carry ``groups`` = client index (the natural partition). The RNG streams
    are numpy's PCG64, not the original code's, so the sizes differ from the paper's seed 777 in detail.
    """

    name: ClassVar[str]
    alpha: float = 1.0
    beta: float = 1.0
    num_clients: int = 100
    seed_model: int = 0
    seed_data: int = 0
    balanced: bool = False
    samples_per_client: int = 500
    dim: int = 60
    num_classes: int = 10
    train_fraction: float = 0.9
    lognormal_mean: float = 4.0
    lognormal_sigma: float = 2.0
    min_samples: int = 50

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.beta < 0:
            raise ConfigError(f"synthetic: alpha and beta must be >= 0, got {self.alpha}, {self.beta}")
        for key, value in (("num_clients", self.num_clients), ("samples_per_client", self.samples_per_client),
                           ("dim", self.dim), ("num_classes", self.num_classes)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"synthetic: {key} must be a positive int, got {value!r}")
        _check_seed("synthetic: seed_model", self.seed_model)
        _check_seed("synthetic: seed_data", self.seed_data)
        if not 0.0 < self.train_fraction <= 1.0:
            raise ConfigError(f"synthetic: train_fraction must be in (0, 1], got {self.train_fraction}")
        if self.min_samples < 1:
            raise ConfigError(f"synthetic: min_samples must be >= 1, got {self.min_samples}")

    def client_sizes(self) -> np.ndarray:
        """The raw per-client sample counts ``n_i^raw`` (depend on ``seed_model`` only)."""
        rng1 = np.random.default_rng(self.seed_model)
        return self._sizes(rng1)

    def _sizes(self, rng1: np.random.Generator) -> np.ndarray:
        m = self.num_clients
        raw = rng1.lognormal(self.lognormal_mean, self.lognormal_sigma, m)  # drawn either way: same u, B, v
        if self.balanced:
            return np.full(m, self.samples_per_client, dtype=np.int64)
        return np.floor(raw).astype(np.int64) + self.min_samples

    def load(self) -> DataSplits:
        m, d, c = self.num_clients, self.dim, self.num_classes
        rng1 = np.random.default_rng(self.seed_model)
        sizes = self._sizes(rng1)
        u = rng1.normal(0.0, self.alpha, m)
        big_b = rng1.normal(0.0, self.beta, m)
        v = rng1.normal(big_b[:, None], 1.0, (m, d))
        sigma_sqrt = np.arange(1, d + 1, dtype=np.float64) ** (-1.2 / 2)
        rng2 = np.random.default_rng(self.seed_data)
        train_x, train_y, test_x, test_y = [], [], [], []
        for i in range(m):
            w = rng2.normal(u[i], 1.0, (d, c))
            b = rng2.normal(u[i], 1.0, c)
            x = v[i] + rng2.standard_normal((int(sizes[i]), d)) * sigma_sqrt
            y = np.argmax(x @ w + b, axis=1).astype(np.int64)
            perm = rng2.permutation(int(sizes[i]))
            x, y = x[perm], y[perm]
            n_train = int(self.train_fraction * sizes[i])
            train_x.append(x[:n_train])
            train_y.append(y[:n_train])
            test_x.append(x[n_train:])
            test_y.append(y[n_train:])
        name = f"synthetic({self.alpha:g},{self.beta:g})"
        return DataSplits(
            train=_grouped(name, train_x, train_y, c),
            test=_grouped(name, test_x, test_y, c),
        )


@register_dataset("gmm")
@dataclass(frozen=True, slots=True, kw_only=True)
class GMMSpec:
    """Label-skewed Gaussian-mixture clients of cmfl spec §7.2 (the CMFL reproduction data).

    With ``rng = default_rng(seed)``::

        μ_c ~ N(0, I_d), rescaled to norm sep·√d/2                         (class means)
        per client k: p ~ Dir(dirichlet · 1_C); if zipf > 0: p ← p ⊙ (1..C)^−zipf, renormalised
                      n_k = max(10, ⌊LogNormal(log(mean_samples), 0.5)⌋)
                      y ~ p (n_k draws);  x = μ_y + N(0, I_d)
                      first max(2, ⌊test_fraction · n_k⌋) samples → local test, rest → local train

    Presets: N (normal training) ``dirichlet=0.1, sep=2.0, zipf=1.5``; R (robustness) ``dirichlet=0.1, sep=1.5,
    zipf=0``. The spec's data RNG is ``default_rng(1000 + run_seed)``: pass that as ``seed``.
    """

    name: ClassVar[str]
    num_clients: int = 300
    dim: int = 20
    num_classes: int = 10
    dirichlet: float = 0.1
    sep: float = 1.5
    mean_samples: int = 60
    test_fraction: float = 0.2
    zipf: float = 0.0
    seed: int = 1000

    def __post_init__(self) -> None:
        for key, value in (("num_clients", self.num_clients), ("dim", self.dim), ("num_classes", self.num_classes),
                           ("mean_samples", self.mean_samples)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"gmm: {key} must be a positive int, got {value!r}")
        if self.dirichlet <= 0 or self.sep < 0 or self.zipf < 0:
            raise ConfigError("gmm: dirichlet must be > 0, sep and zipf >= 0")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError(f"gmm: test_fraction must be in [0, 1), got {self.test_fraction}")
        _check_seed("gmm: seed", self.seed)

    def load(self) -> DataSplits:
        rng = np.random.default_rng(self.seed)
        c, d = self.num_classes, self.dim
        mus = rng.normal(0.0, 1.0, (c, d))
        mus *= (self.sep * math.sqrt(d) / 2) / np.linalg.norm(mus, axis=1, keepdims=True)
        zipf = np.arange(1, c + 1, dtype=np.float64) ** (-self.zipf) if self.zipf > 0 else None
        train_x, train_y, test_x, test_y = [], [], [], []
        for _ in range(self.num_clients):
            p = rng.dirichlet(np.full(c, self.dirichlet))
            if zipf is not None:
                p = p * zipf
                p /= p.sum()
            n_k = max(10, int(rng.lognormal(math.log(self.mean_samples), 0.5)))
            y = rng.choice(c, n_k, p=p).astype(np.int64)
            x = mus[y] + rng.normal(0.0, 1.0, (n_k, d))
            n_test = max(2, int(self.test_fraction * n_k))
            test_x.append(x[:n_test])
            test_y.append(y[:n_test])
            train_x.append(x[n_test:])
            train_y.append(y[n_test:])
        return DataSplits(train=_grouped("gmm", train_x, train_y, c), test=_grouped("gmm", test_x, test_y, c))


@register_dataset("mini_femnist")
@dataclass(frozen=True, slots=True, kw_only=True)
class MiniFEMNISTSpec:
    """Synthetic "mini-FEMNIST" of fedro spec §6 (the FedRo reproduction data).

    ``C`` classes in ``ℝ^d`` with class means ``~ N(0, mean_std² I)``; a sample is its class mean ``+ N(0, I)``.
    Each of ``num_clients`` clients holds ``samples_per_client`` samples; client k has 2 distinct dominant classes
    (drawn from ``rng``), and each label is, with probability ``p_dom``, uniform over those two, otherwise
    uniform over all classes. The test set is balanced, ``test_per_class`` per class. Train carries ``groups``.
    """

    name: ClassVar[str]
    num_clients: int = 150
    samples_per_client: int = 40
    dim: int = 20
    num_classes: int = 10
    mean_std: float = 0.5
    p_dom: float = 0.5
    test_per_class: int = 200
    seed: int = 1000

    def __post_init__(self) -> None:
        for key, value in (("num_clients", self.num_clients), ("samples_per_client", self.samples_per_client),
                           ("dim", self.dim), ("test_per_class", self.test_per_class)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"mini_femnist: {key} must be a positive int, got {value!r}")
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise ConfigError(f"mini_femnist: num_classes must be an int >= 2, got {self.num_classes!r}")
        if not 0.0 <= self.p_dom <= 1.0 or self.mean_std < 0:
            raise ConfigError("mini_femnist: p_dom must be in [0, 1] and mean_std >= 0")
        _check_seed("mini_femnist: seed", self.seed)

    def load(self) -> DataSplits:
        rng = np.random.default_rng(self.seed)
        c, d, n = self.num_classes, self.dim, self.samples_per_client
        mus = rng.normal(0.0, self.mean_std, (c, d))
        xs, ys = [], []
        for _ in range(self.num_clients):
            dominant = rng.choice(c, 2, replace=False)
            use_dom = rng.random(n) < self.p_dom
            y = np.where(use_dom, dominant[rng.integers(0, 2, n)], rng.integers(0, c, n)).astype(np.int64)
            xs.append(mus[y] + rng.normal(0.0, 1.0, (n, d)))
            ys.append(y)
        y_test = np.repeat(np.arange(c, dtype=np.int64), self.test_per_class)
        x_test = mus[y_test] + rng.normal(0.0, 1.0, (len(y_test), d))
        test = Dataset(
            x=torch.from_numpy(x_test.astype(np.float32)), y=torch.from_numpy(y_test), num_classes=c,
            name="mini_femnist",
        )
        return DataSplits(train=_grouped("mini_femnist", xs, ys, c), test=test)
