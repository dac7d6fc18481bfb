"""Partitions of a training pool into clients: IID, Dirichlet(α), k classes per client, fixed class pairs, shards,
natural, log-normal.

A partitioner is a frozen spec, registered by name, called as ``spec(dataset, rng=np.random.Generator)``; it
returns a :class:`Partition` (one sorted index array per client). The same seed gives the same partition on
every machine (numpy's PCG64 and only integer/ordering logic). :meth:`Partition.stats` reports what Table 2 of
cmfl spec reports (clients, total samples, mean and standard deviation of samples per client) plus the number of
classes per client.

============== ===================================================================== ===========================
name           rule                                                                  every sample exactly once?
============== ===================================================================== ===========================
``iid``        uniform shuffle, near-equal sizes (W1: 20 clients)                    yes (or a fixed size each)
``dirichlet``  ``per_class``: each class split over clients by ``p ~ Dir(α·1_M)``    yes
               (Hsu et al.; sself spec §3 backdoor runs, α = 0.5);
               ``per_client``: client i draws ``q_i ~ Dir(α·1_C)`` and fills a fixed  no: fixed size, disjoint
               number of slots label by label, exhausted classes removed
               (unavailability spec §4.3, α = 0.1, 500 per client)
``k_classes``  exactly k distinct classes and a fixed number of samples per client    no: fixed size, disjoint
               (mimic spec §4: 2 classes, 2,000 / 1,666 per client)
``pairs``      deterministic: client i holds classes ``2(i mod P)``, ``2(i mod P)+1``     yes
               (P = C/2 pairs), each class split evenly among its holders
               (mimic spec §6.1 S5)
``shards``     McMahan: sort by label, cut into M·k equal shards, k random shards    no: remainder unused
               per client (sself spec §4, 2 shards per device)
``natural``    one client per writer / speaker / generated client (``groups``)      yes (of kept clients)
``lognormal``  IID content, client sizes ∝ ⌊LogNormal(μ, σ)⌋ + offset               yes
               (unavailability spec §4.4 "power law": μ = 4, σ = 2, offset 50)
============== ===================================================================== ===========================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, TypeVar

import numpy as np

from learning._config import spec_from_mapping
from learning._errors import ConfigError, DataError
from learning.data._datasets import Dataset

__all__ = [
    "PARTITIONS",
    "DirichletPartition",
    "IIDPartition",
    "KClassesPartition",
    "LogNormalPartition",
    "NaturalPartition",
    "PairsPartition",
    "Partition",
    "PartitionSpec",
    "PartitionStats",
    "ShardsPartition",
    "partition_dataset",
    "partition_spec",
    "register_partition",
]


# ---------------------------------------------------------------------------------------------------------------
# Result types.


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStats:
    """Per-client statistics of a partition (cmfl spec Table 2 columns, plus classes per client).

    Attributes
    ----------
    samples_per_client:
        int64 ``(M,)``.
    classes_per_client:
        int64 ``(M,)``: number of distinct labels each client holds.
    label_counts:
        int64 ``(M, C)``: samples of each class at each client.
    """

    samples_per_client: np.ndarray
    classes_per_client: np.ndarray
    label_counts: np.ndarray

    @property
    def num_clients(self) -> int:
        """Number of clients ("Number of devices")."""
        return int(self.samples_per_client.shape[0])

    @property
    def total_samples(self) -> int:
        """Samples over all clients ("Total samples")."""
        return int(self.samples_per_client.sum())

    @property
    def mean(self) -> float:
        """Mean samples per client ("Mean")."""
        return float(self.samples_per_client.mean()) if self.num_clients else 0.0

    @property
    def stdev(self) -> float:
        """Population standard deviation of samples per client ("Stdev")."""
        return float(self.samples_per_client.std()) if self.num_clients else 0.0

    def table_row(self) -> str:
        """One line in the format of cmfl spec Table 2, with a classes-per-client column."""
        cpc = self.classes_per_client
        classes = f"{cpc.mean():.2f} [{cpc.min()}–{cpc.max()}]" if self.num_clients else "-"
        return (
            f"clients {self.num_clients} | total samples {self.total_samples} | mean {self.mean:.2f} | "
            f"stdev {self.stdev:.2f} | classes/client {classes}"
        )


@dataclass(frozen=True, slots=True, eq=False)
class Partition:
    """Client ``i`` holds ``dataset.subset(clients[i])``; each index array is sorted, int64.

    Attributes
    ----------
    clients:
        One index array per client into the partitioned dataset.
    num_samples:
        Size of the partitioned dataset (for coverage checks).
    names:
        Optional client names (LEAF user ids for the natural partition), else empty.
    """

    clients: tuple[np.ndarray, ...]
    num_samples: int
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for idx in self.clients:
            if idx.dtype != np.int64 or idx.ndim != 1:
                raise ConfigError("partition index arrays must be 1-D int64")
            if idx.size and (idx[0] < 0 or idx[-1] >= self.num_samples or np.any(np.diff(idx) <= 0)):
                raise ConfigError("partition index arrays must be sorted, unique and within the dataset")

    def __len__(self) -> int:
        return len(self.clients)

    def sizes(self) -> np.ndarray:
        """Samples per client, int64 ``(M,)``."""
        return np.array([len(idx) for idx in self.clients], dtype=np.int64)

    def is_disjoint(self) -> bool:
        """No sample belongs to two clients."""
        every = np.concatenate(self.clients) if self.clients else np.empty(0, np.int64)
        return len(np.unique(every)) == len(every)

    def covers_all(self) -> bool:
        """Every sample of the dataset belongs to exactly one client."""
        every = np.concatenate(self.clients) if self.clients else np.empty(0, np.int64)
        return len(every) == self.num_samples and self.is_disjoint()

    def client_data(self, dataset: Dataset, client: int) -> Dataset:
        """Client ``client``'s local dataset."""
        if len(dataset) != self.num_samples:
            raise ConfigError(f"partition is of {self.num_samples} samples, dataset has {len(dataset)}")
        return dataset.subset(self.clients[client])

    def client_datasets(self, dataset: Dataset) -> list[Dataset]:
        """Every client's local dataset, in client order."""
        return [self.client_data(dataset, i) for i in range(len(self))]

    def stats(self, dataset: Dataset) -> PartitionStats:
        """Samples and classes per client on ``dataset``'s labels."""
        labels = dataset.labels
        counts = np.zeros((len(self), dataset.num_classes), dtype=np.int64)
        for i, idx in enumerate(self.clients):
            counts[i] = np.bincount(labels[idx], minlength=dataset.num_classes)
        return PartitionStats(
            samples_per_client=self.sizes(),
            classes_per_client=(counts > 0).sum(axis=1).astype(np.int64),
            label_counts=counts,
        )


