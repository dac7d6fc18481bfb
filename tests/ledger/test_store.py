"""SQLite block store, file blob store and canonical tensor blobs."""

import sqlite3
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import (
    BlobError,
    BlockStore,
    MemoryBlockStore,
    StoreError,
    TensorEntry,
    audit_chain,
    decode_tensors,
    encode_tensors,
    sha256,
)
from ledger.store import SCHEMA_VERSION, CorruptStoreError, FileBlobStore, MemoryBlobStore, SqliteBlockStore, create_ledger, open_ledger
from ledger.testing import LedgerDemo


def _demo(n=5):
    demo = LedgerDemo(members=6, committee_size=4, updates_per_block=3, floats_per_update=16)
    return demo, [demo.next_block() for _ in range(n)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_block_store_contract(tmp_path, kind):
    demo, blocks = _demo()
    store = MemoryBlockStore(demo.genesis) if kind == "memory" else SqliteBlockStore.create(tmp_path / "c.sqlite", demo.genesis)
    assert isinstance(store, BlockStore)
    assert store.height() == 0 and store.head_hash() == demo.genesis.hash()
    for b, _ in blocks:
        store.append(b)
    assert store.height() == 5 and store.head_hash() == blocks[-1][0].hash()
    assert store.get(3) == blocks[2][0]
    assert [h for h, _ in store.iter_raw(2)] == [2, 3, 4, 5]
    with pytest.raises(StoreError, match="cannot append height 3"):
        store.append(blocks[2][0])  # already stored: wrong height
    demo2, other = _demo()
    with pytest.raises(StoreError):
        store.get(99)
    store.close()


def test_sqlite_append_many_is_one_transaction_all_or_nothing(tmp_path):
    demo, blocks = _demo(6)
    path = tmp_path / "c.sqlite"
    with SqliteBlockStore.create(path, demo.genesis) as s:
        s.append_many([b for b, _ in blocks[:3]])
        assert s.height() == 3 and s.head_hash() == blocks[2][0].hash()
        # heights 4, 6: the gap is refused before anything is written
        with pytest.raises(StoreError, match="cannot append height 6"):
            s.append_many([blocks[3][0], blocks[5][0]])
        assert s.height() == 3
        s.append_many([])
        s.append_many([b for b, _ in blocks[3:]])
    with SqliteBlockStore.open(path) as s:
        assert s.height() == 6 and [s.get(h) for h in range(1, 7)] == [b for b, _ in blocks]


def test_sqlite_pragmas_schema_and_reopen(tmp_path):
    demo, blocks = _demo()
    path = tmp_path / "c.sqlite"
    with SqliteBlockStore.create(path, demo.genesis) as s:
        for b, _ in blocks:
            s.append(b)
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    conn = sqlite3.connect(path)
    assert dict(conn.execute("SELECT key, value FROM meta"))["schema_version"] == str(SCHEMA_VERSION).encode()
    conn.close()
    with SqliteBlockStore.open(path) as s:
        assert s.height() == 5 and s.genesis() == demo.genesis
        assert audit_chain(s.genesis(), s.iter_rows()).ok
    with pytest.raises(StoreError, match="already exists"):
        SqliteBlockStore.create(path, demo.genesis)


def test_sqlite_readonly_never_writes(tmp_path):
    demo, blocks = _demo(2)
    path = tmp_path / "c.sqlite"
    with SqliteBlockStore.create(path, demo.genesis) as s:
        s.append(blocks[0][0])
    with SqliteBlockStore.open(path, readonly=True) as s:
        with pytest.raises(StoreError, match="read-only"):
            s.append(blocks[1][0])
    with pytest.raises(StoreError, match="no such ledger file"):
        SqliteBlockStore.open(tmp_path / "absent.sqlite", readonly=True)
    assert not (tmp_path / "absent.sqlite").exists()


def test_sqlite_rejects_foreign_files_and_versions(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not a database")
    with pytest.raises(StoreError, match="not a concilium ledger"):
        SqliteBlockStore.open(junk)
    other = tmp_path / "other.sqlite"
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not a concilium ledger"):
        SqliteBlockStore.open(other)
    demo, _ = _demo(0)
    p = tmp_path / "v.sqlite"
    SqliteBlockStore.create(p, demo.genesis).close()
    c = sqlite3.connect(p)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (b"99",))
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="unsupported schema version"):
        SqliteBlockStore.open(p)


def test_index_tampering_is_caught_on_open_and_named_by_audit(tmp_path):
    demo, blocks = _demo()
    store, blobs = create_ledger(tmp_path / "L", demo.genesis)
    for b, bl in blocks:
        for d in bl.values():
            blobs.put(d)
        store.append(b)
    store.close()
    c = sqlite3.connect(tmp_path / "L" / "chain.sqlite")
    c.execute("UPDATE blocks SET hash = ? WHERE height = 3", (bytes(32),))
    c.commit()
    c.close()
    # height 4's prev_hash no longer links to height 3's hash index: the open names the row at fault (3),
    # the height the audit names
    with pytest.raises(CorruptStoreError, match="height 3: the store's hash index differs") as caught:
        open_ledger(tmp_path / "L")
    assert caught.value.height == 3
    s, b = open_ledger(tmp_path / "L", readonly=True, check_index=False)
    rep = audit_chain(s.genesis(), s.iter_rows(), blobs=b)
    s.close()
    assert not rep.ok and rep.first_bad_height == 3 and "index" in rep.reason
    assert rep.reason == caught.value.reason


