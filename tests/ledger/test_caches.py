"""The memos a driver injects (``ledger.Caches``) and the ones a record keeps: bounded, and invisible in results."""

import copy
import dataclasses
import hashlib
import pickle

from consensus import sample_committee, sample_training_clients
from ledger import Caches, ChainContext, KeyPair, genesis_committee, remembered, sha256
from ledger._caches import BLOB_MEMO_BYTES, BLOB_MEMO_ENTRIES, BLOB_MEMO_MIN
from ledger.testing import demo_genesis


def test_blob_digests_are_sha256_and_bounded_in_entries_and_bytes():
    c = Caches()
    small, big = b"x" * 10, bytes(range(256)) * (BLOB_MEMO_MIN // 256)
    assert c.sha256(small) == sha256(small) == hashlib.sha256(small).digest()
    assert c.sha256(big) == c.sha256(bytes(big)) == hashlib.sha256(big).digest()
    assert c.sha256(bytearray(big)) == hashlib.sha256(big).digest()  # (not remembered: not bytes)
    assert len(c._blob_digests) == 1
    for i in range(BLOB_MEMO_ENTRIES + 10):
        c.sha256(i.to_bytes(4, "big") * (BLOB_MEMO_MIN // 4))
    assert len(c._blob_digests) == BLOB_MEMO_ENTRIES
    assert c._blob_bytes == sum(len(b) for b in c._blob_digests)
    huge = b"\x01" * (BLOB_MEMO_BYTES // 2 + 1)
    c.sha256(huge)
    c.sha256(b"\x02" * len(huge))
    assert c._blob_bytes <= BLOB_MEMO_BYTES and c._blob_bytes == sum(len(b) for b in c._blob_digests)



def test_the_blob_memo_holds_as_many_bytes_as_the_driver_sets():
    """The network runtime sizes it to a few of its model (``blob_bytes``): blobs hashed ahead in worker threads stay
    remembered until the loop reads them, where the default's 64 MiB holds one 45 MB update at a time."""
    blobs = [bytes([i]) * (3 * BLOB_MEMO_MIN) for i in range(5)]
    small = Caches(blob_bytes=2 * len(blobs[0]))
    roomy = Caches(blob_bytes=5 * len(blobs[0]))
    for b in blobs:
        small.sha256(b)
        roomy.sha256(b)
    assert list(small._blob_digests) == blobs[3:] and list(roomy._blob_digests) == blobs
    assert all(roomy.sha256(b) == hashlib.sha256(b).digest() for b in blobs)
    for bad in (-1, 1.5, True, "64"):
        try:
            Caches(blob_bytes=bad)
        except ValueError:
            continue
        raise AssertionError(f"blob_bytes={bad!r} accepted")


def test_a_memo_is_per_caches_and_per_function():
    calls = []

    def square(x: int) -> int:
        calls.append(x)
        return x * x

    a, b = Caches(), Caches()
    assert a.memo(square, 2)(3) == a.memo(square, 2)(3) == 9
    assert b.memo(square, 2)(3) == 9
    assert calls == [3, 3]


def test_samples_are_the_same_with_and_without_caches():
    ids = tuple(KeyPair.derive(f"m{i}").peer_id for i in range(40))
    c = Caches()
    for rule in ("rank", "draw"):
        for h in (1, 2, 2):
            assert sample_training_clients(ids, ids[:4], b"s" * 32, h, 9, rule=rule, caches=c) == \
                sample_training_clients(ids, ids[:4], b"s" * 32, h, 9, rule=rule)
        assert sample_committee(ids, b"t" * 40, 7, rule=rule, caches=c) == sample_committee(ids, b"t" * 40, 7, rule=rule)


def test_a_chain_context_has_its_own_caches_unless_given_some():
    g = demo_genesis([KeyPair.derive(f"g{i}") for i in range(5)])
    shared = Caches()
    assert ChainContext(g, caches=shared).caches is shared
    assert ChainContext(g).caches is not ChainContext(g).caches


def test_a_record_keeps_its_memos_out_of_its_fields():
    g = demo_genesis([KeyPair.derive(f"g{i}") for i in range(5)])
    first = g.encode()
    assert g.encode() is first and g.hash() is g.hash()
    assert genesis_committee(g) is genesis_committee(g)
    # equality, hashing, copies and replace see the fields only
    for other in (copy.copy(g), dataclasses.replace(g)):
        assert other == g
        assert other.encode() == first and other.hash() == g.hash()
    m = g.members[0]
    m.encode()
    back = pickle.loads(pickle.dumps(m))
    assert not hasattr(back, "_encoded") and back == m and hash(back) == hash(m) and back.encode() == m.encode()
    assert dataclasses.replace(m, name="other").encode() != m.encode()


def test_remembered_runs_each_time_for_an_object_without_the_slot():
    calls = []

    @remembered
    def size(x: tuple[int, ...]) -> int:
        calls.append(x)
        return len(x)

    assert size((1, 2)) == size((1, 2)) == 2
    assert len(calls) == 2
