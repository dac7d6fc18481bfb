"""File loaders on tiny files written here byte by byte: IDX (MNIST family), CIFAR-10 binary, LEAF JSON."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from learning.data import (
    LEAF_LETTERS,
    CIFAR10Spec,
    EMNISTSpec,
    FEMNISTSpec,
    MNISTSpec,
    Sent140Spec,
    ShakespeareSpec,
    dataset_spec,
    decode_idx,
    read_idx,
)
from learning._errors import DataError
from learning.data import NaturalPartition

# -- IDX --------------------------------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray, code: int, fmt: str) -> bytes:
    """IDX written independently of the loader: magic 0 0 code ndim, big-endian sizes, big-endian values."""
    head = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return head + struct.pack(f">{array.size}{fmt}", *array.reshape(-1).tolist())


def test_decode_idx_known_bytes() -> None:
    raw = bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 255])
    assert decode_idx(raw).tolist() == [[1, 2, 3], [4, 5, 255]]
    ints = np.array([-1, 70000, 3], dtype=np.int64)
    assert decode_idx(idx_bytes(ints, 0x0C, "i")).tolist() == [-1, 70000, 3]
    floats = np.array([[0.5, -2.0]])
    out = decode_idx(idx_bytes(floats, 0x0D, "f"))
    assert out.dtype == np.float32 and out.tolist() == [[0.5, -2.0]]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x07", "magic"),
        (bytes([0, 0, 0x07, 1, 0, 0, 0, 1, 7]), "data type"),
        (bytes([0, 0, 0x08, 1, 0, 0, 0, 3, 7, 7]), "declares"),
        (bytes([0, 0, 0x08, 1, 0, 0, 0, 1, 7, 7]), "declares"),
        (bytes([0, 0, 0x08, 2, 0, 0]), "header"),
    ],
)
def test_decode_idx_rejects_bad_files(raw: bytes, message: str) -> None:
    with pytest.raises(DataError, match=message):
        decode_idx(raw, source="f.idx")


def write_mnist(directory: Path, prefix: str, train: str, test: str, *, gz: bool, n=(5, 3), label_offset=0):
    g = np.random.default_rng(0)
    data = {}
    for split, count in ((train, n[0]), (test, n[1])):
        images = g.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % 10 + label_offset).astype(np.uint8)
        for kind, array, stem in (("images", images, "images-idx3"), ("labels", labels, "labels-idx1")):
            payload = idx_bytes(array, 0x08, "B")
            name = f"{prefix}{split}-{stem}-ubyte"
            if gz:
                (directory / f"{name}.gz").write_bytes(gzip.compress(payload))
            else:
                (directory / name).write_bytes(payload)
            data[(split, kind)] = array
    return data


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_loader(tmp_path: Path, gz: bool) -> None:
    data = write_mnist(tmp_path, "", "train", "t10k", gz=gz)
    splits = MNISTSpec(root=str(tmp_path)).load()
    assert splits.train.x.shape == (5, 1, 28, 28) and splits.test.x.shape == (3, 1, 28, 28)
    assert splits.train.x.dtype == torch.float32
    assert torch.allclose(splits.train.x[2, 0], torch.from_numpy(data[("train", "images")][2]).float() / 255)
    assert splits.test.y.tolist() == [0, 1, 2]
    fashion = dataset_spec("fashion_mnist", {"root": str(tmp_path)}).load()  # same file names
    assert torch.equal(fashion.train.x, splits.train.x)
    assert read_idx(next(tmp_path.glob("train-labels*"))).tolist() == [0, 1, 2, 3, 4]


def test_mnist_missing_files_named(tmp_path: Path) -> None:
    write_mnist(tmp_path, "", "train", "t10k", gz=False)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError) as info:
        MNISTSpec(root=str(tmp_path)).load()
    message = str(info.value)
    assert "t10k-labels-idx1-ubyte[.gz]" in message and str(tmp_path) in message
    assert "missing t10k-labels-idx1-ubyte[.gz] in directory" in message
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        MNISTSpec(root=str(tmp_path / "empty")).load()


def test_mnist_label_count_mismatch(tmp_path: Path) -> None:
    write_mnist(tmp_path, "", "train", "t10k", gz=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(4, np.uint8), 0x08, "B"))
    with pytest.raises(DataError, match="5 images but 4 labels"):
        MNISTSpec(root=str(tmp_path)).load()


def test_emnist_letters_shift_and_transpose(tmp_path: Path) -> None:
    data = write_mnist(tmp_path, "emnist-letters-", "train", "test", gz=True, label_offset=1)
    splits = EMNISTSpec(root=str(tmp_path), split="letters").load()
    assert splits.train.num_classes == 26
    assert splits.train.y.tolist() == [0, 1, 2, 3, 4]  # 1-based letters → 0-based
    stored = data[("train", "images")][1]
    assert torch.allclose(splits.train.x[1, 0], torch.from_numpy(stored.T.copy()).float() / 255)
    with pytest.raises(DataError, match="emnist-balanced-train-images-idx3-ubyte"):
        EMNISTSpec(root=str(tmp_path), split="balanced").load()


# -- CIFAR-10 binary --------------------------------------------------------------------------------------------


def write_cifar(directory: Path, per_file: int = 2) -> dict[str, list[tuple[int, bytes]]]:
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for f, name in enumerate([f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]):
        records = []
        for r in range(per_file):
            label = (f * per_file + r) % 10
            pixels = bytes((f * 31 + r * 7 + i) % 256 for i in range(3072))
            records.append((label, pixels))
        (directory / name).write_bytes(b"".join(bytes([label]) + px for label, px in records))
        written[name] = records
    return written


def test_cifar10_binary_layout(tmp_path: Path) -> None:
    written = write_cifar(tmp_path / "cifar-10-batches-bin")
    splits = CIFAR10Spec(root=str(tmp_path)).load()
    assert splits.train.x.shape == (10, 3, 32, 32) and splits.test.x.shape == (2, 3, 32, 32)
    label, pixels = written["data_batch_2.bin"][1]
    sample = splits.train.x[3]  # file 2, record 1
    assert int(splits.train.y[3]) == label
    # channel-major planes: byte 1024·c + 32·row + col is pixel (c, row, col)
    for c, row, col in ((0, 0, 0), (1, 5, 7), (2, 31, 31)):
        assert float(sample[c, row, col]) == pytest.approx(pixels[1024 * c + 32 * row + col] / 255)
    normed = CIFAR10Spec(root=str(tmp_path), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)).load()
    assert torch.allclose(normed.train.x, (splits.train.x - 0.5) / 0.25)


def test_cifar10_missing_and_malformed(tmp_path: Path) -> None:
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(DataError) as info:
        CIFAR10Spec(root=str(tmp_path)).load()
    assert "data_batch_1.bin" in str(info.value) and "test_batch.bin" in str(info.value)
    assert "pickled" in str(info.value) and str(tmp_path) in str(info.value)
    write_cifar(tmp_path)
    (tmp_path / "test_batch.bin").write_bytes(b"\x01" * 3000)
    with pytest.raises(DataError, match="3073-byte"):
        CIFAR10Spec(root=str(tmp_path)).load()
    (tmp_path / "test_batch.bin").write_bytes(bytes([10]) + bytes(3072))
    with pytest.raises(DataError, match="label 10"):
        CIFAR10Spec(root=str(tmp_path)).load()


# -- LEAF JSON --------------------------------------------------------------------------------------------------


def write_leaf(root: Path, split: str, name: str, users: dict[str, tuple[list, list]]) -> None:
    directory = root / split
    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    (directory / name).write_text(json.dumps(doc))


def femnist_users(count: dict[str, int], seed: int) -> dict[str, tuple[list, list]]:
    g = np.random.default_rng(seed)
    return {
        u: (g.random((n, 784)).round(3).tolist(), g.integers(0, 62, n).tolist()) for u, n in count.items()
    }


def test_femnist_loader_and_natural_partition(tmp_path: Path) -> None:
    root = tmp_path / "femnist" / "data"
    write_leaf(root, "train", "a.json", femnist_users({"f0001": 4, "f0002": 3}, 0))
    write_leaf(root, "train", "b.json", femnist_users({"f0003": 2}, 1))
    write_leaf(root, "test", "a.json", femnist_users({"f0001": 1, "f0003": 2}, 2))
    splits = FEMNISTSpec(root=str(tmp_path / "femnist")).load()  # finds data/train, data/test
    assert splits.train.x.shape == (9, 1, 28, 28) and splits.train.num_classes == 62
    assert splits.train.group_names == ("f0001", "f0002", "f0003")
    assert splits.train.groups.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert splits.test.groups.tolist() == [0, 2, 2]
    part = NaturalPartition()(splits.train, rng=np.random.default_rng(0))
    assert part.names == ("f0001", "f0002", "f0003") and part.sizes().tolist() == [4, 3, 2]
    assert part.covers_all()


def test_leaf_missing_and_malformed(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        FEMNISTSpec(root=str(tmp_path)).load()
    assert f"{tmp_path}/train/*.json" in str(info.value) and f"{tmp_path}/test/*.json" in str(info.value)
    users = femnist_users({"u": 2}, 0)
    write_leaf(tmp_path, "train", "a.json", users)
    write_leaf(tmp_path, "test", "a.json", users)
    doc = json.loads((tmp_path / "test" / "a.json").read_text())
    doc["user_data"]["u"]["y"] = [1]
    (tmp_path / "test" / "a.json").write_text(json.dumps(doc))
    with pytest.raises(DataError, match="2 inputs but 1 labels"):
        FEMNISTSpec(root=str(tmp_path)).load()
    (tmp_path / "test" / "a.json").write_text("{not json")
    with pytest.raises(DataError, match="not a readable LEAF JSON"):
        FEMNISTSpec(root=str(tmp_path)).load()
    write_leaf(tmp_path, "test", "a.json", {"u": ([[0.5] * 783], [3])})
    with pytest.raises(DataError, match="784"):
        FEMNISTSpec(root=str(tmp_path)).load()


def test_shakespeare_encoding(tmp_path: Path) -> None:
    assert len(LEAF_LETTERS) == 80
    text = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suffer!"
    x = [text[i : i + 80] for i in range(3)]
    y = [text[i + 80] for i in range(3)]
    write_leaf(tmp_path, "train", "s.json", {"HAMLET": (x, y)})
    write_leaf(tmp_path, "test", "s.json", {"HAMLET": (x[:1], y[:1])})
    splits = ShakespeareSpec(root=str(tmp_path)).load()
    assert splits.train.x.shape == (3, 80) and splits.train.x.dtype == torch.int64
    assert "".join(LEAF_LETTERS[i] for i in splits.train.x[1].tolist()) == x[1]
    assert LEAF_LETTERS[int(splits.train.y[0])] == y[0] and splits.train.num_classes == 80
    write_leaf(tmp_path, "test", "s.json", {"HAMLET": (["é" * 80], ["a"])})
    with pytest.raises(DataError, match="alphabet"):
        ShakespeareSpec(root=str(tmp_path)).load()


def test_sent140_tokens_vocab_and_labels(tmp_path: Path) -> None:
    train = {
        "alice": (
            [["1", "date", "NO_QUERY", "alice", "good good day!"], ["2", "d", "q", "alice", "bad day"]],
            ["1", "0"],
        ),
        "bob": ([["3", "d", "q", "bob", "Good"]], [4]),
    }
    write_leaf(tmp_path, "train", "t.json", train)
    write_leaf(tmp_path, "test", "t.json", {"bob": (["unseen good"], [0])})
    splits = Sent140Spec(root=str(tmp_path), seq_len=4, vocab_size=5).load()
    # vocabulary by count then alphabet: good(3) day(2) !(1) bad(1) → ids 2, 3, 4 (vocab_size 5 keeps 3 words)
    assert splits.train.x.tolist() == [[2, 2, 3, 4], [1, 3, 0, 0], [2, 0, 0, 0]]
    assert splits.train.y.tolist() == [1, 0, 1]
    assert splits.test.x.tolist() == [[1, 2, 0, 0]]
    assert splits.train.group_names == ("alice", "bob")
