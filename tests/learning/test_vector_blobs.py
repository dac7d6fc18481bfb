"""Vector blobs: the header-prefix fast path gives the same bytes, and accepts exactly what the strict parse does."""

import json
import struct

import numpy as np
import pytest

from learning.models import blob_to_vector, vector_to_blob
from learning._errors import InvalidUpdateError
from ledger import TensorEntry, encode_tensors


def _general(v: np.ndarray) -> bytes:
    return encode_tensors([TensorEntry("vector", "F32", (v.shape[0],), memoryview(v).cast("B"))])


@pytest.mark.parametrize("dim", [0, 1, 3, 7, 64, 4810, 100_003])
def test_fast_encoding_is_the_canonical_encoding(dim):
    v = np.random.default_rng(dim).standard_normal(dim).astype(np.float32)
    blob = vector_to_blob(v)
    assert blob == _general(v)
    back = blob_to_vector(blob, dim=dim)
    assert np.array_equal(back, v) and not back.flags.writeable
    assert np.array_equal(blob_to_vector(blob), v)  # no dim: the strict parse


def test_float64_and_big_endian_input_is_stored_as_little_endian_float32():
    v = np.arange(5, dtype=">f8")
    assert vector_to_blob(v) == _general(v.astype("<f4"))


def _with_header(header: dict, data: bytes, pad: bytes = b" ") -> bytes:
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    raw += pad * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def test_what_the_fast_path_does_not_recognize_goes_through_the_strict_parse():
    v = np.arange(4, dtype=np.float32)
    data = v.tobytes()
    spec = {"data_offsets": [0, 16], "dtype": "F32", "shape": [4]}
    # canonical but with metadata: valid, accepted by the strict parse
    with_meta = _with_header({"__metadata__": {"k": "v"}, "vector": spec}, data)
    assert np.array_equal(blob_to_vector(with_meta, dim=4), v)
    # wrong length for the expected dim, truncated data, trailing bytes, a non-canonical header: refused
    for bad in (
        vector_to_blob(v)[:-4],
        vector_to_blob(v) + b"\0\0\0\0",
        _with_header({"vector": spec}, data, pad=b"\t"),
        _with_header({"vector": {**spec, "dtype": "F16"}}, data),
        b"\x08\0\0\0",
    ):
        with pytest.raises(InvalidUpdateError):
            blob_to_vector(bad, dim=4)
    with pytest.raises(InvalidUpdateError, match="length 4, expected 5"):
        blob_to_vector(vector_to_blob(v), dim=5)


def test_non_finite_values_are_refused_on_the_fast_path():
    v = np.array([1.0, np.nan, 2.0], dtype=np.float32)
    with pytest.raises(InvalidUpdateError, match="NaN or Inf"):
        blob_to_vector(vector_to_blob(v), dim=3)
    v[1] = np.inf
    with pytest.raises(InvalidUpdateError, match="NaN or Inf"):
        blob_to_vector(vector_to_blob(v), dim=3)
