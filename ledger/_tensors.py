"""Canonical tensor blobs: the safetensors layout with one canonical header, parsed strictly.

A blob is ``u64-LE header length ‖ header JSON ‖ data``, i.e. a valid *safetensors* file that any
safetensors reader can open (no pickle, no code). Canonical form, so that equal tensors have equal bytes
and therefore equal digests:

* header = ``json.dumps(h, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`` padded with
  spaces to a multiple of 8 bytes; ``h[name] = {"data_offsets": [a, b], "dtype": D, "shape": [...]}``;
  optional ``"__metadata__"`` (str → str);
* tensors are laid out in name order, contiguous, starting at offset 0, little-endian, C order.

:func:`decode_tensors` accepts only bytes that :func:`encode_tensors` would produce (it re-encodes the
header and compares), with bounded sizes, so a blob has exactly one digest. This module is pure Python
(no numpy): the learning layer turns the returned ``memoryview`` slices into arrays without copying.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ledger._errors import BlobError

__all__ = ["DTYPE_BYTES", "TensorEntry", "decode_tensors", "encode_tensors"]

DTYPE_BYTES = MappingProxyType(
    {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
)
HEADER_BYTES_MAX = 1 << 20
TENSORS_MAX = 4096
NDIM_MAX = 8
_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,200}$")


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor of a blob: name, safetensors dtype code, shape, and its raw little-endian bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: memoryview | bytes

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for s in self.shape:
            n *= s
        return n


def _header_bytes(entries: Sequence[TensorEntry], metadata: Mapping[str, str] | None) -> bytes:
    h: dict[str, object] = {}
    off = 0
    for e in entries:
        end = off + e.nbytes
        h[e.name] = {"data_offsets": [off, end], "dtype": e.dtype, "shape": list(e.shape)}
        off = end
    if metadata:
        h["__metadata__"] = dict(metadata)
    raw = json.dumps(h, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return raw + b" " * (-len(raw) % 8)


def encode_tensors(entries: Sequence[TensorEntry], metadata: Mapping[str, str] | None = None) -> bytes:
    """Canonical blob bytes for ``entries`` (sorted by name here; names must be unique)."""
    entries = sorted(entries, key=lambda e: e.name)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError("tensor names must be unique")
    for e in entries:
        if not _NAME.match(e.name) or e.name == "__metadata__":
            raise ValueError(f"bad tensor name {e.name!r}")
        if e.dtype not in DTYPE_BYTES:
            raise ValueError(f"unsupported dtype {e.dtype!r}")
        if len(memoryview(e.data).cast("B")) != e.nbytes:
            raise ValueError(f"tensor {e.name}: {len(memoryview(e.data).cast('B'))} data bytes for shape {e.shape}")
    header = _header_bytes(entries, metadata)
    parts = [struct.pack("<Q", len(header)), header]
    parts.extend(memoryview(e.data).cast("B") for e in entries)
    return b"".join(parts)


def _bad(msg: str) -> BlobError:
    return BlobError(f"not a canonical tensor blob: {msg}")


def _no_dupes(pairs: list[tuple[str, object]]) -> dict[str, object]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _bad("duplicate key in header")
    return d


def decode_tensors(blob: bytes | memoryview) -> tuple[list[TensorEntry], dict[str, str]]:
    """Parse canonical blob bytes into entries (in name order) and metadata.

    Raises :class:`BlobError` for anything that is not exactly ``encode_tensors(...)`` output.
    The entries' ``data`` are zero-copy ``memoryview`` slices of ``blob``.
    """
    mv = memoryview(blob).cast("B")
    if len(mv) < 8:
        raise _bad("shorter than 8 bytes")
    (hlen,) = struct.unpack_from("<Q", mv, 0)
    if hlen > HEADER_BYTES_MAX or hlen > len(mv) - 8 or hlen % 8:
        raise _bad(f"header length {hlen} invalid for a {len(mv)}-byte blob")
    try:
        header = json.loads(bytes(mv[8 : 8 + hlen]).decode("ascii"), object_pairs_hook=_no_dupes)
    except BlobError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise _bad(f"header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise _bad("header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise _bad("__metadata__ must map str to str")
    if len(header) > TENSORS_MAX:
        raise _bad(f"more than {TENSORS_MAX} tensors")
    entries: list[TensorEntry] = []
    data_start = 8 + hlen
    for name in sorted(header):
        spec = header[name]
        if not (isinstance(spec, dict) and set(spec) == {"data_offsets", "dtype", "shape"}):
            raise _bad(f"tensor {name!r:.60}: fields must be data_offsets, dtype, shape")
        dtype, shape, offs = spec["dtype"], spec["shape"], spec["data_offsets"]
        if dtype not in DTYPE_BYTES or not _NAME.match(name):
            raise _bad(f"tensor {name!r:.60}: bad name or dtype {dtype!r:.20}")
        if not (isinstance(shape, list) and len(shape) <= NDIM_MAX):
            raise _bad(f"tensor {name!r:.60}: bad shape")
        if not all(type(s) is int and 0 <= s < 2**40 for s in shape):
            raise _bad(f"tensor {name!r:.60}: bad shape")
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)):
            raise _bad(f"tensor {name!r:.60}: bad data_offsets")
        e = TensorEntry(name, dtype, tuple(shape), b"")
        a, b = offs
        if not 0 <= a <= b or b - a != e.nbytes or data_start + b > len(mv):
            raise _bad(f"tensor {name!r:.60}: data_offsets {offs} do not match shape {shape} and dtype {dtype}")
        entries.append(TensorEntry(name, dtype, tuple(shape), mv[data_start + a : data_start + b]))
    canonical = _header_bytes(entries, metadata)
    if canonical != bytes(mv[8 : 8 + hlen]):
        raise _bad("header not in canonical form (order, spacing, offsets or padding)")
    total = sum(e.nbytes for e in entries)
    if data_start + total != len(mv):
        raise _bad(f"{len(mv) - data_start - total} trailing bytes")
    return entries, dict(metadata or {})
