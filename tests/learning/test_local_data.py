"""A member's own data from real files in tmp_path (no mocks): round trips through the writers, every read format,
the data contract's one-line refusals, the validation split, byte-determinism, bounds and pickle refusal."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from learning import DataContract, DataError, LocalData, LocalDataError, Preprocessing, load_local, write_local
from learning.data import LOCAL_FORMATS, Dataset, dir_digest

PIXELS = Preprocessing(scale=1 / 255)


def images(n: int = 12, channels: int = 1, side: int = 8, seed: int = 0) -> Dataset:
    """Raw uint8-valued pixels stored as float32, labels 0..3."""
    g = np.random.default_rng(seed)
    x = torch.from_numpy(g.integers(0, 256, (n, channels, side, side)).astype(np.float32))
    y = torch.from_numpy((np.arange(n) % 4).astype(np.int64))
    return Dataset(x=x, y=y, num_classes=4, name="images")


def vectors(n: int = 10, d: int = 5, seed: int = 0) -> Dataset:
    g = np.random.default_rng(seed)
    x = torch.from_numpy(g.normal(0, 3, (n, d)).astype(np.float32))
    x[0, 0] = 7.0  # an integral value inside a float row
    y = torch.from_numpy((np.arange(n) % 3).astype(np.int64))
    return Dataset(x=x, y=y, num_classes=3, name="vectors")


def one_line(e: pytest.ExceptionInfo[LocalDataError], *parts: str) -> str:
    message = str(e.value)
    assert "\n" not in message and isinstance(e.value, DataError)
    for part in parts:
        assert part in message, (part, message)
    return message


# -- round trips --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npz", "csv", "imagefolder", "idx", "hf-disk"])
@pytest.mark.parametrize("channels", [1, 3])
def test_round_trip_images(tmp_path: Path, fmt: str, channels: int) -> None:
    data = images(channels=channels)
    out = tmp_path / ("data." + fmt if fmt in ("npz", "csv") else fmt)
    files = write_local(data, out, fmt)
    assert files == sorted(files) and all(f.is_file() for f in files)
    contract = DataContract(shape=(channels, 8, 8), classes=4, dtype="float32", preprocessing=PIXELS)
    train, validation = load_local(LocalData(path=str(out), format=fmt), contract)
    assert validation is None
    assert train.x.dtype == torch.float32 and train.x.shape == (12, channels, 8, 8)
    if fmt == "imagefolder":  # read back in path order: class directory, then file
        data = data.subset(np.argsort(data.labels, kind="stable"))
    assert torch.equal(train.x, PIXELS.apply(data.x))  # bit for bit after the same preprocessing
    assert torch.equal(train.y, data.y) and train.num_classes == 4
    raw, _ = load_local(LocalData(path=str(out), format=fmt))  # no contract: the raw values, the file's shape
    assert torch.equal(raw.x.reshape(data.x.shape), data.x) and raw.num_classes == 4  # csv: flat rows


@pytest.mark.parametrize("fmt", ["npz", "csv", "idx", "hf-disk"])
def test_round_trip_float_vectors(tmp_path: Path, fmt: str) -> None:
    data = vectors()
    out = tmp_path / ("v." + fmt if fmt != "idx" else "v")
    write_local(data, out, fmt)
    pre = Preprocessing(scale=0.5, mean=(1.0,), std=(2.0,))
    contract = DataContract(shape=(5,), classes=3, dtype="float32", preprocessing=pre)
    train, _ = load_local(LocalData(path=str(out), format=fmt), contract)
    assert torch.equal(train.x, pre.apply(data.x)) and torch.equal(train.y, data.y)


def test_csv_text_integers_as_integers(tmp_path: Path) -> None:
    write_local(vectors(n=3), tmp_path / "v.csv", "csv")
    lines = (tmp_path / "v.csv").read_text().splitlines()
    assert lines[0] == "f0,f1,f2,f3,f4,label" and lines[1].startswith("7,") and lines[1].endswith(",0")
    write_local(images(n=2), tmp_path / "i.csv", "csv")
    row = (tmp_path / "i.csv").read_text().splitlines()[1]
    assert "." not in row


def test_written_files_are_byte_deterministic(tmp_path: Path) -> None:
    for fmt in ("npz", "csv", "imagefolder", "idx", "hf-disk"):
        a = write_local(images(channels=3), tmp_path / "a" / fmt, fmt)
        b = write_local(images(channels=3), tmp_path / "b" / fmt, fmt)
        assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b], fmt
        assert dir_digest(tmp_path / "a" / fmt) == dir_digest(tmp_path / "b" / fmt)
    with zipfile.ZipFile(tmp_path / "a" / "npz") as zf:  # np.savez would stamp the time of day
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert dir_digest(tmp_path / "a" / "npz") != dir_digest(tmp_path / "a" / "csv")


def test_npz_dtypes_and_writer_refusals(tmp_path: Path) -> None:
    write_local(images(), tmp_path / "i.npz", "npz")
    write_local(vectors(), tmp_path / "v.npz", "npz")
    with np.load(tmp_path / "i.npz", allow_pickle=False) as f:
        assert f["x"].dtype == np.uint8 and f["y"].dtype == np.int64
    with np.load(tmp_path / "v.npz", allow_pickle=False) as f:
        assert f["x"].dtype == np.float32
    with pytest.raises(LocalDataError) as e:
        write_local(vectors(), tmp_path / "png", "imagefolder")
    one_line(e, "vectors: x: expected integer pixel values in [0, 255]")
    with pytest.raises(LocalDataError) as e:
        write_local(vectors(), tmp_path / "x", "leaf")
    one_line(e, "format", "npz, csv, imagefolder, idx")
    write_local(images(), tmp_path / "full", "imagefolder")
    with pytest.raises(LocalDataError, match="new or empty directory"):
        write_local(images(), tmp_path / "full", "imagefolder")


def test_dir_digest_covers_names_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "d" / "a").mkdir(parents=True)
    (tmp_path / "d" / "a" / "f").write_bytes(b"12")
    (tmp_path / "d" / "g").write_bytes(b"3")
    first = dir_digest(tmp_path / "d")
    assert len(first) == 32 and dir_digest(tmp_path / "d") == first
    (tmp_path / "d" / "g").rename(tmp_path / "d" / "h")
    assert dir_digest(tmp_path / "d") != first
    (tmp_path / "x").write_bytes(b"12")
    (tmp_path / "y").write_bytes(b"12")
    assert dir_digest(tmp_path / "x") == dir_digest(tmp_path / "y")  # a file: its bytes, not its name


# -- every read format from a real file ---------------------------------------------------------------------------


def test_csv_header_optional_string_labels_and_reshape(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("a,b,c,d,kind\n1,2,3,4,cat\n5,6,7,8,dog\n0,0,0,1,cat\n")
    contract = DataContract(shape=(1, 2, 2), classes=2, dtype="float32", label_names=("cat", "dog"))
    train, _ = load_local(LocalData(path=str(tmp_path / "h.csv"), format="csv", label="kind"), contract)
    assert train.x.shape == (3, 1, 2, 2) and train.y.tolist() == [0, 1, 0]
    assert train.x[1].reshape(-1).tolist() == [5, 6, 7, 8]
    (tmp_path / "n.csv").write_text("1.5,2,1\n3,4,0\n")  # no header: the last column is the label
    train, _ = load_local(LocalData(path=str(tmp_path / "n.csv"), format="csv"))
    assert train.x.tolist() == [[1.5, 2.0], [3.0, 4.0]] and train.y.tolist() == [1, 0] and train.num_classes == 2
    train, _ = load_local(LocalData(path=str(tmp_path / "n.csv"), format="csv", label="1"))
    assert train.y.tolist() == [2, 4] and train.x.tolist() == [[1.5, 1.0], [3.0, 0.0]]
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "h.csv"), format="csv", label="kind"))
    one_line(e, "h.csv: label: expected an integer class", "'cat' (sample 0)")


@pytest.mark.parametrize(
    ("text", "where", "found"),
    [
        ("f0,f1,label\n1,2,0\n3,x,1\n", "row 3 column 'f1'", "found 'x'"),
        ("f0,f1,label\n1,nan,0\n", "row 2 column 'f1'", "found 'nan'"),
        ("1,2,0\n3,inf,1\n", "row 2 column 'column 1'", "found 'inf'"),
        ("f0,f1,label\n1,2,0\n3,1\n", "row 3", "expected 3 fields, found 2"),
        ("f0,f1,label\n", "samples", "expected at least 1 row below the header"),
    ],
)
def test_csv_refusals_name_row_and_column(tmp_path: Path, text: str, where: str, found: str) -> None:
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "bad.csv"), format="csv"))
    one_line(e, f"bad.csv: {where}", found)


def test_imagefolder_grey_rgb_names_and_odd_sizes(tmp_path: Path) -> None:
    root = tmp_path / "folder"
    for name, value in (("cat", 10), ("dog", 200)):
        (root / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((4, 6), value + i, np.uint8)).save(root / name / f"{i}.png")
    (root / "cat" / "notes.txt").write_text("ignored")
    contract = DataContract(shape=(1, 4, 6), classes=2, dtype="float32", label_names=("cat", "dog"))
    train, _ = load_local(LocalData(path=str(root), format="imagefolder"), contract)
    assert train.x.shape == (4, 1, 4, 6) and train.y.tolist() == [0, 0, 1, 1]
    assert train.x[:, 0, 0, 0].tolist() == [10, 11, 200, 201]
    rgb = tmp_path / "rgb"
    (rgb / "0").mkdir(parents=True)
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    Image.fromarray(pixels, "RGB").save(rgb / "0" / "a.bmp")
    x, _ = load_local(LocalData(path=str(rgb), format="imagefolder"))
    assert x.x.shape == (1, 3, 2, 3) and x.x[0].permute(1, 2, 0).tolist() == pixels.tolist()
    Image.fromarray(np.zeros((5, 6), np.uint8)).save(root / "dog" / "9.png")
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(root), format="imagefolder"), contract)
    one_line(e, "9.png: image: expected (1, 4, 6)", "found (1, 5, 6)")


def idx_bytes(array: np.ndarray, code: int, fmt: str) -> bytes:
    head = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return head + struct.pack(f">{array.size}{fmt}", *array.reshape(-1).tolist())


def test_idx_directory_train_files_and_gzip(tmp_path: Path) -> None:
    g = np.random.default_rng(1)
    train_x, test_x = g.integers(0, 256, (6, 5, 5), dtype=np.uint8), g.integers(0, 256, (2, 5, 5), dtype=np.uint8)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(train_x, 0x08, "B")))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.arange(6, dtype=np.uint8) % 3, 0x08, "B"))
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(test_x, 0x08, "B"))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([0, 2], np.uint8), 0x08, "B"))
    contract = DataContract(shape=(25,), classes=3, dtype="float32", preprocessing=PIXELS)  # flat MLP input
    train, _ = load_local(LocalData(path=str(tmp_path), format="idx"), contract)
    assert train.x.shape == (6, 25) and train.y.tolist() == [0, 1, 2, 0, 1, 2]
    assert torch.equal(train.x, PIXELS.apply(torch.from_numpy(train_x.reshape(6, 25))))
    (tmp_path / "extra-images-idx3-ubyte").write_bytes(b"")
    (tmp_path / "train2-images-idx3-ubyte").write_bytes(b"")
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path), format="idx"))
    one_line(e, "images file: expected one *images*idx*", "found 2")


def test_cifar10_directory_and_single_file(tmp_path: Path) -> None:
    directory = tmp_path / "cifar-10-batches-bin"
    directory.mkdir()
    for b in (1, 2, 10):
        records = [bytes([(b + r) % 10]) + bytes((b * 7 + r + i) % 256 for i in range(3072)) for r in range(2)]
        (directory / f"data_batch_{b}.bin").write_bytes(b"".join(records))
    (directory / "test_batch.bin").write_bytes(bytes([9]) + bytes(3072))
    train, _ = load_local(LocalData(path=str(tmp_path), format="cifar10"))
    assert train.x.shape == (6, 3, 32, 32) and train.y.tolist() == [1, 2, 2, 3, 0, 1]  # batches 1, 2, 10
    assert train.x[2, 1, 0, 0] == (2 * 7 + 0 + 1024) % 256 and train.num_classes == 4
    spec = LocalData(path=str(directory / "data_batch_1.bin"), format="cifar10",
                     validation=str(directory / "test_batch.bin"))
    contract = DataContract(shape=(3, 32, 32), classes=10, dtype="float32",
                            preprocessing=Preprocessing(scale=1 / 255, mean=(0.5, 0.4, 0.3), std=(0.2, 0.2, 0.2)))
    train, validation = load_local(spec, contract)
    assert len(train) == 2 and validation is not None and validation.y.tolist() == [9]
    raw = torch.tensor([(7 + 0 + 2048 + k) % 256 for k in range(32)], dtype=torch.float32) / 255
    assert torch.allclose(train.x[0, 2, 0], (raw - 0.3) / 0.2)


def write_leaf(path: Path, users: dict[str, tuple[list, list]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"users": list(users), "num_samples": [len(y) for _, y in users.values()],
           "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}
    path.write_text(json.dumps(doc))


def test_leaf_file_and_directory(tmp_path: Path) -> None:
    write_leaf(tmp_path / "femnist" / "a.json", {"w1": ([[0.5] * 784, [0.25] * 784], [3, 61])})
    write_leaf(tmp_path / "femnist" / "b.json", {"w2": ([[1.0] * 784], [7])})
    contract = DataContract(shape=(1, 28, 28), classes=62, dtype="float32")
    train, _ = load_local(LocalData(path=str(tmp_path / "femnist"), format="leaf"), contract)
    assert train.x.shape == (3, 1, 28, 28) and train.y.tolist() == [3, 61, 7]
    assert train.group_names == ("w1", "w2") and train.groups.tolist() == [0, 0, 1]
    write_leaf(tmp_path / "shakespeare.json", {"ROMEO": (["to be or", "not to b"], ["e", "!"])})
    text, _ = load_local(LocalData(path=str(tmp_path / "shakespeare.json"), format="leaf"))
    assert text.x.dtype == torch.int64 and text.x.shape == (2, 8) and text.num_classes >= 2
    contract = DataContract(shape=(8,), classes=80, dtype="int64")
    text, _ = load_local(LocalData(path=str(tmp_path / "shakespeare.json"), format="leaf"), contract)
    assert text.num_classes == 80
    write_leaf(tmp_path / "sent.json", {"u": ([["id", "date", "q", "user", "good day"]], [1])})
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "sent.json"), format="leaf"))
    one_line(e, "sent.json", "one vocabulary")


def test_hf_disk_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    grey = [Image.fromarray(np.full((3, 4), 10 * i, np.uint8)) for i in range(4)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["no", "yes"])})
    ds = datasets.Dataset.from_dict({"image": grey, "label": [0, 1, 1, 0]}, features=features)
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "images"))
    contract = DataContract(shape=(1, 3, 4), classes=2, dtype="float32", preprocessing=PIXELS,
                            label_names=("yes", "no"))  # mapped through the names, not the ClassLabel ids
    train, _ = load_local(LocalData(path=str(tmp_path / "images"), format="hf-disk"), contract)
    assert train.y.tolist() == [1, 0, 0, 1] and train.x.shape == (4, 1, 3, 4)
    assert torch.equal(train.x[:, 0, 0, 0], torch.tensor([0, 10, 20, 30]) * torch.tensor(1 / 255, dtype=torch.float32))
    table = datasets.Dataset.from_dict({"a": [1.0, 2.0, 3.0], "b": [4, 5, 6], "y": [2, 0, 1], "note": ["", "", ""]})
    table.save_to_disk(str(tmp_path / "table"))
    train, _ = load_local(LocalData(path=str(tmp_path / "table"), format="hf-disk", label="y"))
    assert train.x.tolist() == [[1, 4], [2, 5], [3, 6]] and train.y.tolist() == [2, 0, 1]
    lists = datasets.Dataset.from_dict({"x": [[0.1, 0.2], [0.3, 0.4]], "label": [1, 0]})
    lists.save_to_disk(str(tmp_path / "lists"))
    train, _ = load_local(LocalData(path=str(tmp_path / "lists"), format="hf-disk"))
    assert torch.equal(train.x, torch.tensor([[0.1, 0.2], [0.3, 0.4]], dtype=torch.float64).float())


# -- the contract -------------------------------------------------------------------------------------------------


def test_contract_params_round_trip_and_strictness() -> None:
    c = DataContract(shape=(3, 32, 32), classes=10, dtype="float32",
                     preprocessing=Preprocessing(scale=1 / 255, mean=(0.1, 0.2, 0.3), std=(1, 2, 3)))
    params = c.to_params()
    assert params == {"shape": [3, 32, 32], "classes": 10, "dtype": "float32", "label_names": [],
                      "preprocessing": {"scale": 1 / 255, "mean": [0.1, 0.2, 0.3], "std": [1.0, 2.0, 3.0]}}
    assert DataContract.from_params(params, "g.toml") == c
    assert DataContract(shape=[64], classes=10, dtype="float32").to_params()["preprocessing"] == {
        "scale": 1.0, "mean": [], "std": []}
    cases = [
        ({**params, "extra": 1}, "g.toml: data: expected only the keys", "unknown key(s) extra"),
        ({k: v for k, v in params.items() if k != "label_names"}, "g.toml: data: expected the keys", "label_names"),
        ({**params, "classes": "10"}, "g.toml: classes: expected a positive int", "'10'"),
        ({**params, "classes": True}, "g.toml: classes: expected", "True"),
        ({**params, "shape": [3, 0]}, "g.toml: shape: expected a non-empty list of positive ints", "[3, 0]"),
        ({**params, "dtype": "float64"}, "g.toml: dtype: expected 'float32' or 'int64'", "'float64'"),
        ({**params, "preprocessing": {"scale": 1.0, "mean": [0.5, 0.5], "std": [1.0, 1.0]}},
         "g.toml: preprocessing.mean: expected 1 or 3 values", "found 2"),
        ({**params, "preprocessing": {"scale": 1.0, "mean": [], "std": [], "x": 1}},
         "g.toml: preprocessing: expected only the keys", "x"),
        ({**params, "label_names": ["a", "b"]}, "g.toml: label_names: expected 10 names", "found 2"),
    ]
    for raw, *parts in cases:
        with pytest.raises(LocalDataError) as e:
            DataContract.from_params(raw, "g.toml")
        one_line(e, *parts)
    with pytest.raises(LocalDataError) as e:
        DataContract(shape=(8,), classes=80, dtype="int64", preprocessing=PIXELS)
    one_line(e, "preprocessing: expected none for int64")
    err = pickle.loads(pickle.dumps(e.value))
    assert str(err) == str(e.value) and err.field == "preprocessing"


def test_contract_refusals_are_one_line(tmp_path: Path) -> None:
    write_local(images(), tmp_path / "d.npz", "npz")
    spec = LocalData(path=str(tmp_path / "d.npz"), format="npz")
    good = DataContract(shape=(1, 8, 8), classes=4, dtype="float32", preprocessing=PIXELS)
    load_local(spec, good)
    cases = [
        (DataContract(shape=(3, 8, 8), classes=4, dtype="float32"), "shape: expected (3, 8, 8)", "found (1, 8, 8)"),
        (DataContract(shape=(1, 8, 8), classes=3, dtype="float32"), "label: expected a class in [0, 3)",
         "found 3 (sample 3)"),
    ]
    for contract, *parts in cases:
        with pytest.raises(LocalDataError) as e:
            load_local(spec, contract)
        one_line(e, str(tmp_path / "d.npz") + ": ", *parts)
    # int64 contract on integral pixels: loaded as ids (no refusal); on float features: refused
    ids, _ = load_local(spec, DataContract(shape=(1, 8, 8), classes=4, dtype="int64"))
    assert ids.x.dtype == torch.int64
    write_local(vectors(), tmp_path / "v.npz", "npz")
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "v.npz"), format="npz"),
                   DataContract(shape=(5,), classes=3, dtype="int64"))
    one_line(e, "v.npz: x: expected integer token ids (dtype int64)", "sample 0")
    # check() on datasets built elsewhere: classes, dtype, NaN
    data = vectors()
    with pytest.raises(LocalDataError) as e:
        DataContract(shape=(5,), classes=4, dtype="float32").check(data, "mine.npz")
    one_line(e, "mine.npz: classes: expected 4, found 3")
    with pytest.raises(LocalDataError) as e:
        DataContract(shape=(5,), classes=3, dtype="int64").check(data, "mine.npz")
    one_line(e, "mine.npz: dtype: expected int64, found float32")
    x = data.x.clone()
    x[4, 2] = float("nan")
    with pytest.raises(LocalDataError) as e:
        DataContract.of(data).check(Dataset(x=x, y=data.y, num_classes=3), "mine.npz")
    one_line(e, "mine.npz: x: expected finite values, found nan (sample 4)")
    nan = {"x": x.numpy(), "y": data.y.numpy()}
    np.savez(tmp_path / "nan.npz", **nan)
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "nan.npz"), format="npz"), DataContract.of(data))
    one_line(e, "nan.npz: x: expected finite values, found nan (sample 4)")


def test_contract_of_and_label_names() -> None:
    c = DataContract.of(images(), PIXELS, label_names=("a", "b", "c", "d"))
    assert c.shape == (1, 8, 8) and c.classes == 4 and c.dtype == "float32" and c.label_names == ("a", "b", "c", "d")
    with pytest.raises(LocalDataError) as e:
        DataContract(shape=(2,), classes=2, dtype="float32", label_names=("1", "0"))
    one_line(e, "label_names[0]: expected a non-decimal name or 0", "'1'")
    assert DataContract(shape=(2,), classes=2, dtype="float32", label_names=("0", "1")).label_names == ("0", "1")


def test_preprocessing_formula_and_validation() -> None:
    raw = torch.arange(2 * 2 * 2 * 2, dtype=torch.uint8).reshape(2, 2, 2, 2)
    pre = Preprocessing(scale=0.5, mean=(1.0, 2.0), std=(2.0, 4.0))
    out = pre.apply(raw)
    want = raw.float() * 0.5
    want[:, 0] = (want[:, 0] - 1) / 2
    want[:, 1] = (want[:, 1] - 2) / 4
    assert out.dtype == torch.float32 and torch.allclose(out, want)
    f = torch.ones(3)
    assert Preprocessing().apply(f) is not f  # a copy, never the caller's tensor
    assert Preprocessing.from_params(pre.to_params(), "x") == pre
    for kwargs, part in (({"scale": 0}, "scale"), ({"mean": (1.0,)}, "std: expected 1 values"),
                         ({"mean": (0.0,), "std": (0.0,)}, "std: expected values > 0"),
                         ({"scale": float("inf")}, "scale")):
        with pytest.raises(LocalDataError) as e:
            Preprocessing(**kwargs)
        one_line(e, part)


# -- the spec, validation, safety ---------------------------------------------------------------------------------


def test_local_data_params_and_refusals() -> None:
    spec = LocalData(path="d.npz", format="npz", label="labels", validation=0.25, seed=3)
    assert LocalData.from_params(spec.to_params(), "node.toml [data]") == spec
    assert LocalData.from_params({"path": "d", "format": "idx"}, "n") == LocalData(path="d", format="idx")
    assert LocalData(path="d", format="idx", validation=0).validation == 0.0
    cases = [
        ({"path": "d", "format": "tfrecord"}, "node.toml [data]: format: expected one of " + ", ".join(LOCAL_FORMATS)),
        ({"path": "d", "format": "npz", "colour": 1}, "node.toml [data]: data: expected only the keys"),
        ({"format": "npz"}, "data: expected the keys path, format"),
        ({"path": "d", "format": "npz", "validation": 1.0}, "validation: expected a fraction in [0, 1) or a path"),
        ({"path": "d", "format": "npz", "validation": ""}, "found an empty string"),
        ({"path": "d", "format": "npz", "seed": -1}, "seed: expected a non-negative int"),
        ({"path": "d", "format": "imagefolder", "label": "y"}, "label: expected none for format 'imagefolder'"),
        ({"path": "d", "format": "csv", "features": "a"}, "features: expected none for format 'csv'"),
    ]
    for raw, part in cases:
        with pytest.raises(LocalDataError) as e:
            LocalData.from_params(raw, "node.toml [data]")
        one_line(e, part)


def test_validation_fraction_is_seeded_and_disjoint(tmp_path: Path) -> None:
    data = images(n=40)
    write_local(data, tmp_path / "d.npz", "npz")
    spec = LocalData(path=str(tmp_path / "d.npz"), format="npz", validation=0.25, seed=7)
    train, validation = load_local(spec)
    assert validation is not None and len(validation) == 10 and len(train) == 30
    again_train, again_validation = load_local(spec)
    assert torch.equal(train.x, again_train.x) and torch.equal(validation.x, again_validation.x)
    rows = {tuple(r.tolist()) for r in data.x.reshape(40, -1)}
    seen_train = {tuple(r.tolist()) for r in train.x.reshape(30, -1)}
    seen_validation = {tuple(r.tolist()) for r in validation.x.reshape(10, -1)}
    assert len(rows) == 40 and not seen_train & seen_validation and seen_train | seen_validation == rows
    expected = np.sort(np.random.default_rng(7).permutation(40)[:10])
    assert torch.equal(validation.x, data.x[torch.from_numpy(expected)])
    _, other = load_local(LocalData(path=str(tmp_path / "d.npz"), format="npz", validation=0.25, seed=8))
    assert other is not None and not torch.equal(other.x, validation.x)
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "d.npz"), format="npz", validation=0.001))
    one_line(e, "validation: expected a fraction leaving samples on both sides")


def test_validation_as_a_path(tmp_path: Path) -> None:
    write_local(images(n=8), tmp_path / "train.csv", "csv")
    write_local(images(n=3, seed=5), tmp_path / "val.csv", "csv")
    contract = DataContract(shape=(1, 8, 8), classes=4, dtype="float32", preprocessing=PIXELS)
    train, validation = load_local(
        LocalData(path=str(tmp_path / "train.csv"), format="csv", validation=str(tmp_path / "val.csv")), contract,
        name="node-3",
    )
    assert validation is not None and len(train) == 8 and len(validation) == 3
    assert torch.equal(validation.x, PIXELS.apply(images(n=3, seed=5).x)) and train.name == "node-3"
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "train.csv"), format="csv", validation=str(tmp_path / "no.csv")))
    one_line(e, "no.csv: path: expected a file (csv), found nothing")


class _Tripwire:
    """Unpickling it would create a file: proof that the loader never unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_pickled_npz_is_refused_without_unpickling(tmp_path: Path) -> None:
    trip = tmp_path / "tripped"
    x = np.empty(2, dtype=object)
    x[0], x[1] = _Tripwire(trip), _Tripwire(trip)
    np.savez(tmp_path / "evil.npz", x=x, y=np.array([0, 1]))
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "evil.npz"), format="npz"))
    one_line(e, "evil.npz: key 'x': expected a numeric array (pickled objects are never loaded)", "dtype object")
    assert not trip.exists()
    np.savez(tmp_path / "evil_y.npz", x=np.zeros((2, 3)), y=x)
    with pytest.raises(LocalDataError, match="key 'y'"):
        load_local(LocalData(path=str(tmp_path / "evil_y.npz"), format="npz"))
    assert not trip.exists()


