"""Model and update vectors as canonical tensor blobs (ledger's safetensors layout).

A flat float32 vector ``v`` of length ``d`` is the blob with one tensor ``"vector"`` of dtype F32 and
shape ``(d,)``. Its digest (SHA-256 of the blob bytes) is what the ledger commits to. Decoding a peer's
blob is strict: canonical layout, exactly one F32 tensor of the expected length, every value finite
(a NaN/Inf update is rejected before it reaches scoring or aggregation).
"""

from __future__ import annotations

import functools

import numpy as np

from ledger import BlobError, TensorEntry, decode_tensors, encode_tensors, sha256
from learning._errors import InvalidUpdateError

__all__ = ["VECTOR_TENSOR", "blob_digest", "blob_to_vector", "vector_to_blob"]

VECTOR_TENSOR = "vector"


@functools.lru_cache(maxsize=64)
def _prefix(dim: int) -> bytes:
    """The canonical ``length ‖ header`` of a vector blob of ``dim`` floats: all of a vector blob but its data.

    Exactly what :func:`ledger.encode_tensors` writes for the one tensor (a vector blob's header depends on
    ``dim`` only), so the hot paths below can build and recognize blobs without JSON."""
    blob = encode_tensors([TensorEntry(VECTOR_TENSOR, "F32", (dim,), bytes(4 * dim))])
    return blob[: len(blob) - 4 * dim]


def vector_to_blob(vector: np.ndarray) -> bytes:
    """Canonical blob bytes of a 1-D float32 vector (converted to little-endian float32)."""
    v = np.ascontiguousarray(vector, dtype="<f4")
    if v.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {v.shape}")
    return b"".join((_prefix(v.shape[0]), v.data))  # (one copy of the data, where `+ v.tobytes()` makes two)


def blob_digest(blob: bytes) -> bytes:
    return sha256(blob)


def blob_to_vector(blob: bytes, *, dim: int | None = None, what: str = "blob") -> np.ndarray:
    """The float32 vector in ``blob`` (a read-only view of the bytes); raises on anything else.

    Raises
    ------
    InvalidUpdateError
        Not a canonical vector blob, wrong length, or non-finite values.
    """
    if dim is not None and dim >= 0:
        prefix = _prefix(dim)
        if len(blob) == len(prefix) + 4 * dim and blob[: len(prefix)] == prefix:
            # byte-for-byte the canonical layout of a ``dim``-vector: exactly what the strict parse below accepts
            v = np.frombuffer(blob, dtype="<f4", offset=len(prefix))
            if not np.isfinite(v).all():
                raise InvalidUpdateError(f"{what}: contains NaN or Inf")
            return v
    try:
        entries, _ = decode_tensors(blob)
    except BlobError as e:
        raise InvalidUpdateError(f"{what}: {e}") from None
    if len(entries) != 1 or entries[0].name != VECTOR_TENSOR or entries[0].dtype != "F32" or len(entries[0].shape) != 1:
        raise InvalidUpdateError(f"{what}: expected one F32 tensor {VECTOR_TENSOR!r} of rank 1")
    if dim is not None and entries[0].shape[0] != dim:
        raise InvalidUpdateError(f"{what}: length {entries[0].shape[0]}, expected {dim}")
    v = np.frombuffer(entries[0].data, dtype="<f4")
    if not np.isfinite(v).all():
        raise InvalidUpdateError(f"{what}: contains NaN or Inf")
    return v
