"""A member's own data from local files, and the contract the genesis fixes for every member's data.

A testnet member trains on files it holds and nobody else sees; the genesis only says what those files must
become (:class:`DataContract`, ``protocol.params["data"]``): one sample's input shape, the number of classes,
the dtype and the :class:`Preprocessing` applied to the raw stored values. A member's ``[data]`` table names its
files (:class:`LocalData`); :func:`load_local` reads them, preprocesses them as the contract says and checks the
result against it. Every refusal is a :class:`LocalDataError` of one line, ``<file>: <field>: expected <x>,
found <y>``.

Formats (:data:`LOCAL_FORMATS`):

=============== =================================================================================================
``npz``         a file: arrays ``x`` (features) and ``y`` (labels) by default (``features=``, ``label=`` name
                others); read with ``allow_pickle=False``, object arrays refused before anything is unpickled
``csv``         a file: one sample a row, header optional (a first row with no number in it); the label column is
                ``label`` (``label=`` names another), or the last column when there is no header
``imagefolder`` a directory ``root/<class>/*.png|jpg|jpeg|bmp|pgm``: grey → ``(1, H, W)``, RGB → ``(3, H, W)``;
                the class is the directory name (a decimal number, or a name of the contract's ``label_names``)
``idx``         a directory with one ``*images*idx*`` and one ``*labels*idx*`` file (optionally ``.gz``; the
                ``train`` ones when there are several): MNIST, Fashion-MNIST, EMNIST (transposed back; ``letters``
                shifted to 0..25, as :class:`~learning.data.EMNISTSpec` does)
``cifar10``     a directory of ``data_batch_*.bin`` (CIFAR-10 binary version), or one ``.bin`` file
``leaf``        a LEAF JSON file or a directory of them: every user's ``x``/``y`` concatenated, the users kept as
                ``groups``; strings become int64 ids over LEAF's 80 letters (Shakespeare), number lists floats
``hf-disk``     ``datasets.load_from_disk(path)`` (``"train"`` of a ``DatasetDict``); image columns decoded with
                Pillow; needs ``pip install 'concilium[hf]'``
=============== =================================================================================================

The values read are the *raw* stored ones (pixels 0..255 stay 0..255): the contract's preprocessing is what
scales and normalises them, identically on every member. Reading is bounded: no file above 4 GiB, no more than
10,000,000 samples, no sample above 16,777,216 elements. :func:`write_local` writes a dataset's raw values as
``npz``, ``csv``, ``imagefolder`` or ``idx``, byte for byte the same for the same dataset; :func:`dir_digest`
hashes a file or a directory tree for manifests.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import math
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from learning._errors import DataError
from learning.data._datasets import Dataset, split_random
from learning.data._files import (
    _int_labels,
    _read_leaf_dir,
    _ShakespeareEncoder,
    decode_idx,
    read_cifar10_binary,
)

__all__ = [
    "LOCAL_FORMATS",
    "DataContract",
    "LocalData",
    "LocalDataError",
    "Preprocessing",
    "dir_digest",
    "load_local",
    "write_local",
]

LOCAL_FORMATS = ("npz", "csv", "imagefolder", "idx", "cifar10", "leaf", "hf-disk")
"""The formats :func:`load_local` reads."""
_WRITABLE_FORMATS = ("npz", "csv", "imagefolder", "idx", "hf-disk")

_FILE_BYTES_MAX = 4 * 2**30
_SAMPLES_MAX = 10_000_000
_SAMPLE_ELEMENTS_MAX = 16_777_216
_CLASSES_MAX = 1 << 20
_DTYPES = ("float32", "int64")
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".pgm")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_DIGEST_DOMAIN = b"concilium/dir-digest/v1\x00"
_LABEL_FORMATS = ("npz", "csv", "hf-disk")  # formats with a label= key or column
_FEATURE_FORMATS = ("npz", "hf-disk")


def _line(text: object) -> str:
    """``text`` on one line (a newline in a path or a value would split the message)."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class LocalDataError(DataError):
    """A local data file, its spec or its contract refused, in one line: ``<file>: <field>: expected <x>, found <y>``.

    ``LocalDataError(source, field, expected, found)``; the parts are kept as attributes. ``LocalDataError(line)``
    (one argument) carries an already formatted line, e.g. a :class:`DataError` of the file readers.
    """

    def __init__(self, source: str, field: str | None = None, expected: str = "", found: str = "") -> None:
        self.source, self.field, self.expected, self.found = source, field, expected, found
        if field is None:
            message = _line(source)
        else:
            message = f"{_line(source)}: {_line(field)}: expected {_line(expected)}, found {_line(found)}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.source, self.field, self.expected, self.found)

    def at(self, source: str) -> LocalDataError:
        """The same refusal, naming ``source`` instead (a config file's table rather than the class)."""
        if self.field is None:
            return self
        return LocalDataError(source, self.field, self.expected, self.found)


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)


def _strict_keys(d: object, keys: Sequence[str], required: Sequence[str], source: str, what: str) -> Mapping:
    if not isinstance(d, Mapping):
        raise LocalDataError(source, what, "a table", type(d).__name__)
    unknown = sorted(str(k) for k in d if k not in keys)
    if unknown:
        raise LocalDataError(source, what, f"only the keys {', '.join(keys)}", f"unknown key(s) {', '.join(unknown)}")
    missing = [k for k in required if k not in d]
    if missing:
        raise LocalDataError(source, what, f"the keys {', '.join(required)}", f"{', '.join(missing)} missing")
    return d


# ---------------------------------------------------------------------------------------------------------------
# Preprocessing and the data contract.


