"""Merkle tree over a block's update commitments (RFC 6962 / Certificate Transparency shape).

``MTH({})      = SHA-256()``
``MTH({d0})    = SHA-256(0x00 ‖ d0)``
``MTH(D[0:n])  = SHA-256(0x01 ‖ MTH(D[0:k]) ‖ MTH(D[k:n]))`` with ``k`` the largest power of two ``< n``.

Leaves and inner nodes have different prefixes, so a leaf can never pass for a node (second-preimage
safety). An inclusion proof is the RFC 6962 audit path; :func:`verify_inclusion` follows RFC 9162
§2.1.3.2 and needs only the root, the leaf, its index and the tree size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["inclusion_path", "leaf_hash", "merkle_root", "verify_inclusion"]

PATH_LEN_MAX = 64


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly less than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _root_of_hashes(hashes: Sequence[bytes]) -> bytes:
    n = len(hashes)
    if n == 1:
        return hashes[0]
    k = _split(n)
    return _node(_root_of_hashes(hashes[:k]), _root_of_hashes(hashes[k:]))


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """Root of the tree over ``leaves`` (raw leaf bytes, in order)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    return _root_of_hashes([leaf_hash(x) for x in leaves])


def inclusion_path(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of ``leaves[index]`` (sibling hashes, bottom up)."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf index {index} out of range for {len(leaves)} leaves")
    hashes = [leaf_hash(x) for x in leaves]
    path: list[bytes] = []

    def walk(lo: int, hi: int) -> None:
        if hi - lo == 1:
            return
        k = _split(hi - lo)
        if index < lo + k:
            walk(lo, lo + k)
            path.append(_root_of_hashes(hashes[lo + k : hi]))
        else:
            walk(lo + k, hi)
            path.append(_root_of_hashes(hashes[lo : lo + k]))

    walk(0, len(hashes))
    return path


def verify_inclusion(root: bytes, leaf: bytes, index: int, tree_size: int, path: Sequence[bytes]) -> bool:
    """True iff ``leaf`` is at ``index`` of a tree of ``tree_size`` leaves with ``root`` (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < tree_size or len(path) > PATH_LEN_MAX:
        return False
    if any(type(p) is not bytes or len(p) != 32 for p in path):
        return False
    fn, sn = index, tree_size - 1
    r = leaf_hash(leaf)
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root
