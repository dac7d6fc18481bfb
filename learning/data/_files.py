"""Dataset loaders that read local files: MNIST, Fashion-MNIST, EMNIST (IDX), CIFAR-10 (binary), LEAF (JSON).

Nothing here downloads: each loader reads a directory the user prepared and, if files are absent, raises
:class:`DataError` naming the directory and every expected file. Decoding is strict (IDX magic, declared sizes,
record lengths, label ranges, JSON structure) because data files are inputs like any other. No pickle and no
``torch.load``: CIFAR-10 is read from its *binary* version, LEAF from JSON, IDX as raw big-endian arrays.

Registered datasets:

=================== ============================================================================================
``mnist``           ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
                    ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``) → ``(N, 1, 28, 28)`` in [0, 1]
``fashion_mnist``   the same file names (Fashion-MNIST ships them so), 10 classes (mimic spec §4, sself spec §4)
``emnist``          ``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte[.gz]``; images transposed to
                    the MNIST orientation; ``letters`` labels 1..26 shifted to 0..25
``cifar10``         ``cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin`` → ``(N, 3, 32, 32)`` in [0, 1],
                    optionally normalised per channel (unavailability spec §4.3, mimic spec §4)
``femnist``         LEAF ``train/*.json`` + ``test/*.json``; x = 784 floats → ``(N, 1, 28, 28)``, 62 classes
``shakespeare``     LEAF; x = 80-character strings → int64 ids over LEAF's 80 letters, y = next character
``sent140``         LEAF; x = tweet (text is the last field), y ∈ {0, 1} (raw 4 → 1); word ids, padded
=================== ============================================================================================

LEAF datasets carry ``groups`` (one per writer / speaking role / Twitter account): the ``natural`` partition.
"""

from __future__ import annotations

import gzip
import json
import re
import struct
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch

from learning._errors import ConfigError, DataError
from learning.data._datasets import DataSplits, Dataset, register_dataset

__all__ = [
    "CIFAR10Spec",
    "EMNISTSpec",
    "FEMNISTSpec",
    "FashionMNISTSpec",
    "LEAF_LETTERS",
    "MNISTSpec",
    "Sent140Spec",
    "ShakespeareSpec",
    "decode_idx",
    "read_cifar10_binary",
    "read_idx",
]

# ---------------------------------------------------------------------------------------------------------------
# IDX.

_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_MAX_DIMS = 8


def decode_idx(data: bytes, *, source: str = "<bytes>") -> np.ndarray:
    """Decode an IDX array (LeCun's MNIST format): magic ``00 00 <dtype> <ndim>``, ``ndim`` big-endian uint32
    sizes, then the values, big-endian, row-major.

    Raises
    ------
    DataError
        Bad magic, unknown dtype code, or a payload whose length does not match the declared sizes.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataError(f"{source}: not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise DataError(f"{source}: unknown IDX data type 0x{code:02x}")
    if not 1 <= ndim <= _IDX_MAX_DIMS:
        raise DataError(f"{source}: unsupported IDX rank {ndim}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{source}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = _IDX_DTYPES[code]
    count = 1
    for dim in dims:
        count *= dim
    expected = header + count * dtype.itemsize
    if len(data) != expected:
        raise DataError(f"{source}: IDX declares {dims} ({expected} bytes) but the file has {len(data)} bytes")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=False) if dtype.itemsize > 1 else array


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file, gzip-compressed if its name ends in ``.gz``."""
    path = Path(path)
    return decode_idx(_read_bytes(path), source=str(path))


def _find_idx(directory: Path, stems: tuple[str, ...], what: str) -> list[Path]:
    """The path of each IDX stem (plain preferred over ``.gz``), or a DataError listing every missing file."""
    found: list[Path] = []
    missing: list[str] = []
    for stem in stems:
        for candidate in (directory / stem, directory / f"{stem}.gz"):
            if candidate.is_file():
                found.append(candidate)
                break
        else:
            missing.append(f"{stem}[.gz]")
    if missing:
        raise DataError(
            f"{what}: missing {', '.join(missing)} in directory {directory} "
            f"(expected files: {', '.join(f'{s}[.gz]' for s in stems)}; loaders never download)"
        )
    return found