def _floats(value: object, source: str, name: str) -> tuple[float, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise LocalDataError(source, name, "a list of numbers", _short(value))
    if not all(_is_number(v) and math.isfinite(v) for v in value):
        raise LocalDataError(source, name, "a list of finite numbers", _short(list(value)))
    return tuple(float(v) for v in value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Preprocessing:
    """What every member applies to its raw stored inputs (part of the genesis' :class:`DataContract`)::

        x = float32(raw) · scale                    then, if mean/std are given,
        x[:, c] = (x[:, c] − mean[c]) / std[c]      per channel c (dim 1 of (N, C, H, W) or of (N, D)),
                                                    or with one value for every element

    in float32 throughout (the scale, means and deviations as float32 too), so two members with the same raw
    values get the same bits. MNIST-style pixels: ``scale=1/255``; mimic spec §4's CIFAR-10: ``scale=1/255,
    mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616)``.
    """

    scale: float = 1.0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        what = "Preprocessing"
        if not (_is_number(self.scale) and math.isfinite(self.scale) and self.scale != 0):
            raise LocalDataError(what, "scale", "a finite non-zero number", _short(self.scale))
        mean = _floats(self.mean, what, "mean")
        std = _floats(self.std, what, "std")
        if len(mean) != len(std):
            raise LocalDataError(what, "std", f"{len(mean)} values (as many as mean)", f"{len(std)}")
        if any(s <= 0 for s in std):
            raise LocalDataError(what, "std", "values > 0", _short(list(std)))
        object.__setattr__(self, "scale", float(self.scale))
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    @property
    def identity(self) -> bool:
        """True when :meth:`apply` only casts to float32."""
        return self.scale == 1.0 and not self.mean

    def apply(self, raw: torch.Tensor) -> torch.Tensor:
        """The preprocessed float32 copy of ``raw`` ``(N, ...)`` (``raw`` is left alone)."""
        x = raw.to(torch.float32, copy=True)
        if self.scale != 1.0:
            x.mul_(torch.tensor(self.scale, dtype=torch.float32))
        if self.mean:
            k = len(self.mean)
            shape: tuple[int, ...] = ()
            if k > 1:
                if x.dim() < 2 or x.shape[1] != k:
                    raise LocalDataError(
                        "Preprocessing", "mean", f"{k} channels in dim 1 of the input", f"shape {tuple(x.shape)}"
                    )
                shape = (1, k) + (1,) * (x.dim() - 2)
            mean = torch.tensor(self.mean, dtype=torch.float32)
            std = torch.tensor(self.std, dtype=torch.float32)
            x.sub_(mean.view(shape) if shape else mean[0]).div_(std.view(shape) if shape else std[0])
        return x

    def to_params(self) -> dict[str, Any]:
        """``{"scale": float, "mean": [float], "std": [float]}``, every key always."""
        return {"scale": self.scale, "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_params(cls, d: Mapping[str, Any], source: str) -> Preprocessing:
        """The inverse of :meth:`to_params`, strict: every key, no other, numbers only."""
        d = _strict_keys(d, ("scale", "mean", "std"), ("scale", "mean", "std"), source, "preprocessing")
        if not _is_number(d["scale"]):
            raise LocalDataError(source, "preprocessing.scale", "a number", _short(d["scale"]))
        try:
            return cls(scale=d["scale"], mean=d["mean"], std=d["std"])
        except LocalDataError as e:
            raise LocalDataError(source, f"preprocessing.{e.field}", e.expected, e.found) from None


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdecimal()


@dataclass(frozen=True, slots=True, kw_only=True)
class DataContract:
    """What the genesis fixes for every member's data (``protocol.params["data"]``).

    Attributes
    ----------
    shape:
        One sample's model input shape: ``(64,)``, ``(1, 28, 28)``, ``(3, 32, 32)``, ``(80,)`` (token ids).
    classes:
        The number of classes; every label is in ``[0, classes)``.
    dtype:
        ``"float32"`` (features, after :attr:`preprocessing`) or ``"int64"`` (token ids: no preprocessing).
    preprocessing:
        Applied to the raw stored values (:class:`Preprocessing`); mean/std have 1 or ``shape[0]`` values.
    label_names:
        Optional, ``classes`` names: a textual label (a csv cell, an image folder's directory, an hf-disk string
        or ``ClassLabel``) is the index of its name here. A decimal label is a class index, so a name that is a
        decimal number must be its own index (``("0", "1")`` is fine, ``("1", "0")`` refused).
    """

    shape: tuple[int, ...]
    classes: int
    dtype: str
    preprocessing: Preprocessing = Preprocessing()
    label_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        what = "DataContract"
        shape = self.shape
        if isinstance(shape, str | bytes) or not isinstance(shape, Sequence) or not shape:
            raise LocalDataError(what, "shape", "a non-empty list of positive ints", _short(shape))
        if not all(_is_int(s) and s > 0 for s in shape):
            raise LocalDataError(what, "shape", "a non-empty list of positive ints", _short(list(shape)))
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) > _SAMPLE_ELEMENTS_MAX:
            raise LocalDataError(what, "shape", f"at most {_SAMPLE_ELEMENTS_MAX:,} elements a sample",
                                 f"{shape} ({math.prod(shape):,})")
        if not (_is_int(self.classes) and 1 <= self.classes <= _CLASSES_MAX):
            raise LocalDataError(what, "classes", f"an int in [1, {_CLASSES_MAX:,}]", _short(self.classes))
        if self.dtype not in _DTYPES:
            raise LocalDataError(what, "dtype", " or ".join(repr(d) for d in _DTYPES), _short(self.dtype))
        pre = self.preprocessing
        if not isinstance(pre, Preprocessing):
            raise LocalDataError(what, "preprocessing", "a Preprocessing", type(pre).__name__)
        if self.dtype == "int64" and not pre.identity:
            raise LocalDataError(what, "preprocessing", "none for int64 token ids (scale 1, no mean/std)",
                                 _short(pre.to_params()))
        if len(pre.mean) not in (0, 1, shape[0]):
            raise LocalDataError(what, "preprocessing.mean", f"1 or {shape[0]} values (shape[0] channels)",
                                 f"{len(pre.mean)}")
        names = self.label_names
        if isinstance(names, str | bytes) or not isinstance(names, Sequence):
            raise LocalDataError(what, "label_names", "a list of strings", _short(names))
        names = tuple(names)
        if names:
            if not all(isinstance(n, str) and n for n in names):
                raise LocalDataError(what, "label_names", "non-empty strings", _short(list(names)))
            if len(names) != self.classes:
                raise LocalDataError(what, "label_names", f"{self.classes} names (one per class)", f"{len(names)}")
            if len(set(names)) != len(names):
                raise LocalDataError(what, "label_names", "distinct names", _short(list(names)))
            for i, n in enumerate(names):
                if _decimal(n) and int(n) != i:
                    raise LocalDataError(what, f"label_names[{i}]", f"a non-decimal name or {i!r}", repr(n))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "classes", int(self.classes))
        object.__setattr__(self, "label_names", names)

    def to_params(self) -> dict[str, Any]:
        """The canonical plain dict (ints, strings, floats, lists, one nested dict), every key always."""
        return {
            "shape": list(self.shape),
            "classes": self.classes,
            "dtype": self.dtype,
            "preprocessing": self.preprocessing.to_params(),
            "label_names": list(self.label_names),
        }

    @classmethod
    def from_params(cls, d: Mapping[str, Any], source: str) -> DataContract:
        """The inverse of :meth:`to_params`, strict: every key, no other, each of its type; ``source`` (e.g.
        ``"genesis.toml: protocol.params.data"``) is named in the one-line refusal."""
        keys = ("shape", "classes", "dtype", "preprocessing", "label_names")
        d = _strict_keys(d, keys, keys, source, "data")
        for key, ok, expected in (
            ("shape", isinstance(d["shape"], list | tuple), "a list of positive ints"),
            ("classes", _is_int(d["classes"]), "a positive int"),
            ("dtype", isinstance(d["dtype"], str), " or ".join(repr(t) for t in _DTYPES)),
            ("label_names", isinstance(d["label_names"], list | tuple), "a list of strings"),
        ):
            if not ok:
                raise LocalDataError(source, key, expected, _short(d[key]))
        pre = Preprocessing.from_params(d["preprocessing"], source)
        try:
            return cls(shape=tuple(d["shape"]), classes=d["classes"], dtype=d["dtype"], preprocessing=pre,
                       label_names=tuple(d["label_names"]))
        except LocalDataError as e:
            raise e.at(source) from None

    @classmethod
    def of(
        cls, dataset: Dataset, preprocessing: Preprocessing = Preprocessing(), label_names: Sequence[str] = ()
    ) -> DataContract:
        """The contract ``dataset`` (as loaded: already preprocessed) fits: its sample shape, classes and dtype."""
        if dataset.x.dtype == torch.float32:
            dtype = "float32"
        elif dataset.x.dtype == torch.int64:
            dtype = "int64"
        else:
            raise LocalDataError(dataset.name or "dataset", "dtype", "float32 or int64 features", str(dataset.x.dtype))
        return cls(shape=tuple(dataset.x.shape[1:]), classes=dataset.num_classes, dtype=dtype,
                   preprocessing=preprocessing, label_names=tuple(label_names))

    def check(self, dataset: Dataset, source: str) -> None:
        """Refuse ``dataset`` (read from ``source``) unless it fits: sample shape, dtype, number of classes, labels
        in range, finite features."""
        found_shape = tuple(dataset.x.shape[1:])
        if found_shape != self.shape:
            raise LocalDataError(source, "shape", f"{self.shape} a sample", f"{found_shape}")
        found_dtype = str(dataset.x.dtype).removeprefix("torch.")
        if found_dtype != self.dtype:
            raise LocalDataError(source, "dtype", self.dtype, found_dtype)
        if dataset.num_classes != self.classes:
            raise LocalDataError(source, "classes", f"{self.classes}", f"{dataset.num_classes}")
        y = dataset.y
        if y.numel():
            bad = ((y < 0) | (y >= self.classes)).nonzero()
            if bad.numel():
                i = int(bad[0, 0])
                raise LocalDataError(source, "label", f"a class in [0, {self.classes})", f"{int(y[i])} (sample {i})")
        if dataset.x.is_floating_point() and dataset.x.numel():
            finite = torch.isfinite(dataset.x.reshape(len(dataset), -1)).all(dim=1)
            if not bool(finite.all()):
                i = int((~finite).nonzero()[0, 0])
                row = dataset.x[i].reshape(-1)
                value = float(row[~torch.isfinite(row)][0])
                raise LocalDataError(source, "x", "finite values", f"{value} (sample {i})")


# ---------------------------------------------------------------------------------------------------------------
# A node's data table.


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalData:
    """A member's own data: ``node.toml``'s ``[data]`` table, or ``--data-path`` / ``--data-format``.

    Attributes
    ----------
    path:
        The file or directory (relative paths are taken as given: the config layer resolves them).
    format:
        One of :data:`LOCAL_FORMATS`.
    label:
        The label key or column: npz key (default ``"y"``), csv column (default ``"label"``; without a header, a
        column index, default the last), hf-disk column (default ``"label"``). Other formats take none.
    features:
        npz key (default ``"x"``); hf-disk column (default ``"image"`` if there is one, else ``"x"``, else every
        other numeric column). Other formats take none.
    validation:
        A fraction in ``[0, 1)`` of the file held out (a permutation drawn from ``np.random.default_rng(seed)``),
        or the path of a validation file or directory in the same format.
    seed:
        Seed of the validation draw.
    """

    path: str
    format: str
    label: str = ""
    features: str = ""
    validation: float | str = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        what = "LocalData"
        if isinstance(self.path, os.PathLike):
            object.__setattr__(self, "path", os.fspath(self.path))
        if not isinstance(self.path, str) or not self.path:
            raise LocalDataError(what, "path", "a file or directory path", _short(self.path))
        if self.format not in LOCAL_FORMATS:
            raise LocalDataError(what, "format", f"one of {', '.join(LOCAL_FORMATS)}", _short(self.format))
        for key, formats in (("label", _LABEL_FORMATS), ("features", _FEATURE_FORMATS)):
            value = getattr(self, key)
            if not isinstance(value, str):
                raise LocalDataError(what, key, "a string", _short(value))
            if value and self.format not in formats:
                raise LocalDataError(what, key, f"none for format {self.format!r} (only {', '.join(formats)})",
                                     repr(value))
        v = self.validation
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if isinstance(v, str):
            if not v:
                raise LocalDataError(what, "validation", "a fraction in [0, 1) or a path", "an empty string")
        elif not (_is_number(v) and 0.0 <= v < 1.0):
            raise LocalDataError(what, "validation", "a fraction in [0, 1) or a path", _short(v))
        else:
            v = float(v)
        object.__setattr__(self, "validation", v)
        if not (_is_int(self.seed) and self.seed >= 0):
            raise LocalDataError(what, "seed", "a non-negative int", _short(self.seed))

    def to_params(self) -> dict[str, Any]:
        """Every field, as a TOML table."""
        return {"path": self.path, "format": self.format, "label": self.label, "features": self.features,
                "validation": self.validation, "seed": self.seed}

    @classmethod
    def from_params(cls, d: Mapping[str, Any], source: str) -> LocalData:
        """From a TOML table: ``path`` and ``format`` required, the rest optional, unknown keys refused."""
        keys = ("path", "format", "label", "features", "validation", "seed")
        d = _strict_keys(d, keys, ("path", "format"), source, "data")
        try:
            return cls(**{k: d[k] for k in keys if k in d})
        except LocalDataError as e:
            raise e.at(source) from None


# ---------------------------------------------------------------------------------------------------------------
# Reading.


@dataclass(slots=True)
class _Raw:
    """What a reader found: raw stored values ``x (N, ...)`` and labels (int64, or ints and strings)."""

    x: np.ndarray
    y: np.ndarray | list[int | str]
    source: str
    groups: np.ndarray | None = None
    group_names: tuple[str, ...] = ()
    text: bool = False  # LEAF character ids: int64 without a contract


def _check_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise LocalDataError(str(path), "path", f"a file ({what})", "nothing" if not path.exists() else "a directory")
    size = path.stat().st_size
    if size > _FILE_BYTES_MAX:
        raise LocalDataError(str(path), "size", f"at most {_FILE_BYTES_MAX:,} bytes", f"{size:,}")


def _check_dir(path: Path, what: str) -> None:
    if not path.is_dir():
        raise LocalDataError(str(path), "path", f"a directory ({what})", "nothing" if not path.exists() else "a file")


def _check_counts(source: str, n: int, sample_shape: Sequence[int]) -> None:
    if n == 0:
        raise LocalDataError(source, "samples", "at least 1", "0")
    if n > _SAMPLES_MAX:
        raise LocalDataError(source, "samples", f"at most {_SAMPLES_MAX:,}", f"{n:,}")
    elements = math.prod(sample_shape)
    if elements > _SAMPLE_ELEMENTS_MAX:
        raise LocalDataError(source, "shape", f"at most {_SAMPLE_ELEMENTS_MAX:,} elements a sample",
                             f"{tuple(sample_shape)} ({elements:,})")


def _read_capped(path: Path) -> bytes:
    """The bytes of ``path`` (gunzipped if it ends in ``.gz``), refused above the 4 GiB bound."""
    _check_file(path, "data")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                data = fh.read(_FILE_BYTES_MAX + 1)
        else:
            data = path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise LocalDataError(str(path), "bytes", "a readable file", _line(exc)) from None
    if len(data) > _FILE_BYTES_MAX:
        raise LocalDataError(str(path), "size", f"at most {_FILE_BYTES_MAX:,} bytes uncompressed", "more")
    return data


def _numeric(array: np.ndarray, source: str, key: str) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise LocalDataError(source, key, "a numeric array (bool, int, uint or float)", f"dtype {array.dtype}")
    return array


# -- npz


def _npz_member(zf: zipfile.ZipFile, key: str, path: Path) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of ``key`` from its ``.npy`` header, before any data (or pickle) is read."""
    try:
        info = zf.getinfo(f"{key}.npy")
    except KeyError:
        keys = sorted(n.removesuffix(".npy") for n in zf.namelist())
        raise LocalDataError(str(path), f"key {key!r}", "an array of that name", f"keys {keys}") from None
    if info.file_size > _FILE_BYTES_MAX:
        raise LocalDataError(str(path), f"key {key!r}", f"at most {_FILE_BYTES_MAX:,} bytes", f"{info.file_size:,}")
    with zf.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
        except ValueError as exc:
            raise LocalDataError(str(path), f"key {key!r}", "a .npy array", _line(exc)) from None
    if dtype.hasobject:
        raise LocalDataError(str(path), f"key {key!r}", "a numeric array (pickled objects are never loaded)",
                             f"dtype {dtype}")
    return tuple(shape), dtype


def _read_npz(path: Path, spec: LocalData) -> _Raw:
    _check_file(path, "npz")
    xkey, ykey = spec.features or "x", spec.label or "y"
    try:
        with zipfile.ZipFile(path) as zf:
            xshape, _ = _npz_member(zf, xkey, path)
            yshape, _ = _npz_member(zf, ykey, path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise LocalDataError(str(path), "bytes", "an npz (zip) file", _line(exc)) from None
    if len(xshape) < 1:
        raise LocalDataError(str(path), f"key {xkey!r}", "an array (N, ...)", f"shape {xshape}")
    _check_counts(str(path), xshape[0], xshape[1:])
    if len(yshape) != 1 or yshape[0] != xshape[0]:
        raise LocalDataError(str(path), f"key {ykey!r}", f"labels of shape ({xshape[0]},)", f"shape {yshape}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            x, y = npz[xkey], npz[ykey]
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise LocalDataError(str(path), "bytes", "a readable npz file", _line(exc)) from None
    x = _numeric(x, str(path), f"key {xkey!r}")
    if y.dtype.kind in "US":
        labels: np.ndarray | list[int | str] = [str(v) for v in y.astype(str).tolist()]
    else:
        labels = _integral_labels(_numeric(y, str(path), f"key {ykey!r}"), str(path), f"key {ykey!r}")
    return _Raw(x=x, y=labels, source=str(path))


def _integral_labels(y: np.ndarray, source: str, key: str) -> np.ndarray:
    if y.dtype.kind == "f":
        bad = ~(np.isfinite(y) & (y == np.round(y)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise LocalDataError(source, key, "integer class labels", f"{y[i]!r} (sample {i})")
    return y.astype(np.int64)


# -- csv


def _csv_label(cell: str) -> int | str:
    """A label cell: an integer (``3``, ``3.0``) or, failing that, the text (a name of ``label_names``)."""
    text = cell.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    if math.isfinite(value) and value == int(value):
        return int(value)
    return text


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_csv(path: Path, spec: LocalData) -> _Raw:
    _check_file(path, "csv")
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise LocalDataError(source, "bytes", "a UTF-8 csv file", _line(exc)) from None
    rows = [(i + 1, row) for i, row in enumerate(csv.reader(io.StringIO(text, newline=""))) if row]
    if not rows:
        raise LocalDataError(source, "samples", "at least 1", "0")
    header = None
    if not any(_is_float(cell) for cell in rows[0][1]):
        header = [cell.strip() for cell in rows[0][1]]
        rows = rows[1:]
        if not rows:
            raise LocalDataError(source, "samples", "at least 1 row below the header", "0")
    width = len(header) if header is not None else len(rows[0][1])
    if header is not None:
        name = spec.label or "label"
        if name not in header:
            raise LocalDataError(source, "label", f"a column named {name!r} (set label= to another)",
                                 f"columns {_short(header)}")
        col = header.index(name)
    elif not spec.label:
        col = width - 1
    elif _decimal(spec.label) and int(spec.label) < width:
        col = int(spec.label)
    else:
        raise LocalDataError(source, "label", f"a column index below {width} (the csv has no header)",
                             repr(spec.label))
    if width < 2:
        raise LocalDataError(source, "columns", "at least 2 (features and a label)", f"{width}")
    names = header or [f"column {j}" for j in range(width)]
    features = [j for j in range(width) if j != col]
    _check_counts(source, len(rows), (len(features),))
    x = np.empty((len(rows), len(features)), dtype=np.float64)
    labels: list[int | str] = []
    for r, (line, row) in enumerate(rows):
        if len(row) != width:
            raise LocalDataError(source, f"row {line}", f"{width} fields", f"{len(row)}")
        labels.append(_csv_label(row[col]))
        try:
            x[r] = [float(row[j]) for j in features]
        except ValueError:
            x[r] = np.nan  # the cell is found below
        if not np.isfinite(x[r]).all():
            for j in features:
                if not (_is_float(row[j]) and math.isfinite(float(row[j]))):
                    raise LocalDataError(source, f"row {line} column {names[j]!r}", "a finite number",
                                         _short(row[j]))
    return _Raw(x=x, y=labels, source=source)


# -- imagefolder


_GREY_MODES = ("1", "L", "I;16", "I;16B", "I;16L", "I")


def _pil_array(im: Any, where: str) -> np.ndarray:
    """A Pillow image as ``(C, H, W)``: grey (modes 1, L, I;16, I) → C = 1, RGB (and palette) → C = 3."""
    if im.mode not in (*_GREY_MODES, "RGB", "P"):
        raise LocalDataError(where, "mode", "a grey or RGB image", repr(im.mode))
    w, h = im.size
    _check_counts(where, 1, (1 if im.mode in _GREY_MODES else 3, h, w))
    if im.mode in ("1", "P"):
        im = im.convert("L" if im.mode == "1" else "RGB")
    array = np.asarray(im)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def _image_array(path: Path) -> np.ndarray:
    """One image file (PNG, JPEG, BMP, PGM) as ``(C, H, W)``."""
    from PIL import Image, UnidentifiedImageError  # noqa: PLC0415 - Pillow (a core dependency), loaded on use

    _check_file(path, "image")
    try:
        with Image.open(path, formats=("PNG", "JPEG", "BMP", "PPM")) as im:
            return _pil_array(im, str(path))
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError, ValueError) as exc:
        raise LocalDataError(str(path), "bytes", "a PNG, JPEG, BMP or PGM image", _line(exc)) from None


def _read_imagefolder(root: Path, spec: LocalData) -> _Raw:
    _check_dir(root, "imagefolder")
    files: list[tuple[str, Path]] = []
    for class_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files.extend(
            (class_dir.name, p)
            for p in sorted(class_dir.iterdir())
            if p.suffix.lower() in _IMAGE_SUFFIXES and not p.name.startswith(".") and p.is_file()
        )
        if len(files) > _SAMPLES_MAX:
            raise LocalDataError(str(root), "samples", f"at most {_SAMPLES_MAX:,}", f"more than {_SAMPLES_MAX:,}")
    if not files:
        raise LocalDataError(str(root), "images", f"<class>/*{'|'.join(_IMAGE_SUFFIXES)} files", "none")
    first = _image_array(files[0][1])
    x = np.empty((len(files), *first.shape), dtype=first.dtype)
    x[0] = first
    for i, (_, path) in enumerate(files[1:], start=1):
        image = _image_array(path)
        if image.shape != first.shape or image.dtype != first.dtype:
            raise LocalDataError(str(path), "image", f"{first.shape} {first.dtype} (C, H, W) as {files[0][1].name}",
                                 f"{image.shape} {image.dtype}")
        x[i] = image
    labels: list[int | str] = [int(name) if _decimal(name) else name for name, _ in files]
    return _Raw(x=x, y=labels, source=str(root))


# -- idx


def _pick(root: Path, kind: str) -> Path:
    found = sorted(p for p in root.iterdir() if p.is_file() and kind in p.name and "idx" in p.name)
    if len(found) > 1:
        found = [p for p in found if "train" in p.name]
    if len(found) != 1:
        raise LocalDataError(str(root), f"{kind} file", f"one *{kind}*idx*[.gz] file (or one with 'train' in its name)",
                             f"{len(found)}" if found else "none")
    return found[0]


def _read_idx(root: Path, spec: LocalData) -> _Raw:
    _check_dir(root, "idx")
    images_path, labels_path = _pick(root, "images"), _pick(root, "labels")
    try:
        images = decode_idx(_read_capped(images_path), source=str(images_path))
        labels = decode_idx(_read_capped(labels_path), source=str(labels_path))
    except LocalDataError:
        raise
    except DataError as exc:
        raise LocalDataError(str(exc)) from None
    if images.ndim < 2:
        raise LocalDataError(str(images_path), "shape", "(N, ...) samples", f"{images.shape}")
    _check_counts(str(images_path), images.shape[0], images.shape[1:])
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise LocalDataError(str(labels_path), "shape", f"({images.shape[0]},) labels", f"{labels.shape}")
    labels = _integral_labels(_numeric(labels, str(labels_path), "labels"), str(labels_path), "labels")
    if images_path.name.startswith("emnist-") and images.ndim == 3:  # as EMNISTSpec: back to MNIST's orientation
        images = images.transpose(0, 2, 1)
    if images_path.name.startswith("emnist-letters-"):
        labels = labels - 1  # 1..26 → 0..25, as EMNISTSpec
    if images.ndim == 3:
        images = images[:, None]
    return _Raw(x=images, y=labels, source=str(images_path))


# -- cifar10


def _read_cifar10(path: Path, spec: LocalData) -> _Raw:
    if path.is_file():
        files = [path]
    else:
        _check_dir(path, "cifar10")
        nested = path / "cifar-10-batches-bin"
        directory = nested if nested.is_dir() else path

        def number(p: Path) -> tuple[int, str]:
            tail = p.stem.removeprefix("data_batch_")
            return (int(tail) if _decimal(tail) else 1 << 30, p.name)

        files = sorted(directory.glob("data_batch_*.bin"), key=number)
        if not files:
            raise LocalDataError(str(directory), "batches", "data_batch_*.bin files (CIFAR-10 binary version)",
                                 "none")
    images, labels = [], []
    for f in files:
        _check_file(f, "CIFAR-10 binary")
        try:
            x, y = read_cifar10_binary(f)
        except DataError as exc:
            raise LocalDataError(str(exc)) from None
        images.append(x)
        labels.append(y)
    n = sum(len(y) for y in labels)
    _check_counts(str(path), n, (3, 32, 32))
    return _Raw(x=np.concatenate(images), y=np.concatenate(labels), source=str(path))


# -- leaf


class _OneFile:
    """Stands in for a directory holding only ``path``, so ``_read_leaf_dir`` reads a single LEAF file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def glob(self, pattern: str) -> list[Path]:
        return [self.path]

    def __str__(self) -> str:
        return str(self.path)


def _read_leaf(path: Path, spec: LocalData, contract: DataContract | None) -> _Raw:
    if path.is_file():
        _check_file(path, "LEAF JSON")
        where: Path = cast(Path, _OneFile(path))
    else:
        _check_dir(path, "LEAF JSON")
        for f in sorted(path.glob("*.json")):
            _check_file(f, "LEAF JSON")
        where = path
    try:
        records = _read_leaf_dir(where, str(path))
    except DataError as exc:
        raise LocalDataError(str(exc)) from None
    first = next((x[0] for _, x, _, _ in records if x), None)
    xs, ys, groups, names = [], [], [], {}
    text = isinstance(first, str)
    encoder = _ShakespeareEncoder()
    for user, x, y, file in records:
        if not y:
            continue
        try:
            if text:
                ex, ey = encoder(x, y, path=file, user=user)
            elif any(isinstance(v, list) and v and isinstance(v[-1], str) for v in x[:1]):
                raise LocalDataError(str(file), f"user {user!r} x", "character strings or lists of numbers",
                                     "tweets (Sent140 needs one vocabulary for every member: store word ids)")
            else:
                try:
                    ex = np.asarray(x, dtype=np.float64)
                except (TypeError, ValueError):
                    raise LocalDataError(str(file), f"user {user!r} x", "lists of numbers of one length",
                                         _short(x[:1])) from None
                if ex.ndim < 2:
                    raise LocalDataError(str(file), f"user {user!r} x", "one list of numbers a sample",
                                         f"shape {ex.shape}")
                ey = _int_labels(y, path=file, user=user)
        except LocalDataError:
            raise
        except DataError as exc:
            raise LocalDataError(str(exc)) from None
        names.setdefault(user, len(names))
        xs.append(ex)
        ys.append(ey)
        groups.append(np.full(len(ey), names[user], dtype=np.int64))
    if not ys:
        raise LocalDataError(str(path), "samples", "at least 1", "0")
    shapes = {e.shape[1:] for e in xs}
    if len(shapes) != 1:
        raise LocalDataError(str(path), "x", "samples of one shape", f"shapes {sorted(shapes)}")
    x_all = np.concatenate(xs)
    _check_counts(str(path), len(x_all), x_all.shape[1:])
    return _Raw(x=x_all, y=np.concatenate(ys), source=str(path), groups=np.concatenate(groups),
                group_names=tuple(names), text=text)


# -- hf-disk


def _hf_numpy(ds: Any, column: str, source: str) -> np.ndarray:
    """A column of numbers, or of (nested) equal-length lists of numbers, as numpy in its stored dtype (datasets'
    numpy format would make floats float32 unless told the dtype)."""
    feature = ds.features[column]
    while hasattr(feature, "feature"):  # List / Sequence / LargeList → their items
        feature = feature.feature
    stored = getattr(feature, "dtype", None)
    kinds = ("bool", "int", "uint", "float")
    if not (isinstance(stored, str) and stored.startswith(kinds)):
        raise LocalDataError(source, f"column {column!r}", "numbers, lists of numbers or images", repr(ds.features[column]))
    try:
        array = ds.with_format("numpy", columns=[column], dtype=np.dtype(stored))[:][column]
    except (TypeError, ValueError) as exc:
        raise LocalDataError(source, f"column {column!r}", "lists of one length", _line(exc)) from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise LocalDataError(source, f"column {column!r}", "lists of one length, no missing values",
                             "ragged or missing values")
    return array


def _read_hf(path: Path, spec: LocalData, contract: DataContract | None) -> _Raw:
    try:
        import datasets  # noqa: PLC0415 - optional: pip install 'concilium[hf]'
    except ImportError:
        raise LocalDataError(str(path), "format", "the 'datasets' package for hf-disk",
                             "it is not installed (pip install 'concilium[hf]')") from None
    _check_dir(path, "hf-disk, written by datasets' save_to_disk")
    source = str(path)
    try:
        ds = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError, FileNotFoundError) as exc:
        raise LocalDataError(source, "bytes", "a directory written by datasets' save_to_disk", _line(exc)) from None
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise LocalDataError(source, "split", "a 'train' split in the DatasetDict", f"splits {sorted(ds)}")
        ds = ds["train"]
    columns = list(ds.column_names)
    label = spec.label or "label"
    if label not in columns:
        raise LocalDataError(source, "label", f"a column named {label!r}", f"columns {_short(columns)}")
    if spec.features:
        if spec.features not in columns:
            raise LocalDataError(source, "features", f"a column named {spec.features!r}", f"columns {_short(columns)}")
        feature_columns = [spec.features]
    elif "image" in columns and "image" != label:
        feature_columns = ["image"]
    elif "x" in columns and "x" != label:
        feature_columns = ["x"]
    else:
        feature_columns = [
            c for c in columns
            if c != label and isinstance(ds.features[c], datasets.Value)
            and ds.features[c].dtype.startswith(("int", "uint", "float", "bool"))
        ]
        if not feature_columns:
            raise LocalDataError(source, "features", "an 'image' or 'x' column, or numeric columns",
                                 f"columns {_short(columns)}")
    n = ds.num_rows
    if n > _SAMPLES_MAX or n == 0:
        _check_counts(source, n, ())
    if len(feature_columns) == 1 and isinstance(ds.features[feature_columns[0]], datasets.Image):
        images = []
        column = feature_columns[0]
        for start in range(0, n, 1024):
            for k, im in enumerate(ds[start : start + 1024][column]):
                array = _pil_array(im, f"{source} row {start + k}")
                if images and array.shape != images[0].shape:
                    raise LocalDataError(source, f"row {start + k} column {column!r}",
                                         f"{images[0].shape} (C, H, W) as row 0", f"{array.shape}")
                images.append(array)
        x = np.stack(images)
    else:
        parts = [_hf_numpy(ds, c, source) for c in feature_columns]
        x = parts[0] if len(parts) == 1 else np.stack([p.astype(np.float64) for p in parts], axis=1)
    _check_counts(source, n, x.shape[1:])
    feature = ds.features[label]
    labels: np.ndarray | list[int | str]
    if isinstance(feature, datasets.ClassLabel):
        ints = _hf_numpy(ds, label, source).astype(np.int64)
        if contract is not None and contract.label_names:
            labels = [_csv_label(feature.names[i]) if 0 <= i < len(feature.names) else i for i in ints.tolist()]
        else:
            labels = ints
    elif isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string"):
        labels = [_csv_label(v) if v is not None else "" for v in ds[:][label]]
    else:
        labels = _integral_labels(_hf_numpy(ds, label, source), source, f"column {label!r}")
    return _Raw(x=x, y=labels, source=source)