def test_file_blob_store(tmp_path):
    bs = FileBlobStore(tmp_path / "blobs")
    d = bs.put(b"hello")
    assert d == sha256(b"hello") and bs.has(d) and bs.get(d) == b"hello"
    assert bs.put(b"hello") == d  # idempotent
    p = tmp_path / "blobs" / d.hex()[:2] / d.hex()[2:]
    raw = bytearray(p.read_bytes())
    raw[0] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(BlobError, match="does not match its digest"):
        bs.get(d)
    with pytest.raises(BlobError, match="missing"):
        bs.get(sha256(b"nope"))
    with pytest.raises(BlobError, match="32 bytes"):
        bs.get(b"short")
    assert not list((tmp_path / "blobs").rglob(".tmp-*"))
    ro = FileBlobStore(tmp_path / "other", readonly=True)
    assert not (tmp_path / "other").exists()
    with pytest.raises(BlobError, match="read-only"):
        ro.put(b"x")
    mem = MemoryBlobStore()
    assert mem.get(mem.put(b"abc")) == b"abc"
    kept, gone = mem.put(b"kept"), mem.put(b"gone")
    assert mem.retain({kept, sha256(b"never stored")}) == 2  # "abc" and "gone"
    assert mem.get(kept) == b"kept" and not mem.has(gone) and not mem.has(sha256(b"abc"))
    with pytest.raises(BlobError, match="missing"):
        mem.get(gone)
    assert mem.retain(()) == 1 and not mem.has(kept)


def test_file_blob_store_put_many(tmp_path):
    import os

    bs = FileBlobStore(tmp_path / "blobs")
    blobs = [b"a" * 10, b"b" * 20, b"a" * 10, b"c"]
    # a temporary file left by a crashed process that had this pid, under the name put_many would pick
    stale_digest = sha256(b"b" * 20).hex()
    (tmp_path / "blobs" / stale_digest[:2]).mkdir()
    stale = tmp_path / "blobs" / stale_digest[:2] / f".tmp-{stale_digest[2:18]}-{os.getpid()}"
    stale.write_bytes(b"torn")
    got = bs.put_many(blobs)
    assert got == [sha256(b) for b in blobs]  # one digest per input, duplicates included
    for b, d in zip(blobs, got):
        assert bs.get(d) == b
    assert stale.read_bytes() == b"torn"  # not ours to remove, never renamed into place
    assert sorted(p.name for p in (tmp_path / "blobs").rglob(".tmp-*")) == [stale.name]
    assert bs.put_many(blobs) == got  # idempotent
    with pytest.raises(BlobError, match="read-only"):
        FileBlobStore(tmp_path / "blobs", readonly=True).put_many([b"x"])


# --- canonical tensor blobs (safetensors layout) --------------------------------------------


def _entries(rng):
    a = rng.standard_normal((3, 4)).astype("<f4")
    b = rng.integers(-5, 5, size=(7,)).astype("<i8")
    return [TensorEntry("w.weight", "F32", (3, 4), a.tobytes()), TensorEntry("a.bias", "I64", (7,), b.tobytes())], a, b


def test_tensor_blob_round_trip_and_layout():
    entries, a, b = _entries(np.random.default_rng(0))
    blob = encode_tensors(entries, {"fl_round": "3"})
    assert blob == encode_tensors(list(reversed(entries)), {"fl_round": "3"})  # order-independent
    (hlen,) = struct.unpack_from("<Q", blob)
    assert hlen % 8 == 0
    out, meta = decode_tensors(blob)
    assert meta == {"fl_round": "3"}
    assert [e.name for e in out] == ["a.bias", "w.weight"]
    np.testing.assert_array_equal(np.frombuffer(out[1].data, "<f4").reshape(3, 4), a)
    np.testing.assert_array_equal(np.frombuffer(out[0].data, "<i8"), b)


def test_tensor_blob_is_readable_as_safetensors_layout():
    import json

    entries, a, _ = _entries(np.random.default_rng(1))
    blob = encode_tensors(entries)
    (hlen,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8 : 8 + hlen])
    s, e = header["w.weight"]["data_offsets"]
    np.testing.assert_array_equal(np.frombuffer(blob[8 + hlen + s : 8 + hlen + e], "<f4").reshape(3, 4), a)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:-1],
        lambda b: b + b"\x00",
        lambda b: b[:4],
        lambda b: struct.pack("<Q", 10**9) + b[8:],
        lambda b: b[:8] + b[8:].replace(b'"dtype":"F32"', b'"dtype":"F64"', 1),
        lambda b: b[:8] + b[8:].replace(b",", b", ", 1)[: len(b) - 8],
    ],
)
def test_tensor_blob_rejects_non_canonical(mutate):
    entries, _, _ = _entries(np.random.default_rng(2))
    with pytest.raises(BlobError):
        decode_tensors(mutate(encode_tensors(entries)))


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_tensor_blob_random_bytes_raise_only_blob_error(data):
    try:
        decode_tensors(data)
    except BlobError:
        pass