def _images_labels(images: np.ndarray, labels: np.ndarray, *, source: str) -> tuple[np.ndarray, np.ndarray]:
    if images.ndim != 3 or labels.ndim != 1:
        raise DataError(f"{source}: expected images (N, H, W) and labels (N,), got {images.shape} and {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{source}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def _to_dataset(images: np.ndarray, labels: np.ndarray, num_classes: int, name: str) -> Dataset:
    x = torch.from_numpy(images.astype(np.float32)).div_(255.0).unsqueeze(1)  # astype copies: writable
    return Dataset(x=x, y=torch.from_numpy(labels.astype(np.int64)), num_classes=num_classes, name=name)


def _load_mnist_like(root: str, prefix: str, what: str, num_classes: int, *, transpose: bool, shift: int) -> DataSplits:
    directory = Path(root)
    stems = (
        f"{prefix}train-images-idx3-ubyte",
        f"{prefix}train-labels-idx1-ubyte",
        f"{prefix}t10k-images-idx3-ubyte" if not prefix else f"{prefix}test-images-idx3-ubyte",
        f"{prefix}t10k-labels-idx1-ubyte" if not prefix else f"{prefix}test-labels-idx1-ubyte",
    )
    paths = _find_idx(directory, stems, what)
    arrays = [read_idx(p) for p in paths]
    splits = []
    for images, labels, source in ((arrays[0], arrays[1], paths[0]), (arrays[2], arrays[3], paths[2])):
        images, labels = _images_labels(images, labels, source=str(source))
        labels = labels.astype(np.int64) - shift
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise DataError(f"{source}: labels out of range for {what} ({num_classes} classes)")
        if transpose:
            images = images.transpose(0, 2, 1)
        splits.append(_to_dataset(images, labels, num_classes, what))
    return DataSplits(train=splits[0], test=splits[1])


def _check_root(what: str, root: str) -> None:
    if not isinstance(root, str | Path) or not str(root):
        raise ConfigError(f"{what}: root must be a directory path, got {root!r}")


@register_dataset("mnist")
@dataclass(frozen=True, slots=True, kw_only=True)
class MNISTSpec:
    """MNIST from the four IDX files in ``root`` (60,000 train / 10,000 test, 10 classes)."""

    name: ClassVar[str]
    root: str

    def __post_init__(self) -> None:
        _check_root("mnist", self.root)

    def load(self) -> DataSplits:
        return _load_mnist_like(self.root, "", "mnist", 10, transpose=False, shift=0)


@register_dataset("fashion_mnist")
@dataclass(frozen=True, slots=True, kw_only=True)
class FashionMNISTSpec:
    """Fashion-MNIST from the four IDX files in ``root`` (same file names as MNIST; mimic spec, sself spec)."""

    name: ClassVar[str]
    root: str

    def __post_init__(self) -> None:
        _check_root("fashion_mnist", self.root)

    def load(self) -> DataSplits:
        return _load_mnist_like(self.root, "", "fashion_mnist", 10, transpose=False, shift=0)


_EMNIST_CLASSES: dict[str, int] = {
    "byclass": 62,
    "bymerge": 47,
    "balanced": 47,
    "letters": 26,
    "digits": 10,
    "mnist": 10,
}


@register_dataset("emnist")
@dataclass(frozen=True, slots=True, kw_only=True)
class EMNISTSpec:
    """EMNIST ``split`` from ``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte[.gz]`` in ``root``.

    EMNIST stores images transposed relative to MNIST; they are transposed back. ``letters`` labels (1..26) are
    shifted to 0..25. Classes: byclass 62, bymerge 47, balanced 47, letters 26, digits 10, mnist 10.
    """

    name: ClassVar[str]
    root: str
    split: Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"] = "balanced"

    def __post_init__(self) -> None:
        _check_root("emnist", self.root)
        if self.split not in _EMNIST_CLASSES:
            raise ConfigError(f"emnist: unknown split {self.split!r}; known: {', '.join(_EMNIST_CLASSES)}")

    def load(self) -> DataSplits:
        return _load_mnist_like(
            self.root,
            f"emnist-{self.split}-",
            f"emnist-{self.split}",
            _EMNIST_CLASSES[self.split],
            transpose=True,
            shift=1 if self.split == "letters" else 0,
        )


# ---------------------------------------------------------------------------------------------------------------
# CIFAR-10 binary version.

_CIFAR_RECORD = 1 + 3 * 32 * 32
_CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
_CIFAR_TEST = ("test_batch.bin",)


def read_cifar10_binary(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 binary batch: records of 1 label byte + 3,072 pixel bytes (R, G, B planes, row-major).

    Returns ``(images uint8 (N, 3, 32, 32), labels int64 (N,))``.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) == 0 or len(data) % _CIFAR_RECORD:
        raise DataError(f"{path}: {len(data)} bytes is not a whole number of {_CIFAR_RECORD}-byte CIFAR-10 records")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, _CIFAR_RECORD)
    labels = records[:, 0].astype(np.int64)
    if labels.max() >= 10:
        raise DataError(f"{path}: label {int(labels.max())} out of range for CIFAR-10")
    return records[:, 1:].reshape(-1, 3, 32, 32), labels


