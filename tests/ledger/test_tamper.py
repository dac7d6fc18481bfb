"""Tamper evidence: every single-byte flip of a stored block or blob is detected and its height named."""

import sqlite3

import pytest

from ledger import audit_chain
from ledger.store import create_ledger, open_ledger
from ledger.testing import LedgerDemo


def _chain(n=3, updates=3):
    demo = LedgerDemo(members=6, committee_size=4, updates_per_block=updates, floats_per_update=8, seed=1)
    blocks = [demo.next_block() for _ in range(n)]
    return demo.genesis, blocks


def test_every_single_byte_flip_of_a_block_is_detected_at_its_height():
    genesis, blocks = _chain()
    raws = [b.encode() for b, _ in blocks]
    assert audit_chain(genesis, list(enumerate(raws, 1))).ok
    target = 2
    raw = raws[target - 1]
    reasons = set()
    for i in range(len(raw)):
        for mask in (0x01, 0x80):
            bad = bytearray(raw)
            bad[i] ^= mask
            rows = list(enumerate(raws, 1))
            rows[target - 1] = (target, bytes(bad))
            rep = audit_chain(genesis, rows)
            assert not rep.ok, f"flip of bit {mask:#x} at byte {i} went undetected"
            assert rep.first_bad_height == target, (i, rep.line())
            assert rep.height == target - 1
            reasons.add(rep.reason.split(":")[0][:40])
    assert len(raw) > 500 and len(reasons) >= 4  # many different checks fire, not one catch-all


def _stored(tmp_path):
    genesis, blocks = _chain(4)
    store, blobs = create_ledger(tmp_path / "L", genesis)
    for b, bl in blocks:
        for d in bl.values():
            blobs.put(d)
        store.append(b)
    store.close()
    return blocks


def _audit(path):
    s, b = open_ledger(path, readonly=True, check_index=False)
    with s:
        return audit_chain(s.genesis(), s.iter_rows(), blobs=b)


@pytest.mark.parametrize("offset", [0, 17, 300, -70, -1])
def test_flip_inside_the_sqlite_store_is_named(tmp_path, offset):
    _stored(tmp_path)
    db = tmp_path / "L" / "chain.sqlite"
    c = sqlite3.connect(db)
    (data,) = c.execute("SELECT data FROM blocks WHERE height = 3").fetchone()
    bad = bytearray(data)
    bad[offset] ^= 0x04
    c.execute("UPDATE blocks SET data = ? WHERE height = 3", (bytes(bad),))
    c.commit()
    c.close()
    rep = _audit(tmp_path / "L")
    assert not rep.ok and rep.first_bad_height == 3 and rep.height == 2, rep.line()


def test_every_single_byte_flip_of_a_blob_is_named(tmp_path):
    blocks = _stored(tmp_path)
    block, blobs = blocks[1]  # height 2
    digest = block.payload.updates[1].digest
    path = tmp_path / "L" / "blobs" / digest.hex()[:2] / digest.hex()[2:]
    original = path.read_bytes()
    for i in range(len(original)):
        bad = bytearray(original)
        bad[i] ^= 0x10
        path.write_bytes(bytes(bad))
        rep = _audit(tmp_path / "L")
        assert not rep.ok and rep.first_bad_height == 2, (i, rep.line())
        assert digest.hex()[:16] in rep.reason and "does not match its digest" in rep.reason
    path.write_bytes(original)
    assert _audit(tmp_path / "L").ok
    path.unlink()
    rep = _audit(tmp_path / "L")
    assert not rep.ok and rep.first_bad_height == 2 and "missing" in rep.reason


def test_deleted_and_swapped_blocks_are_named(tmp_path):
    _stored(tmp_path)
    db = tmp_path / "L" / "chain.sqlite"
    c = sqlite3.connect(db)
    rows = dict(c.execute("SELECT height, data FROM blocks"))
    c.execute("UPDATE blocks SET data = ? WHERE height = 2", (rows[3],))
    c.execute("UPDATE blocks SET data = ? WHERE height = 3", (rows[2],))
    c.commit()
    rep = _audit(tmp_path / "L")
    assert not rep.ok and rep.first_bad_height == 2, rep.line()
    c.execute("UPDATE blocks SET data = ? WHERE height = 2", (rows[2],))
    c.execute("UPDATE blocks SET data = ? WHERE height = 3", (rows[3],))
    c.execute("DELETE FROM blocks WHERE height = 2")
    c.commit()
    c.close()
    rep = _audit(tmp_path / "L")
    assert not rep.ok and rep.first_bad_height == 2 and "missing" in rep.reason, rep.line()


def test_every_flip_of_the_stored_genesis_makes_the_ledger_invalid_at_height_0(tmp_path):
    """The stored genesis is part of the ledger: any flipped bit in it (or in its recorded hash) is a
    CorruptStoreError at height 0 (``ledger verify`` exit 1), never bad input, and never accepted."""
    from ledger.store import CorruptStoreError

    _stored(tmp_path)
    db = tmp_path / "L" / "chain.sqlite"
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA synchronous=OFF")  # a test of the reader: the writes need not be durable
    meta = dict(c.execute("SELECT key, value FROM meta"))
    reasons = set()
    for key in ("genesis", "genesis_hash"):
        original = meta[key]
        for i in range(0, len(original), 3):
            bad = bytearray(original)
            bad[i] ^= 0x10
            c.execute("UPDATE meta SET value = ? WHERE key = ?", (bytes(bad), key))
            with pytest.raises(CorruptStoreError) as caught:
                open_ledger(tmp_path / "L", readonly=True, check_index=False)
            assert caught.value.height == 0 and caught.value.verdict().startswith("FAIL at height 0: the stored genesis")
            reasons.add(caught.value.reason.split(":")[0])
        c.execute("UPDATE meta SET value = ? WHERE key = ?", (original, key))
    c.close()
    assert reasons == {"the stored genesis is corrupt", "the stored genesis hash does not match the stored genesis"}
    assert _audit(tmp_path / "L").ok