def test_bounds_and_missing_keys(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as zf:  # headers only: the loader never reads the values
        for name, shape in (("x", (10_000_001, 1)), ("y", (10_000_001,))):
            header = np.lib.format.header_data_from_array_1_0(np.zeros((1,) * len(shape), np.uint8))
            header["shape"] = shape
            buffer = io.BytesIO()
            np.lib.format.write_array_header_1_0(buffer, header)
            zf.writestr(f"{name}.npy", buffer.getvalue())
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "big.npz"), format="npz"))
    one_line(e, "big.npz: samples: expected at most 10,000,000", "found 10,000,001")
    np.savez(tmp_path / "wide.npz", x=np.zeros((1, 4097, 4097), np.uint8), y=np.zeros(1, np.int64))
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "wide.npz"), format="npz"))
    one_line(e, "shape: expected at most 16,777,216 elements a sample")
    np.savez(tmp_path / "k.npz", features=np.zeros((2, 2)), y=np.zeros(2, np.int64))
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "k.npz"), format="npz"))
    one_line(e, "k.npz: key 'x': expected an array of that name", "['features', 'y']")
    train, _ = load_local(LocalData(path=str(tmp_path / "k.npz"), format="npz", features="features"))
    assert train.x.shape == (2, 2)
    with pytest.raises(LocalDataError) as e:
        load_local(LocalData(path=str(tmp_path / "nothing"), format="imagefolder"))
    one_line(e, "nothing: path: expected a directory (imagefolder), found nothing")