@register_dataset("cifar10")
@dataclass(frozen=True, slots=True, kw_only=True)
class CIFAR10Spec:
    """CIFAR-10, binary version: ``data_batch_1.bin`` … ``data_batch_5.bin`` and ``test_batch.bin`` in ``root`` or
    in ``root/cifar-10-batches-bin``. Pixels scaled to [0, 1], then ``(x − mean) / std`` per channel if given.

    unavailability spec §4.3 normalises with ``mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)``; mimic spec §4 with
    ``mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616)``. The Python (pickled) version is refused.
    """

    name: ClassVar[str]
    root: str
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        _check_root("cifar10", self.root)
        if (self.mean is None) != (self.std is None):
            raise ConfigError("cifar10: give both mean and std, or neither")
        if self.mean is not None and self.std is not None:
            if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
                raise ConfigError("cifar10: mean and std need 3 values each, std > 0")

    def _directory(self) -> Path:
        root = Path(self.root)
        nested = root / "cifar-10-batches-bin"
        return nested if nested.is_dir() else root

    def load(self) -> DataSplits:
        directory = self._directory()
        expected = _CIFAR_TRAIN + _CIFAR_TEST
        missing = [name for name in expected if not (directory / name).is_file()]
        if missing:
            hint = ""
            if (Path(self.root) / "cifar-10-batches-py").exists() or (directory / "data_batch_1").exists():
                hint = " (found the pickled Python version, which is never loaded: use the binary version)"
            raise DataError(
                f"cifar10: missing {', '.join(missing)} in directory {directory} (expected files: "
                f"{', '.join(expected)} of the CIFAR-10 binary version; loaders never download){hint}"
            )
        parts = [read_cifar10_binary(directory / name) for name in _CIFAR_TRAIN]
        train = self._dataset(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        test = self._dataset(*read_cifar10_binary(directory / _CIFAR_TEST[0]))
        return DataSplits(train=train, test=test)

    def _dataset(self, images: np.ndarray, labels: np.ndarray) -> Dataset:
        x = torch.from_numpy(images.astype(np.float32)).div_(255.0)  # astype copies: writable
        if self.mean is not None and self.std is not None:
            mean = torch.tensor(self.mean, dtype=torch.float32).view(1, 3, 1, 1)
            std = torch.tensor(self.std, dtype=torch.float32).view(1, 3, 1, 1)
            x = x.sub_(mean).div_(std)
        return Dataset(x=x, y=torch.from_numpy(labels), num_classes=10, name="cifar10")


# ---------------------------------------------------------------------------------------------------------------
# LEAF JSON.

LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's Shakespeare alphabet (80 characters); a character's class is its index here."""
_LEAF_INDEX = {ch: i for i, ch in enumerate(LEAF_LETTERS)}

_UserRecords = list[tuple[str, list[object], list[object], Path]]


def _leaf_split_dirs(what: str, root: str) -> tuple[Path, Path]:
    base = Path(root)
    for candidate in (base, base / "data"):
        train, test = candidate / "train", candidate / "test"
        if train.is_dir() and test.is_dir() and any(train.glob("*.json")) and any(test.glob("*.json")):
            return train, test
    raise DataError(
        f"{what}: no LEAF JSON found in directory {base}: expected {base}/train/*.json and {base}/test/*.json "
        f"(LEAF layout data/<dataset>/data/{{train,test}}/*.json, made with preprocess.sh ... -t sample; "
        f"loaders never download)"
    )


def _read_leaf_dir(directory: Path, what: str) -> _UserRecords:
    records: _UserRecords = []
    seen: set[str] = set()
    for path in sorted(directory.glob("*.json")):
        try:
            with path.open("r", encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError) as exc:
            raise DataError(f"{path}: not a readable LEAF JSON file ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("users"), list):
            raise DataError(f"{path}: a LEAF file needs a 'users' list and a 'user_data' object")
        if not isinstance(doc.get("user_data"), dict):
            raise DataError(f"{path}: a LEAF file needs a 'users' list and a 'user_data' object")
        users, user_data = doc["users"], doc["user_data"]
        counts = doc.get("num_samples")
        if counts is not None and (not isinstance(counts, list) or len(counts) != len(users)):
            raise DataError(f"{path}: 'num_samples' must be a list as long as 'users'")
        for i, user in enumerate(users):
            if not isinstance(user, str) or user not in user_data:
                raise DataError(f"{path}: user {user!r} has no entry in 'user_data'")
            if user in seen:
                raise DataError(f"{path}: user {user!r} appears twice in {directory}")
            seen.add(user)
            entry = user_data[user]
            if not (isinstance(entry, dict) and isinstance(entry.get("x"), list) and isinstance(entry.get("y"), list)):
                raise DataError(f"{path}: user {user!r} needs 'x' and 'y' lists")
            xs, ys = entry["x"], entry["y"]
            if len(xs) != len(ys):
                raise DataError(f"{path}: user {user!r} has {len(xs)} inputs but {len(ys)} labels")
            if counts is not None and counts[i] != len(ys):
                raise DataError(f"{path}: user {user!r} declares {counts[i]} samples but has {len(ys)}")
            records.append((user, xs, ys, path))
    if not records:
        raise DataError(f"{what}: no users in {directory}/*.json")
    return records


def _leaf_load(
    what: str,
    root: str,
    num_classes: int,
    encode: "_Encoder",
) -> DataSplits:
    train_dir, test_dir = _leaf_split_dirs(what, root)
    train_records = _read_leaf_dir(train_dir, what)
    test_records = _read_leaf_dir(test_dir, what)
    encode.fit(train_records)
    names: dict[str, int] = {}
    for user, *_ in train_records + test_records:
        names.setdefault(user, len(names))
    group_names = tuple(names)
    splits = []
    for records in (train_records, test_records):
        xs, ys, groups = [], [], []
        for user, x, y, path in records:
            if not y:
                continue
            ex, ey = encode(x, y, path=path, user=user)
            xs.append(ex)
            ys.append(ey)
            groups.append(np.full(len(ey), names[user], dtype=np.int64))
        if not ys:
            raise DataError(f"{what}: no samples in {train_dir if records is train_records else test_dir}")
        y_all = np.concatenate(ys)
        if y_all.min() < 0 or y_all.max() >= num_classes:
            raise DataError(f"{what}: labels out of range [0, {num_classes})")
        splits.append(
            Dataset(
                x=torch.from_numpy(np.concatenate(xs)),
                y=torch.from_numpy(y_all),
                num_classes=num_classes,
                groups=np.concatenate(groups),
                group_names=group_names,
                name=what,
            )
        )
    return DataSplits(train=splits[0], test=splits[1])


class _Encoder:
    """Turns one user's LEAF ``x``/``y`` lists into arrays (``fit`` sees the training records first)."""

    def fit(self, records: _UserRecords) -> None:
        return None

    def __call__(self, x: list[object], y: list[object], *, path: Path, user: str) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


def _int_labels(y: list[object], *, path: Path, user: str) -> np.ndarray:
    try:
        labels = np.asarray(y, dtype=np.int64)
    except (TypeError, ValueError):
        raise DataError(f"{path}: user {user!r} has non-integer labels") from None
    if labels.ndim != 1:
        raise DataError(f"{path}: user {user!r} labels must be a flat list")
    return labels


class _FEMNISTEncoder(_Encoder):
    def __call__(self, x: list[object], y: list[object], *, path: Path, user: str) -> tuple[np.ndarray, np.ndarray]:
        try:
            images = np.asarray(x, dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(f"{path}: user {user!r} images must be lists of 784 numbers") from None
        if images.ndim != 2 or images.shape[1] != 784 or not np.isfinite(images).all():
            raise DataError(f"{path}: user {user!r} images must be finite lists of 784 numbers, got {images.shape}")
        return images.reshape(-1, 1, 28, 28), _int_labels(y, path=path, user=user)


class _ShakespeareEncoder(_Encoder):
    def __call__(self, x: list[object], y: list[object], *, path: Path, user: str) -> tuple[np.ndarray, np.ndarray]:
        if not all(isinstance(s, str) for s in x) or not all(isinstance(c, str) and len(c) == 1 for c in y):
            raise DataError(f"{path}: user {user!r}: Shakespeare x must be strings and y single characters")
        lengths = {len(s) for s in x}
        if len(lengths) != 1:
            raise DataError(f"{path}: user {user!r}: input strings have different lengths {sorted(lengths)}")
        try:
            ids = np.array([[_LEAF_INDEX[ch] for ch in s] for s in x], dtype=np.int64)
            labels = np.array([_LEAF_INDEX[c] for c in y], dtype=np.int64)
        except KeyError as exc:
            raise DataError(
                f"{path}: user {user!r}: character {exc.args[0]!r} is not in LEAF's 80-letter alphabet"
            ) from None
        return ids, labels


_TOKEN = re.compile(r"[\w']+|[.,!?;]")


def _tweet_text(item: object, *, path: Path, user: str) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, list) and item and isinstance(item[-1], str):
        return item[-1]
    raise DataError(f"{path}: user {user!r}: a Sent140 input must be a string or a list ending with the tweet text")


class _Sent140Encoder(_Encoder):
    """Word ids: 0 = padding, 1 = unknown, 2.. = training-set words by decreasing count (ties alphabetical)."""

    def __init__(self, seq_len: int, vocab_size: int) -> None:
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.vocab: dict[str, int] = {}

    def fit(self, records: _UserRecords) -> None:
        counts: Counter[str] = Counter()
        for user, xs, _, path in records:
            for item in xs:
                counts.update(_TOKEN.findall(_tweet_text(item, path=path, user=user).lower()))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.vocab_size - 2]
        self.vocab = {word: i + 2 for i, (word, _) in enumerate(ranked)}

    def __call__(self, x: list[object], y: list[object], *, path: Path, user: str) -> tuple[np.ndarray, np.ndarray]:
        ids = np.zeros((len(x), self.seq_len), dtype=np.int64)
        for row, item in enumerate(x):
            tokens = _TOKEN.findall(_tweet_text(item, path=path, user=user).lower())[: self.seq_len]
            ids[row, : len(tokens)] = [self.vocab.get(t, 1) for t in tokens]
        raw = _int_labels([int(v) if isinstance(v, str) and v.isdigit() else v for v in y], path=path, user=user)
        if not np.isin(raw, (0, 1, 2, 4)).all():
            raise DataError(f"{path}: user {user!r}: Sent140 labels must be 0/1 (or raw 0/2/4)")
        return ids, ((raw == 1) | (raw == 4)).astype(np.int64)