# -- from raw values to a checked dataset


def _read(path: Path, spec: LocalData, contract: DataContract | None) -> _Raw:
    try:
        return _read_format(path, spec, contract)
    except OSError as exc:  # a directory or file that cannot be listed or read (permissions, I/O)
        raise LocalDataError(str(path), "bytes", f"a readable {spec.format} file or directory", _line(exc)) from None


def _read_format(path: Path, spec: LocalData, contract: DataContract | None) -> _Raw:
    match spec.format:
        case "npz":
            return _read_npz(path, spec)
        case "csv":
            return _read_csv(path, spec)
        case "imagefolder":
            return _read_imagefolder(path, spec)
        case "idx":
            return _read_idx(path, spec)
        case "cifar10":
            return _read_cifar10(path, spec)
        case "leaf":
            return _read_leaf(path, spec, contract)
        case "hf-disk":
            return _read_hf(path, spec, contract)
    raise LocalDataError("LocalData", "format", f"one of {', '.join(LOCAL_FORMATS)}", repr(spec.format))


def _writable(array: np.ndarray) -> np.ndarray:
    """``array``, copied if read-only (``np.frombuffer``), since torch shares the memory of what it is given."""
    return array if array.flags.writeable else array.copy()


def _label_ids(labels: np.ndarray | list[int | str], names: tuple[str, ...], source: str) -> np.ndarray:
    if isinstance(labels, np.ndarray):
        return _writable(labels.astype(np.int64, copy=False))
    index = {n: i for i, n in enumerate(names)}
    out = np.empty(len(labels), dtype=np.int64)
    for i, v in enumerate(labels):
        if isinstance(v, str):
            if v not in index:
                expected = f"one of label_names {_short(list(names))}" if names else (
                    "an integer class (textual labels need label_names in the data contract)")
                raise LocalDataError(source, "label", expected, f"{v!r} (sample {i})")
            out[i] = index[v]
        elif not 0 <= v < _CLASSES_MAX:
            raise LocalDataError(source, "label", f"a class in [0, {_CLASSES_MAX:,})", f"{v} (sample {i})")
        else:
            out[i] = v
    return out