# --- the WAL and the file alone -------------------------------------------------------------


def _journal_bytes(path):
    """SQLite header bytes 18-19: 1,1 in rollback mode, 2,2 in WAL mode."""
    return path.read_bytes()[18:20]


def test_clean_close_leaves_the_whole_ledger_in_the_file(tmp_path):
    import os

    demo, blocks = _demo(3)
    path = tmp_path / "c.sqlite"
    wal, shm = (tmp_path / f"c.sqlite{s}" for s in ("-wal", "-shm"))
    s = SqliteBlockStore.create(path, demo.genesis)
    s.append(blocks[0][0])
    assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal" and wal.exists()
    s.close()
    s.close()  # idempotent
    assert _journal_bytes(path) == b"\x01\x01" and not wal.exists() and not shm.exists()
    with SqliteBlockStore.open(path) as s:  # a writer switches back to WAL
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal" and s.height() == 1
        s.append(blocks[1][0])
    assert _journal_bytes(path) == b"\x01\x01" and not wal.exists()
    with SqliteBlockStore.open(path, readonly=True) as r:
        assert r.height() == 2 and r.warning is None
    assert sorted(os.listdir(tmp_path)) == ["c.sqlite"]


def test_every_batch_is_checkpointed_into_the_file(tmp_path):
    """``chain.sqlite`` copied alone from a live writer holds every batch appended so far (without the
    checkpoint its blocks would all be in the WAL, which the copy leaves behind), and says it may miss some."""
    import shutil

    demo, blocks = _demo(6)
    store, _ = create_ledger(tmp_path / "L", demo.genesis)
    path = tmp_path / "L" / "chain.sqlite"
    with store:
        store.append_many([b for b, _ in blocks[:2]])
        store.append(blocks[2][0])
        store.append_many([b for b, _ in blocks[3:]])
        assert (tmp_path / "L" / "chain.sqlite-wal").exists()
        shutil.copyfile(path, tmp_path / "copy.sqlite")
    with SqliteBlockStore.open(tmp_path / "copy.sqlite", readonly=True) as s:
        assert s.height() == 6 and s.head_hash() == blocks[-1][0].hash()
        assert s.warning == (
            "copy.sqlite is in WAL mode with no copy.sqlite-wal beside it: blocks after the last checkpoint may be missing"
        )
        assert audit_chain(s.genesis(), s.iter_rows()).ok


def test_close_while_another_connection_reads_keeps_wal_mode_and_every_block(tmp_path):
    import time

    demo, blocks = _demo(2)
    path = tmp_path / "c.sqlite"
    w = SqliteBlockStore.create(path, demo.genesis)
    w.append(blocks[0][0])
    reader = SqliteBlockStore.open(path, readonly=True)
    assert reader.height() == 1
    t = time.perf_counter()
    w.close()  # cannot switch to rollback mode while the reader holds the file; does not wait for it either
    assert time.perf_counter() - t < 4  # SQLite's busy timeout here is 5 s
    assert _journal_bytes(path) == b"\x02\x02"
    reader.close()
    with SqliteBlockStore.open(path) as w:
        assert w.height() == 1
        w.append(blocks[1][0])
    assert _journal_bytes(path) == b"\x01\x01"
    with SqliteBlockStore.open(path, readonly=True) as r:
        assert r.height() == 2 and r.get(2) == blocks[1][0]


def test_a_tampered_store_is_corrupt_and_a_foreign_file_is_not_a_ledger(tmp_path):
    """The line between the two errors: after the file is identified as ours, everything is corruption."""
    demo, blocks = _demo(2)
    path = tmp_path / "c.sqlite"
    with SqliteBlockStore.create(path, demo.genesis) as s:
        s.append_many([b for b, _ in blocks])
    c = sqlite3.connect(path)
    c.execute("UPDATE blocks SET prev_hash = ? WHERE height = 2", (bytes(32),))
    c.commit()
    c.close()
    with pytest.raises(CorruptStoreError) as caught:
        SqliteBlockStore.open(path)
    assert caught.value.height == 2 and caught.value.verdict() == (
        "FAIL at height 2: the store's prev_hash index differs from the block's prev_hash (valid prefix: 1 blocks)"
    )
    with SqliteBlockStore.open(path, readonly=True, check_index=False) as s:  # audits name it themselves
        rep = audit_chain(s.genesis(), s.iter_rows())
        assert (rep.first_bad_height, rep.height, rep.reason) == (2, 1, caught.value.reason)
        with pytest.raises(CorruptStoreError, match="height 2: the store's prev_hash index") as again:
            list(s.iter_checked())
        assert again.value.height == 2
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + bytes(84))
    with pytest.raises(StoreError, match="not a concilium ledger") as foreign:
        SqliteBlockStore.open(junk, readonly=True)
    assert not isinstance(foreign.value, CorruptStoreError)