@register_dataset("femnist")
@dataclass(frozen=True, slots=True, kw_only=True)
class FEMNISTSpec:
    """LEAF FEMNIST (62 classes, one client per writer; cmfl spec §4.1, fedro spec §5) from ``root``'s
    ``train/*.json`` and ``test/*.json`` (or ``root/data/...``)."""

    name: ClassVar[str]
    root: str

    def __post_init__(self) -> None:
        _check_root("femnist", self.root)

    def load(self) -> DataSplits:
        return _leaf_load("femnist", self.root, 62, _FEMNISTEncoder())


@register_dataset("shakespeare")
@dataclass(frozen=True, slots=True, kw_only=True)
class ShakespeareSpec:
    """LEAF Shakespeare (80 classes, one client per speaking role; cmfl spec §4.1): x = character ids of the input
    string, y = id of the next character, both over :data:`LEAF_LETTERS`."""

    name: ClassVar[str]
    root: str

    def __post_init__(self) -> None:
        _check_root("shakespeare", self.root)

    def load(self) -> DataSplits:
        return _leaf_load("shakespeare", self.root, len(LEAF_LETTERS), _ShakespeareEncoder())


@register_dataset("sent140")
@dataclass(frozen=True, slots=True, kw_only=True)
class Sent140Spec:
    """LEAF Sentiment140 (binary, one client per account; cmfl spec §4.1): tweets tokenised into lower-case words
    and punctuation, the first ``seq_len`` (25, as [C]) mapped to ids of a vocabulary built from the training
    split (``vocab_size`` ids including padding 0 and unknown 1), zero-padded. Labels: positive (1, or raw 4) → 1."""

    name: ClassVar[str]
    root: str
    seq_len: int = 25
    vocab_size: int = 10_000

    def __post_init__(self) -> None:
        _check_root("sent140", self.root)
        if not isinstance(self.seq_len, int) or self.seq_len <= 0:
            raise ConfigError(f"sent140: seq_len must be a positive int, got {self.seq_len!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 3:
            raise ConfigError(f"sent140: vocab_size must be an int >= 3, got {self.vocab_size!r}")

    def load(self) -> DataSplits:
        return _leaf_load("sent140", self.root, 2, _Sent140Encoder(self.seq_len, self.vocab_size))