def _fits(found: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    """Whether samples of shape ``found`` may be reshaped to ``wanted`` without reordering anything meaningful:
    same element count, and one side flat or both the same up to unit dimensions."""
    if math.prod(found) != math.prod(wanted):
        return False
    squeeze = lambda s: tuple(d for d in s if d != 1)  # noqa: E731
    return len(found) == 1 or len(wanted) == 1 or squeeze(found) == squeeze(wanted)


def _dataset(raw: _Raw, contract: DataContract | None, name: str) -> Dataset:
    source = raw.source
    y = _label_ids(raw.y, contract.label_names if contract else (), source)
    x = raw.x
    if contract is not None:
        if x.shape[1:] != contract.shape and _fits(x.shape[1:], contract.shape):
            x = x.reshape(len(x), *contract.shape)
        bad = np.flatnonzero((y < 0) | (y >= contract.classes))
        if bad.size:
            i = int(bad[0])
            raise LocalDataError(source, "label", f"a class in [0, {contract.classes})", f"{int(y[i])} (sample {i})")
        classes = contract.classes
    else:
        bad = np.flatnonzero((y < 0) | (y >= _CLASSES_MAX))
        if bad.size:
            i = int(bad[0])
            raise LocalDataError(source, "label", f"a class in [0, {_CLASSES_MAX:,})", f"{int(y[i])} (sample {i})")
        classes = int(y.max()) + 1
    if x.dtype.kind == "u" and x.dtype.itemsize > 1:  # torch has no uint16/32/64 arithmetic
        x = x.astype(np.int64) if x.dtype.itemsize < 8 else x.astype(np.float64)
    int64 = contract.dtype == "int64" if contract is not None else raw.text
    if int64:
        if x.dtype.kind == "f":
            bad_rows = ~(np.isfinite(x) & (x == np.round(x))).reshape(len(x), -1).all(axis=1)
            if bad_rows.any():
                i = int(np.flatnonzero(bad_rows)[0])
                raise LocalDataError(source, "x", "integer token ids (dtype int64)", f"other values (sample {i})")
        features = torch.from_numpy(x.astype(np.int64))
    else:
        pre = contract.preprocessing if contract is not None else Preprocessing()
        features = pre.apply(torch.from_numpy(_writable(np.ascontiguousarray(x))))
    try:
        dataset = Dataset(x=features, y=torch.from_numpy(y), num_classes=classes, groups=raw.groups,
                          group_names=raw.group_names, name=name)
    except DataError as exc:
        raise LocalDataError(source, "data", "a valid dataset", _line(exc)) from None
    if contract is not None:
        contract.check(dataset, source)
    return dataset


def load_local(
    spec: LocalData, contract: DataContract | None = None, *, name: str = ""
) -> tuple[Dataset, Dataset | None]:
    """Read a member's own data: ``(train, validation or None)``.

    The raw stored values are read (never with pickle), reshaped to ``contract.shape`` when only the layout of
    a flat row differs (a csv row of 784 values for ``(1, 28, 28)``), preprocessed as ``contract.preprocessing``
    says, given ``contract.classes`` classes (textual labels through ``contract.label_names``), then checked
    (:meth:`DataContract.check`). Without a contract: the file's own shape, ``max label + 1`` classes, float32
    without preprocessing (LEAF character ids stay int64).

    ``spec.validation``: a fraction drawn from the file (``split_random`` with ``np.random.default_rng(seed)``,
    each part in file order), or a path read the same way. The same files and spec give the same datasets.

    Raises
    ------
    LocalDataError
        One line naming the file, the field, what was expected and what was found.
    """
    if not isinstance(spec, LocalData):
        raise LocalDataError("load_local", "spec", "a LocalData", type(spec).__name__)
    label = name or Path(spec.path).name or spec.path
    train = _dataset(_read(Path(spec.path), spec, contract), contract, label)
    v = spec.validation
    if isinstance(v, str):
        validation = _dataset(_read(Path(v), spec, contract), contract, f"{label}-validation")
        return train, validation
    if v == 0.0:
        return train, None
    n = len(train)
    size = round(v * n)
    if not 0 < size < n:
        raise LocalDataError(spec.path, "validation", f"a fraction leaving samples on both sides of {n}",
                             f"{v} ({size} of {n})")
    validation, rest = split_random(train, size, rng=np.random.default_rng(spec.seed))
    return rest, replace(validation, name=f"{label}-validation")


# ---------------------------------------------------------------------------------------------------------------
# Writing.


def _bytes_pixels(x: np.ndarray) -> bool:
    """Whether every value is an integer in [0, 255] (and no −0.0, which uint8 would lose)."""
    if x.dtype == np.uint8 or x.dtype.kind == "b":
        return True
    if x.dtype.kind in "iu":
        return bool(x.size == 0 or (x.min() >= 0 and x.max() <= 255))
    return bool(x.size == 0 or (
        (x == np.floor(x)).all() and not np.signbit(x).any() and x.max() <= 255
    ))


def _raw_numpy(dataset: Dataset, what: str) -> np.ndarray:
    x = dataset.x.detach().cpu()
    if x.dtype == torch.bfloat16:
        x = x.float()
    array = x.numpy()
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise LocalDataError(what, "x", "finite values", "nan or inf")
    if array.dtype.kind not in "biuf":
        raise LocalDataError(what, "x", "numbers", f"dtype {array.dtype}")
    if len(array) == 0:
        raise LocalDataError(what, "samples", "at least 1", "0")
    return array


def _zip_entry(zf: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3
    info.external_attr = 0o644 << 16
    with zf.open(info, "w", force_zip64=True) as fh:
        np.lib.format.write_array(fh, np.ascontiguousarray(array), allow_pickle=False)


def _stored(x: np.ndarray) -> np.ndarray:
    """``x`` as npz and hf-disk store it: uint8 when every value is an integer in [0, 255], int64 for other integer
    arrays, else float32."""
    if _bytes_pixels(x):
        return x.astype(np.uint8)
    return x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float32)


def _write_npz(x: np.ndarray, y: np.ndarray, out: Path) -> list[Path]:
    stored = _stored(x)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:  # np.savez stamps the time: written by hand
        _zip_entry(zf, "x.npy", stored)
        _zip_entry(zf, "y.npy", y.astype(np.int64))
    return [out]


def _cell(v: int | float) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if v.is_integer() and not (v == 0 and math.copysign(1.0, v) < 0):
        return str(int(v))
    return repr(v)  # float64 shortest round trip; a float32 value is exact in float64


def _write_csv(x: np.ndarray, y: np.ndarray, out: Path) -> list[Path]:
    flat = x.reshape(len(x), -1)
    if flat.dtype.kind == "f":
        flat = flat.astype(np.float64)
    header = [f"f{j}" for j in range(flat.shape[1])] + ["label"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="\n") as fh:
        fh.write(",".join(header) + "\n")
        for row, label in zip(flat.tolist(), y.tolist(), strict=True):
            fh.write(",".join(map(_cell, row)) + f",{int(label)}\n")
    return [out]


def _fresh_dir(out: Path, what: str) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise LocalDataError(str(out), "out", f"a new or empty directory for {what}", "existing content")
    out.mkdir(parents=True, exist_ok=True)


def _write_imagefolder(x: np.ndarray, y: np.ndarray, out: Path, what: str) -> list[Path]:
    from PIL import Image  # noqa: PLC0415

    if not _bytes_pixels(x):
        raise LocalDataError(what, "x", "integer pixel values in [0, 255] for imagefolder", f"dtype {x.dtype} "
                             f"values in [{x.min()}, {x.max()}]")
    if x.ndim == 4 and x.shape[1] in (1, 3):
        pixels = x.astype(np.uint8).transpose(0, 2, 3, 1)
        if x.shape[1] == 1:
            pixels = pixels[..., 0]
    elif x.ndim == 3:
        pixels = x.astype(np.uint8)
    else:
        raise LocalDataError(what, "shape", "(N, 1, H, W), (N, 3, H, W) or (N, H, W) images", f"{x.shape}")
    _fresh_dir(out, "imagefolder")
    written = []
    for i, (image, label) in enumerate(zip(pixels, y.tolist(), strict=True)):
        directory = out / str(int(label))
        directory.mkdir(exist_ok=True)
        path = directory / f"{i:06d}.png"
        Image.fromarray(np.ascontiguousarray(image)).save(path, format="PNG")
        written.append(path)
    return sorted(written)


def _write_hf(x: np.ndarray, y: np.ndarray, out: Path, what: str) -> list[Path]:
    """``datasets``' ``save_to_disk`` of an ``x`` column (a fixed-length sequence for ``(N, K)``, an array feature
    of the sample's shape otherwise; uint8, int64 or float32 as for npz) and an int64 ``label`` column."""
    try:
        import datasets  # noqa: PLC0415 - optional: pip install 'concilium[hf]'
    except ImportError:
        raise LocalDataError(what, "format", "the 'datasets' package to write hf-disk",
                             "it is not installed (pip install 'concilium[hf]')") from None
    stored = _stored(x)
    shape = stored.shape[1:]
    if len(shape) == 1:
        feature: Any = datasets.Sequence(datasets.Value(str(stored.dtype)), length=shape[0])
    elif 2 <= len(shape) <= 5:
        feature = getattr(datasets, f"Array{len(shape)}D")(shape=shape, dtype=str(stored.dtype))
    else:
        raise LocalDataError(what, "shape", "samples of 1 to 5 dimensions for hf-disk", f"{shape}")
    _fresh_dir(out, "hf-disk")
    features = datasets.Features({"x": feature, "label": datasets.Value("int64")})
    # (its fingerprint is a hash of the data: the same dataset gives the same files)
    ds = datasets.Dataset.from_dict({"x": stored, "label": y.astype(np.int64)}, features=features)
    ds.save_to_disk(str(out))
    return sorted(p for p in out.rglob("*") if p.is_file())


def _idx_bytes(array: np.ndarray) -> bytes:
    codes = {np.dtype(np.uint8): (0x08, np.dtype(np.uint8)), np.dtype(np.int32): (0x0C, np.dtype(">i4")),
             np.dtype(np.float32): (0x0D, np.dtype(">f4"))}
    code, wire = codes[array.dtype]
    head = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return head + np.ascontiguousarray(array, dtype=wire).tobytes()


def _write_idx(x: np.ndarray, y: np.ndarray, out: Path) -> list[Path]:
    stored = x.astype(np.uint8) if _bytes_pixels(x) else x.astype(np.float32)
    if stored.ndim == 4 and stored.shape[1] == 1:
        stored = stored[:, 0]  # (N, 1, H, W) → (N, H, W), read back as (N, 1, H, W)
    if stored.ndim == 1:
        stored = stored[:, None]
    labels = y.astype(np.uint8) if y.size == 0 or y.max() < 256 else y.astype(np.int32)
    _fresh_dir(out, "idx")
    images_path = out / f"train-images-idx{stored.ndim}-ubyte"
    labels_path = out / "train-labels-idx1-ubyte"
    images_path.write_bytes(_idx_bytes(stored))
    labels_path.write_bytes(_idx_bytes(labels))
    return sorted([images_path, labels_path])


def write_local(dataset: Dataset, out: str | os.PathLike[str], format: str) -> list[Path]:
    """Write ``dataset`` (``x`` holds the *raw* values to store) as ``format``; return the files written, sorted.

    * ``npz``: the file ``out`` with ``x`` (uint8 when every value is an integer in [0, 255], int64 for other
      integer tensors, else float32) and ``y`` (int64); zip entries stamped 1980-01-01, uncompressed;
    * ``csv``: the file ``out``, header ``f0,...,fK,label``, one flattened sample a row, integral values as
      integers, others as the shortest float64 text that reads back the same bits;
    * ``imagefolder``: ``out/<label>/<index:06d>.png`` (grey for ``(N, 1, H, W)`` or ``(N, H, W)``, RGB for
      ``(N, 3, H, W)``), pixels integers in [0, 255];
    * ``idx``: ``out/train-images-idx<k>-ubyte`` (uint8 or float32) and ``out/train-labels-idx1-ubyte``;
    * ``hf-disk``: the directory ``out`` as ``datasets``' ``save_to_disk`` writes it, an ``x`` column (a fixed-length
      sequence, or an array of the sample's shape; uint8, int64 or float32 as for npz) and an int64 ``label``.

    The same dataset gives the same bytes. Directories must be new or empty (a stale file would join the data).
    :func:`load_local` reads back the same values (the same bits after the same preprocessing), csv rows flat
    (reshaped to the contract's shape), an image folder's samples in path order (class directory, then index).
    """
    what = dataset.name or "dataset"
    if format not in _WRITABLE_FORMATS:
        raise LocalDataError(what, "format", f"one of {', '.join(_WRITABLE_FORMATS)} to write", repr(format))
    x = _raw_numpy(dataset, what)
    y = dataset.labels
    path = Path(out)
    match format:
        case "npz":
            return _write_npz(x, y, path)
        case "csv":
            return _write_csv(x, y, path)
        case "imagefolder":
            return _write_imagefolder(x, y, path, what)
        case "hf-disk":
            return _write_hf(x, y, path, what)
        case _:
            return _write_idx(x, y, path)


# ---------------------------------------------------------------------------------------------------------------
# Digests.


def _walk(root: Path) -> Iterator[tuple[bytes, Path]]:
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for f in files:
            p = Path(top) / f
            yield p.relative_to(root).as_posix().encode("utf-8", "surrogateescape"), p


def dir_digest(path: str | os.PathLike[str]) -> bytes:
    """SHA-256 of a file or of every file under a directory, for manifests::

        H("concilium/dir-digest/v1\\0" ‖ for each file, sorted by relative path:
          len(rel) ‖ rel ‖ len(bytes) ‖ bytes)                      (lengths as 8-byte big-endian)

    with ``rel`` the POSIX path relative to ``path`` (empty for a file: its name is not part of the digest).
    Directory symlinks are not followed.
    """
    root = Path(path)
    if root.is_file():
        entries = [(b"", root)]
    elif root.is_dir():
        entries = sorted(_walk(root))
    else:
        raise LocalDataError(str(root), "path", "a file or directory", "nothing")
    h = hashlib.sha256(_DIGEST_DOMAIN)
    for rel, p in entries:
        size = p.stat().st_size
        h.update(len(rel).to_bytes(8, "big") + rel + size.to_bytes(8, "big"))
        read = 0
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                read += len(chunk)
                h.update(chunk)
        if read != size:
            raise LocalDataError(str(p), "size", f"{size} bytes (as when listed)", f"{read}: the file changed")
    return h.digest()