def _finish(clients: Sequence[np.ndarray], n: int, names: tuple[str, ...] = ()) -> Partition:
    return Partition(
        clients=tuple(np.sort(np.asarray(c, dtype=np.int64)) for c in clients), num_samples=n, names=names
    )


# ---------------------------------------------------------------------------------------------------------------
# Registry.


class PartitionSpec(Protocol):
    """A typed, frozen partition rule: ``spec(dataset, rng=...)`` returns a :class:`Partition`."""

    name: ClassVar[str]

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition: ...


PARTITIONS: dict[str, type[PartitionSpec]] = {}
"""Registry ``name → partition spec class``, filled by :func:`register_partition`."""

_S = TypeVar("_S")


def register_partition(name: str) -> Callable[[type[_S]], type[_S]]:
    """Class decorator: register a partition spec class under ``name``."""

    def decorate(cls: type[_S]) -> type[_S]:
        if name in PARTITIONS:
            raise ConfigError(f"partition {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        PARTITIONS[name] = cls  # type: ignore[assignment]
        return cls

    return decorate


def partition_spec(name: str, params: Mapping[str, object] | None = None) -> PartitionSpec:
    """Resolve a partition name and its parameters into a typed spec — the config boundary.

    Examples
    --------
    >>> partition_spec("dirichlet", {"num_clients": 100, "alpha": 0.5})
    DirichletPartition(num_clients=100, alpha=0.5, scheme='per_class', samples_per_client=None, min_samples=1)
    """
    try:
        cls = PARTITIONS[name]
    except KeyError:
        raise ConfigError(f"unknown partition {name!r}; known: {', '.join(sorted(PARTITIONS))}") from None
    return spec_from_mapping(cls, params or {}, what=f"partition {name!r}")


def partition_dataset(spec: PartitionSpec, dataset: Dataset, *, seed: int) -> Partition:
    """``spec(dataset, rng=np.random.default_rng(seed))``."""
    return spec(dataset, rng=np.random.default_rng(seed))


def _positive(what: str, **values: int | None) -> None:
    for key, value in values.items():
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{what}: {key} must be a positive int, got {value!r}")


def _class_members(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled index array of each class."""
    return [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]


# ---------------------------------------------------------------------------------------------------------------
# IID.


@register_partition("iid")
@dataclass(frozen=True, slots=True, kw_only=True)
class IIDPartition:
    """Uniformly shuffled, near-equal client sizes (sizes differ by at most one; every sample used).

    With ``samples_per_client`` every client gets exactly that many and the rest of the pool is unused.
    """

    name: ClassVar[str]
    num_clients: int
    samples_per_client: int | None = None

    def __post_init__(self) -> None:
        _positive("iid", num_clients=self.num_clients, samples_per_client=self.samples_per_client)

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        n, m = len(dataset), self.num_clients
        if m > n:
            raise ConfigError(f"iid: {m} clients for {n} samples")
        perm = rng.permutation(n)
        if self.samples_per_client is None:
            return _finish(np.array_split(perm, m), n)
        need = m * self.samples_per_client
        if need > n:
            raise ConfigError(f"iid: {m} × {self.samples_per_client} samples requested, the pool has {n}")
        return _finish(np.split(perm[:need], m), n)


# ---------------------------------------------------------------------------------------------------------------
# Dirichlet.


@register_partition("dirichlet")
@dataclass(frozen=True, slots=True, kw_only=True)
class DirichletPartition:
    """Label skew drawn from a Dirichlet distribution; large α approaches IID, α = 0.1 is highly non-IID.

    ``scheme="per_class"`` (Hsu et al.; sself spec §3): for each class c, ``p ~ Dir(α·1_M)`` and class c's
    shuffled samples are cut among the clients in proportions p. Every sample is used once; sizes are unequal.
    The draw is repeated (at most 1,000 times) until every client has ``min_samples`` (sself spec §7 item 4: no
    empty device).

    ``scheme="per_client"`` (unavailability spec §4.3, ``gen_data.py``): client i draws ``q_i ~ Dir(α·1_C)`` and fills
    ``samples_per_client`` slots (default ``⌊N/M⌋``) with labels drawn from ``q_i``, each slot taking the next
    unused sample of its class; when a class runs out its column of every q is zeroed and the rows renormalised
    (a row left with no mass falls back to the classes that remain). Disjoint, every client the same size.
    """

    name: ClassVar[str]
    num_clients: int
    alpha: float
    scheme: Literal["per_class", "per_client"] = "per_class"
    samples_per_client: int | None = None
    min_samples: int = 1

    def __post_init__(self) -> None:
        _positive("dirichlet", num_clients=self.num_clients, samples_per_client=self.samples_per_client)
        if not (isinstance(self.alpha, int | float) and self.alpha > 0 and np.isfinite(self.alpha)):
            raise ConfigError(f"dirichlet: alpha must be a positive finite number, got {self.alpha!r}")
        if self.scheme not in ("per_class", "per_client"):
            raise ConfigError(f"dirichlet: scheme must be 'per_class' or 'per_client', got {self.scheme!r}")
        if self.scheme == "per_class" and self.samples_per_client is not None:
            raise ConfigError("dirichlet: samples_per_client applies to scheme='per_client' only")
        if not isinstance(self.min_samples, int) or self.min_samples < 0:
            raise ConfigError(f"dirichlet: min_samples must be an int >= 0, got {self.min_samples!r}")

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        if self.scheme == "per_class":
            return self._per_class(dataset, rng)
        return self._per_client(dataset, rng)

    def _per_class(self, dataset: Dataset, rng: np.random.Generator) -> Partition:
        n, m, c = len(dataset), self.num_clients, dataset.num_classes
        if m * self.min_samples > n:
            raise ConfigError(f"dirichlet: {m} clients × min_samples {self.min_samples} > {n} samples")
        labels = dataset.labels
        for _ in range(1000):
            parts: list[list[np.ndarray]] = [[] for _ in range(m)]
            for members in _class_members(labels, c, rng):
                p = rng.dirichlet(np.full(m, float(self.alpha)))
                cuts = (np.cumsum(p)[:-1] * len(members)).astype(np.int64)
                for i, chunk in enumerate(np.split(members, cuts)):
                    parts[i].append(chunk)
            clients = [np.concatenate(p) for p in parts]
            if min(len(x) for x in clients) >= self.min_samples:
                return _finish(clients, n)
        raise ConfigError(
            f"dirichlet: no draw in 1000 gave every client >= {self.min_samples} samples (alpha={self.alpha}, "
            f"{m} clients, {n} samples); lower min_samples or raise alpha"
        )

    def _per_client(self, dataset: Dataset, rng: np.random.Generator) -> Partition:
        n, m, c = len(dataset), self.num_clients, dataset.num_classes
        per = self.samples_per_client if self.samples_per_client is not None else n // m
        if per <= 0 or per * m > n:
            raise ConfigError(f"dirichlet: {m} clients × {per} samples does not fit {n} samples")
        pools = _class_members(dataset.labels, c, rng)
        used = np.zeros(c, dtype=np.int64)
        remaining = np.array([len(p) for p in pools], dtype=np.int64)
        q = rng.dirichlet(np.full(c, float(self.alpha)), size=m)
        clients = []
        for i in range(m):
            taken: list[np.ndarray] = []
            need = per
            while need > 0:
                row = np.where(remaining > 0, q[i], 0.0)
                total = row.sum()
                if total <= 0.0:  # the client's classes are all exhausted: spread over what remains
                    row, total = (remaining > 0).astype(np.float64), float((remaining > 0).sum())
                counts = rng.multinomial(need, row / total)
                for k in np.flatnonzero(counts):
                    take = min(int(counts[k]), int(remaining[k]))
                    taken.append(pools[k][used[k] : used[k] + take])
                    used[k] += take
                    remaining[k] -= take
                    need -= take
            clients.append(np.concatenate(taken))
        return _finish(clients, n)


# ---------------------------------------------------------------------------------------------------------------
# k classes per client.


def _distinct_rows(labels: np.ndarray, m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Arrange the multiset ``labels`` (length m·k) into an (m, k) matrix whose rows have distinct values.

    Random start, then swaps that remove a duplicate without creating one; if that stalls, a strided layout
    (sorted labels, row j takes positions j, j+m, j+2m, …) that is valid whenever no label occurs more than m
    times, with rows and label order shuffled.
    """
    grid = rng.permutation(labels).reshape(m, k)
    for _ in range(m * k + 1):  # each swap removes one duplicate
        bad = [r for r in range(m) if len(set(grid[r].tolist())) < k]
        if not bad:
            return grid
        r = bad[int(rng.integers(len(bad)))]
        row = grid[r].tolist()
        j = next(j for j in range(k) if row.index(row[j]) != j)  # a repeated entry
        dup = row[j]
        options = [
            (r2, j2)
            for r2 in range(m)
            if r2 != r and dup not in grid[r2].tolist()
            for j2 in range(k)
            if grid[r2, j2] not in row
        ]
        if not options:
            break
        r2, j2 = options[int(rng.integers(len(options)))]
        grid[r, j], grid[r2, j2] = grid[r2, j2], grid[r, j]
    relabel = rng.permutation(int(labels.max()) + 1)
    ordered = np.sort(relabel[labels], kind="stable")
    inverse = np.argsort(relabel)
    grid = inverse[ordered].reshape(k, m).T.copy()
    return grid[rng.permutation(m)]


@register_partition("k_classes")
@dataclass(frozen=True, slots=True, kw_only=True)
class KClassesPartition:
    """Exactly ``classes_per_client`` distinct classes and a fixed number of samples per client (mimic spec §4).

    ``scheme="shards"`` (mimic spec's recommended reading of "60 shards, two per client"): M·k shards, spread over
    the C classes as evenly as possible (each class ⌊Mk/C⌋ or ⌈Mk/C⌉ shards), dealt so that no client holds two
    shards of one class. All shards have the same size: ``samples_per_client / k`` if given (must divide),
    otherwise the largest size every class can fill, so every client holds the same number of samples (FMNIST:
    30 clients × 2 shards of 1,000; CIFAR-10: 1,666 per client). Leftover samples are unused.

    ``scheme="label_holders"`` (mimic spec code ``noniid-#label<k>``): client i holds class ``i mod C`` plus
    ``k − 1`` further distinct random classes; each class is split evenly among its holders, each holder keeping
    at most ``samples_per_client // k`` (all it gets if None), so sizes may differ when classes are short.
    """

    name: ClassVar[str]
    num_clients: int
    classes_per_client: int
    samples_per_client: int | None = None
    scheme: Literal["shards", "label_holders"] = "shards"

    def __post_init__(self) -> None:
        _positive(
            "k_classes",
            num_clients=self.num_clients,
            classes_per_client=self.classes_per_client,
            samples_per_client=self.samples_per_client,
        )
        if self.scheme not in ("shards", "label_holders"):
            raise ConfigError(f"k_classes: scheme must be 'shards' or 'label_holders', got {self.scheme!r}")
        if self.samples_per_client is not None and self.samples_per_client % self.classes_per_client:
            raise ConfigError(
                f"k_classes: samples_per_client {self.samples_per_client} is not a multiple of "
                f"classes_per_client {self.classes_per_client}"
            )

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        c, k = dataset.num_classes, self.classes_per_client
        if k > c:
            raise ConfigError(f"k_classes: {k} classes per client but the dataset has {c}")
        if self.scheme == "shards":
            return self._shards(dataset, rng)
        return self._label_holders(dataset, rng)

    def _shards(self, dataset: Dataset, rng: np.random.Generator) -> Partition:
        n, m, k, c = len(dataset), self.num_clients, self.classes_per_client, dataset.num_classes
        total = m * k
        shards_of = np.full(c, total // c, dtype=np.int64)
        shards_of[rng.permutation(c)[: total % c]] += 1
        pools = _class_members(dataset.labels, c, rng)
        counts = np.array([len(p) for p in pools], dtype=np.int64)
        holding = shards_of > 0
        if self.samples_per_client is not None:
            size = self.samples_per_client // k
        else:
            size = int((counts[holding] // shards_of[holding]).min())
        short = np.flatnonzero(counts < shards_of * size)
        if size <= 0 or short.size:
            raise DataError(
                f"k_classes: class(es) {short.tolist()} cannot fill {shards_of[short].tolist()} shard(s) of "
                f"{max(size, 1)} samples ({counts[short].tolist()} available)"
            )
        labels = np.repeat(np.arange(c, dtype=np.int64), shards_of)
        grid = _distinct_rows(labels, m, k, rng)
        next_shard = np.zeros(c, dtype=np.int64)
        clients = []
        for r in range(m):
            parts = []
            for cls in grid[r]:
                s = int(next_shard[cls])
                parts.append(pools[cls][s * size : (s + 1) * size])
                next_shard[cls] += 1
            clients.append(np.concatenate(parts))
        return _finish(clients, n)

    def _label_holders(self, dataset: Dataset, rng: np.random.Generator) -> Partition:
        n, m, k, c = len(dataset), self.num_clients, self.classes_per_client, dataset.num_classes
        holders: list[list[int]] = [[] for _ in range(c)]
        for i in range(m):
            first = i % c
            others = np.array([x for x in range(c) if x != first], dtype=np.int64)
            chosen = [first, *rng.choice(others, k - 1, replace=False).tolist()]
            for cls in chosen:
                holders[cls].append(i)
        cap = None if self.samples_per_client is None else self.samples_per_client // k
        parts: list[list[np.ndarray]] = [[] for _ in range(m)]
        for cls, members in enumerate(_class_members(dataset.labels, c, rng)):
            if not holders[cls]:
                continue
            for client, chunk in zip(holders[cls], np.array_split(members, len(holders[cls])), strict=True):
                parts[client].append(chunk if cap is None else chunk[:cap])
        return _finish([np.concatenate(p) for p in parts], n)


# ---------------------------------------------------------------------------------------------------------------
# Fixed class pairs.


@register_partition("pairs")
@dataclass(frozen=True, slots=True, kw_only=True)
class PairsPartition:
    """A fixed pair of classes per client (mimic spec §6.1, stress scenario S5).

    With C classes there are ``P = C / 2`` pairs; pair ``j`` is classes ``(2j, 2j + 1)`` and client ``i`` holds
    pair ``i mod P``, i.e. classes ``2(i mod P)`` and ``2(i mod P) + 1``. Each class's samples are shuffled and
    split as evenly as possible among its holders (``np.array_split`` in client order: holder sizes of one class
    differ by at most one). Every sample belongs to exactly one client; which client gets which samples of a class
    depends on the seed, the class sets do not.

    Sizes: each client gets about ``(n_{2j} + n_{2j+1}) / h_j`` samples, ``h_j`` the number of holders of pair j
    (``⌈M/P⌉`` or ``⌊M/P⌋``; all equal when P divides M). Digits (1,437 training samples), 20 clients: 4 holders
    per pair, 33–38 samples of each class, 69–74 samples per client (the spec's "about 72").

    Errors: :class:`ConfigError` if C is odd, if ``M < P`` (a pair without a holder would leave samples
    unassigned) or ``num_clients`` is not a positive int; :class:`DataError` if a class has fewer samples than
    holders (a client would hold fewer than two classes).

    Examples
    --------
    >>> partition_spec("pairs", {"num_clients": 20})
    PairsPartition(num_clients=20)
    """

    name: ClassVar[str]
    num_clients: int

    def __post_init__(self) -> None:
        _positive("pairs", num_clients=self.num_clients)

    def pair_of(self, num_classes: int) -> np.ndarray:
        """The pair id ``i mod P`` of every client, int64 ``(M,)``, after checking ``num_classes``."""
        if num_classes % 2:
            raise ConfigError(f"pairs: the dataset has {num_classes} classes; pairs need an even class count")
        pairs = num_classes // 2
        if self.num_clients < pairs:
            raise ConfigError(
                f"pairs: {self.num_clients} clients for {pairs} class pairs; every pair needs a holder "
                f"(num_clients >= {pairs})"
            )
        return np.arange(self.num_clients, dtype=np.int64) % pairs

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        c = dataset.num_classes
        pair = self.pair_of(c)
        parts: list[list[np.ndarray]] = [[] for _ in range(self.num_clients)]
        for cls, members in enumerate(_class_members(dataset.labels, c, rng)):
            holders = np.flatnonzero(pair == cls // 2)
            if len(members) < len(holders):
                raise DataError(
                    f"pairs: class {cls} has {len(members)} samples for {len(holders)} holders; every holder "
                    f"needs at least one"
                )
            for client, chunk in zip(holders.tolist(), np.array_split(members, len(holders)), strict=True):
                parts[client].append(chunk)
        return _finish([np.concatenate(p) for p in parts], len(dataset))


# ---------------------------------------------------------------------------------------------------------------
# McMahan shards.


@register_partition("shards")
@dataclass(frozen=True, slots=True, kw_only=True)
class ShardsPartition:
    """McMahan et al.'s pathological non-IID split (sself spec §4 [DEFAULT]): sort the pool by label (ties in a
    seeded random order), cut it into ``M · shards_per_client`` equal shards, give each client
    ``shards_per_client`` random shards. A client may draw two shards of one class; the remainder
    ``N mod (M·k)`` is unused (MNIST after 2 % public: 58,800 / 100 = 588 each)."""

    name: ClassVar[str]
    num_clients: int
    shards_per_client: int = 2

    def __post_init__(self) -> None:
        _positive("shards", num_clients=self.num_clients, shards_per_client=self.shards_per_client)

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        n, m, k = len(dataset), self.num_clients, self.shards_per_client
        total = m * k
        if total > n:
            raise ConfigError(f"shards: {total} shards for {n} samples")
        shuffled = rng.permutation(n)
        order = shuffled[np.argsort(dataset.labels[shuffled], kind="stable")]
        size = n // total
        shards = order[: total * size].reshape(total, size)
        deal = rng.permutation(total).reshape(m, k)
        return _finish([shards[row].reshape(-1) for row in deal], n)


# ---------------------------------------------------------------------------------------------------------------
# Natural (LEAF writers / speakers, generated clients).


@register_partition("natural")
@dataclass(frozen=True, slots=True, kw_only=True)
class NaturalPartition:
    """One client per natural group of the dataset (LEAF writer / speaking role / account; the generated
    datasets' clients), in group order, dropping groups with fewer than ``min_samples`` and keeping the first
    ``max_clients`` (fedro spec §5: "the first 150 clients"). Deterministic; ``rng`` is not used."""

    name: ClassVar[str]
    max_clients: int | None = None
    min_samples: int = 1

    def __post_init__(self) -> None:
        _positive("natural", max_clients=self.max_clients, min_samples=self.min_samples)

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        if dataset.groups is None:
            raise ConfigError(
                f"natural partition needs a dataset with per-sample groups (LEAF, synthetic, gmm, mini_femnist); "
                f"{dataset.name or 'this dataset'} has none"
            )
        n = len(dataset)
        order = np.argsort(dataset.groups, kind="stable")
        bounds = np.searchsorted(dataset.groups[order], np.arange(len(dataset.group_names) + 1))
        clients, names = [], []
        for g, name in enumerate(dataset.group_names):
            members = order[bounds[g] : bounds[g + 1]]
            if len(members) >= self.min_samples:
                clients.append(members)
                names.append(name)
            if self.max_clients is not None and len(clients) == self.max_clients:
                break
        return _finish(clients, n, tuple(names))


# ---------------------------------------------------------------------------------------------------------------
# Log-normal sizes.


@register_partition("lognormal")
@dataclass(frozen=True, slots=True, kw_only=True)
class LogNormalPartition:
    """IID content with "power law" client sizes (unavailability spec §4.4, Fig. 8): raw sizes
    ``⌊LogNormal(mu, sigma)⌋ + offset`` are scaled to the pool (largest remainders) with at least
    ``min_samples`` per client; every sample is used once."""

    name: ClassVar[str]
    num_clients: int
    mu: float = 4.0
    sigma: float = 2.0
    offset: int = 50
    min_samples: int = 1

    def __post_init__(self) -> None:
        _positive("lognormal", num_clients=self.num_clients, min_samples=self.min_samples)
        if not self.sigma > 0 or not np.isfinite(self.mu):
            raise ConfigError(f"lognormal: need sigma > 0 and a finite mu, got {self.mu}, {self.sigma}")
        if not isinstance(self.offset, int) or self.offset < 0:
            raise ConfigError(f"lognormal: offset must be an int >= 0, got {self.offset!r}")

    def __call__(self, dataset: Dataset, /, *, rng: np.random.Generator) -> Partition:
        n, m = len(dataset), self.num_clients
        spare = n - m * self.min_samples
        if spare < 0:
            raise ConfigError(f"lognormal: {m} clients × min_samples {self.min_samples} > {n} samples")
        raw = np.floor(rng.lognormal(self.mu, self.sigma, m)) + self.offset
        if raw.sum() <= 0:
            raw = np.ones(m)
        base = np.floor(raw / raw.sum() * spare).astype(np.int64)
        left = spare - int(base.sum())
        frac = raw / raw.sum() * spare - base
        base[np.lexsort((rng.random(m), -frac))[:left]] += 1
        sizes = base + self.min_samples
        perm = rng.permutation(n)
        return _finish(np.split(perm, np.cumsum(sizes)[:-1]), n)
