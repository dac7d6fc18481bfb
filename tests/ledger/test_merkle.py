"""RFC 6962 Merkle tree: known values, every inclusion proof verifies, every alteration fails."""

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import inclusion_path, merkle_root, verify_inclusion


def H(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def test_known_values():
    assert merkle_root([]) == H(b"")
    assert merkle_root([b"a"]) == H(b"\x00a")
    la, lb, lc = H(b"\x00a"), H(b"\x00b"), H(b"\x00c")
    assert merkle_root([b"a", b"b"]) == H(b"\x01" + la + lb)
    # 3 leaves: split at 2 (largest power of two < 3)
    assert merkle_root([b"a", b"b", b"c"]) == H(b"\x01" + H(b"\x01" + la + lb) + lc)


def test_every_proof_verifies_and_alterations_fail():
    for n in range(1, 40):
        leaves = [bytes([i]) * (i % 5 + 1) for i in range(n)]
        root = merkle_root(leaves)
        for i in range(n):
            path = inclusion_path(leaves, i)
            assert verify_inclusion(root, leaves[i], i, n, path)
            assert not verify_inclusion(root, leaves[i] + b"x", i, n, path)
            if n > 1:
                assert not verify_inclusion(root, leaves[i], (i + 1) % n, n, path) or leaves[i] == leaves[(i + 1) % n]
            if path:
                bad = list(path)
                bad[0] = bytes(32)
                assert not verify_inclusion(root, leaves[i], i, n, bad)
                assert not verify_inclusion(root, leaves[i], i, n, path[:-1])


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=70), st.data())
@settings(max_examples=200, deadline=None)
def test_property_inclusion(leaves, data):
    i = data.draw(st.integers(0, len(leaves) - 1))
    root = merkle_root(leaves)
    path = inclusion_path(leaves, i)
    assert verify_inclusion(root, leaves[i], i, len(leaves), path)
    other = data.draw(st.binary(max_size=8))
    if other != leaves[i]:
        assert not verify_inclusion(root, other, i, len(leaves), path)


def test_a_leaf_cannot_pass_for_an_inner_node():
    leaves = [b"a", b"b", b"c", b"d"]
    root = merkle_root(leaves)
    inner = H(b"\x01" + H(b"\x00a") + H(b"\x00b"))
    # presenting the concatenation of two child hashes as a "leaf" must not verify at the parent position
    assert not verify_inclusion(root, inner, 0, 2, [H(b"\x01" + H(b"\x00c") + H(b"\x00d"))])
